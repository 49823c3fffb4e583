"""``RedisRunStore``: runs in Redis (``redis.asyncio``), compare-and-set saves, TTLs.

Layout: one hash per run at ``Keys.run(run_id)`` with fields ``rev`` (the revision, decimal) and
``state`` (the :class:`RunState` JSON, whose own ``revision`` equals ``rev``). Both fields change together in
one Lua script, so a reader never sees them disagree.

Round trips: ``load`` 1 (HGET), ``save``/``create`` 1 (EVALSHA). A resume is load + claim-save + final save
= 3 round trips.

TTLs (seconds, from the last save): suspended runs ``suspended_ttl`` (default 24 h), completed runs
``finished_ttl`` (default 1 h), running and failed runs the longer of the two.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import RedisError

from bot.agent.state import RunState, utcnow
from bot.errors import RunConflict, RunNotFound, StoreCorrupt, StoreUnavailable
from bot.store.keys import Keys

DEFAULT_SUSPENDED_TTL = 24 * 3600
DEFAULT_FINISHED_TTL = 3600

# KEYS[1] run hash; ARGV: expected rev ("0" = must not exist), new rev, state JSON, ttl ms.
# Returns 1 written, 0 revision mismatch, -1 missing (nothing created).
_CAS = """
local cur = redis.call('HGET', KEYS[1], 'rev')
if ARGV[1] == '0' then
  if cur then return 0 end
else
  if not cur then return -1 end
  if cur ~= ARGV[1] then return 0 end
end
redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'state', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""


class RedisRunStore:
    """Run store on Redis; see the module docstring for layout, round trips and TTLs.

    ``client``: a ``redis.asyncio.Redis`` (``decode_responses`` either way). ``prefix``: key prefix.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str | None = None,
        suspended_ttl: int = DEFAULT_SUSPENDED_TTL,
        finished_ttl: int = DEFAULT_FINISHED_TTL,
    ) -> None:
        self.client = client
        self.keys = Keys(prefix) if prefix is not None else Keys()
        self.suspended_ttl = suspended_ttl
        self.finished_ttl = finished_ttl
        self._cas = client.register_script(_CAS)

    def ttl_for(self, state: RunState) -> int:
        """Seconds a record in this status is kept after a save: a suspended run as long as its question
        waits, a completed one ``finished_ttl``; a running or failed one at least as long as either (a model
        turn may outlast a short question TTL; a failed run waits for Retry)."""
        if state.status == "suspended":
            return self.suspended_ttl
        if state.status == "completed":
            return self.finished_ttl
        return max(self.suspended_ttl, self.finished_ttl)

    async def create(self, state: RunState) -> RunState:
        """Store a new run (revision 1). Raises ``RunConflict`` if the id exists, ``StoreUnavailable``."""
        return await self._write(state.model_copy(update={"revision": 0}))

    async def load(self, run_id: str) -> RunState:
        """Load a run. Raises ``RunNotFound``, ``StoreCorrupt``, ``StoreUnavailable``."""
        try:
            raw: Any = await self.client.hget(self.keys.run(run_id), "state")
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while loading a run: {type(exc).__name__}") from None
        if raw is None:
            raise RunNotFound(run_id)
        try:
            state = RunState.from_json(raw)
        except ValidationError as exc:
            raise StoreCorrupt(f"run {run_id}: unreadable record ({exc.error_count()} problems)") from None
        if state.run_id != run_id:
            raise StoreCorrupt(f"record under run {run_id} belongs to run {state.run_id}")
        return state

    async def save(self, state: RunState) -> RunState:
        """Compare-and-set on ``state.revision`` (must be >= 1). Raises ``RunConflict``, ``RunNotFound``."""
        if state.revision < 1:
            raise ValueError("save() needs a loaded or created state (revision >= 1); use create()")
        return await self._write(state)

    async def _write(self, state: RunState) -> RunState:
        new = state.model_copy(update={"revision": state.revision + 1, "updated_at": utcnow()})
        try:
            result = await self._cas(
                keys=[self.keys.run(state.run_id)],
                args=[str(state.revision), str(new.revision), new.to_json(), self.ttl_for(new) * 1000],
            )
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while saving a run: {type(exc).__name__}") from None
        if int(result) == 1:
            return new
        if int(result) == -1:
            raise RunNotFound(state.run_id)
        raise RunConflict(state.run_id)
