"""What a person's pages need reaches them whichever process answers (issue 31): drafts and import progress.

Both live in Django's cache: this process's memory by default, Redis when
processes share the work. Here a real Redis server (Debian's
``redis-server``, started for the module on a free loopback port) and a
real other process (tests/elsewhere.py) on the same database and Redis.
"""

import shutil
import socket
import subprocess
import time

import pytest
from django.urls import reverse

from campaigns import importing
from storyteller import turns
from tests.elsewhere import Elsewhere, run_elsewhere

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs Debian's redis-server"),
]


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    port = _free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    server.terminate()
    server.wait(10)


@pytest.fixture
def shared_cache(settings, redis_url):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
                                   "KEY_PREFIX": "storyteller"}}
    from django.core.cache import cache

    cache.clear()
    return {"STORYTELLER_REDIS_URL": redis_url}


def test_a_draft_made_through_another_process_is_shown_with_the_turn_played_here(campaign, shared_cache):
    run_elsewhere(f"""
        from storyteller import turns
        turns._keep_draft({campaign.pk}, {{"draft": "Aldric knocks twice.", "model": "m"}})
    """, **shared_cache)

    assert [draft["draft"] for draft in turns._kept_drafts(campaign.pk)] == ["Aldric knocks twice."]
    turns._forget_drafts(campaign.pk, 1)  # the turn here committed with it
    assert run_elsewhere(f"""
        from storyteller import turns
        said(len(turns._kept_drafts({campaign.pk})))
    """, **shared_cache) == ["0"], "the other process would show the draft again with its next turn"


def test_an_import_s_progress_page_answers_from_any_process(client, owner, shared_cache):
    other = Elsewhere(f"""
        from campaigns import importing
        from campaigns.models import Campaign
        from django.contrib.auth import get_user_model

        owner = get_user_model().objects.get(pk={owner.pk})

        def write(add):
            add(4)
            said("counted")
            heard()
            return Campaign.objects.create(owner=owner, title="Written", protagonist="Edrin", opening="Rain.")

        token = importing.start(owner, "the world of “Written”", 10, write)
        said(token)
        importing.progress_of(token, owner).finished.wait(30)
        said("done")
    """, **shared_cache)
    token = other.said()
    assert other.said() == "counted"
    client.force_login(owner)
    page = client.get(reverse("import_progress", args=[token]), HTTP_HX_REQUEST="true").content.decode()
    assert "4 of 10 records written (40%)" in page and 'hx-trigger="every 1s"' in page
    other.tell()
    assert other.said() == "done"
    other.finish()
    answer = client.get(reverse("import_progress", args=[token]), HTTP_HX_REQUEST="true")
    from campaigns.models import Campaign

    assert answer["HX-Redirect"] == reverse("play", args=[Campaign.objects.get(title="Written").pk])


def test_one_process_keeps_drafts_in_its_own_memory(campaign, settings):
    """The default install runs no server: the cache is this process's memory."""
    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"
    turns._keep_draft(campaign.pk, {"draft": "Aldric waits."})
    assert [draft["draft"] for draft in turns._kept_drafts(campaign.pk)] == ["Aldric waits."]
    assert importing.SHARE_SECONDS <= 1  # the page asks every second
