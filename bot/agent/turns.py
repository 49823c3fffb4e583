"""One model turn of a run (:func:`model_turn`): the model's stream read to its end, its text passed on, its size
and time bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from bot.agent.model import ChatModel, TextDelta, TurnDone
from bot.agent.stream import AgentStream, TextDeltaChunk, TextDeltaPayload
from bot.errors import ModelCallFailed

log = logging.getLogger("bot.agent.agent")


async def model_turn(
    model: ChatModel,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]],
    run_id: str,
    out: AgentStream,
    turn_timeout: float | None,
    max_reply_chars: int | None,
) -> TurnDone:
    """One model turn over ``messages`` (system prompt first), its text streamed to ``out`` as ``text-delta``
    chunks, bounded: at most ``turn_timeout`` seconds and ``max_reply_chars`` characters of text (a server that
    streams forever must not hold the thread nor fill it). Raises ``ModelCallFailed``."""
    done: TurnDone | None = None
    chars = 0
    try:
        events = model.stream_turn(messages, tools=tools)
        async with asyncio.timeout(turn_timeout), _closing(events):
            async for event in events:
                if isinstance(event, TextDelta):
                    chars += len(event.text)
                    if max_reply_chars is not None and chars > max_reply_chars:
                        raise ModelCallFailed(f"the reply went past {max_reply_chars} characters")
                    out.emit(TextDeltaChunk(run_id, TextDeltaPayload(event.text)))
                else:
                    done = event
    except ModelCallFailed:
        raise
    except TimeoutError:
        raise ModelCallFailed(f"the model took longer than {turn_timeout:g} s for one turn") from None
    except Exception as exc:  # a model adapter's bug must not strand the run
        log.exception("run %s: model adapter raised", run_id)
        raise ModelCallFailed(f"model adapter error: {type(exc).__name__}") from None
    if done is None:
        raise ModelCallFailed("the model stream ended without finishing the turn")
    if max_reply_chars is not None:
        size = chars + sum(len(c.arguments) for c in done.tool_calls) + len(json.dumps(done.extra, default=str))
        if size > 2 * max_reply_chars:  # tool arguments and reasoning count too (the run stores them)
            raise ModelCallFailed(f"the turn's output went past {2 * max_reply_chars} characters")
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
