"""Slack-side bookkeeping in Redis: event dedupe, the thread -> run pointer, where questions are shown.

- :meth:`ConversationIndex.is_new_event` marks a Slack ``event_id``; only the first delivery (original or retry,
  whichever arrives first) gets ``True``. Each caller marks with a token of its own, so a mark resent after its
  reply was lost is still recognised as the caller's. The window is ``event_ttl`` seconds (default 2 h; Slack
  retries for about 5 minutes).
- A thread record (hash) holds the thread's latest ``run_id``, so follow-ups continue the conversation and
  typed replies reach the open question.
- Run messages: for each ``(run_id, key)``, the messages the bot posted for it (``key`` is a question's
  ``tool_call_id``, or e.g. ``"failure"`` for a failure notice). Only these are ever updated for it, whatever
  a payload claims.
- Told-once marks: a person told once something about a question (e.g. that they may not answer it) is not
  told again for every reply in the thread.

Records are kept ``retention`` seconds after their last write (default 7 days, like runs).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.batch import Batch, Later
from bot.store.keys import Keys

# KEYS[1] event marker; ARGV: [1] token, [2] ttl s. 1: first sight (or our own earlier mark), 0: seen before.
_FIRST_SIGHT = """
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
if cur == ARGV[1] then return 1 end
return 0
"""


# KEYS[1] thread hash; ARGV: [1] the run it must point at now ("" = none), [2] new run, [3] ttl s. 1 claimed.
_CLAIM_THREAD = """
local cur = redis.call('HGET', KEYS[1], 'run_id')
if cur == ARGV[2] then return 1 end
if (cur or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'run_id', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


@dataclass(frozen=True)
class ThreadRecord:
    """The latest run of a thread."""

    run_id: str


@dataclass(frozen=True)
class MessageRef:
    """A message the bot posted: ``channel_id`` and ``ts``; ``asked``: which asking of its key it shows (a tool call
    may be asked more than once: several questions of an MCP server, an approval asked again), see
    :func:`asked_id`; ``""`` when unknown (records written before it existed)."""

    channel_id: str
    ts: str
    asked: str = ""


def asked_id(when: datetime | None) -> str:
    """The id of one asking of a question: when it was asked, in milliseconds (``""`` for None)."""
    return str(int(when.timestamp() * 1000)) if when is not None else ""


@dataclass(frozen=True)
class RunMessages:
    """The messages recorded for one run (:meth:`ConversationIndex.queue_run_messages`), as stored."""

    fields: dict[Any, Any]

    def of(self, key: str, *, asked: str | None = None) -> list[MessageRef]:
        """Those of ``key`` (and of its asking ``asked``), as :meth:`ConversationIndex.messages` gives them."""
        return _refs(self.fields, key, asked)


NoticeKind = Literal["escalation", "reminder"]


@dataclass(frozen=True, order=True)
class Queued:
    """A question queued for a target's next message: run ``run_id``, its call ``key``, reminder ``n`` (0 for an
    escalation)."""

    run_id: str
    key: str
    n: int = 0


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class ConversationIndex:
    """Event dedupe, thread records and question messages (see the module docstring). Times in seconds."""

    def __init__(
        self, client: aioredis.Redis, *, keys: Keys, retention: int = 7 * 24 * 3600, event_ttl: int = 7200
    ) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention
        self.event_ttl = event_ttl
        self._new_event = client.register_script(_FIRST_SIGHT)
        self._claim_thread = client.register_script(_CLAIM_THREAD)

    async def is_new_event(self, event_id: str, *, token: str | None = None) -> bool:
        """True the first time ``event_id`` is seen in the window, and again for the same ``token`` (e.g. a queued
        job's id: the job redelivered after its worker died is still the first sight). Raises ``StoreUnavailable``."""
        try:
            token = token or secrets.token_hex(8)
            return bool(await self._new_event(keys=[self.keys.event(event_id)], args=[token, self.event_ttl]))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while checking an event: {type(exc).__name__}") from None

    def queue_new_event(self, batch: Batch, event_id: str, *, token: str | None = None) -> Later[bool]:
        """:meth:`is_new_event`, queued in ``batch`` (a resent batch finds its own mark: still the first sight)."""
        batch.script(
            self._new_event, keys=[self.keys.event(event_id)], args=[token or secrets.token_hex(8), self.event_ttl]
        )
        return batch.read(bool)

    async def thread(self, team_id: str, *, channel_id: str, thread_ts: str) -> ThreadRecord | None:
        """The thread's record, or None. Raises ``StoreUnavailable``."""
        batch = Batch(self.client)
        record = self.queue_thread(batch, team_id, channel_id=channel_id, thread_ts=thread_ts)
        await batch.run("reading a thread")
        return record.value

    def queue_thread(
        self, batch: Batch, team_id: str, *, channel_id: str, thread_ts: str
    ) -> Later[ThreadRecord | None]:
        """:meth:`thread`, read in ``batch``."""
        batch.pipe.hget(self.keys.thread(team_id, channel_id=channel_id, thread_ts=thread_ts), "run_id")
        return batch.read(_thread_record)

    async def claim_thread(
        self, team_id: str, *, channel_id: str, thread_ts: str, run_id: str, after: str | None
    ) -> bool:
        """Point the thread at a new ``run_id`` if it still points at ``after`` (``None``: at nothing), atomically:
        of two mentions that both saw ``after``, one starts the next run. Idempotent for the same ``run_id`` (a
        resent claim whose reply was lost). Raises ``StoreUnavailable``."""
        key = self.keys.thread(team_id, channel_id=channel_id, thread_ts=thread_ts)
        try:
            ok = await self._claim_thread(keys=[key], args=[after or "", run_id, self.retention])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while claiming a thread: {type(exc).__name__}") from None
        return bool(ok)

    async def set_thread(self, team_id: str, *, channel_id: str, thread_ts: str, run_id: str) -> None:
        """Point the thread at ``run_id``. Raises ``StoreUnavailable``."""
        key = self.keys.thread(team_id, channel_id=channel_id, thread_ts=thread_ts)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(key, "run_id", run_id)
                pipe.expire(key, self.retention)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while writing a thread: {type(exc).__name__}") from None

    async def add_message(self, run_id: str, *, key: str, ref: MessageRef) -> None:
        """Record that ``(run_id, key)`` is shown in message ``ref`` (idempotent; one hash field per message, so
        concurrent posts never lose each other). Raises ``StoreUnavailable``."""
        batch = Batch(self.client)
        self.queue_message(batch, run_id, key=key, ref=ref)
        await batch.run("recording a question message")

    def queue_message(self, batch: Batch, run_id: str, *, key: str, ref: MessageRef) -> None:
        """:meth:`add_message`, queued in ``batch``."""
        hash_key = self.keys.run_messages(run_id)
        batch.pipe.hset(hash_key, json.dumps([key, ref.channel_id, ref.ts]), ref.asked or "1")
        batch.pipe.expire(hash_key, self.retention)

    async def messages(self, run_id: str, key: str, *, asked: str | None = None) -> list[MessageRef]:
        """The messages recorded for ``(run_id, key)`` (by ``ts``); ``asked``: only those of that asking (and those
        whose asking is unknown). Raises ``StoreUnavailable``."""
        batch = Batch(self.client)
        refs = self.queue_messages(batch, run_id, key, asked=asked)
        await batch.run("reading question messages")
        return refs.value

    def queue_messages(
        self, batch: Batch, run_id: str, key: str, *, asked: str | None = None
    ) -> Later[list[MessageRef]]:
        """:meth:`messages`, read in ``batch``."""
        batch.pipe.hgetall(self.keys.run_messages(run_id))
        return batch.read(lambda fields: _refs(fields or {}, key, asked))

    def queue_run_messages(self, batch: Batch, run_id: str) -> Later[RunMessages]:
        """Every message recorded for run ``run_id``, read in ``batch`` (e.g. beside the run's load, before its
        question's ``key`` is known)."""
        batch.pipe.hgetall(self.keys.run_messages(run_id))
        return batch.read(lambda fields: RunMessages(dict(fields or {})))

    async def tell_once(self, run_id: str, *, tool_call_id: str, user: str, topic: str) -> bool:
        """True the first time ``user`` is to be told ``topic`` (e.g. ``"refused"``) about this question. Raises
        ``StoreUnavailable``."""
        try:
            key = self.keys.told(run_id, tool_call_id=tool_call_id, user=user, topic=topic)
            token = secrets.token_hex(8)  # a mark resent after its reply was lost is still this caller's
            return bool(await self._new_event(keys=[key], args=[token, self.retention]))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while marking a notice: {type(exc).__name__}") from None

    async def was_told(self, run_id: str, *, tool_call_id: str, user: str, topic: str) -> bool:
        """Whether :meth:`tell_once` marked ``topic`` already (e.g. a reminder posted). Raises ``StoreUnavailable``."""
        try:
            key = self.keys.told(run_id, tool_call_id=tool_call_id, user=user, topic=topic)
            return bool(await self.client.exists(key))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading a notice mark: {type(exc).__name__}") from None

    async def escalate(self, run_id: str, *, key: str, to: list[str]) -> None:
        """Let ``to`` (user ids, or the channel ids of channels it was posted to) answer ``(run_id, key)`` too.
        Raises ``StoreUnavailable``."""
        if not to:
            return
        name = self.keys.escalated(run_id, key)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.sadd(name, *to)
                pipe.expire(name, self.retention)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while recording an escalation: {type(exc).__name__}") from None

    async def queue_notice(
        self, kind: NoticeKind, team_id: str, target: str, *, run_id: str, key: str, n: int = 0
    ) -> None:
        """Add question ``(run_id, key)`` (its reminder ``n``) to what is to be sent to ``target`` (a channel or user
        id) as one ``kind`` message, ``escalation`` or ``reminder`` (:meth:`queued_notices`). Raises
        ``StoreUnavailable``."""
        name = self.keys.notice_queue(kind, team_id, target)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.sadd(name, json.dumps([run_id, key, n]))
                pipe.expire(name, self.retention)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while queueing a {kind}: {type(exc).__name__}") from None

    async def queued_notices(self, kind: NoticeKind, team_id: str, *, target: str) -> list[Queued]:
        """What is queued for ``target`` as one ``kind`` message (:meth:`queue_notice`), sorted. Raises
        ``StoreUnavailable``."""
        try:
            members = await self.client.smembers(self.keys.notice_queue(kind, team_id, target))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading queued {kind}s: {type(exc).__name__}") from None
        out: list[Queued] = []
        for raw in members:
            try:
                run_id, key, n = json.loads(_text(raw) or "")
                out.append(Queued(run_id=str(run_id), key=str(key), n=int(n)))
            except (ValueError, TypeError):
                continue
        return sorted(out)

    async def notices_sent(self, kind: NoticeKind, team_id: str, *, target: str, items: list[Queued]) -> None:
        """Take ``items`` (sent) out of ``target``'s ``kind`` queue; others queued meanwhile stay. Raises
        ``StoreUnavailable``."""
        if not items:
            return
        members = [json.dumps([q.run_id, q.key, q.n]) for q in items]
        try:
            await self.client.srem(self.keys.notice_queue(kind, team_id, target), *members)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while clearing queued {kind}s: {type(exc).__name__}") from None

    async def escalated(self, run_id: str, key: str) -> set[str]:
        """Who else may answer ``(run_id, key)`` (see :meth:`escalate`). Raises ``StoreUnavailable``."""
        try:
            members = await self.client.smembers(self.keys.escalated(run_id, key))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while reading an escalation: {type(exc).__name__}") from None
        return {t for t in (_text(m) for m in members) if t}


def _thread_record(run_id: Any) -> ThreadRecord | None:
    text = _text(run_id)
    return ThreadRecord(run_id=text) if text else None


def _refs(fields: dict[Any, Any], key: str, asked: str | None) -> list[MessageRef]:
    """The messages of ``key`` among a run's message fields (see :meth:`ConversationIndex.messages`)."""
    refs = []
    for field, value in fields.items():
        try:
            call, channel_id, ts = json.loads(_text(field) or "")
        except (ValueError, TypeError):
            continue
        shown = _text(value) or ""
        shown = "" if shown == "1" else shown
        if call == key and (not asked or not shown or shown == asked):
            refs.append(MessageRef(channel_id=str(channel_id), ts=str(ts), asked=shown))
    return sorted(refs, key=lambda r: r.ts)
