"""Issue 25's pages in headless Chromium: the campaign form in sections with a broken world file's seven lines (the
file kept), a character and a place added in forms, branches named and drawn, and a campaign archived, brought back
and deleted after its name is typed."""

import json

import pytest

from tests.campaigns.test_world_problems import EXPECTED, seven_problems
from tests.e2e.test_authoring import start_world, world_file
from tests.e2e.test_play import _manage, app, fake, page, send  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def test_a_broken_world_file_lists_seven_lines_keeps_the_file_and_a_good_one_starts_the_story(app, page, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(seven_problems()))
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    assert page.locator("details.form-section[open]").count() == 1, "only the story is open"
    assert page.get_attribute("details.form-section[open]", "data-section") == "story"
    page.set_input_files("input[name=world]", str(broken))
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#world-errors [data-problem]")
    lines = page.locator("#world-errors [data-problem]")
    assert lines.count() == 7
    assert [lines.nth(n).evaluate("e => e.firstChild.textContent.trim()") for n in range(7)] == EXPECTED
    assert "Kept from your last try: broken.json" in page.inner_text("[data-kept-file]")
    page.set_input_files("input[name=world]", str(world_file(tmp_path)))
    assert page.inner_text("form.campaign-form button[type=submit]") == "Create campaign and start the story"
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")


def test_branches_are_numbered_named_and_drawn_and_a_campaign_is_archived_back_and_deleted(app, fake, page,
                                                                                           tmp_path):
    start_world(app, page, world_file(tmp_path), title="Tidy Keep")
    play = page.url
    fake.script("The hall is cold.", "The chest is empty.", "The stairs wind up.")
    send(page, "look around")
    send(page, "I open the chest")
    page.click("[data-action=undo]")
    page.wait_for_function("() => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === 1")
    send(page, "I climb the stairs")
    page.goto(play + "branches/")
    tree = page.locator("#branch-tree svg")
    assert tree.locator("a").count() == 2 and tree.locator("a.current").get_attribute("data-line") == "2"
    assert "from: I climb the stairs" in page.inner_text("#line-2")
    tree.locator("a[data-line='1']").click()
    assert page.url.endswith("#line-1")
    page.click("#line-1 details.branch-name > summary")
    page.fill("#line-1 [name=name]", "the chest line")
    page.click("#line-1 [data-action=name]")
    page.wait_for_selector("#line-1 .branch-label:has-text('the chest line')")
    assert "Line 1 is now called “the chest line”." in page.inner_text(".messages")

    campaign = play.rstrip("/").split("/")[-1]
    page.goto(app["base"] + "/")
    page.click(f"#campaign-{campaign} [data-action=archive]")
    page.wait_for_selector(f"#archived-{campaign}", state="attached")
    assert page.locator(f"#campaign-{campaign}").count() == 0
    page.click("#archived-campaigns > summary")
    page.click(f"#archived-{campaign} [data-action=unarchive]")
    page.wait_for_selector(f"#campaign-{campaign}")
    page.click(f"#campaign-{campaign} [data-action=delete]")
    page.fill(".delete-form [name=name]", "Tidy")
    page.click(".delete-form button[type=submit]")
    page.wait_for_selector(".delete-form .error, .error")
    assert "nothing was deleted" in page.inner_text("main")
    page.fill(".delete-form [name=name]", "Tidy Keep")
    page.click(".delete-form button[type=submit]")
    page.wait_for_selector(".messages")
    assert "“Tidy Keep” is deleted" in page.inner_text(".messages")
    assert page.locator(f"#campaign-{campaign}").count() == 0
    assert page.goto(play).status == 404
