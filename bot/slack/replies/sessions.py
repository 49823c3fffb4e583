"""A thread's agent session: what a run is doing, as Slack's agent messaging experience shows it.

The one place that maps runs onto sessions (Slack: docs.slack.dev ai/agent-sessions,
reference/methods/agents.sessions.setStatus, agents.sessions.rename):

| the run | session status |
|---|---|
| works (model turns, tool calls) | ``processing`` (Slack shows Stop) |
| waits for a person: a question, an approval, an MCP elicitation | ``suspended`` |
| answered, waits for the next message (also: stopped, or failed with Retry offered) | ``active`` |
| its question expired without an answer and the run ended there (``ASK_ON_TIMEOUT=close``) | ``closed`` |

A withdrawn question (its Cancel) does not close the session: the run goes on, told it was withdrawn, and ends
``active`` like any other. Nothing else ends a thread in Slack's sense: a thread takes its next message while its
record is kept.

:func:`status_of` gives the status a stored run calls for, so a process that takes a run over (a restart, a crash,
a worker takeover) sets what the run is, never leaving ``processing`` on a run that waits or ended.

Titles: the session is created (``processing``) titled from the request (its first line, plain, at most
:data:`TITLE` characters); the first reply renames it when it makes a better one (:func:`better_title`). Slack's
docs say nothing of what a good title is; this is the bot's rule.

Where Slack refuses sessions (an app without ``agent_view``, a missing scope, a setStatus answered with a
``missing_*`` warning such as ``missing_agent_session_stopped_event_subscription``: people would see a
non-interactive indicator and no Stop), :class:`AgentSessions` remembers it per workspace (``team_id``, in this
process, for :data:`REFUSAL_MEMORY` seconds), says so once in the log, and the thread status falls back to
``assistant.threads.setStatus`` and the working reaction (:mod:`bot.slack.replies.status`). ``SLACK_VIEW=assistant``
(a workspace not moved to ``agent_view`` yet) never tries sessions.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Literal

from bot.agent.state import RunState
from bot.slack.context import SlackContext
from bot.slack.render.mrkdwn import clip
from bot.slack.render.safe_text import safe_plain
from bot.slack.transport.web_api import TRANSIENT, SlackWeb

log = logging.getLogger(__name__)

SessionStatus = Literal["processing", "active", "suspended", "closed"]
TITLE = 80  # characters of a session title (Slack allows 200; a title is for recall in a list)
HEADING_READ = 4 * TITLE  # characters of a reply's first line read for a title (the regexes never see a long one)
REFUSAL_MEMORY = 3600.0  # seconds a workspace's refusal of sessions is remembered (an app may be moved meanwhile)
THREAD_ERRORS = frozenset({"thread_not_found", "channel_not_found", "invalid_arguments", "session_not_found"})
"""Errors that concern one call or thread, not whether the workspace takes sessions."""
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(?P<title>.+?)(?:\s+#+)?\s*$")  # Markdown: "## Title"
_BOLD = re.compile(r"^\s{0,3}(?P<stars>\*{1,2})(?P<title>[^*\s](?:[^*\n]*[^*\s])?)(?P=stars):?\s*$")  # "*Title*"
_NOT_PROSE = re.compile(r"^\s*(?:```|~~~|\||[-*+]\s|\d{1,9}[.)]\s|>|(?:[-*_]\s*){3,}$)")
"""A line that is code, a table row, a list item, a quote or a rule: never a title."""


def status_of(state: RunState) -> SessionStatus:
    """The session status the stored run ``state`` calls for (see the module's table): ``running`` ->
    ``processing``, ``suspended`` -> ``suspended``, ``completed`` / ``failed`` -> ``active`` (the thread takes its
    next message, or Retry), ``expired`` -> ``closed``."""
    match state.status:
        case "running":
            return "processing"
        case "suspended":
            return "suspended"
        case "expired":
            return "closed"
        case _:
            return "active"


def request_title(text: str) -> str:
    """A session's title from the request that starts it: its first non-blank line, plain (Slack's entities and
    markup read back: :meth:`bot.slack.names.Names.readable`, which its callers apply), on one line, at most
    :data:`TITLE` characters (never cutting an emoji or an accent off its letter); ``"New conversation"`` for a
    blank request."""
    for line in safe_plain(text).splitlines():
        if line.strip():
            return clip(" ".join(line.split()), TITLE)
    return "New conversation"


def better_title(request: str, reply: str) -> str | None:
    """A better title than :func:`request_title` of ``request`` from the first reply ``reply``, or None. The reply
    gives one when it opens with a heading (a Markdown ``#`` line or a bold line) of at most :data:`TITLE`
    characters, or, when the request made a poor title (blank, or cut at :data:`TITLE`), with a first line that
    fits and reads as prose (not code, a table row, a list item, a quote or a rule: :data:`_NOT_PROSE`). ``request``
    as :func:`request_title` takes it. The bot's rule: Slack's docs only say a title is "for recall"."""
    lines = [line[:HEADING_READ] for line in reply.splitlines() if line.strip()]  # a title is 80: no more is read
    if not lines:
        return None
    heading = _HEADING.match(lines[0]) or _BOLD.match(lines[0])
    if heading is not None:
        candidate = " ".join(safe_plain(heading.group("title")).split()).rstrip(":")
        if 0 < len(candidate) <= TITLE and candidate != request_title(request):
            return candidate
        return None
    poor = not request.strip() or len(" ".join(safe_plain(request).split())) > TITLE
    first = " ".join(safe_plain(lines[0]).split())
    return first if poor and 0 < len(first) <= TITLE and not _NOT_PROSE.match(lines[0]) else None


class AgentSessions:
    """Agent session calls for every thread of one process. ``enabled``: the app is declared with ``agent_view``
    (``SLACK_VIEW=agent``); a workspace that refuses sessions is remembered (see the module docstring)."""

    def __init__(self, web: SlackWeb, *, enabled: bool, memory: float = REFUSAL_MEMORY) -> None:
        self.web, self.enabled, self.memory = web, enabled, memory
        self._refused: dict[str, float] = {}  # team_id -> until when (monotonic seconds)

    def on(self, ctx: SlackContext) -> bool:
        """Whether to show ``ctx``'s thread as an agent session (else the fallback status)."""
        if not self.enabled or not ctx.thread_ts:
            return False
        until = self._refused.get(ctx.team_id)
        return until is None or until < time.monotonic()

    async def set(self, ctx: SlackContext, status: SessionStatus, *, title: str | None = None) -> bool:
        """Set the session of ``ctx``'s thread to ``status`` (``title``: the title of a new session). False when
        Slack did not show it as a session: a workspace-wide refusal is remembered then, and logged once; a
        ``missing_*`` warning (Slack took the status, without its Stop) also moves the session back to ``active``,
        so it is not left ``processing`` while the fallback status shows."""
        problem = await self.web.session_status(
            ctx.channel_id, ctx.thread_ts, status, title=title, initiator=ctx.requester or None
        )
        if problem is None:
            return True
        if problem in THREAD_ERRORS or problem in TRANSIENT or problem == "ratelimited":
            log.info(
                "agents.sessions.setStatus refused (%s) in %s; the status shows without a session",
                problem,
                ctx.channel_id,
            )
            return False
        self._refuse(ctx, problem)
        if problem.startswith("missing_") and status == "processing":  # taken: don't leave it spinning
            await self.web.session_status(ctx.channel_id, ctx.thread_ts, "active")
        return False

    async def rename(self, ctx: SlackContext, title: str) -> None:
        """Rename the session of ``ctx``'s thread (a refusal is logged by the call, nothing else)."""
        await self.web.rename_session(ctx.channel_id, ctx.thread_ts, clip(title, TITLE))

    def _refuse(self, ctx: SlackContext, problem: str) -> None:
        first = ctx.team_id not in self._refused
        self._refused[ctx.team_id] = time.monotonic() + self.memory
        if first:
            log.warning(
                "workspace %s: Slack refused agent sessions (%s); threads there show the assistant status or the"
                " working reaction instead (SLACK_VIEW=assistant stops trying; the manifest needs agent_view and"
                " the agent_session_stopped event)",
                ctx.team_id,
                problem,
            )
