"""Build the narrator's prompt for one turn: deterministic, read-only, fully reported.

Order (ARCHITECTURE rule 6): the stable prefix (narrator rules, campaign
profile, canon) as the system message; then verbatim active-lineage history,
which only ever grows at its end; then the dynamic tail (direction and the
player's input) as the last message. Between turns the new prompt therefore
starts with the whole of the previous one's prefix and history, so the model
server can reuse its cache.

The reply is reserved first, protected sections are priced next, and history
fills what is left in whole turns, newest first. What is left out is reported
with its cost.
"""

from dataclasses import dataclass

from campaigns.models import CanonRule

from .. import tokens
from . import budget, knowledge, layers
from . import memories as memory_section
from . import state as state_section
from .layers import BRANCH_CONTEXT, DYNAMIC_TAIL, Section

REPORT_VERSION = 1


@dataclass(frozen=True)
class Action:
    """What the player asked for this turn."""

    mode: str
    text: str = ""
    direction: str = ""


@dataclass
class Context:
    messages: list
    sections: list
    report: dict

    @property
    def prompt_tokens(self):
        return self.report["budget"]["prompt_tokens"]


# Rows are read newest first a few dozen at a time, and reading stops at the
# first turn that does not fit: a 2,000-turn story costs what a 60-turn one does.
HISTORY_CHUNK = 64


def message_for(role, mode, text):
    """Return the chat message a stored node becomes in the prompt."""
    if role == "player":
        return {"role": "user", "content": layers.render_action(mode, text)}
    return {"role": "assistant", "content": text}


def node_tokens(role, mode, text):
    """Return the token count stored on a node at commit, so builds never re-count history."""
    return tokens.count(message_for(role, mode, text)["content"])


def build(campaign, path, action, *, model="", api="", seed=None, query=None, memory_query=None):
    """Return the Context for ``action`` played after the end of ``path``.

    ``query`` is the knowledge query, embedded before the build when semantic
    retrieval is possible (``knowledge_query``); without it the build makes its
    own, lexical only. ``memory_query`` is the story memories' query, embedded
    the same way (``memory_query``). Raise ``ContextOverflow`` when the protected sections
    and the reply reserve do not fit ``campaign.context_token_budget``.
    """
    stable = [layers.narrator_rules(campaign), layers.campaign_profile(campaign)]
    canon = layers.canon(list(CanonRule.objects.filter(campaign=campaign, enabled=True)))
    if canon:
        stable.append(canon)
    has_knowledge = knowledge.has_knowledge(campaign)
    standing_dropped = _standing_knowledge(campaign, stable) if has_knowledge else []
    remembered, memory_report = _memory_section(campaign, path, action, memory_query)
    tail = [*remembered, *_state_section(campaign, path, action), *_dynamic_tail(action)]
    for section in stable + tail:
        section.tokens = tokens.count(section.text)

    system_text = "\n\n".join(section.text for section in stable)
    tail_text = "\n\n".join(section.text for section in tail)
    protected = (
        tokens.count(system_text) + tokens.count(tail_text) + 2 * budget.MESSAGE_OVERHEAD
    )
    allowance = budget.history_allowance(campaign.context_token_budget, campaign.max_output_tokens, protected)
    found, knowledge_report = [], None
    if has_knowledge:
        found, knowledge_report = knowledge.retrieved_sections(
            campaign, query or knowledge_query(campaign, path, action), allowance)
        # Elastic, after the memories: memories -> knowledge -> state -> direction -> input.
        tail = [*remembered, *found, *tail[len(remembered):]]
        tail_text = "\n\n".join(section.text for section in tail)
    knowledge_tokens = sum(section.tokens + 1 for section in found)
    allowance -= knowledge_tokens

    rows = (
        path.nodes()
        .order_by("-depth")
        .values_list("depth", "tokens", "id", "role", "mode", "text")
        .iterator(chunk_size=HISTORY_CHUNK)
    )
    kept = budget.select_history(budget.group_turns(rows), allowance)
    history, history_messages = _history_section(kept)
    dropped = _dropped(path, kept)

    messages = [{"role": "system", "content": system_text}, *history_messages, {"role": "user", "content": tail_text}]
    sections = [*stable, history, *tail]
    report = _report(campaign, path, action, sections, protected, allowance, history, dropped, model, api, seed)
    _report_state(report)
    report["memories"] = memory_report
    if has_knowledge:
        _report_knowledge(report, sections, knowledge_report, standing_dropped, knowledge_tokens)
    return Context(messages=messages, sections=sections, report=report)


def knowledge_query(campaign, path, action):
    """Return the imported-knowledge query for ``action`` after ``path`` (embed it before ``build``)."""
    return knowledge.query_for(campaign, path, action)


def memory_query(campaign, path, action):
    """Return the story-memory query for ``action`` after ``path`` (embed it before ``build``)."""
    return memory_section.query_for(campaign, path, action)


def _memory_section(campaign, path, action, query):
    """Return ([the memories Section] or [], the memories report): protected, first in the dynamic tail."""
    section, report = memory_section.section(campaign, path, query or memory_query(campaign, path, action))
    return ([section] if section else []), report


def _standing_knowledge(campaign, stable):
    """Add the knowledge rule and always-included Canon to the stable prefix; return what found no room."""
    stable.append(knowledge.rules_section())
    standing, dropped = knowledge.standing_section(campaign)
    if standing:
        stable.append(standing)
    return dropped


def _report_knowledge(report, sections, retrieved, standing_dropped, spent):
    standing = next((s for s in sections if s.key == "knowledge_standing"), None)
    used = [*(standing.components if standing else []), *retrieved["used"]]
    report["knowledge"] = {
        **retrieved,
        "standing": standing.components if standing else [],
        "dropped": [*standing_dropped, *retrieved["dropped"]],
        "sources": sorted({entry["source"] for entry in used}),
        "tokens": spent,
    }
    report["dropped"] += report["knowledge"]["dropped"]
    report["budget"]["knowledge_tokens"] = spent
    report["budget"]["prompt_tokens"] += spent
    report["budget"]["unused"] -= spent


def _state_section(campaign, path, action):
    """Return the current-state section, or none while the state is empty.

    It is protected and read after memories and knowledge, just before the
    input; relevance is judged from the player's action and the reply it answers.
    """
    last = path.nodes().filter(depth=path.head_depth).values_list("text", flat=True).first() or ""
    section = state_section.section(campaign, path, f"{action.text}\n{last}")
    return [section] if section else []


def _report_state(report):
    """Add the state lines the selection left out to what the report says was dropped."""
    for item in report["sections"]:
        if item["key"] == "state":
            report["dropped"] += [
                {"key": "state", "what": component["text"], "tokens": tokens.count(component["text"]),
                 "reason": "beyond the state section's line limit"}
                for component in item["components"] if not component["included"]
            ]


def _dynamic_tail(action):
    tail = []
    if action.direction.strip():
        tail.append(Section("direction", "One-turn direction", "player direction", DYNAMIC_TAIL,
                            layers.render_direction(action.direction), protected=True))
    tail.append(Section("player_input", "Player input", "player input", DYNAMIC_TAIL,
                        layers.render_action(action.mode, action.text), protected=True,
                        components=[{"type": "action", "mode": action.mode}]))
    return tail


def _history_section(kept):
    rows = [row for unit in reversed(kept) for row in unit.rows]
    messages = [message_for(role, mode, text) for _, _, _, role, mode, text in rows]
    text = "\n\n".join(f"[{m['role']}] {m['content']}" for m in messages)
    section = Section(
        "history", "Recent story (active lineage)", "Level 3 accepted history", BRANCH_CONTEXT, text,
        protected=False,
        tokens=sum(unit.tokens for unit in kept),
        components=[{"type": "node", "id": pk, "depth": depth, "role": role, "tokens": count}
                    for depth, count, pk, role, _, _ in rows],
    )
    return section, messages


def _dropped(path, kept):
    """Return what of the path's history found no room, with its exact cost, from one row."""
    oldest_kept = kept[-1].depths[0] if kept else path.head_depth + 1
    if oldest_kept == 0:
        return []
    # One node per depth along a path: depths 0 .. oldest_kept - 1 were left out.
    through = path.nodes().values_list("tokens_through", flat=True).get(depth=oldest_kept - 1)
    return [{
        "key": "history",
        "what": f"{oldest_kept} older passage(s), depths 0–{oldest_kept - 1}",
        "tokens": through + oldest_kept * budget.MESSAGE_OVERHEAD,
        "reason": "no room left in the history allowance",
    }]


def _report(campaign, path, action, sections, protected, allowance, history, dropped, model, api, seed):
    prompt_tokens = protected + history.tokens
    reserve = budget.reply_reserve(campaign.max_output_tokens)
    return {
        "version": REPORT_VERSION,
        "model": model,
        "api": api,
        "settings": {
            "num_ctx": campaign.context_token_budget,
            "num_predict": campaign.max_output_tokens,
            "temperature": campaign.temperature,
            "seed": seed,
        },
        "branch": path.head_branch_id,
        "head_depth": path.head_depth,
        "action": {"mode": action.mode, "text": action.text, "direction": action.direction},
        "budget": {
            "context_token_budget": campaign.context_token_budget,
            "reply_reserve": reserve,
            "protected_tokens": protected,
            "history_allowance": allowance,
            "history_tokens": history.tokens,
            "prompt_tokens": prompt_tokens,
            "unused": campaign.context_token_budget - reserve - prompt_tokens,
        },
        "sections": [section.as_report() for section in sections],
        "dropped": dropped,
        "usage": {"prompt_eval_count": None, "eval_count": None},
    }
