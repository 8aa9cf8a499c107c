"""Who believes what is where on a line of the story, derived from the world's own records (issue 14 point 2).

The application decides it, never the model: the records the world model
wrote on the line — where each character went (``location:``), who or what
holds each item (``holder:``), containers opened and closed and items hidden
and revealed (``item:``), and what was noticed or told (``notice:``) — are
read in story order, ``(depth, id)``, and turned into the steps of
``beliefs`` (``Move``, ``Change``, ``Container``, ``Reveal``, ``Notice``,
``Tell``), whose ``Minds`` says what each character believes, and what each
believes the others believe. A world file's records at the opening are read
items first, then where the characters start, so each starts seeing what is
visible where it stands.

``minds_at(path, campaign)`` keeps the ``Minds`` of the last lines read per
campaign and continues one with only the records written since when the new
line is that line grown at its end (a turn, a correction at the head), as
the state's cached base does: a full replay of three thousand steps cost
42 ms (bench "minds"), a turn's few steps a fraction of a millisecond.
Another line (undo, a branch switch, a save point) reads its own. The
``Minds`` handed out is shared: read it, never apply steps to it.
"""

import json
import threading
from dataclasses import dataclass, field

from django.db import connection

from storyteller import vendors

from ...models import StateEvent, StateRecord
from .. import selection
from ..reading import PROTAGONIST, PROTAGONIST_ALIASES, normalize, protagonist_name
from ..world import world
from .beliefs import Change, Container, Minds, Move, Notice, Reveal, Tell

KINDS = ("entity", "location", "holder", "item", "notice")
CLOSED = ("closed", "locked")
# Lines kept per campaign: the head's, and a few others (a save point looked at, the line before an undo).
LINES_KEPT = 4


@dataclass
class _Reader:
    """What turning records into steps remembers between them: characters' names, items' looks."""

    names: dict = field(default_factory=dict)  # a character's name or alias (normalised) -> its key
    closed: set = field(default_factory=set)  # containers now closed or locked
    hidden: set = field(default_factory=set)  # items now hidden

    def actor(self, name, minds):
        if not name:
            return ""
        key = self.names.get(normalize(name))
        return key if key is not None else (normalize(name) if normalize(name) in minds.position else "")

    def steps(self, row, minds):
        """Return the beliefs steps of one record row (see ``_ROW``)."""
        _, _, _, kind, subject, value, data, retracted, event_type, event_subject, unseen, _ = row
        if kind == "entity":
            if data.get("kind") == "character" and not retracted:
                for name in (value, subject, *data.get("aliases", ())):
                    self.names.setdefault(normalize(name), subject)
            return []
        if kind == "location":
            if retracted or not value:
                return [Move(subject, "")]
            # A journey passes through the places on its way (``via`` ends where it arrives).
            return [Move(subject, value, via=tuple(data.get("via", ())[:-1]), unseen=unseen)]
        if kind == "item":
            return [] if retracted else self._looks(subject, data, event_type, event_subject, minds, unseen)
        if kind == "holder":
            if retracted:
                return []
            actor = self.actor(event_subject, minds) if event_type == "item_changes" else ""
            if not actor and value in minds.position:
                actor = value  # given, or placed with someone at the start: they know what they hold
            return [Change(subject, value, actor=actor, hidden=subject in self.hidden, unseen=unseen)]
        if kind == "notice" and not retracted:
            holder = data.get("holder") or None
            if data.get("to"):
                return [Tell(who, data.get("item", subject), holder, by=data.get("by", ""),
                             together=tuple(other for other in data["to"] if other != who))
                        for who in data["to"]]
            return [Notice(data.get("item", subject), place=data.get("place", ""), by=data.get("by", ""),
                           holder=holder)]
        return []

    def _looks(self, item, data, event_type, event_subject, minds, unseen):
        actor = self.actor(event_subject, minds) if event_type == "item_changes" else ""
        steps = []
        closed = data.get("container") in CLOSED
        if closed and item not in self.closed:
            self.closed.add(item)
            steps.append(Container(item, open=False, actor=actor, unseen=unseen))
        elif not closed and item in self.closed:
            self.closed.discard(item)
            steps.append(Container(item, open=True, actor=actor, unseen=unseen))
        hidden = bool(data.get("hidden"))
        if hidden and item not in self.hidden:
            self.hidden.add(item)
            if item in minds.holder:  # hidden where it is, unseen (a new item is hidden as it is placed)
                steps.append(Change(item, minds.holder[item], hidden=True))
        elif not hidden and item in self.hidden:
            self.hidden.discard(item)
            steps.append(Reveal(item, actor=actor, unseen=unseen))
        return steps


@dataclass
class _Line:
    created: object
    path: object
    version: int  # the highest record id read
    last: tuple  # the order key of the last record applied
    minds: Minds
    reader: _Reader


_lines: dict[int, list] = {}  # campaign id -> [_Line], most recently used last
_lock = threading.Lock()


def minds_at(path, campaign):
    """Return the ``Minds`` after the end of ``path``: each character's beliefs about where items are."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX(id) FROM {StateRecord._meta.db_table} WHERE campaign_id = %s", [campaign.pk])
        version = cursor.fetchone()[0] or 0
    with _lock:
        lines = [line for line in _lines.get(campaign.pk, []) if line.created == campaign.created_at]
        _lines[campaign.pk] = lines
        for line in lines:
            if line.path == path and line.version == version:
                lines.remove(line)
                lines.append(line)
                return line.minds
        line = _extendable(lines, path)
        if line is not None:
            grown = _continue(line, path, campaign, version)
            if grown is not None:
                lines.remove(line)
                lines.append(grown)
                return grown.minds
        made = _read(path, campaign, version)
        lines.append(made)
        del lines[:-LINES_KEPT]
        return made.minds


def forget():
    """Empty the cache (tests: ids come back after a rollback)."""
    with _lock:
        _lines.clear()


def _extendable(lines, path):
    """Return the kept line that ``path`` continues at its end (the deepest such), or None."""
    found = [line for line in lines
             if line.path.head_depth <= path.head_depth and path.capped(line.path.head_depth) == line.path]
    return max(found, key=lambda line: line.path.head_depth, default=None)


def _continue(line, path, campaign, version):
    """Return a line grown from ``line`` to ``path`` by the records since, or None when they do not come after it.

    The kept line is the one grown (its ``Minds`` continues in place): the line it was is not kept.
    """
    rows = {}
    if version != line.version:
        rows.update((row[0], row) for row in _rows(campaign, "r.id > %s", [line.version]))
    if path.head_depth > line.path.head_depth:
        branches = sorted({segment.branch_id for segment in path.segments})
        rows.update((row[0], row) for row in _rows(
            campaign, f"r.branch_id IN ({', '.join(['%s'] * len(branches))}) AND r.depth > %s",
            [*branches, line.path.head_depth]))
    found = sorted((row for row in rows.values() if path.contains(row[2], row[1])), key=_order)
    if found and _order(found[0]) < line.last:
        return None  # written earlier in the story than what is already applied (a late recording): read afresh
    for row in found:
        for step in line.reader.steps(row, line.minds):
            line.minds.apply(step)
    return _Line(line.created, path, version, _order(found[-1]) if found else line.last, line.minds, line.reader)


def _read(path, campaign, version):
    reader = _Reader()
    name = protagonist_name(campaign)
    for alias in (name, *([name.split()[0]] if len(name.split()) > 1 else []), *PROTAGONIST_ALIASES):
        reader.names.setdefault(normalize(alias), PROTAGONIST)
    minds = Minds()
    rows = sorted((row for row in _rows(campaign, "1 = 1", []) if path.contains(row[2], row[1])), key=_order)
    for row in rows:
        for step in reader.steps(row, minds):
            minds.apply(step)
    return _Line(campaign.created_at, path, version, _order(rows[-1]) if rows else (-1, 0, 0), minds, reader)


def _order(row):
    """Story order: by depth, then as written; of a world file's opening, the items first, then where characters
    start (so each arrives seeing what is there), then whatever a person corrected before the first turn."""
    stage = (1 if row[3] == "location" else 0) if row[11] == StateEvent.Source.WORLD else 2
    return row[1], stage, row[0]


# (id, depth, branch id, kind, subject, value, data, retracted, its event's type, its event's subject, whether
# its event was marked unseen, its event's source)
_ROW = ("id", "depth", "branch_id", "kind", "subject", "value", "data", "retracted", "type", "actor", "unseen",
        "source")


def _rows(campaign, where, params):
    """Return the rows (``_ROW``) of the campaign's records matching ``where`` that say where things are.

    Of the entities, only characters' (their names say who acted); a holder's
    data is not needed (its value is the holder), so only the rest is parsed:
    a world's two thousand items cost a fresh read a third of its time otherwise.
    """
    records, events = StateRecord._meta.db_table, StateEvent._meta.db_table
    kinds = ", ".join(["%s"] * len(KINDS))
    sql = (f"SELECT r.id, r.depth, r.branch_id, r.kind, r.subject, r.value,"
           f" CASE WHEN r.kind = 'holder' THEN '{{}}' ELSE r.data END, r.retracted,"
           f" {vendors.json_text('e.payload', 'type')}, {vendors.json_text('e.payload', 'subject')},"
           f" {vendors.json_flag('e.payload', 'data', 'unseen')}, e.source"
           f" FROM {records} r INNER JOIN {events} e ON r.event_id = e.id"
           f" WHERE r.campaign_id = %s AND r.kind IN ({kinds})"
           f" AND (r.kind != 'entity' OR {vendors.json_text('r.data', 'kind')} = 'character') AND {where}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [campaign.pk, *KINDS, *params])
        return [(*row[:6], _EMPTY if row[6] == "{}" else json.loads(row[6]), bool(row[7]), row[8] or "",
                 row[9] or "", bool(row[10]), row[11]) for row in cursor.fetchall()]


_EMPTY = {}


# Mistaken beliefs of the protagonist the narrator is told of, at most (nearest the scene first).
MISTAKEN_LINES = 6


def where(state, holder):
    """Return where ``holder`` (a place, a character or a container item, or None) is, as words: "in the box"."""
    if holder is None:
        return "somewhere unknown"
    kind = world.kind_of(state, holder)
    if kind == "character":
        return f"with {state.name_of(holder)}"
    if kind == "place":
        return f"at {state.name_of(holder)}"
    return f"in the {state.name_of(holder)}"


def mistaken_lines(state, minds, who, text=""):
    """Return the narrator-only state lines saying where ``who`` wrongly believes things are, and where they are.

    So the narrator can play the false belief without revealing the truth to
    the player (seed 002 beyond the seed: issue 14 point 2). Items at the
    scene's place or named in ``text`` come first; at most ``MISTAKEN_LINES``.
    """
    wrong = minds.mistaken(who)
    if not wrong:
        return []
    place = state.place()
    named = selection.mentioned(state, text) if text else set()

    def nearest(item):
        believed, true = wrong[item]
        here = place and place in (minds.place_of(item), believed, true)
        return not (item in named or here), normalize(state.name_of(item)), item

    lines = []
    for item in sorted(wrong, key=nearest)[:MISTAKEN_LINES]:
        believed, true = wrong[item]
        name, thing = state.name_of(who), state.name_of(item)
        if believed is None:
            said = f"{name} does not know where the {thing} is (it is not where {name} last saw it)"
        else:
            said = f"{name} believes the {thing} is {where(state, believed)}"
        text_line = f"{said}; it is {where(state, true)}."
        lines.append(selection.Line(f"whereabouts:{who}:{item}", "whereabouts", text_line, "state", True,
                                    "derived from where everyone was at each change", None))
    return lines
