import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from campaigns import story
from campaigns.models import Campaign, CanonRule
from campaigns.state.minds import whereabouts
from knowledge import lorebooks, retrieval
from memory import checkpoints, recall_index
from storyteller import llm, warming
from storyteller.context import memories as memory_section
from storyteller.steps import postturn

pytest_plugins = ["tests.fake_ollama", "tests.llama_server"]


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user("reader", password=None)


@pytest.fixture
def outsider(db):
    return get_user_model().objects.create_user("outsider", password=None)


@pytest.fixture
def client_of(client, owner):
    """A test client signed in as the campaign owner."""
    client.force_login(owner)
    return client


def make_campaign(user, **fields):
    defaults = {
        "title": "The Silver Key",
        "genre": "fantasy",
        "protagonist": "Aldric, a wandering scribe",
        "opening": "Rain falls on the abbey as Aldric arrives at the gate.",
        "context_token_budget": 4096,
        "max_output_tokens": 200,
    }
    defaults.update(fields)
    campaign = Campaign.objects.create(owner=user, **defaults)
    return story.start_campaign(campaign)


def as_author(campaign):
    """Turn on ``campaign``'s author's view (everything, spoilers included): what the tests of the author's
    tools (corrections, provenance, the recording, the inspector) read."""
    campaign.author_view = True
    campaign.save(update_fields=["author_view"])
    return campaign


@pytest.fixture
def campaign(owner):
    campaign = make_campaign(owner)
    CanonRule.objects.create(campaign=campaign, text="Magic cannot resurrect the dead.")
    return campaign


@pytest.fixture
async def narrator_server(fake_ollama, settings):
    """Point the app at the fake Ollama server, as a person setting STORYTELLER_LLM_URL would.

    Post-turn work (the recorder) still running when the test ends is awaited
    here, before the database is cleaned up, so no background work outlives a test.
    """
    settings.STORYTELLER_LLM_URL = fake_ollama.url
    settings.STORYTELLER_LLM_URL_CONFIGURED = True
    settings.STORYTELLER_LLM_API = "ollama"
    yield fake_ollama
    await postturn.settle()
    await warming.settle()


@pytest.fixture(autouse=True)
def _fresh_checkpoint_checks():
    """Start each test with no remembered source-hash checks or retrieval indexes: ids are reused after a
    test's rollback."""
    checkpoints.forget_checks()
    memory_section.forget()
    retrieval.forget()
    lorebooks.forget_keyed()
    cache.clear()  # drafts kept for a campaign's next turn, import progress: keyed by ids a rollback reuses


@pytest.fixture(autouse=True)
def _fresh_server_knowledge():
    """Start each test knowing nothing about model servers: a fake's port may be an earlier fake's."""
    llm.forget_servers()


@pytest.fixture(autouse=True)
def _fresh_recall_caches():
    """Start each test with no cached recall items or matrices, nor whereabouts beliefs: ids are reused after a
    test's rollback."""
    recall_index.forget_caches()
    whereabouts.forget()
