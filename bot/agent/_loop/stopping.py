"""Stopping a working run at a person's request (:meth:`bot.agent.Agent.stop`).

The request is a mark in the store that every process sees; the process driving the run reads it with each lease
renewal (every ``lease_renew_every`` seconds, 10 by default; at once when the request is made in that process) and
looks at what it knows before each model turn and each tool call, so a run stops at its next step, never in the
middle of a tool, and a step costs no extra Redis round trip. A model turn under way when the request becomes known
is cancelled (:meth:`StopRequests.unless_stopped`): its text so far was streamed, its tool calls never run. The
run then ends ``completed``: every tool call of the last turn that has no result yet gets ``{"status": "stopped"}``
(so the conversation stays well formed for the next mention), a short assistant message says it was stopped, and
the stream's ``finish`` chunk has status ``stopped``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bot.agent._loop.tool_calls import add_result
from bot.agent.hooks import NO_HOOKS
from bot.agent.state import RunState, ToolCall
from bot.agent.store import RunStore
from bot.agent.stream import AgentStream
from bot.errors import StoreUnavailable

log = logging.getLogger(__name__)

STOPPED_TEXT = "Stopped before finishing, as asked."
T = TypeVar("T")


class Stopped(Exception):
    """A person asked the run to stop (``by``: who, ``""`` when unknown)."""

    def __init__(self, by: str) -> None:
        super().__init__("stop requested")
        self.by = by


class StopRequests:
    """The stop requests of the runs one agent drives, as it learns them: at once for a request made in this process
    (:meth:`asked`), else with the lease renewal's next read (:meth:`poll`, every ``lease_renew_every`` seconds),
    so a model turn or tool call costs no extra Redis round trip."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._asked: dict[str, str] = {}
        self._turns: dict[str, asyncio.Future[Any]] = {}  # runs whose model turn is under way: cancelled on a stop
        self._busy: dict[str, Callable[[], bool]] = {}  # ... unless it says it is inside a tool call: later then

    def asked(self, run_id: str, by: str) -> None:
        """A stop of ``run_id`` was requested (by ``by``); a model turn of it under way is cancelled."""
        self._asked[run_id] = by
        self.cancel_turn(run_id)

    def ends_at_once(self, run_id: str) -> bool:
        """True while a model turn of ``run_id`` is under way in this process and not inside a tool call: a stop
        known now cancels it, and the run ends without another step (its stream finishes ``stopped`` at once)."""
        busy = self._busy.get(run_id)
        return run_id in self._turns and not (busy is not None and busy())

    def cancel_turn(self, run_id: str) -> None:
        """Cancel the step of ``run_id`` under :meth:`unless_stopped` when a stop of it is known and the step is not
        inside a tool call (its ``busy()``); a step that was calls this again once its tool call ended."""
        if run_id in self._asked and self.ends_at_once(run_id):
            self._turns[run_id].cancel()  # nothing when it ended already: its result stands, seen at the next step

    async def unless_stopped(self, run_id: str, step: Awaitable[T], *, busy: Callable[[], bool] | None = None) -> T:
        """Await ``step`` (a model turn of ``run_id``, or a framework's run), cancelled when a stop of the run
        becomes known first: raises :class:`Stopped` then (once), ``step`` cancelled and awaited. ``busy()``: the
        step is inside a tool call now (a framework's run calls its tools itself): a tool is never cut short, the
        cancel waits until the step calls :meth:`cancel_turn` once the call ended. A step that ended first gives its
        result (or raises its error); the stop is then seen at the next step. A cancellation of the calling task
        while the step runs reaches the step, and the caller ends cancelled (``CancelledError``) even when the
        step swallowed it; it is never taken for a stop (the stop stays known)."""
        caller = asyncio.current_task()
        # Task.cancelling() counts the cancels requested of the caller and not uncancelled, swallowed ones too:
        # only those made while the step runs are the caller's own cancellation
        before = caller.cancelling() if caller is not None else 0

        def caller_cancelled() -> bool:
            return caller is not None and caller.cancelling() > before

        task = asyncio.ensure_future(step)
        self._turns[run_id] = task
        if busy is not None:
            self._busy[run_id] = busy
        try:
            # one task per turn: a stop cancels it (asked); a cancel of this caller reaches it too, and comes
            # back here once it ended
            result = await task
        except asyncio.CancelledError:
            if task.cancelled() and run_id in self._asked and not caller_cancelled():
                self.check(run_id)  # raises Stopped: the stop is why it was cancelled
            raise
        except Exception as exc:
            if caller_cancelled():  # the step ended in an error of its own on the way out: the cancel stands
                raise asyncio.CancelledError() from exc
            raise
        finally:
            self._turns.pop(run_id, None)
            self._busy.pop(run_id, None)
        if caller_cancelled():  # the step swallowed the caller's cancel and returned: the cancel stands
            raise asyncio.CancelledError()
        return result

    async def poll(self, run_id: str) -> None:
        """Read whether a stop of ``run_id`` was requested elsewhere; a store outage lets the run go on."""
        try:
            by = await self.store.stop_requested(run_id)
        except StoreUnavailable:
            log.warning("run %s: could not read whether it was asked to stop; going on", run_id)
            return
        if by is not None:
            self.asked(run_id, by)

    def check(self, run_id: str) -> None:
        """Raise :class:`Stopped` when a stop of ``run_id`` is known (once)."""
        if (by := self.take(run_id)) is not None:
            raise Stopped(by)

    def known(self, run_id: str) -> bool:
        """Whether a stop of ``run_id`` is known (it stays known: see :meth:`check`, :meth:`take`)."""
        return run_id in self._asked

    def take(self, run_id: str) -> str | None:
        """Who asked ``run_id`` to stop when a stop of it is known (then no longer), else None: a run about to
        ask a person (a question, an approval) stops instead, since nobody should decide for a stopped run."""
        return self._asked.pop(run_id, None)

    def forget(self, run_id: str) -> None:
        """Drop what is known of ``run_id`` (its segment ended)."""
        self._asked.pop(run_id, None)
        self._turns.pop(run_id, None)
        self._busy.pop(run_id, None)


def wrap_up(state: RunState, out: AgentStream) -> str:
    """End ``state`` as stopped (see the module docstring): each call of the last turn without a result gets
    ``{"status": "stopped"}`` (the queued ones, the one a question or approval waited on, the rest of its batch;
    a call cut short mid-run by its process's end, ``executing_since`` or ``live_owner``, also
    ``"may_have_run": true``), its chunk marked ``stopped``; returns the closing text."""
    pending = state.pending  # cut short: it was running (approved, or asking live) when its process died
    was_running = pending is not None and (pending.executing_since is not None or pending.live_owner is not None)
    cut_short = pending.tool_call_id if pending is not None and was_running else None
    for call in unanswered_calls(state):
        result: dict[str, object] = {"status": "stopped"}
        if call.id == cut_short:
            result["may_have_run"] = True
        # a constant, short result: never cut
        add_result(state, call, result, out, hooks=NO_HOOKS, max_chars=None, stopped=True)
    state.queued = []
    state.pending = None
    state.messages.append({"role": "assistant", "content": STOPPED_TEXT})
    state.status = "completed"
    return STOPPED_TEXT


def unanswered_calls(state: RunState) -> list[ToolCall]:
    """The tool calls of ``state``'s last message, when it is the model's with ``tool_calls``, followed by the
    ``tool`` messages of some of them: those that have no result yet, in the model's order."""
    for index in range(len(state.messages) - 1, -1, -1):
        message = state.messages[index]
        if message.get("role") == "tool":
            continue
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            return []
        done = {m.get("tool_call_id") for m in state.messages[index + 1 :]}
        parts = [p for p in message["tool_calls"] if isinstance(p, dict) and p.get("id") not in done]
        names = [str((p.get("function") or {}).get("name", "")) for p in parts]
        return [ToolCall(id=str(p["id"]), name=name, arguments="") for p, name in zip(parts, names, strict=True)]
    return []
