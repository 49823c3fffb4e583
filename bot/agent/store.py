"""The run store port: what the agent runtime needs from persistence (``bot.store`` implements it on Redis).

Every implementation keeps these promises:

- ``create`` never overwrites: a second create of the same ``run_id`` raises ``RunConflict``.
- ``load`` raises ``RunNotFound`` for an unknown or expired id and ``StoreCorrupt`` (its ``run_id`` set) when
  the record is unreadable, of an unknown schema version, or belongs to another run.
- ``save`` is compare-and-set on ``state.revision``: it writes only if the stored revision is the one the
  caller loaded, and returns the state with ``revision + 1``; otherwise ``RunConflict`` (someone else wrote)
  or ``RunNotFound`` (expired meanwhile; nothing is created). This makes resume exactly-once.
- Every write is idempotent under retries: a write whose reply was lost and that is sent again (by the store or
  by its client library) is recognised as already applied and succeeds, it never answers ``RunConflict``.
- ``save(..., not_after=t)`` refuses (``QuestionExpired``) when the store's own clock is at or past ``t``: a
  deadline is judged by one clock, whichever process writes.
- Leases: a state saved with ``status == "running"`` carries a lease for ``owner`` that lasts ``lease_ttl``
  seconds unless renewed; any other status drops it. ``lease_owner`` tells who holds it (``None``: nobody is
  driving the run, e.g. its process died). A lease that lapsed while its owner still drives the run (it could not
  renew in time) is taken back by the owner's next renewal only while nobody else holds it and the run is still at
  the revision the owner drives; otherwise the renewal answers False and the owner stops before its next step.
- Stop requests (``request_stop``) are taken only while the working segment the caller read works (its lease is
  held, or it is still the ``running`` state the caller read: an orphan); they are seen by ``stop_requested`` in
  every process until they lapse (as long as the run is kept, at least an hour) or the save that ends the run's
  working segment (any status but ``running``) drops them with the lease. A run that asked or ended before the
  request is not stopped by it, nor is its next segment. A save that makes a run wait for a person
  (``suspended``, or a tool call's question asked live: ``RunState.asks_live``) while a stop of it is asked writes
  nothing and raises ``RunStopAsked`` (with who asked): the run ends stopped instead.
- Outages raise ``StoreUnavailable`` (the outcome of a write is then unknown).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from bot.agent.state import RunState


class RunStore(Protocol):
    """Persistence of :class:`RunState` by ``run_id``; see the module docstring for the contract. ``lease_ttl``:
    seconds a lease lasts unless renewed."""

    lease_ttl: float

    async def create(self, state: RunState, *, owner: str, write_id: str | None = None) -> RunState:
        """Store a new run; returns it with ``revision`` 1."""
        ...

    async def load(self, run_id: str, *, beside: Any = None) -> RunState:
        """Load run ``run_id``. ``beside``: other reads of the store's own kind to send in the same round trip
        (:class:`bot.store.redis_store.RedisRunStore`: a ``bot.store.batch.Batch``), run with the load."""
        ...

    async def save(
        self, state: RunState, *, owner: str, not_after: datetime | None = None, write_id: str | None = None
    ) -> RunState:
        """Compare-and-set on ``state.revision``; returns the saved state (``revision + 1``). ``write_id``: the
        same value for every retry of one logical write (fresh when omitted)."""
        ...

    async def renew_lease(self, run_id: str, *, owner: str, revision: int) -> bool:
        """Extend ``owner``'s lease on a running run (taken back when it lapsed, nobody took it and the run is still
        at ``revision``); False when another process holds it or the run moved on."""
        ...

    async def lease_owner(self, run_id: str) -> str | None:
        """The owner id holding the run's lease, or None."""
        ...

    async def request_stop(self, state: RunState, *, by: str) -> bool:
        """Ask whoever drives run ``state.run_id`` (as just loaded) to stop it (``by``: who asked); False when it
        does not work any more (see the module docstring)."""
        ...

    async def stop_requested(self, run_id: str) -> str | None:
        """Who asked the run to stop, or None."""
        ...

    async def now(self) -> datetime:
        """The store's clock (deadlines are judged by it)."""
        ...
