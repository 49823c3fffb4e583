"""Finding the question a request names (:class:`QuestionLookup`, held by
:class:`~bot.slack.questions.answering.Answering`): load its run, find the call its reference matches, check the request
comes from where the question lives (:func:`bot.slack.questions.placement.misplaced`) and, for
:meth:`QuestionLookup.vet`, that the person may answer; each ``None`` result comes after telling the person why."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.agent import Agent
from bot.agent.answers import question_of
from bot.agent.state import RunState
from bot.errors import RunNotFound, StoreCorrupt, StoreUnavailable
from bot.ops import audit
from bot.slack.context import Origin, SlackContext
from bot.slack.questions.notices import GONE, NOT_OPEN, STORE_DOWN, UNREADABLE
from bot.slack.questions.permissions import Kind, Permissions, kind_of
from bot.slack.questions.placement import misplaced
from bot.slack.refs import QuestionRef
from bot.store.batch import Batch
from bot.store.conversations import ConversationIndex

log = logging.getLogger(__name__)

Say = Callable[[str], Awaitable[Any]]
Found = tuple[RunState, SlackContext, str]
"""A loaded run, its Slack context and the ``tool_call_id`` of the question a request names."""


class QuestionLookup:
    """Finds questions of ``agent``'s runs: ``index`` tells where their messages are, ``permissions`` who may answer
    (see :class:`~bot.slack.questions.answering.Answering`)."""

    def __init__(self, *, agent: Agent, index: ConversationIndex, permissions: Permissions) -> None:
        self.agent = agent
        self.index = index
        self.permissions = permissions

    async def load(self, run_id: str, say: Say, *, beside: Batch | None = None) -> tuple[RunState, SlackContext] | None:
        """The run and its Slack context, or None after telling the person why not; ``beside``: other reads sent
        with the load."""
        try:
            state = await self.agent.get_run(run_id, beside=beside)
            return state, SlackContext.of(state)
        except RunNotFound:
            await say(GONE)
        except StoreCorrupt as exc:
            log.error("run %s: stored record unreadable (%s); the person was told to start again", run_id, exc)
            await say(UNREADABLE)
        except StoreUnavailable:
            await say(STORE_DOWN)
        return None

    async def find(
        self, ref: QuestionRef, say: Say, *, where: Origin | None = None, beside: Batch | None = None
    ) -> Found | None:
        """The run, context and question ``ref`` names, and when ``where`` is given, only if the request comes from
        there (:meth:`belongs`); or None after telling the person why not (gone, unreadable, store down, no such
        question, not from the run's messages). ``beside``: a batch of the caller's, sent with the run's load."""
        batch, shown = beside if beside is not None else Batch(self.index.client), None
        if where is not None and where.surface == "message" and where.message_ts:  # which messages show it
            shown = self.index.queue_run_messages(batch, ref.run_id)  # read with the run: one round trip
        loaded = await self.load(ref.run_id, say, beside=batch)
        if loaded is None:
            return None
        state, ctx = loaded
        call = question_of(state, ref.matches)
        if call is None:
            await say(NOT_OPEN)
            return None
        problem = (
            await misplaced(self.index, where, ctx, state=state, call=call, shown=shown.value if shown else None)
            if where is not None
            else None
        )
        if problem:
            await say(problem)
            return None
        return state, ctx, call

    async def find_or_reason(self, ref: QuestionRef) -> Found | str:
        """:meth:`find` for a modal's submission, whose ack answers with an error instead of a message: the found
        question, or what the person would have been told."""
        told: list[str] = []

        async def keep(text: str) -> None:
            told.append(text)

        found = await self.find(ref, keep)
        return found if found is not None else (told[0] if told else NOT_OPEN)

    async def vet(
        self, ref: QuestionRef, where: Origin, say: Say, *, expect: Kind = "question", beside: Batch | None = None
    ) -> Found | None:
        """:meth:`find` from ``where`` (``beside``: sent with the run's load), then who may answer or decide
        (:class:`~bot.slack.questions.permissions.Permissions`, ``expect`` the surface's kind); or None after telling
        why not."""
        found = await self.find(ref, say, where=where, beside=beside)
        if found is None:
            return None
        state, ctx, call = found
        try:
            refused = await self.permissions.refusal(state, ctx, call, user=where.user, where=where, expect=expect)
        except StoreUnavailable:
            await say(STORE_DOWN)
            return None
        if refused is not None:
            audit.refused(state, call, user=where.user, reason="not_allowed", kind=kind_of(state, call, expect=expect))
            await say(refused)
            return None
        return found
