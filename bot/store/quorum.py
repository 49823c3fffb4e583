"""The approvals an approval request gathers toward its quorum (``required`` above 1, docs/approvals.md "Quorum"),
recorded atomically in Redis so that any number of bot processes count them the same way.

One hash per asking of a request and the arguments it asks about (:meth:`bot.store.keys.Keys.quorum`): each field a
user id whose approval counts (value: its order), ``#seq`` the order counter, ``#done`` the user whose approval
completed the quorum. Every change is one Lua script, so of two people giving the last approval at the same moment,
in two processes, exactly one is told :data:`REACHED` (that one claims the decision on the run; a later approval
told :data:`DONE` while the run still waits claims it instead, the claim being exactly-once); a click delivered
twice never counts twice (:data:`AGAIN`); once complete, nothing is added or taken back (:data:`DONE`).

An edit of the arguments starts a new hash (the key names the arguments' digest and the edit's number): the
approvals gathered before no longer count, so everyone approves the same arguments, once edited.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.store.keys import Keys

Status = Literal["counted", "again", "reached", "done", "withdrawn", "absent"]
COUNTED: Status = "counted"
AGAIN: Status = "again"
REACHED: Status = "reached"
DONE: Status = "done"
WITHDRAWN: Status = "withdrawn"
ABSENT: Status = "absent"

_APPROVERS = """
local function approvers()
  local all = redis.call('HGETALL', KEYS[1])
  local items = {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 1) ~= '#' then table.insert(items, {all[i], tonumber(all[i + 1])}) end
  end
  table.sort(items, function(a, b) return a[2] < b[2] end)
  local out = {}
  for _, item in ipairs(items) do table.insert(out, item[1]) end
  return out
end
local function reply(status, done)
  local out = approvers()
  table.insert(out, 1, redis.call('HGET', KEYS[1], '#at') or '')
  table.insert(out, 1, done or '')
  table.insert(out, 1, status)
  return out
end
"""

# KEYS[1] quorum hash; ARGV: [1] user, [2] required, [3] ttl s. Reply: {status, completed by, completed at (ms by
# the server's clock; '' while gathering, and in tallies completed before it was kept), approvers...}.
_APPROVE = (
    _APPROVERS
    + """
local done = redis.call('HGET', KEYS[1], '#done')
if done then return reply('done', done) end
local status = 'again'
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  status = 'counted'
  redis.call('HSET', KEYS[1], ARGV[1], redis.call('HINCRBY', KEYS[1], '#seq', 1))
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
if #approvers() >= tonumber(ARGV[2]) then
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[1], '#done', ARGV[1], '#at', now[1] .. string.format('%03d', math.floor(now[2] / 1000)))
  return reply('reached', ARGV[1])
end
return reply(status, '')
"""
)

# KEYS[1] quorum hash; ARGV: [1] user. Reply as _APPROVE's.
_WITHDRAW = (
    _APPROVERS
    + """
local done = redis.call('HGET', KEYS[1], '#done')
if done then return reply('done', done) end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return reply('absent', '') end
return reply('withdrawn', '')
"""
)

# KEYS[1] quorum hash. Reply as _APPROVE's ('counted': still gathering).
_READ = (
    _APPROVERS
    + """
local done = redis.call('HGET', KEYS[1], '#done')
if done then return reply('done', done) end
return reply('counted', '')
"""
)


def asking_of(asked: str, args: dict[str, Any], *, edits: int = 0) -> str:
    """The id of one asking of a request about ``args`` after ``edits`` edits: ``asked``
    (:func:`bot.store.conversations.asked_id`), 16 hex characters of the SHA-256 of the arguments' canonical JSON,
    and the edit's number: every edit gives another id, also one back to arguments approved before (an edit resets
    the approvals gathered; edited back, they must not come back to life)."""
    digest = hashlib.sha256(json.dumps(args, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
    return f"{asked or '0'}:{digest}" + (f":e{edits}" if edits else "")


@dataclass(frozen=True)
class Tally:
    """Where a request's quorum stands after one change: ``status`` (what the change did: :data:`COUNTED`,
    :data:`AGAIN` (already counted), :data:`REACHED` (this approval completed it), :data:`DONE` (complete before),
    :data:`WITHDRAWN`, :data:`ABSENT` (nothing to take back)); ``approvers``: user ids whose approval counts, in
    the order given; ``completed_by``: whose approval completed it (``""`` while gathering); ``completed_at``: when,
    by Redis's clock (None while gathering, and for a tally completed before this was kept)."""

    status: Status
    approvers: tuple[str, ...]
    completed_by: str = ""
    completed_at: datetime | None = None

    @property
    def complete(self) -> bool:
        """Whether the quorum is reached (by this change or before)."""
        return self.status in (REACHED, DONE)


class Quorums:
    """Partial approvals in Redis (see the module docstring); ``retention``: seconds a tally is kept after its
    last change. Every method raises ``StoreUnavailable`` when Redis fails (the change may or may not be made: the
    same call again is safe)."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys, retention: int = 7 * 24 * 3600) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention
        self._approve = client.register_script(_APPROVE)
        self._withdraw = client.register_script(_WITHDRAW)
        self._read = client.register_script(_READ)

    async def approve(self, run_id: str, tool_call_id: str, asking: str, *, user: str, required: int) -> Tally:
        """Count ``user``'s approval (once, however often it arrives) toward ``required`` (>= 1)."""
        key = self.keys.quorum(run_id, tool_call_id, asking)
        return await self._run(self._approve, key, [user, required, self.retention], "recording an approval")

    async def withdraw(self, run_id: str, tool_call_id: str, asking: str, *, user: str) -> Tally:
        """Take ``user``'s approval back, unless the quorum is complete (:data:`DONE`) or they gave none."""
        key = self.keys.quorum(run_id, tool_call_id, asking)
        return await self._run(self._withdraw, key, [user], "taking back an approval")

    async def tally(self, run_id: str, tool_call_id: str, asking: str) -> Tally:
        """Where the quorum stands (status :data:`COUNTED` while gathering, :data:`DONE` once complete)."""
        key = self.keys.quorum(run_id, tool_call_id, asking)
        return await self._run(self._read, key, [], "reading approvals")

    @staticmethod
    async def _run(script: Any, key: str, args: list[Any], doing: str) -> Tally:
        try:
            raw = await script(keys=[key], args=args)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis error while {doing}: {type(exc).__name__}") from None
        items = [v.decode() if isinstance(v, bytes) else str(v) for v in raw]
        at = datetime.fromtimestamp(int(items[2]) / 1000, UTC) if items[2].isdigit() else None
        return Tally(status=items[0], approvers=tuple(items[3:]), completed_by=items[1], completed_at=at)  # type: ignore[arg-type]
