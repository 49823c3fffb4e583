"""Following a run into Slack: its status while it works, its reply as the model writes it (tool calls as they
run), then its question, its approval request or its failure, in its thread.

:meth:`ThreadWriter.follow` consumes an :class:`~bot.agent.stream.AgentStream` to its end: the status is
:class:`bot.slack.replies.status.ThreadStatus`, the reply :class:`bot.slack.replies.streaming.ReplyStream`. A question
is posted with its Block Kit (plain text if Slack refuses the blocks: a reply in the thread still answers it) and every
message that shows it is recorded (:meth:`bot.store.conversations.ConversationIndex.add_message`):
only those messages are updated for that question, and the message a person acted on when it was never
recorded (a store blip when it was posted), once Slack's copy of it (``conversations.replies``) shows that
question. :meth:`ThreadWriter.close_question` updates them to the
question's outcome (answered, expired), rendered from the stored question.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from bot.agent import Agent
from bot.agent.answers import undecided
from bot.agent.approvals import approval_payload
from bot.agent.ask_user import AskUserPayload, fallback_text
from bot.agent.model.endings import Ending
from bot.agent.state import PendingCall, RunState
from bot.agent.stream import (
    AgentStream,
    ApprovalChunk,
    ApprovalPayload,
    ErrorChunk,
    ErrorPayload,
    FinishChunk,
    QuestionClosedChunk,
    SuspendedChunk,
    SuspendedPayload,
    TextDeltaChunk,
    ToolCallChunk,
    ToolResultChunk,
    ToolResultPayload,
)
from bot.config import Answerers
from bot.errors import StoreUnavailable
from bot.logs import log_context
from bot.slack.approvals.grants import StandingGrants
from bot.slack.context import SlackContext
from bot.slack.home import Home, closed_summary
from bot.slack.names import NamedMentions, Names
from bot.slack.questions.approvers import ESCALATED_TO, ApproverPolicy
from bot.slack.questions.follow_up_plan import FollowUpPlan
from bot.slack.questions.records import QuestionRecords
from bot.slack.refs import QuestionRef
from bot.slack.render import blocks as bk
from bot.slack.render.approvals import (
    QuorumProgress,
    approval_blocks,
    approval_outcome_blocks,
    approval_title,
    batch_header_blocks,
    batch_title,
    closed_what,
    link_back_block,
)
from bot.slack.render.mrkdwn import clip, escape
from bot.slack.replies.sessions import AgentSessions, SessionStatus, better_title, request_title, status_of
from bot.slack.replies.status import THINKING, ThreadStatus, running
from bot.slack.replies.streaming import EndedStreams, ReplyStream, TaskStatus
from bot.slack.replies.unsupported import FeatureRefusals
from bot.slack.transport.web_api import SlackWeb
from bot.store import outage
from bot.store.conversations import ConversationIndex, MessageRef, asked_id

log = logging.getLogger(__name__)

LIVE_EXPIRED = ":hourglass: No answer in time; the tool was told nobody answered."
LIVE_ENDED = ":heavy_multiplication_x: The tool that asked this stopped before an answer came."
CUT_OFF = "_…(cut off here)_"  # ends a reply that streamed partly before its run failed
FAILURE = "failure"  # the run_messages key of failure notices with a Retry button

FAILURES = {
    "model": "The model call failed",
    "no_reply": "The model ended its turn without a reply",
    "context_length": "This conversation has grown too long for the model",
    "max_turns": "I stopped because the model kept going without finishing",
    "store": "I couldn't save this conversation",
    "internal": "Something went wrong on my side",
}


RETRYABLE = frozenset({"model", "no_reply", "max_turns"})
"""The failure kinds whose notice offers Retry: asking the model again may go otherwise (a failed call, a turn that
ended without a reply, a run that kept going). Not ``context_length``: the same request would be refused again."""


@dataclass
class Decided:
    """An approval decided just now, to show its call's outcome (``outcome``: who decided, mrkdwn) when it ends."""

    tool_call_id: str
    payload: ApprovalPayload
    outcome: str
    started: float = field(default_factory=time.monotonic)
    clicked: MessageRef | None = None  # the request's message the decision was made on (recorded or not)


def quiet_tool(agent: Agent, name: str) -> bool:
    """A tool whose calls show no progress line of their own: one that only asks a person (``Tool.asks_person``),
    or a hidden one (an outside agent's approval request: the request itself is shown)."""
    tool = agent.tools.get(name)
    return tool is not None and (tool.asks_person or tool.hidden)


class ThreadWriter:
    """Shows runs in Slack through ``web``; records question messages in ``index``."""

    def __init__(
        self,
        *,
        web: SlackWeb,
        index: ConversationIndex,
        answerers: Answerers,
        approvers: ApproverPolicy,
        allow_user_mentions: bool = False,
        plan: FollowUpPlan | None = None,
        home: Home | None = None,
        is_question_tool: Callable[[str], bool],
        streaming: bool = True,
        stream_interval: float = 1.0,
        sessions: AgentSessions | None = None,
        grants: StandingGrants | None = None,
    ) -> None:
        self.sessions = sessions  # agent sessions (agent_view), tried before the assistant status
        self.grants = grants  # standing grants (APPROVAL_POLICY's grants:): the scopes a request offers
        self.streaming = streaming  # replies through Slack's chat streaming (else posted and updated)
        self.stream_interval = stream_interval  # seconds between a reply's Web API calls while it streams
        self.is_question_tool = is_question_tool  # tools that only ask (or are hidden): no progress line of their own
        self.stream_refusals = FeatureRefusals()  # channels whose Slack refused streaming lately
        self.ended_streams = EndedStreams()  # streamed messages Slack's Stop ended (agent_session_stopped)
        self.status_refusals = FeatureRefusals()  # ... or the thread status
        self.home = home  # the inboxes on the App Home tab
        self.records = QuestionRecords(index=index, plan=plan, home=home)  # what a shown / closed question writes
        self.closes = outage.Owed("closing a question's messages")  # closes Redis could not tell the messages of
        self.web = web
        self.index = index
        self.answerers: Answerers = answerers
        self.approvers = approvers
        self.allow_user_mentions = allow_user_mentions  # may text from the model or people ping a person
        self.names = Names(web)  # where a mention may not ping, the model's <@U…> is written as the name

    async def follow(
        self,
        stream: AgentStream,
        ctx: SlackContext,
        *,
        decided: Decided | None = None,
        batch: Sequence[Decided] = (),
        request: str | None = None,
    ) -> None:
        """Show a run segment in its thread: its status while it works, its reply as the model writes it (tool
        calls as they run), then a question, an approval request or a failure; ``decided``: the approval this
        segment starts with, whose message shows how its call went (``batch``: the other approved calls of its
        batch, likewise, each timed from when it starts). A question or approval ends the reply streamed so far
        first; the text after an answer streams anew. ``request``: the person's message that starts the thread's
        first run (its agent session is titled from it, and renamed when the first reply makes a better title:
        :mod:`bot.slack.replies.sessions`)."""
        watched = {d.tool_call_id: d for d in (*batch, *([decided] if decided else []))}
        with log_context(run_id=stream.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id):
            title = request_title(request) if request is not None else None
            status = ThreadStatus(self.web, ctx, refusals=self.status_refusals, sessions=self.sessions, title=title)
            reply = self._new_reply(ctx, status)
            mentions = NamedMentions(self.names) if not self.allow_user_mentions else None
            final: SessionStatus | None = "active"  # the session when the segment ends (sessions.py's table)
            if stream.handed_off and status.as_session:
                return  # the segment whose tool call asked goes on, and shows the session
            await status.show(THINKING)
            try:
                async for chunk in stream:
                    if mentions is not None and not isinstance(chunk, TextDeltaChunk) and (held := mentions.flush()):
                        reply.text(held)  # the start of a mention the text stopped at: shown as it is
                    match chunk:
                        case TextDeltaChunk(payload=delta):
                            reply.text(await mentions.feed(delta.text) if mentions is not None else delta.text)
                        case ToolCallChunk(payload=call) if not self.is_question_tool(call.tool_name):
                            if call.tool_call_id in watched:  # a batch's call starts now: timed from here
                                watched[call.tool_call_id] = replace(
                                    watched[call.tool_call_id], started=time.monotonic()
                                )
                            steps = [(i, name) for i, name in call.plan if not self.is_question_tool(name)]
                            if len(steps) > 1:  # several tools in one turn: a plan (streaming.ReplyStream.plan)
                                reply.plan(plan_title(len(steps)), steps)
                            reply.task(call.tool_call_id, tool_name=call.tool_name, status="in_progress")
                            await status.show(running(call.tool_name))
                        case SuspendedChunk(payload=suspended):
                            final = "suspended"
                            reply = await self._pause(reply, status, ctx)
                            await self._ask(stream.run_id, suspended, ctx, status=status)
                        case ApprovalChunk(payload=approval):
                            final = "suspended"
                            if not self.is_question_tool(approval.tool_name):
                                reply.task(approval.tool_call_id, tool_name=approval.tool_name, status="pending")
                            reply = await self._pause(reply, status, ctx)
                            await self._ask_approval(stream.run_id, approval, ctx, status=status)
                        case QuestionClosedChunk(payload=closed) if isinstance(closed.suspend_payload, AskUserPayload):
                            outcome = LIVE_EXPIRED if closed.reason == "expired" else LIVE_ENDED
                            await self.close_question(
                                stream.run_id,
                                tool_call_id=closed.tool_call_id,
                                payload=closed.suspend_payload,
                                outcome=outcome,
                                summary=closed.reason,
                                asked=closed.asked_at,
                            )
                        case ToolResultChunk(payload=result):
                            final = "active"
                            if status.session == "suspended":  # a live question was answered: working again
                                await status.show(THINKING)
                            done = watched.get(result.tool_call_id)
                            await self._tool_done(stream.run_id, result, reply, status, decided=done)
                        case FinishChunk(payload=finish) if finish.status == "completed":
                            final = "active"
                            if not reply.raw.strip():  # nothing was written as it streamed: the run's last text
                                last = finish.text or "(no reply)"
                                reply.text(await mentions.label(last) if mentions is not None else last)
                            if finish.ending is not None:  # the text is not a whole answer: marked, and told why
                                reply.cut_off(CUT_OFF)
                            await reply.close()
                            if finish.ending is not None:
                                await self._incomplete(stream.run_id, finish.ending, ctx)
                            if request is not None and status.as_session:
                                await self._rename(ctx, request, reply.raw)
                        case FinishChunk(payload=finish) if finish.status == "stopped":
                            final = "active"
                            line = stopped_line(finish.stopped_by, finish.text)
                            await self._stopped(
                                reply, await mentions.label(line) if mentions is not None else line, ctx
                            )
                        case ErrorChunk(payload=error):
                            final = None if error.kind == "superseded" else "active"
                            reply.cut_off(CUT_OFF)  # what was shown so far is not the answer
                            await reply.close()
                            await self._failed(stream.run_id, error, ctx)
            finally:
                if mentions is not None and (held := mentions.flush()):
                    reply.text(held)
                await reply.close()
                await status.settle(final)

    async def show_stored(self, state: RunState, ctx: SlackContext) -> None:
        """Set the thread's agent session to what the stored run ``state`` calls for (:func:`status_of`), where
        the thread shows sessions: after a change made outside a followed segment (a question that expired and
        closed its run)."""
        if self.sessions is not None and self.sessions.on(ctx):
            await self.sessions.set(ctx, status_of(state))

    async def _rename(self, ctx: SlackContext, request: str, reply: str) -> None:
        """The first reply of a thread ended: rename its session when the reply makes a better title."""
        better = better_title(request, reply)
        if better is not None and self.sessions is not None:
            await self.sessions.rename(ctx, better)

    async def _stopped(self, reply: ReplyStream, line: str, ctx: SlackContext) -> None:
        """The run stopped at a person's request: the reply streamed so far ends with ``line`` (who stopped it:
        :func:`stopped_line`), or ``line`` is a message of its own when nothing streamed."""
        if reply.raw.strip():
            reply.text(("\n\n" if not reply.raw.endswith("\n") else "\n") + line)
            await reply.close()
        else:
            await reply.close()
            await self._reply(line, ctx)

    def _new_reply(self, ctx: SlackContext, status: ThreadStatus) -> ReplyStream:
        reply = ReplyStream(
            self.web,
            ctx,
            refusals=self.stream_refusals,
            ended=self.ended_streams,
            streaming=self.streaming,
            interval=self.stream_interval,
            allow_user_mentions=self.allow_user_mentions,
        )
        reply.on_posted = status.posted
        reply.after_posted = status.reshow
        return reply

    async def _pause(self, reply: ReplyStream, status: ThreadStatus, ctx: SlackContext) -> ReplyStream:
        """The run waits for a person: end the reply streamed so far; the text after the answer goes in a new
        reply. The status goes with the question's post (:meth:`_posted_question`)."""
        await reply.pause()
        return self._new_reply(ctx, status)

    @staticmethod
    async def _posted_question(status: ThreadStatus, ts: str | None) -> None:
        """A question or approval request was posted in the thread (``ts``), which clears the status in Slack (no
        call needed); where it could not be posted, the status is cleared by a call. The working reaction (where
        Slack refused the status) is taken away either way: a post does not, and a live question's segment goes on
        while it waits."""
        if ts is not None:
            status.posted()
        await status.settle("suspended")  # after posted(): a call only for what the post left (the reaction)

    async def _tool_done(
        self,
        run_id: str,
        result: ToolResultPayload,
        reply: ReplyStream,
        status: ThreadStatus,
        *,
        decided: Decided | None,
    ) -> None:
        """A tool call ended: its task shows done or failed, the status goes back to thinking, and the approval
        this segment started with shows how its call went."""
        if not self.is_question_tool(result.tool_name):
            done: TaskStatus = "error" if result.is_error else "complete"
            reply.task(result.tool_call_id, tool_name=result.tool_name, status=done)
            await status.show(THINKING)
        if decided and result.tool_call_id == decided.tool_call_id:
            took = time.monotonic() - decided.started
            how = f"failed: {_result_error(result.result)}" if result.is_error else f"ran in {took:.1f} s"
            outcome = f"{decided.outcome} · {how}"
            await self.close_approval(run_id, decided.payload, outcome=outcome, clicked=decided.clicked)

    async def _reply(self, text: str, ctx: SlackContext) -> None:
        for part, blocks in bk.reply_messages(text, allow_user_mentions=self.allow_user_mentions):
            await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=part, blocks=blocks)

    async def _ask(self, run_id: str, suspended: SuspendedPayload, ctx: SlackContext, *, status: ThreadStatus) -> None:
        payload = suspended.suspend_payload
        if not isinstance(payload, AskUserPayload):
            log.warning("run %s: suspended on %s, which Slack cannot show", run_id, suspended.tool_name)
            await status.settle("suspended")
            return
        ref = QuestionRef.of(run_id, suspended.tool_call_id)
        blocks = bk.question_blocks(
            payload,
            ref=ref,
            requester=ctx.requester,
            answerers=self.answerers,
            allow_user_mentions=self.allow_user_mentions,
        )
        text = escape(clip(payload.question, 3000))  # notifications: escaped, so <!channel> pings nobody
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text, blocks=blocks)
        if ts is None:  # Slack refused the blocks: ask in plain text; a reply in the thread still answers
            plain = escape(clip(fallback_text(payload), 39000))
            ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=plain)
        await self._posted_question(status, ts)
        call, asked, expires = suspended.tool_call_id, suspended.asked_at, suspended.expires_at
        await self.records.shown(ctx, run_id, call, ts=ts, approval=False, asked=asked, expires_at=expires)

    async def _ask_approval(
        self, run_id: str, approval: ApprovalPayload, ctx: SlackContext, *, status: ThreadStatus
    ) -> None:
        if approval.batch:  # several calls of one turn: a header with Approve all, then each call's own request
            head = QuestionRef.of(run_id, approval.tool_call_id)
            blocks = batch_header_blocks(approval, ref=head)
            await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=batch_title(approval), blocks=blocks)
            for one in (replace(approval, batch=()), *approval.batch):
                await self._ask_one_approval(run_id, one, ctx, status=status)
            return
        await self._ask_one_approval(run_id, approval, ctx, status=status)

    async def _ask_one_approval(
        self, run_id: str, approval: ApprovalPayload, ctx: SlackContext, *, status: ThreadStatus
    ) -> None:
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        approvers = self.approvers.for_call(
            ctx, approval.tool_name, approval.args, escalated_to=approval.policy.get(ESCALATED_TO, ())
        )
        quorum = QuorumProgress(approvers.required) if approvers.quorum else None
        scopes = tuple(self.grants.scopes(ctx, approval.tool_name, approval.args)) if self.grants else ()
        blocks = approval_blocks(
            approval,
            ref=ref,
            approvers=approvers.describe(ctx),
            quorum=quorum,
            editable=bool(approvers.editable) and approval.editable,
            grants=scopes,
        )
        text = approval_title(approval)
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text, blocks=blocks)
        await self._posted_question(status, ts)
        call, asked, expires = approval.tool_call_id, approval.asked_at, approval.expires_at
        await self.records.shown(ctx, run_id, call, ts=ts, approval=True, asked=asked, expires_at=expires)
        where = str(approval.policy.get("where") or "thread")
        if where != "thread" and ts is not None:
            await self._ask_elsewhere(run_id, approval, ctx, where=where, blocks=blocks, thread_message=ts)

    async def _ask_elsewhere(
        self,
        run_id: str,
        approval: ApprovalPayload,
        ctx: SlackContext,
        *,
        where: str,
        blocks: list[dict[str, Any]],
        thread_message: str,
    ) -> None:
        """Post the request where its policy rule asks it too (``where: dm``: a DM to each approver,
        :meth:`ApproverPolicy.people_to_ask`; ``channel:C...``: that channel), each copy with a link back to the
        thread, and record each copy, so a decision on any of them updates them all and the thread's. A copy Slack
        refuses is logged and skipped: the thread's request still stands."""
        link = await self.web.permalink(ctx.channel_id, thread_message)
        back = f"<{link}|the thread in <#{ctx.channel_id}>>" if link else f"a thread in <#{ctx.channel_id}>"
        who = f" by <@{ctx.requester}>" if ctx.requester else ""
        copy = [*blocks, link_back_block(f":link: Asked{who} in {back}")]
        if where == "dm":
            approvers = self.approvers.for_call(
                ctx, approval.tool_name, approval.args, escalated_to=approval.policy.get(ESCALATED_TO, ())
            )
            targets = await approvers.people_to_ask(ctx)
        else:
            targets = [where.removeprefix("channel:")]
        asked = asked_id(approval.asked_at)
        for target in targets:
            posted = await self.web.post_to(target, text=approval_title(approval), blocks=copy)
            if posted is None:
                log.warning("run %s: could not ask %s for its approval", run_id, target)
                continue
            ref = MessageRef(channel_id=posted[0], ts=posted[1], asked=asked)
            try:
                await self.index.add_message(run_id, key=approval.tool_call_id, ref=ref)
            except StoreUnavailable:
                log.warning("run %s: could not record the approval request sent to %s", run_id, target)

    async def show_quorum(
        self,
        run_id: str,
        approval: ApprovalPayload,
        ctx: SlackContext,
        *,
        progress: QuorumProgress | None,
        clicked: MessageRef | None = None,
    ) -> None:
        """Update every message showing ``approval`` (and ``clicked``, the one acted on) to its quorum ``progress``
        (None: not a quorum; e.g. after an edit), controls kept: the request still waits (issue 23 parts 2, 3).
        When Redis can't say which
        messages show it, only ``clicked`` is updated (the next change updates them all)."""
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        approvers = self.approvers.for_call(
            ctx, approval.tool_name, approval.args, escalated_to=approval.policy.get(ESCALATED_TO, ())
        )
        blocks = approval_blocks(
            approval,
            ref=ref,
            approvers=approvers.describe(ctx),
            quorum=progress,
            editable=bool(approvers.editable) and approval.editable,
        )
        try:
            refs: list[MessageRef] | None = await self.index.messages(
                run_id, approval.tool_call_id, asked=asked_id(approval.asked_at)
            )
        except StoreUnavailable:
            refs = None
        for message in await self._with_clicked(refs, clicked, ref):
            await self.web.update(message.channel_id, message.ts, text=approval_title(approval), blocks=blocks)

    async def close_approval(
        self,
        run_id: str,
        approval: ApprovalPayload,
        *,
        outcome: str,
        clicked: MessageRef | None = None,
        ongoing: bool = False,
    ) -> None:
        """Update every message showing the approval request (and ``clicked``, the one acted on, recorded or not) to
        ``outcome`` (mrkdwn), without controls; ``ongoing``: the approved call runs now, and its end closes the
        request again (the Home line too: :meth:`QuestionRecords.closed`)."""
        what = closed_what(approval)
        summary = f"{what} · {outcome}"
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        blocks = approval_outcome_blocks(approval, ref=ref, outcome=outcome)
        text = f"{what}: {outcome}"
        call, asked = approval.tool_call_id, approval.asked_at
        await self._close(
            ref, call, summary=summary, asked=asked, clicked=clicked, text=text, blocks=blocks, ongoing=ongoing
        )

    async def _close(
        self,
        ref: QuestionRef,
        call: str,
        *,
        summary: str,
        asked: datetime | None,
        clicked: MessageRef | None,
        text: str,
        blocks: list[dict[str, Any]],
        ongoing: bool = False,
    ) -> None:
        """Close question ``ref``'s (tool call ``call``) records and update the messages showing it (and
        ``clicked``) to ``text`` / ``blocks`` (``ongoing``: see :meth:`close_approval`). When Redis can't say which
        messages show it (an outage), ``clicked`` is updated now and the whole close is owed: done again as soon as
        Redis answers (:class:`bot.store.outage.Owed`)."""

        async def close(*, first: bool) -> bool:
            refs = await self.records.closed(ref.run_id, call, summary=summary, asked=asked, ongoing=ongoing)
            if refs is not None or first:  # the first try closes the message acted on, whatever Redis says
                for message in await self._with_clicked(refs, clicked, ref):
                    await self.web.update(message.channel_id, message.ts, text=text, blocks=blocks)
            return refs is not None

        if not await close(first=True):
            self.closes.add(lambda: close(first=False))

    async def _failed(self, run_id: str, error: ErrorPayload, ctx: SlackContext) -> None:
        if error.kind == "superseded":  # the process that took the run over posts its outcome
            return
        retry = error.kind in RETRYABLE
        text = failure_text(error.kind, error.message, retry=retry)
        blocks = bk.failure_blocks(text, run_id=run_id, retry=retry)
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=escape(text), blocks=blocks)
        if ts and retry:
            try:
                await self.index.add_message(run_id, key=FAILURE, ref=MessageRef(channel_id=ctx.channel_id, ts=ts))
            except StoreUnavailable:
                log.warning("run %s: could not record the failure notice", run_id)

    async def _incomplete(self, run_id: str, ending: Ending, ctx: SlackContext) -> None:
        """A completed run's reply is incomplete (:func:`incomplete_text`): a notice below it, without Retry (the
        run is completed; asking it to go on is a new message)."""
        text = incomplete_text(ending)
        blocks = bk.failure_blocks(text, run_id=run_id, retry=False)
        await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=escape(text), blocks=blocks)

    async def _with_clicked(
        self, refs: list[MessageRef] | None, clicked: MessageRef | None, ref: QuestionRef
    ) -> list[MessageRef]:
        """The messages to close: ``refs`` (those recorded; None: unreadable) and ``clicked`` (the one acted on)
        once. A clicked message not among them (a store blip when it was posted) is read back from Slack first and
        closed only if it shows question ``ref``: a click's ``container`` is the payload's word, and a forged one
        must not make the bot rewrite another message."""
        refs = list(refs or [])
        if clicked is None or any(r.channel_id == clicked.channel_id and r.ts == clicked.ts for r in refs):
            return refs
        message = await self.web.message(clicked.channel_id, clicked.ts)
        if message is not None and ref.shown_in(message):
            return [*refs, clicked]
        log.warning(
            "run %s: the message acted on (%s) does not show its question; left as it is", ref.run_id, clicked.ts
        )
        return refs

    async def close_pending(
        self,
        run_id: str,
        pending: PendingCall,
        *,
        outcome: str,
        summary: str,
        clicked: MessageRef | None = None,
        state: RunState | None = None,
    ) -> None:
        """Close the messages of ``pending`` (a stored question or approval request, this asking of it) with
        ``outcome`` (mrkdwn); ``summary``: a question's notification suffix (e.g. ``"expired"``); ``clicked``: the
        message acted on, closed too even if it was never recorded (a store blip when it was posted); ``state``: the
        run as it was before (an approval of a batch: every call of it undecided there is closed the same way)."""
        if pending.kind == "approval":
            calls = [pending]
            if state is not None and state.pending is not None and state.pending.batch:
                calls = undecided(state) or calls  # a batch: every call still undecided ends the same way
            for call in calls:
                mine = clicked if call.tool_call_id == pending.tool_call_id else None
                await self.close_approval(run_id, approval_payload(call), outcome=outcome, clicked=mine)
            return
        await self.close_question(
            run_id,
            tool_call_id=pending.tool_call_id,
            payload=AskUserPayload.model_validate(pending.suspend_payload),
            outcome=outcome,
            summary=summary,
            asked=pending.suspended_at,
            clicked=clicked,
        )

    async def close_question(
        self,
        run_id: str,
        *,
        tool_call_id: str,
        payload: AskUserPayload,
        outcome: str,
        summary: str,
        asked: datetime | None = None,
        clicked: MessageRef | None = None,
    ) -> None:
        """Update every message showing the question (``asked``: that asking of it, when the call asked more than
        once) to its outcome: the question without controls and ``outcome`` (mrkdwn) below it; ``summary`` is the
        notification text's suffix (e.g. ``"answered"``)."""
        summary_text = closed_summary(payload.question, outcome)
        ref = QuestionRef.of(run_id, tool_call_id)
        text = f"{escape(clip(payload.question, 3000))} ({summary})"
        blocks = bk.outcome_blocks(payload, ref=ref, outcome=outcome, allow_user_mentions=self.allow_user_mentions)
        await self._close(
            ref, tool_call_id, summary=summary_text, asked=asked, clicked=clicked, text=text, blocks=blocks
        )


def plan_title(steps: int) -> str:
    """The title of a model turn's plan of ``steps`` tool calls (a ``plan_update`` chunk's plain text)."""
    return f"Working through {steps} steps"


def stopped_line(by: str, text: str) -> str:
    """The line that ends a stopped run's reply: ``":octagonal_sign: Stopped by <@U…>."`` (``text``, the
    runtime's closing words, when nobody is named)."""
    return f":octagonal_sign: Stopped by <@{by}>." if by else f":octagonal_sign: {text}"


def _result_error(result: object) -> str:
    error = result.get("error") if isinstance(result, dict) else result
    return escape(clip(str(error), 300))


TOO_LONG_ADVICE = (
    " I already left its oldest messages out; what is left (the latest message and what it brought) is still too"
    " much. Write a shorter message here to go on (older messages will be left out), or start a new thread with"
    " a short summary of what matters. Whoever runs the bot can also set HISTORY_TOKEN_BUDGET to fit this model."
)
"""What to do after a context-length refusal: Retry would send the same request and fail the same way."""


def failure_text(kind: str, message: str, *, retry: bool) -> str:
    """The plain text of a failure notice: what failed (by ``ErrorKind``), why, and whether Retry helps (never
    offered for ``context_length``: what to do instead)."""
    what = FAILURES.get(kind, "Something went wrong")
    advice = TOO_LONG_ADVICE if kind == "context_length" else ""
    return f"{what}: {message}.{advice}" + (" Nothing is lost; press Retry to continue." if retry else "")


def incomplete_text(ending: Ending) -> str:
    """The plain text of the notice below a reply that is not a whole answer (its model turn ended for another
    reason than ``stop``, :mod:`bot.agent.model.endings`): why, and what to do."""
    if ending.kind == "length":
        return f"The reply above is incomplete: {ending.why}. Ask me to go on and I will continue where it stopped."
    if ending.kind == "content_filter":
        return f"The reply above is incomplete: {ending.why}. Asking in other words may help."
    return f"The reply above may be incomplete: {ending.why}."
