"""A person plays the deployment of docs/deploy.md in Chromium (issue 31): two tabs of one story, each on its
own Daphne process, the post-turn steps in a worker, PostgreSQL (when scripts/with-postgres names it) and Redis.
A turn sent in the tab on process B appears in the tab on process A, and A's status line follows the worker's
steps to their end. At 1280x900 and at 390x844, with screenshots."""

import os
from pathlib import Path

import pytest

from storyteller.diagnostics.processes import Cluster
from tests.e2e.test_play import CHROMIUM, CHROMIUM_FLAGS

pytestmark = pytest.mark.multiprocess

SHOTS = Path(os.environ.get("STORYTELLER_SHOTS", "/tmp/storyteller-shots"))
SIZES = {"wide": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
SETTLED = "document.querySelector('#worker-status')?.dataset.worker === 'done'"


@pytest.mark.parametrize("size", SIZES)
def test_a_turn_sent_on_one_process_appears_in_the_tab_on_the_other(redis_url, database_env, model_server, size):
    if CHROMIUM is None:
        pytest.fail("Chromium is not installed; the test command installs it (apt-get install chromium).")
    from playwright.sync_api import sync_playwright

    reply = f"The lantern gutters as the ferryman points up the hill ({size})."
    model_server.script(reply)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with Cluster(model_server.url, database_env, workers=1) as cluster, sync_playwright() as playwright:
        ann = cluster.people("ann")["ann"]
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            tabs = []
            for index in (0, 1):
                context = browser.new_context(viewport=SIZES[size])
                context.add_cookies([{"name": "sessionid", "value": ann["session"], "url": cluster.url(index)}])
                tab = context.new_page()
                tab.goto(f"{cluster.url(index)}/campaigns/{ann['campaign']}/")
                tab.wait_for_selector('#play[data-connected="true"]', state="attached")
                tabs.append(tab)
            a, b = tabs
            b.fill("#action-text", "I climb toward the glowing window.")
            b.click("#send-button")
            a.wait_for_selector(f"text={reply}", timeout=30_000)
            assert "I climb toward the glowing window." in a.inner_text("#story")
            # The worker ran the steps; process A's status line, polling the database, says they are done.
            a.wait_for_function(SETTLED, timeout=60_000)
            for name, tab in (("A", a), ("B", b)):
                tab.screenshot(path=str(SHOTS / f"processes-{size}-{name}.png"), full_page=True)
        finally:
            browser.close()
        done = cluster.query("import json; from django_tasks_db.models import DBTaskResult; "
                             "print(json.dumps(list(DBTaskResult.objects.values_list('status', flat=True))))")
        assert done == ["SUCCESSFUL"], done
