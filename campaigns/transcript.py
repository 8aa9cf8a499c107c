"""The story as its viewer knows it, written out: "Save the story as you know it" on the play page.

One Markdown document, built from the same view as the play page's panels
(``viewing.view_of``): the story on the active line (the player's actions,
the replies, and in a game master's turn what each character said), then
where the viewer is and what it sees, the places it knows, what it has, the
items it knows of and where it believes they are, and the time. In the
author's view the same document holds everything the author's panels show
(who is inside what, what each character truly feels), and says so at its
head. The whole campaign, for a backup or another machine, is the bundle
export on the campaigns page.
"""

from . import lineage, viewing
from .models import Node, Round
from .state.time import calendar


def write(campaign, reached=None):
    """Return the story of ``campaign``'s active line as its play page's viewer knows it, as Markdown text.

    ``reached`` (a ``seating.Access``) is who asks: a seat's person gets the passages their character was there
    for (``viewing.seen``) and, a player, their own whispers; the owner gets every seat's whispers."""
    path = lineage.path_of(campaign)
    view = viewing.view_of(campaign, path=path)
    lines = [f"# {campaign.title}", ""]
    if view.author:
        lines += ["*The author's view: everything, spoilers included.*", ""]
    lines += _story(campaign, path, view) + _world(campaign, view) + _whispers(reached)
    return "\n".join(lines).rstrip() + "\n"


def _whispers(reached):
    from . import seating
    rows = seating.whispers_seen(reached) if reached is not None else []
    if not rows:
        return []
    lines = ["## Whispers to the game master", ""]
    for row in rows:
        who = "You" if reached.player else (row.seat.user.username if row.seat.user else "A player")
        lines.append(f"- {who}: {row.text}")
    return lines + [""]


def _story(campaign, path, view):
    nodes = list(path.nodes().order_by("depth"))
    passages = viewing.seen(campaign, path, nodes, view.viewer)
    elsewhere = {passage.node.pk for passage in passages if passage.elsewhere}
    parts = {passage.node.pk: passage.parts for passage in passages if passage.parts}
    kept = {passage.node.pk for passage in passages}
    nodes = [node for node in nodes if node.pk in kept]
    rounds = {}
    for row in Round.objects.filter(node__in=[n for n in nodes if n.role == Node.Role.NARRATOR],
                                    kind=Round.Kind.GM).order_by("node_id", "number"):
        rounds.setdefault(row.node_id, []).append(row)
    lines = ["## The story", ""]
    for node in nodes:
        if node.pk in elsewhere:
            lines += [f"*{viewing.ELSEWHERE}*", ""]
            continue
        if node.pk in parts:
            lines += [getattr(part, "text", None) or (part.get("text") if isinstance(part, dict) else str(part))
                      for part in parts[node.pk]] + [""]
            continue
        if node.role == Node.Role.PLAYER:
            said = f"“{node.text}”" if node.mode == Node.Mode.SAY else node.text or "(continue)"
            lines += [f"> **{node.get_mode_display()}:** {said}", ""]
            continue
        if node.pk in rounds:
            narration = ""
            for row in rounds[node.pk]:
                voices = [o for o in row.outputs if o.get("speaker") != "gm"]
                narration = next((o["text"] for o in row.outputs if o.get("speaker") == "gm"), narration)
                if view.author:
                    acted = ", ".join(f"{a.get('name', a.get('who'))} ({a.get('why') or 'no reason given'})"
                                      for a in row.activated) or "nobody else acted"
                    lines += [f"*Round {row.number}: {acted}.*", ""]
                for voice in voices:
                    words = " ".join(part for part in (f"“{voice['text']}”" if voice.get("text") else "",
                                                       voice.get("action", "")) if part)
                    lines += [f"**{voice.get('name', '')}:** {words or 'stays silent'}", ""]
            lines += [narration or node.text, ""]
        else:
            lines += [node.text, ""]
    return lines


def _world(campaign, view):
    lines = []
    here = view.here()
    if here is not None:
        lines += [f"## Where you are: {here.name}", ""]
        if here.description:
            lines += [here.description, ""]
        lines += [f"- {f.data.get('name', '')}: {f.value}" for f in here.features]
        lines += [f"- A way to {way.to}{f' through the {way.exit.label}' if way.exit.label else ''}: {way.state}"
                  for way in here.ways]
        for person in here.people:
            seen = "; ".join(part for part in (person.condition, person.activity, person.mood) if part)
            inner = f" (inside: {person.inner})" if person.inner else ""
            lines.append(f"- {person.name} is here{f': {seen}' if seen else ''}{inner}")
        lines += [f"- Here: {thing.item.name}" for thing in here.things]
        lines += [f"- Here, unseen: {thing.item.name} ({thing.unseen})" for thing in here.unseen]
        lines.append("")
        if here.carried:
            lines += ["## What you have", ""] + [f"- {thing.item.name}" for thing in here.carried] + [""]
    drawn = view.map()
    if drawn.boxes:
        lines += ["## Places you know" if not view.author else "## Places", ""]
        lines += [f"- {box.name}" + (" (you are here)" if box.current else "") for box in drawn.boxes] + [""]
    known = view.known_items()
    if known:
        lines += ["## Things you know of" if not view.author else "## Things", ""]
        lines += [f"- {item.name}: {item.where}" for item in known] + [""]
    now = view.clock()
    if now is not None:
        lines += ["## The time", "", calendar.describe_instant(now.at, campaign.time_zone, view.calendar()), ""]
    return lines
