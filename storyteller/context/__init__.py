"""The context builder: what the narrator is told on each turn, and why."""

from .budget import ContextOverflow
from .builder import Action, Context, build, knowledge_query, memory_query, message_for, node_tokens

__all__ = [
    "Action", "Context", "ContextOverflow", "build", "knowledge_query", "memory_query", "message_for", "node_tokens",
]
