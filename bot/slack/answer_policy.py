"""Who may answer a question (:class:`AnswerPolicy`): ``ASK_ANSWERERS`` (anyone in the run's channel, or only its
requester), and whoever the question was escalated to (``ASK_ESCALATE_TO``, see :mod:`bot.slack.waiting`)."""

from __future__ import annotations

from bot.config import Answerers
from bot.slack.context import SlackContext
from bot.store.conversations import ConversationIndex


class AnswerPolicy:
    """The answer policy ``answerers``; escalations are read from ``index``."""

    def __init__(self, answerers: Answerers, *, index: ConversationIndex) -> None:
        self.answerers: Answerers = answerers
        self.index = index

    def may_answer(self, ctx: SlackContext, user: str) -> bool:
        """The answer policy: anyone in the run's channel, or only its requester; a run asked for nobody in
        particular (no requester: an outside agent's question for the channel) is anyone's in its channel."""
        return self.answerers == "channel" or not ctx.requester or user == ctx.requester

    async def allowed(
        self, ctx: SlackContext, user: str, *, run_id: str, call: str, channel: str | None = None
    ) -> bool:
        """The answer policy, or the question was escalated to ``user`` (or to ``channel``, where the request comes
        from: the person is then remembered, so their modal's submission passes too). Raises ``StoreUnavailable``."""
        return self.may_answer(ctx, user) or await self.escalated_to(user, run_id=run_id, call=call, channel=channel)

    async def escalated_to(self, user: str, *, run_id: str, call: str, channel: str | None = None) -> bool:
        """Whether question ``call`` was escalated to ``user``, or to ``channel`` (then ``user`` is remembered).
        Raises ``StoreUnavailable``."""
        escalated = await self.index.escalated(run_id, call)
        if user in escalated:
            return True
        if channel and channel in escalated:
            await self.index.escalate(run_id, key=call, to=[user])
            return True
        return False

    def refusal(self, ctx: SlackContext) -> str:
        """What a person the policy does not allow is told."""
        return f"Only <@{ctx.requester}> can answer this question."
