"""Tool approval: a call that needs a person's OK suspends the run before it runs, and runs at most once per
approval.

- Which calls: a tool with ``require_approval=True``, or every tool but questions (tools that ask a
  person, ``Tool.asks_person``, such as ``ask_user``) when the agent or the run says ``require_tool_approval``.
- A gate (``Agent.approval_gate``, :data:`ApprovalGate`; the Slack layer's is ``APPROVAL_POLICY``'s) may change
  that per call: ask where the tool would not, not ask where it would, or decline at once with a reason (a call
  nobody could approve): the tool never runs and nobody is asked.
- Asking: the call's arguments are validated first (invalid ones go back to the model as a tool error, nobody is
  asked); then the run suspends with a pending call of kind ``approval`` and the stream emits a
  ``tool-call-approval`` chunk.
- Editing (where the approval policy's rule allows): ``Agent.edit_tool_call`` replaces a pending call's arguments
  before anyone approves (:func:`edit_pending`, validated like the model's); the call then runs with them and the
  model is told, before its result, who changed them and how (:func:`edit_note`).
- Deciding: ``Agent.approve_tool_call`` / ``decline_tool_call`` claim the decision exactly like an answer (one
  compare-and-set wins). Declined: the tool never runs; the model gets ``{"status": "declined", "reason": ...,
  "declined_by": ...}``. Approved: ``executing_since`` is saved, then the tool runs once. A process that dies
  mid-call leaves ``executing_since`` behind: whoever continues the run asks again with ``interrupted`` set (it
  may or may not have run) instead of running it a second time.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, RootModel

from bot.agent._loop.tool_calls import Suspended, ToolRunner
from bot.agent.model import MAX_ARGUMENT_DEPTH, parse_arguments
from bot.agent.state import PendingCall, RunState, ToolCall, utcnow
from bot.agent.stream import AgentStream, ApprovalPayload, Edited, ToolCallChunk, ToolCallPayload
from bot.agent.text import nested_deeper_than
from bot.agent.tools import Tool, ToolContext, ToolInputError

log = logging.getLogger(__name__)

APPROVED, DECLINED = "approved", "declined"
Save = Callable[[RunState], Awaitable[None]]


def needs_approval(tool: Tool | None, state: RunState, *, agent_wide: bool) -> bool:
    """Whether a call of ``tool`` waits for approval in ``state`` (unknown tools and questions never do), as far as
    it is known without the call: a tool whose ``require_approval`` is a callable decides per call
    (:func:`tool_requires`), so it counts here as requiring it."""
    if tool is None or tool.asks_person:
        return False
    return bool(tool.require_approval) or agent_wide or state.require_tool_approval


async def tool_requires(
    tool: Tool, state: RunState, *, tool_call_id: str, args: dict[str, Any], agent_wide: bool
) -> bool:
    """Whether this call of ``tool`` (``args`` validated, defaults filled in) waits for approval by the tool's, the
    agent's and the run's say: :func:`needs_approval`, with a callable ``require_approval`` asked
    ``check(ctx, args)`` (a :class:`~bot.agent.tools.ToolContext` of the run and call; sync or async). A check that
    raises counts as "ask" (the failure is logged): a broken condition never lets a call run unasked."""
    if tool.asks_person:
        return False
    if agent_wide or state.require_tool_approval:
        return True
    check = tool.require_approval
    if not callable(check):
        return bool(check)
    ctx = ToolContext(run_id=state.run_id, tool_call_id=tool_call_id, metadata=state.metadata)
    try:
        said = check(ctx, args)
        if inspect.isawaitable(said):
            said = await said
    except Exception as exc:
        log.warning("run %s: %s's require_approval check raised %s: asking", state.run_id, tool.id, type(exc).__name__)
        return True
    return bool(said)


@dataclass(frozen=True)
class GateVerdict:
    """What an :data:`ApprovalGate` says of one call: whether it waits for approval, or ``decline`` (a reason):
    declined at once; ``deadline``: seconds the request waits (None: the agent's ``ask_ttl``); ``notes``: what the
    gate wants kept with the request (JSON values; the approval policy's rule, how its arguments are shown, where it
    is asked), stored as ``suspend_payload["policy"]`` and handed on in :class:`ApprovalPayload`'s ``policy``.
    ``use``: for a call that would wait but is covered (a standing grant, say): awaited just before the call runs
    unasked in its turn (never when the verdict was only looked at ahead, for a batch); it returns False when the
    cover is gone meanwhile (revoked, expired): the call is then asked after all. ``rule``: the name of what decided
    (a policy's rule), kept with an approval request (``suspend_payload["rule"]``) for the audit."""

    needs_approval: bool
    decline: str | None = None
    deadline: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    use: Callable[[], Awaitable[bool]] | None = None
    rule: str | None = None


ApprovalGate = Callable[[Tool, dict[str, Any], RunState, bool], GateVerdict | Awaitable[GateVerdict]]
"""``gate(tool, args, state, tool_requires)``: the verdict on a call of ``tool`` with ``args`` (validated, defaults
filled in, as an approval request stores them; as the model sent them when invalid) in ``state``;
``tool_requires``: :func:`tool_requires`'s answer; a coroutine function too (a gate that looks
something up, e.g. the requester's user groups). Not asked for questions. It may be asked more than
once of one call (ahead, for a batch, then in the call's turn): what it does once per call belongs in ``use``."""


async def verdict_of(
    gate: ApprovalGate | None,
    tool: Tool,
    args: dict[str, Any],
    state: RunState,
    *,
    agent_wide: bool,
    tool_call_id: str = "",
) -> GateVerdict:
    """The verdict on a call of ``tool``: :func:`tool_requires`'s, or ``gate``'s when there is one (questions never
    wait for approval, whatever the gate)."""
    if tool.asks_person:
        return GateVerdict(False)
    # the arguments as an approval request stores them (defaults filled in), so the gate sees what approvers see;
    # invalid ones: asked or not, the call ends as a tool error (ask_approval, run_tool_call)
    with contextlib.suppress(ToolInputError):
        args = tool.parse_args(args).model_dump(mode="json")
    needs = await tool_requires(tool, state, tool_call_id=tool_call_id, args=args, agent_wide=agent_wide)
    if gate is None:
        return GateVerdict(needs)
    said = gate(tool, args, state, needs)
    return await said if inspect.isawaitable(said) else said


def decline_at_once(
    runner: ToolRunner,
    tool: Tool,
    state: RunState,
    call: ToolCall,
    args: dict[str, Any],
    out: AgentStream,
    *,
    reason: str,
) -> None:
    """Decline ``call`` without asking anyone: the model gets ``{"status": "declined", "reason": reason, "outcome":
    "unsatisfiable"}`` (invalid arguments: the tool error, as when asking; both through ``runner``)."""
    try:
        tool.parse_args(args)
    except ToolInputError as exc:
        runner.add_result(state, call, {"error": str(exc)}, out, is_error=True)
        return
    runner.add_result(state, call, declined_result(reason=reason, outcome="unsatisfiable"), out)


def declined_result(**fields: Any) -> dict[str, Any]:
    """The result of a call that was declined, never run: ``{"status": "declined", **fields}`` (``reason``,
    ``declined_by``, ``outcome``; a framework's own rejection as ``result``). :func:`was_declined` tells it."""
    return {"status": DECLINED, **fields}


DECLINED_TEXT = "The tool call was declined"
"""How a framework's model is told its call was declined (:func:`bot.frameworks.base.denial_text`: the frameworks
take a rejection as text, not :func:`declined_result`'s dict), followed by who declined it and why."""


def was_declined(result: Any) -> bool:
    """Whether a tool call's ``result`` is a declined call's (:func:`declined_result`): it did not run."""
    return isinstance(result, dict) and result.get("status") == DECLINED


def ask_approval(
    runner: ToolRunner,
    tool: Tool,
    state: RunState,
    call: ToolCall,
    args: dict[str, Any],
    out: AgentStream,
    *,
    ask_ttl: float | None = None,
    notes: dict[str, Any] | None = None,
    batch: Sequence[tuple[Tool, ToolCall, dict[str, Any]]] = (),
    verdicts: Mapping[str, GateVerdict] | None = None,
) -> None:
    """Suspend the run on ``call`` until a person decides (raises :class:`Suspended`; its deadline ``ask_ttl``
    seconds, else ``runner.ask_ttl``); invalid arguments become a tool error for the model instead (returns; its text
    bounded by ``runner``). ``notes``: the gate's (:class:`GateVerdict`), kept with the request. ``batch``: later
    calls of the same turn that wait for approval too (valid arguments), asked together with it
    (:mod:`bot.agent.decisions`); ``verdicts``: the gate's verdict on each (by tool_call_id: its rule and notes)."""
    try:
        valid = tool.parse_args(args).model_dump(mode="json")
    except ToolInputError as exc:
        runner.add_result(state, call, {"error": str(exc)}, out, is_error=True)
        return
    ttl = ask_ttl if ask_ttl is not None else runner.ask_ttl
    suspend(
        state,
        call.id,
        tool,
        valid,
        ask_ttl=ttl,
        interrupted=False,
        notes=notes,
        batch=batch,
        verdicts=verdicts,
        batch_ttl=runner.ask_ttl,
    )


def suspend(
    state: RunState,
    tool_call_id: str,
    tool: Tool,
    args: dict[str, Any],
    *,
    ask_ttl: float | None,
    interrupted: bool,
    notes: dict[str, Any] | None = None,
    batch: Sequence[tuple[Tool, ToolCall, dict[str, Any]]] = (),
    verdicts: Mapping[str, GateVerdict] | None = None,
    batch_ttl: float | None = None,
) -> None:
    """Make ``state`` wait for a decision on ``tool_call_id`` (and on each call of ``batch``: tool, call, valid
    arguments); raises :class:`Suspended`. ``verdicts``: the gate's verdict on each call, by tool_call_id (its rule
    kept as ``suspend_payload["rule"]``, its notes as ``suspend_payload["policy"]``); ``notes``: the first call's
    notes when it has no verdict here (a call asked again after an interrupted run).

    Each call waits until its own deadline (``expires_at``): the first call ``ask_ttl`` seconds, each call of the
    batch its verdict's ``deadline`` (its policy rule's), else ``batch_ttl`` (the agent's ``ask_ttl``); None: no
    deadline beyond the record's retention."""
    now = utcnow()

    def pending(call_id: str, of: Tool, call_args: dict[str, Any]) -> PendingCall:
        payload: dict[str, Any] = {"tool_name": of.id, "args": call_args, "description": of.description}
        verdict = (verdicts or {}).get(call_id)
        if call_id == tool_call_id:
            ttl = ask_ttl
        else:
            ttl = verdict.deadline if verdict is not None and verdict.deadline is not None else batch_ttl
        rule = verdict.rule if verdict is not None else None
        if rule is not None:
            payload["rule"] = rule
        kept = verdict.notes if verdict is not None else None
        if not kept and call_id == tool_call_id:
            kept = notes
        if kept:  # each call's own (a batch's calls may match different rules: details-only, where)
            payload[POLICY_NOTES] = dict(kept)
        return PendingCall(
            kind="approval",
            tool_call_id=call_id,
            tool_name=of.id,
            args=call_args,
            suspend_payload=payload,
            suspended_at=now,
            expires_at=now + timedelta(seconds=ttl) if ttl is not None else None,
            interrupted=interrupted and call_id == tool_call_id,
        )

    head = pending(tool_call_id, tool, args)
    head.batch = [pending(c.id, t, a) for t, c, a in batch]
    state.pending = head
    state.status = "suspended"
    raise Suspended()


async def batch_of(
    queued: Sequence[ToolCall],
    tools: Mapping[str, Tool],
    state: RunState,
    *,
    gate: ApprovalGate | None,
    agent_wide: bool,
    verdicts: dict[str, GateVerdict] | None = None,
) -> list[tuple[Tool, ToolCall, dict[str, Any]]]:
    """The calls of ``queued`` (the rest of the turn) that will wait for approval too, with their valid arguments:
    asked now, together (a call whose arguments are invalid, that nobody could approve, or that needs no approval
    is left to run, or fail, in its turn); ``verdicts`` gets the gate's verdict on each call kept (rule, notes)."""
    out = []
    for call in queued:
        tool = tools.get(call.name)
        if tool is None:
            continue
        try:
            args = tool.parse_args(parse_arguments(call.arguments)).model_dump(mode="json")
        except (ValueError, ToolInputError):
            continue
        verdict = await verdict_of(gate, tool, args, state, agent_wide=agent_wide, tool_call_id=call.id)
        if verdict.needs_approval and verdict.decline is None:
            out.append((tool, call, args))
            if verdicts is not None:
                verdicts[call.id] = verdict
    return out


async def run_decided(
    runner: ToolRunner, state: RunState, pending: PendingCall, out: AgentStream, *, save: Save
) -> None:
    """Carry out the decision claimed on ``pending`` (the run's pending approval, already taken off ``state``), the
    call run by ``runner`` (:class:`bot.agent._loop.tool_calls.ToolRunner`: its tools, the result's bound, live
    questions while it runs); approved with edited arguments: it runs with them, and the model is told
    (:func:`note_edit`)."""
    call = ToolCall(id=pending.tool_call_id, name=pending.tool_name, arguments="")
    decision = pending.resume
    tool = runner.tools.get(pending.tool_name)
    if decision is None or decision.resume_data != APPROVED:
        result = declined_result(reason=decision.reason if decision else None)
        if decision is not None and decision.answered_by:
            result["declined_by"] = decision.answered_by
        if decision is not None and decision.outcome != "answer":
            result["outcome"] = decision.outcome  # nobody decided in time, or the request was withdrawn
        runner.add_result(state, call, result, out)
        return
    if pending.executing_since is not None and tool is not None:  # a run of it was cut short: ask again
        suspend(
            state,
            pending.tool_call_id,
            tool,
            pending.args,
            ask_ttl=runner.ask_ttl,
            interrupted=True,
            notes=policy_notes(pending),
        )
    state.pending = pending.model_copy(update={"executing_since": utcnow(), "batch": []})
    await save(state)  # the trace that makes it run at most once per approval
    state.pending = None
    args = decision.arguments if decision.arguments is not None else pending.args  # as the approver edited them
    # it runs now: a ``tool-call`` chunk, as for any call that starts (the one before the approval request was
    # another segment's), so the stream's consumer shows it running (Slack: "is running restart_service...")
    out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, dict(args))))
    await runner.run(state, call, args, out)
    edited = edited_of(pending)
    if edited is not None:  # edited before approving (Edit): the model is told plainly (before / after)
        note_edit(state, call.id, before=edited.before, after=pending.args, by=edited.by)
    elif decision.arguments is not None:  # the model is told plainly that a person changed them (who: the editor)
        by = decision.edited_by or decision.answered_by
        note_edit(state, call.id, before=pending.args, after=decision.arguments, by=by)


def note_edit(
    state: RunState, tool_call_id: str, *, before: dict[str, Any], after: dict[str, Any], by: str | None
) -> None:
    """Put :func:`edit_note` (who changed the arguments, before / after as JSON) before the ``tool`` message of
    ``tool_call_id``, so the model knows the call it made is not the one that ran. The one wording of an edit,
    whether it came from Slack's Edit (:func:`edit_pending`) or ``Approve(arguments=...)``."""
    note = edit_note(Edited(by=by or "", before=before), after)
    for message in reversed(state.messages):
        if message.get("role") == "tool" and message.get("tool_call_id") == tool_call_id:
            message["content"] = note + str(message.get("content") or "")
            return


def decided_in_batch(state: RunState, call: ToolCall, tool: Tool | None) -> PendingCall | None:
    """The decided approval of ``call`` when it was asked in a batch this round (its answer is among the run's, and
    it is queued, not yet run): a pending call carrying that answer, for :func:`run_decided`; else None."""
    answer = state.answer_for(call.id)
    if answer is None or answer.resume_data not in (APPROVED, DECLINED):
        return None
    args: dict[str, Any] = {}
    with contextlib.suppress(ValueError, ToolInputError):
        raw = parse_arguments(call.arguments)
        args = tool.parse_args(raw).model_dump(mode="json") if tool is not None else raw
    return PendingCall(
        kind="approval",
        tool_call_id=call.id,
        tool_name=call.name,
        args=args,
        suspend_payload={},
        suspended_at=answer.answered_at,
        expires_at=None,
        resume=answer,
    )


def approval_payload(pending: PendingCall) -> ApprovalPayload:
    """The ``tool-call-approval`` chunk's payload for a pending approval (its ``batch``: the other approvals of the
    turn asked with it, each a payload of its own)."""
    stored = pending.suspend_payload
    return ApprovalPayload(
        tool_call_id=pending.tool_call_id,
        tool_name=pending.tool_name,
        args=dict(pending.args),
        description=str(stored.get("description") or ""),
        interrupted=pending.interrupted,
        expires_at=pending.expires_at,
        asked_at=pending.suspended_at,
        edited=edited_of(pending),
        editable=takes_edits(pending),
        policy=policy_notes(pending),
        batch=tuple(approval_payload(c) for c in pending.batch),
    )


POLICY_NOTES = "policy"  # the suspend_payload key of a gate's notes (GateVerdict.notes)


def policy_notes(pending: PendingCall) -> dict[str, Any]:
    """The notes the approval gate kept with ``pending`` (``{}`` when none)."""
    raw = pending.suspend_payload.get(POLICY_NOTES)
    return dict(raw) if isinstance(raw, dict) else {}


# --- editing the arguments before approving (issue 23 part 3) -----------------------------------------------------

EDITED = "edited"  # the suspend_payload key of an edit: {"by": user id, "before": the model's arguments}


def edited_of(pending: PendingCall) -> Edited | None:
    """Who changed ``pending``'s arguments and what they were before, or None when nobody did."""
    raw = pending.suspend_payload.get(EDITED)
    if not isinstance(raw, dict) or not isinstance(raw.get("before"), dict):
        return None
    n = raw.get("n")
    return Edited(by=str(raw.get("by") or ""), before=dict(raw["before"]), n=n if isinstance(n, int) and n > 0 else 1)


def edit_count(pending: PendingCall) -> int:
    """How many times a person changed ``pending``'s arguments (0: never)."""
    edited = edited_of(pending)
    return edited.n if edited is not None else 0


PARAMETERS = "parameters"
"""The suspend_payload key of the JSON schema of a call's arguments, kept when the tool is not one of the agent's own
(a framework's, :mod:`bot.frameworks`): a dict, or None when the call takes no edited arguments (a framework that
has no way to run a call with other arguments than the model's)."""


def takes_edits(pending: PendingCall) -> bool:
    """Whether ``pending``'s arguments may be edited before approving, as far as the call goes (the approval
    policy's rule says by whom and which): False only for a call kept with ``parameters`` None (:data:`PARAMETERS`)."""
    return not (PARAMETERS in pending.suspend_payload and not isinstance(pending.suspend_payload[PARAMETERS], dict))


def kept_schema(pending: PendingCall) -> dict[str, Any] | None:
    """The JSON schema kept with ``pending`` (:data:`PARAMETERS`), or None."""
    raw = pending.suspend_payload.get(PARAMETERS)
    return dict(raw) if isinstance(raw, dict) else None


@dataclass(frozen=True, kw_only=True)
class SchemaTool(Tool):
    """A stand-in for a tool the agent runs elsewhere (a framework's), known by its arguments' JSON schema only:
    :meth:`parse_args` validates against ``json_schema`` (``jsonschema``), the way an edit is checked
    (:func:`edit_pending`); it never runs here."""

    json_schema: dict[str, Any] = field(default_factory=dict, hash=False)

    def spec(self) -> dict[str, Any]:
        """The Chat Completions ``tools[]`` entry, with ``json_schema`` as its parameters."""
        return {
            "type": "function",
            "function": {"name": self.id, "description": self.description, "parameters": self.json_schema},
        }

    def parse_args(self, args: dict[str, Any]) -> BaseModel:
        """Validate ``args`` against ``json_schema``. Raises :class:`ToolInputError` naming each problem (at most
        five)."""
        from jsonschema.validators import validator_for  # type: ignore[import-untyped,unused-ignore]

        validator = validator_for(self.json_schema)(self.json_schema)
        errors = sorted(validator.iter_errors(args), key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}" for e in errors[:5]
            )
            raise ToolInputError(f"invalid arguments for {self.id}: {problems}")
        return _Arguments(args)


class _Arguments(RootModel[dict[str, Any]]):
    """A :class:`SchemaTool` call's arguments, as given (validated against its schema)."""


async def _runs_elsewhere(args: Any, ctx: Any) -> Any:
    raise AssertionError("this tool runs in the agent's framework")


def schema_tool(pending: PendingCall) -> Tool | None:
    """A :class:`SchemaTool` for ``pending`` when a JSON schema is kept with it (:data:`PARAMETERS`), else None."""
    schema = kept_schema(pending)
    if schema is None:
        return None
    return SchemaTool(
        id=pending.tool_name,
        description=str(pending.suspend_payload.get("description") or ""),
        input_schema=_Arguments,
        execute_fn=_runs_elsewhere,
        json_schema=schema,
    )


def edit_pending(tool: Tool, pending: PendingCall, args: dict[str, Any], *, edited_by: str) -> PendingCall:
    """``pending`` (an approval) with its arguments replaced by ``args``, validated and defaults filled in as when
    it was asked, and the edit recorded in its ``suspend_payload`` (:data:`EDITED`: who, the arguments before the
    first edit, so the model and the audit see both, and how many edits so far: ``n``, records before it have 1).
    Raises :class:`ToolInputError` for invalid ``args`` (nested deeper than a model's may be too:
    :data:`~bot.agent.model.MAX_ARGUMENT_DEPTH`)."""
    if nested_deeper_than(args, MAX_ARGUMENT_DEPTH):
        raise ToolInputError(f"arguments are nested too deeply (more than {MAX_ARGUMENT_DEPTH} levels)")
    valid = tool.parse_args(args).model_dump(mode="json")
    before = edited_of(pending)
    original = before.before if before is not None else dict(pending.args)
    n = before.n + 1 if before is not None else 1
    payload = {**pending.suspend_payload, "args": valid, EDITED: {"by": edited_by, "before": original, "n": n}}
    return pending.model_copy(update={"args": valid, "suspend_payload": payload})


def edit_note(edited: Edited, after: dict[str, Any], *, tool_call_id: str | None = None) -> str:
    """What the model is told of a call a person edited before approving: who changed the arguments, before and
    after. Without ``tool_call_id`` it goes right before the call's result (the built-in loop); with it, it names
    the call, to stand apart from the result (a framework's next user message, :mod:`bot.frameworks.base`)."""
    who = edited.by or "the person who approved"
    call = f"the arguments of tool call {tool_call_id}" if tool_call_id else "this call's arguments"
    note = (
        f"Note: {who} changed {call} before approving it; it ran with the changed ones."
        f" Before (yours): {json.dumps(edited.before, ensure_ascii=False, sort_keys=True)}."
        f" After (what ran): {json.dumps(after, ensure_ascii=False, sort_keys=True)}."
    )
    return note if tool_call_id else note + " Its result follows.\n"
