"""Redis implementations: :class:`RedisRunStore` (the runtime's run store port, :mod:`bot.agent.store`), the
Slack-side bookkeeping (:mod:`bot.store.conversations`), the work queue; every key built in
:mod:`bot.store.keys`."""

from bot.store.connect import connect_redis
from bot.store.keys import Keys
from bot.store.redis_store import RedisRunStore

__all__ = ["Keys", "RedisRunStore", "connect_redis"]
