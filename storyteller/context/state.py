"""The current-state section: what is true now on this line, each line framed with its authority.

It sits in the dynamic tail after memories and knowledge, so it is the last
thing the narrator reads before the direction and the player's input; it is
protected (priced before history). Initial canon the story has overturned is
named here in words, so the narrator does not take the stable prefix's
"as the story began" lines as current (seed 003 §44).
"""

from campaigns import state as story_state
from campaigns.state import selection
from campaigns.state.minds import whereabouts

from .layers import DYNAMIC_TAIL, Section

# The label only: the state's authority and its tags are said once, in the stable prefix (layers.NARRATOR_RULES),
# so the tail the server reads again every turn stays short (issue 27).
HEADER = "Current story state:"
SUPERSEDED_HEADER = "Initial canon that no longer holds on this line (the current state wins):"
TAGS = {"correction": "[correction]", "state": "[state]", "campaign": "[campaign settings]"}


def section(campaign, path, text, *, current=None):
    """Return the state Section for a turn after ``path`` whose action and last reply are ``text``.

    ``current`` is the turn's part of the state when the caller has read it.
    Return None while the story has no state yet: the protagonist alone is
    already in the campaign profile. ``state`` is the turn's state when the
    caller has read it already (``story_state.state_for_turn``).
    """
    current = current if current is not None else story_state.state_for_turn(path, campaign, text)
    chosen = selection.select(current, text)
    # Where the protagonist is wrong about where things are: the narrator's to play, never to reveal.
    chosen.lines += whereabouts.mistaken_lines(current, whereabouts.minds_at(path, campaign), story_state.PROTAGONIST,
                                               text)
    if not (chosen.lines or chosen.location or chosen.scene or chosen.superseded or chosen.dropped or chosen.here):
        return None
    return Section("state", "Current story state", "Level 2 accepted state", DYNAMIC_TAIL, render(chosen),
                   protected=True, components=components(chosen))


def render(chosen):
    """Return the section text for a Selection: concise, structured, one framed line per item."""
    lines = [HEADER, f"Protagonist: {chosen.protagonist}"]
    if chosen.location:
        lines.append(f"Location: {chosen.location}")
    if chosen.scene:
        lines.append(f"Scene: {chosen.scene}")
    lines += [_framed(line) for line in chosen.here]
    lines += [_framed(line) for line in chosen.lines]
    if chosen.superseded:
        lines.append(SUPERSEDED_HEADER)
        lines += [f"- {line.text}" for line in chosen.superseded]
    return "\n".join(lines)


def components(chosen):
    """Return each line with its authority and provenance, for the report and the inspector."""
    def row(line, included):
        return {"type": "state", "slot": line.slot, "kind": line.kind, "record": line.record_id, "text": line.text,
                "authority": line.authority, "narrator_only": line.narrator_only, "provenance": line.provenance,
                "included": included}
    return ([row(line, True) for line in [*chosen.here, *chosen.lines, *chosen.superseded]]
            + [row(line, False) for line in chosen.dropped])


def _framed(line):
    secret = "[narrator only] " if line.narrator_only else ""
    return f"- {secret}{line.text} {TAGS.get(line.authority, '')}".rstrip()
