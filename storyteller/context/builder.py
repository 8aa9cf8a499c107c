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

from campaigns.models import CanonRule, Node

from .. import tokens
from . import budget, layers
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


def message_for(role, mode, text):
    """Return the chat message a stored node becomes in the prompt."""
    if role == Node.Role.PLAYER:
        return {"role": "user", "content": layers.render_action(mode, text)}
    return {"role": "assistant", "content": text}


def node_tokens(role, mode, text):
    """Return the token count stored on a node at commit, so builds never re-count history."""
    return tokens.count(message_for(role, mode, text)["content"])


def build(campaign, path, action, *, model="", api="", seed=None):
    """Return the Context for ``action`` played after the end of ``path``.

    Raise ``ContextOverflow`` when the protected sections and the reply reserve
    do not fit ``campaign.context_token_budget``.
    """
    stable = [layers.narrator_rules(campaign), layers.campaign_profile(campaign)]
    canon = layers.canon(list(CanonRule.objects.filter(campaign=campaign, enabled=True)))
    if canon:
        stable.append(canon)
    tail = _dynamic_tail(action)
    for section in stable + tail:
        section.tokens = tokens.count(section.text)

    system_text = "\n\n".join(section.text for section in stable)
    tail_text = "\n\n".join(section.text for section in tail)
    protected = (
        tokens.count(system_text) + tokens.count(tail_text) + 2 * budget.MESSAGE_OVERHEAD
    )
    allowance = budget.history_allowance(campaign.context_token_budget, campaign.max_output_tokens, protected)

    rows = list(path.nodes().order_by("-depth").values_list("depth", "tokens"))
    kept, dropped = budget.select_history(budget.group_turns(rows), allowance)
    history, history_messages = _history_section(path, kept)

    messages = [{"role": "system", "content": system_text}, *history_messages, {"role": "user", "content": tail_text}]
    sections = [*stable, history, *tail]
    report = _report(campaign, path, action, sections, protected, allowance, history, dropped, model, api, seed)
    return Context(messages=messages, sections=sections, report=report)


def _dynamic_tail(action):
    tail = []
    if action.direction.strip():
        tail.append(Section("direction", "One-turn direction", "player direction", DYNAMIC_TAIL,
                            layers.render_direction(action.direction), protected=True))
    tail.append(Section("player_input", "Player input", "player input", DYNAMIC_TAIL,
                        layers.render_action(action.mode, action.text), protected=True,
                        components=[{"type": "action", "mode": action.mode}]))
    return tail


def _history_section(path, kept):
    depths = [depth for unit in kept for depth in unit.depths]
    nodes = []
    if depths:
        nodes = list(
            path.nodes().filter(depth__gte=min(depths)).values_list("id", "depth", "role", "mode", "text", "tokens")
        )
    messages = [message_for(role, mode, text) for _, _, role, mode, text, _ in nodes]
    text = "\n\n".join(f"[{m['role']}] {m['content']}" for m in messages)
    section = Section(
        "history", "Recent story (active lineage)", "Level 3 accepted history", BRANCH_CONTEXT, text,
        protected=False,
        tokens=sum(unit.tokens for unit in kept),
        components=[{"type": "node", "id": pk, "depth": depth, "role": role, "tokens": count}
                    for pk, depth, role, _, _, count in nodes],
    )
    return section, messages


def _report(campaign, path, action, sections, protected, allowance, history, dropped, model, api, seed):
    prompt_tokens = protected + history.tokens
    reserve = budget.reply_reserve(campaign.max_output_tokens)
    dropped_report = []
    if dropped:
        depths = [d for unit in dropped for d in unit.depths]
        dropped_report.append({
            "key": "history",
            "what": f"{len(dropped)} older turn(s), depths {min(depths)}–{max(depths)}",
            "tokens": sum(unit.tokens for unit in dropped),
            "reason": "no room left in the history allowance",
        })
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
        "dropped": dropped_report,
        "usage": {"prompt_eval_count": None, "eval_count": None},
    }
