"""How many runs may work at once: per person across all processes (Redis, :mod:`bot.store.limits`) and per
process (here). A run waiting for an answer holds no slot; one a model or tool is working on does. Past a limit
the person gets a friendly "slow down" and nothing starts (an answer is not taken, so it can be sent again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from bot.errors import StoreUnavailable
from bot.store.limits import ActiveRuns

log = logging.getLogger(__name__)

TOO_MANY_FOR_YOU = (
    "I'm still working on {n} of your requests; I'll take new ones as they finish. Please try again in a moment."
)
TOO_BUSY = "I'm working on many conversations right now; please try again in a minute."


class Slot:
    """A granted slot; :meth:`release` it when the run segment ends (it is renewed in the background until then)."""

    def __init__(self, gate: RunGate, person: str, slot: str) -> None:
        self.gate = gate
        self.person = person
        self.slot = slot
        self._renew = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.gate.active.ttl / 3)
            with contextlib.suppress(StoreUnavailable):
                await self.gate.active.renew(self.person, slot=self.slot, limit=self.gate.per_person)

    async def release(self) -> None:
        """Give the slot back (best effort: a slot that can't be released lapses on its own)."""
        self._renew.cancel()
        self.gate.process_slots.release()
        try:
            await self.gate.active.release(self.person, slot=self.slot)
        except StoreUnavailable:
            log.warning("could not release a run slot; it lapses in %.0f s", self.gate.active.ttl)


class RunGate:
    """Grants run slots: at most ``per_person`` working runs per person, ``per_process`` in this process."""

    def __init__(self, active: ActiveRuns, *, per_person: int, per_process: int) -> None:
        self.active = active
        self.per_person = per_person
        self.per_process = per_process
        self.process_slots = asyncio.Semaphore(per_process)

    async def enter(self, *, team_id: str, user: str) -> Slot | str:
        """A slot for a run of ``user`` in ``team_id``, or the text to tell them instead. Raises
        ``StoreUnavailable`` (no slot was taken)."""
        if self.process_slots.locked():
            log.warning("at the per-process limit of %d working runs", self.per_process)
            return TOO_BUSY
        await self.process_slots.acquire()
        person, slot = f"{team_id}:{user}", secrets.token_hex(8)
        try:
            granted = await self.active.acquire(person, slot=slot, limit=self.per_person)
        except BaseException:
            self.process_slots.release()
            raise
        if not granted:
            self.process_slots.release()
            return TOO_MANY_FOR_YOU.format(n=self.per_person)
        return Slot(self, person, slot)
