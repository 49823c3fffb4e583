"""Conversations in threads: a mention (or DM) starts or continues the thread's run; replies reach its question.

A thread remembers its latest run (:class:`bot.store.conversations.ConversationIndex`). A follow-up mention:

- while a question is open: its text is the answer (from someone the policy allows);
- while a question waits past its deadline: the question is closed as expired and a new run starts;
- while the run works: "still working", unless nobody drives it any more (its process died): then this process
  continues it first and starts the new request after;
- otherwise (finished, failed, expired): a new run continues the conversation (the previous run's messages are
  its history). A previous run whose record can't be read is reported once in the log and the thread starts
  fresh.

A reply in the thread (no mention) from someone allowed to answer answers the open question as typed text;
someone not allowed is told once per question. Retry (after a failure) continues the failed run.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.agent import Agent, new_run_id
from bot.agent.answers import Expired, Open, undecided
from bot.agent.state import RunState
from bot.agent.stream import AgentStream
from bot.agent.text import is_blank
from bot.errors import RunNotFound, RunNotResumable, StoreCorrupt, StoreUnavailable
from bot.logs import log_context
from bot.ops import audit
from bot.slack.context import REDELIVERED, Origin, SlackContext
from bot.slack.questions.answering import Answering
from bot.slack.questions.notices import EXPIRED, STARTED_UNKNOWN, STORE_DOWN, UNREADABLE
from bot.slack.questions.withdrawing import Withdrawing, says_stop
from bot.slack.render import blocks as bk
from bot.slack.render.mrkdwn import unescape
from bot.slack.replies.thread_writer import FAILURE, ThreadWriter, failure_text
from bot.slack.run_slots import Taking, WaitingLimit
from bot.slack.transport.web_api import SlackWeb
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex, ThreadRecord

log = logging.getLogger(__name__)

BUSY = "I'm still working on this thread; one moment (say `stop` to stop me)."


# Message subtypes that are a person speaking (docs.slack.dev reference/events/message); every other subtype
# (edits, deletions, joins, bot messages, topic changes...) is not.
@dataclass(frozen=True)
class NewEventReads:
    """What a new message's first round trip read beside its first-sight mark (:meth:`Threads.new_event_reads`):
    the ``thread``'s record (None: none), how many questions are ``waiting`` on the person (None: no waiting bound;
    :meth:`WaitingLimit.queue_total`), and the run slot asked
    for the run it may start (``taking``: None when not asked; whoever reads this settles it,
    :meth:`Taking.drop` once done: nothing when the run used it)."""

    thread: ThreadRecord | None
    waiting: int | None
    taking: Taking | None = None

    async def drop_slot(self) -> None:
        """Give the run slot asked for back unused (nothing when none was asked, or a run took it). Raises nothing."""
        if self.taking is not None:
            await self.taking.drop()


PERSON_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message"})


def is_person_speaking(event: dict[str, Any]) -> bool:
    """A ``message`` event that carries a person's words (plain, sent to the channel too, with a file, /me)."""
    subtype = event.get("subtype")
    return (subtype is None or subtype in PERSON_SUBTYPES) and not event.get("bot_id") and bool(event.get("user"))


class Threads:
    """Mentions, DMs, thread replies and Retry for ``agent``'s runs."""

    def __init__(
        self,
        *,
        agent: Agent,
        index: ConversationIndex,
        web: SlackWeb,
        writer: ThreadWriter,
        answering: Answering,
        waiting: WaitingLimit | None = None,
    ) -> None:
        self.agent = agent
        self.waiting = waiting  # MAX_WAITING_PER_PERSON (None: no bound)
        self.index = index
        self.web = web
        self.writer = writer
        self.answering = answering
        self.withdrawing = Withdrawing(answering)
        self.dm_note: Callable[[Origin], Awaitable[str | None]] | None = None  # what a DM's run is told beside it

    # --- events ----------------------------------------------------------------------------------

    async def on_mention(self, body: dict[str, Any], context: dict[str, Any]) -> None:
        """Lazy listener of ``app_mention``: start or continue the thread's conversation."""
        read = await self.new_event_reads(body, context)
        if read is not None:
            try:
                await self.converse(body, bot_user=context.get("bot_user_id"), read=read)
            finally:
                await read.drop_slot()

    async def on_message(self, body: dict[str, Any], context: dict[str, Any]) -> None:
        """Lazy listener of ``message`` events a person wrote in a DM or as a thread reply (see the listener's
        matchers): DMs converse, thread replies may answer the open question."""
        if (body.get("event") or {}).get("channel_type") == "im":
            read = await self.new_event_reads(body, context)
            if read is not None:
                try:
                    note = await self.dm_note(Origin.of_event(body)) if self.dm_note is not None else None
                    await self.converse(body, bot_user=context.get("bot_user_id"), note=note, read=read)
                finally:
                    await read.drop_slot()
        elif await self.is_new_event(body, context):
            await self._thread_reply(body)

    async def is_new_event(self, body: dict[str, Any], context: dict[str, Any]) -> bool:
        """Whether this event is new (Slack retries and redeliveries come again); a store outage says so in the
        thread and counts as seen."""
        return await self._new_event(body, context, also=False) is not None

    async def new_event_reads(self, body: dict[str, Any], context: dict[str, Any]) -> NewEventReads | None:
        """:meth:`is_new_event` and, in the same round trip, what :meth:`converse` reads first (the thread's
        record, how many questions wait on the person, for the waiting bound) and, for a message that starts its own
        thread, the run slot its run would take (:meth:`RunSlots.queue_enter`, settled by the caller:
        :meth:`NewEventReads.drop_slot`; a reply asks for its slot once it is known to start a run); None when the event
        is not new (or the store is down: said in the thread; the slot given back or owed)."""
        return await self._new_event(body, context, also=True)

    async def _new_event(self, body: dict[str, Any], context: dict[str, Any], *, also: bool) -> NewEventReads | None:
        where = Origin.of_event(body)
        batch = Batch(self.index.client)
        fresh = self.index.queue_new_event(batch, str(where.event_id), token=context.get("job_id") or None)
        thread = waiting = taking = None
        if also:
            team, channel, thread_ts = where.team_id or "", where.channel_id or "", where.thread_ts or ""
            thread = self.index.queue_thread(batch, team, channel_id=channel, thread_ts=thread_ts)
            if self.waiting is not None:
                waiting = self.waiting.queue_total(batch, team, where.user)
            # A message that starts its own thread starts a run: its slot asked for now (one round trip less),
            # given back unused when none starts. A reply may be an answer, "still working" or a stop, which start
            # no run of their own: one held meanwhile could turn away the person's next request at the limit.
            if team and where.thread_ts == where.message_ts:
                taking = self.answering.gate.queue_enter(batch, team_id=team, user=where.user)
        try:
            await batch.run("checking an event")
        except StoreUnavailable:
            if taking is not None:
                await taking.drop()  # owed back: Redis may have applied it
            if where.channel_id:
                await self.web.post(where.channel_id, thread_ts=where.thread_ts, text=f":warning: {STORE_DOWN}")
            return None
        except BaseException:  # given up in flight (shutdown, a stall past the caller's wait): Redis may apply it
            if taking is not None:
                await taking.drop()  # owed back (its reply never came); this does not wait on anything
            raise
        if not fresh.value:
            if taking is not None:
                await taking.drop()
            return None
        return NewEventReads(
            thread=thread.value if thread is not None else None,
            waiting=waiting.value if waiting is not None else None,
            taking=taking,
        )

    # --- conversations ---------------------------------------------------------------------------

    async def converse(
        self,
        body: dict[str, Any],
        *,
        bot_user: str | None,
        note: str | None = None,
        first_request: Callable[[str], Awaitable[None]] | None = None,
        read: NewEventReads | None = None,
    ) -> None:
        """A person's message to the bot (``body``: a ``message`` / ``app_mention`` event): it answers the thread's
        open question, or starts the thread's next run. ``note``: what the model should know beside the message
        (e.g. the channel open beside the assistant pane), put before it in the run's input only.
        ``first_request(text)``: awaited before the first run of a thread that had none (e.g. to name it).
        ``read``: what :meth:`new_event_reads` read with the event's first sight (else read here)."""
        where = Origin.of_event(body)
        channel, thread_ts, team = where.channel_id or "", where.thread_ts or "", where.team_id or ""
        text = str((body.get("event") or {}).get("text") or "")
        if bot_user:  # the bot's own mention is addressing, not content; other mentions stay
            text = re.sub(rf"<@{re.escape(bot_user)}(\|[^>]*)?>", "", text)
        text = unescape(text).strip()
        ctx = SlackContext(
            team_id=team,
            channel_id=channel,
            thread_ts=thread_ts,
            requester=where.user,
            message_ts=where.message_ts or "",
        )
        with log_context(team_id=team, channel_id=channel, user_id=where.user):
            try:
                # Read also for a message that starts its own thread: a redelivered job whose first worker claimed
                # the thread and died before its run existed finds that claim here, and takes the thread after it.
                pointed, previous = await self._previous(ctx, read=read)
                if previous is not None and previous.status in ("suspended", "running") and read is not None:
                    await read.drop_slot()  # the previous run may take this message, with slots of its own
                if previous is not None and await self._answered_or_busy(previous, where, text):
                    return
                if previous is not None and previous.status == "running":  # continued above: take its final state
                    previous = await self.agent.get_run(previous.run_id)
            except StoreUnavailable:
                await self.web.post(channel, thread_ts=thread_ts, text=f":warning: {STORE_DOWN}")
                return
            run_id = new_run_id()
            taking = read.taking if read is not None else None
            slot = await self.answering.slot(ctx, self.answering.say_to(where), run_id=run_id, taking=taking)
            if slot is None:
                return
            async with slot:
                if await self._too_many_waiting(ctx, where, total=read.waiting if read is not None else None):
                    return
                if pointed is None and first_request is not None:
                    await first_request(text)
                request = text if previous is None else None  # a thread's first run titles its agent session
                text = f"{note}\n\n{text}" if note else text
                await self._start(ctx, text, previous, after=pointed, run_id=run_id, request=request)

    async def _too_many_waiting(self, ctx: SlackContext, where: Origin, *, total: int | None) -> bool:
        """Whether the person already has as many questions waiting as :class:`WaitingLimit` allows (then they
        were told, and no run starts); ``total``: how many questions wait on them, read already (None: read here)."""
        try:
            refused = (
                await self.waiting.refusal(ctx.team_id, ctx.requester, total=total)
                if self.waiting is not None
                else None
            )
        except StoreUnavailable:
            await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=f":warning: {STORE_DOWN}")
            return True
        if refused is not None:
            log.info("a request of %s was refused: too many of their questions wait already", ctx.requester)
            await self.answering.say_to(where)(refused)
            return True
        return False

    async def _start(
        self,
        ctx: SlackContext,
        text: str,
        previous: RunState | None,
        *,
        after: str | None,
        run_id: str,
        request: str | None = None,
    ) -> None:
        """Start the thread's next run, ``run_id`` (continuing ``previous``'s conversation), and follow it
        (``request``: the person's words that start the thread, for its agent session's title). The thread is
        claimed for the new run first, atomically, so two quick mentions can't start two runs (the second is told
        the thread is busy), and nothing runs before the thread points at it."""
        history = self.agent.history_of(previous) if previous is not None else None
        try:
            claimed = await self.index.claim_thread(
                ctx.team_id,
                channel_id=ctx.channel_id,
                thread_ts=ctx.thread_ts,
                run_id=run_id,
                after=after,
            )
            if not claimed:
                await self.web.tell(ctx.requester, BUSY, channel=ctx.channel_id, thread_ts=ctx.thread_ts)
                return
            stream = await self.agent.stream(
                text or "(empty message)", run_id=run_id, history=history, metadata=ctx.to_metadata()
            )
        except StoreUnavailable:  # the run may have been created all the same (its reply lost): look again
            created = await self._created_after_all(ctx, run_id)
            if created is None:
                return
            stream = created
        await self.writer.follow(stream, ctx, request=request)

    async def _created_after_all(self, ctx: SlackContext, run_id: str) -> AgentStream | None:
        """Run ``run_id``'s start met a Redis failure: read it again as Redis comes back
        (:meth:`Answering.read_again <bot.slack.questions.answering.Answering.read_again>`). Created (nobody drives
        it: this process holds its lease) -> its stream, going on from its start; not created -> None, the thread
        told nothing was recorded; Redis still down -> None, told it can't tell yet."""
        said = STORE_DOWN
        try:
            state = await self.answering.read_again(run_id)
            if state is not None:  # made: gone on with here, unless another process went on with it meanwhile
                stream = await self.answering.take_over(state)
                if stream is not None:
                    log.info("run %s: its start met a Redis failure but was made; going on with it", run_id)
                return stream
        except StoreUnavailable:
            said = STARTED_UNKNOWN
        except StoreCorrupt:
            return None
        await self.web.post(ctx.channel_id, thread_ts=ctx.thread_ts, text=f":warning: {said}")
        return None

    async def _previous(self, ctx: SlackContext, *, read: NewEventReads | None) -> tuple[str | None, RunState | None]:
        """``(the run id the thread points at, that run)``: the run is None when there is none yet, it is past
        retention, or it is unreadable (logged once; the thread starts over); the thread's record from ``read`` when
        given. Raises ``StoreUnavailable``."""
        if read is not None:
            record = read.thread
        else:
            record = await self.index.thread(ctx.team_id, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts)
        if record is None:
            return None, None
        try:
            state = await self.agent.get_run(record.run_id)
            SlackContext.of(state)
            return record.run_id, state
        except RunNotFound:
            return record.run_id, None
        except StoreCorrupt as exc:
            log.error("run %s: stored record unreadable (%s); the thread starts a new conversation", record.run_id, exc)
            return record.run_id, None

    async def _answered_or_busy(self, previous: RunState, where: Origin, text: str) -> bool:
        """Handle a mention that the thread's previous run takes (an answer, "still working"); True when it did.
        Closes an expired question and continues an orphaned run on the way. Raises ``StoreUnavailable``."""
        prev_ctx = SlackContext.of(previous)
        say = self.answering.say_to(where)
        if REDELIVERED.get() and prev_ctx.message_ts == where.message_ts:  # this very message's run, started by
            # this job's first delivery before its worker died: gone on with when nobody drives it; never a second
            # run, nor the message taken for the answer to its own question
            if previous.status == "running":
                await self.answering.continue_orphan(previous, prev_ctx, wait=True)
            else:  # saved waiting on a question it may have died before posting
                await self.answering.messages.ask_unshown(previous, prev_ctx)
            return True
        check = await self.agent.check(previous)
        late = previous.pending.tool_call_id if previous.pending is not None else None
        for waiting in undecided(previous) if previous.pending is not None and previous.pending.batch else []:
            late, check = waiting.tool_call_id, await self.agent.check(previous, waiting.tool_call_id)
            if not isinstance(check, Expired):  # a batch waits while any call of it is still open
                break
        if isinstance(check, Expired) and late is not None:  # the thread moves on: closed as a whole
            await self.answering.expire(previous, late, whole=True)
            return False
        if isinstance(check, Open):
            call = check.pending.tool_call_id
            if is_blank(text):
                await say("A question above is waiting for an answer.")
            elif await self._withdrawn_by_stop(previous, prev_ctx, where, text):
                pass
            elif refused := await self.answering.permissions.refusal(
                previous, prev_ctx, call, user=where.user, where=where
            ):
                audit.refused(previous, call, user=where.user, reason="not_allowed")
                await say(refused)
            else:
                await self.answering.answer_typed(previous, prev_ctx, where, text)
            return True
        if previous.status == "running":
            if says_stop(text):  # working, or orphaned: taken over and stopped; never a new run asked "stop"
                await self.withdrawing.stop_working(previous, prev_ctx, where)
                return True
            if not await self.answering.continue_orphan(previous, prev_ctx):
                await say(BUSY)
                return True
            after = await self.agent.get_run(previous.run_id)  # continued to its next stop
            if after.status == "suspended":  # it asked something: that question comes first
                await say("I picked up where I left off; please answer the question above, then mention me again.")
                return True
            return False
        return False

    async def _withdrawn_by_stop(self, state: RunState, ctx: SlackContext, where: Origin, text: str) -> bool:
        """``stop`` / ``cancel`` said in the thread by its requester while an approval request of the run waits:
        withdrawn, as the request's Cancel does (text never decides an approval, so it can't be an answer; before,
        the requester was told they may not decide it, once, then nothing). True when it was. Raises
        ``StoreUnavailable``."""
        left = undecided(state)
        if not says_stop(text) or not left or left[0].kind != "approval" or where.user != ctx.requester:
            return False
        for call in left:  # the first still open (a batch's earlier call may be past its own deadline)
            if isinstance(await self.agent.check(state, call.tool_call_id), Open):
                await self.withdrawing.withdraw((state, ctx, call.tool_call_id), where, self.answering.say_to(where))
                return True
        return False

    async def _thread_reply(self, body: dict[str, Any]) -> None:
        where = Origin.of_event(body)
        try:
            record = await self.index.thread(
                where.team_id or "", channel_id=where.channel_id or "", thread_ts=where.thread_ts or ""
            )
            state = await self.agent.get_run(record.run_id) if record else None
            ctx = SlackContext.of(state) if state else None
        except (RunNotFound, StoreUnavailable):
            return  # a thread reply is not necessarily meant for us; say nothing
        except StoreCorrupt as exc:
            log.error("run %s: stored record unreadable (%s); thread reply ignored", exc.run_id, exc)
            return
        text = unescape(str((body.get("event") or {}).get("text") or "")).strip()
        asking = state is not None and state.asks_live
        if state is not None and ctx is not None and state.status == "running" and says_stop(text) and not asking:
            # working: a stop; while a tool's question waits (asked live), "stop" answers it as any waiting
            # question's reply does (its Cancel withdraws it)
            await self.withdrawing.stop_working(state, ctx, where)
            return
        if state is None or ctx is None or state.pending is None:
            return
        if state.status not in ("suspended", "expired") and not state.pending.live_owner:
            return
        call = state.pending.tool_call_id
        with log_context(run_id=state.run_id, team_id=ctx.team_id, channel_id=ctx.channel_id, user_id=where.user):
            try:
                if await self._withdrawn_by_stop(state, ctx, where, text):
                    return
                refused = await self.answering.permissions.refusal(state, ctx, call, user=where.user, where=where)
                if refused is not None:
                    if await self.index.tell_once(state.run_id, tool_call_id=call, user=where.user, topic="refused"):
                        audit.refused(state, call, user=where.user, reason="not_allowed")  # once a person
                        await self.answering.say_to(where)(refused + " Your reply wasn't taken as an answer.")
                    return
                check = await self.agent.check(state, call)
                if isinstance(check, Expired):
                    await self.answering.expire(state, call)
                    if await self.index.tell_once(state.run_id, tool_call_id=call, user=where.user, topic="expired"):
                        await self.answering.say_to(where)(EXPIRED)
                    return
            except StoreUnavailable:
                return
            await self.answering.answer_typed(state, ctx, where, text)

    # --- Retry -----------------------------------------------------------------------------------

    async def on_retry(self, body: dict[str, Any]) -> None:
        """Lazy listener of Retry (after a failure): continue the run without asking again."""
        where = Origin.of_action(body)
        say = self.answering.say_to(where)
        run_id = str(((body.get("actions") or [{}])[0]).get("value", ""))
        with log_context(run_id=run_id, user_id=where.user):
            try:
                state = await self.agent.get_run(run_id)
                ctx = SlackContext.of(state)
                if where.channel_id != ctx.channel_id:
                    await say("This doesn't belong to a conversation I know.")
                    return
                if not self.answering.permissions.is_answerer(ctx, where.user, where=where):
                    await say(f"Only <@{ctx.requester}> can retry this." if ctx.requester else "You can't retry this.")
                    return
                record = await self.index.thread(ctx.team_id, channel_id=ctx.channel_id, thread_ts=ctx.thread_ts)
                if record is not None and record.run_id != run_id:
                    await say("This conversation has moved on since then; mention me in the thread to continue.")
                    return
                slot = await self.answering.slot(ctx, say)
                if slot is None:
                    return
                try:
                    stream = await self.agent.retry_stream(run_id=run_id)
                except BaseException:
                    await slot.release()
                    raise
            except RunNotFound:
                await say("This conversation has expired.")
                return
            except RunNotResumable:
                await say("This was retried already.")
                return
            except StoreCorrupt:
                await say(UNREADABLE)
                return
            except StoreUnavailable:
                await say(STORE_DOWN)
                return
            async with slot:  # taken above, given back here (or above, when the retry could not start)
                await self._mark_retried(state, where.user)
                await self.writer.follow(stream, ctx)

    async def _mark_retried(self, failed: RunState, user: str) -> None:
        """Turn the run's failure notices into "retried by" (rendered from the stored failure)."""
        try:
            notices = await self.index.messages(failed.run_id, FAILURE)
        except StoreUnavailable:
            return
        error = failed.error
        message = failure_text(error.kind, error.message, retry=False) if error else "The run stopped."
        note = f":repeat: <@{user}> retried"
        blocks = bk.failure_blocks(message, run_id=failed.run_id, retry=False, note=note)
        for notice in notices:
            await self.web.update(notice.channel_id, notice.ts, text=note, blocks=blocks)
