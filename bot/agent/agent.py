"""The agent's public face: :class:`Agent` (instructions, a model, tools, a run store) with ``stream``,
``resume_stream``, ``resume`` and ``retry_stream``; the loop that drives its runs is :mod:`bot.agent._loop.driving`.

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
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.agent._loop import driving
from bot.agent._loop.budget import DEFAULT_HISTORY_BUDGET, HistoryBudget
from bot.agent._loop.claims import Claimed, Claims
from bot.agent._loop.history import history_of
from bot.agent._loop.live_questions import LiveQuestions
from bot.agent._loop.saving import RunSaver
from bot.agent._loop.stopping import StopRequests
from bot.agent._loop.toolbox import Toolbox
from bot.agent.answers import AnswerCheck, undecided
from bot.agent.approvals import (
    POLICY_NOTES,
    ApprovalGate,
    edit_pending,
    kept_schema,
    policy_notes,
    schema_tool,
    takes_edits,
)
from bot.agent.asking import ask_run
from bot.agent.decisions import Approve, CallDecision, Decline, Reply, still_waiting
from bot.agent.decisions import record as record_decisions
from bot.agent.hooks import NO_HOOKS, RunHooks, guarded
from bot.agent.model import ChatModel
from bot.agent.model.endings import Ending
from bot.agent.run_limits import (
    DEFAULT_ASK_TTL,
    DEFAULT_MAX_REPLY_CHARS,
    DEFAULT_MAX_TURNS,
    DEFAULT_TURN_TIMEOUT,
    RunLimits,
)
from bot.agent.state import Answer, PendingCall, ResumeData, RunState, utcnow
from bot.agent.store import RunStore
from bot.agent.stream import AgentStream
from bot.agent.tools import DEFAULT_TOOL_RESULT_MAX_CHARS, Tool, ToolInputError
from bot.errors import (
    AnswerError,
    NotAwaitingThisKind,
    QuestionExpired,
    RunConflict,
    RunNotFound,
    RunNotResumable,
    StoreCorrupt,
)

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
        self.driving: dict[str, object] = {}  # run ids this agent drives now -> the token of the segment
        self.stops = StopRequests(store)  # stop requests of the runs it drives
        self.hooks = hooks = guarded(hooks)
        # asked by running tools (none once the run's stop is known)
        self.live = LiveQuestions(store, owner=self.owner, tools=self.tools, hooks=hooks, stops=self.stops)
        self.claims = Claims(store, owner=self.owner, stops=self.stops, driving=self.driving, hooks=hooks)

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
        assert state.pending is not None  # it waits on ``pending``: itself or one of its batch
        return await self.store.save(
            state.model_copy(update={"pending": state.pending.replacing(edited)}),
            owner=self.owner,
            not_after=pending.expires_at,
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
        """Give the approval request a run waits on (its deadline passed or not, nobody decided yet; the pending call or
        one of its batch, ``tool_call_id``) a new deadline,
        ``expires_at``, and add ``notes`` to the approval gate's notes kept with it (an approval policy's ``on_deadline:
        escalate``: who it went to). One compare-and-set. Returns the saved state. Raises ``RunNotResumable`` (no
        approval request waits, or it was decided), ``RunConflict`` (another write raced this one),
        ``RunNotFound``, ``StoreUnavailable``."""
        state = await self.store.load(run_id)
        head = state.pending
        waiting = state.status in ("suspended", "expired") and head is not None and head.resume is None
        call = next((c for c in undecided(state) if c.tool_call_id == tool_call_id), None) if waiting else None
        if head is None or call is None or call.kind != "approval":
            raise RunNotResumable(run_id, state.status, "no approval request of that call waits")
        payload = {**call.suspend_payload, POLICY_NOTES: {**policy_notes(call), **notes}}
        extended = call.model_copy(update={"expires_at": expires_at, "suspend_payload": payload})
        return await self.store.save(
            state.model_copy(update={"pending": head.replacing(extended), "status": "suspended"}), owner=self.owner
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

    async def expire(self, state: RunState, tool_call_id: str | None = None, *, whole: bool = False) -> RunState:
        """Close ``state``'s question (``tool_call_id``: that call of a batch) if its deadline passed:
        :meth:`Claims.expire <bot.agent._loop.claims.Claims.expire>`."""
        return await self.claims.expire(state, tool_call_id, whole=whole)

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
        self.driving[run_id] = claimed  # before the next await: see _launch
        try:
            self.hooks.on_retried(claimed)
            await self.stops.poll(run_id)  # taken over: a stop asked while nobody drove it stops it before any step
        except BaseException:  # cancelled before it was launched: not driven here after all
            if self.driving.get(run_id) is claimed:
                del self.driving[run_id]
            raise
        return self._launch(claimed)

    async def get_run(self, run_id: str, *, beside: Any = None) -> RunState:
        """The stored state of a run (a save of it this process still owes since an outage is made first:
        :meth:`RunSaver.settle`). ``beside``: the store's batch of other reads sent with the load, in one round
        trip (see :meth:`RunStore.load`). Raises ``RunNotFound``, ``StoreCorrupt``, ``StoreUnavailable``."""
        await self.saver.settle(run_id)
        return await self.store.load(run_id, beside=beside)

    async def is_orphaned(self, state: RunState, *, wait: bool = False) -> bool:
        """True for a ``running`` run that no live process drives (no lease, or this agent's lease on a run it
        is not driving), and still ``running`` as stored (a lease also goes with the save that ends a segment: a
        run its process failed, completed or suspended meanwhile is no orphan). ``wait``: another process's live
        lease may be a dead one's (a job redelivered once its worker died, before that worker's lease lapsed):
        look again each second until it lapses, for at most the store's ``lease_ttl`` (seconds; then False: its
        holder lives). Raises ``StoreUnavailable``."""
        if state.status != "running" or state.run_id in self.driving:
            return False  # this process drives it (its lease may have lapsed: the next renewal takes it back)
        until = time.monotonic() + (self.store.lease_ttl + 1 if wait else 0)
        while True:
            holder = await self.store.lease_owner(state.run_id)
            if holder is None or holder == self.owner:
                try:
                    stored = await self.store.load(state.run_id)
                except (RunNotFound, StoreCorrupt):
                    return False
                return stored.status == "running" and state.run_id not in self.driving  # (not taken up meanwhile)
            if time.monotonic() >= until:
                return False
            await asyncio.sleep(1.0)

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
        if claimed.waiting:
            return still_waiting(claimed.state)
        return claimed.handed_off_stream() if claimed.handed_off else self._launch(claimed.state)

    def _launch(self, state: RunState) -> AgentStream:
        """Drive ``state`` in this process from now (:func:`bot.agent._loop.driving.launch`); its stream."""
        return driving.launch(self, state)

    history_of = staticmethod(history_of)
    """The run's messages up to its last consistent point (see :func:`bot.agent._loop.history.history_of`)."""

    async def _advance(self, state: RunState, out: AgentStream) -> tuple[RunState, Ending | None]:
        """One segment's steps: the tool-calling loop (:func:`bot.agent._loop.driving.advance`). An agent whose run
        is another framework's overrides it (:class:`bot.frameworks.base.FrameworkAgent`)."""
        return await driving.advance(self, state, out)

    async def _before_step(self, state: RunState, *, stop: bool = True) -> None:
        """A stop known, or the run taken over, ends it here: :func:`bot.agent._loop.driving.before_step`."""
        await driving.before_step(self, state, stop=stop)
