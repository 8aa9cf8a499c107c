"""The rules panels' forms fuzzed over HTTP (issue 22, points 4 and 5): 800 posts of every event type the panels
take, each field given anything a person could type there (JSON of any shape, a real definition with one part
replaced, numbers of thousands of digits, lists where a name goes). Every answer is the panel with the change
made or refused in words: never a 500, never a traceback."""

import json

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns import worldfile
from campaigns.rule_views import PANELS
from campaigns.state.registry import OP_FIELDS, TYPES
from tests.campaigns.test_story_time import BELL, LOCKPICK, rules_document
from tests.campaigns.test_worldfile_fuzz import VALUES, _paths, _replaced

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
POSTED = [(panel, kind) for panel, (_, _, kinds) in PANELS.items() for kind in kinds]
# Real values of each JSON field, to be posted as they are or with one part replaced.
GOOD = {
    "definition": LOCKPICK["definition"],
    "triggers": [BELL],
    "windows": [{"start": "09:00", "end": "17:00", "days": "mon-fri", "place": "Forge", "activity": "working"}],
    "calendar": {"hemisphere": "north", "festivals": [{"name": "Lantern Night", "rule": "the last Friday of October",
                                                       "except": [2032]}]},
}
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(
    ["", "Mara", "Mara, Edrin", "mara,,", "Hall", "Forge", "tomorrow at 07:00", "9999-12-31T23:59", "07:00", "25:00",
     "2031-03-14T19:00", "1" * 5000, "-" + "9" * 4400, "1e400", "NaN", "true", "[1, 2]", "{}", "a to " * 3000,
     "simulated", "real", "bell", "lockpick", "2d6", "100d1000", "x" * 600]))


@st.composite
def json_text(draw, name):
    """JSON text for field ``name``: a real value, one with a part replaced, any JSON, or not JSON at all."""
    good = GOOD.get(name)
    choice = draw(st.integers(0, 3))
    if good is not None and choice == 0:
        return json.dumps(good)
    if good is not None and choice == 1:
        path = draw(st.sampled_from([p for p in _paths(good) if p]))
        return json.dumps(_replaced(good, path, draw(VALUES)))
    if choice == 2:
        return json.dumps(draw(VALUES))
    return draw(st.one_of(TEXT, st.just("[" * 5000), st.just('{"a": ' + "7" * 5000 + "}")))


@st.composite
def posts(draw):
    panel, kind = draw(st.sampled_from(POSTED))
    fields = {"type": kind, "subject": draw(TEXT), "object": draw(TEXT), "value": draw(TEXT)}
    if draw(st.booleans()):
        fields["narrator_only"] = "on"
    for name, spec in TYPES[kind].fields.items():
        if not draw(st.integers(0, 4)):
            continue
        if spec.kind == "json":
            fields[name] = draw(json_text(name))
        elif spec.kind == "ops":
            for op in OP_FIELDS:
                fields[op] = draw(TEXT)
        elif spec.kind == "choice":
            fields[name] = draw(st.one_of(st.sampled_from(spec.choices), TEXT))
        else:
            fields[name] = draw(TEXT)
    return panel, fields


@pytest.fixture
def signed_in(owner):
    campaign, _ = worldfile.create_campaign(owner, rules_document())
    client = Client()
    client.force_login(owner)
    return client, campaign


def test_every_event_type_a_panel_takes_is_fuzzed():
    assert {kind for _, kind in POSTED} >= {"engagement", "dice_check_define", "trigger_define", "routine_set",
                                             "calendar_set", "skip", "roll", "variable_define"}


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(post=posts())
def test_anything_posted_to_a_rules_form_is_applied_or_refused_in_words(signed_in, post):
    client, campaign = signed_in
    panel, fields = post
    response = client.post(reverse("rules_correct", args=[campaign.pk, panel]), fields, **HTMX)
    page = response.content.decode()
    assert response.status_code == 200, page[-2000:]
    assert "Traceback" not in page
    assert "rules-error" in page or "rules-message" in page, page[-1500:]


def test_an_engagement_from_the_time_panel_is_made(signed_in):
    # Every engagement added from the time panel answered 500: the form split its who list twice (issue 22).
    client, campaign = signed_in
    page = client.post(reverse("rules_correct", args=[campaign.pk, "time"]), {
        "type": "engagement", "who": "Mara, Edrin", "at": "2031-03-14T19:00", "place": "Tavern",
        "what": "supper at the tavern"}, **HTMX).content.decode()
    assert "Corrected" in page and "supper at the tavern" in page
