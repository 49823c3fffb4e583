"""Commands of several store objects sent to Redis together (:class:`Batch`): one round trip where there were several.

A batch is a redis-py pipeline without ``MULTI`` (its keys may live in different cluster slots: redis-py's cluster
client splits it per node and sends those parts at once), so it is not atomic; and redis-py sends the whole of it
again when its reply is lost. So what goes in one is writes that are idempotent, as a whole when sent twice in
order (a list push goes after an ``LREM`` of the same value), and reads whose replies are independent of each
other. Store objects queue their commands with
``queue_*`` methods taking the batch; a read's reply is parsed into a :class:`Later`, whose ``value`` is there once
:meth:`Batch.run` returned. A Lua script goes in with :meth:`Batch.script` (as ``EVALSHA``, without redis-py's
pipeline ``SCRIPT EXISTS`` round trip first; beside the pipeline on a cluster); one Redis does not know yet
(``NOSCRIPT``: a restarted or flushed server) is loaded and sent again on its own after the batch, so it still runs
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from redis.asyncio.cluster import ClusterPipeline
from redis.exceptions import NoScriptError, RedisError

from bot.errors import StoreUnavailable

T = TypeVar("T")
_UNSET: Any = object()


class Later(Generic[T]):
    """The parsed reply of a command queued in a :class:`Batch`; ``value`` raises ``RuntimeError`` until the batch
    ran."""

    def __init__(self, parse: Callable[[Any], T]) -> None:
        self._parse = parse
        self._value: T = _UNSET

    @property
    def value(self) -> T:
        """The parsed reply. Raises ``RuntimeError`` before :meth:`Batch.run`."""
        if self._value is _UNSET:
            raise RuntimeError("the batch holding this read has not run")
        return self._value

    def _fill(self, reply: Any) -> None:
        self._value = self._parse(reply)


class Batch:
    """Commands for ``client`` (a ``redis.asyncio`` client, single or cluster), sent in one pipeline."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pipe: Any = client.pipeline(transaction=False)
        self._reads: list[tuple[int, Later[Any]]] = []
        self._scripts: dict[int, tuple[Any, list[Any], list[Any]]] = {}  # position -> (script, keys, args)

    def __len__(self) -> int:
        """How many commands are queued."""
        return len(self.pipe)

    def read(self, parse: Callable[[Any], T]) -> Later[T]:
        """The reply of the command queued last, parsed by ``parse`` when the batch runs. Raises ``ValueError``
        when nothing is queued."""
        if not len(self.pipe):
            raise ValueError("queue the command before reading its reply")
        later: Later[T] = Later(parse)
        self._reads.append((len(self.pipe) - 1, later))
        return later

    def script(self, script: Any, *, keys: list[Any], args: list[Any]) -> None:
        """Queue a call of ``script`` (a ``register_script`` object) with ``keys`` (at least one) and ``args``; read
        its reply with :meth:`read` as for any command. redis-py's cluster pipeline takes no scripts: there it is
        sent beside the pipeline, at the same time (its own round trip to its node)."""
        self._scripts[len(self.pipe)] = (script, keys, args)
        if isinstance(self.pipe, ClusterPipeline):
            self.pipe.exists(keys[0])  # holds its place; the script's own reply replaces this one
        else:
            self.pipe.evalsha(script.sha, len(keys), *keys, *args)

    async def run(self, what: str) -> None:
        """Send what is queued (nothing when it is empty) and fill the reads. Raises ``StoreUnavailable`` ("Redis
        error while ``what``") on a Redis error, before any read is filled."""
        if not len(self.pipe):
            return
        try:
            if isinstance(self.pipe, ClusterPipeline) and self._scripts:
                scripts = list(self._scripts.items())
                replies, *ran = await asyncio.gather(
                    self.pipe.execute(raise_on_error=False),
                    *(script(keys=keys, args=args) for _i, (script, keys, args) in scripts),
                    return_exceptions=True,
                )
                if isinstance(replies, BaseException):
                    raise replies
                replies = list(replies)
                for (i, _script), reply in zip(scripts, ran, strict=True):
                    replies[i] = reply
            else:
                replies = list(await self.pipe.execute(raise_on_error=False))
            for i, reply in enumerate(replies):
                if isinstance(reply, NoScriptError) and i in self._scripts:
                    script, keys, args = self._scripts[i]
                    replies[i] = await script(keys=keys, args=args)  # loads it, then runs it
                elif isinstance(reply, BaseException):
                    raise reply
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while {what}: {type(exc).__name__}") from None
        for i, later in self._reads:
            later._fill(replies[i])
