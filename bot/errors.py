"""Every error this project raises, typed by fault under one root, :class:`BotError`.

Faults:
- the caller's input (bad resume data, wrong tool call): :class:`AnswerError` (also a ``ValueError``);
- the run's lifecycle (unknown, already answered, not retryable): :class:`RunError`;
- the outside world (model, Redis, Slack): :class:`ModelCallFailed` (and :class:`ContextTooLong`,
  :class:`RequestOverBudget`, :class:`NoReply`), :class:`StoreUnavailable`;
- configuration: :class:`ConfigError`.

Messages never contain tokens, keys or other secrets.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime


class BotError(Exception):
    """Root of every error raised on purpose by this project."""


class ConfigError(BotError):
    """A setting is missing or malformed (raised at start-up, before any I/O)."""


# --- the caller's input ------------------------------------------------------------------------


class AnswerError(BotError, ValueError):
    """Resume data that does not fit the pending question (wrong shape, blank, label not offered).

    Raised before anything changes: the run stays suspended and may be resumed again.
    """


class ToolCallNotPending(AnswerError):
    """A resume named a ``tool_call_id`` that is not the one the run is waiting on."""

    def __init__(self, *, run_id: str, tool_call_id: str, pending_tool_call_id: str | None) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.pending_tool_call_id = pending_tool_call_id
        super().__init__(
            f"run {run_id} is not waiting on tool call {tool_call_id!r}"
            + (f" (it waits on {pending_tool_call_id!r})" if pending_tool_call_id else "")
        )


class NotAwaitingThisKind(AnswerError):
    """An answer sent to a call waiting for an approval, or a decision sent to a question."""

    def __init__(self, *, run_id: str, tool_call_id: str, waits_for: str) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.waits_for = waits_for
        what = "an approval (approve_tool_call / decline_tool_call)" if waits_for == "approval" else "an answer"
        super().__init__(f"tool call {tool_call_id!r} of run {run_id} waits for {what}")


# --- the run's lifecycle -----------------------------------------------------------------------


class RunError(BotError):
    """A run cannot do what was asked in its current state."""


class RunNotFound(RunError, LookupError):
    """No run is stored under this ``run_id`` (never created, or its TTL expired)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r}: unknown or expired")


class RunAlreadyResumed(RunError):
    """The question was answered already; exactly one resume per ``(run_id, tool_call_id)`` wins.

    ``answered_by`` / ``answered_at`` name the winner when known.
    """

    def __init__(
        self,
        *,
        run_id: str,
        tool_call_id: str | None,
        answered_by: str | None,
        answered_at: datetime | None,
    ) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.answered_by = answered_by
        self.answered_at = answered_at
        who = answered_by or "someone"
        when = f" at {answered_at.isoformat()}" if answered_at else ""
        super().__init__(f"run {run_id} was already resumed by {who}{when}")


class RunNotResumable(RunError):
    """The run is in a state that this call cannot continue (e.g. retrying a completed run)."""

    def __init__(self, run_id: str, status: str, why: str = "") -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"run {run_id} is {status}" + (f": {why}" if why else ""))


class QuestionExpired(RunError):
    """The pending question's deadline passed (judged by the store's clock) before this answer was claimed.

    The run is marked ``expired``; ``expires_at`` is the deadline.
    """

    def __init__(self, *, run_id: str, tool_call_id: str | None, expires_at: datetime | None) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.expires_at = expires_at
        when = f" at {expires_at.isoformat()}" if expires_at else ""
        super().__init__(f"the question of run {run_id} expired{when}")


class RunConflict(RunError):
    """A compare-and-set save lost: another process changed the run since it was loaded."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} was changed by another process")


class RunStopAsked(RunError):
    """A save that would make the run wait for a person (``suspended``) was refused: a stop of it was asked
    (``by``: who, ``""`` when unknown) and the process driving it had not learnt it yet. Nothing was written; the
    run is to end stopped instead, so nobody is asked to decide for a stopped run."""

    def __init__(self, run_id: str, *, by: str) -> None:
        self.run_id = run_id
        self.by = by
        super().__init__(f"run {run_id} was asked to stop")


# --- the outside world -------------------------------------------------------------------------


class ModelCallFailed(BotError):
    """The model call failed after the client's own retries (5xx, timeout, connection, bad reply).

    ``kind`` names the failure for metrics (a small fixed set): ``server`` (the model server failed or answered
    badly), ``timeout`` (the turn took longer than allowed), ``too_long`` (the output went past its bound),
    ``incomplete`` (the stream ended before the turn finished), ``connection`` (the server could not be
    reached), ``adapter`` (the model adapter raised), ``context_length`` (:class:`ContextTooLong`), ``over_budget``
    (:class:`RequestOverBudget`: not sent), ``no_reply`` (:class:`NoReply`).
    """

    kind: str = "server"

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class ContextTooLong(ModelCallFailed):
    """The model refused the request as longer than its context window (OpenAI's ``context_length_exceeded``).

    ``limit``: the window in tokens and ``prompt_tokens``: what the request had, when the server said (else None).
    Sending the same request again fails the same way; a shorter one (fewer messages) may not.
    """

    kind = "context_length"

    def __init__(self, *, limit: int | None = None, prompt_tokens: int | None = None) -> None:
        self.limit = limit
        self.prompt_tokens = prompt_tokens
        stated = f" of {limit} tokens" if limit else ""
        had = f" (the request had {prompt_tokens})" if prompt_tokens else ""
        super().__init__(f"the request is longer than the model's context window{stated}{had}")


class RequestOverBudget(ContextTooLong):
    """A model request the token budget refused to send (:mod:`bot.agent._loop.budget`): even with every older turn left
    out, what must be sent (system prompt, tool specs, the newest turn and the latest user message) estimates past
    the budget. ``estimated`` and ``budget`` are calibrated tokens. Nothing was sent; the same request would be
    refused again, a shorter one (a new message, once the long turn is older) or a larger budget would not."""

    kind = "over_budget"

    def __init__(self, *, estimated: int, budget: int) -> None:
        self.limit = None
        self.prompt_tokens = None
        self.estimated = estimated
        self.budget = budget
        ModelCallFailed.__init__(
            self,
            f"the request would be about {estimated} tokens, over the budget of {budget} tokens a request may carry,"
            " even with every older message left out",
        )


class NoReply(ModelCallFailed):
    """The model ended its turn with neither text nor tool calls, for another reason than ``stop``: its output
    length limit (``finish_reason: "length"``), a content filter (``"content_filter"``), a reason this bot does not
    know, or none given. ``finish_reason`` is the server's (None when missing); the message says it for a person
    (:func:`bot.agent.model.endings.ending_of`). Asking again may get a reply."""

    kind = "no_reply"

    def __init__(self, message: str, *, finish_reason: str | None) -> None:
        super().__init__(message)
        self.finish_reason = finish_reason


class SlackRefused(BotError):
    """Slack refused a Web API call the bot's scheduled work needs (after its transient-error retries); the work is
    tried again later (e.g. an escalation message, :mod:`bot.slack.questions.follow_ups`)."""


class RunLimitReached(BotError):
    """No run slot: the person, or this process, has as many runs working as its limit allows
    (:meth:`bot.slack.run_slots.RunSlots.enter`; ``MAX_RUNS_PER_PERSON``, ``MAX_RUNS_PER_PROCESS``). Its message is the
    friendly "slow down" the person is told (``notice``); nothing was taken, so what they sent can be sent again."""

    @property
    def notice(self) -> str:
        """What to tell the person."""
        return str(self)


class StoreUnavailable(BotError):
    """The run store (Redis) could not be reached or answered with an error."""


class StoreCorrupt(BotError):
    """A stored record could not be read back (malformed JSON, unknown version, or another run's record).

    ``run_id`` names the record when known (the store sets it).
    """

    run_id: str | None = None


class UnknownSchemaVersion(StoreCorrupt):
    """A stored run has a ``schema_version`` this release cannot read (e.g. written by a newer release)."""

    def __init__(self, version: object) -> None:
        self.version = version
        super().__init__(f"unknown schema_version {version!r} (written by another release?)")


# --- describing errors for people --------------------------------------------------------------


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 160 characters), secrets redacted."""
    from bot.logs import redact

    text = str(exc).strip().splitlines()
    return redact(f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__)


def describe_os_error(exc: BaseException) -> str:
    """``Connection refused`` / ``Name or service not known`` from the OS error under ``exc``, else its first line."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno is not None:
            if isinstance(seen, socket.gaierror) and seen.strerror:
                return seen.strerror
            return os.strerror(seen.errno) if seen.errno > 0 else (seen.strerror or describe_error(exc))
        seen = seen.__cause__ or seen.__context__
    return describe_error(exc)
