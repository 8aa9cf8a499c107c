"""The context builder: what the narrator is told on each turn, and why."""

from .budget import ContextOverflow, HistoryEntryTooLarge, NeedsCompaction
from .builder import (Action, Context, build, knowledge_query, memory_query, message_for, messages_for, node_tokens,
                      notes_messages, prefix_hash)
from .queries import Queries, queries_for

__all__ = [
    "Action", "Context", "ContextOverflow", "HistoryEntryTooLarge", "NeedsCompaction", "Queries", "build",
    "knowledge_query", "memory_query", "message_for", "messages_for", "node_tokens", "notes_messages", "prefix_hash",
    "queries_for",
]
