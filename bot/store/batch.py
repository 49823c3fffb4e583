"""Commands of several store objects sent to Redis together (:class:`Batch`): one round trip where there were several.

A batch is a redis-py pipeline without ``MULTI`` (its keys may live in different cluster slots: redis-py's cluster
client splits it per node and sends those parts at once), so it is not atomic; and redis-py sends the whole of it
again when its reply is lost. So what goes in one is writes that are idempotent, as a whole when sent twice in
order (a list push goes after an ``LREM`` of the same value), and reads whose replies are independent of each
other. Store objects queue their commands with
``queue_*`` methods taking the batch; a read's reply is parsed into a :class:`Later`, whose ``value`` is there once
:meth:`Batch.run` returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from redis.exceptions import RedisError

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
        self.pipe: Any = client.pipeline(transaction=False)
        self._reads: list[tuple[int, Later[Any]]] = []

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

    async def run(self, what: str) -> None:
        """Send what is queued (nothing when it is empty) and fill the reads. Raises ``StoreUnavailable`` ("Redis
        error while ``what``") on a Redis error, before any read is filled."""
        if not len(self.pipe):
            return
        try:
            replies = await self.pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while {what}: {type(exc).__name__}") from None
        for i, later in self._reads:
            later._fill(replies[i])
