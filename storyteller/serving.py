"""Where the web server listens, and the refusal to listen beyond this machine without an origin (issue 30).

Storyteller binds to loopback. A table across a network runs behind a reverse
proxy with TLS, and ``STORYTELLER_ORIGIN`` names the address players open:
the CSRF and websocket origin checks, ALLOWED_HOSTS and the links the app
hands out (invitations, sign-in) all follow it. A server bound to another
address without it would answer on the network with checks made for
loopback, so it does not start: ``refusal`` reads Daphne's or runserver's own
arguments (settings import before either binds) and says what to set.
"""

import ipaddress

EXIT_CODE = 78  # EX_CONFIG: a configuration error, not a crash
REFUSAL = ("Storyteller will not listen on {address} without STORYTELLER_ORIGIN: anyone who can reach that address "
           "would get pages and sockets whose origin checks were made for this machine alone. Set "
           "STORYTELLER_ORIGIN to the https:// address your players open (the reverse proxy's, see the README's "
           "\"Playing with friends\"), or bind to 127.0.0.1.")


def loopback(host):
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine alone."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # another name: it resolves to who knows what


def addresses(argv):
    """Return the host addresses a ``daphne`` (or ``python -m storyteller.serve``) or ``manage.py runserver`` command line binds to ([] for others)."""
    program = argv[0].replace("\\", "/") if argv else ""
    if program.rsplit("/", 1)[-1] == "daphne" or program.endswith(("daphne/__main__.py", "storyteller/serve.py")):
        return _daphne(argv[1:])
    if len(argv) > 1 and argv[1] == "runserver":
        return _runserver(argv[2:])
    return []


def _daphne(args):
    found = []
    for index, arg in enumerate(args):
        value = args[index + 1] if index + 1 < len(args) else ""
        if arg in ("-b", "--bind"):
            found.append(value)
        elif arg.startswith("--bind="):
            found.append(arg.split("=", 1)[1])
        elif arg in ("-e", "--endpoint") and value.startswith(("tcp", "ssl")):
            interface = [part.split("=", 1)[1] for part in value.split(":") if part.startswith("interface=")]
            found.append(interface[0] if interface else "0.0.0.0")  # a twisted endpoint without one: every address
    return found


def _runserver(args):
    for arg in args:
        if not arg.startswith("-"):
            host = arg.rsplit(":", 1)[0] if ":" in arg and not arg.endswith("]") else ""
            return [host] if host and not host.isdigit() else []
    return []


def refusal(argv, origin):
    """Return the words refusing to start for ``argv`` (bound beyond loopback without ``origin``), or ""."""
    if origin:
        return ""
    wide = [address for address in addresses(argv) if not loopback(address)]
    return REFUSAL.format(address=", ".join(wide)) if wide else ""
