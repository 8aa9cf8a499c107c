"""The inspector's memories section: each used memory with its scores and range, what was considered and
suppressed, and whether ranking was lexical only (issue 4 item 9)."""

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from storyteller import turns
from storyteller.context import Action

from .conftest import play_to, remember_at
from tests.conftest import as_author


def play(campaign, text):
    async def relay(_):
        pass

    return async_to_sync(turns.play_turn)(campaign.pk, Action(mode="do", text=text), relay)


@pytest.mark.django_db(transaction=True)
def test_the_inspector_lists_used_memories_with_scores_range_and_counts(client_of, campaign, narrator_server):
    as_author(campaign)
    play_to(campaign, 24)
    fact = remember_at(campaign, 5, "Mara hid the <b>amber</b> sundial in the teapot.")
    guess = remember_at(campaign, 11, "Aldric seemed to distrust the ferryman.")
    result = play(campaign, "Where is the amber sundial?")
    page = client_of.get(reverse("inspector", args=[campaign.pk, result.node_id])).content.decode()
    assert page.index('id="memories-used"') < page.index("Left out")
    row = page[page.index(f'id="memory-used-{fact.pk}"'):]
    row = row[: row.index("</tr>")]
    assert "Mara hid the &lt;b&gt;amber&lt;/b&gt; sundial" in row  # escaped, never markup
    assert "depths 0–5" in row and "accepted story" in row
    assert f'id="memory-used-{guess.pk}"' in page and "[inferred] heuristic" in page
    assert "2 eligible memories considered on this line, 2 used, 0 suppressed" in page
    assert "Lexical only" in page and "words only" in page


@pytest.mark.django_db(transaction=True)
def test_another_users_inspector_is_404(client, outsider, campaign, narrator_server):
    result = play(campaign, "look")
    client.force_login(outsider)
    assert client.get(reverse("inspector", args=[campaign.pk, result.node_id])).status_code == 404
