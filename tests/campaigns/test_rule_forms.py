"""Rules made in forms: each form makes the world-file entry its JSON view shows, the JSON edited refills the form,
what the form has no field for is kept, and saving is a correction the pipeline validates (refused in words, the form
kept)."""

import json

from django.urls import reverse

from campaigns import ruleforms
from campaigns.state.time import rulebook
from tests.campaigns.test_rule_views import keep, now  # noqa: F401 — the Lantern Keep with rules, and its head
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}


def posted(kind, **fields):
    """What the browser posts: the form's fields under its prefix, and the JSON it was last shown."""
    form = ruleforms.blank(kind, "/")
    data = {key: value for key, value in form.data.items()}
    data.update({f"{kind}-{name}": value for name, value in fields.items()})
    return data


def sync(client, campaign, kind, data):
    return client.post(reverse("rule_form", args=[campaign.pk, kind]), data, **HTMX).content.decode()


def shown_json(page, kind):
    import html
    import re
    text = re.search(rf'<textarea name="{kind}-json"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    return json.loads(html.unescape(text))


def test_the_variable_form_makes_its_entry_and_the_json_refills_the_form(client_of, keep):
    page = sync(client_of, keep, "variable", posted("variable", name="favour", type="number", minimum="0",
                                                    maximum="10", default="2", applies_to=["world"],
                                                    description="what Mara owes Edrin"))
    entry = shown_json(page, "variable")
    assert entry == {"name": "favour", "type": "number", "range": [0, 10], "default": 2, "applies_to": ["world"],
                     "visibility": "public", "description": "what Mara owes Edrin"}
    edited = {**entry, "range": [0, 20], "bands": [{"label": "low", "max": 9}, {"label": "high", "min": 10}]}
    data = posted("variable", **ruleforms.VariableForm.fields_of(entry)[0])
    data.update({"variable-json": json.dumps(edited), "variable-json_shown": json.dumps(entry), "redraw": "form"})
    page = sync(client_of, keep, "variable", data)
    assert 'name="variable-maximum" value="20"' in page
    assert shown_json(page, "variable") == edited, "the bands the form has no field for are kept"


def test_a_variable_saved_from_the_form_is_defined_at_the_head(client_of, keep):
    data = posted("variable", name="favour", type="number", minimum="0", maximum="10", default="0",
                  applies_to=["world"])
    form = ruleforms.VariableForm.from_post(data)
    response = client_of.post(reverse("rule_save", args=[keep.pk, "variable"]), form.data, **HTMX).content.decode()
    assert "The variable favour is defined." in response
    assert rulebook.definitions_of(now(keep))["favour"].maximum == 10


def test_a_refused_rule_says_why_and_the_form_keeps_what_was_typed(client_of, keep):
    as_author(keep)  # the forms are on the panels in the author's view
    form = ruleforms.VariableForm.from_post(posted("variable", name="favour", type="number", minimum="10",
                                                   maximum="0"))
    page = client_of.post(reverse("rule_save", args=[keep.pk, "variable"]), form.data, **HTMX).content.decode()
    assert "Nothing was changed" in page and "a range [min, max] with min below max" in page
    assert 'name="variable-name" value="favour"' in page and 'id="variable-maker" open' in page
    assert "favour" not in rulebook.definitions_of(now(keep))


def test_json_that_cannot_be_read_is_said_and_nothing_is_lost(client_of, keep):
    data = posted("variable", name="favour")
    data["variable-json"] = '{"name": "favour",'
    response = client_of.post(reverse("rule_form", args=[keep.pk, "variable"]), data, **HTMX)
    page = response.content.decode()
    assert "The JSON cannot be read" in page and 'name="variable-name" value="favour"' in page
    assert response["HX-Retarget"] == "#rule-form-variable", "found on a field's change, the whole form says it"


def test_a_fields_change_redraws_only_the_json_and_a_choice_that_changes_the_form_redraws_it(client_of, keep):
    page = sync(client_of, keep, "trigger", posted("trigger", id="x", when="time"))
    assert page.lstrip().startswith('<div id="rule-sync-trigger"') and 'data-field="every"' not in page
    page = sync(client_of, keep, "trigger", posted("trigger", id="x", when="time") | {"redraw": "form"})
    assert page.lstrip().startswith("<form") and 'data-field="every"' in page
    page = sync(client_of, keep, "variable", posted("variable", name="mood", type="choice") | {"redraw": "form"})
    assert 'data-field="options"' in page and 'data-field="minimum"' not in page


def test_the_trigger_form_shows_the_fields_of_its_condition_and_of_the_event_it_sends(client_of, keep):
    page = sync(client_of, keep, "trigger", posted(
        "trigger", id="debt-collector", when="variable", variable="debt", op=">=", value="5",
        effect="variable_change", effect_subject="world", effect_object="unease", effect_data="by: 1\nreason: debts",
        beat="A man in a grey coat asks for Edrin at the door.", max_fires="1") | {"redraw": "form"})
    entry = shown_json(page, "trigger")
    assert entry == {"id": "debt-collector", "when": {"type": "variable", "name": "debt", "object": "world",
                                                      "op": ">=", "value": 5},
                     "effects": [{"type": "variable_change", "subject": "world", "object": "unease",
                                  "data": {"by": 1, "reason": "debts"}}],
                     "beat": "A man in a grey coat asks for Edrin at the door.", "max_fires": 1}
    assert 'data-field="variable"' in page and 'data-field="every"' not in page
    assert "data-effect-fields" in page and "<strong>by</strong>" in page and "a story variable changes" in page
    page = sync(client_of, keep, "trigger", posted("trigger", id="bell", when="time", every="00:00",
                                                   beat="The bell.", announce="The bell at midnight") | {"redraw": "form"})
    assert 'data-field="every"' in page and 'data-field="variable"' not in page
    assert shown_json(page, "trigger")["announce"] == {"audience": "everyone", "text": "The bell at midnight"}


def test_a_nested_condition_and_a_second_effect_ride_along_untouched(keep):
    entry = {"id": "both", "when": {"all": [{"type": "at", "who": "mara", "place": "hall"},
                                            {"type": "variable", "name": "debt", "op": ">", "value": 3}]},
             "effects": [{"type": "variable_change", "subject": "world", "object": "debt", "data": {"to": 0}},
                         {"type": "move", "subject": "mara", "object": "tavern"}],
             "beat": "x", "max_fires": 2, "priority": 5}
    form = ruleforms.TriggerForm.from_entry(entry)
    assert form["when"].value() == "other"
    assert form.entry() == entry


def test_the_dice_form_makes_the_check_and_rolls_a_sample_or_says_which_roll_has_no_band(client_of, keep):
    bands = {"band0_label": "fail", "band0_min": "2", "band0_max": "6", "band0_outcome": "nothing",
             "band1_label": "success", "band1_min": "7", "band1_max": "12", "band1_outcome": "found"}
    page = sync(client_of, keep, "dice", posted("dice", key="search", name="Search", use_text="looking",
                                                dice="2d6", **bands))
    assert shown_json(page, "dice")["definition"] == {"dice": "2d6", "bands": [
        {"label": "fail", "outcome": "nothing", "min": 2, "max": 6},
        {"label": "success", "outcome": "found", "min": 7, "max": 12}]}
    assert "A sample roll: <strong>search 2d6:" in page
    page = sync(client_of, keep, "dice", posted("dice", key="search", dice="2d6", **{**bands, "band1_min": "8"}))
    assert "A sample roll" not in page and "7" in page[page.index('class="error"'):][:300]


def test_the_routine_form_makes_its_windows_and_keeps_a_windows_calendar_days(client_of, keep):
    entry = {"who": "Mara", "windows": [{"start": "06:00", "end": "20:00", "place": "Hall", "activity": "sweeping",
                                         "on": "Harvest"}]}
    form = ruleforms.RoutineForm.from_entry(entry)
    assert form["window0_place"].value() == "Hall" and form.entry() == entry
    form = ruleforms.RoutineForm.from_post(form.data)
    response = client_of.post(reverse("rule_save", args=[keep.pk, "routine"]), form.data, **HTMX).content.decode()
    assert "Nothing was changed" in response  # the calendar has no Harvest
    fine = ruleforms.RoutineForm.from_entry({"who": "Mara", "windows": [{"start": "06:00", "end": "22:00",
                                                                         "place": "Hall", "activity": "sweeping"}]})
    response = client_of.post(reverse("rule_save", args=[keep.pk, "routine"]), fine.data, **HTMX).content.decode()
    assert "The routine of Mara is set." in response
    assert "mara" in rulebook.routines_of(now(keep))


def test_another_persons_campaign_has_no_rule_forms(client, keep, outsider):
    client.force_login(outsider)
    for name in ("rule_form", "rule_save"):
        assert client.post(reverse(name, args=[keep.pk, "variable"]), posted("variable")).status_code == 404
