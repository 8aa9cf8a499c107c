"""Every free-text field has a limit, enforced wherever it is written (issue 10, point 2).

A 2 MB memory made every turn fail until it was forgotten; the same held for
an opening or a canon rule. The forms, the admin and the write functions all
refuse a text over its limit, in words naming the limit, and keep nothing.
"""

import pytest
from django.urls import reverse

from campaigns.models import CANON_CHARS, NOTES_CHARS, OPENING_CHARS, Campaign, CanonRule
from memory import bank
from memory.models import MEMORY_CHARS, SUMMARY_CHARS, Checkpoint, Memory
from storyteller.steps import compaction
from tests.campaigns.test_lineage import act
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}
TWO_MB = "word " * 400_000


def test_a_two_megabyte_memory_is_refused_on_the_memory_panel(client_of, campaign):
    as_author(campaign)
    response = client_of.post(reverse("memory_add", args=[campaign.pk]), {"text": TWO_MB}, **HTMX)
    assert f"at most {MEMORY_CHARS:,} characters" in response.content.decode()
    assert not Memory.objects.filter(campaign=campaign).exists()


def test_a_memory_cannot_be_edited_past_its_limit(campaign):
    memory = bank.add_by_hand(campaign, "Mara hid the key.")
    with pytest.raises(ValueError, match=f"{MEMORY_CHARS:,}"):
        bank.edit_text(memory, TWO_MB)
    memory.refresh_from_db()
    assert memory.text == "Mara hid the key."


def test_the_admin_refuses_a_memory_over_its_limit(admin_client, campaign):
    memory = bank.add_by_hand(campaign, "Mara hid the key.")
    url = reverse("admin:memory_memory_change", args=[memory.pk])
    response = admin_client.post(url, {"text": "x" * (MEMORY_CHARS + 1), "authority": memory.authority,
                                       "enabled": "on"})
    assert response.status_code == 200 and "at most 2000 characters" in response.content.decode()
    memory.refresh_from_db()
    assert memory.text == "Mara hid the key."


def test_a_summary_typed_by_hand_is_refused_before_it_is_counted(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    act(campaign, "walk in", "The yard is empty.")
    with pytest.raises(ValueError, match=f"{SUMMARY_CHARS:,} characters"):
        compaction.write_by_hand(campaign, "x" * (SUMMARY_CHARS + 1))
    assert not Checkpoint.objects.filter(campaign=campaign).exists()


@pytest.mark.parametrize("field, limit", [("opening", OPENING_CHARS), ("style_notes", NOTES_CHARS),
                                          ("narrator_rules", NOTES_CHARS)])
def test_the_campaign_form_refuses_text_over_its_limit(client_of, field, limit):
    data = {"title": "Long", "protagonist": "Edrin", "opening": "It rains.", "point_of_view": "second",
            "prose_length": "medium", "dialogue_density": "medium", "descriptive_richness": "medium",
            "violence_level": "low", "context_token_budget": 4096, "max_output_tokens": 200, "temperature": 0.8}
    data[field] = "x" * (limit + 1)
    response = client_of.post(reverse("campaign_create"), data)
    assert response.status_code == 200 and f"at most {limit} characters" in response.content.decode()
    assert not Campaign.objects.filter(title="Long").exists()


def test_a_canon_rule_over_its_limit_is_refused_on_the_edit_page(client_of, campaign):
    rule = CanonRule.objects.get(campaign=campaign)
    data = {"title": campaign.title, "protagonist": campaign.protagonist, "point_of_view": "second",
            "prose_length": "medium", "dialogue_density": "medium", "descriptive_richness": "medium",
            "violence_level": "low", "context_token_budget": 4096, "max_output_tokens": 200, "temperature": 0.8,
            "canon-TOTAL_FORMS": 1, "canon-INITIAL_FORMS": 1, "canon-0-id": rule.pk, "canon-0-campaign": campaign.pk,
            "canon-0-text": "x" * (CANON_CHARS + 1), "canon-0-scope": "invariant", "canon-0-enabled": "on",
            "canon-0-position": 0}
    response = client_of.post(reverse("campaign_edit", args=[campaign.pk]), data)
    assert response.status_code == 200 and f"at most {CANON_CHARS} characters" in response.content.decode()
    rule.refresh_from_db()
    assert rule.text == "Magic cannot resurrect the dead."


def test_a_temperature_out_of_range_is_refused(client_of, campaign):
    data = {"title": "Hot", "protagonist": "Edrin", "opening": "It rains.", "point_of_view": "second",
            "prose_length": "medium", "dialogue_density": "medium", "descriptive_richness": "medium",
            "violence_level": "low", "context_token_budget": 4096, "max_output_tokens": 200, "temperature": 1e300}
    response = client_of.post(reverse("campaign_create"), data)
    assert response.status_code == 200 and "less than or equal to 2.0" in response.content.decode()
