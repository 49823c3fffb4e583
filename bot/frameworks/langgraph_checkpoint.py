"""A LangGraph checkpointer on the bot's Redis (``redis.asyncio``): :class:`RedisCheckpointSaver`.

Why not the official ``langgraph-checkpoint-redis``: it needs the RediSearch and RedisJSON modules (Redis Stack);
on a plain Redis, a Redis Cluster without them, or the playground's in-process fakeredis it fails. This one uses
plain hashes only, works on all three, keeps every key under the bot's prefix (:class:`bot.store.keys.Keys`, one
slot per thread: ``{thread_id}`` is the hash tag) and gives every key a TTL, renewed on each write (the bot's
adapter: the run store's retention plus a question's deadline, :class:`~bot.frameworks.langgraph.LangGraphAgent`)
and by :meth:`RedisCheckpointSaver.touch` (the adapter's, each time a waiting run asks its next question: several
interrupts asked one after another write nothing to the graph until the last is answered).

Layout (:class:`~bot.store.keys.Keys`): ``graph_checkpoints(thread, ns)`` - hash ``{checkpoint_id: JSON [checkpoint,
metadata, parent_checkpoint_id]}``; ``graph_blobs(thread, ns)`` - hash ``{channel NUL version: value}``;
``graph_writes(thread, ns, checkpoint_id)`` - hash ``{task_id NUL idx: JSON [task_id, channel, value, task_path]}``;
``graph_keys(thread)`` - set of every key above written for the thread (renewed and deleted together).
Typed values are the saver's serializer's ``(type, bytes)``, stored as ``[type, base64]`` (so a client with
``decode_responses`` works too). Checkpoint ids are LangGraph's time-ordered uuid6 strings: the latest is the
greatest.

Only what a graph's runs and ``aget_state`` use is implemented, asynchronously: ``aget_tuple``, ``alist`` (of one
thread), ``aput``, ``aput_writes``, ``adelete_thread``; the synchronous methods raise ``NotImplementedError`` (use the
graph's async API: ``ainvoke``, ``astream``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.memory import InMemorySaver

from bot.store.keys import Keys


class RedisCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in Redis (see the module docstring). ``client``: a ``redis.asyncio`` client (or cluster
    client); ``keys``: the bot's key builder (its prefix); ``ttl``: seconds every key lives after its last write
    (None: forever; the bot's adapter sets the run store's retention plus a question's deadline). Raises what the
    client raises (``RedisError``)."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys | None = None, ttl: int | None = None) -> None:
        super().__init__()
        self.client = client
        self.keys = keys or Keys()
        self.ttl = ttl

    # --- reading -------------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``thread_id``, ``checkpoint_ns``, ``checkpoint_id``; no id: the latest)."""
        thread_id, ns = _thread(config)
        stored = await self.client.hgetall(self.keys.graph_checkpoints(thread_id, ns))
        rows = {_str(k): _str(v) for k, v in stored.items()}
        checkpoint_id = get_checkpoint_id(config) or (max(rows) if rows else None)
        if checkpoint_id is None or checkpoint_id not in rows:
            return None
        return await self._tuple(thread_id, ns, checkpoint_id, rows[checkpoint_id])

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """One thread's checkpoints, newest first (``filter``: metadata values to match; ``before``: older than that
        checkpoint; ``limit``). Raises ``ValueError`` without a ``thread_id`` (listing every thread is not kept)."""
        if config is None:
            raise ValueError("RedisCheckpointSaver.alist needs a config with a thread_id")
        thread_id, ns = _thread(config)
        stored = await self.client.hgetall(self.keys.graph_checkpoints(thread_id, ns))
        rows = {_str(k): _str(v) for k, v in stored.items()}
        wanted = get_checkpoint_id(config)
        older_than = get_checkpoint_id(before) if before else None
        count = 0
        for checkpoint_id in sorted(rows, reverse=True):
            if wanted is not None and checkpoint_id != wanted:
                continue
            if older_than is not None and checkpoint_id >= older_than:
                continue
            found = await self._tuple(thread_id, ns, checkpoint_id, rows[checkpoint_id])
            if filter and not all(found.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            yield found

    async def _tuple(self, thread_id: str, ns: str, checkpoint_id: str, row: str) -> CheckpointTuple:
        packed_checkpoint, packed_metadata, parent_id = json.loads(row)
        checkpoint: Checkpoint = self.serde.loads_typed(_unpack(packed_checkpoint))
        versions = checkpoint["channel_versions"]
        fields = [_field(channel, version) for channel, version in versions.items()]
        blobs = await self.client.hmget(self.keys.graph_blobs(thread_id, ns), fields) if fields else []
        values: dict[str, Any] = {}
        for channel, blob in zip(versions, blobs, strict=True):
            if blob is None:
                continue
            typed = _unpack(json.loads(_str(blob)))
            if typed[0] != "empty":
                values[channel] = self.serde.loads_typed(typed)
        raw_writes = await self.client.hgetall(self.keys.graph_writes(thread_id, ns, checkpoint_id))
        writes = [json.loads(_str(v)) for v in raw_writes.values()]
        writes.sort(key=lambda w: writes_sort_key(w[3], w[0], w[4]))
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed(_unpack(packed_metadata)),
            pending_writes=[(w[0], w[1], self.serde.loads_typed(_unpack(w[2]))) for w in writes],
            parent_config=_config(thread_id, ns, parent_id) if parent_id else None,
        )

    # --- writing -------------------------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (its channel values of ``new_versions`` as blobs); returns the config naming it."""
        thread_id, ns = _thread(config)
        stripped = dict(checkpoint)
        values: dict[str, Any] = stripped.pop("channel_values", {})  # type: ignore[assignment]
        blobs: dict[Any, Any] = {  # redis-py's hset mapping type is invariant in its key type
            _field(channel, version): json.dumps(
                _pack(self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b""))
            )
            for channel, version in new_versions.items()
        }
        row = json.dumps(
            [
                _pack(self.serde.dumps_typed(stripped)),
                _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
                config.get("configurable", {}).get("checkpoint_id"),
            ]
        )
        checkpoints, blob_key = self.keys.graph_checkpoints(thread_id, ns), self.keys.graph_blobs(thread_id, ns)
        async with self.client.pipeline(transaction=False) as pipe:
            if blobs:
                pipe.hset(blob_key, mapping=blobs)
            pipe.hset(checkpoints, checkpoint["id"], row)
            self._index(pipe, thread_id, checkpoints, blob_key)
            await pipe.execute()
        return _config(thread_id, ns, checkpoint["id"])

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's writes against the checkpoint ``config`` names (a special channel's write is kept once)."""
        thread_id, ns = _thread(config)
        checkpoint_id = str(config["configurable"]["checkpoint_id"])
        key = self.keys.graph_writes(thread_id, ns, checkpoint_id)
        existing = {_str(k) for k in await self.client.hkeys(key)}
        rows: dict[Any, Any] = {}  # (redis-py's hset mapping type is invariant in its key type)
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            field = f"{task_id}\0{idx}"
            if idx >= 0 and field in existing:
                continue
            rows[field] = json.dumps([task_id, channel, _pack(self.serde.dumps_typed(value)), task_path, idx])
        if not rows:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping=rows)
            self._index(pipe, thread_id, key)
            await pipe.execute()

    async def touch(self, thread_id: str) -> None:
        """Give every key of thread ``thread_id`` (any namespace) its TTL again from now (nothing without a TTL).
        Raises what the client raises."""
        if self.ttl is None:
            return
        index = self.keys.graph_keys(thread_id)
        written = [_str(k) for k in await self.client.smembers(index)]
        if not written:  # a thread written before the index was kept: its root graph's keys, as they are named
            checkpoints = self.keys.graph_checkpoints(thread_id, "")
            ids = [_str(k) for k in await self.client.hkeys(checkpoints)]
            written = [
                checkpoints,
                self.keys.graph_blobs(thread_id, ""),
                *(self.keys.graph_writes(thread_id, "", i) for i in ids),
            ]
        async with self.client.pipeline(transaction=False) as pipe:
            for key in [*written, index]:
                pipe.expire(key, self.ttl)
            await pipe.execute()

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, values and writes (every namespace its index names, and the root graph's)."""
        ns = ""
        checkpoints, index = self.keys.graph_checkpoints(thread_id, ns), self.keys.graph_keys(thread_id)
        ids = [_str(k) for k in await self.client.hkeys(checkpoints)]
        doomed = [checkpoints, self.keys.graph_blobs(thread_id, ns)]
        doomed += [self.keys.graph_writes(thread_id, ns, i) for i in ids]
        doomed += [_str(k) for k in await self.client.smembers(index)] + [index]  # other namespaces' too
        async with self.client.pipeline(transaction=False) as pipe:
            for key in doomed:
                pipe.delete(key)
            await pipe.execute()

    def get_next_version(self, current: str | None, channel: None) -> str:
        """LangGraph's in-memory saver's versions (``<counter>.<random>``, ordered as strings)."""
        return InMemorySaver.get_next_version(self, current, channel)  # type: ignore[arg-type]

    def _index(self, pipe: Any, thread_id: str, *keys: str) -> None:
        """Queue ``keys`` (written for ``thread_id``) into its index, and each with the index its TTL."""
        index = self.keys.graph_keys(thread_id)
        pipe.sadd(index, *keys)
        if self.ttl is not None:
            for key in (*keys, index):
                pipe.expire(key, self.ttl)

    # --- the synchronous API: not offered --------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raise NotImplementedError("RedisCheckpointSaver is async: use the graph's async API (ainvoke, astream)")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        raise NotImplementedError("RedisCheckpointSaver is async: use the graph's async API (ainvoke, astream)")

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        raise NotImplementedError("RedisCheckpointSaver is async: use the graph's async API (ainvoke, astream)")


def _thread(config: RunnableConfig) -> tuple[str, str]:
    configurable = config.get("configurable", {})
    return str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", ""))


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


def _field(channel: str, version: Any) -> str:
    return f"{channel}\0{version}"


def _pack(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode()]


def _unpack(packed: list[str]) -> tuple[str, bytes]:
    return packed[0], base64.b64decode(packed[1])


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
