"""The tool-calling loop: :class:`Agent` with ``stream``, ``resume_stream`` and ``retry_stream``.

A run alternates model turns and tool calls. The tool calls of one assistant message run in order; the
first that suspends stops the batch (finished results are kept, the rest stay queued and run after the
resume). Before every model request each ``tool_call_id`` of the conversation has exactly one ``tool``
message. State is saved on every transition that matters (created, suspended, claimed, completed,
failed), never in between, so a resume costs three Redis round trips: load, claim, final save.

Failures never escape the run as exceptions: bad tool arguments and tool errors go back to the model as
tool results; a failed model call or the turn limit ends the stream with an ``error`` chunk and leaves the
run ``failed`` but resumable with :meth:`Agent.retry_stream`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.agent.model import ChatModel, TextDelta, TurnDone, parse_arguments
from bot.agent.state import Answer, PendingCall, ResumeData, RunFailure, RunState, ToolCall, utcnow
from bot.agent.stream import (
    AgentStream,
    ErrorPayload,
    FinishPayload,
    SuspendedPayload,
    TextDeltaPayload,
    ToolCallPayload,
    ToolResultPayload,
)
from bot.agent.tools import Tool, ToolContext, ToolInputError, ToolSuspended, tool_result_content
from bot.errors import (
    BotError,
    ModelCallFailed,
    RunAlreadyResumed,
    RunConflict,
    RunNotResumable,
    StoreUnavailable,
    ToolCallNotPending,
)

if TYPE_CHECKING:
    from bot.store.base import RunStore

log = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 20


def new_run_id() -> str:
    """A fresh, unguessable run id: ``run_`` + 22 url-safe characters (128 bits)."""
    return "run_" + secrets.token_urlsafe(16)


class _Suspend(Exception):
    pass


class Agent:
    """An agent: instructions, a model, tools and a run store.

    ``max_turns`` bounds the model turns between two human inputs (start, resume or retry); a run that
    exceeds it stops with an ``error`` chunk. ``stale_after`` (seconds): a run left ``running`` that long
    (its process died) may be continued with :meth:`retry_stream`. ``persist_for`` (seconds): how long a
    save that failed because the store was down keeps being retried in the background.
    """

    def __init__(
        self,
        *,
        id: str,
        name: str,
        instructions: str,
        model: ChatModel,
        tools: Sequence[Tool] = (),
        store: RunStore,
        max_turns: int = DEFAULT_MAX_TURNS,
        stale_after: float = 600.0,
        persist_for: float = 600.0,
    ) -> None:
        self.id = id
        self.name = name
        self.instructions = instructions
        self.model = model
        self.tools = {tool.id: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError("tool ids must be unique")
        self._tool_specs = [tool.spec() for tool in self.tools.values()]  # JSON schema: build once, not per turn
        self.store = store
        self.max_turns = max_turns
        self.stale_after = stale_after
        self.persist_for = persist_for
        self._background: set[asyncio.Task[None]] = set()

    # --- public API ------------------------------------------------------------------------------

    async def stream(
        self,
        input: str | list[dict[str, Any]],
        *,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        history: list[dict[str, Any]] | None = None,
    ) -> AgentStream:
        """Start a run. ``input``: the user's text, or Chat Completions messages. ``history``: earlier
        messages of the conversation (e.g. a finished run's ``messages``). ``metadata``: the caller's, kept
        with the run. Raises ``StoreUnavailable`` or ``RunConflict`` (``run_id`` taken) before anything runs.
        """
        messages = list(history or [])
        messages += [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        state = RunState(
            run_id=run_id or new_run_id(), agent_id=self.id, messages=messages, metadata=dict(metadata or {})
        )
        state = await self.store.create(state)
        return self._launch(state)

    async def resume_stream(
        self,
        resume_data: ResumeData,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        answered_by: str | None = None,
        loaded: RunState | None = None,
    ) -> AgentStream:
        """Answer the pending tool call of a suspended run and continue it.

        ``loaded``: the run as the caller just loaded it, to save a round trip (the claim is still a
        compare-and-set, so a stale copy only makes this call lose with ``RunAlreadyResumed``).

        Exactly one resume per ``(run_id, tool_call_id)`` wins, across processes. Raises, before
        anything changes: ``RunNotFound`` (unknown or expired), ``RunAlreadyResumed`` (answered already:
        by whom, when), ``ToolCallNotPending`` (another question is pending), ``AnswerError`` (wrong shape,
        blank, label not offered), ``RunNotResumable``, ``StoreUnavailable``.
        """
        state = loaded if loaded is not None and loaded.run_id == run_id else await self.store.load(run_id)
        pending = self._check_resumable(state, tool_call_id)
        tool = self._tool(state.run_id, pending.tool_name)
        data = tool.validate_resume(resume_data, pending.suspend_payload)
        answer = Answer(
            tool_call_id=pending.tool_call_id, resume_data=data, answered_by=answered_by, answered_at=utcnow()
        )
        claimed = state.model_copy(
            update={
                "status": "running",
                "pending": pending.model_copy(update={"resume": answer}),
                "answers": [*state.answers, answer],
                "error": None,
                "turns": 0,
            }
        )
        try:
            claimed = await self.store.save(claimed)
        except RunConflict:
            winner = (await self.store.load(run_id)).answer_for(pending.tool_call_id)
            raise RunAlreadyResumed(
                run_id=run_id,
                tool_call_id=pending.tool_call_id,
                answered_by=winner.answered_by if winner else None,
                answered_at=winner.answered_at if winner else None,
            ) from None
        return self._launch(claimed)

    async def retry_stream(self, *, run_id: str, stale_after: float | None = None) -> AgentStream:
        """Continue a run that stopped on an error (model failure, turn limit) or whose process died while
        it was running (older than ``stale_after``), without asking anything again.

        ``stale_after`` overrides the agent's threshold, for a caller that knows the process running it is
        gone (e.g. a work queue that reclaimed the job from a dead worker).

        Raises ``RunNotFound``, ``RunNotResumable`` (suspended, completed, running, or another process
        retried first), ``StoreUnavailable``.
        """
        state = await self.store.load(run_id)
        if state.status != "failed" and not self.is_stale(state, stale_after=stale_after):
            why = {
                "suspended": "it waits for an answer; resume it instead",
                "completed": "it has finished",
                "running": "it is running",
            }.get(state.status, "")
            raise RunNotResumable(run_id, state.status, why)
        try:
            claimed = await self.store.save(state.model_copy(update={"status": "running", "error": None, "turns": 0}))
        except RunConflict:
            raise RunNotResumable(run_id, "running", "another process retried it first") from None
        return self._launch(claimed)

    async def get_run(self, run_id: str) -> RunState:
        """The stored state of a run. Raises ``RunNotFound``, ``StoreUnavailable``."""
        return await self.store.load(run_id)

    # --- the loop --------------------------------------------------------------------------------

    def _check_resumable(self, state: RunState, tool_call_id: str | None) -> PendingCall:
        pending = state.pending
        asked = tool_call_id or (pending.tool_call_id if pending else None)
        answered = state.answer_for(asked)
        if state.status == "suspended" and pending is not None and pending.resume is None:
            if tool_call_id is None or tool_call_id == pending.tool_call_id:
                return pending
            if answered is None:
                raise ToolCallNotPending(
                    run_id=state.run_id, tool_call_id=tool_call_id, pending_tool_call_id=pending.tool_call_id
                )
        if answered is not None:
            raise RunAlreadyResumed(
                run_id=state.run_id,
                tool_call_id=asked,
                answered_by=answered.answered_by,
                answered_at=answered.answered_at,
            )
        raise RunNotResumable(state.run_id, state.status, "it is not waiting for an answer")

    def _tool(self, run_id: str, name: str) -> Tool:
        tool = self.tools.get(name)
        if tool is None:
            raise RunNotResumable(run_id, "suspended", f"this agent has no tool {name!r}")
        return tool

    def _launch(self, state: RunState) -> AgentStream:
        stream = AgentStream(state.run_id)
        stream._start(self._drive(state, stream))
        return stream

    async def _drive(self, state: RunState, out: AgentStream) -> RunState | None:
        try:
            try:
                state = await self._advance(state, out)
            except _Suspend:
                state = await self._save_final(state)
                assert state.pending is not None
                out.emit("tool-call-suspended", self._suspended_payload(state.pending))
                out.emit("finish", FinishPayload(status="suspended", text=_last_text(state)))
                return state
            except ModelCallFailed as exc:
                state.status, state.error = "failed", RunFailure(kind="model", message=str(exc))
                state = await self._save_final(state)
                out.emit("error", ErrorPayload(kind="model", message=str(exc)))
                return state
            if state.error is not None:  # turn limit
                failure = state.error
                state = await self._save_final(state)
                out.emit("error", ErrorPayload(kind=failure.kind, message=failure.message))
                return state
            state = await self._save_final(state)
            out.emit("finish", FinishPayload(status="completed", text=_last_text(state)))
            return state
        except StoreUnavailable as exc:
            log.warning("run %s: could not save: %s", state.run_id, exc)
            out.emit("error", ErrorPayload(kind="store", message=str(exc)))
        except BotError as exc:
            log.warning("run %s: %s", state.run_id, exc)
            out.emit("error", ErrorPayload(kind="store", message=str(exc)))
        except Exception:
            log.exception("run %s: internal error", state.run_id)
            out.emit("error", ErrorPayload(kind="internal", message="internal error in the agent runtime"))
        return None

    async def _save_final(self, state: RunState) -> RunState:
        """Save the state a segment ends in. A store outage is retried quickly (a blip costs < 2 s); if it
        lasts, the segment still ends as computed (the person sees the reply or question) and the save goes
        on in the background with backoff for up to ``persist_for`` seconds, so nothing is lost once the
        store is back. A conflict (another process took the run over) or an expired run still raises."""
        for pause in (0.2, 0.5, 1.0, None):
            try:
                return await self._save_once(state)
            except StoreUnavailable as exc:
                if pause is None:
                    log.warning("run %s: could not save (%s); saving in the background", state.run_id, exc)
                    task = asyncio.ensure_future(self._persist_later(state))
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)
                    return state
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def _save_once(self, state: RunState) -> RunState:
        """One save. A conflict right after an outage may be our own write whose reply was lost: if the
        stored run is exactly the state we wrote, that save succeeded."""
        try:
            return await self.store.save(state)
        except RunConflict:
            stored = await self.store.load(state.run_id)
            mine = state.model_copy(update={"revision": state.revision + 1, "updated_at": stored.updated_at})
            if stored == mine:
                return stored
            raise

    async def _persist_later(self, state: RunState) -> None:
        pause, deadline = 2.0, asyncio.get_running_loop().time() + self.persist_for
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(pause)
            try:
                await self._save_once(state)
                log.info("run %s: saved after the store came back", state.run_id)
                return
            except StoreUnavailable:
                pause = min(pause * 2, 30.0)
            except BotError as exc:  # taken over or expired meanwhile: the newer state wins
                log.warning("run %s: background save abandoned: %s", state.run_id, exc)
                return
        log.error("run %s: could not be saved for %.0f s; its last step is lost", state.run_id, self.persist_for)

    def is_stale(self, state: RunState, *, stale_after: float | None = None) -> bool:
        """True for a run left ``running`` longer than ``stale_after`` seconds (default: the agent's) - its
        process died or lost the store."""
        limit = self.stale_after if stale_after is None else stale_after
        return state.status == "running" and utcnow() - state.updated_at > timedelta(seconds=limit)

    @staticmethod
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

    async def _advance(self, state: RunState, out: AgentStream) -> RunState:
        """Run until the model answers without tool calls (returns), a tool suspends (raises ``_Suspend``
        with ``state`` updated in place) or the model fails (raises ``ModelCallFailed``)."""
        if state.pending is not None:
            pending, state.pending = state.pending, None
            call = ToolCall(id=pending.tool_call_id, name=pending.tool_name, arguments="")
            await self._run_call(state, call, pending.args, out, resume=pending.resume)
        while True:
            while state.queued:
                call = state.queued.pop(0)
                try:
                    args = parse_arguments(call.arguments)
                except ValueError as exc:
                    out.emit("tool-call", ToolCallPayload(call.id, call.name, {}))
                    self._add_result(state, call, {"error": f"{call.name}: {exc}"}, out, is_error=True)
                    continue
                out.emit("tool-call", ToolCallPayload(call.id, call.name, args))
                await self._run_call(state, call, args, out, resume=None)
            if state.turns >= self.max_turns:
                state.status = "failed"
                state.error = RunFailure(
                    kind="max_turns", message=f"stopped after {self.max_turns} model turns without finishing"
                )
                return state
            _check_tool_messages(state.messages)
            turn = await self._model_turn(state, out)
            calls = _unique_ids(turn.tool_calls, state.messages)
            state.turns += 1
            message: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
            if calls:
                message["tool_calls"] = [c.to_message_part() for c in calls]
            state.messages.append(message)
            if not calls:
                state.status = "completed"
                return state
            state.queued = calls

    async def _run_call(
        self, state: RunState, call: ToolCall, args: dict[str, Any], out: AgentStream, *, resume: Answer | None
    ) -> None:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            self._add_result(state, call, {"error": f"unknown tool {call.name!r}; tools: {known}"}, out, is_error=True)
            return
        ctx = ToolContext(
            run_id=state.run_id,
            tool_call_id=call.id,
            resume_data=resume.resume_data if resume else None,
            answered_by=resume.answered_by if resume else None,
            metadata=state.metadata,
        )
        try:
            result = await tool.execute(args, ctx)
        except ToolSuspended as signal:
            state.pending = PendingCall(
                tool_call_id=call.id,
                tool_name=call.name,
                args=args,
                suspend_payload=signal.payload,
                suspended_at=utcnow(),
            )
            state.status = "suspended"
            raise _Suspend() from None
        except ToolInputError as exc:
            self._add_result(state, call, {"error": str(exc)}, out, is_error=True)
            return
        except Exception as exc:
            log.warning("run %s: tool %s raised %s", state.run_id, call.name, type(exc).__name__)
            self._add_result(
                state, call, {"error": f"tool {call.name} failed: {type(exc).__name__}: {exc}"}, out, is_error=True
            )
            return
        self._add_result(state, call, result, out)

    @staticmethod
    def _add_result(state: RunState, call: ToolCall, result: Any, out: AgentStream, *, is_error: bool = False) -> None:
        state.messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_result_content(result)})
        out.emit("tool-result", ToolResultPayload(call.id, call.name, result, is_error))

    async def _model_turn(self, state: RunState, out: AgentStream) -> TurnDone:
        messages = [{"role": "system", "content": self.instructions}, *state.messages]
        done: TurnDone | None = None
        try:
            async for event in self.model.stream_turn(messages, tools=self._tool_specs):
                if isinstance(event, TextDelta):
                    out.emit("text-delta", TextDeltaPayload(event.text))
                else:
                    done = event
        except ModelCallFailed:
            raise
        except Exception as exc:  # a model adapter's bug must not strand the run
            log.exception("run %s: model adapter raised", state.run_id)
            raise ModelCallFailed(f"model adapter error: {type(exc).__name__}") from None
        if done is None:
            raise ModelCallFailed("the model stream ended without finishing the turn")
        return done

    def _suspended_payload(self, pending: PendingCall) -> SuspendedPayload:
        tool = self.tools.get(pending.tool_name)
        payload = tool.load_suspend_payload(pending.suspend_payload) if tool else pending.suspend_payload
        return SuspendedPayload(pending.tool_call_id, pending.tool_name, pending.args, payload)


def _unique_ids(calls: list[ToolCall], messages: list[dict[str, Any]]) -> list[ToolCall]:
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


def _check_tool_messages(messages: list[dict[str, Any]]) -> None:
    """Chat Completions invariant: every assistant ``tool_calls[].id`` has exactly one ``tool`` message.

    Raises ``AssertionError`` (a bug in the loop, never user input) when it does not hold.
    """
    wanted = [c["id"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    answered = [str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"]
    if sorted(wanted) != sorted(answered):
        raise AssertionError(f"tool messages do not match tool calls: {wanted} vs {answered}")


def _last_text(state: RunState) -> str:
    for message in reversed(state.messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""
