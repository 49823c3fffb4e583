"""The requester's own controls over their run: withdraw a waiting question (its Cancel button) and stop a run that
is working (saying ``stop`` in its thread).

- **Cancel** (on every question the agent asks; an approval request has Decline instead): only the person who
  started the run may withdraw it. The run goes on, the tool told it was cancelled (``Agent.cancel_question``), and
  the question's messages say who withdrew it.
- **stop**: a mention or a thread reply that says ``stop`` (or ``cancel``) while the run is working asks its
  process to stop at its next step (``Agent.stop``); the run's last message then says it stopped.
- **Slack's Stop** of the thread's agent session (``agent_session_stopped``, agent_view): the same stop, wherever
  the run works (the request is a mark in Redis every process reads: at once in this process, with the driving
  process's next lease renewal elsewhere). The model turn under way is cancelled, no tool that has not started
  starts, the streamed reply ends with "Stopped by @person", and the session leaves ``processing``
  (:mod:`bot.slack.replies.sessions`). An approved tool already running is not killed: the person is told it is
  running and will finish. A question that waits is **not** withdrawn by Stop: Stop is about work (Slack shows it
  only while the session is ``processing``), the question keeps its own Cancel, and the session shows
  ``suspended`` again. Who may stop: :meth:`Permissions.stop_refusal
  <bot.slack.questions.permissions.Permissions.stop_refusal>` (the requester, or who ``ASK_ANSWERERS`` says).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from bot.agent.answers import Open
from bot.agent.state import RunState
from bot.agent.stream import AgentStream
from bot.errors import RunNotFound, StoreCorrupt, StoreUnavailable
from bot.logs import log_context
from bot.ops import audit
from bot.slack.approvals.batch import approved_earlier
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.answering import Answering
from bot.slack.questions.attempt import Attempt
from bot.slack.questions.lookup import Found, Say
from bot.slack.questions.notices import STORE_DOWN
from bot.slack.questions.picks import button_ref

log = logging.getLogger(__name__)

STOP_WORDS = re.compile(r"^\s*(stop|cancel)\s*[.!]?\s*$", re.IGNORECASE)
STOPPING = "Stopping after the current step."
NOTHING_WORKS = "Nothing is working in this thread now."
STILL_WAITS = "Nothing is working now: the question above still waits for an answer (its Cancel withdraws it)."


def says_stop(text: str) -> bool:
    """Whether a message is a request to stop (``stop`` / ``cancel``, alone)."""
    return bool(STOP_WORDS.match(text))


class Withdrawing:
    """Cancel and stop for ``answering``'s runs."""

    def __init__(self, answering: Answering) -> None:
        self.answering = answering
        self.agent = answering.agent

    async def on_cancel(self, body: dict[str, Any]) -> None:
        """Lazy listener of a question's (or an approval request's) Cancel button: withdraw it, if the clicker
        started the run (a request of a batch: the batch's calls still undecided with it)."""
        where = Origin.of_action(body)
        say = self.answering.say_to(where)
        ref = await button_ref(body, say)
        if ref is None:
            return
        with log_context(run_id=ref.run_id, team_id=where.team_id, channel_id=where.channel_id, user_id=where.user):
            found = await self.answering.find(ref, say, where=where)
            if found is not None:
                await self.withdraw(found, where, say)

    async def withdraw(self, found: Found, where: Origin, say: Say) -> None:
        """Withdraw the question (or approval request) ``found`` names for ``where.user``, who must have started its
        run (else told who may); a request of a batch: the batch's calls still undecided with it."""
        state, ctx, call = found
        with log_context(run_id=state.run_id, team_id=where.team_id, channel_id=where.channel_id, user_id=where.user):
            waiting = state.waiting_call(call)
            what = "request" if waiting is not None and waiting.kind == "approval" else "question"
            if where.user != ctx.requester:
                audit.refused(state, call, user=where.user, reason="not_allowed")
                if ctx.requester:
                    await say(f"Only <@{ctx.requester}> can withdraw this {what}.")
                else:  # asked of anyone in the channel (an outside agent's): nobody here started it
                    await say(f"Nobody can withdraw this {what} here: the agent that asked it can.")
                return
            attempt = Attempt.of(found, where=where, say=say)
            check = await self.agent.check(state, call)
            if not isinstance(check, Open):
                await self.answering.not_open(check, attempt)
                return

            async def withdraw() -> AgentStream:
                return await self.agent.cancel_question(run_id=state.run_id, tool_call_id=call, cancelled_by=where.user)

            withdrawn = f":no_entry_sign: Withdrawn by <@{where.user}>."
            earlier = approved_earlier(state, but=call) if what == "request" else []  # a batch's, shown as they ran
            await self.answering.settle(
                attempt, check.pending, claim=withdraw, outcome=withdrawn, summary="withdrawn", batch=earlier
            )

    async def stop_working(
        self, state: RunState, ctx: SlackContext, where: Origin, *, acknowledge: bool = True
    ) -> None:
        """A stop asked in the thread of ``state``, which is ``running`` ("stop" said there as a mention or a reply,
        or Slack's Stop): :meth:`stop`; a run whose process died (orphaned) is then taken over here, and stops
        before its first step: a decided call it carried never starts (:meth:`Answering.continue_orphan`)."""
        orphaned = await self._orphaned(state)
        if await self.stop(state, ctx, where, acknowledge=acknowledge, orphaned=orphaned) and orphaned:
            await self.answering.continue_orphan(state, ctx, stopping=True)

    async def stop(
        self, state: RunState, ctx: SlackContext, where: Origin, *, acknowledge: bool = True, orphaned: bool = False
    ) -> bool:
        """Ask the run of ``state`` to stop; only who :meth:`Permissions.stop_refusal` admits may. True when the
        stop was taken (False: refused, the store is down, or nothing works any more: the person is told).
        ``acknowledge``: tell the person it is stopping (Slack's Stop shows that itself: only an approved call that
        runs on is told; nor is a run whose model turn the stop ends at once, whose thread says so itself);
        ``orphaned``: nobody drives it (an approved call of it is not running, whatever it
        says)."""
        say = self.answering.say_to(where)
        refused = self.answering.permissions.stop_refusal(ctx, where.user, where=where)
        if refused is not None:
            await say(refused)
            return False
        # a model turn under way here ends at once: the thread says "Stopped by" itself, and "stopping after the
        # current step" would come after it
        at_once = self.agent.stops.ends_at_once(state.run_id)
        try:
            taken = await self.agent.stop(run_id=state.run_id, stopped_by=where.user)
        except StoreUnavailable:
            await say(STORE_DOWN)
            return False
        except StoreCorrupt:
            taken = False
        if not taken:  # a question waits (a tool's, asked live), or it asked or ended since it was read
            await say(STILL_WAITS if state.asks_live else NOTHING_WORKS)
            return False
        log.info("run %s: %s asked it to stop", state.run_id, where.user)
        pending = state.pending
        running = pending is not None and pending.executing_since is not None and pending.resume is not None
        if running and pending is not None and not orphaned:
            await say(
                f"Stopping: `{pending.tool_name}` was approved and is running now; it will finish, and"
                " nothing after it starts."
            )
            return True
        if acknowledge and not at_once:
            await say(STOPPING)
        return True

    async def on_session_stopped(self, body: dict[str, Any]) -> None:
        """Lazy listener of ``agent_session_stopped`` (Slack's Stop on the thread's processing agent session; see the
        module docstring). Slack does not move the session away from ``processing`` itself: the run's end does
        (its writer), or, when nothing is working, the stored run's status here."""
        where = Origin.of_event(body)
        team, channel, thread_ts = where.team_id or "", where.channel_id or "", where.thread_ts or ""
        say = self.answering.say_to(where)
        ended = (body.get("event") or {}).get("streaming_message_ts") or []
        for ts in ended if isinstance(ended, list) else []:  # Slack stopped them: no chat.stopStream on them
            self.answering.writer.ended_streams.mark(channel, str(ts))
        with log_context(team_id=team, channel_id=channel, user_id=where.user):
            try:
                record = await self.answering.index.thread(team, channel_id=channel, thread_ts=thread_ts)
                state = await self.agent.get_run(record.run_id) if record is not None else None
                ctx = SlackContext.of(state) if state is not None else None
            except StoreUnavailable:
                await say(STORE_DOWN)
                return
            except (RunNotFound, StoreCorrupt):
                state = ctx = None
            if state is None or ctx is None:
                log.info("Stop in %s %s: no run there", channel, thread_ts)
                return
            if state.status == "running":
                await self.stop_working(state, ctx, where, acknowledge=False)
                return
            writer = self.answering.writer
            await writer.show_stored(state, ctx)  # not left processing: what the stored run is
            await say(STILL_WAITS if state.status == "suspended" else NOTHING_WORKS)

    async def _orphaned(self, state: RunState) -> bool:
        try:
            return await self.agent.is_orphaned(state)
        except StoreUnavailable:
            return False
