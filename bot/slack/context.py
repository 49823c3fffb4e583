"""Where things live in Slack: the run's :class:`SlackContext` (stored with it) and a request's :class:`Origin`.

:class:`SlackContext` is stored as ``RunState.metadata["slack"]``; it is versioned (``schema_version``) like the
run itself. Version 1 records written before the field existed have no ``schema_version`` and load as 1.
Shape (version 1)::

    {"schema_version": 1, "team_id": "T1", "channel_id": "C1", "thread_ts": "1700000000.000100",
     "requester": "U1", "message_ts": "1700000000.000100"}

:class:`Origin` is read from a payload's own structure (``container`` for interactions, ``event`` for events):
the surface a person used decides where the bot answers them (a channel message, an ephemeral, App Home, a
modal, a thread reply).

:data:`REDELIVERED` says how the request being handled came: again, after the worker that took it first died.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.agent.state import RunState
from bot.errors import StoreCorrupt
from bot.store.conversations import MessageRef

SLACK_KEY = "slack"
ASKER_KEY = "asker"
"""Run metadata: who asked, for a run an outside agent asked through the MCP server ("Claude Code on build-42"):
where a run's asker is named (App Home's "asked by"), this instead of its ``requester``, who is the person asked
(or nobody in particular)."""


def asker_of(state: RunState) -> str | None:
    """Who asked run ``state`` when an outside agent did (:data:`ASKER_KEY`, plain text), else None (its
    requester did)."""
    asker = state.metadata.get(ASKER_KEY)
    return asker if isinstance(asker, str) and asker.strip() else None


class SlackContext(BaseModel):
    """Where a run lives in Slack: its thread, who started it, and the message that started (or last continued)
    it (``message_ts``: it gets the working sign). ``requester`` is ``""`` for an outside agent's question asked
    of nobody in particular (anyone in the channel may answer it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    team_id: str
    channel_id: str
    thread_ts: str
    requester: str
    message_ts: str = ""  # records of the earliest version may lack it: then the thread's first message

    def model_post_init(self, __context: Any) -> None:
        if not self.message_ts:
            object.__setattr__(self, "message_ts", self.thread_ts)

    def to_metadata(self) -> dict[str, Any]:
        """``{"slack": {...}}`` for ``Agent.stream(metadata=...)``."""
        return {SLACK_KEY: self.model_dump(mode="json")}

    @classmethod
    def of(cls, state: RunState) -> SlackContext:
        """The context stored with ``state``. Raises :class:`bot.errors.StoreCorrupt` (with the run id) when it is
        missing or unreadable: a run without one was not started from Slack."""
        data = state.metadata.get(SLACK_KEY)
        if not isinstance(data, dict):
            raise _corrupt(state.run_id, "it has no Slack context")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _corrupt(state.run_id, f"its Slack context is unreadable ({exc.error_count()} problems)") from None


def _corrupt(run_id: str, why: str) -> StoreCorrupt:
    exc = StoreCorrupt(f"run {run_id}: {why}")
    exc.run_id = run_id
    return exc


# Slack ids (users U/W..., channels C/G/D..., teams T..., messages' ts aside) are upper-case letters and digits;
# the playground's readable ids (U_ALICE, C_GENERAL) add underscores. Anything else is refused before use: an
# id is interpolated into mrkdwn (``<@U123>``), so it must not carry ``<``, ``>``, ``|``, ``!`` or spaces.
SLACK_ID = re.compile(r"[A-Z0-9][A-Z0-9_]{1,63}")


def slack_id(value: Any) -> str | None:
    """``value`` when it is shaped like a Slack id (see :data:`SLACK_ID`), else None."""
    return value if isinstance(value, str) and SLACK_ID.fullmatch(value) else None


Surface = Literal["message", "ephemeral", "home", "modal", "thread"]


@dataclass(frozen=True, kw_only=True)
class Origin:
    """Where a request came from: the person (``user``), the surface they used, and for channel surfaces the
    channel, the message they acted on and its thread. Home and modal surfaces have no channel. Ids not shaped
    like Slack's are dropped (``user`` is then ``""``: such a request is ignored)."""

    user: str
    surface: Surface
    team_id: str | None = None
    channel_id: str | None = None
    message_ts: str | None = None
    thread_ts: str | None = None
    event_id: str | None = None  # an event's identity for the replay guard (events only; see of_event)

    @classmethod
    def of_action(cls, body: dict[str, Any]) -> Origin:
        """From a ``block_actions`` payload, read from its ``container`` (Slack: container.type ``message`` with
        ``channel_id``/``message_ts``/``is_ephemeral``, or ``view`` for App Home and modals)."""
        container = _dict(body.get("container"))
        message = _dict(body.get("message"))
        user = slack_id(_dict(body.get("user")).get("id")) or ""
        team = slack_id(_dict(body.get("team")).get("id"))
        if container.get("type") == "view":
            kind = _dict(body.get("view")).get("type")
            return cls(user=user, surface="home" if kind == "home" else "modal", team_id=team)
        return cls(
            user=user,
            surface="ephemeral" if container.get("is_ephemeral") else "message",
            team_id=team,
            channel_id=slack_id(container.get("channel_id")),
            message_ts=_str(container.get("message_ts")),
            thread_ts=_str(message.get("thread_ts") or container.get("thread_ts")),
        )

    @classmethod
    def of_event(cls, body: dict[str, Any]) -> Origin:
        """From an Events API envelope (``message`` / ``app_mention``): the thread is the event's thread, or the
        thread its message starts; ``event_id`` the envelope's (Slack's retries and redeliveries carry the same one),
        else ``channel:ts`` of the event's message."""
        event = _dict(body.get("event"))
        return cls(
            user=slack_id(event.get("user")) or "",
            surface="thread",
            team_id=slack_id(body.get("team_id") or event.get("team")),
            channel_id=slack_id(event.get("channel")),
            message_ts=_str(event.get("ts")),
            thread_ts=_str(event.get("thread_ts") or event.get("ts")),
            event_id=_str(body.get("event_id")) or f"{event.get('channel')}:{event.get('ts')}",
        )

    def message_in(self, ctx: SlackContext) -> MessageRef | None:
        """The bot's message acted on, when it lives in ``ctx``'s thread (a click on one of the run's messages there,
        or on the thread's first message: an outside agent's question is posted as one); None for anything else: an
        ephemeral, a thread reply, Home, a modal, or a message elsewhere (whatever a click's ``container`` says, the
        bot rewrites no message outside the run's thread on its word)."""
        if self.surface != "message" or not self.channel_id or not self.message_ts:
            return None
        if self.channel_id != ctx.channel_id or ctx.thread_ts not in (self.thread_ts, self.message_ts):
            return None
        return MessageRef(channel_id=self.channel_id, ts=self.message_ts)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int, float)) and str(value) else None


REDELIVERED: ContextVar[bool] = ContextVar("redelivered", default=False)
"""True while a worker runs a job that a dead (or stalled) worker took before (``"redelivered"`` in the job): what
that earlier delivery already did may be this job's own doing (see
:meth:`bot.slack.questions.answering.Answering.not_open`)."""
