"""Each person's inbox: the questions and approval requests waiting for them (the App Home tab lists them) and the
ones recently closed. Keys (built in :mod:`bot.store.keys`):

- ``{prefix}inbox:{team_id}:{user}`` - sorted set: ``[run_id, tool_call_id]`` (JSON) scored by when it was asked
  (ms), oldest first;
- ``{prefix}inbox_of:{<run_id>}:{tool_call_id}`` - set: ``team_id|user`` of everyone whose inbox holds it;
- ``{prefix}inbox_done:{team_id}:{user}`` - list: the last :data:`RECENT` closed ones (JSON ``{run_id,
  tool_call_id, summary, at}``), newest first;
- ``{prefix}inbox_line:{<run_id>}:{tool_call_id}`` - string: the line last pushed for a question closed while its
  call still moves on (``ongoing``: an approved call running), kept with its ``inbox_of`` owners so the next close
  replaces that line (an approval's "running…" was listed so for ever once it ran).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.batch import Batch, Later
from bot.store.keys import Keys

RENDERS_KEPT = 86400  # seconds a person's Home render count is kept after its last render
RECENT = 10


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _owner(member: Any) -> tuple[str, str]:
    team_id, user = _text(member).split("|", 1)
    return team_id, user


class Inbox:
    """Inboxes on ``client``; ``retention`` (seconds) bounds every key's life."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, retention: int = 7 * 24 * 3600) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention

    def queue_watch(self, batch: Batch, team_id: str, user: str, *, seconds: int) -> None:
        """Mark, in ``batch``, that ``user`` is looking at their Home tab: :meth:`watched` for ``seconds``."""
        batch.pipe.set(self.keys.home_watched(team_id, user), "1", ex=seconds)

    async def watched(self, team_id: str, user: str) -> bool:
        """Whether ``user`` looked at their Home tab within the time :meth:`queue_watch` gave. Raises
        ``StoreUnavailable``."""
        try:
            return bool(await self.client.exists(self.keys.home_watched(team_id, user)))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading whether a Home is open: {type(exc).__name__}") from None

    async def add(self, team_id: str, people: list[str], *, run_id: str, call: str, asked_ms: int) -> None:
        """Put question ``call`` of ``run_id`` in each of ``people``'s inbox. Raises ``StoreUnavailable``."""
        batch = Batch(self.client)
        self.queue_add(batch, team_id, people, run_id=run_id, call=call, asked_ms=asked_ms)
        await batch.run("filling an inbox")

    def queue_add(
        self, batch: Batch, team_id: str, people: list[str], *, run_id: str, call: str, asked_ms: int
    ) -> None:
        """:meth:`add`, queued in ``batch``."""
        if not people:
            return
        member = json.dumps([run_id, call])
        owners = self.keys.inbox_of(run_id, call)
        for user in people:
            box = self.keys.inbox(team_id, user)
            batch.pipe.zadd(box, {member: asked_ms})
            batch.pipe.expire(box, self.retention)
            batch.pipe.sadd(owners, f"{team_id}|{user}")
        batch.pipe.expire(owners, self.retention)

    async def close(self, run_id: str, call: str, *, summary: str, ongoing: bool = False) -> list[tuple[str, str]]:
        """Take question ``call`` of ``run_id`` out of every inbox, adding ``summary`` to each person's recently
        closed (``ongoing``: see :meth:`queue_close`); returns those ``(team_id, user)``. Raises
        ``StoreUnavailable``."""
        reading = Batch(self.client)
        owners = self.queue_owners(reading, run_id, call)
        previous = self.queue_previous(reading, run_id, call)
        await reading.run("reading who holds an inbox entry")
        writing = Batch(self.client)
        self.queue_close(
            writing,
            owners.value,
            run_id=run_id,
            call=call,
            summary=summary,
            previous=previous.value,
            ongoing=ongoing,
        )
        await writing.run("closing an inbox entry")
        return owners.value

    def queue_owners(self, batch: Batch, run_id: str, call: str) -> Later[list[tuple[str, str]]]:
        """Whose inboxes hold question ``call`` of ``run_id`` (``(team_id, user)``), read in ``batch``."""
        batch.pipe.smembers(self.keys.inbox_of(run_id, call))
        return batch.read(lambda members: [_owner(m) for m in members or () if "|" in _text(m)])

    def queue_previous(self, batch: Batch, run_id: str, call: str) -> Later[str | None]:
        """The "recently closed" line an ongoing close of question ``call`` of ``run_id`` pushed (None: none),
        read in ``batch``: the next close replaces it."""
        batch.pipe.get(self.keys.inbox_line(run_id, call))
        return batch.read(lambda value: _text(value) if value is not None else None)

    def queue_close(
        self,
        batch: Batch,
        people: list[tuple[str, str]],
        *,
        run_id: str,
        call: str,
        summary: str,
        previous: str | None = None,
        ongoing: bool = False,
    ) -> None:
        """Queue in ``batch`` what takes question ``call`` out of ``people``'s inboxes (they are its
        :meth:`queue_owners`), with ``summary`` in each one's recently closed, in place of ``previous`` (its
        :meth:`queue_previous`: the line an ongoing close pushed). ``ongoing``: the question is decided but its
        call goes on (an approved call running): its owners and this line are kept, so the close that says how it
        ended replaces the line; otherwise both go."""
        member = json.dumps([run_id, call])
        done = json.dumps({"run_id": run_id, "tool_call_id": call, "summary": summary, "at": int(time.time())})
        for team_id, user in people:
            batch.pipe.zrem(self.keys.inbox(team_id, user), member)
            recent = self.keys.inbox_done(team_id, user)
            batch.pipe.lrem(recent, 0, done)  # a batch resent after its reply was lost pushes the line once
            if previous is not None and previous != done:
                batch.pipe.lrem(recent, 0, previous)  # the ongoing line this one ends
            batch.pipe.lpush(recent, done)
            batch.pipe.ltrim(recent, 0, RECENT - 1)
            batch.pipe.expire(recent, self.retention)
        owners, line = self.keys.inbox_of(run_id, call), self.keys.inbox_line(run_id, call)
        if ongoing:
            batch.pipe.expire(owners, self.retention)
            batch.pipe.set(line, done, ex=self.retention)
        else:
            batch.pipe.delete(owners)
            batch.pipe.delete(line)

    async def snapshot(
        self,
        team_id: str,
        user: str,
        *,
        limit: int = 50,
        recent: int = 5,
        watch: int | None = None,
        render: bool = False,
    ) -> Snapshot:
        """What ``user``'s Home shows, read in one round trip: at most ``limit`` waiting questions, how many wait in
        all, and the last ``recent`` closed; ``watch``: seconds to mark the Home watched for in the same round trip
        (:meth:`queue_watch`: the mark and the read succeed or fail together); ``render``: the read begins a render
        of the Home, numbered in the same round trip (``Snapshot.render``; see :meth:`latest_render`). Raises
        ``StoreUnavailable``."""
        batch = Batch(self.client)
        if watch is not None:
            self.queue_watch(batch, team_id, user, seconds=watch)
        number = None
        if render:
            key = self.keys.home_render(team_id, user)
            batch.pipe.incr(key)
            number = batch.read(int)
            batch.pipe.expire(key, RENDERS_KEPT)
        snapshot = self.queue_snapshot(batch, team_id, user, limit=limit, recent=recent)
        await batch.run("reading an inbox")
        if number is None:
            return snapshot.value
        return dataclasses.replace(snapshot.value, render=number.value)

    async def latest_render(self, team_id: str, user: str) -> int:
        """The number of the latest render of ``user``'s Home begun (:meth:`snapshot` with ``render``; 0: none
        lately): a render whose number is lower was overtaken, and is not published (a slower render publishing
        last would leave the older view). Raises ``StoreUnavailable``."""
        try:
            return int(await self.client.get(self.keys.home_render(team_id, user)) or 0)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading an inbox: {type(exc).__name__}") from None

    def queue_total(self, batch: Batch, team_id: str, user: str) -> Later[int]:
        """How many questions wait on ``user`` in all (``ZCARD`` of their inbox), read in ``batch``."""
        batch.pipe.zcard(self.keys.inbox(team_id, user))
        return batch.read(int)

    def queue_snapshot(
        self, batch: Batch, team_id: str, user: str, *, limit: int = 50, recent: int = 5
    ) -> Later[Snapshot]:
        """:meth:`snapshot`, read in ``batch``."""
        box = self.keys.inbox(team_id, user)
        batch.pipe.zrange(box, 0, limit - 1, withscores=True)
        waiting = batch.read(_waiting)
        batch.pipe.zcard(box)
        total = batch.read(int)
        batch.pipe.lrange(self.keys.inbox_done(team_id, user), 0, recent - 1)
        # the reads are filled in order: the first two are there when the last is parsed
        return batch.read(lambda rows: Snapshot(waiting=waiting.value, total=total.value, recent=_recent(rows)))

    async def drop(self, team_id: str, user: str, *, run_id: str, call: str) -> None:
        """Take an entry that no longer waits out of ``user``'s inbox (found stale while reading it)."""
        try:
            await self.client.zrem(self.keys.inbox(team_id, user), json.dumps([run_id, call]))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while tidying an inbox: {type(exc).__name__}") from None


@dataclass(frozen=True)
class Snapshot:
    """A person's inbox as :meth:`Inbox.snapshot` read it: ``waiting`` ``(run_id, tool_call_id, asked_ms)`` oldest
    first, ``total`` waiting in all, ``recent`` closed ones (``{run_id, tool_call_id, summary, at}``) newest first."""

    waiting: list[tuple[str, str, int]]
    total: int
    recent: list[dict[str, Any]]
    render: int = 0  # this read's render number (Inbox.snapshot with render); 0: not a render


def _waiting(rows: Any) -> list[tuple[str, str, int]]:
    out = []
    for member, score in rows or ():
        try:
            entry = json.loads(_text(member))
            run_id, call = str(entry[0]), str(entry[1])
        except (ValueError, TypeError, IndexError, KeyError):
            continue
        out.append((run_id, call, int(score)))
    return out


def _recent(rows: Any) -> list[dict[str, Any]]:
    out = []
    for row in rows or ():
        try:
            item = json.loads(_text(row))
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out
