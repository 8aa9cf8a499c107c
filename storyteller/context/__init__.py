"""The context builder: what the narrator is told on each turn, and why."""

from .budget import ContextOverflow, HistoryEntryTooLarge, NeedsCompaction
from .builder import (Action, Context, build, digest, knowledge_query, memory_query, message_for, messages_for,
                      messages_of, node_tokens, notes_messages, prefix_hash)
from .layers import DYNAMIC_TAIL, fill_user, player_name
from .queries import Queries, queries_for

__all__ = [
    "Action", "Context", "ContextOverflow", "DYNAMIC_TAIL", "HistoryEntryTooLarge", "NeedsCompaction", "Queries",
    "build", "digest", "fill_user", "knowledge_query", "memory_query", "message_for", "messages_for", "messages_of",
    "node_tokens",
    "notes_messages", "player_name", "prefix_hash", "queries_for",
]
