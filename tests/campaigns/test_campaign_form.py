"""The campaign form in sections (issue 25, point 5): story, narrator and model, memory and budget, voices,
advanced; only the story needs filling in, a section with a problem opens by itself."""

import re

from django.urls import reverse

from campaigns.forms import CampaignForm, EditCampaignForm, NewCampaignForm
from campaigns.models import Campaign

SECTIONS = ["story", "narrator", "memory", "voices", "advanced"]


def sections(page):
    """Return [(section id, open?)] in page order."""
    return [(ident, bool(opened)) for ident, opened in
            re.findall(r'<details class="form-section" id="section-(\w+)" data-section="\w+"( open)?>', page)]


def test_the_new_campaign_form_has_five_short_sections_and_only_the_story_is_open(client_of):
    page = client_of.get(reverse("campaign_create")).content.decode()
    assert sections(page) == [("story", True), ("narrator", False), ("memory", False), ("voices", False),
                              ("advanced", False)]
    assert [ident for ident, *_ in CampaignForm.SECTIONS] == SECTIONS
    form = NewCampaignForm()
    placed = [field for section in form.sections() for field in section["fields"]]
    assert sorted(field.name for field in placed) == sorted(form.fields), "every field in one section"
    assert max(len(section["fields"]) for section in form.sections()) <= 10, "each section short"


def test_a_new_campaign_needs_only_its_story_and_plays_with_the_defaults(client_of, owner):
    response = client_of.post(reverse("campaign_create"), {
        "title": "Europa", "protagonist": "Commander Ilse", "opening": "Ice groans beneath the lander."})
    campaign = Campaign.objects.get(title="Europa")
    assert response.status_code == 302 and response.url == reverse("play", args=[campaign.pk])
    defaults = Campaign()
    for name in ("point_of_view", "prose_length", "violence_level", "context_token_budget", "max_output_tokens",
                 "temperature", "max_rounds", "memory_recall", "memory_diversity", "clock_mode", "round_seconds"):
        assert getattr(campaign, name) == getattr(defaults, name), name


def test_a_section_with_a_problem_opens_and_says_so(client_of):
    page = client_of.post(reverse("campaign_create"), {
        "title": "Europa", "protagonist": "Commander Ilse", "opening": "Ice.", "context_token_budget": 1024,
        "max_output_tokens": 900}).content.decode()
    assert dict(sections(page)) == {"story": True, "narrator": False, "memory": True, "voices": False,
                                    "advanced": False}
    memory = page.split('id="section-memory"')[1].split("</details>")[0]
    assert "needs a change" in memory and "The reply reserve (900 + 64) must stay under half" in memory
    assert not Campaign.objects.filter(title="Europa").exists()


def test_the_edit_page_keeps_canon_in_the_story_and_story_time_in_advanced(client_of, campaign):
    page = client_of.get(reverse("campaign_edit", args=[campaign.pk])).content.decode()
    assert sections(page) == [("story", True), ("narrator", False), ("memory", False), ("voices", False),
                              ("advanced", False)]
    story = page.split('id="section-story"')[1].split("</details>")[0]
    assert 'id="canon"' in story and 'name="opening"' not in story
    advanced = page.split('id="section-advanced"')[1].split("</details>")[0]
    assert 'name="time_zone"' in advanced and 'name="clock_mode"' in advanced and 'id="time-zones"' in advanced
    assert sorted(f.name for s in EditCampaignForm(instance=campaign).sections() for f in s["fields"]) == sorted(
        EditCampaignForm(instance=campaign).fields)
