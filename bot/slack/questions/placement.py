"""Whether a request comes from where a question lives (:func:`misplaced`): one of the question's own messages, of
its current asking, or its run's channel and thread."""

from __future__ import annotations

from bot.agent.state import RunState
from bot.errors import StoreUnavailable
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.notices import NOT_HERE, NOT_OPEN
from bot.store.conversations import ConversationIndex, RunMessages, asked_id


async def misplaced(
    index: ConversationIndex,
    where: Origin,
    ctx: SlackContext,
    *,
    state: RunState,
    call: str,
    shown: RunMessages | None = None,
) -> str | None:
    """Why a request from ``where`` may not act on question ``call`` of ``state`` (None: it may). On a message
    surface it must be one of the messages the bot posted for that question (in its thread, or where it was
    escalated), and of the question's current asking (a call asked again, e.g. an MCP server's next question,
    is not answered by a stale click); otherwise it must come from the run's channel and thread. ``shown``: the
    run's messages, read already (else read here)."""
    if where.surface in ("home", "modal"):
        return None
    elsewhere = where.channel_id != ctx.channel_id or (where.thread_ts and where.thread_ts != ctx.thread_ts)
    if where.surface == "message" and where.message_ts:
        try:
            refs = shown.of(call) if shown is not None else await index.messages(state.run_id, call)
        except StoreUnavailable:  # the claim itself still needs the store; don't refuse for want of this record
            return NOT_HERE if elsewhere else None
        clicked = next((m for m in refs if m.ts == where.message_ts and m.channel_id == where.channel_id), None)
        if clicked is None:
            return NOT_HERE if elsewhere or refs else None
        pending = state.waiting_call(call)  # the pending call, or one of its batch
        now_asked = asked_id(pending.suspended_at) if pending is not None else ""
        if clicked.asked and now_asked and pending is not None and pending.resume is None:
            return NOT_OPEN if clicked.asked != now_asked else None
        return None
    return NOT_HERE if elsewhere else None
