"""Following a run into Slack: the working sign, then its question, its reply or its failure, in its thread.

:meth:`Follower.follow` consumes an :class:`~bot.agent.stream.AgentStream` to its end. A question is posted with
its Block Kit (plain text if Slack refuses the blocks: a reply in the thread still answers it) and every
message that shows it is recorded (:meth:`bot.store.conversations.ConversationIndex.add_message`):
only those messages are ever updated for that question. :meth:`Follower.close_question` updates them to the
question's outcome (answered, expired), rendered from the stored question.
"""

from __future__ import annotations

import logging

from bot.agent.ask_user import AskUserPayload, fallback_text
from bot.agent.stream import AgentStream, ErrorChunk, ErrorPayload, FinishChunk, SuspendedChunk, SuspendedPayload
from bot.config import Answerers
from bot.errors import StoreUnavailable
from bot.logs import log_context
from bot.slack import blocks as bk
from bot.slack.context import SlackContext
from bot.slack.mrkdwn import clip, escape
from bot.slack.refs import QuestionRef
from bot.slack.webapi import SlackWeb
from bot.store.conversations import ConversationIndex, MessageRef

log = logging.getLogger(__name__)

FAILURE = "failure"  # the run_messages key of failure notices with a Retry button

FAILURES = {
    "model": "The model call failed",
    "max_turns": "I stopped because the model kept going without finishing",
    "store": "I couldn't save this conversation",
    "internal": "Something went wrong on my side",
}


class Follower:
    """Shows runs in Slack through ``web``; records question messages in ``index``."""

    def __init__(
        self, *, web: SlackWeb, index: ConversationIndex, answerers: Answerers, allow_user_mentions: bool = False
    ) -> None:
        self.web = web
        self.index = index
        self.answerers: Answerers = answerers
        self.allow_user_mentions = allow_user_mentions  # may text from the model or people ping a person

    async def follow(self, stream: AgentStream, ctx: SlackContext) -> None:
        """Show a run segment in its thread: the working sign, then a question, a reply or a failure."""
        with log_context(run_id=stream.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id):
            await self.web.react(ctx.channel_id, ctx.message_ts, add=True)
            try:
                async for chunk in stream:
                    match chunk:
                        case SuspendedChunk(payload=suspended):
                            await self._ask(stream.run_id, suspended, ctx)
                        case FinishChunk(payload=finish) if finish.status == "completed":
                            await self._reply(finish.text or "(no reply)", ctx)
                        case ErrorChunk(payload=error):
                            await self._failed(stream.run_id, error, ctx)
            finally:
                await self.web.react(ctx.channel_id, ctx.message_ts, add=False)

    async def _reply(self, text: str, ctx: SlackContext) -> None:
        for part, blocks in bk.reply_messages(text, allow_user_mentions=self.allow_user_mentions):
            await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=part, blocks=blocks)

    async def _ask(self, run_id: str, suspended: SuspendedPayload, ctx: SlackContext) -> None:
        payload = suspended.suspend_payload
        if not isinstance(payload, AskUserPayload):
            log.warning("run %s: suspended on %s, which Slack cannot show", run_id, suspended.tool_name)
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
        if ts:
            try:
                await self.index.add_message(
                    run_id, key=suspended.tool_call_id, ref=MessageRef(channel_id=ctx.channel_id, ts=ts)
                )
            except StoreUnavailable:
                log.warning("run %s: could not record the question's message", run_id)

    async def _failed(self, run_id: str, error: ErrorPayload, ctx: SlackContext) -> None:
        retry = error.kind in ("model", "max_turns")
        text = failure_text(error.kind, error.message, retry=retry)
        blocks = bk.failure_blocks(text, run_id=run_id, retry=retry)
        ts = await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=escape(text), blocks=blocks)
        if ts and retry:
            try:
                await self.index.add_message(run_id, key=FAILURE, ref=MessageRef(channel_id=ctx.channel_id, ts=ts))
            except StoreUnavailable:
                log.warning("run %s: could not record the failure notice", run_id)

    async def close_question(
        self, run_id: str, *, tool_call_id: str, payload: AskUserPayload, outcome: str, summary: str
    ) -> None:
        """Update every message showing the question to its outcome: the question without controls and
        ``outcome`` (mrkdwn) below it; ``summary`` is the notification text's suffix (e.g. ``"answered"``)."""
        try:
            refs = await self.index.messages(run_id, tool_call_id)
        except StoreUnavailable:
            log.warning("run %s: could not read where its question is shown; left as it is", run_id)
            return
        ref = QuestionRef.of(run_id, tool_call_id)
        text = f"{escape(clip(payload.question, 3000))} ({summary})"
        blocks = bk.outcome_blocks(payload, ref=ref, outcome=outcome, allow_user_mentions=self.allow_user_mentions)
        for message in refs:
            await self.web.update(message.channel_id, message.ts, text=text, blocks=blocks)


def failure_text(kind: str, message: str, *, retry: bool) -> str:
    """The plain text of a failure notice: what failed (by ``ErrorKind``), why, and whether Retry helps."""
    what = FAILURES.get(kind, "Something went wrong")
    return f"{what}: {message}." + (" Nothing is lost; press Retry to continue." if retry else "")
