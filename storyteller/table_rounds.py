"""A table's rounds over the play socket (issue 30): presence, the actions waiting, the round played once.

``TableSocket`` is the play consumer's table part. At a campaign with
seated players (``tablerounds.is_table``) a seated player's Send keeps
their character's action for the round (``tablerounds.send``); the round
is played by ``consider`` — once, by one task per campaign — when every
present seated player has sent, when the owner says go, or when the table's
timer runs out (``voices.table.decide``). The round is one turn
(``turns.play_turn``: the one-turn guard taken once), whose input holds
each action as sent under its character, and whose commit marks exactly
those actions played, in the same transaction (``tablerounds.commit_round``).

Who sees what: the narration streams to the owner's sockets only (the
``-gm`` group). Each seat gets, once the round is committed, the parts of
it its character was present for (``tablerounds.parts_for``); presence
frames are rendered per socket from one snapshot through
``voices.table.presence_for`` (a player reads the action texts of their own
place only). Presence lives in this process, as the default channel layer
and ``campaigns.playing`` do; when processes share the work
(``STORYTELLER_SHARED_PLAYING``, issue 31) each socket also holds a
``TablePresence`` row, renewed while it is open, and the snapshot every
panel is rendered from carries who is here and who is typing as the rows
say, so a person on one process sees who joined or typed on another. The
round's task, its timer and the typing throttle stay per process: a round
two processes start at once is committed once (the commit refuses a moved
head, under the campaign's row lock on PostgreSQL: ``campaigns.locks``), the other told again.
"""

import asyncio
import logging
import time
from dataclasses import asdict, dataclass
from datetime import timedelta

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html

from campaigns import lineage, seating, tablerounds
from campaigns import playing as turn_guard
from campaigns.models import Campaign, Node, RoundProposal, Seat, TablePresence

from . import turns
from .context import Action
from .voices import gm, table

logger = logging.getLogger(__name__)

# The socket message kinds a table adds, and what a player may send at all (the rest are the owner's).
PLAYER_KINDS = ("turn", "round-withdraw", "typing", "propose", "stop")
OWNER_KINDS = ("turn", "round-go", "typing", "proposal", "stop", "retry")
TABLE_ONLY = ("While players are seated, the story moves by rounds: use Go on the round panel (your text, if any, "
              "goes to the game master as direction). Nothing was changed.")
PLAYING = "The round is being told now; it ends in a moment."
NO_RETRY = "There is no table round to tell again yet."
WHISPERS = ("Whispered to the game master by players (private: never tell them to the other characters; let each "
            "one shape only what its own character does):")
ROUND_FAILED = "The round could not be told: {error} Every action is still waiting, as it was sent."

PANEL_FRAGMENT = '<div id="round-panel" hx-swap-oob="outerHTML">{}</div>'


@dataclass
class _Here:
    seat: int | None  # None: the owner
    character: str


# campaign id -> channel name -> who is connected there; campaign id -> character -> when they last typed.
_here: dict[int, dict[str, _Here]] = {}
_typing: dict[int, dict[str, float]] = {}
_rounds: dict[int, asyncio.Task] = {}
_timers: dict[int, tuple] = {}  # campaign id -> ((branch, depth), task)
_cleared: dict[int, asyncio.TimerHandle] = {}
# Called with each round's outcome ({"phase", "commit_ms", "round_ms", ...}): the table bench reads them.
observers: list = []


def group(campaign_id):
    return f"campaign-{campaign_id}"


def gm_group(campaign_id):
    return f"campaign-{campaign_id}-gm"


def present_seats(campaign_id):
    return {here.seat for here in _here.get(campaign_id, {}).values() if here.seat is not None}


def typing_now(campaign_id):
    now = time.monotonic()
    return {key for key, at in _typing.get(campaign_id, {}).items() if now - at < table.TYPING_SECONDS}


def playing(campaign_id):
    task = _rounds.get(campaign_id)
    return task is not None and not task.done()


def _shared_here(campaign_id):
    """Return the seats present at the table in any process (database thread)."""
    return set(TablePresence.objects.filter(campaign_id=campaign_id, until__gt=timezone.now(), seat__isnull=False)
               .values_list("seat_id", flat=True))


def _shared_typing(campaign_id):
    """Return the characters typing at the table in any process (database thread)."""
    now = timezone.now()
    return set(TablePresence.objects.filter(
        campaign_id=campaign_id, until__gt=now, typed_at__gt=now - timedelta(seconds=table.TYPING_SECONDS))
        .values_list("character", flat=True))


def _arrive(campaign_id, channel, seat, character):
    TablePresence.objects.filter(until__lt=timezone.now()).delete()  # the sockets of a process that died
    TablePresence.objects.update_or_create(channel=channel, defaults={
        "campaign_id": campaign_id, "seat_id": seat, "character": character, "typed_at": None,
        "until": timezone.now() + timedelta(seconds=turn_guard.LEASE_SECONDS)})


def _typed_shared(channel, typing):
    TablePresence.objects.filter(channel=channel).update(typed_at=timezone.now() if typing else None)


def _renew(channels):
    TablePresence.objects.filter(channel__in=channels).update(
        until=timezone.now() + timedelta(seconds=turn_guard.LEASE_SECONDS))


async def _renewing():
    """Renew the leases of this process's table sockets while any is open (one task per process)."""
    while True:
        await asyncio.sleep(turn_guard.LEASE_SECONDS / 3)
        channels = [channel for here in list(_here.values()) for channel in here]
        if not channels:
            return
        await database_sync_to_async(_renew)(channels)


_renewer = []  # this process's renewing task, while it runs


def snapshot(campaign_id):
    """Return the table's state at the head as plain values (database thread): seats, actions, proposals; and,
    when processes share the work, who is here and who is typing in all of them."""
    seated = tablerounds.seating(campaign_id)
    sent = {key: row.text for key, row in tablerounds.waiting(campaign_id).items()}
    proposals = [{"pk": p.pk, "kind": p.get_kind_display(), "note": p.note,
                  "person": p.seat.user.get_username() if p.seat.user else "", "character": p.seat.character}
                 for p in tablerounds.proposals_waiting(campaign_id)]
    timer = Campaign.objects.values_list("round_timer_seconds", flat=True).get(pk=campaign_id)
    snap = {"seats": [asdict(row) for row in seated], "sent": sent, "proposals": proposals, "timer": timer}
    if turn_guard.shared():
        snap |= {"here": sorted(_shared_here(campaign_id)), "typing": sorted(_shared_typing(campaign_id))}
    return snap


def seated_of(snap, campaign_id):
    here = set(snap["here"]) if "here" in snap else present_seats(campaign_id)
    return [table.Seated(row["character"], row["name"], row["person"], row["seat"] in here, row["place"],
                         row["place_name"]) for row in snap["seats"]]


def render_panel(snap, campaign_id, viewer, *, owner=False, notice="", error="", full=False):
    """Render the round panel for ``viewer`` (a character key; None: the owner), from one ``snapshot``."""
    seated = seated_of(snap, campaign_id)
    sent = {key: table.Sent(key, text) for key, text in snap["sent"].items()}
    typing = set(snap["typing"]) if "typing" in snap else typing_now(campaign_id)
    shown = table.presence_for(None if owner else viewer, seated, sent, typing)
    mine = snap["sent"].get(viewer, "") if not owner else ""
    decision = table.decide(seated, sent)
    return render_to_string("rounds/_panel.html", {
        "campaign_id": campaign_id, "shown": shown, "owner": owner, "mine": mine, "playing": playing(campaign_id),
        "waiting_count": len(decision.waiting), "sent_count": len(sent), "timer": snap["timer"],
        "proposals": snap["proposals"] if owner else [], "notice": notice, "error": error, "full": full})


async def broadcast(campaign_id):
    """Tell every socket of the campaign the table changed: each renders its own panel from this snapshot."""
    snap = await database_sync_to_async(snapshot)(campaign_id)
    await get_channel_layer().group_send(group(campaign_id), {"type": "table.presence", "snap": snap})


async def consider(campaign_id, *, go=False, timer_due=False, direction="", retry=False):
    """Play the round now if it is due (``voices.table.decide``), as one task per campaign; return whether it
    started. Arm the table's timer at a round's first action."""
    if playing(campaign_id):
        return False
    snap = await database_sync_to_async(snapshot)(campaign_id)
    seated = seated_of(snap, campaign_id)
    decision = table.decide(seated, set(snap["sent"]), go=go or retry, timer_due=timer_due)
    if not decision.play:
        if snap["sent"] and snap["timer"]:
            await _arm(campaign_id, snap["timer"])
        return False
    if playing(campaign_id):
        return False
    _rounds[campaign_id] = asyncio.create_task(_play_round(campaign_id, decision.why, direction, retry=retry))
    return True


async def _arm(campaign_id, seconds):
    head = await database_sync_to_async(
        lambda: tuple(Campaign.objects.values_list("head_branch_id", "head_depth").get(pk=campaign_id)))()
    armed = _timers.get(campaign_id)
    if armed is not None and armed[0] == head and not armed[1].done():
        return

    async def ring():
        await asyncio.sleep(seconds)
        _timers.pop(campaign_id, None)
        await consider(campaign_id, timer_due=True)

    _timers[campaign_id] = (head, asyncio.create_task(ring()))


def _disarm(campaign_id):
    armed = _timers.pop(campaign_id, None)
    if armed is not None and armed[1] is not asyncio.current_task():
        armed[1].cancel()


def stop(campaign_id):
    """Stop the round being told (the owner's Stop): nothing is saved, every action stays waiting."""
    task = _rounds.get(campaign_id)
    if task is not None and not task.done():
        task.cancel()


def _prepare(campaign_id, retry, present):
    """Read the round (database thread): the actions waiting, the stages, the input, what the narrator is told.

    ``present``: the seats here, or None to read them from every process's rows.
    """
    present = _shared_here(campaign_id) if present is None else present
    opened = tablerounds.open_round(campaign_id)
    if retry:
        player = Node.objects.filter(branch_id=opened.head[0], depth=opened.head[1] - 1).first()
        stages = tablerounds.stages_of(player.pk) if player is not None else None
        if stages is None:
            raise turns.TurnFailed(NO_RETRY)
        return opened, stages, None, frozenset(k for s in stages for k in s["present"])
    seated = [table.Seated(s.character, s.name, s.person, s.seat in present, s.place, s.place_name)
              for s in opened.seating]
    stages = table.stages(seated)
    sent = [table.Sent(character, text, pk) for pk, character, text in opened.actions]
    text = table.compose(sent, seated, stages) or "(Nobody at the table acted this round.)"
    campaign = Campaign.objects.get(pk=campaign_id)
    whispered = seating.whispers_for_round(campaign, lineage.path_of(campaign))
    names = {s.character: s.name for s in seated}
    notes = [WHISPERS, *(f"- {names.get(key, key)}: {said}" for key, said in whispered)] if whispered else []
    direction = "\n".join(line for line in (table.direction(stages), *notes) if line)
    stage_rows = [{"place": s.place, "name": s.name, "present": list(s.present),
                   "names": {key: names.get(key, key) for key in s.present}} for s in stages]
    people = table.voiced_by_people(seated, {a.character for a in sent})
    return opened, stage_rows, Action(mode="do", text=text, direction=direction), people


def _parts(stage_rows, reply, played, lines_at):
    narration = reply.report["voices"]["narration"]["text"] if played is not None else reply.text
    lines = gm.transcript(played, "").strip() if played is not None else ""
    stages = [table.Stage(s["place"], s["name"], tuple(s["present"])) for s in stage_rows]
    return [{"place": p.place, "name": p.name, "present": list(p.present), "text": p.text}
            for p in table.split(narration, stages, lines=lines, lines_at=lines_at)]


async def _play_round(campaign_id, why, direction, *, retry=False):
    """Play one round as one turn; every socket of the campaign hears how it ended."""
    layer = get_channel_layer()
    started = time.perf_counter()
    outcome = {"phase": "failed", "error": ""}
    try:
        opened, stage_rows, action, people = await database_sync_to_async(_prepare)(
            campaign_id, retry, None if turn_guard.shared() else present_seats(campaign_id))
        if action is not None and direction:
            action = Action(mode=action.mode, text=action.text,
                            direction="\n".join(d for d in (action.direction, direction) if d))
        await layer.group_send(group(campaign_id), {"type": "table.round", "phase": "start",
                                                    "action": action.text if action else "", "retry": retry})

        def on_commit(reply, played):
            # The split is pure: done before the turn's transaction, which then only writes what it found.
            parts = _parts(stage_rows, reply, played, opened.protagonist_place)
            if retry:
                return lambda node: tablerounds.store_parts(node, parts)
            return lambda node: tablerounds.commit_round(opened, node, stage_rows, parts, why)

        async def relay(text):
            await layer.group_send(gm_group(campaign_id), {"type": "table.chunk", "text": text})

        async def voice(kind, data):
            await layer.group_send(gm_group(campaign_id), {"type": "table.voice", "kind": kind, "data": data})

        async def notify(message):
            await layer.group_send(gm_group(campaign_id), {"type": "table.notice", "text": message})

        result = await turns.play_turn(campaign_id, action, relay, retry=retry, notify=notify, on_voice=voice,
                                       people=people, on_commit=on_commit)
        outcome = {"phase": "end", "node": result.node_id, "notice": result.notice, "commit_ms": result.commit_ms,
                   "round_ms": (time.perf_counter() - started) * 1000}
    except tablerounds.RoundChanged as changed:
        outcome = {"phase": "failed", "error": str(changed), "again": True}
    except turns.TurnFailed as error:
        outcome = {"phase": "failed", "error": ROUND_FAILED.format(error=error)}
    except asyncio.CancelledError:
        outcome = {"phase": "stopped", "error": "Stopped: nothing was saved; every action is still waiting."}
        raise
    except Exception as error:
        logger.exception("A table round failed unexpectedly in campaign %s", campaign_id)
        outcome = {"phase": "failed", "error": ROUND_FAILED.format(error=f"{type(error).__name__}: {error}"[:200])}
    finally:
        _rounds.pop(campaign_id, None)
        _disarm(campaign_id)
        for observer in observers:
            observer(outcome)
        await layer.group_send(group(campaign_id), {"type": "table.round", **outcome, "retry": retry})
        await broadcast(campaign_id)
        if outcome.get("phase") == "end" or outcome.get("again"):
            await consider(campaign_id)  # actions sent while it was told may make the next round due at once


def told(node_id, character, *, owner=False):
    """Render what a seat is told of a committed round (database thread): its stage's actions and parts."""
    reply = Node.objects.get(pk=node_id)
    player = Node.objects.filter(branch_id=reply.branch_id, depth=reply.depth - 1).first()
    if not character:
        # A spectator follows the public story, as their page shows it once they reload (viewing.seen gives
        # them every passage): the whole round, not "nothing was told of where you are".
        actions = [player.text] if player is not None and player.text.strip() else []
        return render_to_string("rounds/_told.html", {"actions": actions, "parts": [reply.text], "node_id": node_id})
    actions = tablerounds.parts_for(player, character) or [] if player is not None else []
    parts = tablerounds.parts_for(reply, character) or []
    return render_to_string("rounds/_told.html", {"actions": actions, "parts": parts, "node_id": node_id})


class TableSocket:
    """The play consumer's table part: mixed into ``consumers.PlayConsumer`` (which calls these hooks)."""

    table = False  # the campaign has seated players (read at connect)
    table_access = None
    table_panel = False  # the whole round panel (its forms) was sent; later frames change its status only

    async def table_join(self):
        """At connect: join the table's presence and, for the owner, the narration's group."""
        reached = await seating.aaccess(self.scope["user"], self.campaign_id)
        self.table_access = reached
        self.table = await database_sync_to_async(tablerounds.is_table)(self.campaign_id)
        if reached is None:
            return
        if reached.owner:
            await self.channel_layer.group_add(gm_group(self.campaign_id), self.channel_name)
        seat = reached.seat.pk if reached.seat is not None and reached.player else None
        _here.setdefault(self.campaign_id, {})[self.channel_name] = _Here(seat, reached.character)
        if turn_guard.shared():
            await database_sync_to_async(_arrive)(self.campaign_id, self.channel_name, seat, reached.character)
            if not _renewer or _renewer[0].done():
                _renewer[:] = [asyncio.create_task(_renewing())]
        if self.table:
            await broadcast(self.campaign_id)
            if seat is not None and not reached.owner:
                await consider(self.campaign_id)

    async def table_leave(self):
        here = _here.get(self.campaign_id, {})
        if turn_guard.shared():
            await database_sync_to_async(TablePresence.objects.filter(channel=self.channel_name).delete)()
        if here.pop(self.channel_name, None) is not None and self.table:
            if not here:
                _here.pop(self.campaign_id, None)
            await self.channel_layer.group_discard(gm_group(self.campaign_id), self.channel_name)
            await broadcast(self.campaign_id)
            await consider(self.campaign_id)  # the one still to send has left: the others need not wait

    @property
    def _table_owner(self):
        return self.table_access is not None and self.table_access.owner

    @property
    def _table_character(self):
        return self.table_access.character if self.table_access is not None else ""

    async def table_receive(self, kind, content):
        """Handle a message at a table; return False when it is not the table's (the consumer handles it)."""
        if not self.table:
            self.table = await database_sync_to_async(tablerounds.is_table)(self.campaign_id)
            if not self.table:
                return False
        owner = self._table_owner
        if not owner:
            # A seat may have been paused, removed or moved since the socket opened: read it again at each message.
            self.table_access = self.access = await seating.aaccess(self.scope["user"], self.campaign_id)
            if self.access is None:
                await self.close(code=4403)
                return True
            if not self.access.player or kind not in PLAYER_KINDS:
                return False  # not a round's message: the consumer refuses it (undo, retry, edits are the owner's)
        elif kind not in OWNER_KINDS:
            await self._table_refuse(TABLE_ONLY)
            return True
        if kind == "typing":
            await self._typed()
        elif kind == "stop":
            if owner:
                stop(self.campaign_id)
        elif kind == "proposal":
            await self._decide(content)
        elif kind == "propose":
            await self._propose(content)
        elif owner and kind in ("turn", "round-go"):
            if not await consider(self.campaign_id, go=True, direction=content.get("text", "")[:2000]):
                await self._table_refuse(PLAYING)
        elif owner and kind == "retry":
            if not await consider(self.campaign_id, retry=True):
                await self._table_refuse(PLAYING)
        elif kind == "turn":
            await self._send(content.get("text", ""))
        elif kind == "round-withdraw":
            await self._withdraw()
        return True

    async def _seat(self):
        return await database_sync_to_async(Seat.objects.get)(pk=self.table_access.seat.pk)

    async def _send(self, text):
        if playing(self.campaign_id) and await database_sync_to_async(self._mine_in_round)():
            await self._table_refuse(PLAYING)
            return
        try:
            await database_sync_to_async(tablerounds.send)(await self._seat(), text)
        except tablerounds.Refused as refusal:
            await self._table_refuse(str(refusal))
            return
        _typing.get(self.campaign_id, {}).pop(self._table_character, None)
        if turn_guard.shared():
            await database_sync_to_async(_typed_shared)(self.channel_name, False)
        await broadcast(self.campaign_id)
        await consider(self.campaign_id)

    def _mine_in_round(self):
        return self._table_character in tablerounds.waiting(self.campaign_id)

    async def _withdraw(self):
        if playing(self.campaign_id):
            await self._table_refuse(PLAYING)
            return
        try:
            await database_sync_to_async(tablerounds.withdraw)(await self._seat())
        except tablerounds.Refused as refusal:
            await self._table_refuse(str(refusal))
            return
        await broadcast(self.campaign_id)

    async def _typed(self):
        """Note that this seat is typing (never what): throttled, and cleared a few seconds after the last."""
        key = self._table_character
        typing = _typing.setdefault(self.campaign_id, {})
        now = time.monotonic()
        if key in typing and now - typing[key] < table.TYPING_THROTTLE:
            return
        typing[key] = now
        if turn_guard.shared():
            await database_sync_to_async(_typed_shared)(self.channel_name, True)
        await broadcast(self.campaign_id)
        loop = asyncio.get_running_loop()
        campaign_id = self.campaign_id
        handle = _cleared.pop(campaign_id, None)
        if handle is not None:
            handle.cancel()
        _cleared[campaign_id] = loop.call_later(table.TYPING_SECONDS + 0.1,
                                                lambda: asyncio.ensure_future(broadcast(campaign_id)))

    async def _propose(self, content):
        op = content.get("op", "")
        target = content.get("to", "")

        def make():
            seat = Seat.objects.get(pk=self.table_access.seat.pk)
            branch = None
            if op == RoundProposal.Kind.BRANCH and target.isdigit():
                branch = seat.campaign.branches.filter(pk=int(target)).first()
            return tablerounds.propose(seat, op, content.get("text", ""), branch)

        try:
            await database_sync_to_async(make)()
        except tablerounds.Refused as refusal:
            await self._table_refuse(str(refusal))
            return
        await broadcast(self.campaign_id)

    async def _decide(self, content):
        value = content.get("node", "")
        accept = content.get("op") == "accept"
        if not value.isdigit() or len(value) > 12:
            await self._table_refuse("That proposal is no longer waiting.")
            return
        if playing(self.campaign_id):
            await self._table_refuse(PLAYING)
            return
        try:
            proposal = await database_sync_to_async(tablerounds.decide)(self.campaign_id, int(value), accept)
        except tablerounds.Refused as refusal:
            await self._table_refuse(str(refusal))
            return
        if accept and proposal.kind == RoundProposal.Kind.RETRY:
            await consider(self.campaign_id, retry=True)
        elif accept:
            await self.channel_layer.group_send(group(self.campaign_id), {"type": "story.changed"})
        await broadcast(self.campaign_id)

    async def _table_refuse(self, error):
        snap = await database_sync_to_async(snapshot)(self.campaign_id)
        await self._send_panel(snap, error=error)

    async def _send_panel(self, snap, **words):
        full, self.table_panel = not self.table_panel, True
        await self.send(text_data=render_panel(snap, self.campaign_id, self._table_character,
                                               owner=self._table_owner, full=full, **words))

    # Channel-layer events (group ``campaign-<id>`` and, for the owner, ``campaign-<id>-gm``).

    async def table_presence(self, event):
        if self.table_access is None:
            return
        self.table = True
        await self._send_panel(event["snap"])

    async def table_round(self, event):
        if self.table_access is None:
            return
        if self._table_owner:
            await self.table_owner_round(event)
            return
        if event["phase"] == "end":
            html = await database_sync_to_async(told)(event["node"], self._table_character)
            await self.send(text_data=html)

    async def table_chunk(self, event):
        await self.send(text_data=format_html('<span id="pending-text" hx-swap-oob="beforeend">{}</span>',
                                              event["text"]))

    async def table_voice(self, event):
        await self._voice(event["kind"], event["data"])

    async def table_notice(self, event):
        await self._notify(event["text"])
