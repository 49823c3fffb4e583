"""One person's attempt on one question or approval request of a run (:class:`Attempt`): the value the answering
code passes from the click, reply or form that made it to the claim and, when the claim can't be made, to the
notice that explains why (:class:`~bot.slack.questions.answering.Answering`)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.state import RunState
from bot.ops import audit
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.lookup import Found, Say
from bot.store.conversations import MessageRef


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """An answer, decision or withdrawal tried on question ``call`` (a ``tool_call_id``) of the run ``state``
    (living in Slack at ``ctx``), by ``user`` (a Slack user id; an outside agent's name when it withdraws its own
    question); ``say`` tells them privately, on the surface they used; ``clicked``: the bot's message in the run's
    thread they acted on (closed with the recorded messages, recorded or not; None for an ephemeral, a thread
    reply, Home, a modal). ``tried``: what they tried, as the notices quote it (:func:`bot.slack.questions.picks.said`,
    or ``"approved"`` / ``"declined"``), once known (``dataclasses.replace(attempt, tried=...)``); ``kind``:
    ``"approval"`` for a decision (audited as one even when the call is no longer pending to tell); ``from_home``:
    made on the person's App Home (its Home is published again at once once it is taken). Frozen: a changed attempt
    is a new one (``dataclasses.replace``)."""

    state: RunState
    ctx: SlackContext
    call: str
    user: str
    say: Say
    clicked: MessageRef | None = None
    tried: str | None = None
    kind: audit.Kind | None = None
    from_home: bool = False

    @classmethod
    def of(
        cls, found: Found, *, where: Origin, say: Say, clicked: MessageRef | None = None, kind: audit.Kind | None = None
    ) -> Attempt:
        """The attempt of ``where.user`` on the question ``found`` names; ``clicked`` by default the message of
        ``where`` in the run's thread (:meth:`Origin.message_in <bot.slack.context.Origin.message_in>`)."""
        state, ctx, call = found
        clicked = clicked or where.message_in(ctx)
        home = where.surface == "home"
        return cls(
            state=state, ctx=ctx, call=call, user=where.user, say=say, clicked=clicked, kind=kind, from_home=home
        )
