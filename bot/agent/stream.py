"""Stream chunks and :class:`AgentStream`, the handle a run's caller iterates.

A chunk is one of the classes below, told apart by ``chunk.type`` (a discriminated union: ``match chunk:`` on
the class, or compare ``chunk.type``); each has ``run_id`` and a ``payload``:

- ``text-delta``: :class:`TextDeltaChunk`, payload :class:`TextDeltaPayload` ``(text)``
- ``tool-call``: :class:`ToolCallChunk`, payload :class:`ToolCallPayload` ``(tool_call_id, tool_name, args)``:
  a call starts (an approved call again in the segment its approval starts, as it runs)
- ``tool-result``: :class:`ToolResultChunk`, payload :class:`ToolResultPayload`
  ``(tool_call_id, tool_name, result, is_error)``
- ``tool-call-suspended``: :class:`SuspendedChunk`, payload :class:`SuspendedPayload`
  ``(tool_call_id, tool_name, args, suspend_payload)``
- ``tool-call-approval``: :class:`ApprovalChunk`, payload :class:`ApprovalPayload`
  ``(tool_call_id, tool_name, args, description, interrupted)``: the call waits for
  ``Agent.approve_tool_call`` / ``decline_tool_call`` (``interrupted``: an approved run of it was cut short by a
  crash; it may or may not have run)
- ``tool-call-question-closed``: :class:`QuestionClosedChunk`, payload :class:`QuestionClosedPayload`
  ``(tool_call_id, tool_name, suspend_payload, asked_at, reason)``: a question a running tool asked
  (``tool-call-suspended`` while the run goes on) ended without an answer
- ``finish``: :class:`FinishChunk`, payload :class:`FinishPayload` ``(status, text, ending)``; ``status`` is
  ``completed``, ``suspended``, ``handed_off`` (the answer went to the process whose tool call asked the
  question live; that process continues the run and its stream shows the rest) or ``stopped`` (a person asked it
  to stop: ``Agent.stop``); ``ending``: why a completed run's last text is incomplete (its model turn ended for
  another reason than ``stop``: :class:`bot.agent.model.endings.Ending`), else None
- ``error``: :class:`ErrorChunk`, payload :class:`ErrorPayload` ``(kind, message)``; the run is left resumable
  where possible (``kind`` is an :data:`ErrorKind`)

Every stream ends with exactly one ``finish`` or ``error`` chunk.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from bot.agent.model.endings import Ending
from bot.agent.state import RunState

ErrorKind = Literal["model", "no_reply", "context_length", "max_turns", "store", "superseded", "internal"]
"""``model``: the model call failed; ``no_reply``: the model ended its turn without text or tool calls for another
reason than ``stop`` (its length limit, a content filter, ...: :class:`bot.errors.NoReply`; asking again may
help); ``context_length``: the model refused the conversation as longer than its context window, or the token
budget refused to send it (:class:`bot.errors.RequestOverBudget`), even with its oldest turns left out (the same
request would fail again); ``max_turns``: too many
turns without human input; ``store``: the run could not be saved; ``superseded``: another process took the run
over (its result is the one shown); ``internal``: a bug in the runtime."""


@dataclass(frozen=True)
class TextDeltaPayload:
    text: str


@dataclass(frozen=True)
class ToolCallPayload:
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    plan: tuple[tuple[str, str], ...] = ()  # on the first call of a turn that made several: (id, name) of each


@dataclass(frozen=True)
class ToolResultPayload:
    """A tool call's outcome: ``result`` as the tool gave it (or the error's text, ``is_error``); ``stopped``: the
    run was stopped before the call ran (``result`` is then ``{"status": "stopped"}``)."""

    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool = False
    stopped: bool = False


@dataclass(frozen=True)
class SuspendedPayload:
    """``suspend_payload`` is the tool's suspend schema object (for ask_user: ``AskUserPayload``)."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    suspend_payload: BaseModel | dict[str, Any]
    expires_at: datetime | None = None  # the answer's deadline
    asked_at: datetime | None = None  # when this question was asked (a tool call may ask more than once)


@dataclass(frozen=True)
class ApprovalPayload:
    """A tool call waiting for a person's approval: its validated ``args`` and the tool's ``description``;
    ``batch``: the other calls of the same turn waiting with it (each decided on its own, keyed by its
    ``tool_call_id``: :meth:`bot.agent.agent.Agent.resume`), empty when it waits alone."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    description: str
    interrupted: bool = False
    expires_at: datetime | None = None  # the decision's deadline
    asked_at: datetime | None = None  # when it was asked (an interrupted call is asked again)
    edited: Edited | None = None  # a person changed the arguments before approving (``args``: the new ones)
    editable: bool = True  # the call can take edited arguments (False: a framework's that takes none)
    policy: dict[str, Any] = field(default_factory=dict)  # the approval gate's notes (GateVerdict.notes)
    batch: tuple[ApprovalPayload, ...] = ()


@dataclass(frozen=True)
class Edited:
    """A pending approval's arguments changed by a person: ``by`` (their id), ``before`` (the arguments the model
    sent, validated: the first ones when edited more than once), ``n`` (how many edits so far, from 1)."""

    by: str
    before: dict[str, Any]
    n: int = 1


@dataclass(frozen=True)
class QuestionClosedPayload:
    """A question asked live by a running tool (:mod:`bot.agent._loop.live_questions`) that ended without an answer:
    ``reason`` ``expired`` (its deadline passed) or ``ended`` (the tool call ended first)."""

    tool_call_id: str
    tool_name: str
    suspend_payload: BaseModel | dict[str, Any]
    asked_at: datetime | None
    reason: Literal["expired", "ended"]


@dataclass(frozen=True)
class FinishPayload:
    status: Literal["completed", "suspended", "handed_off", "stopped"]
    text: str
    ending: Ending | None = None  # a completed run's last text is incomplete, and why
    stopped_by: str = ""  # a stopped run: who asked it to stop ("" when unknown)


@dataclass(frozen=True)
class ErrorPayload:
    kind: ErrorKind
    message: str


@dataclass(frozen=True)
class TextDeltaChunk:
    run_id: str
    payload: TextDeltaPayload
    type: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True)
class ToolCallChunk:
    run_id: str
    payload: ToolCallPayload
    type: Literal["tool-call"] = "tool-call"


@dataclass(frozen=True)
class ToolResultChunk:
    run_id: str
    payload: ToolResultPayload
    type: Literal["tool-result"] = "tool-result"


@dataclass(frozen=True)
class SuspendedChunk:
    run_id: str
    payload: SuspendedPayload
    type: Literal["tool-call-suspended"] = "tool-call-suspended"


@dataclass(frozen=True)
class ApprovalChunk:
    run_id: str
    payload: ApprovalPayload
    type: Literal["tool-call-approval"] = "tool-call-approval"


@dataclass(frozen=True)
class QuestionClosedChunk:
    run_id: str
    payload: QuestionClosedPayload
    type: Literal["tool-call-question-closed"] = "tool-call-question-closed"


@dataclass(frozen=True)
class FinishChunk:
    run_id: str
    payload: FinishPayload
    type: Literal["finish"] = "finish"


@dataclass(frozen=True)
class ErrorChunk:
    run_id: str
    payload: ErrorPayload
    type: Literal["error"] = "error"


Chunk = (
    TextDeltaChunk
    | ToolCallChunk
    | ToolResultChunk
    | SuspendedChunk
    | ApprovalChunk
    | QuestionClosedChunk
    | FinishChunk
    | ErrorChunk
)
"""One event of a run's stream (see the module docstring)."""

_END = object()


class AgentStream:
    """The stream of one run segment (start, resume or retry). Single consumer.

    The run executes in a background task whether or not anyone iterates; chunks are buffered.
    ``async for chunk in stream`` yields :data:`Chunk` objects; ``stream.text_stream`` only the text;
    ``await stream.result()`` waits for the end and returns the last saved :class:`RunState` (``None`` if
    the final save failed). ``handed_off``: the stream of a claim whose run goes on in another segment (the one
    whose tool call asked): it only says so (one ``finish`` chunk, ``handed_off``). ``waiting``: the stream of a
    decision on one call of a batch of approvals while others still wait (one ``finish`` chunk, ``suspended``).
    """

    def __init__(self, run_id: str, *, handed_off: bool = False, waiting: bool = False) -> None:
        self.run_id = run_id
        self.handed_off = handed_off
        self.waiting = waiting
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[RunState | None] | None = None

    def _start(self, body: Awaitable[RunState | None]) -> None:
        async def runner() -> RunState | None:
            return await body

        def ended(_task: asyncio.Task[RunState | None]) -> None:
            if inspect.iscoroutine(body):
                body.close()  # a task cancelled before it started never ran its coroutine
            self._queue.put_nowait(_END)  # also then: consumers must not wait forever

        self._task = asyncio.ensure_future(runner())
        self._task.add_done_callback(ended)

    def emit(self, chunk: Chunk) -> None:
        """Queue a chunk (used by the agent)."""
        self._queue.put_nowait(chunk)

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            yield item

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """Only the text deltas, as strings."""

        async def texts() -> AsyncIterator[str]:
            async for chunk in self:
                if isinstance(chunk, TextDeltaChunk):
                    yield chunk.payload.text

        return texts()

    async def result(self) -> RunState | None:
        """Wait for the run segment to end; the last saved state (``None`` if it could not be saved)."""
        assert self._task is not None
        return await asyncio.shield(self._task)

    async def collect(self) -> list[Chunk]:
        """Consume the rest of the stream and return its chunks."""
        return [chunk async for chunk in self]
