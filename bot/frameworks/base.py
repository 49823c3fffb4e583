"""The seam between the bot and an agent framework: :class:`FrameworkAgent`, an :class:`~bot.agent.Agent` whose
model turns and tools are a framework's run.

Everything around a run stays the runtime's: the run is created, claimed, leased, saved and resumed by
:class:`~bot.agent.Agent` exactly as its own runs are (so the Slack layer's streaming, status, sessions, deadlines,
reminders, App Home, audit, metrics and approval policy apply unchanged). Only the step that advances the run is
the framework's (:meth:`FrameworkAgent.run_framework`, one per framework):

1. the framework runs (from the run's first user message and its earlier text history, or from its own serialised
   state plus the decisions collected since it stopped); text and tool calls are streamed as the runtime's chunks;
2. it ends with a reply (the run completes) or stops on requests (:class:`~bot.frameworks.record.Request`: tool
   calls that need an approval, questions);
3. each request is asked in turn as the runtime's own pending call (an ``approval``, or a ``question`` of the
   ``ask_user`` tool), claimed exactly once by whichever process takes the click; the decision is kept in the
   run's :class:`~bot.frameworks.record.FrameworkRecord`;
4. once every request has its decision, the framework runs again with them (step 1).

Approval requests pass through the agent's approval gate first (``APPROVAL_POLICY`` in the Slack bot): a call the
policy says needs no approval is approved without asking, one nobody may approve is declined at once with the
policy's reason.

Not exactly-once: a process that dies while the framework runs leaves the run ``running`` with no lease; whoever
takes it over (:meth:`~bot.agent.Agent.retry_stream`) runs the framework again from the last saved point, so a tool
that ran in the lost segment may run again.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_json

from bot.agent._loop.stopping import Stopped
from bot.agent._loop.tool_calls import Suspended
from bot.agent.agent import Agent
from bot.agent.approvals import (
    APPROVED,
    DECLINED_TEXT,
    PARAMETERS,
    declined_result,
    edit_note,
    edited_of,
    verdict_of,
)
from bot.agent.ask_user import AskUserPayload, fallback_text, make_ask_user_tool, too_many_options
from bot.agent.asking import ASK_ONLY
from bot.agent.hooks import NO_HOOKS, RunHooks
from bot.agent.model import ChatModel, NoModel
from bot.agent.model.endings import Ending
from bot.agent.run_limits import RunLimits
from bot.agent.state import PendingCall, RunState, utcnow
from bot.agent.store import RunStore
from bot.agent.stream import (
    AgentStream,
    Edited,
    TextDeltaChunk,
    TextDeltaPayload,
    ToolCallChunk,
    ToolCallPayload,
    ToolResultChunk,
    ToolResultPayload,
)
from bot.agent.tools import Tool
from bot.errors import BotError, ModelCallFailed
from bot.frameworks.record import Decision, Framework, FrameworkRecord, Request

log = logging.getLogger(__name__)

QUESTION_TOOL = "ask_user"
"""The tool id a framework's question is asked under (the runtime's ``ask_user``: its Slack rendering, answers'
validation, reminders)."""


@dataclass(frozen=True)
class Finished:
    """The framework's run ended with ``text`` (the reply); ``state``: its serialised state to keep."""

    text: str
    state: Any = None


@dataclass(frozen=True)
class Waiting:
    """The framework's run stopped on ``requests``; ``state``: its serialised state, to run again from."""

    requests: list[Request]
    state: Any = None


Outcome = Finished | Waiting


@dataclass(frozen=True)
class Turn:
    """What one framework run is given: the run (``state``: its ``run_id``, ``messages``, ``metadata``), the record
    (None on the first run), ``prompt`` (the last user message's text) and ``history`` (the text messages before it,
    ``[{"role": "user" | "assistant", "content": str}, ...]``), and ``out``, the stream it reports to."""

    state: RunState
    record: FrameworkRecord | None
    prompt: str
    history: list[dict[str, str]]
    out: AgentStream
    streamed: list[str] = field(default_factory=list)  # the pieces of text streamed so far
    running: set[str] = field(default_factory=set)  # the tool calls reported started (or approved) and not ended
    names: dict[str, str] = field(default_factory=dict)  # tool_call_id -> the tool's name, as reported started
    tool_ended: Callable[[], None] = lambda: None  # told when the last of them ended (a stop waiting cancels now)

    def in_tool(self) -> bool:
        """Whether a tool call reported started has not ended yet."""
        return bool(self.running)

    def text(self, piece: str) -> None:
        """Stream a piece of the reply."""
        if piece:
            self.streamed.append(piece)
            self.out.emit(TextDeltaChunk(self.state.run_id, TextDeltaPayload(piece)))

    def tool_call(self, tool_call_id: str, tool_name: str, args: dict[str, Any]) -> None:
        """Report that the framework calls a tool (Slack: "is running TOOL..."); until its result is reported the
        framework's run is not cancelled by a stop (a tool is never cut short)."""
        self.running.add(tool_call_id)
        self.names[tool_call_id] = tool_name
        self.out.emit(ToolCallChunk(self.state.run_id, ToolCallPayload(tool_call_id, tool_name, args)))

    def tool_result(self, tool_call_id: str, tool_name: str, result: Any, *, is_error: bool = False) -> None:
        """Report a tool call's result. ``tool_name`` ``""`` where the framework does not say it with the result
        (openai-agents): the name reported with the call's start, else the one of the request a person decided
        (an approved call runs in the next segment, unreported), so Slack names the step. The result of a call a
        person declined (the framework's rejection) is reported as the runtime's own decline is,
        ``{"status": "declined", "result": ...}``: a call that did not run."""
        if not tool_name:
            requested = self.record.requests if self.record is not None else []
            tool_name = self.names.get(tool_call_id) or next(
                (r.tool_name for r in requested if r.tool_call_id == tool_call_id), ""
            )
        decided = self.record.decisions if self.record is not None else []
        if any(d.tool_call_id == tool_call_id and d.kind == "approval" and not d.approved for d in decided):
            result = declined_result(result=result)  # the framework's own words; shown as not run
        self.out.emit(ToolResultChunk(self.state.run_id, ToolResultPayload(tool_call_id, tool_name, result, is_error)))
        self.running.discard(tool_call_id)
        if not self.running:
            self.tool_ended()


class _AnyArgs(BaseModel):
    """A framework tool's arguments as the approval gate sees them (the framework validates them itself)."""

    model_config = ConfigDict(extra="allow")


class FrameworkAgent(Agent):
    """An :class:`~bot.agent.Agent` whose run is a framework's (see the module docstring); one subclass per framework
    implements :meth:`run_framework`.

    ``id``, ``name``, ``store``, ``limits``, ``hooks``, ``require_tool_approval`` as for :class:`~bot.agent.Agent`
    (``ask_ttl`` in ``limits`` is each approval's and question's deadline; model limits are the framework's own);
    ``model``: unused by the runtime (the framework calls its own model), kept for its name. ``tools``: extra tools of
    the runtime's (e.g. the hidden approval tool the Slack bot adds for outside agents' requests); the question tool
    ``ask_user`` is always there.
    """

    framework: ClassVar[Framework]

    def __init__(
        self,
        *,
        id: str,
        name: str,
        store: RunStore,
        model: ChatModel | None = None,
        tools: Sequence[Tool] = (),
        limits: RunLimits | None = None,
        hooks: RunHooks = NO_HOOKS,
        require_tool_approval: bool = False,
    ) -> None:
        super().__init__(
            id=id,
            name=name,
            instructions="",
            model=model or NoModel("a framework agent makes its own model calls", model="framework"),
            tools=[make_ask_user_tool(tool_id=QUESTION_TOOL), *tools],
            store=store,
            limits=limits,
            hooks=hooks,
            require_tool_approval=require_tool_approval,
        )

    @abstractmethod
    async def run_framework(self, turn: Turn) -> Outcome:
        """Run the framework once: from the start (``turn.record`` is None) or from ``turn.record.state`` with its
        decisions. Returns :class:`Finished` or :class:`Waiting`; any exception fails the run (retryable)."""

    async def keep_waiting(self, record: FrameworkRecord, state: RunState) -> None:
        """Called each time the run is about to wait on the next of ``record``'s requests (the first after the
        framework stopped, or the next after a decision): a framework whose state lives outside the run record
        keeps it until that request's deadline (LangGraph's checkpoints). Raises nothing."""

    # --- the runtime's step, overridden --------------------------------------------------------------

    async def _advance(self, state: RunState, out: AgentStream) -> tuple[RunState, Ending | None]:
        if ASK_ONLY in state.metadata:  # a run that only asks (an outside agent's request): the runtime's own
            return await super()._advance(state, out)
        record = FrameworkRecord.of(state)
        approved: set[str] = set()  # calls the framework's next run starts with: never cut short by a stop
        if state.pending is not None:
            pending, state.pending = state.pending, None
            if record is not None:
                decision = decision_of(pending)
                record.decisions.append(decision)
                record.put(state)
                self._report(record, decision, out, state.run_id)
                if decision.kind == "approval" and decision.approved:
                    approved.add(decision.tool_call_id)
        while True:
            if record is not None:
                waiting = record.undecided()
                if waiting:
                    await self.keep_waiting(record, state)
                    self._suspend(state, waiting[0])
            await self._before_step(state)  # the framework must not run its tools twice, nor for a stopped run
            prompt, history = split_prompt(state.messages)
            turn = Turn(
                state=state,
                record=record,
                prompt=prompt,
                history=history,
                out=out,
                running=approved,  # an approved call the framework runs without reporting its start (openai-agents)
                tool_ended=functools.partial(self.stops.cancel_turn, state.run_id),
            )
            try:  # a stop asked meanwhile cancels the framework's run (never inside a tool call): Stopped
                step = self.run_framework(turn)
                outcome = await self.stops.unless_stopped(state.run_id, step, busy=turn.in_tool)
            except (BotError, Stopped):
                raise
            except Exception as exc:
                self.stops.check(state.run_id)  # a stop waited for a tool call that then failed: stopped all the same
                log.warning("run %s: %s failed: %s: %s", state.run_id, self.framework, type(exc).__name__, exc)
                raise ModelCallFailed(f"{self.framework}: {type(exc).__name__}: {exc}") from exc
            state.turns += 1
            if isinstance(outcome, Finished):
                if not turn.streamed:  # a framework that streams nothing: the reply in one piece
                    turn.text(outcome.text)
                FrameworkRecord(framework=self.framework, state=outcome.state).put(state)
                state.messages.append({"role": "assistant", "content": outcome.text or None})
                state.status = "completed"
                return state, None
            record = FrameworkRecord(framework=self.framework, state=outcome.state, requests=outcome.requests)
            approved = set()
            for request in outcome.requests:
                ruled = await self._policy_decision(request, state)
                if ruled is not None:
                    record.decisions.append(ruled)
                    if ruled.approved:
                        approved.add(ruled.tool_call_id)
            record.put(state)

    async def _policy_decision(self, request: Request, state: RunState) -> Decision | None:
        """The approval gate's decision on an approval request, when it makes one (no approval needed, or covered by
        a standing grant still there: approved; one nobody may give: declined with the policy's reason); None: ask
        a person."""
        if request.kind != "approval":
            return None
        tool = Tool(
            id=request.tool_name,
            description=request.description,
            input_schema=_AnyArgs,
            execute_fn=_never,
            require_approval=True,
        )
        verdict = await verdict_of(
            self.approval_gate, tool, request.args, state, agent_wide=False, tool_call_id=request.tool_call_id
        )
        if verdict.decline is not None:
            return Decision(tool_call_id=request.tool_call_id, kind="approval", approved=False, reason=verdict.decline)
        if not verdict.needs_approval and (verdict.use is None or await verdict.use()):
            return Decision(tool_call_id=request.tool_call_id, kind="approval", approved=True)
        return None

    def _suspend(self, state: RunState, request: Request) -> None:
        """Make the run wait on ``request`` (raises ``Suspended``, as a tool's suspension does)."""
        now = utcnow()
        expires = now + timedelta(seconds=self.ask_ttl) if self.ask_ttl is not None else None
        if request.kind == "approval":
            state.pending = PendingCall(
                kind="approval",
                tool_call_id=request.tool_call_id,
                tool_name=request.tool_name,
                args=request.args,
                suspend_payload={
                    "tool_name": request.tool_name,
                    "args": request.args,
                    "description": request.description,
                    PARAMETERS: request.parameters,  # None: the framework takes no edited arguments (no Edit)
                },
                suspended_at=now,
                expires_at=expires,
            )
        else:
            question = question_payload(request, max_options=self.limits.max_options)
            state.pending = PendingCall(
                kind="question",
                tool_call_id=request.tool_call_id,
                tool_name=QUESTION_TOOL,
                args=question,
                suspend_payload=question,
                suspended_at=now,
                expires_at=expires,
            )
        state.status = "suspended"
        raise Suspended()

    @staticmethod
    def _report(record: FrameworkRecord, decision: Decision, out: AgentStream, run_id: str) -> None:
        """A ``tool-result`` chunk for a decided question (the Slack layer shows the answer as given)."""
        if decision.kind != "question":
            return
        request = next((r for r in record.requests if r.tool_call_id == decision.tool_call_id), None)
        if request is not None:
            result = {"answer": decision.answer, "outcome": decision.outcome, "answered_by": decision.answered_by}
            out.emit(ToolResultChunk(run_id, ToolResultPayload(decision.tool_call_id, QUESTION_TOOL, result)))


async def _never(args: Any, ctx: Any) -> Any:
    raise AssertionError("a framework's tool runs in the framework")


def decision_of(pending: PendingCall) -> Decision:
    """The decision a claimed answer (``pending.resume``) carries; an approved call a person edited (in Slack's Edit
    form, :func:`bot.agent.approvals.edited_of`, or with ``Approve(arguments=...)``) with its edited ``args`` and the
    ``note`` the model is told."""
    answer = pending.resume
    if answer is None:  # not claimed: nothing to decide on (never saved this way)
        raise AssertionError(f"pending call {pending.tool_call_id} has no claimed answer")
    if pending.kind == "approval":
        approved = answer.resume_data == APPROVED and answer.outcome == "answer"
        edited = edited_of(pending) if approved else None
        args = dict(pending.args)
        if approved and answer.arguments is not None:  # Approve(arguments=...) through Agent.resume
            before = edited.before if edited is not None else dict(pending.args)
            edited, args = Edited(by=answer.answered_by or "", before=before), dict(answer.arguments)
        return Decision(
            tool_call_id=pending.tool_call_id,
            kind="approval",
            approved=approved,
            args=args if edited is not None else None,
            note=edit_note(edited, args, tool_call_id=pending.tool_call_id) if edited is not None else None,
            reason=answer.reason,
            answered_by=answer.answered_by,
            outcome=answer.outcome,
        )
    return Decision(
        tool_call_id=pending.tool_call_id,
        kind="question",
        answer=answer.resume_data if answer.outcome == "answer" else None,
        answered_by=answer.answered_by,
        outcome=answer.outcome,
    )


def output_text(output: Any) -> str:
    """A framework run's final output as the reply's text: a string as it is; anything else (a pydantic model, a
    dataclass, a dict...) as its JSON (pydantic's ``to_json``; a value it can't write, as its ``str``)."""
    if isinstance(output, str):
        return output
    return to_json(output, fallback=str).decode()


ASK_USER_KEYS = frozenset({"question", "options", "selection_mode"})
"""The keys of the ``ask_user`` shape a framework's question may have (anything else beside them is shown too)."""


MAX_LISTED = 20  # keys of a plain payload listed one per line (more, or any nested value: the payload as JSON)
IN_YOUR_WORDS = "Answer in your own words: the agent gets what you write."


def question_payload(request: Request, *, max_options: int | None = None) -> dict[str, Any]:
    """The ``ask_user`` payload a question request is shown with: its ``question`` when it has the ``ask_user``
    shape (``question``, ``options``, ``selection_mode``), any other keys beside them listed under the question
    (``amount: 5000``: what the person decides on, never dropped); as free text listing its options when it offers
    more than ``max_options`` (the frontend's bound, ``RunLimits.max_options``: Slack shows at most 100; the
    framework gets the text typed); else a free-text question saying the agent stopped to ask, with the request's
    name and its arguments (a plain payload's, at most :data:`MAX_LISTED` of them, ``key: value`` a line; any other
    as JSON), and that the answer is the person's own words (a new user's trial: before, "`interrupt` needs an
    answer:" over JSON, with no hint of what to type)."""
    if request.question is not None:
        with contextlib.suppress(ValidationError):
            others = {k: v for k, v in request.question.items() if k not in ASK_USER_KEYS}
            question = AskUserPayload.model_validate(request.question)
            if others:
                lines = [f"{k}: {v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in others.items()]
                question = AskUserPayload.model_validate(
                    {**request.question, "question": "\n".join([question.question, *lines])}
                )
            if too_many_options(question, max_options) is None:
                return question.model_dump(mode="json", exclude_none=True)
            return {
                "question": f"{fallback_text(question)}\n(Reply with your choice: too many options to show as a list.)"
            }

    args = request.args
    plain = all(v is None or isinstance(v, str | int | float | bool) for v in args.values())
    if args and len(args) <= MAX_LISTED and plain:
        shown = "\n".join(f"• {k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in args.items())
    else:
        shown = f"```\n{json.dumps(args, indent=2, default=str)}\n```"
    return {"question": f"The agent stopped to ask about this (`{request.tool_name}`):\n{shown}\n{IN_YOUR_WORDS}"}


def split_prompt(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    """``(prompt, history)``: the last user message's text, and the user/assistant text messages before it."""
    texts = [
        {"role": str(m["role"]), "content": _text(m.get("content"))}
        for m in messages
        if m.get("role") in ("user", "assistant") and _text(m.get("content"))
    ]
    last = max((i for i, m in enumerate(texts) if m["role"] == "user"), default=-1)
    if last < 0:
        return "", texts
    return texts[last]["content"], texts[:last]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # Chat Completions content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def answer_value(decision: Decision) -> str | list[str]:
    """A question's decision as the tool's result: the answer's text, or several options' labels as a list (a label
    may hold a comma: joined, ``"Red, dark"`` and ``"Green"`` would read as three); no answer / withdrawn said as
    such."""
    if decision.outcome == "no_answer":
        return "(nobody answered in time)"
    if decision.outcome == "cancelled":
        return "(the question was withdrawn)"
    answer = decision.answer
    return [str(a) for a in answer] if isinstance(answer, list) else str(answer or "")


def denial_text(decision: Decision) -> str:
    """Why an approval was declined, as the model is told (who, and the reason; no decision in time; withdrawn)."""
    if decision.outcome == "no_answer":
        return "The tool call was not run: nobody approved it in time."
    if decision.outcome == "cancelled":
        return "The tool call was not run: the approval request was withdrawn."
    who = f" by <@{decision.answered_by}>" if decision.answered_by else ""  # Slack shows the name if it is echoed
    why = f": {decision.reason}" if decision.reason else ""
    return f"{DECLINED_TEXT}{who}{why}"
