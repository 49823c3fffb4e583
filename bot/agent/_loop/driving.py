"""Driving a run in this process: one working segment (:func:`launch`) from its first step to the save that ends it,
and the tool-calling loop inside it (:func:`advance`), as openai-agents' ``Runner`` drives an ``Agent`` it is given.

A segment holds the run's lease (renewed every ``lease_renew_every`` seconds, dropped by its final save) and ends
one of five ways, each saved once and reported on the run's stream: ``completed`` (the model answered without tool
calls), ``suspended`` (a tool asked a person: a ``suspended`` or ``approval`` chunk), ``stopped`` (a person's stop),
``failed`` (the model failed or the turn limit passed: an ``error`` chunk, retryable), or dropped (``superseded``:
another process took the run over; ``store``: it could not be saved). The loop's steps are model turns
(:mod:`bot.agent._loop.turns`) and tool calls (:mod:`bot.agent._loop.tool_calls`), each preceded by a check for a
stop and for the lease (:func:`before_step`).

These functions read the agent as it is at each step (:class:`DrivenAgent`: its limits, hooks and approval gate may
change between two steps, e.g. the playground's timing panel), and call its ``_advance``, which an agent built on
another framework overrides (:class:`bot.frameworks.base.FrameworkAgent`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Protocol

from bot.agent._loop.budget import HistoryBudget
from bot.agent._loop.history import check_tool_messages, unique_ids
from bot.agent._loop.live_questions import LiveQuestions
from bot.agent._loop.resuming import continue_pending, records_an_answer
from bot.agent._loop.saving import RunSaver
from bot.agent._loop.stopping import Stopped, StopRequests, wrap_up
from bot.agent._loop.tool_calls import Suspended, ToolRunner
from bot.agent._loop.toolbox import Toolbox
from bot.agent._loop.turns import ModelTurns, budgeted_turn
from bot.agent.approvals import (
    ApprovalGate,
    GateVerdict,
    approval_payload,
    ask_approval,
    batch_of,
    decided_in_batch,
    decline_at_once,
    run_decided,
    verdict_of,
)
from bot.agent.asking import ASK_ONLY, finish_ask_only
from bot.agent.hooks import RunHooks
from bot.agent.model import ChatModel, parse_arguments
from bot.agent.model.endings import Ending, ending_of
from bot.agent.run_limits import RunLimits
from bot.agent.state import PendingCall, RunFailure, RunState
from bot.agent.store import RunStore
from bot.agent.stream import (
    AgentStream,
    ApprovalChunk,
    ErrorChunk,
    ErrorKind,
    ErrorPayload,
    FinishChunk,
    FinishPayload,
    SuspendedChunk,
    SuspendedPayload,
    ToolCallChunk,
    ToolCallPayload,
)
from bot.agent.tools import Tool
from bot.errors import BotError, ContextTooLong, ModelCallFailed, NoReply, RunConflict, RunStopAsked

log = logging.getLogger(__name__)


class DrivenAgent(Protocol):
    """What driving a run reads of its agent (:class:`bot.agent.Agent` is one), each time it needs it: the ``model``,
    ``instructions``, token ``budget``, ``max_turns`` between two human inputs, ``limits``, ``hooks``, tools (``tools``
    by id, ``toolbox`` for what the model is offered), the ``approval_gate`` and ``require_tool_approval``, the
    ``store`` and this agent's lease id ``owner``, its ``saver``, ``stops`` and ``live`` questions, ``driving`` (run
    id -> the token of the segment this process drives now) and ``_advance`` (the loop: :func:`advance`, or a
    framework's run)."""

    model: ChatModel
    instructions: str
    budget: HistoryBudget
    max_turns: int
    limits: RunLimits
    hooks: RunHooks
    tools: dict[str, Tool]
    toolbox: Toolbox
    approval_gate: ApprovalGate | None
    require_tool_approval: bool
    store: RunStore
    owner: str
    saver: RunSaver
    stops: StopRequests
    live: LiveQuestions
    driving: dict[str, object]

    async def _advance(self, state: RunState, out: AgentStream) -> tuple[RunState, Ending | None]: ...


def launch(agent: DrivenAgent, state: RunState) -> AgentStream:
    """Start driving ``state`` (a run this process just created, claimed or took over) in a task of its own; returns
    its stream. The run counts as driven here (``agent.driving``) from this call until the segment's task is done."""
    stream = AgentStream(state.run_id)
    # driven here from now, before its task starts: a request of this process meanwhile (a second Retry, a
    # mention) never takes it for an orphan of its own (its lease is this process's) and drives it twice
    run_id, token = state.run_id, object()
    agent.driving[run_id] = token
    stream._start(_drive_leased(agent, state, stream))

    def ended(_task: object) -> None:  # also for a task cancelled before it started (its body never ran)
        if agent.driving.get(run_id) is token:  # not a later segment's, launched meanwhile
            del agent.driving[run_id]

    assert stream._task is not None
    stream._task.add_done_callback(ended)
    return stream


async def _drive_leased(agent: DrivenAgent, state: RunState, out: AgentStream) -> RunState | None:
    """Drive the run while renewing its lease; the final save drops the lease."""
    run_id = state.run_id
    ended = asyncio.Event()
    heartbeat = asyncio.ensure_future(agent.saver.keep_lease(state, also=agent.stops.poll, until=ended))
    try:
        async with agent.hooks.run_segment(run_id):
            return await _drive(agent, state, out)
    finally:
        ended.set()
        heartbeat.cancel()
        agent.stops.forget(run_id)


async def _drive(agent: DrivenAgent, state: RunState, out: AgentStream) -> RunState | None:
    run_id, saver = state.run_id, agent.saver
    try:
        try:
            state, ending = await agent._advance(state, out)
        except Suspended:
            stopped_by = agent.stops.take(run_id)  # known by now (e.g. while an approval check ran): nobody asked
            if stopped_by is not None:
                return await _end_stopped(agent, state, out, by=stopped_by)
            try:
                state = await saver.save_final(state)
            except RunStopAsked as asked:  # asked in another process, not learnt here yet: the store refused
                return await _end_stopped(agent, state, out, by=asked.by)
            assert state.pending is not None
            agent.hooks.on_asked(state, state.pending)
            if state.pending.kind == "approval":
                out.emit(ApprovalChunk(run_id, approval_payload(state.pending)))
            else:
                out.emit(SuspendedChunk(run_id, suspended_payload(agent.tools, state.pending)))
            out.emit(FinishChunk(run_id, FinishPayload(status="suspended", text=state.last_text())))
            return state
        except Stopped as stop:
            return await _end_stopped(agent, state, out, by=stop.by)
        except ModelCallFailed as exc:
            state.status, state.error = "failed", RunFailure(kind="model", message=str(exc))
            state = await saver.save_final(state)
            kind: ErrorKind = (
                "context_length"
                if isinstance(exc, ContextTooLong)
                else "no_reply"
                if isinstance(exc, NoReply)
                else "model"
            )
            out.emit(ErrorChunk(run_id, ErrorPayload(kind=kind, message=str(exc))))
            return state
        if state.error is not None:  # turn limit
            failure = state.error
            state = await saver.save_final(state)
            out.emit(ErrorChunk(run_id, ErrorPayload(kind="max_turns", message=failure.message)))
            return state
        state = await saver.save_final(state)
        out.emit(FinishChunk(run_id, FinishPayload(status="completed", text=state.last_text(), ending=ending)))
        return state
    except RunConflict:  # another process took the run over (this one's lease lapsed): its result wins
        log.warning("run %s: taken over by another process; this segment's result is dropped", run_id)
        out.emit(ErrorChunk(run_id, ErrorPayload(kind="superseded", message="continued by another process")))
    except BotError as exc:  # the store is down for good, or the run expired meanwhile
        log.warning("run %s: could not save: %s", run_id, exc)
        out.emit(ErrorChunk(run_id, ErrorPayload(kind="store", message=str(exc))))
    except Exception as exc:
        log.exception("run %s: internal error", run_id)
        message = "internal error in the agent runtime"
        failed = await _failed_inside(
            agent, run_id, message, state=exc.state if isinstance(exc, FailedInside) else None
        )
        out.emit(ErrorChunk(run_id, ErrorPayload(kind="internal", message=message)))
        return failed
    return None


class FailedInside(Exception):
    """An unexpected exception while a run's tool calls went on, with the run made whole again (``state``: the call
    it happened on queued again unless it has its result): what the failed run is saved as."""

    def __init__(self, state: RunState) -> None:
        super().__init__(f"run {state.run_id}: failed inside the runtime")
        self.state = state


def has_result(state: RunState, tool_call_id: str) -> bool:
    """Whether the tool call ``tool_call_id`` of ``state``'s last assistant turn has its result in the messages (a
    model may use an id again in a later turn: only the last turn's results count)."""
    for message in reversed(state.messages):
        if message.get("role") == "assistant":
            return False
        if message.get("role") == "tool" and message.get("tool_call_id") == tool_call_id:
            return True
    return False


async def _failed_inside(agent: DrivenAgent, run_id: str, message: str, *, state: RunState | None) -> RunState | None:
    """Record a run the runtime itself failed (a bug, or a component of one's own that raised: an approval gate, a
    grant's check) as ``failed`` (``error.kind`` ``internal``): not left ``running``, where the next touch of its
    thread would take it for an orphan and run its turn again unasked; Retry continues it. ``state``: the run as
    it was when the failure came between its tool calls, made whole (the calls that ran keep their results, so
    Retry runs none of them again); None: from its last save (a call that ran since then runs again on Retry, as
    after a crash). A run no longer ``running`` as stored (suspended before the failure, taken over) is left as it
    is. Returns the saved state, or None (not recorded: logged)."""
    try:
        failure = RunFailure(kind="internal", message=message)
        if state is None:
            state = await agent.store.load(run_id)
            if state.status != "running":
                return None
        return await agent.saver.save_final(state.model_copy(update={"status": "failed", "error": failure}))
    except Exception:
        log.exception("run %s: could not record its internal error", run_id)
        return None


async def _end_stopped(agent: DrivenAgent, state: RunState, out: AgentStream, *, by: str) -> RunState:
    """End the segment stopped at a person's request (:func:`bot.agent._loop.stopping.wrap_up`) and save it."""
    text = wrap_up(state, out)
    state = await agent.saver.save_final(state)
    out.emit(FinishChunk(state.run_id, FinishPayload(status="stopped", text=text, stopped_by=by)))
    return state


async def advance(agent: DrivenAgent, state: RunState, out: AgentStream) -> tuple[RunState, Ending | None]:
    """The tool-calling loop: run until the model answers without tool calls (returns the state, and why its last
    turn's text is incomplete when it is: :func:`bot.agent.model.endings.ending_of`), a tool suspends (raises
    ``Suspended`` with ``state`` updated in place) or the model fails (raises ``ModelCallFailed``). A stop known
    before a step raises ``Stopped``; the run taken over by another process, ``RunConflict`` (:func:`before_step`)."""
    save_midway = functools.partial(_save_midway, agent)
    if state.pending is not None:
        only_records = ASK_ONLY in state.metadata or records_an_answer(
            state.pending, agent.tools.get(state.pending.tool_name)
        )
        # a stop asked while nobody drove the run (its process died after a claim): the decided call never
        # starts, nor runs again (wrap_up gives it its stopped result); what a person said is kept (an answer; an
        # outside agent's question or approval, whose run does nothing else). Taken over: it must not run twice.
        await before_step(agent, state, stop=not only_records)
        pending, state.pending = state.pending, None
        await continue_pending(_runner(agent, agent.tools), state, pending, out, save=save_midway)
    plan: tuple[tuple[str, str], ...] = ()  # the calls of the turn just made, when it made several
    while True:
        while state.queued:
            await before_step(agent, state)
            call = state.queued.pop(0)
            try:
                try:
                    args = parse_arguments(call.arguments)
                except ValueError as exc:
                    out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, {})))
                    error = {"error": f"{call.name}: {exc}"}
                    _runner(agent, agent.tools).add_result(state, call, error, out, is_error=True)
                    continue
                out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, args, plan=plan)))
                plan = ()
                # the model calls no hidden tool
                runner = _runner(agent, agent.tools if ASK_ONLY in state.metadata else agent.toolbox.offered)
                tool = runner.tools.get(call.name)
                decided = decided_in_batch(state, call, tool)  # asked with an earlier call of the turn, decided
                if decided is not None:
                    await run_decided(runner, state, decided, out, save=save_midway)
                    continue
                gate, agent_wide = agent.approval_gate, agent.require_tool_approval
                verdict = (
                    await verdict_of(gate, tool, args, state, agent_wide=agent_wide, tool_call_id=call.id)
                    if tool is not None
                    else None
                )
                covered = verdict is not None and not verdict.needs_approval and verdict.use is not None
                if covered and verdict is not None and verdict.use is not None and not await verdict.use():
                    # its cover (a grant) went away meanwhile: asked after all, as the rule says
                    verdict = GateVerdict(True, deadline=verdict.deadline, notes=verdict.notes, rule=verdict.rule)
                if tool is not None and verdict is not None and verdict.needs_approval:
                    if verdict.decline is not None:  # nobody could approve it: declined, nobody asked
                        decline_at_once(runner, tool, state, call, args, out, reason=verdict.decline)
                        continue
                    verdicts: dict[str, GateVerdict] = {call.id: verdict}
                    batch = await batch_of(
                        state.queued, runner.tools, state, gate=gate, agent_wide=agent_wide, verdicts=verdicts
                    )
                    ask_approval(
                        runner,
                        tool,
                        state,
                        call,
                        args,
                        out,
                        ask_ttl=verdict.deadline,
                        notes=verdict.notes,
                        batch=batch,
                        verdicts=verdicts,
                    )
                    continue  # it suspended, unless its arguments were invalid
                await runner.run(state, call, args, out)
            except (Suspended, Stopped, BotError):
                raise
            except Exception as exc:  # the runtime's own failure (or a gate's, a grant's of one's own): the call it
                # was on is queued again, unless it has its result, so the run can be saved as it is and retried
                if not has_result(state, call.id):
                    state.queued.insert(0, call)
                raise FailedInside(state) from exc
        if finish_ask_only(state):  # a run that only asked: the answer was all it was for
            return state, None
        if state.turns >= agent.max_turns:
            state.status = "failed"
            state.error = RunFailure(
                kind="max_turns", message=f"stopped after {agent.max_turns} model turns without finishing"
            )
            return state, None
        check_tool_messages(state.messages)
        await before_step(agent, state)
        turns = ModelTurns(
            model=agent.model,
            instructions=agent.instructions,
            budget=agent.budget,
            tools=agent.toolbox.specs,
            tools_tokens=agent.toolbox.tokens,
            turn_timeout=agent.limits.turn_timeout,
            max_reply_chars=agent.limits.max_reply_chars,
            hooks=agent.hooks,
        )
        # a stop asked meanwhile cancels the turn: Stopped
        turn = await agent.stops.unless_stopped(state.run_id, budgeted_turn(turns, state, out=out))
        calls = unique_ids(turn.tool_calls, state.messages)
        state.turns += 1
        # Provider fields that must go back with this message (e.g. reasoning_content) are kept in history.
        message: dict[str, Any] = {**turn.extra, "role": "assistant", "content": turn.content or None}
        if calls:
            message["tool_calls"] = [c.to_message_part() for c in calls]
        state.messages.append(message)
        if not calls:
            state.status = "completed"
            return state, ending_of(turn)
        state.queued = calls
        plan = tuple((c.id, c.name) for c in calls) if len(calls) > 1 else ()


async def before_step(agent: DrivenAgent, state: RunState, *, stop: bool = True) -> None:
    """Before each step of ``state`` (a model turn, a tool call): a stop known ends the run here (``Stopped``,
    unless ``stop`` is False), and so does its lease taken by another process meanwhile (``RunConflict``: the
    step would be done twice, :meth:`RunSaver.check_lease <bot.agent._loop.saving.RunSaver.check_lease>`)."""
    if stop:
        agent.stops.check(state.run_id)
    await agent.saver.check_lease(state)


def _runner(agent: DrivenAgent, tools: dict[str, Tool]) -> ToolRunner:
    """How a call of one of ``tools`` runs now (the limits and hooks as they are at this call: a deployment may
    change them between two calls, :meth:`Agent.with_limits <bot.agent.Agent.with_limits>`)."""
    return ToolRunner(
        tools=tools,
        ask_ttl=agent.limits.ask_ttl,
        max_result_chars=agent.limits.tool_result_max_chars,
        hooks=agent.hooks,
        live=agent.live,
        max_options=agent.limits.max_options,
    )


async def _save_midway(agent: DrivenAgent, state: RunState) -> None:
    """Save ``state`` in the middle of a segment (keeps the same object: its revision moves on). Raises
    ``RunConflict`` when another process took the run over, ``StoreUnavailable``."""
    saved = await agent.store.save(state, owner=agent.owner)
    state.revision, state.updated_at = saved.revision, saved.updated_at


def suspended_payload(tools: dict[str, Tool], pending: PendingCall) -> SuspendedPayload:
    """The ``suspended`` chunk's payload of the question ``pending`` (its suspend payload as its tool, one of
    ``tools`` by id, loads it; as stored when the tool is not known here)."""
    tool = tools.get(pending.tool_name)
    payload = tool.load_suspend_payload(pending.suspend_payload) if tool else pending.suspend_payload
    return SuspendedPayload(
        pending.tool_call_id, pending.tool_name, pending.args, payload, pending.expires_at, pending.suspended_at
    )
