"""Following a run into Slack: its status while it works, its reply as the model writes it (tool calls as they
run), then its question, its approval request or its failure, in its thread.

:meth:`ThreadWriter.follow` consumes an :class:`~bot.agent.stream.AgentStream` to its end: the status is
:class:`bot.slack.replies.status.ThreadStatus`, the reply :class:`bot.slack.replies.streaming.ReplyStream`. When the
run suspends, its question or approval request is posted by
:class:`bot.slack.questions.messages.QuestionMessages`, the one place that posts, redraws and closes a question's
messages; an approved call's end closes its request there too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from bot.agent import Agent
from bot.agent.approvals import was_declined
from bot.agent.ask_user import AskUserPayload
from bot.agent.asking import APPROVAL_TOOL
from bot.agent.model.endings import Ending
from bot.agent.state import RunState
from bot.agent.stream import (
    AgentStream,
    ApprovalChunk,
    ApprovalPayload,
    ErrorChunk,
    ErrorPayload,
    FinishChunk,
    QuestionClosedChunk,
    SuspendedChunk,
    TextDeltaChunk,
    ToolCallChunk,
    ToolResultChunk,
    ToolResultPayload,
)
from bot.agent.text import is_blank
from bot.errors import StoreUnavailable
from bot.logs import log_context
from bot.slack.context import SlackContext
from bot.slack.names import NamedMentions, Names
from bot.slack.questions.follow_up_plan import FollowUpPlan
from bot.slack.questions.messages import QuestionMessages
from bot.slack.render import blocks as bk
from bot.slack.render.mrkdwn import clip, escape, how_long
from bot.slack.replies.sessions import AgentSessions, SessionStatus, better_title, request_title, status_of
from bot.slack.replies.status import THINKING, ThreadStatus, running
from bot.slack.replies.streaming import APPROVAL_ASKED, EndedStreams, ReplyStream, TaskStatus
from bot.slack.replies.unsupported import FeatureRefusals
from bot.slack.transport.web_api import SlackWeb
from bot.store.conversations import ConversationIndex, MessageRef

log = logging.getLogger(__name__)

LIVE_EXPIRED = ":hourglass: No answer in time; the tool was told nobody answered."
LIVE_ENDED = ":heavy_multiplication_x: The tool that asked this stopped before an answer came."
CUT_OFF = "_…(cut off here)_"  # ends a reply that streamed partly before its run failed
LINKS_KEPT = 2000  # permalinks of requests' thread messages remembered per process (their copies' link-back lines)
FAILURE = "failure"  # the run_messages key of failure notices with a Retry button

FAILURES = {
    "model": "The model call failed",
    "no_reply": "The model ended its turn without a reply",
    "context_length": "This conversation has grown too long for the model",
    "max_turns": "I stopped because the model kept going without finishing",
    "store": "I couldn't save this conversation",
    "internal": "Something went wrong on my side",
}


RETRYABLE = frozenset({"model", "no_reply", "max_turns", "internal"})
"""The failure kinds whose notice offers Retry: asking the model again may go otherwise (a failed call, a turn that
ended without a reply, a run that kept going, the runtime's own failure: it continues from the run's last save).
Not ``context_length``: the same request would be refused again."""


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
        messages: QuestionMessages,
        allow_user_mentions: bool = False,
        is_question_tool: Callable[[str], bool],
        streaming: bool = True,
        stream_interval: float = 1.0,
        sessions: AgentSessions | None = None,
        plan: FollowUpPlan | None = None,
    ) -> None:
        self.messages = messages  # the question and approval messages: posted, redrawn, closed
        self.plan = plan  # what the scheduler does later: a reply Slack refused, posted again
        self.sessions = sessions  # agent sessions (agent_view), tried before the assistant status
        self.streaming = streaming  # replies through Slack's chat streaming (else posted and updated)
        self.stream_interval = stream_interval  # seconds between a reply's Web API calls while it streams
        self.is_question_tool = is_question_tool  # tools that only ask (or are hidden): no progress line of their own
        self.stream_refusals = FeatureRefusals()  # channels whose Slack refused streaming lately
        self.ended_streams = EndedStreams()  # streamed messages Slack's Stop ended (agent_session_stopped)
        self.status_refusals = FeatureRefusals()  # ... or the thread status
        self.web = web
        self.index = index
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
            request = await self.names.readable(request) if request is not None else None  # as Slack shows it
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
                            await self._posted(status, [await self.messages.ask(stream.run_id, suspended, ctx)])
                        case ApprovalChunk(payload=approval):
                            final = "suspended"
                            if not self.is_question_tool(approval.tool_name):
                                reply.task(
                                    approval.tool_call_id,
                                    tool_name=approval.tool_name,
                                    status="pending",
                                    details=APPROVAL_ASKED,
                                )
                            reply = await self._pause(reply, status, ctx)
                            await self._posted(status, await self.messages.ask_approval(stream.run_id, approval, ctx))
                        case QuestionClosedChunk(payload=closed) if isinstance(closed.suspend_payload, AskUserPayload):
                            outcome = LIVE_EXPIRED if closed.reason == "expired" else LIVE_ENDED
                            await self.messages.close_question(
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
                            await self._tool_done(stream.run_id, result, reply, status, decided=done, ctx=ctx)
                        case FinishChunk(payload=finish) if finish.status == "completed":
                            final = "active"
                            if is_blank(reply.raw):  # nothing visible was written as it streamed: the run's last
                                # text, or "(no reply)" when it has nothing visible either (whitespace, zero-width)
                                last = finish.text if not is_blank(finish.text) else bk.NO_REPLY
                                reply.text(await mentions.label(last) if mentions is not None else last)
                            if finish.ending is not None:  # the text is not a whole answer: marked, and told why
                                reply.cut_off(CUT_OFF)
                            await reply.close()
                            if reply.unshown:  # Slack refused some of it past the client's retries: posted later
                                await self._reply_again(stream.run_id)
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

    async def _reply_again(self, run_id: str) -> None:
        """Plan posting run ``run_id``'s reply again (its last text, :meth:`FollowUps.on_reply_again
        <bot.slack.questions.follow_ups.FollowUps.on_reply_again>`): Slack refused some of it."""
        log.warning("run %s: Slack refused some of its reply; it is posted again later", run_id)
        if self.plan is None:
            return
        try:
            await self.plan.reply_again(run_id)
        except StoreUnavailable:
            log.error("run %s: its reply could not be planned to be posted again (Redis unavailable)", run_id)

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
        if not is_blank(reply.raw):
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
        reply. The status goes with the question's post (:meth:`_posted`)."""
        await reply.pause()
        return self._new_reply(ctx, status)

    @staticmethod
    async def _posted(status: ThreadStatus, posted: Sequence[str | None]) -> None:
        """A question or approval requests were posted in the thread (``posted``: each one's ``ts``), which clears
        the status in Slack (no call needed); where none could be posted, the status is cleared by a call. The
        working reaction (where Slack refused the status) is taken away either way: a post does not, and a live
        question's segment goes on while it waits."""
        if any(ts is not None for ts in posted):
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
        ctx: SlackContext,
    ) -> None:
        """A tool call ended: its task shows done or failed, the status goes back to thinking, and the approval
        this segment started with shows how its call went."""
        if not self.is_question_tool(result.tool_name):
            not_run = result.is_error or result.stopped or was_declined(result.result)
            done: TaskStatus = "error" if not_run else "complete"
            reply.task(result.tool_call_id, tool_name=result.tool_name, status=done)
            await status.show(THINKING)
        if decided and result.tool_call_id == decided.tool_call_id:
            took = time.monotonic() - decided.started
            if result.stopped:  # the run was stopped before it ran (or while it ran, in a process that died)
                cut = isinstance(result.result, dict) and result.result.get("may_have_run")
                how = "stopped; it may have run" if cut else "stopped before it ran"
            elif result.is_error:
                how = f"failed: {_result_error(result.result)}"
            elif result.tool_name == APPROVAL_TOOL:  # an outside agent's request: it runs there, not here
                how = "the agent that asked was told"
            else:
                how = ran_in(took)
            outcome = f"{decided.outcome} · {how}"
            await self.messages.close_approval(
                run_id, decided.payload, ctx=ctx, outcome=outcome, clicked=decided.clicked
            )

    async def _reply(self, text: str, ctx: SlackContext) -> None:
        for part, blocks in bk.reply_messages(text, allow_user_mentions=self.allow_user_mentions):
            await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=part, blocks=blocks)

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


def plan_title(steps: int) -> str:
    """The title of a model turn's plan of ``steps`` tool calls (a ``plan_update`` chunk's plain text)."""
    return f"Working through {steps} steps"


def ran_in(seconds: float) -> str:
    """How long an approved call ran, for its request's outcome line: ``"ran in under 0.1 s"`` (a call that took
    no time read "ran in 0.0 s"), ``"ran in 2.4 s"``, then whole units from a minute (``"ran in 3 min"``)."""
    if seconds < 0.05:
        return "ran in under 0.1 s"
    return f"ran in {seconds:.1f} s" if seconds < 60 else f"ran in {how_long(seconds)}"


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
