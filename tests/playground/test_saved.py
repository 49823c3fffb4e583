"""The playground's fake workspace kept in Redis (bot/playground/saved.py): written after changes, loaded into a new
fake Slack as it was (threads, ephemerals, open modals, Home tabs), bounded, and a snapshot it can't read is never
lost. On fakeredis; the restart of the real process is tests/ui/test_ui_restart.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import fakeredis
import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ConfigError
from bot.fakeslack import FakeSlack
from bot.fakeslack.state import make_view
from bot.playground import saved as saved_module
from bot.playground.saved import SCHEMA_VERSION, WorkspaceSaver, dump
from bot.store import connect_redis
from bot.store.keys import Keys
from bot.testing.tcp_proxy import TcpProxy

TOKEN = "xoxb-saved-test"
HOME = {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*Waiting for you*"}}]}


@pytest.fixture
def keys(prefix: str) -> Keys:
    return Keys(prefix)


@pytest.fixture
def key(keys: Keys) -> str:
    return keys.playground_workspace()


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(TOKEN) as slack:
        yield slack


async def fill(fake: FakeSlack) -> str:
    """A thread with a reply, an ephemeral, a Home tab; returns the thread's ts."""
    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    root = (await client.chat_postMessage(channel="C_GENERAL", text="Which environment?"))["ts"]
    await client.chat_postMessage(channel="C_GENERAL", text="Deploying to *production*", thread_ts=root)
    await client.chat_postEphemeral(channel="C_GENERAL", user="U_BOB", text="only Alice may answer")
    await client.views_publish(user_id="U_ALICE", view=HOME)
    modal = make_view({"type": "modal", "callback_id": "ask_answer_modal", "blocks": []}, user="U_ALICE")
    fake.state.views[modal.id] = modal  # as views.open leaves it (which needs a person's trigger_id)
    fake.state.user_stack("U_ALICE").append(modal.id)
    fake.state.changed({"type": "view_opened", "user": "U_ALICE", "view": modal.data})
    return str(root)


async def test_a_new_fake_slack_loads_the_workspace_as_it_was(
    fake_redis: aioredis.Redis, fake: FakeSlack, keys: Keys, key: str
) -> None:
    saver = WorkspaceSaver(fake_redis, fake, keys=keys)
    saver.start()
    root = await fill(fake)
    await saver.stop()
    raw = await fake_redis.get(key)
    assert raw is not None and json.loads(raw)["schema_version"] == SCHEMA_VERSION
    assert 0 < await fake_redis.ttl(key) <= saved_module.TTL_SECONDS  # bounded in time too

    async with FakeSlack(TOKEN) as again:
        assert await WorkspaceSaver(fake_redis, again, keys=keys).load() == 2
        assert dump(again.state) == dump(fake.state)
        [parent, reply] = again.state.conversations["C_GENERAL"].replies(root)
        assert parent["reply_count"] == 1 and reply["text"] == "Deploying to *production*"
        assert [e.user for e in again.state.conversations["C_GENERAL"].ephemerals] == ["U_BOB"]
        assert again.state.top_view("U_ALICE").data["callback_id"] == "ask_answer_modal"  # type: ignore[union-attr]
        assert again.state.home_views["U_ALICE"]["blocks"][0]["text"]["text"] == "*Waiting for you*"
        # the bot can go on where it left off: update the question, reply in its thread
        client = AsyncWebClient(token=TOKEN, base_url=again.api_url)
        await client.chat_update(channel="C_GENERAL", ts=root, text="Answered: production")
        later = await client.chat_postMessage(channel="C_GENERAL", text="Done.", thread_ts=root)
        assert float(later["ts"]) > float(reply["ts"])


async def test_it_is_written_after_each_change_not_only_at_the_end(
    fake_redis: aioredis.Redis, fake_server: fakeredis.FakeServer, fake: FakeSlack, keys: Keys, key: str
) -> None:
    reader = fakeredis.FakeAsyncRedis(server=fake_server)  # another process looking
    saver = WorkspaceSaver(fake_redis, fake, keys=keys)
    saver.start()
    try:
        root = await fill(fake)

        async def saved_thread() -> bool:
            raw = await reader.get(key)
            messages = json.loads(raw)["conversations"]["C_GENERAL"]["messages"] if raw else []
            return len([m for m in messages if m.get("thread_ts") == root]) == 2

        for _ in range(200):  # the writer runs in the background
            if await saved_thread():
                break
            await asyncio.sleep(0.02)
        assert await saved_thread()  # a process killed now (no clean stop) keeps its thread
    finally:
        await saver.stop()
        await reader.aclose()


async def test_each_channel_keeps_its_newest_messages(
    fake_redis: aioredis.Redis, fake: FakeSlack, keys: Keys, key: str
) -> None:
    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    limit = saved_module.MAX_MESSAGES
    conversation = fake.state.conversations["C_RANDOM"]
    for n in range(limit + 5):  # straight into the state: 505 Web API calls would be slow
        ts = fake.state.mint_ts()
        conversation.add({"type": "message", "user": "U_BOT", "ts": ts, "text": f"message {n}"})
    await client.chat_postMessage(channel="C_GENERAL", text="elsewhere")
    snapshot = dump(fake.state)
    kept = snapshot["conversations"]["C_RANDOM"]["messages"]
    assert len(kept) == limit and kept[0]["text"] == "message 5" and kept[-1]["text"] == f"message {limit + 4}"
    assert len(snapshot["conversations"]["C_GENERAL"]["messages"]) == 1


async def test_a_snapshot_from_a_newer_version_stops_start_up_and_is_kept(
    fake_redis: aioredis.Redis, fake: FakeSlack, keys: Keys, key: str
) -> None:
    newer = json.dumps({"schema_version": SCHEMA_VERSION + 1, "conversations": {}})
    await fake_redis.set(key, newer)
    with pytest.raises(ConfigError, match=f"schema_version {SCHEMA_VERSION + 1}.*another REDIS_PREFIX"):
        await WorkspaceSaver(fake_redis, fake, keys=keys).load()
    assert await fake_redis.get(key) == newer.encode()


@pytest.mark.parametrize(
    "raw",
    ["{not json", "[1, 2]", '{"schema_version": "one"}', '{"schema_version": 1, "conversations": []}'],
    ids=["not JSON", "not an object", "no version", "wrong shape"],
)
async def test_an_unreadable_snapshot_is_set_aside_and_the_workspace_starts_empty(
    fake_redis: aioredis.Redis, fake: FakeSlack, keys: Keys, key: str, raw: str
) -> None:
    await fake_redis.set(key, raw)
    assert await WorkspaceSaver(fake_redis, fake, keys=keys).load() == 0
    assert await fake_redis.get(keys.playground_workspace_unreadable()) == raw.encode()  # not lost
    assert all(not c.messages for c in fake.state.conversations.values())


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_stop_while_a_write_is_on_its_way_waits_for_it(fake: FakeSlack, keys: Keys, key: str) -> None:
    """The playground stops while the saver's write waits out a Redis blip (its client retries): the write lands
    and the workspace is kept. It was cancelled, its changes taken as written, and nothing was saved; a cancel lost
    inside the store call (Python 3.11's wait_for, in fakeredis) left the stop waiting for ever."""
    root = await fill(fake)  # before the saver starts: only the change below makes it write
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")  # retries: 50 ms, 100 ms, 200 ms
        try:
            saver = WorkspaceSaver(client, fake, keys=keys)
            proxy.cut_at(containing=key.encode(), when="request", lasting=0.2)
            saver.start()
            await AsyncWebClient(token=TOKEN, base_url=fake.api_url).chat_postMessage(
                channel="C_GENERAL", text="Deployed.", thread_ts=root
            )
            for _ in range(200):
                if proxy.cuts:
                    break
                await asyncio.sleep(0.01)
            assert proxy.cuts == 1  # the write is on its way, retrying
            await asyncio.wait_for(saver.stop(), 10)
            raw = await client.get(key)
            assert raw is not None
            texts = [m["text"] for m in json.loads(raw)["conversations"]["C_GENERAL"]["messages"]]
            assert texts == ["Which environment?", "Deploying to *production*", "Deployed."]
        finally:
            await client.delete(key)
            await client.aclose()


async def test_agent_sessions_come_back_with_their_titles_and_status(
    fake_redis: aioredis.Redis, fake: FakeSlack, keys: Keys, key: str
) -> None:
    """A thread's agent session (agent_view) is kept: after a restart the playground shows its title and status
    (before: it was not saved, and a thread's session came back "(untitled)", its status lost)."""
    fake.state.agent_app = True
    saver = WorkspaceSaver(fake_redis, fake, keys=keys)
    saver.start()
    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    root = (await client.chat_postMessage(channel="C_GENERAL", text="restart web"))["ts"]
    await client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="processing")
    await client.agents_sessions_rename(channel_id="C_GENERAL", thread_ts=root, title="Restart the web service")
    await client.agents_sessions_setStatus(channel_id="C_GENERAL", thread_ts=root, status="suspended")
    await saver.stop()

    async with FakeSlack(TOKEN) as again:
        await WorkspaceSaver(fake_redis, again, keys=keys).load()
        session = again.state.sessions[("C_GENERAL", root)]
        assert (session["title"], session["status"]) == ("Restart the web service", "suspended")
        assert dump(again.state) == dump(fake.state)
    fake_redis_snapshot = json.loads(await fake_redis.get(key) or "{}")
    fake_redis_snapshot.pop("agent_sessions")  # a snapshot written before sessions were kept
    await fake_redis.set(key, json.dumps(fake_redis_snapshot))
    async with FakeSlack(TOKEN) as older:
        assert await WorkspaceSaver(fake_redis, older, keys=keys).load() == 1
        assert older.state.sessions == {}
