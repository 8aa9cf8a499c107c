"""The play websocket: parse a message, start one turn, relay it. Nothing else.

Messages come from htmx's ws extension as JSON form values; everything sent
back is an HTML fragment swapped out-of-band by id, rendered from the same
templates the pages use. Each streamed chunk is escaped on its own.
"""

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string
from django.utils.html import format_html

from campaigns import lineage
from campaigns.forms import ActionForm
from campaigns.models import Campaign

from . import turns, warming
from .context import Action
from .views import play_body_context

CHUNK_FRAGMENT = '<span id="pending-text" hx-swap-oob="beforeend">{}</span>'
NOTICE_FRAGMENT = '<div id="turn-notice" class="notice" role="status" hx-swap-oob="true">{}</div>'


class PlayConsumer(AsyncJsonWebsocketConsumer):
    turn = None
    group = None
    closed = False

    async def connect(self):
        user = self.scope["user"]
        self.campaign_id = self.scope["url_route"]["kwargs"]["pk"]
        if not user.is_authenticated or not await _owns(user, self.campaign_id):
            await self.close(code=4403)
            return
        self.tab = parse_qs(self.scope.get("query_string", b"").decode()).get("tab", [""])[0]
        self.group = f"campaign-{self.campaign_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        warming.start(self.campaign_id)  # the first turn after a start finds the campaign's indexes hot

    async def disconnect(self, code):
        self.closed = True
        if self.turn is not None:
            self.turn.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        kind = content.get("action", "turn")
        if kind == "stop":
            if self._busy():
                self.turn.cancel()
            return
        if self._busy():
            await self._send_body(error="A reply is still being written. Wait for it, or press Stop.")
            return
        if kind not in ("turn", "retry"):
            await self._send_body(error=f"Unknown request {kind!r}; reload the page.")
            return
        action = None
        if kind == "turn":
            form = ActionForm(content)
            if not form.is_valid():
                await self._send_body(error=" ".join(m for ms in form.errors.values() for m in ms))
                return
            action = Action(**form.cleaned_data)
        self.turn = asyncio.create_task(self._play(action, retry=kind == "retry"))

    async def _play(self, action, retry):
        await self.send(text_data=await _render_start(self.campaign_id, action, retry))
        try:
            result = await turns.play_turn(self.campaign_id, action, self._relay, retry=retry, notify=self._notify)
        except turns.TurnFailed as error:
            await self._send_body(error=str(error))
            return
        except asyncio.CancelledError:
            if not self.closed:
                await self._send_body(notice="Stopped. Nothing was saved.")
            raise
        await self._send_body(notice=result.notice, clear_form=True)
        await self.channel_layer.group_send(self.group, {"type": "story.changed", "sender": self.channel_name})

    async def _relay(self, text):
        await self.send(text_data=format_html(CHUNK_FRAGMENT, text))

    async def _notify(self, message):
        await self.send(text_data=format_html(NOTICE_FRAGMENT, message))

    async def story_changed(self, event):
        """Redraw after another tab (or a page action) moved the story."""
        own = event.get("sender") == self.channel_name or (self.tab and event.get("tab") == self.tab)
        if not own and not self._busy():
            await self._send_body()

    def _busy(self):
        return self.turn is not None and not self.turn.done()

    async def _send_body(self, error="", notice="", clear_form=False):
        await self.send(text_data=await _render_body(self.campaign_id, error, notice, clear_form))


@database_sync_to_async
def _owns(user, campaign_id):
    return Campaign.objects.filter(pk=campaign_id, owner=user).exists()


@database_sync_to_async
def _render_start(campaign_id, action, retry):
    campaign = Campaign.objects.get(pk=campaign_id)
    replaced = None
    if retry:
        replaced = lineage.path_of(campaign).nodes().filter(depth=campaign.head_depth).first()
    return render_to_string("campaigns/_turn_start.html", {
        "campaign": campaign,
        "action": action,
        "replaced": replaced,
    })


@database_sync_to_async
def _render_body(campaign_id, error, notice, clear_form):
    campaign = Campaign.objects.get(pk=campaign_id)
    context = play_body_context(campaign, error=error, notice=notice)
    context["oob"] = True
    context["clear_form"] = clear_form
    return render_to_string("campaigns/_play_body.html", context)
