"""The world author's rules (seed 002 扩展世界), pure: the threshold, what fits, the queue and when it is due."""

import pytest

from campaigns.state.world import authoring
from campaigns.state.world.authoring import AuthorRefused, Queued, Request
from tests.campaigns.test_world import apply, applied, ev, keep


def test_only_the_seeds_needs_pass_and_variables_and_triggers_wait_for_a_person():
    for need in ("scene_change", "arrival", "introduction", "object"):
        authoring.check_request(Request(need, "x"), enabled=True, per_turn=2, created=0)
    for need, words in [("mood", "is one of scene_change"), ("variable", "defined by a person"),
                        ("arrival", "created 2 of at most 2")]:
        with pytest.raises(AuthorRefused) as refused:
            authoring.check_request(Request(need, "x"), enabled=True, per_turn=2, created=2 if need == "arrival"
                                    else 0)
        assert words in str(refused.value)
    with pytest.raises(AuthorRefused, match="says what is needed"):
        authoring.check_request(Request("arrival", "  "), enabled=True, per_turn=2, created=0)


def test_an_existing_one_fits_when_every_word_that_says_who_is_in_its_name_aliases_or_description():
    state = keep()
    assert authoring.fitting(state, Request("introduction", "a hunter")) == ["aldric"]
    assert authoring.fitting(state, Request("introduction", "the hunters")) == ["aldric"], "plurals fold"
    assert authoring.fitting(state, Request("arrival", "a new man")) == [], "generic words fit nobody"
    assert authoring.fitting(state, Request("arrival", "a hunter from the south")) == []
    assert authoring.fitting(state, Request("scene_change", "the vault")) == ["vault"]
    assert authoring.fitting(state, Request("object", "an iron key")) == ["iron-key"]


def test_the_queue_is_due_after_enough_new_things_or_four_turns_and_only_the_authors_own_count():
    queued = [Queued("ilsa", "created", 1), Queued("boathouse", "created", 1), Queued("brom", "no routine", None)]
    assert not authoring.consolidation_due(queued, turn=4, consolidate_after=5)
    assert authoring.consolidation_due(queued, turn=5, consolidate_after=5)
    assert authoring.consolidation_due(queued, turn=2, consolidate_after=2)
    assert not authoring.consolidation_due(queued[2:], turn=50, consolidate_after=1)


def test_a_consolidation_record_is_queued_once_by_a_person_and_retracted_to_take_it_off():
    state = keep()
    applied(apply(state, ev("consolidation", "Aldric", value="created", data={"turn": 3}), source="correction")[0])
    assert authoring.queue(state) == [Queued("aldric", "created", 3)]
    again = apply(state, ev("consolidation", "Aldric"), source="correction")[0]
    assert again.status == "rejected" and again.reason == "Aldric already waits for the world author"
    assert apply(state, ev("consolidation", "Aldric"), source="recorder")[0].status == "rejected"
    applied(apply(state, ev("retract", object="consolidation:aldric"), source="correction")[0])
    assert authoring.queue(state) == []
