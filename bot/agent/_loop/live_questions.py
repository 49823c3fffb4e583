"""Questions asked from inside a tool call that keeps running (:attr:`bot.agent.tools.ToolContext.ask_live`).

Some tools can't stop and be called again with the answer: an MCP server on the older protocol generation asks
its question (``elicitation/create``) over the live session, in the middle of ``tools/call``, and waits for the
reply on that session. Such a question is asked like any other (the stream emits ``tool-call-suspended``, the
run records the pending question, its deadline and who may answer), but the run stays ``running`` under this
process's lease and the pending call carries ``live_owner``:

- an answer is claimed exactly once, by the same compare-and-set as every answer, in whichever process receives
  it; the claim leaves the lease with the live process (:meth:`bot.agent._loop.claims.Claims.claim`);
- this process sees the claimed answer in the store (it polls the run every :data:`POLL_EVERY` seconds: an answer
  reaches it through Redis whichever process took it) and the tool call goes on with it;
- at the deadline with no answer the question is closed (a later claim is refused by the store's clock) and the
  tool gets ``None``;
- if this process dies, its lease lapses; whoever continues the run finds the ``live_owner`` call and asks a
  person whether to run it again (an ``interrupted`` approval: it may or may not have run), see
  :mod:`bot.agent._loop.resuming`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, Literal, Protocol

from bot.agent.ask_user import too_many_options
from bot.agent.hooks import NO_HOOKS, RunHooks
from bot.agent.state import PendingCall, ResumeData, RunState, ToolCall, utcnow
from bot.agent.store import RunStore
from bot.agent.stream import (
    AgentStream,
    QuestionClosedChunk,
    QuestionClosedPayload,
    SuspendedChunk,
    SuspendedPayload,
    ToolCallChunk,
    ToolCallPayload,
)
from bot.agent.tools import LiveAsk, Tool, ToolInputError
from bot.errors import RunConflict, RunStopAsked, StoreUnavailable

log = logging.getLogger(__name__)

POLL_EVERY = 0.2  # seconds between two reads of the run while a live question waits
DEFAULT_LIVE_TTL = 300.0  # seconds a live question waits when the agent has no ask_ttl


class StopsKnown(Protocol):
    """What the driver knows of stop requests (:class:`bot.agent._loop.stopping.StopRequests`)."""

    def known(self, run_id: str) -> bool:
        """Whether a stop of ``run_id`` is known."""
        ...

    def asked(self, run_id: str, by: str) -> None:
        """A stop of ``run_id`` was asked by ``by`` (learnt from the store's refusal)."""
        ...


class LiveQuestions:
    """Live questions of one agent: ``owner`` is its lease id, ``tools`` its tools (to show a payload), ``stops``
    what it knows of stop requests (a tool of a run asked to stop asks nobody: its ``ask_live`` returns ``None``, as
    when nobody answers; a stop asked in another process and not learnt yet makes the store refuse the save that
    would ask, ``RunStopAsked``, and then it is known)."""

    def __init__(
        self,
        store: RunStore,
        *,
        owner: str,
        tools: dict[str, Tool],
        poll_every: float = POLL_EVERY,
        hooks: RunHooks = NO_HOOKS,
        stops: StopsKnown | None = None,
    ):
        self.store = store
        self.stops = stops
        self.hooks = hooks  # told of each question asked
        self.owner = owner
        self.tools = tools
        self.poll_every = poll_every

    def asker(
        self,
        state: RunState,
        call: ToolCall,
        args: dict[str, Any],
        out: AgentStream,
        *,
        ttl: float | None,
        max_options: int | None = None,
    ) -> LiveAsk:
        """The ``ask_live`` of the tool call ``call`` (with validated ``args``) of ``state``, which this process
        drives; ``ttl`` (seconds) is how long each question waits; a question offering more than ``max_options``
        is not asked: ``ask_live`` raises ``ToolInputError`` (:func:`~bot.agent.ask_user.too_many_options`), the
        model's to read unless the tool handles it."""

        async def ask(payload: dict[str, Any]) -> ResumeData | None:
            too_many = too_many_options(payload, max_options)
            if too_many is not None:
                raise ToolInputError(too_many)
            return await self._ask(state, call, args, payload, out, ttl=ttl or DEFAULT_LIVE_TTL)

        return ask

    async def _ask(
        self,
        state: RunState,
        call: ToolCall,
        args: dict[str, Any],
        payload: dict[str, Any],
        out: AgentStream,
        *,
        ttl: float,
    ) -> ResumeData | None:
        if self.stops is not None and self.stops.known(state.run_id):
            # the run stops at its next step: nobody is asked for it, the tool goes on
            log.info("run %s: %s asks no question: the run was asked to stop", state.run_id, call.name)
            return None  # as if nobody answered (an MCP server gets cancel)
        now = utcnow()
        state.pending = PendingCall(
            tool_call_id=call.id,
            tool_name=call.name,
            args=args,
            suspend_payload=payload,
            suspended_at=now,
            expires_at=now + timedelta(seconds=ttl),
            live_owner=self.owner,
        )
        try:
            await self._save(state)  # still running: the lease stays with this process
        except RunStopAsked as asked:  # asked in another process, not learnt here yet: nobody is asked
            state.pending = None
            if self.stops is not None:
                self.stops.asked(state.run_id, asked.by)
            log.info("run %s: %s asks no question: the run was asked to stop", state.run_id, call.name)
            return None
        self.hooks.on_asked(state, state.pending)
        tool = self.tools.get(call.name)
        shown = tool.load_suspend_payload(payload) if tool is not None else payload
        pending = state.pending
        out.emit(
            SuspendedChunk(
                state.run_id,
                SuspendedPayload(call.id, call.name, args, shown, pending.expires_at, pending.suspended_at),
            )
        )
        answer: ResumeData | None = None
        try:
            answer = await self._wait(state, call.id)
            if answer is not None:  # the call goes on with it: shown running again (its question cleared that)
                out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, dict(args))))
            return answer
        finally:
            if answer is None:  # no answer: its deadline passed, or the call ended first (e.g. its server died)
                if state.pending is pending:
                    state.pending = None  # nothing waits now; the next save records it
                reason: Literal["expired", "ended"] = "expired" if _past(pending) else "ended"
                closed = QuestionClosedPayload(call.id, call.name, shown, pending.suspended_at, reason)
                out.emit(QuestionClosedChunk(state.run_id, closed))

    async def _wait(self, state: RunState, call_id: str) -> ResumeData | None:
        """Poll the run until its answer is claimed (returns it) or its deadline passes (closes it, returns
        ``None``). Raises ``RunConflict`` when another process took the run over."""
        pending = state.pending
        assert pending is not None and pending.expires_at is not None
        deadline = pending.expires_at
        down = False
        while True:
            await asyncio.sleep(self.poll_every)
            try:
                loaded = await self.store.load(state.run_id)
                past = utcnow() >= deadline and await self.store.now() >= deadline
            except StoreUnavailable as exc:
                if not down:
                    log.warning("run %s: can't read its question's answer (%s); still waiting", state.run_id, exc)
                down = True
                continue
            down = False
            waiting = loaded.pending
            if waiting is not None and waiting.tool_call_id == call_id and waiting.resume is not None:
                _adopt(state, loaded)
                return waiting.resume.resume_data
            if waiting is None or waiting.live_owner != self.owner or loaded.status != "running":
                raise RunConflict(state.run_id)  # someone else moved the run on
            if past:
                state.pending = None
                try:
                    await self._save(state)
                except RunConflict:
                    state.pending = pending  # an answer landed at the same moment: the next read takes it
                    continue
                log.info("run %s: a question asked during a tool call got no answer in time", state.run_id)
                return None

    async def _save(self, state: RunState) -> None:
        saved = await self.store.save(state, owner=self.owner)
        state.revision, state.updated_at = saved.revision, saved.updated_at


def _past(pending: PendingCall) -> bool:
    return pending.expires_at is not None and utcnow() >= pending.expires_at


def _adopt(state: RunState, loaded: RunState) -> None:
    """Take the claim's write into the state this process drives (same object: its caller holds it)."""
    state.revision, state.updated_at = loaded.revision, loaded.updated_at
    state.answers, state.turns, state.error = loaded.answers, loaded.turns, None
    state.pending, state.status = None, "running"
