"""Characters and places made in forms: one batch of world edits through the one write path, all or nothing."""

from django.urls import reverse

from campaigns.models import StateEvent
from campaigns.state.time import rulebook
from campaigns.state.world import world
from tests.campaigns.test_rule_views import keep, now  # noqa: F401 — the Lantern Keep with rules, and its head

HTMX = {"HTTP_HX_REQUEST": "true"}


def add(client, campaign, kind, **fields):
    return client.post(reverse("world_add", args=[campaign.pk, kind]),
                       {f"{kind}-{name}": value for name, value in fields.items()}, **HTMX).content.decode()


def key_of(state, name):
    return next(r.subject for r in state.entities() if r.value == name)


def test_a_character_from_the_form_has_all_it_was_given(client_of, keep):
    page = add(client_of, keep, "character", name="Old Tam", aliases="Tam, the ferryman",
               description="a stooped ferryman", personality="gruff but kind", brief="he saw the wreck and lies",
               place="Tavern", carries="a pipe, a brass token", routine_start="06:00", routine_end="20:00",
               routine_place="Yard", routine_activity="mending nets")
    assert "Old Tam is in the world." in page
    state = now(keep)
    tam = key_of(state, "Old Tam")
    assert tam in world.characters(state)
    assert state.location_of(tam) == key_of(state, "Tavern")
    assert {state.name_of(key_of(state, "a pipe")), state.name_of(key_of(state, "a brass token"))} == {
        "a pipe", "a brass token"}
    assert state.holder_of(key_of(state, "a pipe")) == tam
    assert next(r for r in state.entities() if r.subject == tam).data["aliases"] == ["Tam", "the ferryman"]
    assert state.get(f"condition:{tam}").data.get("inner") == "he saw the wreck and lies"
    assert any("Old Tam is gruff but kind." == fact.value for fact in state.of_kind("fact"))
    assert tam in rulebook.routines_of(state)


def test_a_place_from_the_form_has_its_features_and_exits_with_a_locked_door(client_of, keep):
    page = add(client_of, keep, "place", name="Boathouse", description="a damp boathouse",
               features="slipway: a slipway into the dark water\nnets", exit0_to="Yard", exit0_label="boathouse door",
               exit0_state="locked", exit0_opener="iron key")
    assert "Boathouse is in the world" in page
    state = now(keep)
    boathouse = key_of(state, "Boathouse")
    assert boathouse in world.places(state)
    exits = [r for r in state.of_kind("exit") if boathouse in (r.subject, r.value)]
    assert len(exits) == 2 and all(r.data.get("state") == "locked" for r in exits)


def test_a_part_refused_adds_nothing_says_why_and_keeps_the_form(client_of, keep):
    before = StateEvent.objects.filter(status=StateEvent.Status.APPLIED).count()
    page = add(client_of, keep, "character", name="Old Tam", place="Nowhere-at-all", carries="a pipe")
    assert "Nothing was added" in page and "Nowhere-at-all" in page
    assert 'value="Old Tam"' in page and 'id="character-maker" open' in page
    state = now(keep)
    assert not [r for r in state.entities() if r.value in ("Old Tam", "a pipe")]
    assert StateEvent.objects.filter(status=StateEvent.Status.APPLIED).count() == before


def test_another_persons_campaign_cannot_be_added_to(client, keep, outsider):
    client.force_login(outsider)
    assert client.post(reverse("world_add", args=[keep.pk, "place"]), {"place-name": "Mine"}).status_code == 404
