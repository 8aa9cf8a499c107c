"""The play websocket: parse a message, start one turn, relay it. Nothing else.

Messages come from htmx's ws extension as JSON form values; everything sent
back is an HTML fragment swapped out-of-band by id, rendered from the same
templates the pages use. Each streamed chunk is escaped on its own.

Every turn ends on the page, whatever happens: committed, refused, stopped,
failed with the reason, or failed unexpectedly (then the page reads the story
again over HTTP). A frame carries only what changed, never the whole story, so
its size does not grow with the story (daphne refuses frames over 1 MiB).
"""

import asyncio
import json
import logging
from dataclasses import dataclass
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string
from django.utils.html import format_html

from campaigns import acting, lineage, seating
from campaigns.forms import ActionForm
from campaigns.models import Campaign, Node

from . import editing, llm, table_rounds, table_views, turns, warming
from .steps import postturn
from .context import Action
from .views import STORY_WINDOW, controls_context, mark_rounds, mark_versions

logger = logging.getLogger(__name__)

CHUNK_FRAGMENT = '<span id="pending-text" hx-swap-oob="beforeend">{}</span>'
THINKING_FRAGMENT = '<div id="pending-thinking-text" hx-swap-oob="beforeend">{}</div>'
# The text streamed so far was thinking (a lone closing tag ended it): it leaves the reply for the thinking box.
TAKEN_BACK_FRAGMENT = '<span id="pending-text" hx-swap-oob="innerHTML"></span>'
# A draft of the player's next move, on its way into the action box (play.js moves it there).
DRAFT_FRAGMENT = '<span id="draft-stream" hx-swap-oob="beforeend">{}</span>'
VOICES_FRAGMENT = '<div id="pending-voices" hx-swap-oob="beforeend">{}</div>'
# What a turn waits for (a summary, the model loading, background work letting go); the page counts its seconds.
NOTICE_FRAGMENT = '<div id="turn-notice" class="notice" role="status" data-waiting hx-swap-oob="true">{}</div>'

# The form fields a message may carry; each, when present, must be a string. A click on Here or the map
# ("act") names what it acts on: an exit's slot, an item's, a receiver's or a place's key, and the spot the click
# was (its refusal is shown there); a Say may name the character asked to answer (Ask).
FIELDS = ("action", "mode", "text", "direction", "node", "op", "exit", "item", "to", "place", "at", "ask")
ACT_NAMES = ("exit", "item", "to", "place")

MALFORMED = ("The app could not read that message (it was not a JSON object of form fields), so nothing was sent "
             "to the narrator. Reload the page and try again.")
BUSY = "A reply is still being written. Wait for it, or press Stop."
UNHANDLED = ("The app could not handle that message ({error}), so nothing was sent to the narrator. Reload the page "
             "and try again; the app's console says more.")
UNKNOWN = "The app does not know that request, so nothing was done. Reload the page and try again."
# What a seated player may send over the play socket (issue 30): the rounds' own messages join these. Undo, retry,
# edits, continuing and the rest are the owner's; a player's page offers none of them.
PLAYER_ACTIONS = frozenset()
OWNERS_ONLY = "Only the table's owner can do that; your page offers what you can do."
STOPPED = "Stopped. Nothing was saved."
UNEXPECTED = ("The turn failed unexpectedly ({error}). The story has been read again and shows what was saved, and "
              "anything you typed is back in the box. Try again; if this keeps happening, the app's console says more.")
EDITED = "Saved as a new version (‹ flips back to the old one)."
DRAFTED = "A draft of your next move is in the box: change it as you like, and send it when it is right."
DRAFT_STOPPED = "Stopped: what was drafted is in the box; nothing was sent."
UNSHOWN = ("The reply was saved, but the page could not show it ({error}); the story has been read again. "
           "If this keeps happening, the app's console says more.")
# Daphne refuses a websocket frame over 1 MiB; the end of a turn carries its new nodes only while it stays well
# under that, and otherwise has the page read the story again over HTTP (a reply of 1 MiB once left it stuck).
MAX_FRAME_BYTES = 512 * 1024


class PlayConsumer(table_rounds.TableSocket, AsyncJsonWebsocketConsumer):
    turn = None
    author = False  # whether the turn playing shows the author's view (thinking, rounds' workings): read as it starts
    stopping = None  # set by Stop when the turn keeps what it wrote (a continuation); None: Stop cancels
    group = None
    closed = False

    async def connect(self):
        user = self.scope["user"]
        self.campaign_id = self.scope["url_route"]["kwargs"]["pk"]
        self.access = await seating.aaccess(user, self.campaign_id)  # None: not theirs, nor a seat at its table
        if self.access is None:
            await self.close(code=4403)
            return
        self.tab = parse_qs(self.scope.get("query_string", b"").decode()).get("tab", [""])[0]
        self.group = f"campaign-{self.campaign_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self._join_own_group()
        await self.accept()
        warming.start(self.campaign_id)  # the first turn after a start finds the campaign's indexes hot
        await self.table_join()  # a table's presence and round panel (storyteller/table_rounds.py)

    async def disconnect(self, code):
        self.closed = True
        if self.turn is not None:
            self.turn.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.table_leave()
            await self.channel_layer.group_discard(self.own_group, self.channel_name)

    @property
    def own_group(self):
        """The owner's pages' group (whispers), or the seat's (its removal closes this socket)."""
        if self.access.owner:
            return table_views.owner_group(self.campaign_id)
        return seating.seat_group(self.access.seat.pk)

    async def _join_own_group(self):
        await self.channel_layer.group_add(self.own_group, self.channel_name)

    async def seat_close(self, event):
        """The seat was paused, removed, moved or changed hands: this person's page closes now (4403)."""
        self.closed = True
        await self.close(code=4403)

    async def whisper_sent(self, event):
        """A player whispered: the owner's page reads its whispers again (over HTTP; the frame holds no text)."""
        await self.send(text_data=render_to_string("table/_whispers_refresh.html", {"campaign_id": self.campaign_id}))

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """Handle one message; one that cannot be read or handled gets an error fragment, never a closed socket."""
        content = _parse(text_data)
        if content is None:
            await self._refuse(MALFORMED)
            return
        try:
            await self.receive_json(content)
        except Exception as error:
            logger.exception("The play socket could not handle a message for campaign %s", self.campaign_id)
            await self._refuse(UNHANDLED.format(error=_name(error)))

    async def receive_json(self, content, **kwargs):
        kind = content.get("action", "turn")
        if await self.table_receive(kind, content):  # at a table, rounds (storyteller/table_rounds.py)
            return
        if not self.access.owner and not await self._may(kind):
            return
        if kind == "stop":
            self._stop()
        elif self._busy():
            await self._refuse(BUSY)
        elif kind in ("turn", "edit"):
            await self._act(content, kind)
        elif kind == "act":
            await self._act_on_world(content)
        elif kind == "retry":
            llm.supervisor.allow_restart()  # the person asks again: a built-in narrator that stopped restarting may
            self._start(self._play(None, retry=True))
        elif kind == "continue":
            self._start(self._continue(), stop_keeps=True)
        elif kind == "impersonate":
            self._start(self._impersonate(), stop_keeps=True)
        elif kind == "edit-reply":
            await self._edit_reply(_node_id(content), content.get("text", ""))
        else:
            await self._refuse(UNKNOWN)

    async def _act(self, content, kind):
        """Play the action a message carries; an edited one (``kind`` "edit") as a new version of the one it names."""
        form = ActionForm(content)
        edit_of = _node_id(content) if kind == "edit" else None
        if not form.is_valid() or (kind == "edit" and edit_of is None):
            await self._refuse(" ".join(m for ms in form.errors.values() for m in ms) or UNKNOWN)
            return
        asked = _spot(content.get("ask", "")) if content.get("ask") else ""
        action = Action(**form.cleaned_data, asked=(asked,) if asked else ())
        self._start(self._play(action, retry=False, edit_of=edit_of))

    async def _act_on_world(self, content):
        """Play a click on Here or the map as a turn once its event is checked; a refusal goes where the click was,
        and nothing plays."""
        names = {name: content.get(name, "")[:200] for name in ACT_NAMES}
        try:
            action = await database_sync_to_async(turns.click_action)(self.campaign_id, content.get("op", ""),
                                                                      **names)
        except (acting.Refused, turns.ActionRefused) as refusal:
            await self.send(text_data=render_to_string("campaigns/_act_refusal.html", {
                "at": _spot(content.get("at", "")), "reason": str(refusal), "oob": True}))
            return
        self._start(self._play(action, retry=False))

    def _start(self, work, *, stop_keeps=False):
        """Run one turn's ``work`` as the socket's task; with ``stop_keeps``, Stop ends it keeping what it wrote."""
        self.stopping = asyncio.Event() if stop_keeps else None
        self.turn = asyncio.create_task(work)

    def _stop(self):
        if not self._busy():
            return
        if self.stopping is not None:
            self.stopping.set()
        else:
            self.turn.cancel()

    async def _play(self, action, retry, edit_of=None):
        await self._run(_Turn(action, retry, edit_of=edit_of), lambda: turns.play_turn(
            self.campaign_id, action, self._relay, retry=retry, notify=self._notify, on_voice=self._voice,
            think=self._think, edit_of=edit_of))

    async def _continue(self):
        """Lengthen the head's reply in place, streamed onto its card; Stop keeps what the narrator had written."""
        await self._run(_Turn(None, retry=False, continuing=True), lambda: turns.continue_reply(
            self.campaign_id, self._relay, stopped=self.stopping, notify=self._notify, think=self._think))

    async def _impersonate(self):
        """Draft the player character's next move into the action box; nothing is sent or saved."""
        try:
            await self.send(text_data=await _render_draft(self.campaign_id, "start"))
            draft = await turns.draft_action(self.campaign_id, self._draft, stopped=self.stopping,
                                             notify=self._notify)
        except turns.TurnFailed as error:
            await self._end_draft(error=str(error))
            return
        except asyncio.CancelledError:
            if not self.closed:
                await self._end_draft(notice=DRAFT_STOPPED)
            raise
        except Exception as error:
            logger.exception("A draft failed unexpectedly in campaign %s", self.campaign_id)
            await self._end_draft(error=UNEXPECTED.format(error=_name(error)))
            return
        await self._end_draft(notice=DRAFT_STOPPED if self.stopping.is_set() or not draft else DRAFTED)

    async def _draft(self, text):
        await self.send(text_data=format_html(DRAFT_FRAGMENT, text))

    async def _end_draft(self, *, error="", notice=""):
        self.turn = None  # as at the end of a turn: the next message is not refused as "still being written"
        await self.send(text_data=await _render_draft(self.campaign_id, "end", error=error, notice=notice))

    async def _edit_reply(self, node_id, text):
        """Save an edited reply as a new version and have the page read the story again; its steps run on it."""
        try:
            node = await database_sync_to_async(editing.edit_reply)(self.campaign_id, node_id, text)
        except editing.EditRefused as refusal:
            await self._refuse(str(refusal))
            return
        postturn.schedule(self.campaign_id, node.pk)
        await self.send(text_data=await _render_edited(self.campaign_id))
        await self.channel_layer.group_send(self.group, {"type": "story.changed", "sender": self.channel_name})

    async def _run(self, turn, play):
        """Run ``play()``, one turn; every way it can end sends the end of the turn to the page."""
        try:
            start, turn.replaced, self.author = await _render_start(self.campaign_id, turn)
            await self.send(text_data=start)
            turn.started = True
            result = await play()
        except turns.TurnStopped as stopped:
            await self._end(turn, "stopped", notice=str(stopped))
            return
        except turns.TurnFailed as error:
            await self._end(turn, "failed", error=str(error))
            return
        except asyncio.CancelledError:
            if not self.closed:
                await self._end(turn, "stopped", notice=STOPPED)
            raise
        except Exception as error:
            logger.exception("A turn failed unexpectedly in campaign %s", self.campaign_id)
            await self._end(turn, "failed", error=UNEXPECTED.format(error=_name(error)), refresh=True)
            return
        await self._end(turn, "committed", notice=result.notice, result=result)
        await self.channel_layer.group_send(self.group, {"type": "story.changed", "sender": self.channel_name})

    async def _end(self, turn, outcome, **details):
        """Send the end of the turn; if it cannot be rendered or sent whole, say so and have the page read the
        story again (over HTTP, which carries a reply of any size)."""
        try:
            html = await _render_end(self.campaign_id, turn, outcome, **details)
            if len(html.encode()) > MAX_FRAME_BYTES:
                html = await _render_end(self.campaign_id, turn, outcome, **{**details, "refresh": True}, nodes=False)
        except Exception as error:
            logger.exception("The end of a turn could not be rendered for campaign %s", self.campaign_id)
            message = UNSHOWN if outcome == "committed" else UNEXPECTED
            html = _render_fallback(self.campaign_id, outcome, message.format(error=_name(error)))
        # The end re-enables Send on the page: from here the turn is over for the socket too, whatever its task
        # still does (telling other tabs the story moved), so the next action is not refused as "still written".
        self.turn = None
        try:
            await self.send(text_data=html)
        except Exception as error:
            logger.exception("The end of a turn could not be sent for campaign %s", self.campaign_id)
            message = UNSHOWN if outcome == "committed" else UNEXPECTED
            try:
                await self.send(text_data=_render_fallback(self.campaign_id, outcome, message.format(
                    error=_name(error))))
            except Exception:
                logger.exception("Nor could the words saying so; the page reads the story when it reconnects")

    async def table_owner_round(self, event):
        """Show the owner a table's round as a turn: its input and the narration streaming, then its end."""
        phase = event["phase"]
        if phase == "start":
            self.table_turn = _Turn(Action(mode="do", text=event["action"]) if event["action"] else None,
                                    retry=event.get("retry", False))
            start, self.table_turn.replaced, self.author = await _render_start(self.campaign_id, self.table_turn)
            await self.send(text_data=start)
            self.table_turn.started = True
            return
        turn, self.table_turn = getattr(self, "table_turn", None) or _Turn(None, retry=False), None
        if phase == "end":
            await self._end(turn, "committed", notice=event.get("notice", ""),
                            result=turns.TurnResult(node_id=event["node"], text=""))
        else:
            await self._end(turn, "stopped" if phase == "stopped" else "failed",
                            **({"notice": event["error"]} if phase == "stopped" else {"error": event["error"]}))

    async def _relay(self, text):
        await self.send(text_data=format_html(CHUNK_FRAGMENT, text))

    async def _think(self, text, taken_back=False):
        """Show a reasoning model's thinking in the reply's collapsed thinking box, apart from the reply: in the
        author's view only (the narrator thinks with what the player's character does not know)."""
        if taken_back:
            await self.send(text_data=TAKEN_BACK_FRAGMENT)
        if not self.author:
            return
        await self.send(text_data=format_html(THINKING_FRAGMENT, text))

    async def _voice(self, kind, data):
        """Show a game-master round's boundary (the author's view: who acted and why), or a character's lines, as
        they come (rendered, so escaped)."""
        if kind == "round":
            if not self.author:
                return
            html = render_to_string("campaigns/_round_head.html", data)
        else:
            html = render_to_string("campaigns/_voice.html", {"voice": data})
        await self.send(text_data=format_html(VOICES_FRAGMENT, html))

    async def _notify(self, message):
        await self.send(text_data=format_html(NOTICE_FRAGMENT, message))

    async def story_changed(self, event):
        """Have the page read the story again (over HTTP) after another tab, or a page action, moved it."""
        own = event.get("sender") == self.channel_name or (self.tab and event.get("tab") == self.tab)
        if not own and not self._busy():
            await self.send(text_data=render_to_string("campaigns/_story_refresh.html",
                                                       {"campaign": {"pk": self.campaign_id}}))

    async def _may(self, kind):
        """Whether this seat's person may send a ``kind`` message now; if not, say so (and close a lost seat)."""
        self.access = await seating.aaccess(self.scope["user"], self.campaign_id)
        if self.access is None:
            await self.close(code=4403)
            return False
        if self.access.owner or (self.access.player and kind in PLAYER_ACTIONS):
            return True
        await self._refuse(OWNERS_ONLY)
        return False

    def _busy(self):
        return self.turn is not None and not self.turn.done()

    async def _refuse(self, error):
        """Refuse a message before any turn started: the error, and the page gives the person their text back."""
        await self.send(text_data=render_to_string("campaigns/_turn_end.html", {
            "campaign": {"pk": self.campaign_id}, "outcome": "refused", "turn_error": error}))


@dataclass
class _Turn:
    """What the end of a turn needs to know about how it began."""

    action: Action | None
    retry: bool
    continuing: bool = False  # Continue in place: the head's reply streams on, in its own card
    edit_of: int | None = None  # an edited action: the id of the action it is a new version of
    started: bool = False  # the pending nodes are on the page
    replaced: Node | None = None  # the reply a retry (or a continuation) took off the page

    @property
    def replaces_reply(self):
        return self.retry or self.continuing


def _name(error):
    """Name an unexpected error briefly, for a person (the log has the traceback)."""
    return f"{type(error).__name__}: {error}"[:200]


def _spot(value):
    """Return the id suffix of the spot a click was (``refusal-<spot>``): letters, digits and dashes, or "here"."""
    spot = "".join(c for c in value.lower() if c.isascii() and (c.isalnum() or c == "-"))[:80]
    return spot or "here"


def _node_id(content):
    """Return the node id an edit names, or None when it names none."""
    value = content.get("node", "")
    return int(value) if value.isdigit() and len(value) < 12 else None


def _parse(text_data):
    """Return the message as a dict of form fields, or None when it is not one."""
    try:
        content = json.loads(text_data) if text_data is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(content, dict) or any(not isinstance(content.get(name, ""), str) for name in FIELDS):
        return None
    return content


@database_sync_to_async
def _render_start(campaign_id, turn):
    """Return the start of a turn (pending nodes, controls locked) and the reply a retry or continuation replaces."""
    campaign = Campaign.objects.get(pk=campaign_id)
    path = lineage.path_of(campaign)
    replaced, removed = None, []
    if turn.replaces_reply:
        replaced = path.nodes().filter(depth=campaign.head_depth).first()
    if turn.edit_of is not None:
        # The edited action and everything after it leave the page (they stay on their branch): the window's part.
        edited = path.nodes().filter(pk=turn.edit_of).first()
        removed = path.nodes().filter(depth__gte=edited.depth).order_by("-depth")[:STORY_WINDOW] if edited else []
    html = render_to_string("campaigns/_turn_start.html", {
        "campaign": campaign,
        "action": turn.action,
        "replaced": replaced,
        "removed": list(removed),
        "continuing": replaced if turn.continuing else None,
        "author_view": campaign.author_view,
    })
    return html, replaced, campaign.author_view


@database_sync_to_async
def _render_end(campaign_id, turn, outcome, *, error="", notice="", result=None, refresh=False, nodes=True):
    """Render ``campaigns/_turn_end.html``: the new nodes (or the replaced reply back), controls and messages.

    An edited action that did not commit has the page read the story again: what it took off comes back.
    Without ``nodes`` the pending ones are taken off and the page reads the story again instead.
    """
    campaign = Campaign.objects.get(pk=campaign_id)
    refresh = refresh or (turn.edit_of is not None and turn.started and result is None)
    player = reply = None
    if nodes and result is not None:
        reply = Node.objects.get(pk=result.node_id)
        if not turn.replaces_reply:
            player = Node.objects.get(branch_id=reply.branch_id, depth=reply.depth - 1)
    elif nodes and turn.started and turn.replaced is not None:
        reply = turn.replaced  # a retry that did not commit: the reply it was to replace comes back
    mark_rounds(mark_versions(campaign_id, [node for node in (player, reply) if node is not None]))
    return render_to_string("campaigns/_turn_end.html", {
        "campaign": campaign,
        "outcome": outcome,
        "started": turn.started,
        "had_action": turn.action is not None,
        "player": player,
        "reply": reply,
        "controls": True,
        **controls_context(campaign),
        "turn_error": error,
        "turn_notice": notice,
        "refresh": refresh,
        "author_view": campaign.author_view,
    })


@database_sync_to_async
def _render_draft(campaign_id, part, *, error="", notice=""):
    """Render the start (controls locked) or the end (controls back, what happened) of drafting the next move."""
    campaign = Campaign.objects.get(pk=campaign_id)
    return render_to_string(f"campaigns/_draft_{part}.html", {
        "campaign": campaign, **controls_context(campaign), "turn_error": error, "turn_notice": notice})


@database_sync_to_async
def _render_edited(campaign_id):
    """Render the end of an edit: saved, and the page reads the story (and the panels) again."""
    return render_to_string("campaigns/_turn_end.html", {
        "campaign": Campaign.objects.get(pk=campaign_id), "outcome": "committed", "refresh": True,
        "turn_notice": EDITED})


def _render_fallback(campaign_id, outcome, error):
    """Render the end of a turn without the database: the message, and the page reads the story again."""
    return render_to_string("campaigns/_turn_end.html", {
        "campaign": {"pk": campaign_id},
        "outcome": outcome,
        "started": True,
        "had_action": True,
        "turn_error": error,
        "refresh": True,
    })
