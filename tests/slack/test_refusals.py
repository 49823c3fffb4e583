"""Refusals reach the person on the surface they used (a thread, App Home, a modal), once per reply thread;
a person's own duplicate is told their answer was recorded."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from bot.fakeslack.state import APP_ID, TEAM_ID, dm_channel_id
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    GENERAL,
    ask,
    current,
    has_controls,
    resumed_requests,
)


def home_click(h: Any, q: dict[str, Any], *, user: str, label: str) -> dict[str, Any]:
    """A click on question ``q``'s button ``label`` from App Home (container.type ``view``, no channel), with a
    stray ``channel`` in the body as some clients leave it."""
    button = next(
        (b, e)
        for b in q["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["type"] == "button" and e["text"]["text"] == label
    )
    block, element = button
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "token": "playground-verification-token",
        "container": {"type": "view", "view_id": "V_HOME"},
        "trigger_id": h.ws.state.mint_trigger(user),
        "team": {"id": TEAM_ID, "domain": "playground"},
        "channel": {"id": GENERAL, "name": "general"},
        "view": {"id": "V_HOME", "type": "home", "blocks": [], "state": {"values": {}}},
        "actions": [
            {
                "type": "button",
                "action_id": element["action_id"],
                "block_id": block["block_id"],
                "text": element["text"],
                "value": element["value"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


async def test_a_refusal_from_app_home_arrives_as_a_dm_not_an_ephemeral_to_no_channel(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        ack = await h.ws.sender.send_interaction(home_click(h, q, user=BOB, label="api"))
        assert ack.status == 200
        dm = await h.ws.wait_for_message(channel=dm_channel_id(BOB), predicate=lambda m: "Only" in m["text"])
        assert "Only <@U_ALICE> can answer" in dm["text"]
        await h.settle()
        assert not [c for c in h.ws.calls() if c.error], [(c.method, c.error) for c in h.ws.calls() if c.error]
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


async def test_an_allowed_answer_from_app_home_updates_the_threads_question(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="From home.")
        await h.ws.sender.send_interaction(home_click(h, q, user=ALICE, label="web"))
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "From home.")
        closed = await current(h, q)
        assert not has_controls(closed) and "<@U_ALICE> answered" in str(closed["blocks"])


async def test_a_thread_reply_from_someone_not_allowed_is_refused_once_per_question(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "api")
        note = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE> can answer" in note["text"] and note["thread_ts"] == thread
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "web, really")
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "ok, I'll let Alice decide")
        await h.settle()
        assert len(h.ws.ephemerals(user=BOB)) == 1  # people talk in threads: told once, not on every reply
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


async def test_double_click_and_second_user_resume_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Chosen.")

        async def later(delay: float, label: str, user: str) -> Any:
            await asyncio.sleep(delay)
            return await h.ws.click(q, label, user=user, as_seen=True)

        acks = await asyncio.gather(later(0, "api", ALICE), later(0.15, "web", ALICE), later(0.05, "web", BOB))
        assert all(a.status == 200 for a in acks)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Chosen.")
        await h.settle()
        assert resumed_requests(h.model) == 1
        refusal = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE> can answer" in refusal["text"]
        dup = await h.ws.wait_for_ephemeral(user=ALICE)
        assert dup["text"] in (  # her own double click: not "answered by @her", and the other choice not taken
            "You had already answered *api*; your choice *web* was not recorded.",
            "You had already answered *web*; your choice *api* was not recorded.",
        )
