"""Standing grants (issue 23 part 4, docs/approvals.md "Standing grants"): an approver's OK that covers later calls
too, where the call's rule allows (``grants:``): ``thread`` (this tool, the rest of the thread), ``channel`` (this
tool in this channel) or ``always`` (this tool with these very arguments, anywhere in the workspace), each until
its expiry (the rule's ``grant_for``).

A grant is a :class:`Grant` (versioned, ``schema_version`` 1; a frozen fixture per version under
``tests/fixtures/``), kept under the key of its scope and listed under the person who gave it (keys in
:mod:`bot.store.keys`, tagged by team, so each script touches one cluster slot):

- :meth:`GrantStore.give` records one (and replaces an earlier grant of the same person on the same scope);
- :meth:`GrantStore.use` finds a live grant covering a scope and counts the use, in one script: a grant revoked at
  the same moment is either used before its revoke (the call it approved is counted, and the revoke says so) or not
  found (the call is asked);
- :meth:`GrantStore.revoke` removes one, saying how many calls it approved;
- :meth:`GrantStore.of_person` lists a person's live grants (App Home).

Times are Redis's clock (``TIME``), so every process judges an expiry alike.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, ValidationError
from redis.exceptions import RedisError

from bot.errors import StoreCorrupt, StoreUnavailable, UnknownSchemaVersion
from bot.store.keys import Keys

GRANT_SCHEMA: Literal[1] = 1
Scope = Literal["thread", "channel", "always"]


class Grant(BaseModel):
    """One standing grant: ``granted_by`` (a user id) let calls of ``tool_name`` run unasked in ``scope``
    (``thread``: ``channel_id`` + ``thread_ts``; ``channel``: ``channel_id``; ``always``: calls whose arguments hash to
    ``args_hash``, :func:`bot.agent.decisions.args_hash`) of workspace ``team_id`` under rule ``rule`` until
    ``expires_at``; given on the approval of ``tool_call_id`` of ``run_id``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = GRANT_SCHEMA
    grant_id: str
    team_id: str
    granted_by: str
    scope: Scope
    tool_name: str
    rule: str
    channel_id: str = ""
    thread_ts: str = ""
    args_hash: str = ""
    args: dict[str, Any] = {}
    granted_at: datetime
    expires_at: datetime
    run_id: str = ""
    tool_call_id: str = ""

    def scope_key(self) -> str:
        """The key part naming what this grant covers (:func:`scope_key`)."""
        return scope_key(
            self.scope,
            tool_name=self.tool_name,
            channel_id=self.channel_id,
            thread_ts=self.thread_ts,
            args_hash=self.args_hash,
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> Grant:
        """A stored grant; raises :class:`~bot.errors.UnknownSchemaVersion` (a newer release's) or
        :class:`~bot.errors.StoreCorrupt`."""
        try:
            raw = json.loads(data)
        except ValueError:
            raise StoreCorrupt("a grant record is not JSON") from None
        if not isinstance(raw, dict):
            raise StoreCorrupt("a grant record is not a JSON object")
        if raw.get("schema_version") != GRANT_SCHEMA:
            raise UnknownSchemaVersion(raw.get("schema_version"))
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise StoreCorrupt(f"a grant record does not fit schema 1 ({exc.error_count()} problems)") from None


def scope_key(scope: Scope, *, tool_name: str, channel_id: str = "", thread_ts: str = "", args_hash: str = "") -> str:
    """``thread:C..:ts:tool``, ``channel:C..:tool`` or ``always:tool:hash``."""
    if scope == "thread":
        return f"thread:{channel_id}:{thread_ts}:{tool_name}"
    if scope == "channel":
        return f"channel:{channel_id}:{tool_name}"
    return f"always:{tool_name}:{args_hash}"


# KEYS[1] a scope's grants, KEYS[2] the team's uses; ARGV[1] now (ms), ARGV[2] the grant id to use ('': the first
# live one). Expired grants found on the way are dropped. Reply: the grant used (JSON), or false.
_USE = """
local now = tonumber(ARGV[1])
local found = redis.call('HGETALL', KEYS[1])
local chosen = false
for i = 1, #found, 2 do
  local grant = cjson.decode(found[i + 1])
  if tonumber(grant['expires_ms']) > now then
    if not chosen and (ARGV[2] == '' or found[i] == ARGV[2]) then chosen = i end
  else
    redis.call('HDEL', KEYS[1], found[i])
  end
end
if not chosen then return false end
redis.call('HINCRBY', KEYS[2], found[chosen], 1)
return found[chosen + 1]
"""

_REVOKE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local uses = redis.call('HGET', KEYS[2], ARGV[1]) or '0'
redis.call('HDEL', KEYS[2], ARGV[1])
return uses
"""

KEEP = 91 * 24 * 3600  # seconds a grant key lives past its last write: longer than any grant (each expires itself)


class GrantStore:
    """Standing grants on ``client`` (keys from ``keys``)."""

    def __init__(self, client: aioredis.Redis, *, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._use = client.register_script(_USE)
        self._revoke = client.register_script(_REVOKE)

    async def now(self) -> datetime:
        """Redis's clock. Raises ``StoreUnavailable``."""
        try:
            seconds, micros = await self.client.time()
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        return datetime.fromtimestamp(seconds + micros / 1e6, tz=UTC)

    async def give(self, grant: Grant) -> None:
        """Record ``grant`` (an earlier one of the same person on the same scope is replaced). Raises
        ``StoreUnavailable``."""
        key = self.keys.grant(grant.team_id, grant.scope_key())
        mine = self.keys.grants_of(grant.team_id, grant.granted_by)
        record = {**grant.model_dump(mode="json"), "expires_ms": int(grant.expires_at.timestamp() * 1000)}
        try:
            earlier = [
                g for g in await self.of_person(grant.team_id, grant.granted_by) if g.scope_key() == grant.scope_key()
            ]
            async with self.client.pipeline(transaction=False) as pipe:
                for old in earlier:
                    pipe.hdel(key, old.grant_id)
                    pipe.hdel(mine, old.grant_id)
                pipe.hset(key, grant.grant_id, json.dumps(record))
                pipe.expire(key, KEEP)
                pipe.hset(mine, grant.grant_id, grant.scope_key())
                pipe.expire(mine, KEEP)
                pipe.expire(self.keys.grant_uses(grant.team_id), KEEP)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def use(self, team_id: str, key: str, *, grant_id: str = "") -> Grant | None:
        """A live grant covering scope ``key`` (:func:`scope_key`) of ``team_id`` (``grant_id``: that one, when
        still live; else the first), its use counted, in one script (expired ones found on the way are dropped);
        None when none covers it. Raises ``StoreUnavailable``, ``StoreCorrupt``."""
        try:
            now = await self.now()
            found = await self._use(
                keys=[self.keys.grant(team_id, key), self.keys.grant_uses(team_id)],
                args=[int(now.timestamp() * 1000), grant_id],
            )
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        return Grant.from_json(_stored(found)) if found else None

    async def peek(self, team_id: str, key: str) -> Grant | None:
        """The first of :meth:`live`, or None. Raises ``StoreUnavailable``."""
        grants = await self.live(team_id, key)
        return grants[0] if grants else None

    async def live(self, team_id: str, key: str) -> list[Grant]:
        """Every live grant covering scope ``key`` of ``team_id`` (several people may have given one: each its rule
        and giver, for the caller to judge), nothing counted (whether a call will be covered when its turn comes:
        :meth:`use` decides then). Raises ``StoreUnavailable``."""
        try:
            found = await self.client.hgetall(self.keys.grant(team_id, key))
            now = await self.now()
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        grants = []
        for raw in found.values():
            try:
                grant = Grant.from_json(_stored(raw))
            except StoreCorrupt:
                continue
            if grant.expires_at > now:
                grants.append(grant)
        return sorted(grants, key=lambda g: g.granted_at)

    async def revoke(self, team_id: str, user: str, grant_id: str) -> int | None:
        """Remove grant ``grant_id`` that ``user`` gave; returns how many calls it approved, or None when there is
        no such grant of theirs (revoked already, expired, another person's). Raises ``StoreUnavailable``."""
        mine = self.keys.grants_of(team_id, user)
        try:
            key = await self.client.hget(mine, grant_id)
            if key is None:
                return None
            scope = _text(key)
            uses = await self._revoke(
                keys=[mine, self.keys.grant_uses(team_id), self.keys.grant(team_id, scope)], args=[grant_id, scope]
            )
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        return None if uses is None else int(uses)

    async def of_person(self, team_id: str, user: str) -> list[Grant]:
        """The live grants ``user`` gave in ``team_id``, soonest to expire first. Raises ``StoreUnavailable``."""
        try:
            mine = await self.client.hgetall(self.keys.grants_of(team_id, user))
            out: list[Grant] = []
            now = await self.now()
            for grant_id, key in mine.items():
                raw = await self.client.hget(self.keys.grant(team_id, _text(key)), _text(grant_id))
                if raw is None:
                    continue
                try:
                    grant = Grant.from_json(_stored(raw))
                except StoreCorrupt:
                    continue
                if grant.expires_at > now:
                    out.append(grant)
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        return sorted(out, key=lambda g: g.expires_at)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _stored(raw: Any) -> str:
    """A stored grant record without the script's own field (``expires_ms``)."""
    data = json.loads(_text(raw))
    data.pop("expires_ms", None)
    return json.dumps(data)


def new_grant_id() -> str:
    """A fresh grant id: ``g_`` + 12 url-safe characters."""
    return "g_" + secrets.token_urlsafe(9)
