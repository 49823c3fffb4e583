"""A run's conversation history (Chat Completions messages): its invariants and where it can be continued."""

from __future__ import annotations

import secrets
from typing import Any

from bot.agent.state import RunState, ToolCall


def history_of(state: RunState) -> list[dict[str, Any]]:
    """The run's messages up to its last consistent point, to continue the conversation in a new run:
    a trailing assistant message whose tool calls are not all answered is dropped with its partial
    tool results (Chat Completions rejects unanswered ``tool_call_id``s)."""
    messages = list(state.messages)
    for i in range(len(messages) - 1, -1, -1):
        calls = messages[i].get("tool_calls") if messages[i].get("role") == "assistant" else None
        if calls:
            answered = {m.get("tool_call_id") for m in messages[i + 1 :] if m.get("role") == "tool"}
            if not {c["id"] for c in calls} <= answered:
                return messages[:i]
            break
    return messages


def unique_ids(calls: list[ToolCall], messages: list[dict[str, Any]]) -> list[ToolCall]:
    """The turn's tool calls with every ``tool_call_id`` unique within the run.

    Some OpenAI-compatible servers omit ids or reuse ``call_0`` every turn; answers are matched to questions
    by ``tool_call_id`` (across processes and late clicks), so a repeated or empty id is replaced by a fresh one.
    """
    used = {c["id"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []}
    out = []
    for call in calls:
        if not call.id or call.id in used:
            call = call.model_copy(update={"id": "call_" + secrets.token_hex(12)})
        used.add(call.id)
        out.append(call)
    return out


def check_tool_messages(messages: list[dict[str, Any]]) -> None:
    """Chat Completions invariant: every assistant ``tool_calls[].id`` has exactly one ``tool`` message.

    Raises ``AssertionError`` (a bug in the loop, never user input) when it does not hold.
    """
    wanted = [c["id"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    answered = [str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"]
    if sorted(wanted) != sorted(answered):
        raise AssertionError(f"tool messages do not match tool calls: {wanted} vs {answered}")
