"""How many runs may work at once: per person across all processes (Redis, :mod:`bot.store.limits`) and per
process (here). A run waiting for an answer holds no slot; one a model or tool is working on does. Past a limit
the person gets a friendly "slow down" and nothing starts (an answer is not taken, so it can be sent again).

How many questions may wait on one person's runs (:class:`WaitingLimit`, ``MAX_WAITING_PER_PERSON``): past it, a
new request of theirs is refused before its run starts, plainly (answer or cancel a waiting one first); what they
asked stays in Slack as they wrote it. Each waiting question is reminded and escalated, so this bounds what one
person can make the bot send to others.

Giving a slot back is bookkeeping whose undo can fail in a Redis outage. Such a release is owed, not left to the
slot's lapse time (``ActiveRuns.ttl``, 2 minutes: the person would be told "still working on N of your requests"
while nothing runs): :class:`RunSlots` retries the owed releases in the background until Redis answers (backoff:
:mod:`bot.outage`), and the person's next request in this process removes them in the same script that
takes its slot, so it goes through at once. A slot whose taking failed is owed too (Redis may have applied it and
lost the reply, or the request was given up while it was in flight): the owed release marks it released in Redis,
so its taking, landing late from another connection, takes nothing (:mod:`bot.store.limits`); so does the release
of a slot whose taking was answered only after the client's socket timeout (redis-py sent it twice, and the first
send may land after the run). The per-process count is this process's own and is given back at once.

A slot can be asked for in a batch sent for something else (:meth:`RunSlots.queue_enter`, a :class:`Taking`): a
click's slot goes with the load of the run it answers, before anyone knows the answer can be taken (one round trip
where there were two). What it asked for is settled once: used (:meth:`Taking.take`), or given back unused
(:meth:`Taking.drop`: a question no longer open, a refusal; one round trip on those paths only), or owed back when
the batch failed (Redis may have applied it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from bot import outage
from bot.agent import Agent
from bot.agent.answers import Open
from bot.errors import RunLimitReached, RunNotFound, StoreCorrupt, StoreUnavailable
from bot.slack.context import SlackContext
from bot.store.batch import Batch, Later
from bot.store.inbox import Inbox
from bot.store.limits import ActiveRuns
from bot.store.redis_store import RedisRunStore, Rider

log = logging.getLogger(__name__)

TOO_MANY_FOR_YOU = (
    "I'm still working on {n} of your requests; I'll take new ones as they finish. Please try again in a moment."
)
TOO_BUSY = "I'm working on many conversations right now; please try again in a minute."
TOO_MANY_WAITING = (
    "{n} of your questions are already waiting for an answer, the most I keep open for one person; answer or "
    "cancel one of them (your App Home lists them), then ask me again. I haven't started on this request."
)
SCANNED = 200  # inbox entries read at most to count a person's waiting questions


class Slot:
    """A granted slot, held for one run segment: ``async with slot:`` around it gives it back when the block ends,
    however it ends (or :meth:`release` it once); it is renewed in the background until then. ``mark``: its taking
    may still land again (its reply was slow enough for redis-py to send it twice): given back marked released
    (:mod:`bot.store.limits`)."""

    def __init__(self, gate: RunSlots, person: str, slot: str, *, mark: bool = False) -> None:
        self.gate = gate
        self.person = person
        self.slot = slot
        self.mark = mark
        self._renew = asyncio.ensure_future(self._keep())
        self._rest: tuple[str, Rider] | None = None  # (run_id, the release riding with its segment's last save)

    def bind(self, run_id: str) -> None:
        """The slot is for run ``run_id``'s working segment: its release in Redis rides with the save that ends
        the segment (no round trip of its own, :meth:`RedisRunStore.ride`) when the gate has the run store."""
        runs = self.gate.runs
        if runs is None or self._rest is not None:
            return
        rest = Rider(
            lambda batch: self.gate.active.queue_release(batch, self.person, slots=[self.slot], mark=self.mark)
        )
        runs.ride(run_id, rest)
        self._rest = (run_id, rest)

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.gate.active.ttl / 3)
            with contextlib.suppress(StoreUnavailable):
                await self.gate.active.renew(self.person, slot=self.slot)

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    async def release(self) -> None:
        """Give the slot back: at once in this process; in Redis now, or (in an outage, or given up in flight) as soon
        as Redis answers (see the module docstring). Raises nothing but the caller's own cancellation."""
        self._renew.cancel()
        self.gate.process_slots.release()
        if self._rest is not None:
            run_id, rest = self._rest
            if self.gate.runs is not None:
                self.gate.runs.forget_ride(run_id, rest)
            if rest.sent:
                return  # given back in Redis with the save that ended the segment
        try:
            await self.gate.active.release(self.person, slots=[self.slot], mark=self.mark)
        except StoreUnavailable as exc:
            log.warning("could not release a run slot (%s); retrying until Redis answers", exc)
            self.gate.owe(self.person, self.slot)
        except BaseException:  # given up in flight (shutdown, a stall past the caller's wait): maybe never sent
            self.gate.owe(self.person, self.slot)
            raise


class RunSlots:
    """Grants run slots: at most ``per_person`` working runs per person, ``per_process`` in this process; ``runs``:
    the run store a bound slot's release rides with (:meth:`Slot.bind`)."""

    def __init__(
        self, active: ActiveRuns, *, per_person: int, per_process: int, runs: RedisRunStore | None = None
    ) -> None:
        self.active = active
        self.runs = runs  # where a bound slot's release rides with the run's save (Slot.bind); None: on its own
        self.per_person = per_person
        self.per_process = per_process
        self.process_slots = asyncio.Semaphore(per_process)
        self.owed: dict[str, set[str]] = {}  # person -> slots whose release failed, not yet given back
        # the one retry loop for owed store work; until Redis answers, as before (a slot lapses on its own anyway)
        self.retries = outage.Owed("giving back run slots", give_up=float("inf"))
        self._paying = False  # an attempt to give the owed slots back is in self.retries

    async def enter(self, *, team_id: str, user: str) -> Slot:
        """A slot for a run of ``user`` in ``team_id`` (use it as ``async with slot:``). The person's owed releases
        are given back in the same script first. Raises :class:`~bot.errors.RunLimitReached` past a limit (its
        message: :data:`TOO_BUSY` or :data:`TOO_MANY_FOR_YOU`, what to tell them), ``StoreUnavailable`` (no slot was
        taken; one Redis may have applied is owed back)."""
        if self.process_slots.locked():
            log.warning("at the per-process limit of %d working runs", self.per_process)
            raise RunLimitReached(TOO_BUSY)
        await self.process_slots.acquire()
        person, slot = f"{team_id}:{user}", secrets.token_hex(8)
        drop = set(self.owed.get(person, ()))
        asked = asyncio.get_running_loop().time()
        try:
            granted = await self.active.acquire(person, slot=slot, limit=self.per_person, drop=drop)
        except BaseException:
            self.process_slots.release()
            self.owe(person, slot)  # applied with its reply lost, maybe
            raise
        self._paid(person, drop)
        if not granted:
            self.process_slots.release()
            raise RunLimitReached(TOO_MANY_FOR_YOU.format(n=self.per_person))
        return Slot(self, person, slot, mark=self.may_land_again(asked))

    def may_land_again(self, asked: float) -> bool:
        """Whether a taking sent at ``asked`` (loop time) and answered now may have been sent twice (its reply took
        the client's socket timeout: redis-py sent it again), so its first send may still land."""
        return asyncio.get_running_loop().time() - asked >= self.active.resend_after

    def queue_enter(self, batch: Batch, *, team_id: str, user: str) -> Taking | None:
        """:meth:`enter`, asked for in ``batch`` (sent by its caller); None when the per-process limit is reached
        already (then :meth:`enter` says so later) or ``batch`` is not on the slots' Redis client. Settle what it
        returns with :meth:`Taking.take` or :meth:`Taking.drop` once ``batch`` ran (or failed)."""
        if self.process_slots.locked() or batch.client is not self.active.client:
            return None
        person, slot = f"{team_id}:{user}", secrets.token_hex(8)
        drop = set(self.owed.get(person, ()))
        granted = self.active.queue_acquire(batch, person, slot=slot, limit=self.per_person, drop=drop)
        return Taking(self, person, slot, drop=drop, granted=granted, asked=asyncio.get_running_loop().time())

    def owe(self, person: str, slot: str) -> None:
        """Remember that ``slot`` of ``person`` must still be released in Redis, and retry it in the background."""
        self.owed.setdefault(person, set()).add(slot)
        if not self._paying:
            self._paying = True
            self.retries.add(self._pay_attempt)

    def _paid(self, person: str, slots: set[str]) -> None:
        left = self.owed.get(person, set()) - slots
        if left:
            self.owed[person] = left
        else:
            self.owed.pop(person, None)

    async def _pay_attempt(self) -> bool:
        """One try at giving every owed slot back (:class:`bot.outage.Owed`): True once none is owed."""
        with contextlib.suppress(StoreUnavailable):
            await self.pay_owed()
        self._paying = bool(self.owed)
        return not self._paying

    async def pay_owed(self) -> None:
        """Release every owed slot now (one round trip a person). Raises ``StoreUnavailable`` (what was not given
        back stays owed)."""
        for person, slots in list(self.owed.items()):
            slots = set(slots)
            await self.active.release(person, slots=slots, mark=True)
            self._paid(person, slots)
            log.info("gave back %d run slot(s) whose release had failed", len(slots))

    async def aclose(self) -> None:
        """Stop retrying; owed releases are tried once more (the rest lapse on their own). Raises nothing."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.retries.flush(), 2.0)
        await self.retries.aclose()


class Taking:
    """A slot ``slot`` of ``person`` asked for in a batch (:meth:`RunSlots.queue_enter`); ``granted``: the batch's
    reply, ``drop``: the owed releases the same script gave back, ``asked``: when it was queued (loop time; a
    taking settled the client's socket timeout later may have been sent twice: given back marked released). Settled
    once: :meth:`take` or :meth:`drop`."""

    def __init__(
        self, gate: RunSlots, person: str, slot: str, *, drop: set[str], granted: Later[bool], asked: float
    ) -> None:
        self.gate = gate
        self.person = person
        self.slot = slot
        self._drop = drop
        self._granted = granted
        self._mark = False
        self._asked = asked
        self.settled = False

    def _reply(self) -> bool | None:
        """Whether Redis granted it; None when its batch did not run or failed (owed back then: it may have been
        applied with its reply lost)."""
        try:
            granted = self._granted.value
        except RuntimeError:
            self.gate.owe(self.person, self.slot)
            return None
        self.gate._paid(self.person, self._drop)
        self._mark = self.gate.may_land_again(self._asked)
        return granted

    async def take(self) -> Slot:
        """The slot, to use as :meth:`RunSlots.enter`'s. Raises :class:`~bot.errors.RunLimitReached` past a limit,
        ``StoreUnavailable`` when its batch failed (owed back), ``RuntimeError`` when settled already."""
        if self.settled:
            raise RuntimeError("this run slot was settled already")
        self.settled = True
        granted = self._reply()
        if granted is None:
            raise StoreUnavailable("Redis error while taking a run slot")
        if not granted:
            if self.gate.owed.get(self.person, set()) - self._drop:
                # releases that failed after the batch was queued hold the person's slots: asked again, dropping
                # them in the same script (never "still working" while nothing runs)
                team_id, user = self.person.split(":", 1)
                return await self.gate.enter(team_id=team_id, user=user)
            raise RunLimitReached(TOO_MANY_FOR_YOU.format(n=self.gate.per_person))
        if self.gate.process_slots.locked():
            log.warning("at the per-process limit of %d working runs", self.gate.per_process)
            await self._give_back()
            raise RunLimitReached(TOO_BUSY)
        await self.gate.process_slots.acquire()
        return Slot(self.gate, self.person, self.slot, mark=self._mark)

    async def drop(self) -> None:
        """Give the slot back unused (nothing when it was settled already, or not granted). Raises nothing."""
        if self.settled:
            return
        self.settled = True
        if self._reply():
            await self._give_back()

    async def _give_back(self) -> None:
        try:
            await self.gate.active.release(self.person, slots=[self.slot], mark=self._mark)
        except StoreUnavailable as exc:
            log.warning("could not release a run slot (%s); retrying until Redis answers", exc)
            self.gate.owe(self.person, self.slot)
        except BaseException:  # given up in flight: maybe never sent
            self.gate.owe(self.person, self.slot)
            raise


class WaitingLimit:
    """At most ``limit`` questions (and approval requests) waiting on the runs one person started, counted from
    their Home inbox (:class:`bot.store.inbox.Inbox`: what waits on them, asked of them or not) by ``agent``'s
    stored runs: only still-open calls of runs whose requester they are count. Runs working at the moment of the
    check are not counted yet, so the bound can be passed by the runs the person has working at once
    (``MAX_RUNS_PER_PERSON``)."""

    def __init__(self, inbox: Inbox, agent: Agent, *, limit: int) -> None:
        self.inbox = inbox
        self.agent = agent
        self.limit = limit

    def queue_total(self, batch: Batch, team_id: str, user: str) -> Later[int]:
        """How many entries wait in ``user``'s inbox in all, queued in ``batch`` (to pass to :meth:`refusal` as its
        ``total``): below the limit, nothing more is read."""
        return self.inbox.queue_total(batch, team_id, user)

    async def refusal(self, team_id: str, user: str, *, total: int | None = None) -> str | None:
        """None while ``user`` may start another run in ``team_id``; else what to tell them. ``total``: their
        inbox's size read already (:meth:`queue_total`); at or past the limit (or unknown) the entries are read and
        counted. Raises ``StoreUnavailable``."""
        if total is not None and total < self.limit:
            return None
        snapshot = await self.inbox.snapshot(team_id, user, limit=SCANNED, recent=1)
        if snapshot.total < self.limit:
            return None
        waiting = 0
        for run_id, call, _asked in snapshot.waiting:
            try:
                state = await self.agent.get_run(run_id)
                requester = SlackContext.of(state).requester
            except (RunNotFound, StoreCorrupt):
                continue
            if requester == user and isinstance(await self.agent.check(state, call), Open):
                waiting += 1
                if waiting >= self.limit:
                    return TOO_MANY_WAITING.format(n=waiting)
        return None
