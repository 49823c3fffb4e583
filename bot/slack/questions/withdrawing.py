"""The requester's own controls over their run: withdraw a waiting question (its Cancel button) and stop a run that
is working (saying ``stop`` in its thread).

- **Cancel** (on every question the agent asks; an approval request has Decline instead): only the person who
  started the run may withdraw it. The run goes on, the tool told it was cancelled (``Agent.cancel_question``), and
  the question's messages say who withdrew it.
- **stop**: a mention or a thread reply that says ``stop`` (or ``cancel``) while the run is working asks its
  process to stop at its next step (``Agent.stop``); the run's last message then says it stopped.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from bot.agent.answers import Open
from bot.agent.state import RunState
from bot.agent.stream import AgentStream
from bot.errors import StoreUnavailable
from bot.logs import log_context
from bot.ops import audit
from bot.slack.context import SlackContext, Where
from bot.slack.questions.answering import Answering
from bot.slack.questions.attempt import Attempt
from bot.slack.questions.notices import STORE_DOWN
from bot.slack.questions.picks import button_ref

log = logging.getLogger(__name__)

STOP_WORDS = re.compile(r"^\s*(stop|cancel)\s*[.!]?\s*$", re.IGNORECASE)
STOPPING = "Stopping after the current step."


def says_stop(text: str) -> bool:
    """Whether a message is a request to stop (``stop`` / ``cancel``, alone)."""
    return bool(STOP_WORDS.match(text))


class Withdrawing:
    """Cancel and stop for ``answering``'s runs."""

    def __init__(self, answering: Answering) -> None:
        self.answering = answering
        self.agent = answering.agent

    async def on_cancel(self, body: dict[str, Any]) -> None:
        """Lazy listener of a question's Cancel button: withdraw it, if the clicker started the run."""
        where = Where.of_action(body)
        say = self.answering.say_to(where)
        ref = await button_ref(body, say)
        if ref is None:
            return
        with log_context(run_id=ref.run_id, team_id=where.team_id, channel_id=where.channel_id, user_id=where.user):
            found = await self.answering.find(ref, say, where=where)
            if found is None:
                return
            state, ctx, call = found
            if where.user != ctx.requester:
                audit.refused(state, call, user=where.user, reason="not_allowed")
                await say(f"Only <@{ctx.requester}> can withdraw this question.")
                return
            attempt = Attempt.of(found, where=where, say=say)
            check = await self.agent.check(state, call)
            if not isinstance(check, Open):
                await self.answering.not_open(check, attempt)
                return

            async def withdraw() -> AgentStream:
                return await self.agent.cancel_question(run_id=state.run_id, tool_call_id=call, cancelled_by=where.user)

            withdrawn = f":no_entry_sign: Withdrawn by <@{where.user}>."
            await self.answering.settle(attempt, check.pending, claim=withdraw, outcome=withdrawn, summary="withdrawn")

    async def stop(self, state: RunState, ctx: SlackContext, where: Where) -> None:
        """A ``stop`` said in the thread of ``state``, which is working: only its requester may stop it."""
        say = self.answering.say_to(where)
        if where.user != ctx.requester:
            await say(f"Only <@{ctx.requester}> can stop this.")
            return
        try:
            await self.agent.stop(run_id=state.run_id, stopped_by=where.user)
        except StoreUnavailable:
            await say(STORE_DOWN)
            return
        log.info("run %s: %s asked it to stop", state.run_id, where.user)
        await say(STOPPING)
