"""A turn's retrieval queries, read before the build and embedded together in one request (issue 16).

The knowledge query (the input and the scene) and the memory query (the
input, and the scene with the newest narration) both go to the campaign's
embedding model; ``texts`` is everything to embed, in one list, and
``embedded`` hands each query its own vectors back. Reading is done here
(read-only, model-free); the model call is the caller's, off the database's
thread (``storyteller.turns.queries_embedded``).
"""

from dataclasses import dataclass, replace

from campaigns import state
from knowledge import retrieval
from knowledge.importer import embedding_model

from . import events as events_section
from . import knowledge
from . import memories as memory_section
from .layers import newest_narration


@dataclass(frozen=True)
class Queries:
    knowledge: retrieval.Query | None  # None when the campaign has no enabled source
    memory: memory_section.Query
    model: str  # the campaign's embedding model
    knowledge_texts: tuple = ()
    memory_texts: tuple = ()
    events: events_section.Query | None = None  # the earlier events the input evokes (seed 002)
    events_texts: tuple = ()

    def texts(self):
        """Return every text to embed, knowledge first, the events' last."""
        return [*self.knowledge_texts, *self.memory_texts, *self.events_texts]

    def embedded(self, vectors):
        """Return the queries with their vectors, ``vectors`` being one per ``texts()``."""
        split = len(self.knowledge_texts)
        events_at = split + len(self.memory_texts)
        return replace(
            self, knowledge_texts=(), memory_texts=(), events_texts=(),
            knowledge=retrieval.embedded(self.knowledge, vectors[:split]) if self.knowledge_texts else self.knowledge,
            memory=(memory_section.embedded(self.memory, vectors[split:events_at]) if self.memory_texts
                    else self.memory),
            events=events_section.embedded(self.events, vectors[events_at:]) if self.events_texts else self.events,
        )

    def failed(self, error, embedder):
        """Return the queries without vectors, each saying in words why (``embedder`` could not embed)."""
        return replace(
            self, knowledge_texts=(), memory_texts=(), events_texts=(),
            knowledge=retrieval.embedded(self.knowledge, error=error) if self.knowledge_texts else self.knowledge,
            memory=(memory_section.embedded(self.memory, error=error, embedder=embedder) if self.memory_texts
                    else self.memory),
            events=events_section.embedded(self.events, error=error) if self.events_texts else self.events,
        )


def queries_for(campaign, path, action):
    """Return the Queries for ``action`` after ``path``, with the texts still to embed.

    The state's part for the turn and the newest reply are read once for both queries.
    """
    current = state.state_for_turn(path, campaign, action.text)
    narration = newest_narration(path)
    found, knowledge_texts = None, []
    if knowledge.has_knowledge(campaign):
        found, knowledge_texts = retrieval.query_texts(
            campaign, knowledge.query_for(campaign, path, action, current, narration))
    remembered, memory_texts = memory_section.query_texts(
        campaign, path, memory_section.query_for(campaign, path, action, current, narration))
    evoking, events_texts = events_section.query_texts(campaign, events_section.query_for(action))
    return Queries(found, remembered, embedding_model(campaign), tuple(knowledge_texts), tuple(memory_texts),
                   evoking, tuple(events_texts))
