"""Following a run into Slack: its status while it works, its reply as the model writes it (tool calls as they
run), then its question, its approval request or its failure, in its thread.

:meth:`Follower.follow` consumes an :class:`~bot.agent.stream.AgentStream` to its end: the status is
:class:`bot.slack.replies.status.ThreadStatus`, the reply :class:`bot.slack.replies.streaming.ReplyStream`. A question
is posted with its Block Kit (plain text if Slack refuses the blocks: a reply in the thread still answers it) and every
message that shows it is recorded (:meth:`bot.store.conversations.ConversationIndex.add_message`):
only those messages are updated for that question, and the message a person acted on when it was never
recorded (a store blip when it was posted), once Slack's copy of it (``conversations.replies``) shows that
question. :meth:`Follower.close_question` updates them to the
question's outcome (answered, expired), rendered from the stored question.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.agent import Agent
from bot.agent.approvals import approval_payload
from bot.agent.ask_user import AskUserPayload, fallback_text
from bot.agent.endings import Ending
from bot.agent.state import PendingCall
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
from bot.slack.context import SlackContext
from bot.slack.home import Home, closed_summary
from bot.slack.names import NamedMentions, Names
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.questions.records import QuestionRecords
from bot.slack.questions.wait_plan import WaitPlan
from bot.slack.refs import QuestionRef
from bot.slack.render import blocks as bk
from bot.slack.render.approvals import approval_blocks, approval_outcome_blocks, approval_title, closed_what
from bot.slack.render.mrkdwn import clip, escape
from bot.slack.replies.status import THINKING, ThreadStatus, running
from bot.slack.replies.streaming import ReplyStream, TaskStatus
from bot.slack.replies.unsupported import Refusals
from bot.slack.transport.web_api import SlackWeb
from bot.store import outage
from bot.store.conversations import ConversationIndex, MessageRef

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


class Follower:
    """Shows runs in Slack through ``web``; records question messages in ``index``."""

    def __init__(
        self,
        *,
        web: SlackWeb,
        index: ConversationIndex,
        answerers: Answerers,
        approvers: ApproverPolicy,
        allow_user_mentions: bool = False,
        plan: WaitPlan | None = None,
        home: Home | None = None,
        is_question_tool: Callable[[str], bool],
        streaming: bool = True,
        stream_interval: float = 1.0,
    ) -> None:
        self.streaming = streaming  # replies through Slack's chat streaming (else posted and updated)
        self.stream_interval = stream_interval  # seconds between a reply's Web API calls while it streams
        self.is_question_tool = is_question_tool  # tools that only ask (or are hidden): no progress line of their own
        self.stream_refusals = Refusals()  # channels whose Slack refused streaming lately
        self.status_refusals = Refusals()  # ... or the thread status
        self.home = home  # the inboxes on the App Home tab
        self.records = QuestionRecords(index=index, plan=plan, home=home)  # what a shown / closed question writes
        self.closes = outage.Owed("closing a question's messages")  # closes Redis could not tell the messages of
        self.web = web
        self.index = index
        self.answerers: Answerers = answerers
        self.approvers = approvers
        self.allow_user_mentions = allow_user_mentions  # may text from the model or people ping a person
        self.names = Names(web)  # where a mention may not ping, the model's <@U…> is written as the name

    async def follow(self, stream: AgentStream, ctx: SlackContext, *, decided: Decided | None = None) -> None:
        """Show a run segment in its thread: its status while it works, its reply as the model writes it (tool
        calls as they run), then a question, an approval request or a failure; ``decided``: the approval this
        segment starts with, whose message shows how its call went. A question or approval ends the reply streamed
        so far first; the text after an answer streams anew."""
        with log_context(run_id=stream.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id):
            status = ThreadStatus(self.web, ctx, refusals=self.status_refusals)
            reply = self._new_reply(ctx, status)
            mentions = NamedMentions(self.names) if not self.allow_user_mentions else None
            await status.show(THINKING)
            try:
                async for chunk in stream:
                    if mentions is not None and not isinstance(chunk, TextDeltaChunk) and (held := mentions.flush()):
                        reply.text(held)  # the start of a mention the text stopped at: shown as it is
                    match chunk:
                        case TextDeltaChunk(payload=delta):
                            reply.text(await mentions.feed(delta.text) if mentions is not None else delta.text)
                        case ToolCallChunk(payload=call) if not self.is_question_tool(call.tool_name):
                            reply.task(call.tool_call_id, tool_name=call.tool_name, status="in_progress")
                            await status.show(running(call.tool_name))
                        case SuspendedChunk(payload=suspended):
                            reply = await self._pause(reply, status, ctx)
                            await self._ask(stream.run_id, suspended, ctx, status=status)
                        case ApprovalChunk(payload=approval):
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
                            await self._tool_done(stream.run_id, result, reply, status, decided=decided)
                        case FinishChunk(payload=finish) if finish.status == "completed":
                            if not reply.raw.strip():  # nothing was written as it streamed: the run's last text
                                last = finish.text or "(no reply)"
                                reply.text(await mentions.label(last) if mentions is not None else last)
                            if finish.ending is not None:  # the text is not a whole answer: marked, and told why
                                reply.cut_off(CUT_OFF)
                            await reply.close()
                            if finish.ending is not None:
                                await self._incomplete(stream.run_id, finish.ending, ctx)
                        case FinishChunk(payload=finish) if finish.status == "stopped":
                            await reply.close()
                            await self._reply(f":octagonal_sign: {finish.text}", ctx)
                        case ErrorChunk(payload=error):
                            reply.cut_off(CUT_OFF)  # what was shown so far is not the answer
                            await reply.close()
                            await self._failed(stream.run_id, error, ctx)
            finally:
                if mentions is not None and (held := mentions.flush()):
                    reply.text(held)
                await reply.close()
                await status.clear()

    def _new_reply(self, ctx: SlackContext, status: ThreadStatus) -> ReplyStream:
        reply = ReplyStream(
            self.web,
            ctx,
            refusals=self.stream_refusals,
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
        await status.clear()  # after posted(): a call only for what the post left (the reaction)

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
            await status.clear()
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
        ref = QuestionRef.of(run_id, approval.tool_call_id)
        blocks = approval_blocks(approval, ref=ref, approvers=self._approvers_text(approval, ctx))
        text = approval_title(approval)
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=text, blocks=blocks)
        await self._posted_question(status, ts)
        call, asked, expires = approval.tool_call_id, approval.asked_at, approval.expires_at
        await self.records.shown(ctx, run_id, call, ts=ts, approval=True, asked=asked, expires_at=expires)

    def _approvers_text(self, approval: ApprovalPayload, ctx: SlackContext) -> str:
        """Who may decide ``approval`` (the call's rule with ``APPROVAL_POLICY``), as mrkdwn."""
        return self.approvers.for_call(ctx, approval.tool_name, approval.args).describe(ctx)

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
        self, run_id: str, pending: PendingCall, *, outcome: str, summary: str, clicked: MessageRef | None = None
    ) -> None:
        """Close the messages of ``pending`` (a stored question or approval request, this asking of it) with
        ``outcome`` (mrkdwn); ``summary``: a question's notification suffix (e.g. ``"expired"``); ``clicked``: the
        message acted on, closed too even if it was never recorded (a store blip when it was posted)."""
        if pending.kind == "approval":
            await self.close_approval(run_id, approval_payload(pending), outcome=outcome, clicked=clicked)
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
    reason than ``stop``, :mod:`bot.agent.endings`): why, and what to do."""
    if ending.kind == "length":
        return f"The reply above is incomplete: {ending.why}. Ask me to go on and I will continue where it stopped."
    if ending.kind == "content_filter":
        return f"The reply above is incomplete: {ending.why}. Asking in other words may help."
    return f"The reply above may be incomplete: {ending.why}."
