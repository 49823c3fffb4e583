"""The Slack bot's :class:`~bot.agent.hooks.RunHooks`: metrics (:mod:`bot.ops.metrics`), spans and audit lines
(:mod:`bot.ops.observe`, :mod:`bot.ops.audit`) of every agent run, installed by :func:`bot.slack.app.build_bot`."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager

from bot.agent.hooks import RunHooks
from bot.agent.state import Answer, PendingCall, RunState
from bot.errors import ModelCallFailed
from bot.ops import audit, observe


class OpsHooks(RunHooks):
    """Each hook is the :mod:`bot.ops.observe` / :mod:`bot.ops.audit` helper of the same event."""

    def run_segment(self, run_id: str) -> AbstractAsyncContextManager[None]:
        return observe.run_segment(run_id)

    def model_turn(self, run_id: str) -> AbstractContextManager[None]:
        return observe.model_turn(run_id)

    def tool_call(self, run_id: str, *, tool: str, tool_call_id: str) -> AbstractContextManager[None]:
        return observe.tool_call(run_id, tool=tool, tool_call_id=tool_call_id)

    def on_turn_ended(self, kind: str) -> None:
        observe.turn_ended(kind)

    def on_request_refused(self, exc: ModelCallFailed) -> None:
        observe.request_refused(exc)

    def on_tool_result_cut(self) -> None:
        observe.tool_result_cut()

    def on_asked(self, state: RunState, pending: PendingCall) -> None:
        audit.asked(state, pending)

    def on_claimed(self, state: RunState, pending: PendingCall, answer: Answer) -> None:
        audit.claimed(state, pending, answer)

    def on_retried(self, state: RunState) -> None:
        audit.retried(state)

    def on_expired(self, state: RunState, pending: PendingCall | None) -> None:
        audit.expired(state, pending)
