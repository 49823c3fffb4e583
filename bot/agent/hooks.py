"""What a deployment can watch of an agent's runs: :class:`RunHooks`, a class whose methods do nothing, to subclass
and install with :meth:`bot.agent.agent.Agent.with_hooks` (as openai-agents' ``RunHooks``).

The runtime calls them at the one place each thing happens, and imports nothing of who listens: the Slack bot's
hooks (``OpsHooks``, installed by :func:`bot.slack.app.build_bot`) move the metrics, write the audit lines and open
the tracing spans. Three are
context managers around work (a run's segment, a model turn, a tool call) so that a listener can time it and see
how it failed; the others are told after the fact. A hook must not raise (the run does not guard against it).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager, AbstractContextManager

from bot.agent.state import Answer, PendingCall, RunState
from bot.errors import ModelCallFailed


class RunHooks:
    """No-op hooks of an agent's runs; override what you watch."""

    def run_segment(self, run_id: str) -> AbstractAsyncContextManager[None]:
        """Around the part of run ``run_id`` this process drives (from its claim or start to its next save)."""
        return contextlib.nullcontext()

    def model_turn(self, run_id: str) -> AbstractContextManager[None]:
        """Around one model turn; a failed turn raises ``ModelCallFailed`` (its ``kind`` says why) through it."""
        return contextlib.nullcontext()

    def tool_call(self, run_id: str, *, tool: str, tool_call_id: str) -> AbstractContextManager[None]:
        """Around one call of ``tool`` (its ``execute``; a suspension raises ``ToolSuspended`` through it)."""
        return contextlib.nullcontext()

    def on_turn_ended(self, kind: str) -> None:
        """A model turn ended for another reason than ``stop`` (``kind``: a :data:`bot.agent.model.endings.EndingKind`)."""

    def on_request_refused(self, exc: ModelCallFailed) -> None:
        """A model request was not sent: the token budget says it is over (``RequestOverBudget``)."""

    def on_tool_result_cut(self) -> None:
        """A tool result's text was cut to the agent's bound (``tool_result_max_chars``)."""

    def on_asked(self, state: RunState, pending: PendingCall) -> None:
        """``state`` now waits on ``pending`` (a question or an approval), saved."""

    def on_claimed(self, state: RunState, pending: PendingCall, answer: Answer) -> None:
        """``answer`` (an answer, a decision, a cancel or a time-out) was claimed for ``pending`` of ``state``."""

    def on_retried(self, state: RunState) -> None:
        """``state`` (failed or orphaned) was taken up again by :meth:`~bot.agent.agent.Agent.retry_stream`."""

    def on_expired(self, state: RunState, pending: PendingCall | None) -> None:
        """``state``'s question passed its deadline unanswered and was recorded ``expired``."""


NO_HOOKS = RunHooks()
"""The hooks of an agent nobody watches."""
