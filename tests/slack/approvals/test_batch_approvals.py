"""Batches (issue 23 part 5): several calls of one turn that wait for approval are asked together: a header with
Approve all, then each call's own request. Approve all approves the calls the clicking person may approve alone;
a call decided on its own card waits for the rest of the batch; the run goes on once every call is decided, the
calls running in the model's order. Through the fake Slack over signed HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, blocks_text, current, has_controls, text_is

AGENT = {"agent": "bot.testing.approval_agent:build"}


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


def is_header(m: dict[str, Any]) -> bool:
    return "Approve all" in blocks_text(m)


def asks_for(name: str) -> Any:
    return lambda m: has_controls(m) and f"*name*: {name}" in blocks_text(m) and not is_header(m)


async def two_restarts(h: Any) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Alice asks; the model restarts api and web in one turn. Returns (thread, header, api's request, web's)."""
    calls = [tool_call("restart_service", {"name": n}, id=f"r_{n}") for n in ("api", "web")]
    h.model.script(Reply(tool_calls=calls), Reply(text="Both handled."))
    d = await h.ws.mention(ALICE, GENERAL, "restart api and web")
    thread = d.message["ts"]
    header = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=is_header)
    api = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=asks_for("api"))
    web = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=asks_for("web"))
    return thread, header, api, web


async def test_approve_all_runs_every_call_of_the_turn_once_in_order(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread, header, api, web = await two_restarts(h)
        assert "2 calls need approval" in blocks_text(header)
        assert approval_agent.RESTARTS == []
        await h.ws.click(header, "Approve all", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        await h.ws.click(header, "Approve all", user=ALICE, as_seen=True)  # a double click
        await h.settle()
        assert approval_agent.RESTARTS == ["api", "web"]
        results = [m for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert [(m["tool_call_id"], m["content"]) for m in results] == [
            ("r_api", "api restarted"),
            ("r_web", "web restarted"),
        ]
        for request in (api, web):
            done = await current(h, request)
            assert not has_controls(done) and "Approved by <@U_ALICE> (Approve all) \\u00b7 ran in" in blocks_text(done)
        after = await current(h, header)
        assert not has_controls(after) and "approved 2 of 2 with Approve all" in blocks_text(after)


async def test_a_call_approved_on_its_own_card_waits_for_the_rest_of_its_batch(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread, _header, api, web = await two_restarts(h)
        await h.ws.click(web, "Approve", user=ALICE)
        await h.settle()
        waiting = await current(h, web)
        assert approval_agent.RESTARTS == [] and len(h.model.requests) == 1  # nothing runs yet
        assert not has_controls(waiting) and "runs once the other calls of this turn are decided" in blocks_text(
            waiting
        )
        assert has_controls(await current(h, api))
        await h.ws.click(api, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["api", "web"]  # the model's order, not the order of the clicks
        for request in (api, web):  # each card then says how its call went
            assert "Approved by <@U_ALICE> \\u00b7 ran in" in blocks_text(await current(h, request))


async def test_approve_all_leaves_the_calls_the_person_may_not_approve_alone(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"""
rules:
  - name: web by bob
    tool: restart_service
    when: {{name: web}}
    approvers: [{BOB}]
  - name: default
    tool: "*"
    approvers: [requester]
"""
    )
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        thread, header, api, web = await two_restarts(h)
        await h.ws.click(header, "Approve all", user=ALICE)
        await h.settle()
        assert "Approve all" in blocks_text(await current(h, api))  # its outcome names how it was approved
        assert has_controls(await current(h, web)) and approval_agent.RESTARTS == []
        note = await current(h, header)
        assert "approved 1 of 2 with Approve all; 1 still waits" in blocks_text(note) and has_controls(note)
        await h.ws.click(header, "Approve all", user=ALICE)  # nothing left she may approve
        told = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "nothing here you can approve on your own" in told["text"]
        await h.ws.click(web, "Approve", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["api", "web"]


async def test_each_call_of_a_batch_is_shown_as_its_own_rule_says(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """The batch's second call matches a ``details-only`` rule, the first doesn't: the second's arguments stay out
    of the channel (they were shown: only the batch's first call kept its rule's notes)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n"
        "  - tool: restart_service\n    when: {name: web}\n    approvers: [requester]\n    arguments: details-only\n"
        "  - tool: '*'\n    approvers: [requester]\n"
    )
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        calls = [tool_call("restart_service", {"name": n}, id=f"r_{n}") for n in ("api", "web")]
        h.model.script(Reply(tool_calls=calls), Reply(text="Both handled."))
        d = await h.ws.mention(ALICE, GENERAL, "restart api and web")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=is_header)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=asks_for("api"))
        await h.settle()
        requests = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m) and not is_header(m)]
        assert len(requests) == 2
        web = next(m for m in requests if "*name*: api" not in blocks_text(m))
        assert "*name*: web" not in blocks_text(web) and "shown only in Details" in blocks_text(web)


async def test_a_call_of_an_approved_batch_that_a_stop_kept_from_running_says_so(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Approve all, then "stop" while api runs: web never runs, and its approval request says it was stopped before
    it ran (it said "ran in 0.0 s")."""
    approval_agent.GATE["gate"] = asyncio.Event()
    try:
        async with harness(fake_redis, settings=AGENT) as h:
            thread, header, _, web = await two_restarts(h)
            await h.ws.click(header, "Approve all", user=ALICE)
            await h.ws.fake.wait_until(lambda: approval_agent.RESTARTS, timeout=10, what="api to restart")
            await h.ws.reply_in_thread(ALICE, GENERAL, thread, "stop")
            await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "Stopping" in m["text"])
            approval_agent.GATE["gate"].set()
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped" in m["text"])
            await h.settle()
            assert approval_agent.RESTARTS == ["api"]
            shown = blocks_text(await current(h, web))
            assert "stopped before it ran" in shown and "ran in" not in shown, shown
    finally:
        approval_agent.GATE.clear()
