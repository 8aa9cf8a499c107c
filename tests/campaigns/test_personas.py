"""Personas: per person, one chosen per campaign; its name is {{user}} and its description is in the stable prefix."""

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from campaigns import lineage
from campaigns.models import Campaign, Persona
from storyteller import context
from storyteller.context import Action
from tests.campaigns.test_lineage import act

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def build(campaign):
    campaign.refresh_from_db()
    return context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="look around"))


def test_a_persona_is_made_with_a_portrait_and_only_its_owner_sees_it(client, client_of, owner, outsider):
    response = client_of.post(reverse("personas"), {
        "name": "Wren", "description": "A lamplighter with a limp.",
        "portrait_file": SimpleUploadedFile("wren.png", PNG, content_type="image/png")})
    assert response.status_code == 302
    wren = Persona.objects.get(owner=owner)
    assert (wren.name, bytes(wren.portrait), wren.portrait_type) == ("Wren", PNG, "image/png")
    page = client_of.get(reverse("personas")).content.decode()
    assert "Wren" in page and reverse("portrait", args=[wren.pk]) in page
    portrait = client_of.get(reverse("portrait", args=[wren.pk]))
    assert portrait["Content-Type"] == "image/png" and portrait.content == PNG
    client.force_login(outsider)
    assert client.get(reverse("portrait", args=[wren.pk])).status_code == 404
    assert client.get(reverse("persona_edit", args=[wren.pk])).status_code == 404
    assert "Wren" not in client.get(reverse("personas")).content.decode()


def test_a_picture_that_is_not_one_or_too_big_is_refused_in_words(client_of, owner):
    svg = SimpleUploadedFile("x.svg", b"<svg onload=alert(1)>", content_type="image/svg+xml")
    response = client_of.post(reverse("personas"), {"name": "Wren", "portrait_file": svg})
    assert "is not a PNG, JPEG, WebP or GIF picture" in response.content.decode()
    big = SimpleUploadedFile("big.png", PNG + b"\x00" * 600_000, content_type="image/png")
    response = client_of.post(reverse("personas"), {"name": "Wren", "portrait_file": big})
    assert "a portrait may be at most 512 KB" in response.content.decode()
    assert not Persona.objects.exists()


def test_editing_a_persona_keeps_or_removes_its_portrait(client_of, owner):
    wren = Persona.objects.create(owner=owner, name="Wren", portrait=PNG, portrait_type="image/png")
    client_of.post(reverse("persona_edit", args=[wren.pk]), {"name": "Wren Ash", "description": ""})
    wren.refresh_from_db()
    assert wren.name == "Wren Ash" and bytes(wren.portrait) == PNG
    client_of.post(reverse("persona_edit", args=[wren.pk]), {"name": "Wren Ash", "remove_portrait": "on"})
    wren.refresh_from_db()
    assert wren.portrait_type == "" and client_of.get(reverse("portrait", args=[wren.pk])).status_code == 404


def test_a_campaign_plays_as_one_of_its_owners_personas_only(client_of, campaign, owner, outsider):
    mine = Persona.objects.create(owner=owner, name="Wren")
    theirs = Persona.objects.create(owner=outsider, name="Mallory")
    page = client_of.get(reverse("campaign_edit", args=[campaign.pk])).content.decode()
    assert "Wren" in page and "Mallory" not in page
    fields = {"title": campaign.title, "protagonist": campaign.protagonist, "context_token_budget": 4096,
              "max_output_tokens": 200, "temperature": 0.8, "point_of_view": "second", "prose_length": "medium",
              "dialogue_density": "medium", "descriptive_richness": "medium", "violence_level": "low",
              "canon-TOTAL_FORMS": 0, "canon-INITIAL_FORMS": 0}
    response = client_of.post(reverse("campaign_edit", args=[campaign.pk]), {**fields, "persona": theirs.pk})
    assert response.status_code == 200 and Campaign.objects.get(pk=campaign.pk).persona is None
    client_of.post(reverse("campaign_edit", args=[campaign.pk]), {**fields, "persona": mine.pk})
    assert Campaign.objects.get(pk=campaign.pk).persona == mine
    assert "You play as Wren." in client_of.get(reverse("play", args=[campaign.pk])).content.decode()


def test_the_persona_is_named_in_the_stable_prefix_and_user_reads_as_its_name(campaign, owner):
    campaign.opening = "Rain falls as {{user}} reaches the abbey gate."
    campaign.save()
    campaign.nodes.filter(depth=0).update(text=campaign.opening)
    act(campaign, "knock", "The door opens for <USER>.")
    campaign.persona = Persona.objects.create(owner=owner, name="Wren", description="A lamplighter with a limp.")
    campaign.save()
    ctx = build(campaign)
    system = ctx.messages[0]["content"]
    assert "The player's character: Wren — Aldric, a wandering scribe" in system
    assert "Call the player's character Wren" in system and "A lamplighter with a limp." in system
    assert ctx.messages[1]["content"] == "Rain falls as Wren reaches the abbey gate."
    assert ctx.messages[3]["content"] == "The door opens for Wren."
    assert "{{user}}" not in str(ctx.messages)


def test_without_a_persona_user_is_the_protagonists_name(campaign, client_of):
    campaign.nodes.filter(depth=0).update(text="{{user}} waits.")
    assert build(campaign).messages[1]["content"] == "Aldric waits."
    assert "Aldric waits." in client_of.get(reverse("play", args=[campaign.pk])).content.decode()


def test_a_changed_persona_changes_the_prefix_a_checkpoint_is_bound_to(campaign, owner):
    before = context.prefix_hash(campaign)
    campaign.persona = Persona.objects.create(owner=owner, name="Wren", description="Quiet.")
    campaign.save()
    assert context.prefix_hash(campaign) != before
