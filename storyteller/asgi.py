"""ASGI entry point: HTTP through Django, the play websocket through Channels.

Static files are served by Django's own handler so the app needs no separate
web server; websockets are checked for origin (scheme, host and port: see
``origins``), then for a signed-in user.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "storyteller.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry ready)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import SuspiciousFileOperation  # noqa: E402
from django.http import Http404  # noqa: E402
from django.urls import path  # noqa: E402

from .consumers import PlayConsumer  # noqa: E402
from .origins import OriginValidator  # noqa: E402


def _stop_twisted_parsing_forms():
    """Keep Daphne's web server from parsing form bodies that it never uses.

    Twisted parses every multipart POST in memory with the email package
    before Daphne hands the raw body to Django (twisted/twisted#5511): a
    50 MiB upload cost 600 MiB and seconds of the event loop, for any URL.
    Daphne reads only ``content``, never the ``args`` that parsing fills.
    Twisted sets the flag on each request from a constructor argument Daphne
    never passes, so the class answers False whatever is assigned.
    """
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # served by something other than Daphne
        return
    WebRequest._parsePOSTFormSubmission = property(lambda request: False, lambda request, value: None)


_stop_twisted_parsing_forms()

class StaticFilesHandler(ASGIStaticFilesHandler):
    """Django's static files, where a path that climbs out of the static folders (/static/../manage.py) is a 404:
    Django refuses it with SuspiciousFileOperation, which this handler answered with a 500."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousFileOperation as error:
            raise Http404("No such static file.") from error


class ResumingReplays:
    """Pick up, in this process's event loop, the replays a process that ended left playing (``replays``): once,
    at the first request after the app starts, as Daphne gives an app no startup of its own."""

    def __init__(self, app):
        self.app = app
        self.started = False

    async def __call__(self, scope, receive, send):
        if not self.started:
            self.started = True
            from . import replays

            await replays.resume_unfinished()
        return await self.app(scope, receive, send)


websocket_urlpatterns = [path("ws/play/<int:pk>/", PlayConsumer.as_asgi())]

application = ResumingReplays(ProtocolTypeRouter({
    "http": StaticFilesHandler(django_asgi_app),
    "websocket": OriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
}))
