"""The yardstick of ``benchmarks.cost`` (issue 26): the hand-written bot does the job to its spec and at the cost its
docstring gives: a mention + its click = 3 Web API calls and 4 Redis round trips; a second click on the same
question finds the run claimed and costs one round trip and no call. ``--floor`` makes the calls ``bot serve``
makes for the same requests (``tests/slack/test_cost_counts.py`` holds the product's): 5 calls, 11 round trips."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from benchmarks.ack_latency import question_messages
from benchmarks.bare_bolt import EVENTS_PATH
from benchmarks.handwritten_bot import build
from bot.fakeslack import Workspace
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, text_is
from bot.testing.tcp_proxy import TcpProxy
from tests.slack.test_cost_counts import REDIS_ROUND_TRIPS_CEILING, WEB_API_CALLS_CEILING

TOKEN = "xoxb-test-token-0123456789"
SECRET = "signing-secret-abcdef0123456789"
QUESTION = {
    "question": "Which colour should it be?",
    "options": [{"label": "Red"}, {"label": "Green"}, {"label": "Blue"}],
    "selection_mode": "single_select",
}


# mode -> (Web API calls of a mention + its click, their Redis round trips, a second click's round trips)
COUNTS: dict[str, tuple[dict[str, int], int, int]] = {
    "naive": ({"chat.postMessage": 2, "chat.update": 1}, 4, 1),  # GET thread + SET run; GETDEL run + SET thread
    "tuned": ({"chat.postMessage": 2, "chat.update": 1}, 4, 1),
    # serve's: a mention 5 round trips, a click 6 (the replay guard its own); a second click: the guard + the claim.
    # The product's own counts, in tests/slack/test_cost_counts.py: when they move, FeatureCalls must follow
    "floor": (
        {"chat.postMessage": 2, "chat.update": 1, "assistant.threads.setStatus": 2},
        REDIS_ROUND_TRIPS_CEILING,
        2,
    ),
}


@pytest.fixture(params=list(COUNTS))
async def served(
    request: pytest.FixtureRequest,
    proxied_redis: tuple[aioredis.Redis, TcpProxy],
    openai_server: FakeOpenAI,
    prefix: str,
) -> AsyncIterator[tuple[Workspace, TcpProxy, str]]:
    """The hand-written bot (library defaults, ``--tuned``'s aiohttp transport, ``--floor``'s calls) served on
    loopback against the fake Slack, the loopback model and the real Redis through the counting proxy."""
    mode = request.param
    if mode != "naive" and not hasattr(openai, "DefaultAioHttpClient"):
        pytest.skip("this openai release has no aiohttp transport (DefaultAioHttpClient): no tuned variant")
    _client, proxy = proxied_redis
    async with Workspace("http://127.0.0.1:9/unset", SECRET, bot_token=TOKEN, subscriptions=("app_mention",)) as ws:
        env = {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": ws.api_url,
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": openai_server.base_url,
            "REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0",
            "REDIS_PREFIX": prefix,
        }
        runner = web.AppRunner(
            build(tuned=mode != "naive", floor=mode == "floor", env=env).web_app(path=EVENTS_PATH, port=0),
            access_log=None,
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ws.sender.bot_url = f"http://127.0.0.1:{runner.addresses[0][1]}{EVENTS_PATH}"
        try:
            yield ws, proxy, mode
        finally:
            await runner.cleanup()


async def thread_saved(redis: aioredis.Redis, key: str) -> None:
    """Wait until the bot's last step, the thread's save, is done (read directly, not through the proxy)."""
    for _ in range(250):
        if await redis.exists(key):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{key} was never saved")


async def question_then_reply(ws: Workspace, model: FakeOpenAI, n: int) -> tuple[str, dict[str, Any]]:
    """A mention; the model asks QUESTION; returns (thread_ts, the question message)."""
    model.script(Reply(tool_calls=[tool_call("ask_user", QUESTION, id=f"call_{n}")]), Reply(text=f"Noted {n}."))
    d = await ws.mention(ALICE, GENERAL, f"pick a colour {n}")
    thread = d.message["ts"]
    await ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: bool(m.get("blocks")))
    q = next(q for q in question_messages(ws) if ws.state.message(GENERAL, q["ts"]).get("thread_ts") == thread)
    return thread, {**copy.deepcopy(ws.state.message(GENERAL, q["ts"])), "channel": GENERAL}


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server counts the round trips
async def test_a_mention_and_its_click_cost_three_calls_and_four_round_trips(
    served: tuple[Workspace, TcpProxy, str], openai_server: FakeOpenAI, real_redis: aioredis.Redis, prefix: str
) -> None:
    ws, proxy, mode = served
    calls_made, round_trips, second_click = COUNTS[mode]
    thread, q = await question_then_reply(ws, openai_server, 0)  # Bolt's auth.test, connections
    await ws.click(q, "Green", user=ALICE)
    await ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Noted 0."))
    await thread_saved(real_redis, f"{prefix}thread:{GENERAL}:{thread}")

    calls_before, trips_before = len(ws.calls()), proxy.round_trips
    thread, q = await question_then_reply(ws, openai_server, 1)
    await ws.click(q, "Green", user=ALICE)
    await ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Noted 1."))
    await thread_saved(real_redis, f"{prefix}thread:{GENERAL}:{thread}")
    calls = Counter(c.method for c in ws.calls()[calls_before:])
    assert calls == calls_made
    if mode == "floor":
        assert sum(calls.values()) == WEB_API_CALLS_CEILING
    assert proxy.round_trips - trips_before == round_trips

    tool_messages = [m for m in openai_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages == [{"role": "tool", "tool_call_id": "call_1", "content": '{"answer": "Green"}'}]
    assert question_messages(ws) == []  # the question was closed

    # a second click on the copy still shown: the run is claimed already; one GETDEL (--floor: beside the replay
    # guard's round trip), nothing posted
    calls_before, trips_before = len(ws.calls()), proxy.round_trips
    ack = await ws.click(q, "Red", user=ALICE, as_seen=True)
    assert ack.ok
    for _ in range(50):
        if proxy.round_trips > trips_before:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)  # had it gone on, it would post now
    assert proxy.round_trips - trips_before == second_click
    assert ws.calls()[calls_before:] == []
