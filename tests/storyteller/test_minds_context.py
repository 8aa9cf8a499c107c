"""Characters' minds in what the narrator reads: the protagonist's false beliefs, the character view (issue 14)."""

import json

from campaigns import lineage, worldfile
from campaigns.state import PROTAGONIST, state_at, whereabouts, world
from storyteller import scripting
from storyteller.context import Action, build
from tests.storyteller.test_whereabouts import HOUSE, does, move


def house(owner, **fields):
    campaign, findings = worldfile.create_campaign(owner, worldfile.read(HOUSE.read_bytes()), **fields)
    assert not [f for f in findings if f.severity == "error"]
    return campaign


def script(campaign, *turns):
    lines = [json.dumps({"action": {"mode": "do", "text": f"turn {n}"}, "reply": f"Turn {n}.", "events": events})
             for n, events in enumerate(turns, 1)]
    results = scripting.append(campaign, scripting.read("\n".join(lines)))
    assert all(r["status"] == "applied" for r in results), results
    campaign.refresh_from_db()
    return campaign


def state_section(campaign, text="I look around."):
    ctx = build(campaign, lineage.path_of(campaign), Action(mode="do", text=text))
    return next(s for s in ctx.sections if s.key == "state")


def test_the_protagonists_false_belief_is_a_narrator_only_line_with_the_truth(owner):
    campaign = script(house(owner), [move("Edrin", "Room")], [move("Edrin", "Hall")],
                      [does("Anne", ("take", "marble"), ("put", "marble", "box"))])
    section = state_section(campaign)
    assert "- [narrator only] Edrin believes the marble is in the basket; it is in the box. [state]" in section.text
    [line] = [c for c in section.components if c["kind"] == "whereabouts"]
    assert line["narrator_only"] and line["included"]


def test_a_true_belief_says_nothing_and_an_unknown_one_says_so(owner):
    campaign = script(house(owner), [move("Edrin", "Room")])
    assert "believes" not in state_section(campaign).text
    campaign = script(campaign, [move("Edrin", "Hall")],
                      [does("Anne", ("take", "marble"), ("put", "marble", "box"), ("close", "box"))],
                      [move("Edrin", "Room")])
    assert ("- [narrator only] Edrin does not know where the marble is (it is not where Edrin last saw it); "
            "it is in the box. [state]") in state_section(campaign).text


def test_the_character_view_carries_where_the_character_believes_things_are(owner):
    campaign = script(house(owner), [move("Sally", "Hall")],
                      [does("Anne", ("take", "marble"), ("put", "marble", "box"))], [move("Sally", "Room")])
    path = lineage.path_of(campaign)
    minds = whereabouts.minds_at(path, campaign)
    view = world.character_view(state_at(path, campaign), "anne", minds)
    assert view["believes"]["marble"] == "box"
    assert view["believes_about"]["sally"]["marble"] == "box"
    assert world.character_view(state_at(path, campaign), PROTAGONIST)["believes"] == {}
