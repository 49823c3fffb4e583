"""Saving where a run segment ends, and keeping the lease of a run while it is driven.

:meth:`RunSaver.save_final` survives store blips (quick retries of the same write, then the save goes on in the
background so the person still sees the reply or question); :meth:`RunSaver.keep_lease` renews the lease that
tells other processes this run is being driven (see :mod:`bot.agent.store`), and :meth:`RunSaver.check_lease` stops
a driver whose lease another process took before it does a step twice.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from bot import outage
from bot.agent.state import RunState
from bot.agent.store import RunStore
from bot.errors import BotError, RunConflict, StoreUnavailable

log = logging.getLogger(__name__)


class RunSaver:
    """Saves runs for one agent (``owner``: its lease id). Seconds: ``persist_for`` (how long a failed save keeps
    being retried in the background), ``lease_renew_every``."""

    def __init__(self, store: RunStore, *, owner: str, persist_for: float, lease_renew_every: float) -> None:
        self.store = store
        self.owner = owner
        self.persist_for = persist_for
        self.lease_renew_every = lease_renew_every
        self.background: set[asyncio.Task[None]] = set()  # saves going on after an outage
        self.unsaved: dict[str, tuple[RunState, str]] = {}  # run_id -> (state, write id) a background save owes
        self._renewed_at: dict[str, float] = {}  # run_id -> loop time of its lease's last renewal that got through
        self._lost: set[str] = set()  # runs whose lease another process holds now, or that moved on

    async def save_final(self, state: RunState) -> RunState:
        """Save the state a segment ends in. A store outage is retried quickly (a blip costs < 2 s), always as
        the same write (one write id), so a retry of a save whose reply was lost is recognised as applied. If
        the outage lasts, the segment still ends as computed (the person sees the reply or question) and the
        save goes on in the background with backoff for up to ``persist_for`` seconds, so nothing is lost once
        the store is back. A conflict (another process took the run over) or an expired run still raises."""
        write_id = secrets.token_hex(8)
        for pause in (0.2, 0.5, 1.0, None):
            try:
                return await self.store.save(state, owner=self.owner, write_id=write_id)
            except StoreUnavailable as exc:
                if pause is None:
                    log.warning("run %s: could not save (%s); saving in the background", state.run_id, exc)
                    self.unsaved[state.run_id] = (state, write_id)
                    task = asyncio.ensure_future(self._persist_later(state, write_id))
                    self.background.add(task)
                    task.add_done_callback(self.background.discard)
                    return state
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def _persist_later(self, state: RunState, write_id: str) -> None:
        """Retry the save with :mod:`bot.outage`'s backoff, so it lands soon after the store is back: until
        then the stored run reads ``running`` under this process's lease, and another process would tell the thread
        "still working"."""
        pauses, deadline = outage.pauses(), asyncio.get_running_loop().time() + self.persist_for
        try:
            while asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(next(pauses))
                if self.unsaved.get(state.run_id, (None, None))[1] != write_id:
                    return  # saved by a load meanwhile (settle), or a newer save replaced it
                try:
                    await self.store.save(state, owner=self.owner, write_id=write_id)
                    log.info("run %s: saved after the store came back", state.run_id)
                    return
                except StoreUnavailable:
                    continue
                except BotError as exc:  # taken over or expired meanwhile: the newer state wins
                    log.warning("run %s: background save abandoned: %s", state.run_id, exc)
                    return
            log.error("run %s: could not be saved for %.0f s; its last step is lost", state.run_id, self.persist_for)
        finally:
            if self.unsaved.get(state.run_id, (None, None))[1] == write_id:
                del self.unsaved[state.run_id]

    async def settle(self, run_id: str) -> None:
        """Before ``run_id`` is read: if a save of it is still owed (see :meth:`save_final`), make it now, so the
        stored run is the one this process computed (not ``running`` under its lease: a run that "nobody drives"
        would be done over). The same write as the background one (its write id): whichever lands second is
        recognised as applied. Raises ``StoreUnavailable`` (still owed)."""
        owed = self.unsaved.get(run_id)
        if owed is None:
            return
        state, write_id = owed
        try:
            await self.store.save(state, owner=self.owner, write_id=write_id)
            log.info("run %s: saved after the store came back", run_id)
        except BotError as exc:
            if isinstance(exc, StoreUnavailable):
                raise
            log.warning("run %s: background save abandoned: %s", run_id, exc)
        if self.unsaved.get(run_id) is owed:
            del self.unsaved[run_id]

    async def keep_lease(
        self,
        state: RunState,
        *,
        also: Callable[[str], Awaitable[None]] | None = None,
        until: asyncio.Event | None = None,
    ) -> None:
        """Renew ``owner``'s lease on ``state.run_id`` (at ``state.revision`` as it is at each renewal: the driver
        moves it on in place) every ``lease_renew_every`` seconds until cancelled or ``until`` is set; ``also(run_id)``
        runs with each renewal (e.g. reading a stop request). A renewal answering False marks the run lost
        (:meth:`check_lease` then raises). ``until`` makes the end certain: a cancellation that reaches the loop
        inside a store call can be lost (seen on Python 3.11 with fakeredis, about one run in eight of a test
        renewing every 50 ms: the task renewed forever after its cancel, and the test's event loop never closed)."""
        run_id = state.run_id
        self._renewed_at[run_id] = asyncio.get_running_loop().time()  # the save that made it running leased it
        try:
            while until is None or not until.is_set():
                await asyncio.sleep(self.lease_renew_every)
                if until is not None and until.is_set():
                    return
                if also is not None:
                    await also(run_id)
                await self._renew(state)
        finally:
            self._renewed_at.pop(run_id, None)
            self._lost.discard(run_id)

    async def check_lease(self, state: RunState) -> None:
        """Before a step (a model turn, a tool call) of ``state``: raise ``RunConflict`` when this process no longer
        holds its lease (another process took the run over, so the step would be done twice). Free while the
        renewals keep their time; when the last one that got through is older than two renewal periods (the event
        loop was held up, or the store unreachable, long enough for the lease to lapse) it renews first: one round
        trip, and a store outage lets the run go on (nobody else can take it over through that store either)."""
        run_id = state.run_id
        renewed_at = self._renewed_at.get(run_id)
        overdue = renewed_at is not None and (
            asyncio.get_running_loop().time() - renewed_at > 2 * self.lease_renew_every
        )
        if overdue and run_id not in self._lost:
            await self._renew(state)
        if run_id in self._lost:
            raise RunConflict(run_id)

    async def _renew(self, state: RunState) -> None:
        run_id = state.run_id
        try:
            renewed = await self.store.renew_lease(run_id, owner=self.owner, revision=state.revision)
        except StoreUnavailable as exc:
            log.warning("run %s: could not renew its lease: %s", run_id, exc)
            return
        if renewed:
            self._renewed_at[run_id] = asyncio.get_running_loop().time()
        elif run_id not in self._lost:
            self._lost.add(run_id)
            log.warning("run %s: lost its lease (another process took it over, or it moved on); stopping", run_id)
