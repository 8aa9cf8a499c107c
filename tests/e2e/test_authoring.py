"""Rules made in forms, in headless Chromium against the fake model server: an author defines a variable, a trigger
that fires when it passes a threshold, a dice check and a routine, each through its form; the JSON view of each
shows what the form made, and the JSON edited shows in the form; then the turns played make each act."""

import copy
import json

import pytest

from tests.campaigns.test_world import document
from tests.e2e.test_play import _manage, app, author_view, connected, fake, page, send  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def world_file(tmp_path):
    """The Lantern Keep at 08:00 on Friday 14 March 2031, Edrin in the Corridor, a Tavern, and no rules yet."""
    doc = copy.deepcopy(document())
    doc["campaign"]["title"] = "Lantern Keep (authoring)"
    doc["places"].append({"name": "Tavern", "description": "a tavern"})
    doc["exits"].append({"from": "Yard", "to": "Tavern", "travel_seconds": 40, "both_ways": True})
    doc["starting_time"] = "2031-03-14T08:00"
    doc["characters"][0]["place"] = "Corridor"  # Edrin: away from Mara, so her routine moves her
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(doc))
    return path


def start_world(app, page, path, title=""):
    """Sign in, make a campaign from the world file at ``path`` and wait on its play page, connected."""
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    page.set_input_files("input[name=world]", str(path))
    if title:
        page.fill("[name=title]", title)
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")
    connected(page)


def opened(page, maker):
    if not page.locator(f"{maker}[open]").count():
        page.click(f"{maker} > summary")


def settle_json(page, kind, contains):
    page.wait_for_function("([kind, text]) => document.querySelector(`#rule-sync-${kind} textarea`)?.value"
                           ".includes(text)", arg=[kind, contains])
    return json.loads(page.input_value(f"#rule-sync-{kind} textarea"))


def edit_json(page, kind, change):
    """Change the JSON view as a person would, then leave it: the form redraws from it."""
    entry = json.loads(page.input_value(f"#rule-sync-{kind} textarea"))
    change(entry)
    page.fill(f"#rule-sync-{kind} textarea", json.dumps(entry, indent=2))
    page.dispatch_event(f"#rule-sync-{kind} textarea", "change")
    return entry


def fill(page, kind, **fields):
    for name, value in fields.items():
        selector = f"#rule-form-{kind} [name='{kind}-{name}']"
        if page.locator(selector).first.evaluate("e => e.tagName") == "SELECT":
            page.select_option(selector, value)
        else:
            page.fill(selector, value)
            page.dispatch_event(selector, "change")


def test_an_author_makes_each_rule_in_its_form_sees_its_json_and_plays_the_turns_that_make_each_act(
        app, fake, page, tmp_path):
    start_world(app, page, world_file(tmp_path))
    author_view(page)  # the rule forms are the author's
    url = page.url

    # A variable: the form makes it, the JSON shows it, the JSON edited shows in the form.
    opened(page, "#variable-maker")
    fill(page, "variable", name="favour", minimum="0", maximum="10", default="0", description="what Mara owes")
    page.uncheck("#rule-form-variable [name=variable-applies_to][value=character]")
    page.check("#rule-form-variable [name=variable-applies_to][value=world]")
    opened(page, "#rule-form-variable .rule-json")
    entry = settle_json(page, "variable", '"world"')
    assert entry == {"name": "favour", "type": "number", "range": [0, 10], "default": 0, "applies_to": ["world"],
                     "visibility": "public", "description": "what Mara owes"}
    edit_json(page, "variable", lambda e: e.update(range=[0, 20]))
    page.wait_for_function("() => document.querySelector('[name=variable-maximum]').value === '20'")
    page.click("[data-action=save-variable]")
    page.wait_for_selector("#variables-panel .rules-message")
    assert "The variable favour is defined." in page.inner_text("#variables-panel")
    assert "favour — number 0–20" in page.text_content("#variable-definitions")

    # A trigger that fires when the favour passes 5, secret, with a beat and an event it sends.
    opened(page, "#trigger-maker")
    fill(page, "trigger", id="favour-repaid", variable="favour", value="5")
    page.select_option("#rule-form-trigger [name=trigger-op]", ">=")
    page.dispatch_event("#rule-form-trigger [name=trigger-op]", "change")
    fill(page, "trigger", effect="add_fact")
    page.wait_for_selector("#rule-form-trigger [data-effect-fields]")
    fill(page, "trigger", effect_value="Mara has repaid Edrin.", beat="Mara presses a coin into Edrin's hand.")
    opened(page, "#rule-form-trigger .rule-json")
    entry = settle_json(page, "trigger", "presses a coin")
    assert entry["when"] == {"type": "variable", "name": "favour", "object": "world", "op": ">=", "value": 5}
    assert entry["effects"] == [{"type": "add_fact", "value": "Mara has repaid Edrin."}]
    assert "announce" not in entry, "left empty, it is a secret"
    edit_json(page, "trigger", lambda e: e["when"].update(value=6))
    page.wait_for_function("() => document.querySelector('[name=trigger-value]').value === '6'")
    page.click("[data-action=save-trigger]")
    page.wait_for_selector("#triggers-panel [data-trigger=favour-repaid][data-status=dormant]")

    # A dice check: the sample roll follows the bands, and says which roll lands nowhere.
    opened(page, "#dice-corrections")
    fill(page, "dice", key="haggle", name="Haggle", use_text="a price is argued", dice="1d6",
         band0_label="refused", band0_min="1", band0_max="3", band0_outcome="the price stands",
         band1_label="agreed", band1_min="5", band1_max="6", band1_outcome="the price drops")
    page.wait_for_function("() => document.querySelector('#sample-roll .error')?.innerText.includes('4')")
    fill(page, "dice", band1_min="4")
    page.wait_for_selector("#sample-roll[data-sample^='haggle 1d6']")
    page.click("[data-action=sample-roll]")
    page.wait_for_selector("#sample-roll[data-sample^='haggle 1d6']")
    opened(page, "#rule-form-dice .rule-json")
    entry = settle_json(page, "dice", '"min": 4')
    assert entry["definition"]["bands"][1] == {"label": "agreed", "outcome": "the price drops", "min": 4, "max": 6}
    edit_json(page, "dice", lambda e: e["definition"]["bands"][0].update(outcome="not a penny less"))
    page.wait_for_function("() => document.querySelector('[name=dice-band0_outcome]').value === 'not a penny less'")
    page.click("[data-action=save-dice]")
    page.wait_for_selector("#roll-form option[value=haggle]", state="attached")

    # A routine: Mara at the Tavern all day.
    opened(page, "#routine-maker")
    fill(page, "routine", who="Mara", window0_start="06:00", window0_end="22:00", window0_place="Tavern",
         window0_activity="serving ale")
    opened(page, "#rule-form-routine .rule-json")
    entry = settle_json(page, "routine", "serving ale")
    assert entry == {"who": "Mara", "windows": [{"start": "06:00", "end": "22:00", "place": "Tavern",
                                                 "activity": "serving ale"}]}
    edit_json(page, "routine", lambda e: e["windows"][0].update(activity="wiping the tables"))
    page.wait_for_function("() => document.querySelector('[name=routine-window0_activity]').value"
                           " === 'wiping the tables'")
    page.click("[data-action=save-routine]")
    page.wait_for_selector("#time-panel .rules-message")
    assert page.get_attribute("#time-panel [data-person=mara]", "data-place") == "hall"

    # The turns that make each act: the routine moves Mara on the next turn ...
    fake.script("The Keep wakes slowly.")
    send(page, "wait for the bell")
    page.wait_for_selector("#time-panel [data-person=mara][data-place=tavern]")
    assert "wiping the tables" in page.inner_text("#time-panel [data-person=mara]")
    # ... the favour passes the threshold and the trigger fires, its beat waiting for the narrator ...
    page.fill("#variables-panel [data-form=variable_change] [name=object]", "favour")
    page.fill("#variables-panel [data-form=variable_change] [name=subject]", "world")
    page.fill("#variables-panel [data-form=variable_change] [name=to]", "7")
    page.click("#variables-panel [data-form=variable_change] button[type=submit]")
    page.wait_for_selector("#triggers-panel [data-trigger=favour-repaid][data-status=fired]")
    assert "Mara presses a coin into Edrin's hand." in page.inner_text("#triggers-panel")
    fake.script("Mara smiles and presses a coin into his hand.")
    send(page, "thank Mara")
    narrator = next(r for r in fake.requests if r.body and "thank Mara" in json.dumps(r.body))
    assert "Mara presses a coin into Edrin" in json.dumps(narrator.body), "the beat reaches the narrator"
    # ... and the check is rolled, landing in one of its bands.
    page.select_option("#roll-form [name=check]", "haggle")
    # The panel read again meanwhile (as when the worker finishes the last turn's recording) keeps the chosen check:
    # a redraw between choosing it and typing the reason once sent the roll without it.
    page.evaluate("url => htmx.ajax('GET', url, {target: '#rolls-panel', swap: 'outerHTML'})",
                  url.split("?")[0].rstrip("/") + "/state/rolls/")
    assert page.input_value("#roll-form [name=check]") == "haggle"
    page.fill("#roll-form [name=reason]", "the price of the room")
    page.click("#roll-form [data-action=roll]")
    page.wait_for_selector("#roll-log [data-roll]")
    assert page.get_attribute("#roll-log [data-roll]", "data-band") in ("refused", "agreed")
    assert page.url == url, "no reload"
