"""An outside agent's question, asked in Slack and waited for: :class:`Asker`.

A question is a run that only asks (:meth:`bot.agent.Agent.ask`), so it is posted, answered, reminded, escalated,
listed in the Home inbox and expired exactly as the bot's own questions, and its answer is claimed exactly once in
whichever bot process Slack sends the click to. In Slack it opens a thread in ``channel``: a first message saying
an agent asks (with the caller's ``context``), the question in its thread (a typed reply there answers it too).

The caller waits on the run in Redis (:meth:`Asker.wait`, one read per ``poll`` seconds) until the question has
an outcome. ``request_key`` names the question: the same key asks nothing new, it waits for the stored question
(after a restart of the MCP server, or a client's retry). Keys are the caller's own (:func:`run_id_for`): another
caller's same key is another question.

Every question is a caller's (:class:`bot.mcp_server.callers.Caller`): it is asked only where and of whom the caller
may ask (:func:`~bot.mcp_server.callers.check_target`), within its limits (:mod:`bot.mcp_server.limits`), and its
first message names the caller ("Claude Code on build-42 asks @alice").
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from bot.agent.answers import Open
from bot.agent.asking import APPROVAL_TOOL, ASKER, approval_outcome, ask_outcome, asked_tool
from bot.agent.state import RunState
from bot.agent.tools import ToolInputError
from bot.errors import BotError, RunConflict, RunNotFound, StoreUnavailable
from bot.mcp_server.callers import IMPLICIT, PERSON, Caller, check_approval, check_target, implicit_caller
from bot.mcp_server.limits import CallerLimits
from bot.slack.approvals.rules import call_decision
from bot.slack.context import ASKER_KEY, SlackContext, slack_id
from bot.slack.conversations import Threads
from bot.slack.names import Names
from bot.slack.questions.attempt import Attempt
from bot.slack.render.blocks import MAX_SELECT_OPTIONS
from bot.slack.render.mrkdwn import clip
from bot.slack.render.safe_text import safe_mrkdwn

log = logging.getLogger(__name__)

AGENT_THAT_ASKED = ASKER
"""Who withdrew a question its asking agent gave up on (a client's cancellation, ``tasks/cancel``): its run's
withdrawal answer's ``answered_by`` and the outcome's ``cancelled_by`` (:data:`bot.agent.asking.ASKER`)."""

REPLY = "Your answer is recorded for the agent that asked: it gets it now, or when it asks again if it stopped waiting."
"""Posted in the thread once a person answers a question asked with a ``request_key``. Not "went back": the client
may have given up waiting (a request timeout, e.g. the MCP Inspector CLI's 60 s); the answer stays in Redis for its
``request_key``."""
REPLY_UNKEYED = "Your answer is recorded for the agent that asked: it gets it if it is still waiting."
"""Posted once a person answers a question asked without a ``request_key``: nothing can ask for it again (a client
that stops waiting withdraws it; a server restart leaves it open with nobody waiting)."""


def reply_of(*, keyed: bool, approval: bool) -> str:
    """What the thread says once a person answered (:data:`REPLY`, :data:`REPLY_UNKEYED`), of an approval request
    (``request_approval``) as a decision: "Your decision is recorded ..." (an approval is approved or declined, not
    answered)."""
    text = REPLY if keyed else REPLY_UNKEYED
    return text.replace("Your answer", "Your decision") if approval else text


FINGERPRINT = "ask_fingerprint"  # run metadata: what its request_key was asked with (see fingerprint)
CALLER = "mcp_caller"  # run metadata: the name of the caller that asked (absent: the implicit caller); the audit
# lines name it (bot.ops.audit.MCP_CALLER)
MCP_TOOL = "mcp_tool"  # run metadata: the MCP tool that asked (its result's shape; absent: by the run's tool)
CANCEL_CHECK = 0.2  # seconds between looks at whether a waiting call ended (between its reads of Redis)
CLIENT_NAME = 60  # characters of the client's own name (clientInfo.name) shown in Slack
ENDED = ("completed", "failed", "expired")


class AskError(BotError):
    """A question that can't be asked (no channel or person to ask, Slack refused the post); ``str`` says why."""


class KeyTaken(AskError):
    """The request_key names a question asked otherwise (another question, channel, person or tool), stored
    already: by an earlier call, or by one racing this one (which then holds the key's place in its caller's
    waiting count: :meth:`Asker.ask` leaves it)."""


@dataclass(frozen=True)
class Asked:
    """A question in Slack: its run, where it is, who may answer."""

    run_id: str
    channel_id: str
    thread_ts: str
    user: str  # "" when anyone in the channel may answer


class WholeCall(NamedTuple):
    """The call an outside agent's approval request shows only in part (Claude Code's permission prompt: its
    ``tool_name`` and ``input``, shown cut and as text): what its request_key stands for, and what
    ``APPROVAL_POLICY``'s rules match on (:meth:`Asker.ask`)."""

    tool_name: str
    input: dict[str, Any]


def fingerprint(question: Any, *, tool_id: str | None, channel: str, user: str | None) -> str:
    """What a request_key stands for: the question, its tool, where and whom (a digest, kept with the run)."""
    what = json.dumps([question, tool_id, channel, user], sort_keys=True, default=str)
    return hashlib.sha256(what.encode()).hexdigest()


def run_id_for(request_key: str, *, caller: str = IMPLICIT) -> str:
    """The run id of the question ``caller`` named ``request_key`` (the same caller and key, the same run). The
    implicit caller's (``""``) are the ids stored before ``MCP_CALLERS`` existed (``run_mcp_``), so a deployment's
    waiting questions stay found; a named caller's are ``run_mcpc_`` of its name and key, never another's."""
    if caller == IMPLICIT:
        return "run_mcp_" + hashlib.sha256(request_key.encode()).hexdigest()[:32]
    return "run_mcpc_" + hashlib.sha256(f"{caller}\n{request_key}".encode()).hexdigest()[:32]


def asked_by(caller: Caller, client: str | None) -> str:
    """Who asks, as the question's first message says it: the MCP client's name (``clientInfo.name``, clipped and
    made plain) and the caller's: ``Claude Code on build-42``, ``An agent on build-42``, ``Claude Code``, or
    ``An agent`` (the implicit caller, a client with no name)."""
    plain = re.sub(r"[^\w .()/+-]", "", " ".join((client or "").split()))[:CLIENT_NAME].strip()
    who = plain or "An agent"
    return f"{who} on {caller.name}" if caller.name else who


class Asker:
    """Asks through ``threads`` (the bot's agent, Slack and stores) in team ``team_id``."""

    def __init__(self, threads: Threads, *, team_id: str, poll: float = 1.0) -> None:
        self.threads, self.team_id, self.poll = threads, team_id, poll
        self.agent = threads.agent
        self.names: Names = threads.writer.names  # progress messages go to a client that can't render <@U…>
        self.limits = CallerLimits(threads.index.client, keys=threads.index.keys, agent=threads.agent)
        self.approvers = threads.answering.permissions.approvers  # who decides approvals (APPROVERS, the policy)

    async def ask(
        self,
        question: dict[str, Any],
        *,
        channel: str | None,
        user: str | None,
        context: str | None = None,
        request_key: str | None = None,
        tool_id: str | None = None,
        caller: Caller | None = None,
        client: str | None = None,
        metadata: dict[str, Any] | None = None,
        whole: WholeCall | None = None,
    ) -> Asked:
        """Post ``question`` (the agent's ``ask_user`` input; with ``tool_id`` another tool's, e.g. an approval
        request) in ``channel`` for ``user`` (None: anyone there may answer) as ``caller`` (default: an implicit
        caller of ``channel``) through MCP client ``client`` (its ``clientInfo.name``), or find the question the
        caller already asked under ``request_key`` (the same key with another question, tool, channel or person is
        refused). Raises :class:`AskError` (bad channel or person, a malformed question, Slack refused to post it,
        the key is taken), :class:`~bot.mcp_server.callers.Refused` (the caller may not ask there or that person,
        may not request this approval, or is over a limit), ``StoreUnavailable``. ``metadata``: kept with the run
        (e.g. :data:`MCP_TOOL`); ``whole``: the call an approval request shows only in part (Claude Code's
        permission prompt: its input cut and as text), which the request_key stands for too and ``APPROVAL_POLICY``'s
        rules match on (here, once: the rule is named in the request, :meth:`_ruled`)."""
        channel_id, person = slack_id(channel), slack_id(user)
        if channel_id is None:
            raise AskError("no channel to ask in: give `channel` (a Slack channel id) or set MCP_ASK_CHANNEL")
        if user and person is None:
            raise AskError(f"`user` must be a Slack user id (U…), not {clip(user, 40)!r}")
        caller = caller or implicit_caller(channel=channel_id)
        check_target(caller, channel=channel_id, person=person)
        if PERSON.fullmatch(channel_id):  # a DM: its question is its person's (nobody else reads that DM)
            if person not in (None, channel_id):
                raise AskError(f"a question in {channel_id}'s DM is for {channel_id}: give them as `user`, or none")
            person = channel_id
        if person is not None and await self.names.exists(person) is False:
            raise AskError(f"no one to ask: {person} is not a user of this workspace (or deactivated, or a bot)")
        asked_with = question if whole is None else [question, whole.input]
        print_ = fingerprint(asked_with, tool_id=tool_id, channel=channel_id, user=person)
        if tool_id == APPROVAL_TOOL:
            if whole is not None:  # after the fingerprint: the same request asked again after a policy change
                question = await self._ruled(question, whole, channel_id=channel_id, person=person)
            await self._check_approval(question, caller=caller, channel_id=channel_id, person=person)
        run_id = run_id_for(request_key, caller=caller.name) if request_key else None
        if run_id is not None and (found := await self._find(run_id, fingerprint=print_)) is not None:
            return found
        self._check(question, tool_id=tool_id)
        run_id = run_id or f"run_mcpc_{secrets.token_hex(16)}"
        await self.limits.admit(caller, run_id=run_id)
        try:
            return await self._post(
                question,
                channel_id=channel_id,
                person=person,
                context=context,
                run_id=run_id,
                print_=print_,
                tool_id=tool_id,
                caller=caller,
                client=client,
                metadata=metadata or {},
            )
        except KeyTaken:  # another call asked under this key meanwhile: its place in the count, not this one's
            raise
        except BaseException:
            await self.limits.release(caller, run_id=run_id)
            raise

    async def _post(
        self,
        question: dict[str, Any],
        *,
        channel_id: str,
        person: str | None,
        context: str | None,
        run_id: str,
        print_: str,
        tool_id: str | None,
        caller: Caller,
        client: str | None,
        metadata: dict[str, Any],
    ) -> Asked:
        """Ask ``question`` (checked, admitted) as run ``run_id``: see :meth:`ask`."""
        web = self.threads.web
        whom = f"<@{person}>" if person else "anyone here"
        what = " to approve" if tool_id == APPROVAL_TOOL else ""
        context = await self._channel_context(question, context, tool_id=tool_id, channel_id=channel_id, person=person)
        # every line quoted: the agent's words, never a line that reads as the bot's own (a break-it pass)
        quoted = (
            ":\n" + "\n".join(f">{line}" for line in clip(safe_mrkdwn(context), 2000).split("\n"))
            if context
            else " (in the thread)"
        )
        who = asked_by(caller, client)
        posted = await web.post_to(channel_id, text=f":robot_face: {who} asks {whom}{what}{quoted}")
        if posted is None:
            raise AskError(f"Slack refused to post in {channel_id} (is the bot in that channel?)")
        # where Slack put it: a DM asked as its person's user id is its D… conversation, where clicks come from (the
        # run kept the U… id: every answer was refused as not this conversation's, a break-it pass)
        channel_id, root = posted
        ctx = SlackContext(
            team_id=self.team_id, channel_id=channel_id, thread_ts=root, requester=person or "", message_ts=root
        )
        try:
            kept = {
                **metadata,
                **ctx.to_metadata(),
                FINGERPRINT: print_,
                **({CALLER: caller.name} if caller.name else {}),
                ASKER_KEY: who,
            }
            reply = reply_of(keyed=run_id is not None, approval=tool_id == APPROVAL_TOOL)
            stream = await self.agent.ask(question, run_id=run_id, reply=reply, metadata=kept, tool_id=tool_id)
        except BaseException as exc:
            await web.delete(channel_id, root)  # no question in that thread: nothing to leave behind
            if isinstance(exc, RunConflict) and run_id is not None:  # asked under the same key meanwhile
                found = await self._find(run_id, fingerprint=print_)
                if found is not None:
                    return found
            raise
        index = self.threads.index
        await index.claim_thread(ctx.team_id, channel_id=channel_id, thread_ts=root, run_id=stream.run_id, after=None)
        asked = question.get("question") or question.get("action")  # the agent session's title: who asks what
        title = f"{who}: {' '.join(str(asked).split())}" if isinstance(asked, str) and asked.strip() else who
        await self.threads.writer.follow(stream, ctx, request=title)
        state = await self.agent.get_run(stream.run_id)
        outcome = ask_outcome(state)  # None: waiting (or answered already)
        if outcome is not None and "error" in outcome:
            raise AskError(f"the question was not asked: {outcome['error']}")
        call = f"ask_{state.run_id}"
        if outcome is None and not await index.messages(state.run_id, call):  # Slack refused the question itself
            await (await self.agent.cancel_question(run_id=state.run_id, tool_call_id=call)).collect()
            raise AskError(f"Slack refused to post the question in {channel_id}; it was withdrawn")
        return Asked(run_id=stream.run_id, channel_id=channel_id, thread_ts=root, user=person or "")

    async def _channel_context(
        self, question: dict[str, Any], context: str | None, *, tool_id: str | None, channel_id: str, person: str | None
    ) -> str | None:
        """The ``context`` line the thread's first message quotes: for an approval request whose policy rule says
        ``arguments: details-only`` (decided as the approval's own gate decides it, with the same requester,
        channel and groups: :func:`bot.slack.approvals.rules.call_decision`) only its action and a note, since the
        context may quote its arguments (a permission prompt's is the command); else ``context`` as given."""
        approvers = self.threads.writer.messages.approvers
        if tool_id != APPROVAL_TOOL or not context or approvers.policy is None:
            return context
        decision = await call_decision(
            approvers.policy,
            APPROVAL_TOOL,
            question,
            requester=person or "",
            channel=channel_id,
            tool_requires=True,
            people=approvers.people,
        )
        if decision.arguments != "details-only":
            return context
        action = question.get("action")
        what = clip(action, 200) if isinstance(action, str) and action.strip() else "the request"
        return f"{what} (its arguments are shown only in Details)"

    async def _ruled(
        self, question: dict[str, Any], whole: WholeCall, *, channel_id: str, person: str | None
    ) -> dict[str, Any]:
        """``question`` naming the ``APPROVAL_POLICY`` rule that ``whole`` (the call it shows in part) matches for
        ``person`` in ``channel_id``, as its ``policy_rule`` (what every later decision on it reads:
        :func:`bot.slack.approvals.rules.named_rule`); unchanged without a policy or when its caller names a rule.
        A permission prompt shows its input cut and as text (:func:`bot.mcp_server.permission_prompt.details_of`),
        so its rules must not match on what it shows: a command's end past the cut escaped ``*git push*``, and
        ``run_in_background: true`` never matched a value shown as ``"true"`` (a break-it pass)."""
        approvers = self.threads.writer.messages.approvers
        if approvers.policy is None or "policy_rule" in question:
            return question
        decision = await call_decision(
            approvers.policy,
            whole.tool_name,
            whole.input,
            requester=person or "",
            channel=channel_id,
            tool_requires=True,
            people=approvers.people,
        )
        return {**question, "policy_rule": decision.name}

    async def _check_approval(
        self, question: dict[str, Any], *, caller: Caller, channel_id: str, person: str | None
    ) -> None:
        """Refuse an approval request ``caller`` may not make (:func:`~bot.mcp_server.callers.check_approval`),
        judged by the approvers that will decide it: ``APPROVERS``, or the ``APPROVAL_POLICY`` rule its
        ``policy_rule`` names or its ``action`` matches, for a run in ``channel_id`` of ``person`` (None: nobody in
        particular), as the bot's approval gate and clicks decide it. Raises :class:`Refused
        <bot.mcp_server.callers.Refused>`."""
        ctx = SlackContext(team_id=self.team_id, channel_id=channel_id, thread_ts="", requester=person or "")
        approvers = await self.approvers.for_request(ctx, APPROVAL_TOOL, question)
        check_approval(caller, channel_wide=approvers.channel_wide(ctx.requester))

    def _check(self, question: dict[str, Any], *, tool_id: str | None) -> None:
        """Refuse a malformed question before anything is posted (the tool's own argument checks, and no more
        choices than Slack can show). Raises :class:`AskError`."""
        try:
            tool = self.agent.tools.get(tool_id) if tool_id else self.agent.question_tool()
            if tool is None:
                raise AskError(f"this bot's agent has no {tool_id} tool")
            tool.parse_args(question)
        except ToolInputError as exc:
            raise AskError(f"the question was not asked: {exc}") from None
        options = question.get("options") or []
        if len(options) > MAX_SELECT_OPTIONS:
            raise AskError(
                f"the question was not asked: too many options ({len(options)}; at most {MAX_SELECT_OPTIONS})"
            )

    async def _find(self, run_id: str, *, fingerprint: str) -> Asked | None:
        """The question stored as ``run_id`` (a request_key's), or None; one asked differently is refused."""
        try:
            state = await self.agent.get_run(run_id)
        except RunNotFound:
            return None
        if state.metadata.get(FINGERPRINT) != fingerprint:
            raise KeyTaken(
                "this request_key names another question (or another channel, person or tool); use a new key"
            )
        return self.asked_of(state)

    @staticmethod
    def asked_of(state: RunState) -> Asked:
        """The question that run ``state`` (one this asker's kind asked) is, from its stored Slack context."""
        ctx = SlackContext.of(state)
        return Asked(run_id=state.run_id, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts, user=ctx.requester)

    async def waiting_for(self, asked: Asked) -> str:
        """Whom and where ``asked`` waits for, in plain text for an MCP client ("waiting for @alice in
        #general"; :class:`bot.slack.names.Names`)."""
        whom = await self.names.user(asked.user) if asked.user else "anyone"
        return f"waiting for {whom} in {await self.names.channel(asked.channel_id)}"

    async def wait(
        self,
        asked: Asked,
        *,
        progress: Callable[[float, str], Awaitable[None]] | None = None,
        every: float = 10.0,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> dict[str, Any] | None:
        """Wait until the question has an outcome and return it: ``{"status": "answered", "answer": str | [labels],
        "answered_by"}``, ``{"status": "no_answer"}`` (its deadline passed) or ``{"status": "cancelled",
        "cancelled_by"}``; None as soon as ``cancelled()`` (the asker gave up). ``progress(seconds waited,
        message)`` is awaited at the start and every ``every`` seconds; ``message`` names whom and where in plain
        text ("waiting for @alice in #general": an MCP client is not Slack, :class:`bot.slack.names.Names`). A store
        outage is waited through (logged). Raises ``RunNotFound`` (past retention)."""
        started, told = time.monotonic(), -every
        while True:
            try:
                state = await self.agent.get_run(asked.run_id)
            except StoreUnavailable as exc:  # a blip must not end a wait of hours: the answer will be there
                log.warning("run %s: waiting through a store outage: %s", asked.run_id, exc)
                await asyncio.sleep(max(self.poll, 2.0))
                continue
            if state.status in ENDED:
                return outcome_of(state)
            if cancelled():
                return None
            waited = time.monotonic() - started
            if progress is not None and waited - told >= every:
                told = waited
                await progress(waited, await self.waiting_for(asked))
            pause = min(self.poll, every)
            steps = max(1, math.ceil(pause / CANCEL_CHECK))  # Redis read each poll, the call's end seen sooner
            for _ in range(steps):  # (a stopping server's grace is short)
                if cancelled():
                    return None
                await asyncio.sleep(pause / steps)

    async def withdraw(self, asked: Asked, *, by: str = AGENT_THAT_ASKED) -> None:
        """The asking agent gave up (MCP cancellation): the question is withdrawn, its messages say so and can't be
        answered; the run ends with ``cancelled``. A question already answered is left as it is."""
        state = await self.agent.get_run(asked.run_id)
        check = await self.agent.check(state)
        if not isinstance(check, Open):
            return
        ctx, call = SlackContext.of(state), check.pending.tool_call_id

        async def claim() -> Any:
            return await self.agent.cancel_question(run_id=state.run_id, tool_call_id=call, cancelled_by=by)

        async def say(_text: str) -> None:  # nobody to tell in Slack: the asker went away
            return None

        attempt = Attempt(state=state, ctx=ctx, call=call, user=by, say=say)
        await self.threads.answering.settle(
            attempt,
            check.pending,
            claim=claim,
            outcome=":no_entry_sign: Withdrawn by the agent that asked.",
            summary="withdrawn",
        )


STOPPED = {"status": "cancelled", "cancelled_by": "stopped in Slack"}
"""What the asking agent is told of a question or approval request a person stopped in Slack before anyone
answered or decided."""


def outcome_of(state: RunState) -> dict[str, Any]:
    """What the asking agent gets of an ended question run (see :meth:`Asker.wait`; one stopped in Slack before
    anyone answered: :data:`STOPPED`; an answer typed instead of picking one of the options: ``"typed": true``);
    of an approval request's, :func:`bot.agent.asking.approval_outcome`'s decision (no decision at all:
    ``no_answer``, or :data:`STOPPED`)."""
    result = ask_outcome(state)
    stopped = result is not None and result.get("status") == "stopped"  # in Slack, before anyone answered
    if asked_tool(state) == APPROVAL_TOOL:
        return approval_outcome(state) or (dict(STOPPED) if stopped else {"status": "no_answer"})
    if state.status == "expired" or result is None:
        return {"status": "no_answer"}
    if result.get("status") in ("no_answer", "cancelled"):
        return result
    if stopped:
        return dict(STOPPED)
    if "error" in result:
        return {"status": "error", "error": str(result["error"])}
    answer = result.get("answers", result.get("answer"))
    out = {"status": "answered", "answer": answer, "answered_by": result.get("answered_by")}
    if result.get("answer_type") == "typed_text":  # written in the thread instead of picking an option: none of
        # their labels, which an agent comparing the answer with its labels must know (its own model is told so)
        out["typed"] = True
    return out
