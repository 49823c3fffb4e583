"""Stopping a working run at a person's request (:meth:`bot.agent.Agent.stop`).

The request is a mark in the store that every process sees; the process driving the run looks at it before each
model turn and each tool call (one read each), so a run stops at its next step, never in the middle of a tool. The
run then ends ``completed``: every tool call of the last turn that has no result yet gets ``{"status": "stopped"}``
(so the conversation stays well formed for the next mention), a short assistant message says it was stopped, and
the stream's ``finish`` chunk has status ``stopped``.
"""

from __future__ import annotations

import logging

from bot.agent.state import RunState
from bot.agent.store import RunStore
from bot.agent.stream import AgentStream
from bot.agent.tool_calls import add_result
from bot.errors import StoreUnavailable

log = logging.getLogger("bot.agent.agent")

STOPPED_TEXT = "Stopped before finishing, as asked."


class Stopped(Exception):
    """A person asked the run to stop (``by``: who, ``""`` when unknown)."""

    def __init__(self, by: str) -> None:
        super().__init__("stop requested")
        self.by = by


async def check_stop(store: RunStore, run_id: str) -> None:
    """Raise :class:`Stopped` when a stop was requested for ``run_id``; a store outage lets the run go on."""
    try:
        by = await store.stop_requested(run_id)
    except StoreUnavailable:
        log.warning("run %s: could not read whether it was asked to stop; going on", run_id)
        return
    if by is not None:
        raise Stopped(by)


def wrap_up(state: RunState, out: AgentStream) -> str:
    """End ``state`` as stopped (see the module docstring); returns the closing text."""
    for call in state.queued:
        add_result(state, call, {"status": "stopped"}, out)
    state.queued = []
    state.pending = None
    state.messages.append({"role": "assistant", "content": STOPPED_TEXT})
    state.status = "completed"
    return STOPPED_TEXT
