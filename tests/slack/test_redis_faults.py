"""Redis faults seen from Slack, on the real Redis behind a fault-injecting proxy: a claim whose reply is lost, and
the first clicks after an outage ends. Nothing is dropped, nothing applied twice, nobody told to retry needlessly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.store import connect_redis
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, SINGLE, ask, current, has_controls, resumed_requests
from bot.testing.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.real_redis, pytest.mark.redis_kinds("single")]  # a TcpProxy in front of one server


async def test_a_click_whose_claim_reply_is_lost_still_resumes_the_run_once(
    real_redis: aioredis.Redis, harness: Any
) -> None:
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")
        try:
            async with harness(client) as h:
                thread, q = await ask(h, then="Carried on.")
                await h.settle()
                proxy.lose_next_reply(containing=b'"status":"running"')  # the claim: applied, reply lost
                await h.ws.click(q, "web", user=ALICE)
                await h.ws.wait_for_message(
                    channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Carried on."
                )
                await h.settle()
                assert proxy.replies_lost == 1
                assert h.ws.ephemerals(user=ALICE) == []  # not "nothing was recorded", not "already answered by you"
                assert not has_controls(await current(h, q)) and resumed_requests(h.model) == 1
        finally:
            await client.aclose()


async def test_the_first_clicks_after_an_outage_ends_just_work(real_redis: aioredis.Redis, harness: Any) -> None:
    """Connections broken by the outage stay in the pool; they are checked or retried, not failed once each."""
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")
        try:
            async with harness(client) as h:
                h.model.responder = lambda body: (
                    Reply(text="Answered.")
                    if body["messages"][-1]["role"] == "tool"
                    else Reply(tool_calls=[tool_call("ask_user", SINGLE)])
                )
                questions = []
                for i in range(3):
                    d = await h.ws.mention(ALICE, GENERAL, f"question {i}")
                    q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
                    questions.append((d.message["ts"], q))
                await h.settle()
                proxy.cut()  # every pooled connection dies
                await asyncio.sleep(0.1)
                proxy.restore()  # the outage is over before anyone clicks
                for _thread, q in questions:
                    await h.ws.click(q, "api", user=ALICE)
                for thread, _q in questions:
                    await h.ws.wait_for_message(
                        channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Answered."
                    )
                await h.settle()
                assert [e["text"] for e in h.ws.ephemerals(user=ALICE)] == []
        finally:
            await client.aclose()
