"""Start Daphne as its ``daphne`` command does, handing a request's body to the app in pieces of a MiB.

Daphne hands a body over in pieces of 8 KiB, read in a loop on the thread
that runs every socket. Each read gives up the interpreter's lock and waits
to take it back; while the import thread holds it (a large world file
being checked), a 30 MB upload's 3,800 reads kept every other person's
socket waiting for seconds, so their turns ended late
(tests/storyteller/test_limits_load.py, sampled with py-spy). In pieces of
a MiB the same body is some thirty reads.

It also shortens the interpreter's switch interval from 5 ms to 1 ms
(``SWITCH_SECONDS``). A turn's thread gives up the lock at every database
statement and every hand-over between the event loop and the database
thread, and each time it wants the lock back while the import thread is
checking a file (pure Python that never gives it up of itself), it waits up
to one interval. A turn of some hundreds of such waits took 1.6-1.8 s on
this test's machine at 5 ms (7.2 s once in CI), 0.9 s at 2 ms and 0.5 s at
1 ms; 0.5 ms gained nothing more. The import meanwhile takes longer, because
the turns now get their share: the largest world file 7.8 s -> 13-16 s, the
largest bundle 31 s -> 32-40 s, both written in the background with a
progress page (docs/performance.md, "Uploads and other people's turns").

Run as ``python -m storyteller.serve`` with ``daphne``'s arguments.
"""

import sys

from daphne.cli import CommandLineInterface
from daphne.server import Server

BODY_PIECE = 1 << 20
SWITCH_SECONDS = 0.001


class _Server(Server):
    def __init__(self, *args, **kwargs):
        kwargs["request_buffer_size"] = BODY_PIECE
        super().__init__(*args, **kwargs)


class _CommandLine(CommandLineInterface):
    server_class = _Server


if __name__ == "__main__":
    sys.setswitchinterval(SWITCH_SECONDS)
    _CommandLine.entrypoint()
