"""The reading-aloud panel: the narrator and the characters the player's character knows, and no one else."""

import json
from pathlib import Path

from django.urls import reverse

from campaigns import worldfile
from tests.campaigns.test_world_views import HTMX

KITCHEN = Path(__file__).parent / "worlds" / "kitchen.json"


def kitchen(owner):
    doc = json.loads(KITCHEN.read_text())
    edrin = next(c for c in doc["characters"] if c["name"] == "Edrin")
    edrin["relationships"] = [{"to": "Mara", "label": "nephew", "summary": "fond of her", "familiarity": 0.9,
                               "closeness": 0.7}]
    campaign, _ = worldfile.create_campaign(owner, doc)
    return campaign


def test_the_panel_lists_the_narrator_and_the_characters_the_protagonist_knows_only(client_of, owner):
    campaign = kitchen(owner)
    fragment = client_of.get(reverse("voices_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<aside id="voices-panel"')
    assert 'data-voice-for="narrator"' in fragment and 'data-voice-for="mara"' in fragment
    assert 'data-names="Mara"' in fragment
    assert "Aldric" not in fragment, "a character the protagonist has not met gets no voice (nor a spoiler)"
    assert 'data-voice-for="edrin"' not in fragment, "the player's own character is read in the narration"
    page = client_of.get(reverse("voices_panel", args=[campaign.pk])).content.decode()
    assert "<html" in page and 'id="voices-panel"' in page


def test_the_panel_is_the_owners_only_and_takes_gets_only(client, client_of, owner, outsider):
    campaign = kitchen(owner)
    assert client_of.post(reverse("voices_panel", args=[campaign.pk])).status_code == 405
    client.force_login(outsider)
    assert client.get(reverse("voices_panel", args=[campaign.pk]), **HTMX).status_code == 404
