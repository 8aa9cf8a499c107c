"""Start Daphne as its ``daphne`` command does, handing a request's body to the app in pieces of a MiB.

Daphne hands a body over in pieces of 8 KiB, read in a loop on the thread
that runs every socket. Each read gives up the interpreter's lock and waits
to take it back; while the import thread holds it (a large world file
being checked), a 30 MB upload's 3,800 reads kept every other person's
socket waiting for seconds, so their turns ended late
(tests/storyteller/test_limits_load.py, sampled with py-spy). In pieces of
a MiB the same body is some thirty reads.

Run as ``python -m storyteller.serve`` with ``daphne``'s arguments.
"""

from daphne.cli import CommandLineInterface
from daphne.server import Server

BODY_PIECE = 1 << 20


class _Server(Server):
    def __init__(self, *args, **kwargs):
        kwargs["request_buffer_size"] = BODY_PIECE
        super().__init__(*args, **kwargs)


class _CommandLine(CommandLineInterface):
    server_class = _Server


if __name__ == "__main__":
    _CommandLine.entrypoint()
