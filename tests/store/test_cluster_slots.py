"""Redis Cluster's rule, checked without a cluster: every Lua script and every ``MULTI`` the bot sends touches keys of
one hash slot, and no script is sent inside a ``MULTI`` (redis-py's cluster pipelines refuse ``EVALSHA``; a
:class:`bot.store.batch.Batch` sends its scripts beside the pipeline on a cluster).

:class:`SlotCheckingRedis` (fakeredis) raises :class:`CrossSlot` for a call breaking the rule and records where each
script was registered and each transaction opened (module, function). The exercise runs every store operation; the
last test then finds every ``register_script(`` and ``pipeline(transaction=True)`` in ``bot/`` (by reading the
source) and fails for one the exercise never ran, so a new script or transaction is checked as soon as it is added.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import fakeredis
import pytest
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from bot.agent.state import PendingCall, RunState, utcnow
from bot.mcp_server.callers import Caller
from bot.mcp_server.limits import CallerLimits
from bot.store import Keys, RedisRunStore
from bot.store.conversations import ConversationIndex, MessageRef
from bot.store.grants import Grant, GrantStore
from bot.store.inbox import Inbox
from bot.store.limits import ActiveRuns
from bot.store.pane_contexts import PaneContexts
from bot.store.quorum import Quorums
from bot.store.schedule import Due, DueItem, Schedule
from bot.store.work_queue import GROUP, WorkQueue

ROOT = Path(__file__).resolve().parents[2]
MULTI_KEY = {"DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "WATCH"}  # every argument is a key


class CrossSlot(AssertionError):
    """A script or transaction whose keys are in more than one slot, or a script inside a pipeline."""


def _site(depth: int) -> tuple[str, str]:
    code = sys._getframe(depth).f_code
    path = Path(code.co_filename).resolve()
    return (str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), code.co_qualname)


def _keys_of(args: tuple[Any, ...]) -> list[Any]:
    name = str(args[0]).upper()
    if name in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL"):
        return list(args[3 : 3 + int(args[2])])
    if name in MULTI_KEY:
        return list(args[1:])
    return list(args[1:2])  # every other command the bot sends in a MULTI names its one key first


def check_one_slot(what: str, keys: list[Any]) -> None:
    """Raise :class:`CrossSlot` unless ``keys`` all map to one cluster slot."""
    slots = {key_slot(k if isinstance(k, bytes) else str(k).encode()) for k in keys}
    if len(slots) > 1:
        raise CrossSlot(f"{what} touches keys of {len(slots)} slots: {[str(k) for k in keys]}")


class SlotCheckingPipeline(Pipeline):
    checker: SlotCheckingRedis

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        for args, _options in self.command_stack:
            if str(args[0]).upper().startswith(("EVAL", "FCALL")):
                if self.is_transaction:
                    raise CrossSlot(f"a script in a MULTI ({args[0]}): redis-py's cluster pipelines refuse it")
                # a Batch's script: sent beside the pipeline on a cluster (bot.store.batch), so one slot on its own
                self.checker.saw_script(args)
        if self.is_transaction:
            check_one_slot("a MULTI", [k for args, _ in self.command_stack for k in _keys_of(args)])
        return await super().execute(raise_on_error)


class SlotCheckingRedis(fakeredis.FakeAsyncRedis):
    """fakeredis that enforces the cluster rule and records the sites it saw (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.script_sites: dict[str, tuple[str, str]] = {}  # sha -> where it was registered
        self.scripts_run: dict[tuple[str, str], set[str]] = {}  # site -> the shas of its scripts that ran
        self.transactions_run: set[tuple[str, str]] = set()

    def register_script(self, script: Any) -> AsyncScript:  # type: ignore[override]
        registered = super().register_script(script)
        self.script_sites[registered.sha] = _site(2)
        return registered

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        if transaction:
            self.transactions_run.add(_site(2))
        pipe = SlotCheckingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.checker = self
        return pipe

    def saw_script(self, args: tuple[Any, ...]) -> None:
        """Check a script call's keys (one slot) and note which registered script ran."""
        check_one_slot(f"a script of {self.script_sites.get(str(args[1]), '?')}", _keys_of(args))
        if str(args[0]).upper() == "EVALSHA" and str(args[1]) in self.script_sites:
            self.scripts_run.setdefault(self.script_sites[str(args[1])], set()).add(str(args[1]))

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if str(args[0]).upper() in ("EVALSHA", "EVAL"):
            self.saw_script(args)
        return await super().execute_command(*args, **options)


async def exercise(client: SlotCheckingRedis, keys: Keys) -> None:
    """Every store operation that sends a script or a transaction (and the others, which must pass too)."""
    store = RedisRunStore(client, prefix=keys.prefix)
    now = utcnow()
    pending = PendingCall(
        tool_call_id="c1", tool_name="ask_user", args={}, suspend_payload={}, suspended_at=now,
        expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    state = await store.create(RunState(run_id="run-1", agent_id="a", status="suspended", pending=pending), owner="p")
    state = await store.save(state.model_copy(update={"status": "running"}), owner="p", not_after=pending.expires_at)
    assert await store.renew_lease("run-1", owner="p", revision=state.revision)
    assert await store.request_stop(state, by="U1")
    assert await store.stop_requested("run-1") == "U1" and await store.lease_owner("run-1") == "p"
    await store.now()

    quorums = Quorums(client, keys=keys)
    assert (await quorums.approve("run-1", "c1", "1:ab", user="U1", required=2)).status == "counted"
    assert (await quorums.withdraw("run-1", "c1", "1:ab", user="U1")).status == "withdrawn"
    assert (await quorums.tally("run-1", "c1", "1:ab")).approvers == ()

    grants = GrantStore(client, keys=keys)
    given = Grant(
        grant_id="g_1", team_id="T1", granted_by="U1", scope="thread", tool_name="deploy", rule="r", channel_id="C1",
        thread_ts="1.0", granted_at=now, expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    await grants.give(given)
    assert await grants.use("T1", given.scope_key()) is not None
    assert await grants.revoke("T1", "U1", "g_1") == 1

    runs = ActiveRuns(client, keys=keys)
    assert await runs.acquire("T1:U1", slot="run-1", limit=2) and await runs.renew("T1:U1", slot="run-1")
    await runs.release("T1:U1", slots=["run-1"])
    await runs.release("T1:U1", slots=["run-2"], mark=True)
    assert not await runs.acquire("T1:U1", slot="run-2", limit=2)  # released before its taking landed

    schedule = Schedule(client, prefix=keys.prefix)
    await schedule.add(DueItem("remind", "run-1", "c1"), after=0)
    await schedule.change(
        add=[
            Due(DueItem("expire", "run-1", "c1"), at=now),
            Due(DueItem("home", "", "U1"), after=1.0, keep_earlier=True),
        ],
        drop=[DueItem("remind", "run-1", "c1")],
    )
    await schedule.add(DueItem("remind", "run-1", "c1", 1), at=now, keep_earlier=True)
    claimed = await schedule.claim(now=now + timedelta(seconds=5))
    assert claimed
    await schedule.failed(claimed[0])
    for c in claimed:
        await schedule.done(c)
    await schedule.change(drop=[DueItem("home", "", "U1")])

    index = ConversationIndex(client, keys=keys)
    assert await index.is_new_event("Ev1", token="t") and await index.is_new_event("Ev1", token="t")
    assert await index.claim_thread("T1", channel_id="C1", thread_ts="1.0", run_id="run-1", after=None)
    await index.set_thread("T1", channel_id="C1", thread_ts="1.0", run_id="run-2")
    await index.add_message("run-1", key="c1", ref=MessageRef("C1", "1.1", "7"))
    assert await index.messages("run-1", "c1")
    assert await index.tell_once("run-1", tool_call_id="c1", user="U1", topic="refused")
    await index.escalate("run-1", key="c1", to=["U2", "C2"])
    assert await index.escalated("run-1", "c1") == {"U2", "C2"}
    await index.queue_notice("escalation", "T1", target="U2", run_id="run-1", key="c1")
    [queued] = await index.queued_notices("escalation", "T1", target="U2")
    assert (queued.run_id, queued.key, queued.n) == ("run-1", "c1", 0)
    await index.notices_sent("escalation", "T1", target="U2", items=[queued])
    assert await index.queued_notices("escalation", "T1", target="U2") == []

    inbox = Inbox(client, keys=keys)
    await inbox.add("T1", ["U1", "U2"], run_id="run-1", call="c1", asked_ms=1)
    assert await inbox.close("run-1", "c1", summary="answered")

    limits = CallerLimits(client, keys=keys, agent=cast(Any, None))  # none waiting yet: no run is read
    await limits.admit(Caller(name="build-42", channels=("C1",)), run_id="run-3")

    panes = PaneContexts(client, keys=keys)
    await panes.save(channel_id="D1", thread_ts="1.0", context={"channel_id": "C1"})

    queue = WorkQueue(client, keys=keys)
    await queue.enqueue({"kind": "action", "id": "job-1"})
    await client.xgroup_create(keys.work(), GROUP, id="0", mkstream=True)
    await client.xreadgroup(GROUP, "gone:1:dead", {keys.work(): ">"}, count=10)  # taken by a worker that died
    await queue.enqueue({"kind": "action", "id": "job-2"})
    await asyncio.sleep(0.3)  # longer than its lease below
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(job: dict[str, Any]) -> None:
        seen.append(str(job["id"]))
        if len(seen) == 2:
            done.set()

    await asyncio.wait_for(queue.consume(handler, stop=done, block_ms=50, lease_ttl=0.2), 10)
    assert sorted(seen) == ["job-1", "job-2"]  # the dead worker's job too: reclaimed


def _sites_in_source() -> tuple[dict[tuple[str, str], int], set[tuple[str, str]]]:
    """``(script sites, transaction sites)``: (module path, function qualname) of the ``register_script(...)`` calls
    in ``bot/`` (with how many each holds) and of the ``pipeline(transaction=True)`` calls."""
    scripts: dict[tuple[str, str], int] = {}
    transactions: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "bot").rglob("*.py")):
        rel = str(path.relative_to(ROOT))

        def walk(node: ast.AST, names: list[str]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    walk(child, [*names, child.name])
                    continue
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                    where = (rel, ".".join(names))  # noqa: B023 - used at once
                    if child.func.attr == "register_script":
                        scripts[where] = scripts.get(where, 0) + 1
                    transactional = any(
                        k.arg == "transaction" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                        for k in child.keywords
                    )
                    if child.func.attr == "pipeline" and (transactional or (not child.keywords and not child.args)):
                        transactions.add(where)  # pipeline() is transactional by default
                walk(child, names)

        if "register_script" in (text := path.read_text()) or "pipeline(" in text:
            walk(ast.parse(text), [])
    return scripts, transactions


async def test_the_checker_refuses_keys_of_two_slots() -> None:
    client = SlotCheckingRedis()
    script = client.register_script("return 1")
    await script(keys=["{a}x", "{a}y"])  # one slot: fine
    with pytest.raises(CrossSlot):
        await script(keys=["run:{r1}", "lease:{r2}"])
    with pytest.raises(CrossSlot):
        async with client.pipeline(transaction=True) as pipe:
            pipe.hset("thread:T1:C1:1.0", "run_id", "r")
            pipe.expire("event:E1", 10)
            await pipe.execute()
    with pytest.raises(CrossSlot):  # a script in a MULTI
        async with client.pipeline(transaction=True) as pipe:
            pipe.evalsha(script.sha, 1, "{a}x")
            await pipe.execute()
    with pytest.raises(CrossSlot):  # a Batch's script (in a plain pipeline) is still one slot's
        async with client.pipeline(transaction=False) as pipe:
            pipe.evalsha(script.sha, 2, "run:{r1}", "lease:{r2}")
            await pipe.execute()
    await client.aclose()


async def test_every_script_and_transaction_touches_one_slot(prefix: str) -> None:
    client = SlotCheckingRedis()
    await exercise(client, Keys(prefix))
    scripts, transactions = _sites_in_source()
    assert scripts and transactions
    not_run = {site: n for site, n in scripts.items() if len(client.scripts_run.get(site, ())) < n}
    assert not not_run, f"scripts the exercise never ran (site: how many registered there): {not_run}"
    assert transactions <= client.transactions_run, (
        f"transactions the exercise never ran: {sorted(transactions - client.transactions_run)}"
    )
    await client.aclose()
