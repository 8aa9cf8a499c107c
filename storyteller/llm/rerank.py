"""An optional reranking server: how well each of a few documents fits a query, 0 to 1 (seed 002 重排序服务).

``Reranker(url)`` is the callable ``memory.recall.rank`` takes:
``reranker(query, documents) -> [score]``. It speaks the ``POST /rerank``
of llama.cpp's server (``{"results": [{"index", "relevance_score"}]}``) and
of Hugging Face's text-embeddings-inference (``[{"index", "score"}]``).
Scores outside 0-1 (llama.cpp answers raw logits) are put through the
logistic function. Any failure is raised as ``RerankFailed`` with what
happened, in words; recall then keeps its fused score and reports why.

It calls the network synchronously, so it is only ever called off the
database's shared thread (the recall page runs its recall on a worker
thread) and never while a turn is built.
"""

import math

import httpx

from .base import tls_context

# A rerank of sixty short candidates is quick; a server that takes longer than this is not worth waiting for.
TIMEOUT = 10.0


class RerankFailed(Exception):
    """The reranking server did not give one score per document; the message says what it did."""


class Reranker:
    def __init__(self, url, *, timeout=TIMEOUT):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def __call__(self, query, documents):
        documents = [str(document) for document in documents]
        try:
            response = httpx.post(f"{self.url}/rerank", json={"query": query, "documents": documents,
                                                              "top_n": len(documents), "texts": documents},
                                  timeout=self.timeout, verify=tls_context())
        except httpx.HTTPError as error:
            raise RerankFailed(f"{self.url} could not be reached ({type(error).__name__})") from error
        if response.status_code != 200:
            raise RerankFailed(f"{self.url}/rerank answered HTTP {response.status_code}")
        try:
            body = response.json()
            results = body["results"] if isinstance(body, dict) else body
            scores = [None] * len(documents)
            for result in results:
                score = result.get("relevance_score", result.get("score"))
                scores[int(result["index"])] = float(score)
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise RerankFailed(f"{self.url}/rerank answered something that is not a list of scores "
                               f"({type(error).__name__})") from error
        if any(score is None for score in scores):
            raise RerankFailed(f"{self.url}/rerank scored {sum(s is not None for s in scores)} of "
                               f"{len(documents)} candidates")
        if any(not 0.0 <= score <= 1.0 for score in scores):
            scores = [1 / (1 + math.exp(-max(-60.0, min(60.0, score)))) for score in scores]
        return scores


def reranker_for(campaign):
    """Return the campaign's Reranker, or None when it has none configured."""
    return Reranker(campaign.reranker_url) if campaign.reranker_url else None
