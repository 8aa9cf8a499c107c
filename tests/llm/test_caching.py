"""The prompt-cache arithmetic the bench and the fake server use (issue 27): pure, counted in words here."""

from storyteller.llm import caching

NARRATION = [{"role": "system", "content": "You narrate the story."},
             {"role": "user", "content": "I open the gate."}]
REPLY = "The gate creaks open onto a dark yard."


def words(text):
    return len(text.split())


def test_a_step_that_continues_the_narration_reads_only_its_own_message_on_one_slot():
    slots = caching.Slots(1)
    first = slots.serve("narration", NARRATION, REPLY, words)
    assert first.read == first.prompt, "a cold server reads everything"
    step = [*NARRATION, {"role": "assistant", "content": REPLY}, {"role": "user", "content": "Record the turn."}]
    served = slots.serve("recorder", step, '{"events": []}', words)
    assert served.read == caching.END + caching.HEAD + 3 + caching.END + caching.HEAD


def test_a_step_with_a_prompt_of_its_own_costs_the_next_narration_its_cache_on_one_slot_but_not_on_a_slot_per_kind():
    own = [{"role": "system", "content": "You keep the record."}, {"role": "user", "content": "The turn: ..."}]
    following = [*NARRATION, {"role": "assistant", "content": REPLY}, {"role": "user", "content": "I step in."}]
    one, per_kind = caching.Slots(1), caching.Slots(by_kind=True)
    for slots in (one, per_kind):
        slots.serve("narration", NARRATION, REPLY, words)
        slots.serve("recorder", own, "{}", words)
    # All but the system message's head and the first word the two system messages share.
    assert one.serve("narration", following, "", words).read == caching.prompt_tokens(following, words) - caching.HEAD - 1
    assert per_kind.serve("narration", following, "", words).read == caching.END + caching.HEAD + 3 + caching.END \
        + caching.HEAD


def test_llama_cpp_gives_a_request_the_slot_it_shares_most_with():
    slots = caching.Slots(2)
    other = [{"role": "system", "content": "You are Mara."}, {"role": "user", "content": "Speak."}]
    assert slots.serve("narration", NARRATION, REPLY, words).slot == 0
    assert slots.serve("character", other, "No.", words).slot == 1, "nothing shared: the slot used longest ago"
    again = slots.serve("character", [*other[:1], {"role": "user", "content": "Speak again."}], "Fine.", words)
    assert again.slot == 1 and again.reused > 0
