"""One model turn of a run (:func:`model_turn`, made with a :class:`ModelTurns`): the model's stream read to its
end, its text passed on, its size and time bounded, its ending judged (:mod:`bot.agent.model.endings`);
:func:`budgeted_turn`: that turn over the run's history fitted to the token budget, never sent when the budget says
it is over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from bot.agent._loop.budget import HistoryBudget, Request, message_tokens
from bot.agent.hooks import RunHooks
from bot.agent.model import ChatModel, TextDelta, TurnDone
from bot.agent.model.endings import ending_of
from bot.agent.state import RunState
from bot.agent.stream import AgentStream, TextDeltaChunk, TextDeltaPayload
from bot.errors import ContextTooLong, ModelCallFailed, NoReply, RequestOverBudget

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ModelTurns:
    """What every model turn of a run is made with: the ``model`` (:class:`~bot.agent.model.ChatModel`), the agent's
    ``instructions`` (the system prompt), the token ``budget`` of a request (:class:`~bot.agent._loop.budget.HistoryBudget`),
    the ``tools`` offered (their JSON schemas) and their estimated ``tools_tokens``, the bounds of one turn
    (``turn_timeout`` seconds, ``max_reply_chars`` characters; None: unbounded) and the ``hooks`` told of it."""

    model: ChatModel
    instructions: str
    budget: HistoryBudget
    tools: list[dict[str, Any]]
    tools_tokens: int
    turn_timeout: float | None
    max_reply_chars: int | None
    hooks: RunHooks


async def model_turn(setup: ModelTurns, messages: list[dict[str, Any]], *, run_id: str, out: AgentStream) -> TurnDone:
    """One model turn of run ``run_id`` over ``messages`` (system prompt first), offering ``setup.tools``, its text
    streamed to ``out`` as ``text-delta`` chunks, bounded: at most ``setup.turn_timeout`` seconds and
    ``setup.max_reply_chars`` characters of text (a server that streams forever must not hold the thread nor fill
    it). A turn that ended for another reason than ``stop`` (:func:`bot.agent.model.endings.ending_of`) is counted; without
    any text it raises :class:`NoReply`. Raises ``ModelCallFailed``. Told to ``setup.hooks`` (the Slack bot's measure
    it: ``askbot_model_turn_seconds``, failures by kind, a span)."""
    model, tools, hooks = setup.model, setup.tools, setup.hooks
    turn_timeout, max_reply_chars = setup.turn_timeout, setup.max_reply_chars
    with hooks.model_turn(run_id):
        done: TurnDone | None = None
        chars = 0
        try:
            events = model.stream_turn(messages, tools=tools)
            async with asyncio.timeout(turn_timeout), _closing(events):
                async for event in events:
                    if isinstance(event, TextDelta):
                        chars += len(event.text)
                        if max_reply_chars is not None and chars > max_reply_chars:
                            raise ModelCallFailed(f"the reply went past {max_reply_chars} characters", kind="too_long")
                        out.emit(TextDeltaChunk(run_id, TextDeltaPayload(event.text)))
                    else:
                        done = event
        except ModelCallFailed:
            raise
        except TimeoutError:
            raise ModelCallFailed(
                f"the model took longer than {turn_timeout:g} s for one turn", kind="timeout"
            ) from None
        except Exception as exc:  # a model adapter's bug must not strand the run
            log.exception("run %s: model adapter raised", run_id)
            raise ModelCallFailed(f"model adapter error: {type(exc).__name__}", kind="adapter") from None
        if done is None:
            raise ModelCallFailed("the model stream ended without finishing the turn", kind="incomplete")
        if max_reply_chars is not None:
            size = chars + sum(len(c.arguments) for c in done.tool_calls) + len(json.dumps(done.extra, default=str))
            if size > 2 * max_reply_chars:  # tool arguments and reasoning count too (the run stores them)
                raise ModelCallFailed(f"the turn's output went past {2 * max_reply_chars} characters", kind="too_long")
        ending = ending_of(done)
        if ending is not None:
            hooks.on_turn_ended(ending.kind)
            log.info("run %s: the model turn ended with finish_reason %r", run_id, (done.finish_reason or "")[:64])
            if not ending.has_text:
                raise NoReply(ending.why, finish_reason=done.finish_reason)
        return done


@contextlib.asynccontextmanager
async def _closing(events: AsyncIterator[Any]) -> AsyncIterator[None]:
    """Close an async generator of model events however the ``async for`` over it ends (timeout, limit, error)."""
    try:
        yield
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


async def budgeted_turn(setup: ModelTurns, state: RunState, *, out: AgentStream) -> TurnDone:
    """:func:`model_turn` over ``state.messages`` after ``setup.instructions``, fitted to ``setup.budget`` (oldest
    turns left out, see
    :mod:`bot.agent._loop.budget`); the stored history is cut first when it is past its bound (``state.messages`` is
    replaced). A request the budget computes to be over it even with every older turn left out is not sent:
    ``RequestOverBudget`` (a ``ContextTooLong``). The server's ``prompt_tokens`` calibrates later estimates. A
    context-length refusal teaches the model's window and is tried once more with a smaller budget (the window's
    80 %, or half the refused request), when that leaves more out; otherwise, and when the budget is off,
    ``ContextTooLong`` is raised. Raises ``ModelCallFailed``."""
    instructions, budget, tools_tokens, hooks = setup.instructions, setup.budget, setup.tools_tokens, setup.hooks
    sizes: list[int] | None = [message_tokens(m) for m in state.messages] if budget.budget is not None else None
    bounded = budget.bound_stored(state.messages, sizes)
    if bounded is not None:
        log.info("run %s: stored history cut from %d to %d messages", state.run_id, len(state.messages), len(bounded))
        state.messages, sizes = bounded, None
    calibration, name = budget.calibration, budget.model
    request = budget.request(instructions, state.messages, tools_tokens=tools_tokens, sizes=sizes)
    for attempt in (1, 2):
        _refuse_over_budget(request, budget, run_id=state.run_id, hooks=hooks)
        try:
            turn = await model_turn(setup, request.messages, run_id=state.run_id, out=out)
        except ContextTooLong as exc:
            if exc.limit:
                calibration.learn_limit(name, exc.limit)
            if exc.prompt_tokens:
                calibration.observe(name, estimated=request.estimated, reported=exc.prompt_tokens)
            smaller = budget.effective()
            if attempt == 2 or smaller is None:
                raise
            if exc.limit is None:
                smaller = min(smaller, int(request.estimated * calibration.ratio(name)) // 2)
            retry = budget.request(instructions, state.messages, tools_tokens=tools_tokens, budget=smaller)
            if retry.left_out <= request.left_out:  # only what must be sent is left: the same refusal again
                raise
            log.info(
                "run %s: too long for the model; trying again with %d messages left out", state.run_id, retry.left_out
            )
            request = retry
            continue
        if turn.prompt_tokens:
            calibration.observe(name, estimated=request.estimated, reported=turn.prompt_tokens)
        return turn
    raise AssertionError("unreachable")


def _refuse_over_budget(request: Request, budget: HistoryBudget, *, run_id: str, hooks: RunHooks) -> None:
    """Raise :class:`RequestOverBudget` (counted, not sent) when ``request`` estimates past its budget."""
    over = budget.over(request)
    if over is not None:
        estimated, allowed = over
        exc = RequestOverBudget(estimated=estimated, budget=allowed)
        log.warning("run %s: not sent: %s", run_id, exc)
        hooks.on_request_refused(exc)
        raise exc
