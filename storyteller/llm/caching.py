"""What a model server with prompt caches reads of each request: pure arithmetic over chat messages (issue 27).

A local server keeps, in each of its slots, the tokens of the last prompt
it read there and of the answer it wrote after it. A request served in a
slot reuses the longest prefix the two share and reads the rest
(llama-cpp-python's ``Llama.generate: N prefix-match hit, remaining M
prompt tokens to eval``). ``Slots`` plays a sequence of requests on such a
server and says, for each, how many tokens its prompt holds and how many
the server had to read:

- one slot: llama-cpp-python's server and the built-in narrator (one
  ``Llama``), llama.cpp with ``-np 1``, Ollama without memory for parallel
  slots;
- ``n`` slots: llama.cpp's server, which gives a request the slot whose
  cached prompt it shares most with (else the one used longest ago);
- a slot per kind of request (``by_kind``): as if narration, recording,
  minds and the rest each had a server of their own.

Messages are laid out as a ChatML template lays them (each message a head,
its content, an end; a prompt ends with the head of the answer), and
``count(text)`` is the caller's tokenizer: cl100k for the bench, words for
the fake server. A shared part of one message is counted as the tokens of
the common prefix of the two contents.
"""

from dataclasses import dataclass, field

HEAD = 3  # "<|im_start|>role\n"
END = 1  # "<|im_end|>\n"
# llama.cpp's server gives a request the slot that holds the most of it only when that is at least this share of
# its prompt (``--slot-prompt-similarity``, 0.5 by default); otherwise the slot used longest ago.
SIMILAR = 0.5


@dataclass(frozen=True)
class Served:
    """One request as the server served it: where, how many tokens its prompt holds, and how many it read."""

    slot: int
    prompt: int
    read: int

    @property
    def reused(self):
        return self.prompt - self.read


def prompt_tokens(messages, count):
    """Return the tokens of ``messages`` as a prompt: each message's, and the head of the answer after them."""
    return sum(HEAD + count(m.get("content") or "") + END for m in messages) + HEAD


def shared(cached, messages, count):
    """Return how many tokens of ``messages``' prompt begin as ``cached`` (the messages and the answer a slot
    holds) does: whole messages while they are equal, then the common part of the first that is not; the
    cached answer is an open assistant message, so a request that gives it back as one shares it."""
    before, answer = cached
    total = 0
    for index, message in enumerate(messages):
        if index < len(before):
            held = before[index]
            if held == message:
                total += HEAD + count(message.get("content") or "") + END
                continue
            if held.get("role") == message.get("role"):
                total += HEAD + count(_common(held.get("content") or "", message.get("content") or ""))
            return total
        if message.get("role") == "assistant":
            total += HEAD + count(_common(answer, message.get("content") or ""))
        return total
    # Every message was held: the answer's head after them is too, when an assistant's message came next there.
    following = before[len(messages)]["role"] if len(before) > len(messages) else "assistant"
    return total + (HEAD if following == "assistant" else 0)


@dataclass
class Slots:
    """A server's prompt caches: ``size`` slots (llama.cpp's choice of slot), or one per kind of request."""

    size: int = 1
    by_kind: bool = False
    _held: list = field(default_factory=list)  # [key, (messages, answer), last used]
    _clock: int = 0

    def serve(self, kind, messages, answer, count):
        """Serve one request in its slot, keep its prompt and ``answer`` there, and return what it cost (Served)."""
        self._clock += 1
        total = prompt_tokens(messages, count)
        index, reused = self._slot_for(kind, messages, count)
        self._held[index][1:] = [(list(messages), answer), self._clock]
        return Served(index, total, total - min(reused, total))

    def _slot_for(self, kind, messages, count):
        if self.by_kind:
            for index, (key, cached, _) in enumerate(self._held):
                if key == kind:
                    return index, shared(cached, messages, count)
            self._held.append([kind, ([], ""), 0])
            return len(self._held) - 1, 0
        while len(self._held) < self.size:
            self._held.append([len(self._held), ([], ""), 0])
        scored = [(shared(cached, messages, count), -used, index) for index, (_, cached, used) in
                  enumerate(self._held)]
        best = max(scored)
        if len(self._held) > 1 and best[0] < SIMILAR * prompt_tokens(messages, count):
            # No slot holds enough of it: the slot used longest ago (llama.cpp's choice), whatever it shares.
            index = min(range(len(self._held)), key=lambda i: self._held[i][2])
            return index, scored[index][0]
        return best[2], best[0]


def _common(first, second):
    """Return the longest common prefix of two strings."""
    limit = min(len(first), len(second))
    for index in range(limit):
        if first[index] != second[index]:
            return first[:index]
    return first[:limit]
