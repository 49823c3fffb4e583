"""What a working run is doing, under its thread: :class:`ThreadStatus`.

Where Slack allows it, ``assistant.threads.setStatus`` shows "<app> is thinking..." or "<app> is running
restart_service..." under the thread (Slack: docs.slack.dev reference/methods/assistant.threads.setStatus; the
assistant pane, and channels with the chat:write scope since 2026-03). Slack clears it when the app posts in the
thread and after two minutes without a message; the bot clears it when the run ends or waits for a person (the
question says whom it waits for). Where Slack refuses it, the working reaction on the message that started the
run is the sign instead, as before.

With ``agent_view`` (``SLACK_VIEW=agent``), a workspace that takes agent sessions shows the thread's session
instead (:mod:`bot.slack.replies.sessions` maps runs onto it): ``processing`` while the run works (one call per
segment, whatever its tool calls; the task cards name the tools), then what :meth:`ThreadStatus.settle` says.
Posting in a thread does not end a session, so nothing is shown again after a post.
"""

from __future__ import annotations

from bot.slack.context import SlackContext
from bot.slack.replies.sessions import AgentSessions, SessionStatus
from bot.slack.replies.unsupported import FeatureRefusals
from bot.slack.transport.web_api import SlackWeb

THINKING = "is thinking..."


def running(tool_name: str) -> str:
    """The status while ``tool_name`` runs: ``"is running restart_service..."`` (at most 50 characters of name)."""
    name = tool_name if len(tool_name) <= 50 else tool_name[:49] + "…"
    return f"is running {name}..."


class ThreadStatus:
    """The status of one run segment in ``ctx``'s thread; ``refusals``: channels whose Slack refused the status;
    ``sessions``: agent sessions, tried first when given (``title``: a new session's title)."""

    def __init__(
        self,
        web: SlackWeb,
        ctx: SlackContext,
        *,
        refusals: FeatureRefusals,
        sessions: AgentSessions | None = None,
        title: str | None = None,
    ) -> None:
        self.web, self.ctx, self.refusals = web, ctx, refusals
        self.sessions = sessions if sessions is not None and sessions.on(ctx) else None
        self.title = title
        self.session: SessionStatus | None = None  # what this segment set the thread's session to
        self._shown = ""  # the status Slack shows now, as far as this segment knows
        self._wanted = ""  # what the run is doing now (the last shown), until cleared
        self._reacted = False  # the reaction is the sign instead

    @property
    def as_session(self) -> bool:
        """Whether the thread shows this segment as an agent session (else the assistant status / reaction)."""
        return self.sessions is not None

    async def show(self, status: str) -> None:
        """Show ``status`` (e.g. :data:`THINKING`); the same one twice in a row costs nothing. As a session: the
        session is ``processing`` (one call, whatever ``status`` says)."""
        if self.sessions is not None:
            if self.session == "processing":
                return
            if await self.sessions.set(self.ctx, "processing", title=self.title):
                self.session = "processing"
                return
            self.sessions = None  # refused: the status below from now on
        self._wanted = status
        if self._reacted or status == self._shown:
            return
        if self.refusals.allowed(self.ctx):
            if await self.web.set_status(self.ctx.channel_id, self.ctx.thread_ts, status):
                self._shown = status
                return
            self.refusals.refused(self.ctx)
        self._reacted = True
        await self.web.react(self.ctx.channel_id, self.ctx.message_ts, add=True)

    def posted(self) -> None:
        """The app is posting in the thread: Slack clears the status (called before the post, so a status whose
        call completes after it is taken as shown, and cleared at the end)."""
        self._shown = ""

    async def reshow(self) -> None:
        """The app's post in the thread went out, and Slack cleared the status with it: show again what the run is
        still doing (a tool call that starts a reply posts the reply's first message just after its "is running
        restart_service..." was set, which Slack then cleared for the whole call). Sent even when a call for it
        completed after the post began: Slack may have taken that call first. Nothing once cleared, nor for
        :data:`THINKING`: the model's text showing in the reply is the sign then (and costs no calls)."""
        if self._wanted and self._wanted != THINKING and not self._reacted and self.sessions is None:
            self._shown = ""
            await self.show(self._wanted)

    async def settle(self, status: SessionStatus | None) -> None:
        """The segment ends or waits for a person: as a session, set it to ``status`` (None: leave it, e.g. another
        process took the run over and shows it); else :meth:`clear`."""
        if self.sessions is None:
            await self.clear()
            return
        if status is not None and status != self.session and await self.sessions.set(self.ctx, status):
            self.session = status

    async def clear(self) -> None:
        """Take the status (or the reaction) away: the run ended or waits for a person."""
        self._wanted = ""
        if self._reacted:
            self._reacted = False
            await self.web.react(self.ctx.channel_id, self.ctx.message_ts, add=False)
        elif self._shown:
            self._shown = ""
            await self.web.set_status(self.ctx.channel_id, self.ctx.thread_ts, "")
