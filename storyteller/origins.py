"""The origin the app is served at, which every page that posts or opens the play socket must come from (issue 10).

Browsers share cookies across the ports of one host, so a page served from
``127.0.0.1:9999`` sends the person's session with its requests to
``127.0.0.1:8000``; only the Origin check stops it acting as them. The check
compares scheme, host and port with the origin the app is served at:

- ``STORYTELLER_ORIGIN`` when it is set (a proxy in front, another name);
- otherwise ``http://`` + a loopback name + the port the request arrived on,
  taken from the ASGI scope's ``server``, which Daphne fills from the
  listening socket itself. ``daphne -p 8123`` needs no other setting, and a
  Host header naming another port changes nothing.

Only where the server does not say (an in-process test communicator, a
Unix socket) does the port come from the Host header, which a browser sets
to the address it connected to. The websocket check (``OriginValidator``)
and the CSRF check (``CsrfViewMiddleware``) share ``served``.
"""

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.middleware import csrf

# The names ALLOWED_HOSTS admits: the app binds to loopback only.
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
DEFAULT_PORTS = {"http": 80, "https": 443}


def served(scheme, server, host=""):
    """Return the origins a page may come from, for a request over ``scheme`` that arrived at ``server``."""
    if settings.STORYTELLER_ORIGIN:
        return {settings.STORYTELLER_ORIGIN}
    scheme = "https" if scheme in ("https", "wss") else "http"
    port = server[1] if server and len(server) > 1 and server[1] else _port_of(host, scheme)
    if not port:
        return set()
    suffix = "" if port == DEFAULT_PORTS[scheme] else f":{port}"
    return {f"{scheme}://{name}{suffix}" for name in LOOPBACK}


def _port_of(host, scheme):
    try:
        return urlsplit(f"//{host}").port or DEFAULT_PORTS[scheme]
    except ValueError:
        return None


class OriginValidator:
    """Refuse a websocket unless its Origin is one the app is served at (scheme, host and port)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            headers = dict(scope.get("headers", []))
            origin = headers.get(b"origin", b"").decode("latin-1")
            if origin not in served(scope.get("scheme", "ws"), scope.get("server"),
                                    headers.get(b"host", b"").decode("latin-1")):
                return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


class CsrfViewMiddleware(csrf.CsrfViewMiddleware):
    """Django's CSRF protection, with the Origin compared to the origin the app is served at rather than to
    the Host header and CSRF_TRUSTED_ORIGINS (the websocket's rule, so the two can never disagree)."""

    def _origin_verified(self, request):
        server = (request.META.get("SERVER_NAME"), int(request.META.get("SERVER_PORT") or 0))
        return request.META["HTTP_ORIGIN"] in served(request.scheme, server, request.get_host())

    def process_view(self, request, callback, callback_args, callback_kwargs):
        # A form's token is in its body: checking it parses the whole body, and middleware runs on the one
        # thread every socket's database work shares. An upload view runs the check on a thread of its own
        # (campaigns.importing.upload_view).
        if getattr(callback, "csrf_read_apart", False) and request.content_type == "multipart/form-data":
            request.csrf_deferred = True
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)
