"""Run persistence: the :class:`RunStore` port and :class:`RedisRunStore`; keys in :mod:`bot.store.keys`."""

from bot.store.base import RunStore
from bot.store.connect import connect_redis
from bot.store.keys import Keys
from bot.store.redis_store import RedisRunStore

__all__ = ["Keys", "RedisRunStore", "RunStore", "connect_redis"]
