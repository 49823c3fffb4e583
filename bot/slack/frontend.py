"""The Slack frontend: Bolt listeners that start runs, ask questions and take the answers.

Rules (DESIGN.md): every request is acked before any model call and before slow I/O; the "Answer"
button opens its modal before touching Redis (a ``trigger_id`` lives 3 s); one answer per question
(exactly-once via the run store's compare-and-set); who may answer is a policy; an answer whose channel or
thread does not match the run is refused; retried events never start a second run.

Conversation model: a mention (or DM) starts a run whose replies go to the thread of that message
(``thread_ts``). A thread remembers its latest run (:class:`bot.store.conversations.ConversationIndex`):
a follow-up mention continues the conversation (the previous run's messages are its history); while a
question is open, a reply in the thread by someone allowed to answer is the answer, as typed text.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import Agent, AskUserPayload
from bot.agent.ask_user import fallback_text
from bot.agent.state import ResumeData, RunState
from bot.agent.stream import AgentStream, ErrorPayload, FinishPayload, SuspendedPayload
from bot.errors import AnswerError, BotError, RunAlreadyResumed, RunNotFound, RunNotResumable, StoreUnavailable
from bot.slack import blocks as bk
from bot.slack.refs import BadReference, QuestionRef, parse_index
from bot.store.conversations import ConversationIndex
from bot.store.work_queue import WorkQueue

log = logging.getLogger(__name__)

WORKING_REACTION = "hourglass_flowing_sand"
STORE_DOWN = "I couldn't reach my storage, so nothing was recorded. Please try again in a moment."


@dataclass(frozen=True)
class SlackContext:
    """Where a run lives in Slack; stored as ``RunState.metadata["slack"]``."""

    team_id: str
    channel_id: str
    thread_ts: str
    requester: str
    message_ts: str  # the message that started (or last continued) the run: gets the working sign

    @classmethod
    def of(cls, state: RunState) -> SlackContext | None:
        data = state.metadata.get("slack")
        try:
            return cls(**data) if isinstance(data, dict) else None
        except TypeError:
            return None


@dataclass(frozen=True)
class Where:
    """Where a payload came from: the clicker, the channel and message, and the message's thread."""

    user: str
    channel_id: str
    message_ts: str | None
    thread_ts: str | None
    team_id: str | None
    message_blocks: list[dict[str, Any]] | None = None
    redelivered: bool = False  # the job was reclaimed from a worker that died while handling it


REDELIVERED = "_redelivered"  # marks a payload whose job was reclaimed (see WorkQueue)


class SlackFrontend:
    """Owns the listeners. ``answerers``: ``requester`` (default) or ``channel``.

    Two sides: the Bolt listeners (the *ack side*: ack, event dedupe, opening the answer modal, refusing a
    blank modal) turn each request into a job; :meth:`handle` (the *work side*) does the rest. With no
    ``queue`` jobs are handled in this process; with one, the ack side only enqueues them and ``worker``
    processes call :meth:`handle`, so acks never wait behind model runs.
    """

    def __init__(
        self,
        *,
        agent: Agent,
        index: ConversationIndex,
        client: AsyncWebClient,
        answerers: str = "requester",
        queue: WorkQueue | None = None,
    ) -> None:
        self.agent = agent
        self.index = index
        self.client = client
        self.answerers = answerers
        self.queue = queue
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- wiring ----------------------------------------------------------------------------------

    def register(self, app: AsyncApp) -> None:
        """Attach every listener to ``app``."""
        app.event("app_mention")(self._tracked(self.on_app_mention))
        app.event("message")(self._tracked(self.on_message))
        answers = rf"^({bk.ACT_OPTION}_\d+|{bk.ACT_SELECT}|{bk.ACT_SUBMIT}|{bk.ACT_RETRY})$"
        app.action(re.compile(answers))(self._tracked(self.on_answer_action))
        app.action(bk.ACT_CHECKS)(self.on_toggle)
        app.action(bk.ACT_MULTI)(self.on_toggle)
        app.action(bk.ACT_OPEN)(self._tracked(self.on_open_modal))
        app.view(bk.MODAL_CALLBACK)(self._tracked(self.on_modal_submit))

    def _tracked(self, listener: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """Wrap a listener so :meth:`drain` waits for it (Bolt runs listeners as tasks of its own).

        The wrapper keeps the listener's signature: Bolt passes arguments by parameter name.
        """

        @functools.wraps(listener)
        async def run(*args: Any, **kwargs: Any) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.add(task)
            try:
                await listener(*args, **kwargs)
            finally:
                if task is not None:
                    self._tasks.discard(task)

        return run

    async def drain(self) -> None:
        """Wait for listeners and background work in flight (tests, graceful shutdown)."""
        me = asyncio.current_task()
        while pending := [t for t in self._tasks if t is not me and not t.done()]:
            await asyncio.wait(pending)

    # --- events ----------------------------------------------------------------------------------

    async def on_app_mention(self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]) -> None:
        """A mention in a channel: start or continue the thread's conversation."""
        if not await self._first_sight(body, event):
            return
        await self._dispatch({"kind": "converse", "body": body, "bot_user": context.get("bot_user_id")})

    async def on_message(self, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]) -> None:
        """DMs start or continue a conversation; a thread reply in a channel may answer an open question."""
        if event.get("subtype") or event.get("bot_id") or not event.get("user"):
            return
        is_dm = event.get("channel_type") == "im"
        bot_user = context.get("bot_user_id")
        mentioned = bool(bot_user) and f"<@{bot_user}>" in (event.get("text") or "")
        if not is_dm and (not event.get("thread_ts") or mentioned):
            return  # not a thread reply, or a mention (the app_mention listener takes it)
        if not await self._first_sight(body, event):
            return
        await self._dispatch({"kind": "converse" if is_dm else "thread_reply", "body": body, "bot_user": bot_user})

    async def _dispatch(self, job: dict[str, Any]) -> None:
        """Handle ``job`` here, or queue it for a worker process."""
        if self.queue is None:
            await self.handle(job)
            return
        try:
            await self.queue.enqueue(job)
        except StoreUnavailable:
            await self._store_down(job.get("body") or {})

    async def _store_down(self, body: dict[str, Any]) -> None:
        """Tell whoever sent ``body`` that nothing was recorded: in the thread for events, else ephemerally."""
        event = body.get("event")
        if event:
            await self._post(event["channel"], event.get("thread_ts") or event["ts"], text=f":warning: {STORE_DOWN}")
        else:
            where = _where(body)
            await self._ephemeral(where.channel_id, where.user, where.thread_ts, STORE_DOWN)

    async def handle(self, job: dict[str, Any]) -> None:
        """The work side of one request. ``job``: ``{"kind": "converse" | "thread_reply" | "action" | "view",
        "body": <the Slack payload>, "bot_user": <bot user id, events only>}``."""
        body, kind = job.get("body") or {}, job.get("kind")
        if job.get("redelivered"):
            body[REDELIVERED] = True
        if kind == "converse":
            await self._converse(body, body["event"], bot_user=job.get("bot_user"))
        elif kind == "thread_reply":
            await self._thread_reply(body, body["event"])
        elif kind == "action":
            await self._do_action(body)
        elif kind == "view":
            await self._do_view(body)
        else:
            log.warning("ignoring a job of unknown kind %r", kind)

    async def _first_sight(self, body: dict[str, Any], event: dict[str, Any]) -> bool:
        event_id = body.get("event_id") or f"{event.get('channel')}:{event.get('ts')}"
        try:
            return await self.index.first_sight(str(event_id))
        except StoreUnavailable:
            await self._store_down(body)
            return False

    async def _converse(self, body: dict[str, Any], event: dict[str, Any], *, bot_user: str | None) -> None:
        channel, user, ts = event["channel"], event["user"], event["ts"]
        thread_ts = event.get("thread_ts") or ts
        team = body.get("team_id") or event.get("team") or ""
        text = event.get("text") or ""
        if bot_user:  # the bot's own mention is addressing, not content; other mentions stay
            text = re.sub(rf"<@{re.escape(bot_user)}(\|[^>]*)?>", "", text)
        text = bk.unescape(text).strip()
        ctx = SlackContext(team_id=team, channel_id=channel, thread_ts=thread_ts, requester=user, message_ts=ts)
        history: list[dict[str, Any]] | None = None
        try:
            record = await self.index.thread(team, channel, thread_ts)
            previous = await self._load(record.run_id) if record else None
            if previous is not None and previous.status == "suspended":
                where = Where(user=user, channel_id=channel, message_ts=None, thread_ts=thread_ts, team_id=team)
                if not text:
                    await self._ephemeral(channel, user, thread_ts, "A question above is waiting for an answer.")
                    return
                await self._answer_typed(previous, where, text, question_ts=record.question_ts if record else None)
                return
            if previous is not None and previous.status == "running" and not self.agent.is_stale(previous):
                await self._ephemeral(channel, user, thread_ts, "I'm still working on this thread; one moment.")
                return
            if previous is not None:  # finished, failed, or abandoned by a dead process: continue from it
                history = self.agent.history_of(previous)
            stream = await self.agent.stream(
                text or "(empty message)", history=history, metadata={"slack": asdict(ctx)}
            )
            await self.index.set_thread(team, channel, thread_ts, run_id=stream.run_id)
        except StoreUnavailable:
            await self._post(channel, thread_ts, text=f":warning: {STORE_DOWN}")
            return
        await self.follow(stream, ctx)

    async def _thread_reply(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        channel, user, thread_ts = event["channel"], event["user"], event["thread_ts"]
        team = body.get("team_id") or event.get("team") or ""
        try:
            record = await self.index.thread(team, channel, thread_ts)
            state = await self._load(record.run_id) if record else None
        except StoreUnavailable:
            return  # a thread reply is not necessarily meant for us; say nothing
        if state is None or state.status != "suspended":
            return
        ctx = SlackContext.of(state)
        if ctx is None or not self._may_answer(ctx, user):
            return  # people talk in threads; only allowed answerers' replies count
        where = Where(user=user, channel_id=channel, message_ts=None, thread_ts=thread_ts, team_id=team)
        text = bk.unescape(event.get("text") or "").strip()
        await self._answer_typed(state, where, text, question_ts=record.question_ts if record else None)

    async def _answer_typed(self, state: RunState, where: Where, text: str, *, question_ts: str | None) -> None:
        """A typed reply to the open question: the text itself, or for multi select the options it names."""
        pending = state.pending
        if pending is None or not text:
            return
        payload = AskUserPayload.model_validate(pending.suspend_payload)
        answer: ResumeData = text
        if payload.selection_mode == "multi_select":
            picked = bk.labels_in_text(text, payload.labels)
            if picked is None:
                hint = (
                    "Tick the options and press Submit, or reply with the options' names (or numbers) "
                    "separated by commas."
                )
                await self._ephemeral(where.channel_id, where.user, where.thread_ts, hint)
                return
            answer = picked
        ref = QuestionRef.of(state.run_id, pending.tool_call_id)
        await self._answer(
            ref, where=Where(**{**asdict(where), "message_ts": question_ts}), pick=lambda _p: answer, loaded=state
        )

    # --- actions ---------------------------------------------------------------------------------

    async def on_answer_action(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
        """An option button, a select, Submit or Retry: ack, then the work side."""
        await ack()
        await self._dispatch({"kind": "action", "body": body})

    async def _do_action(self, body: dict[str, Any]) -> None:
        action = (body.get("actions") or [{}])[0]
        action_id = str(action.get("action_id", ""))
        if action_id == bk.ACT_SELECT:
            await self._do_select(body, action)
        elif action_id == bk.ACT_SUBMIT:
            await self._do_submit(body, action)
        elif action_id == bk.ACT_RETRY:
            await self._do_retry(body, action)
        elif action_id.startswith(bk.ACT_OPTION):
            await self._do_option(body, action)

    async def _do_option(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A single-select button: the answer is the option at the button's index."""
        try:
            ref, index = QuestionRef.from_value(str(action.get("value", "")))
        except BadReference:
            return
        await self._answer(ref, where=_where(body), pick=lambda p: _label(p, index))

    async def _do_select(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A single-select menu (more options than buttons allow): answering on selection."""
        try:
            ref, _ = QuestionRef.from_block_id(str(action.get("block_id", "")))
        except BadReference:
            return
        index = parse_index(str((action.get("selected_option") or {}).get("value", "")))
        if index is None:
            return
        await self._answer(ref, where=_where(body), pick=lambda p: _label(p, index))

    async def on_toggle(self, ack: Callable[..., Awaitable[Any]]) -> None:
        """Checkbox ticks and multi-select changes fire block_actions too: acked and ignored until Submit."""
        await ack()

    async def _do_submit(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Submit of a multi-select question: reads ``state.values`` of that question's block only."""
        try:
            ref, _ = QuestionRef.from_value(str(action.get("value", "")))
        except BadReference:
            return
        where = _where(body)
        values = ((body.get("state") or {}).get("values") or {}).get(ref.block_id("picks")) or {}
        picked = [
            o.get("value", "")
            for element in values.values()
            if isinstance(element, dict)
            for o in element.get("selected_options") or []
        ]
        if not picked:
            await self._ephemeral(
                where.channel_id, where.user, where.thread_ts, "Select at least one option, then Submit."
            )
            return

        def labels(p: AskUserPayload) -> ResumeData:
            return [_label(p, parse_index(v)) for v in picked]

        await self._answer(ref, where=where, pick=labels)

    async def on_open_modal(
        self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        """The free-form "Answer" button: opens the modal at once, from the payload alone (no Redis)."""
        await ack()
        try:
            ref, _ = QuestionRef.from_value(str(action.get("value", "")))
        except BadReference:
            return
        where = _where(body)
        question = _question_text(where.message_blocks or [], ref)
        meta = {
            "r": ref.run_id,
            "c": ref.call,
            "ch": where.channel_id,
            "m": where.message_ts or "",
            "t": where.thread_ts or "",
            "tm": where.team_id or "",
        }
        try:
            await self.client.views_open(
                trigger_id=body["trigger_id"], view=bk.answer_modal(question, private_metadata=meta)
            )
        except SlackApiError as exc:
            log.warning("views.open failed: %s", exc.response.get("error"))
            await self._ephemeral(
                where.channel_id,
                where.user,
                where.thread_ts,
                "Slack didn't let me open the answer form in time; please click Answer again.",
            )

    async def on_modal_submit(
        self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        """The answer modal: blank -> an error under the input; otherwise close it and resume."""
        if not _modal_text(view).strip():
            await ack(response_action="errors", errors={bk.MODAL_INPUT_BLOCK: "Please write an answer."})
            return
        await ack()
        await self._dispatch({"kind": "view", "body": body})

    async def _do_view(self, body: dict[str, Any]) -> None:
        view = body.get("view") or {}
        text = _modal_text(view)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            ref = QuestionRef(run_id=meta["r"], call=meta["c"])
        except (ValueError, KeyError, TypeError):
            return
        user = (body.get("user") or {}).get("id", "")
        where = Where(
            user=user,
            channel_id=meta.get("ch", ""),
            message_ts=meta.get("m") or None,
            thread_ts=meta.get("t") or None,
            team_id=meta.get("tm") or None,
        )
        await self._answer(ref, where=where, pick=lambda _p: text)

    async def _do_retry(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Retry after a failure: continues the run without asking again."""
        where = _where(body)
        say = self._say_to(where)
        run_id = str(action.get("value", ""))
        try:
            state = await self.agent.get_run(run_id)
            ctx = SlackContext.of(state)
            if ctx is None or ctx.channel_id != where.channel_id or not self._may_answer(ctx, where.user):
                await say(self._refusal(ctx))
                return
            record = await self.index.thread(ctx.team_id, ctx.channel_id, ctx.thread_ts)
            if record is not None and record.run_id != run_id:
                await say("This conversation has moved on since then; mention me in the thread to continue.")
                return
            stream = await self.agent.retry_stream(run_id=run_id)
        except RunNotFound:
            await say("This conversation has expired.")
            return
        except RunNotResumable:
            await say("This was retried already.")
            return
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        if where.message_ts:
            note = f":repeat: <@{where.user}> retried"
            await self._update(
                where.channel_id,
                where.message_ts,
                text=note,
                blocks=bk.strip_controls(where.message_blocks or [], note=note),
            )
        await self.follow(stream, ctx)

    # --- answering -------------------------------------------------------------------------------

    def _may_answer(self, ctx: SlackContext, user: str) -> bool:
        return self.answerers == "channel" or user == ctx.requester

    def _refusal(self, ctx: SlackContext | None) -> str:
        if ctx is None:
            return "This doesn't belong to a conversation I know."
        return f"Only <@{ctx.requester}> can answer this question."

    async def _load(self, run_id: str) -> RunState | None:
        try:
            return await self.agent.get_run(run_id)
        except RunNotFound:
            return None

    async def _answer(
        self,
        ref: QuestionRef,
        *,
        where: Where,
        pick: Callable[[AskUserPayload], ResumeData],
        loaded: RunState | None = None,
    ) -> None:
        """Check and claim an answer; on success update the question and follow the resumed run."""
        say = self._say_to(where)
        try:
            state = loaded or await self.agent.get_run(ref.run_id)
        except RunNotFound:
            await self._expire(where)
            return
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        ctx = SlackContext.of(state)
        if ctx is None or ctx.channel_id != where.channel_id or (where.thread_ts and where.thread_ts != ctx.thread_ts):
            await say("This answer doesn't belong to this conversation, so I ignored it.")
            return
        if not self._may_answer(ctx, where.user):
            await say(self._refusal(ctx))
            return
        pending = state.pending
        if state.status != "suspended" or pending is None or not ref.matches(pending.tool_call_id):
            answered = next((a for a in reversed(state.answers) if ref.matches(a.tool_call_id)), None)
            if where.redelivered and state.status == "running" and answered and answered.answered_by == where.user:
                await self._finish_for_dead_worker(state, ctx)  # this job claimed it, then its worker died
                return
            who = f" by <@{answered.answered_by}>" if answered and answered.answered_by else ""
            await say(f"This question was already answered{who}." if answered else "This question is no longer open.")
            return
        payload = AskUserPayload.model_validate(pending.suspend_payload)
        try:
            data = pick(payload)
            stream = await self.agent.resume_stream(
                data, run_id=state.run_id, tool_call_id=pending.tool_call_id, answered_by=where.user, loaded=state
            )
        except RunAlreadyResumed as exc:
            who = f" by <@{exc.answered_by}>" if exc.answered_by else ""
            await say(f"This question was already answered{who}.")
            return
        except AnswerError as exc:
            await say(f"I couldn't take that answer: {exc}")
            return
        except RunNotFound:
            await self._expire(where)
            return
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        if where.message_ts:
            outcome = f":white_check_mark: <@{where.user}> answered: *{bk.answer_display(data)}*"
            await self._update(
                where.channel_id,
                where.message_ts,
                text=bk.escape(bk.clip(payload.question, 3000)) + " (answered)",
                blocks=bk.outcome_blocks(payload, ref=ref, outcome=outcome),
            )
        try:
            await self.index.set_thread(ctx.team_id, ctx.channel_id, ctx.thread_ts, run_id=state.run_id)
        except StoreUnavailable:
            log.warning("run %s: could not clear the thread's open question", state.run_id)
        await self.follow(stream, ctx)

    async def _finish_for_dead_worker(self, state: RunState, ctx: SlackContext) -> None:
        """Continue a run whose answer was claimed by a worker that died before finishing it."""
        try:
            stream = await self.agent.retry_stream(run_id=state.run_id, stale_after=0.0)
        except (RunNotResumable, StoreUnavailable) as exc:
            log.warning("run %s: could not take over from a dead worker: %s", state.run_id, exc)
            return
        await self.follow(stream, ctx)

    async def _expire(self, where: Where) -> None:
        note = ":hourglass: This question has expired."
        if where.message_ts and where.message_blocks:  # without the blocks, leave the message as it is
            await self._update(
                where.channel_id,
                where.message_ts,
                text=note,
                blocks=bk.strip_controls(where.message_blocks or [], note=note),
            )
        await self._ephemeral(
            where.channel_id,
            where.user,
            where.thread_ts,
            "This question has expired, so your answer wasn't used. Mention me to start again.",
        )

    def _say_to(self, where: Where) -> Callable[[str], Awaitable[None]]:
        async def say(text: str) -> None:
            await self._ephemeral(where.channel_id, where.user, where.thread_ts, text)

        return say

    # --- following a run -------------------------------------------------------------------------

    async def follow(self, stream: AgentStream, ctx: SlackContext) -> None:
        """Show a run segment in its thread: the working sign, then a question, a reply or a failure."""
        await self._react(ctx, add=True)
        try:
            async for chunk in stream:
                if chunk.type == "tool-call-suspended" and isinstance(chunk.payload, SuspendedPayload):
                    await self._ask(stream.run_id, chunk.payload, ctx)
                elif chunk.type == "finish" and isinstance(chunk.payload, FinishPayload):
                    if chunk.payload.status == "completed":
                        text = chunk.payload.text or "(no reply)"
                        for part in bk.split_reply(text):
                            await self._post(
                                ctx.channel_id, ctx.thread_ts, text=bk.escape(part), blocks=bk.reply_blocks(part)
                            )
                elif chunk.type == "error" and isinstance(chunk.payload, ErrorPayload):
                    await self._failed(stream.run_id, chunk.payload, ctx)
        finally:
            await self._react(ctx, add=False)

    async def _ask(self, run_id: str, suspended: SuspendedPayload, ctx: SlackContext) -> None:
        payload = suspended.suspend_payload
        if not isinstance(payload, AskUserPayload):
            log.warning("run %s: suspended on %s, which Slack cannot show", run_id, suspended.tool_name)
            return
        ref = QuestionRef.of(run_id, suspended.tool_call_id)
        blocks = bk.question_blocks(payload, ref=ref, requester=ctx.requester, answerers=self.answerers)
        text = bk.escape(bk.clip(payload.question, 3000))  # notifications: escaped, so <!channel> pings nobody
        ts = await self._post(ctx.channel_id, ctx.thread_ts, text=text, blocks=blocks)
        if ts is None:  # Slack refused the blocks: ask in plain text; a reply in the thread still answers
            ts = await self._post(ctx.channel_id, ctx.thread_ts, text=bk.escape(bk.clip(fallback_text(payload), 39000)))
        if ts:
            try:
                await self.index.set_thread(ctx.team_id, ctx.channel_id, ctx.thread_ts, run_id=run_id, question_ts=ts)
            except StoreUnavailable:
                log.warning("run %s: could not record the question message", run_id)

    async def _failed(self, run_id: str, error: ErrorPayload, ctx: SlackContext) -> None:
        what = {
            "model": "The model call failed",
            "max_turns": "I stopped because the model kept going without finishing",
            "store": "I couldn't save this conversation",
        }.get(error.kind, "Something went wrong")
        retry = error.kind in ("model", "max_turns")
        text = f"{what}: {error.message}." + (" Nothing is lost; press Retry to continue." if retry else "")
        blocks = bk.failure_blocks(text, run_id=run_id, retry=retry)
        await self._post(ctx.channel_id, ctx.thread_ts, text=bk.escape(text), blocks=blocks)

    # --- Slack Web API, errors logged with Slack's code ------------------------------------------

    async def _post(
        self, channel: str, thread_ts: str | None, *, text: str, blocks: list[dict[str, Any]] | None = None
    ) -> str | None:
        try:
            resp = await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
            return str(resp.get("ts")) if resp.get("ts") else None
        except SlackApiError as exc:
            log.error("chat.postMessage failed: %s %s", exc.response.get("error"), exc.response.get("errors") or "")
            return None

    async def _update(self, channel: str, ts: str, *, text: str, blocks: list[dict[str, Any]]) -> None:
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
        except SlackApiError as exc:
            log.error("chat.update failed: %s %s", exc.response.get("error"), exc.response.get("errors") or "")

    async def _ephemeral(self, channel: str, user: str, thread_ts: str | None, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)
        except SlackApiError as exc:
            log.error("chat.postEphemeral failed: %s", exc.response.get("error"))

    async def _react(self, ctx: SlackContext, *, add: bool) -> None:
        try:
            call = self.client.reactions_add if add else self.client.reactions_remove
            await call(channel=ctx.channel_id, timestamp=ctx.message_ts, name=WORKING_REACTION)
        except SlackApiError as exc:
            if exc.response.get("error") not in ("already_reacted", "no_reaction"):
                log.warning("reactions.%s failed: %s", "add" if add else "remove", exc.response.get("error"))


def _where(body: dict[str, Any]) -> Where:
    container = body.get("container") or {}
    message = body.get("message") or {}
    return Where(
        user=(body.get("user") or {}).get("id", ""),
        channel_id=container.get("channel_id") or (body.get("channel") or {}).get("id", ""),
        message_ts=container.get("message_ts") or message.get("ts"),
        thread_ts=message.get("thread_ts") or container.get("thread_ts"),
        team_id=(body.get("team") or {}).get("id"),
        message_blocks=message.get("blocks"),
        redelivered=bool(body.get(REDELIVERED)),
    )


def _modal_text(view: dict[str, Any]) -> str:
    """The text typed into the answer modal ('' when absent)."""
    values = (view.get("state") or {}).get("values") or {}
    return str(((values.get(bk.MODAL_INPUT_BLOCK) or {}).get(bk.ACT_TEXT) or {}).get("value") or "")


def _label(payload: AskUserPayload, index: int | None) -> str:
    """The full label of option ``index``. Raises ``AnswerError`` for an index the question does not have."""
    labels = payload.labels
    if index is None or not 0 <= index < len(labels):
        raise AnswerError("that option is not part of this question")
    return labels[index]


def _question_text(blocks: list[dict[str, Any]], ref: QuestionRef) -> str:
    """The question's mrkdwn as shown in the message (for the modal), without the leading emoji."""
    parts = [
        (b.get("text") or {}).get("text", "")
        for b in blocks
        if b.get("type") == "section" and re.fullmatch(re.escape(ref.block_id("q")) + r"\d+", b.get("block_id", ""))
    ]
    text = "".join(parts).removeprefix(":question: ")
    return text or "Your answer"


__all__ = ["BotError", "SlackContext", "SlackFrontend"]
