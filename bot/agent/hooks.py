"""What a deployment can watch of an agent's runs: :class:`RunHooks`, a class whose methods do nothing, to subclass
and install with :meth:`bot.agent.agent.Agent.with_hooks` (as openai-agents' ``RunHooks``).

The runtime calls them at the one place each thing happens, and imports nothing of who listens: the Slack bot's
hooks (``OpsHooks``, installed by :func:`bot.slack.app.build_bot`) move the metrics, write the audit lines and open
the tracing spans. Three are
context managers around work (a run's segment, a model turn, a tool call) so that a listener can time it and see
how it failed; the others are told after the fact. A hook that raises breaks nothing: :meth:`Agent.with_hooks`
installs them behind :class:`GuardedHooks`, which logs the hook's exception (``bot.agent.hooks``, ERROR, with its
traceback) and lets the run go on as if the hook had not been there; a hook's context manager can neither swallow
nor replace the exception of the work it surrounds (a tool's suspension must reach the runtime).
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import Any, Literal

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
        """A model turn ended for another reason than ``stop`` (``kind``: a
        :data:`bot.agent.model.endings.EndingKind`)."""

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

log = logging.getLogger(__name__)


def _failed(hooks: RunHooks, name: str) -> None:
    log.exception("the run hook %s.%s raised; the run goes on without it", type(hooks).__name__, name)


class _Around:
    """A hook's context manager made harmless: its enter or exit raising is logged, and its exit's return value is
    ignored (it never swallows the surrounded work's exception)."""

    def __init__(self, hooks: RunHooks, name: str, make: Any) -> None:
        self.hooks, self.name, self.make = hooks, name, make
        self.inner: Any = None

    def _enter(self) -> Any:
        try:
            self.inner = self.make()
            return self.inner
        except Exception:
            _failed(self.hooks, self.name)
            return None

    def __enter__(self) -> None:
        if (inner := self._enter()) is not None:
            try:
                inner.__enter__()
            except Exception:
                self.inner = None
                _failed(self.hooks, self.name)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if self.inner is not None:
            try:
                self.inner.__exit__(kind, exc, tb)
            except Exception as raised:
                if raised is not exc:
                    _failed(self.hooks, self.name)
        return False

    async def __aenter__(self) -> None:
        if (inner := self._enter()) is not None:
            try:
                await inner.__aenter__()
            except Exception:
                self.inner = None
                _failed(self.hooks, self.name)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if self.inner is not None:
            try:
                await self.inner.__aexit__(kind, exc, tb)
            except Exception as raised:
                if raised is not exc:
                    _failed(self.hooks, self.name)
        return False


class GuardedHooks(RunHooks):
    """``hooks`` as the runtime calls them: each method of ``hooks`` called, its exception logged and dropped; the
    run never sees a hook fail. :meth:`bot.agent.agent.Agent.with_hooks` installs every hooks object behind it."""

    def __init__(self, hooks: RunHooks) -> None:
        self.hooks = hooks

    def run_segment(self, run_id: str) -> AbstractAsyncContextManager[None]:
        return _Around(self.hooks, "run_segment", lambda: self.hooks.run_segment(run_id))

    def model_turn(self, run_id: str) -> AbstractContextManager[None]:
        return _Around(self.hooks, "model_turn", lambda: self.hooks.model_turn(run_id))

    def tool_call(self, run_id: str, *, tool: str, tool_call_id: str) -> AbstractContextManager[None]:
        def make() -> AbstractContextManager[None]:
            return self.hooks.tool_call(run_id, tool=tool, tool_call_id=tool_call_id)

        return _Around(self.hooks, "tool_call", make)

    def _tell(self, name: str, *args: Any) -> None:
        try:
            getattr(self.hooks, name)(*args)
        except Exception:
            _failed(self.hooks, name)

    def on_turn_ended(self, kind: str) -> None:
        self._tell("on_turn_ended", kind)

    def on_request_refused(self, exc: ModelCallFailed) -> None:
        self._tell("on_request_refused", exc)

    def on_tool_result_cut(self) -> None:
        self._tell("on_tool_result_cut")

    def on_asked(self, state: RunState, pending: PendingCall) -> None:
        self._tell("on_asked", state, pending)

    def on_claimed(self, state: RunState, pending: PendingCall, answer: Answer) -> None:
        self._tell("on_claimed", state, pending, answer)

    def on_retried(self, state: RunState) -> None:
        self._tell("on_retried", state)

    def on_expired(self, state: RunState, pending: PendingCall | None) -> None:
        self._tell("on_expired", state, pending)


def guarded(hooks: RunHooks) -> RunHooks:
    """``hooks`` behind :class:`GuardedHooks` (once; :data:`NO_HOOKS` needs no guard)."""
    return hooks if hooks is NO_HOOKS or isinstance(hooks, GuardedHooks) else GuardedHooks(hooks)
