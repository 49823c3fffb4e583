"""The tool-calling loop: :class:`Agent` with ``stream``, ``resume_stream`` and ``retry_stream``.

A run alternates model turns and tool calls. The tool calls of one assistant message run in order; the
first that suspends stops the batch (finished results are kept, the rest stay queued and run after the
resume). Before every model request each ``tool_call_id`` of the conversation has exactly one ``tool``
message. State is saved on every transition that matters (created, suspended, claimed, completed,
failed), never in between, so a resume costs three Redis round trips: load, claim, final save.

Failures never escape the run as exceptions: bad tool arguments and tool errors go back to the model as
tool results; a failed model call or the turn limit ends the stream with an ``error`` chunk and leaves the
run ``failed`` but resumable with :meth:`Agent.retry_stream`.

Who drives a run: while a process works on a run it holds the run's lease in the store (set atomically with
the save that makes it ``running``, renewed every ``lease_renew_every`` seconds, dropped by the save that ends
the segment). A ``running`` run with no lease (its process died, or a claim's reply was lost before the run
started) is *orphaned*: :meth:`Agent.retry_stream` takes it over from its last saved state, answer included. A
driver whose lease lapsed while it was alive (held up longer than the lease TTL) and was taken over stops before
its next model turn or tool call (a ``superseded`` error chunk), so no step is done twice; if nobody took the run,
its next renewal takes the lease back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.agent._loop.budget import DEFAULT_HISTORY_BUDGET, HistoryBudget
from bot.agent._loop.claims import Claimed, Claims
from bot.agent._loop.history import check_tool_messages, history_of, last_text, unique_ids
from bot.agent._loop.live_questions import LiveQuestions
from bot.agent._loop.resuming import continue_pending, records_an_answer
from bot.agent._loop.saving import RunSaver
from bot.agent._loop.stopping import Stopped, StopRequests, wrap_up
from bot.agent._loop.tool_calls import Suspended, ToolRunner
from bot.agent._loop.toolbox import Toolbox
from bot.agent._loop.turns import ModelTurns, budgeted_turn
from bot.agent.answers import AnswerCheck
from bot.agent.approvals import (
    POLICY_NOTES,
    ApprovalGate,
    GateVerdict,
    approval_payload,
    ask_approval,
    batch_of,
    decided_in_batch,
    decline_at_once,
    edit_pending,
    kept_schema,
    policy_notes,
    run_decided,
    schema_tool,
    takes_edits,
    verdict_of,
)
from bot.agent.asking import ASK_ONLY, ask_run, finish_ask_only
from bot.agent.decisions import Approve, CallDecision, Decline, Reply, still_waiting
from bot.agent.decisions import record as record_decisions
from bot.agent.hooks import NO_HOOKS, RunHooks, guarded
from bot.agent.model import ChatModel, parse_arguments
from bot.agent.model.endings import Ending, ending_of
from bot.agent.run_limits import (
    DEFAULT_ASK_TTL,
    DEFAULT_MAX_REPLY_CHARS,
    DEFAULT_MAX_TURNS,
    DEFAULT_TURN_TIMEOUT,
    RunLimits,
)
from bot.agent.state import Answer, PendingCall, ResumeData, RunFailure, RunState, utcnow
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
from bot.agent.tools import DEFAULT_TOOL_RESULT_MAX_CHARS, Tool, ToolInputError
from bot.errors import (
    AnswerError,
    BotError,
    ContextTooLong,
    ModelCallFailed,
    NoReply,
    NotAwaitingThisKind,
    QuestionExpired,
    RunConflict,
    RunNotResumable,
    RunStopAsked,
)

log = logging.getLogger(__name__)


RESUME_ATTEMPTS = 5  # compare-and-sets one resume tries while other decisions on the same batch keep landing first


def new_run_id() -> str:
    """A fresh, unguessable run id: ``run_`` + 22 url-safe characters (128 bits)."""
    return "run_" + secrets.token_urlsafe(16)


class Agent:
    """An agent: instructions, a model, tools and a run store.

    ``max_turns`` bounds the model turns between two human inputs (start, resume or retry); a run that
    exceeds it stops with an ``error`` chunk. ``ask_ttl`` (seconds, ``None`` for none): how long a suspended
    question waits for its answer (its deadline is stored with it). ``turn_timeout`` (seconds) and
    ``max_reply_chars`` bound one model turn (``None``: unbounded); past either the run fails, retryable.
    ``history_budget`` (tokens, ``None``: unbounded): what one model request may carry; the oldest turns are left
    out past it and the stored history is bounded to a few times it (:mod:`bot.agent._loop.budget`); a request over it
    even then is not sent (the run fails with ``context_length``). ``tool_result_max_chars`` (characters, ``None``:
    unbounded): the most of one tool result's text the model gets; the rest is cut, with a marker saying so
    (:func:`bot.agent.tools.bounded_result`).
    ``limits``: these (all but ``max_turns``) as one :class:`~bot.agent.run_limits.RunLimits`; when given, it is
    used instead of the single keywords. They are read (``agent.limits``, ``agent.ask_ttl``, ...), never assigned:
    a deployment applies its own with :meth:`with_limits`.
    ``hooks``: what watches its runs (:class:`~bot.agent.hooks.RunHooks`; none by default; the Slack bot installs
    its metrics, audit and tracing with :meth:`with_hooks`).
    ``require_tool_approval``: every tool call but questions waits for a person's approval (tools can also ask
    for it one by one, ``require_approval=True``; see :mod:`bot.agent.approvals`).
    ``persist_for`` (seconds): how long a save
    that failed because the store was down keeps being retried in the background. ``lease_renew_every``
    (seconds): how often a driven run's lease is renewed (keep it well under the store's lease TTL).

    It holds its tools (``toolbox``: :class:`~bot.agent._loop.toolbox.Toolbox`) and its claims on runs (``claims``:
    :class:`~bot.agent._loop.claims.Claims`) and hands their public methods on (``tools``, ``add_tools``,
    ``question_tool``; ``approve_tool_call``, ``decline_tool_call``, ``cancel_question``, ``stop``, ``time_out``,
    ``check``, ``expire``).
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
        ask_ttl: float | None = DEFAULT_ASK_TTL,
        turn_timeout: float | None = DEFAULT_TURN_TIMEOUT,
        max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS,
        require_tool_approval: bool = False,
        persist_for: float = 600.0,
        lease_renew_every: float = 10.0,
        history_budget: int | None = DEFAULT_HISTORY_BUDGET,
        tool_result_max_chars: int | None = DEFAULT_TOOL_RESULT_MAX_CHARS,
        limits: RunLimits | None = None,
        hooks: RunHooks = NO_HOOKS,
    ) -> None:
        self.id = id
        self.name = name
        self.instructions = instructions
        self.model = model
        if limits is None:
            limits = RunLimits(
                ask_ttl=ask_ttl,
                turn_timeout=turn_timeout,
                max_reply_chars=max_reply_chars,
                history_budget=history_budget,
                tool_result_max_chars=tool_result_max_chars,
            )
        self.limits = limits
        self.max_turns = max_turns
        name_of_model = str(getattr(model, "model", "") or type(model).__name__)
        self.budget = HistoryBudget(limits.history_budget, model=name_of_model)
        self.toolbox = Toolbox(tools, agent_id=id)
        self.tools = self.toolbox.tools  # by id; the same dict for the agent's life (add_tools adds to it)
        self.store = store
        self.require_tool_approval = require_tool_approval
        self.approval_gate: ApprovalGate | None = None  # per-call say on approval (bot.agent.approvals)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"  # this agent's lease id
        self.saver = RunSaver(store, owner=self.owner, persist_for=persist_for, lease_renew_every=lease_renew_every)
        self._driving: dict[str, object] = {}  # run ids this agent drives now -> the token of the segment
        self.stops = StopRequests(store)  # stop requests of the runs it drives
        self.hooks = hooks = guarded(hooks)
        # asked by running tools (none once the run's stop is known)
        self.live = LiveQuestions(store, owner=self.owner, tools=self.tools, hooks=hooks, stops=self.stops)
        self.claims = Claims(store, owner=self.owner, stops=self.stops, driving=self._driving, hooks=hooks)

    # --- limits --------------------------------------------------------------------------------------

    def with_limits(self, limits: RunLimits) -> Agent:
        """Bound this agent's runs by ``limits`` from now on (returns the agent). The one way a deployment's limits
        reach an agent someone else built (``AGENT=``): :func:`bot.slack.app.build_bot` calls it once, before any
        run (the playground's timing panel also changes ``ask_ttl`` with it, live: what a run reads after the call is
        the new value)."""
        self.limits = limits
        self.budget.budget = limits.history_budget
        return self

    def with_hooks(self, hooks: RunHooks) -> Agent:
        """Tell ``hooks`` of this agent's runs from now on, instead of the ones it had (returns the agent): the one
        way a deployment's listeners reach an agent (:func:`bot.slack.app.build_bot` installs the Slack bot's metrics,
        audit and tracing, ``OpsHooks``, once, before any run). A hook that raises is logged and dropped
        (:class:`~bot.agent.hooks.GuardedHooks`): it never breaks a run."""
        self.hooks = self.live.hooks = self.claims.hooks = guarded(hooks)
        return self

    @property
    def ask_ttl(self) -> float | None:
        """``limits.ask_ttl`` (seconds)."""
        return self.limits.ask_ttl

    @property
    def turn_timeout(self) -> float | None:
        """``limits.turn_timeout`` (seconds)."""
        return self.limits.turn_timeout

    @property
    def max_reply_chars(self) -> int | None:
        """``limits.max_reply_chars``."""
        return self.limits.max_reply_chars

    @property
    def tool_result_max_chars(self) -> int | None:
        """``limits.tool_result_max_chars``."""
        return self.limits.tool_result_max_chars

    # --- tools (the toolbox's) --------------------------------------------------------------------

    def add_tools(self, tools: Sequence[Tool]) -> None:
        """Offer ``tools`` too, from the next model turn on (e.g. tools of MCP servers, listed after start-up).
        Raises ``ValueError``, adding none, when an id is already taken or given twice."""
        self.toolbox.add(tools)

    def question_tool(self) -> Tool:
        """The tool this agent asks people with (the first whose ``asks_person`` is set, e.g. ``ask_user``). Raises
        ``ValueError`` when it has none."""
        return self.toolbox.question_tool()

    # --- claims on runs (the claims object's) ------------------------------------------------------

    async def resume(
        self, run_id: str, decisions: Mapping[str, CallDecision], *, loaded: RunState | None = None
    ) -> AgentStream:
        """Decide what run ``run_id`` waits on, keyed by ``tool_call_id``: :class:`~bot.agent.decisions.Approve`
        (``by``, edited ``arguments``, ``scope``), :class:`~bot.agent.decisions.Decline` (``by``, ``reason``) for
        approvals, several of one turn at once; :class:`~bot.agent.decisions.Reply` (``data``, ``by``) for a
        question. See :mod:`bot.agent.decisions`.

        Returns the run's stream: it goes on once every approval of the batch is decided (a stream that only
        finishes ``suspended`` until then). ``loaded``: the run as the caller just loaded it (saves a round trip; a
        stale copy only loses the compare-and-set). Raises before anything changes: ``RunNotFound``,
        ``RunAlreadyResumed`` (a call decided already: by whom, when), ``QuestionExpired``, ``ToolCallNotPending``,
        ``NotAwaitingThisKind`` (an approval for a question or a reply for an approval), ``AnswerError`` (no
        decisions, a bad answer, edited arguments the tool refuses), ``RunNotResumable``, ``StoreUnavailable``.
        Decisions on different calls of one batch may come at the same moment from several processes: a lost
        compare-and-set is tried again on the run as it now is (``RunConflict`` only after
        :data:`RESUME_ATTEMPTS`); exactly one of them finds the batch complete and drives the run.
        """
        state = loaded if loaded is not None and loaded.run_id == run_id else await self.store.load(run_id)
        replies = {k: v for k, v in decisions.items() if isinstance(v, Reply)}
        if replies:
            if len(decisions) != 1:
                raise AnswerError("a question is answered alone: give one Reply, keyed by its tool_call_id")
            ((tool_call_id, reply),) = replies.items()
            return await self.resume_stream(
                reply.data, run_id=run_id, tool_call_id=tool_call_id, answered_by=reply.by, loaded=state
            )
        approvals = {k: v for k, v in decisions.items() if not isinstance(v, Reply)}
        for attempt in range(RESUME_ATTEMPTS):
            try:
                recorded = await record_decisions(
                    self.store,
                    state,
                    approvals,
                    tools=self.tools,
                    owner=self.owner,
                    now_of_store=self.store.now,
                    hooks=self.hooks,
                )
            except QuestionExpired:
                await self.claims.expire(state)
                raise
            except RunConflict:  # another write came first (a decision on another call of the batch?)
                if attempt == RESUME_ATTEMPTS - 1:
                    raise
                state = await self.store.load(run_id)  # the next round raises if one of these calls was decided
                continue
            return self._launch(recorded.state) if recorded.complete else still_waiting(recorded.state)
        raise AssertionError("unreachable")  # pragma: no cover

    async def approve_tool_call(
        self, *, run_id: str, tool_call_id: str | None = None, approved_by: str | None = None
    ) -> AgentStream:
        """Approve the tool call a run waits on (``tool_call_id`` None: the one it waits on first): ``resume(run_id,
        {tool_call_id: Approve(by=approved_by)})``. Raises as :meth:`resume`."""
        state = await self.store.load(run_id)
        call = tool_call_id or (await self.claims.require_open(state, None)).tool_call_id
        return await self.resume(run_id, {call: Approve(by=approved_by)}, loaded=state)

    async def edit_tool_call(
        self, *, run_id: str, tool_call_id: str, arguments: dict[str, Any], edited_by: str
    ) -> RunState:
        """Replace the arguments of the tool call a run waits to have approved with ``arguments`` (a person's edit,
        :func:`bot.agent.approvals.edit_pending`); the call stays pending, and runs with them once approved. One
        compare-and-set, before the deadline by the store's clock. Returns the saved state. Raises
        ``ToolInputError`` (invalid arguments; nothing saved), ``NotAwaitingThisKind`` (it waits for an answer),
        ``RunConflict`` (another write raced this one: load and try again) and as ``resume_stream``."""
        state = await self.store.load(run_id)
        pending = await self.claims.require_open(state, tool_call_id)
        if pending.kind != "approval":
            raise NotAwaitingThisKind(run_id=run_id, tool_call_id=pending.tool_call_id, waits_for=pending.kind)
        if not takes_edits(pending):
            raise ToolInputError(f"{pending.tool_name}'s calls take no edited arguments in this agent's framework")
        tool = schema_tool(pending) or self.toolbox.get(run_id, pending.tool_name)
        edited = edit_pending(tool, pending, arguments, edited_by=edited_by)
        return await self.store.save(
            state.model_copy(update={"pending": edited}), owner=self.owner, not_after=pending.expires_at
        )

    def argument_schema(self, pending: PendingCall) -> dict[str, Any] | None:
        """The JSON schema of the arguments of ``pending``'s call (what the model saw: the one kept with the call for
        a framework's tool, :data:`bot.agent.approvals.PARAMETERS`, else the agent's tool's), or None: the tool is not
        known here, or the call takes no edited arguments (what an Edit form is built from)."""
        if not takes_edits(pending):
            return None
        kept = kept_schema(pending)
        if kept is not None:
            return kept
        tool = self.tools.get(pending.tool_name)
        parameters = tool.spec().get("function", {}).get("parameters") if tool is not None else None
        return parameters if isinstance(parameters, dict) else None

    async def extend_approval(
        self, *, run_id: str, tool_call_id: str, expires_at: datetime, notes: dict[str, Any]
    ) -> RunState:
        """Give the approval request a run waits on (its deadline passed or not, nobody decided yet) a new deadline,
        ``expires_at``, and add ``notes`` to the approval gate's notes kept with it (an approval policy's ``on_deadline:
        escalate``: who it went to). One compare-and-set. Returns the saved state. Raises ``RunNotResumable`` (no
        approval request waits, or it was decided), ``RunConflict`` (another write raced this one),
        ``RunNotFound``, ``StoreUnavailable``."""
        state = await self.store.load(run_id)
        pending = state.pending
        waiting = state.status in ("suspended", "expired") and pending is not None and pending.resume is None
        if not waiting or pending is None or pending.tool_call_id != tool_call_id or pending.kind != "approval":
            raise RunNotResumable(run_id, state.status, "no approval request of that call waits")
        payload = {**pending.suspend_payload, POLICY_NOTES: {**policy_notes(pending), **notes}}
        extended = pending.model_copy(update={"expires_at": expires_at, "suspend_payload": payload})
        return await self.store.save(
            state.model_copy(update={"pending": extended, "status": "suspended"}), owner=self.owner
        )

    async def decline_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        reason: str | None = None,
        declined_by: str | None = None,
    ) -> AgentStream:
        """Decline the tool call a run waits on: ``resume(run_id, {tool_call_id: Decline(by=declined_by,
        reason=reason)})``. Raises as :meth:`resume`."""
        state = await self.store.load(run_id)
        call = tool_call_id or (await self.claims.require_open(state, None)).tool_call_id
        return await self.resume(run_id, {call: Decline(by=declined_by, reason=reason)}, loaded=state)

    async def cancel_question(
        self, *, run_id: str, tool_call_id: str | None = None, cancelled_by: str | None = None
    ) -> AgentStream:
        """Withdraw the question a run waits on: :meth:`Claims.cancel_question
        <bot.agent._loop.claims.Claims.cancel_question>`."""
        return self._go_on(
            await self.claims.cancel_question(run_id=run_id, tool_call_id=tool_call_id, cancelled_by=cancelled_by)
        )

    async def stop(self, *, run_id: str, stopped_by: str | None = None) -> bool:
        """Ask the process driving a run to stop it; False when nothing works: :meth:`Claims.stop
        <bot.agent._loop.claims.Claims.stop>`."""
        return await self.claims.stop(run_id=run_id, stopped_by=stopped_by)

    async def time_out(self, *, run_id: str, tool_call_id: str | None = None) -> AgentStream:
        """Go on without an answer past the deadline: :meth:`Claims.time_out
        <bot.agent._loop.claims.Claims.time_out>`."""
        return self._go_on(await self.claims.time_out(run_id=run_id, tool_call_id=tool_call_id))

    async def check(self, state: RunState, tool_call_id: str | None = None) -> AnswerCheck:
        """Whether ``state`` can take an answer now: :meth:`Claims.check <bot.agent._loop.claims.Claims.check>`."""
        return await self.claims.check(state, tool_call_id)

    async def expire(self, state: RunState) -> RunState:
        """Close ``state``'s question if its deadline passed: :meth:`Claims.expire
        <bot.agent._loop.claims.Claims.expire>`."""
        return await self.claims.expire(state)

    # --- public API ------------------------------------------------------------------------------

    async def stream(
        self,
        input: str | list[dict[str, Any]],
        *,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        history: list[dict[str, Any]] | None = None,
        require_tool_approval: bool = False,
    ) -> AgentStream:
        """Start a run. ``input``: the user's text, or Chat Completions messages. ``history``: earlier
        messages of the conversation (e.g. a finished run's ``messages``). ``metadata``: the caller's, kept
        with the run. ``require_tool_approval``: every tool call of this run but questions waits for approval.
        Raises ``StoreUnavailable`` or ``RunConflict`` (``run_id`` taken) before anything runs.
        """
        messages = list(history or [])
        messages += [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        messages = self.budget.bound_stored(messages) or messages  # what no request can send is not stored
        state = RunState(
            run_id=run_id or new_run_id(),
            agent_id=self.id,
            messages=messages,
            metadata=dict(metadata or {}),
            require_tool_approval=require_tool_approval,
        )
        state = await self.store.create(state, owner=self.owner)
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

        Exactly one resume per ``(run_id, tool_call_id)`` wins, across processes; the claim is refused once the
        question's deadline passed by the store's clock. Raises, before anything changes: ``RunNotFound``
        (unknown or past retention), ``RunAlreadyResumed`` (answered already: by whom, when),
        ``QuestionExpired`` (the run is then marked ``expired``), ``ToolCallNotPending`` (another question is
        pending), ``AnswerError`` (wrong shape, blank, label not offered), ``RunNotResumable``,
        ``StoreUnavailable`` (the claim's outcome is then unknown: a later call finds it applied or not, and an
        applied claim whose run nobody drives is taken over by :meth:`retry_stream`).
        """
        state = loaded if loaded is not None and loaded.run_id == run_id else await self.store.load(run_id)
        pending = await self.claims.require_open(state, tool_call_id)
        if pending.kind != "question":
            raise NotAwaitingThisKind(run_id=run_id, tool_call_id=pending.tool_call_id, waits_for=pending.kind)
        tool = self.toolbox.get(state.run_id, pending.tool_name)
        data = tool.validate_resume(resume_data, pending.suspend_payload)
        answer = Answer(
            tool_call_id=pending.tool_call_id, resume_data=data, answered_by=answered_by, answered_at=utcnow()
        )
        return self._go_on(await self.claims.claim(state, pending, answer))

    async def retry_stream(self, *, run_id: str) -> AgentStream:
        """Continue a run that stopped on an error (model failure, turn limit), or an orphaned one (``running``
        but nobody drives it: its process died, or a claim's reply was lost), without asking anything again. A stop
        asked of it meanwhile (:meth:`stop`) stops it before its first step.

        Raises ``RunNotFound``, ``RunNotResumable`` (suspended, completed, expired, driven by a live process,
        or another process took it first), ``StoreUnavailable``.
        """
        state = await self.store.load(run_id)
        if state.status != "failed" and not await self.is_orphaned(state):
            why = {
                "suspended": "it waits for an answer; resume it instead",
                "completed": "it has finished",
                "expired": "its question expired",
                "running": "it is running",
            }.get(state.status, "")
            raise RunNotResumable(run_id, state.status, why)
        try:
            claimed = await self.store.save(
                state.model_copy(update={"status": "running", "error": None, "turns": 0}), owner=self.owner
            )
        except RunConflict:
            raise RunNotResumable(run_id, "running", "another process took it first") from None
        self._driving[run_id] = claimed  # before the next await: see _launch
        try:
            self.hooks.on_retried(claimed)
            await self.stops.poll(run_id)  # taken over: a stop asked while nobody drove it stops it before any step
        except BaseException:  # cancelled before it was launched: not driven here after all
            if self._driving.get(run_id) is claimed:
                del self._driving[run_id]
            raise
        return self._launch(claimed)

    async def get_run(self, run_id: str, *, beside: Any = None) -> RunState:
        """The stored state of a run (a save of it this process still owes since an outage is made first:
        :meth:`RunSaver.settle`). ``beside``: the store's batch of other reads sent with the load, in one round
        trip (see :meth:`RunStore.load`). Raises ``RunNotFound``, ``StoreCorrupt``, ``StoreUnavailable``."""
        await self.saver.settle(run_id)
        return await self.store.load(run_id, beside=beside)

    async def is_orphaned(self, state: RunState) -> bool:
        """True for a ``running`` run that no live process drives (no lease, or this agent's lease on a run it
        is not driving). Raises ``StoreUnavailable``."""
        if state.status != "running" or state.run_id in self._driving:
            return False  # this process drives it (its lease may have lapsed: the next renewal takes it back)
        holder = await self.store.lease_owner(state.run_id)
        return holder is None or holder == self.owner

    async def ask(
        self,
        question: dict[str, Any],
        *,
        run_id: str | None = None,
        reply: str,
        metadata: dict[str, Any] | None = None,
        tool_id: str | None = None,
    ) -> AgentStream:
        """Start a run that only asks ``question`` (the arguments of this agent's question tool, e.g.
        ``{"question", "options", "selection_mode"}``; ``tool_id``: another tool to call, e.g. one that needs an
        approval: :func:`bot.agent.asking.approval_tool`) and ends with ``reply`` once it has its outcome (see
        :mod:`bot.agent.asking`); the stream ends suspended on the question. Raises ``ValueError`` when the agent
        has no such tool, ``ToolInputError`` for a malformed question, ``StoreUnavailable`` or
        ``RunConflict`` (``run_id`` taken), all before anything is stored."""
        tool = self.tools.get(tool_id) if tool_id is not None else self.toolbox.question_tool()
        if tool is None:
            raise ValueError(f"agent {self.id} has no tool {tool_id!r}")
        tool.parse_args(question)
        state = ask_run(
            question,
            run_id=run_id or new_run_id(),
            agent_id=self.id,
            tool_name=tool.id,
            reply=reply,
            metadata=dict(metadata or {}),
        )
        state = await self.store.create(state, owner=self.owner)
        return self._launch(state)

    # --- the loop --------------------------------------------------------------------------------

    def _go_on(self, claimed: Claimed) -> AgentStream:
        """The stream of a run a claim of this agent won: driven here, or only ``handed_off``."""
        return claimed.handed_off_stream() if claimed.handed_off else self._launch(claimed.state)

    def _launch(self, state: RunState) -> AgentStream:
        stream = AgentStream(state.run_id)
        # driven here from now, before its task starts: a request of this process meanwhile (a second Retry, a
        # mention) never takes it for an orphan of its own (its lease is this process's) and drives it twice
        run_id, token = state.run_id, object()
        self._driving[run_id] = token
        stream._start(self._drive_leased(state, stream))

        def ended(_task: object) -> None:  # also for a task cancelled before it started (its body never ran)
            if self._driving.get(run_id) is token:  # not a later segment's, launched meanwhile
                del self._driving[run_id]

        assert stream._task is not None
        stream._task.add_done_callback(ended)
        return stream

    async def _drive_leased(self, state: RunState, out: AgentStream) -> RunState | None:
        """Drive the run while renewing its lease; the final save drops the lease."""
        run_id = state.run_id
        ended = asyncio.Event()
        heartbeat = asyncio.ensure_future(self.saver.keep_lease(state, also=self.stops.poll, until=ended))
        try:
            async with self.hooks.run_segment(run_id):
                return await self._drive(state, out)
        finally:
            ended.set()
            heartbeat.cancel()
            self.stops.forget(run_id)

    async def _drive(self, state: RunState, out: AgentStream) -> RunState | None:
        run_id = state.run_id
        try:
            try:
                state, ending = await self._advance(state, out)
            except Suspended:
                stopped_by = self.stops.take(run_id)  # known by now (e.g. while an approval check ran): nobody asked
                if stopped_by is not None:
                    return await self._end_stopped(state, out, by=stopped_by)
                try:
                    state = await self.saver.save_final(state)
                except RunStopAsked as asked:  # asked in another process, not learnt here yet: the store refused
                    return await self._end_stopped(state, out, by=asked.by)
                assert state.pending is not None
                self.hooks.on_asked(state, state.pending)
                if state.pending.kind == "approval":
                    out.emit(ApprovalChunk(run_id, approval_payload(state.pending)))
                else:
                    out.emit(SuspendedChunk(run_id, self._suspended_payload(state.pending)))
                out.emit(FinishChunk(run_id, FinishPayload(status="suspended", text=last_text(state))))
                return state
            except Stopped as stop:
                return await self._end_stopped(state, out, by=stop.by)
            except ModelCallFailed as exc:
                state.status, state.error = "failed", RunFailure(kind="model", message=str(exc))
                state = await self.saver.save_final(state)
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
                state = await self.saver.save_final(state)
                out.emit(ErrorChunk(run_id, ErrorPayload(kind="max_turns", message=failure.message)))
                return state
            state = await self.saver.save_final(state)
            out.emit(FinishChunk(run_id, FinishPayload(status="completed", text=last_text(state), ending=ending)))
            return state
        except RunConflict:  # another process took the run over (this one's lease lapsed): its result wins
            log.warning("run %s: taken over by another process; this segment's result is dropped", run_id)
            out.emit(ErrorChunk(run_id, ErrorPayload(kind="superseded", message="continued by another process")))
        except BotError as exc:  # the store is down for good, or the run expired meanwhile
            log.warning("run %s: could not save: %s", run_id, exc)
            out.emit(ErrorChunk(run_id, ErrorPayload(kind="store", message=str(exc))))
        except Exception:
            log.exception("run %s: internal error", run_id)
            message = "internal error in the agent runtime"
            out.emit(ErrorChunk(run_id, ErrorPayload(kind="internal", message=message)))
        return None

    async def _end_stopped(self, state: RunState, out: AgentStream, *, by: str) -> RunState:
        """End the segment stopped at a person's request (:func:`bot.agent._loop.stopping.wrap_up`) and save it."""
        text = wrap_up(state, out)
        state = await self.saver.save_final(state)
        out.emit(FinishChunk(state.run_id, FinishPayload(status="stopped", text=text, stopped_by=by)))
        return state

    history_of = staticmethod(history_of)
    """The run's messages up to its last consistent point (see :func:`bot.agent._loop.history.history_of`)."""

    async def _advance(self, state: RunState, out: AgentStream) -> tuple[RunState, Ending | None]:
        """Run until the model answers without tool calls (returns the state, and why its last turn's text is
        incomplete when it is: :func:`bot.agent.model.endings.ending_of`), a tool suspends (raises ``Suspended`` with
        ``state`` updated in place) or the model fails (raises ``ModelCallFailed``)."""
        if state.pending is not None:
            only_records = ASK_ONLY in state.metadata or records_an_answer(
                state.pending, self.tools.get(state.pending.tool_name)
            )
            # a stop asked while nobody drove the run (its process died after a claim): the decided call never
            # starts, nor runs again (wrap_up gives it its stopped result); what a person said is kept (an answer; an
            # outside agent's question or approval, whose run does nothing else). Taken over: it must not run twice.
            await self._before_step(state, stop=not only_records)
            pending, state.pending = state.pending, None
            await continue_pending(self._runner(self.tools), state, pending, out, save=self._save_midway)
        plan: tuple[tuple[str, str], ...] = ()  # the calls of the turn just made, when it made several
        while True:
            while state.queued:
                await self._before_step(state)
                call = state.queued.pop(0)
                try:
                    args = parse_arguments(call.arguments)
                except ValueError as exc:
                    out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, {})))
                    error = {"error": f"{call.name}: {exc}"}
                    self._runner(self.tools).add_result(state, call, error, out, is_error=True)
                    continue
                out.emit(ToolCallChunk(state.run_id, ToolCallPayload(call.id, call.name, args, plan=plan)))
                plan = ()
                # the model calls no hidden tool
                runner = self._runner(self.tools if ASK_ONLY in state.metadata else self.toolbox.offered)
                tool = runner.tools.get(call.name)
                decided = decided_in_batch(state, call, tool)  # asked with an earlier call of the turn, decided
                if decided is not None:
                    await run_decided(runner, state, decided, out, save=self._save_midway)
                    continue
                gate, agent_wide = self.approval_gate, self.require_tool_approval
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
            if finish_ask_only(state):  # a run that only asked: the answer was all it was for
                return state, None
            if state.turns >= self.max_turns:
                state.status = "failed"
                state.error = RunFailure(
                    kind="max_turns", message=f"stopped after {self.max_turns} model turns without finishing"
                )
                return state, None
            check_tool_messages(state.messages)
            await self._before_step(state)
            turns = ModelTurns(
                model=self.model,
                instructions=self.instructions,
                budget=self.budget,
                tools=self.toolbox.specs,
                tools_tokens=self.toolbox.tokens,
                turn_timeout=self.turn_timeout,
                max_reply_chars=self.max_reply_chars,
                hooks=self.hooks,
            )
            # a stop asked meanwhile cancels the turn: Stopped
            turn = await self.stops.unless_stopped(state.run_id, budgeted_turn(turns, state, out=out))
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

    async def _before_step(self, state: RunState, *, stop: bool = True) -> None:
        """Before each step of ``state`` (a model turn, a tool call): a stop known ends the run here (``Stopped``,
        unless ``stop`` is False), and so does its lease taken by another process meanwhile (``RunConflict``: the
        step would be done twice, :meth:`RunSaver.check_lease`)."""
        if stop:
            self.stops.check(state.run_id)
        await self.saver.check_lease(state)

    def _runner(self, tools: dict[str, Tool]) -> ToolRunner:
        """How a call of one of ``tools`` runs now (the limits and hooks as they are at this call: a deployment may
        change them between two calls, :meth:`with_limits`)."""
        return ToolRunner(
            tools=tools,
            ask_ttl=self.ask_ttl,
            max_result_chars=self.tool_result_max_chars,
            hooks=self.hooks,
            live=self.live,
        )

    async def _save_midway(self, state: RunState) -> None:
        """Save ``state`` in the middle of a segment (keeps the same object: its revision moves on). Raises
        ``RunConflict`` when another process took the run over, ``StoreUnavailable``."""
        saved = await self.store.save(state, owner=self.owner)
        state.revision, state.updated_at = saved.revision, saved.updated_at

    def _suspended_payload(self, pending: PendingCall) -> SuspendedPayload:
        tool = self.tools.get(pending.tool_name)
        payload = tool.load_suspend_payload(pending.suspend_payload) if tool else pending.suspend_payload
        return SuspendedPayload(
            pending.tool_call_id, pending.tool_name, pending.args, payload, pending.expires_at, pending.suspended_at
        )
