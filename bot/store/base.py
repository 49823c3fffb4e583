"""The run store port: what the agent runtime needs from persistence.

Every implementation keeps these promises:

- ``create`` never overwrites: a second create of the same ``run_id`` raises ``RunConflict``.
- ``load`` raises ``RunNotFound`` for an unknown or expired id and ``StoreCorrupt`` when the record is
  unreadable or belongs to another run.
- ``save`` is compare-and-set on ``state.revision``: it writes only if the stored revision is the one the
  caller loaded, and returns the state with ``revision + 1``; otherwise ``RunConflict`` (someone else wrote)
  or ``RunNotFound`` (expired meanwhile; nothing is created). This makes resume exactly-once.
- Outages raise ``StoreUnavailable``.
"""

from __future__ import annotations

from typing import Protocol

from bot.agent.state import RunState


class RunStore(Protocol):
    """Persistence of :class:`RunState` by ``run_id``; see the module docstring for the contract."""

    async def create(self, state: RunState) -> RunState:
        """Store a new run; returns it with ``revision`` 1."""
        ...

    async def load(self, run_id: str) -> RunState:
        """Load run ``run_id``."""
        ...

    async def save(self, state: RunState) -> RunState:
        """Compare-and-set on ``state.revision``; returns the saved state (``revision + 1``)."""
        ...
