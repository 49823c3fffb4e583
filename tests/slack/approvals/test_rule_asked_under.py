"""An approval request is decided under the rule it was asked under, in every process and on every surface: a rule
that matched on the requester's user groups (``requester: {groups: [...]}``) is not matched again at click time
from a cache that may not know those groups (another process, a restart), nor skipped by Approve all or by the
standing grants (the rule decides how many approvals, who, and which grants)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, current, has_controls, text_is

AGENT = {"agent": "bot.testing.approval_agent:build"}


def policy_file(tmp_path: Path, default_approvers: str, grants: str = "") -> str:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"""
rules:
  - name: oncall restarts need two
    tool: restart_service
    requester: {{groups: ['@oncall']}}
    approvers: [{ALICE}, {CAROL}]
    required: 2
  - name: default
    tool: "*"
    approvers: [{default_approvers}]
{grants}"""
    )
    return str(policy)


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


def is_header(m: dict[str, Any]) -> bool:
    return "Approve all" in blocks_text(m)


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_click_on_another_process_is_judged_by_the_rule_the_request_was_asked_under(
    real_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = {**AGENT, "approval_policy": policy_file(tmp_path, "requester")}
    async with harness(real_redis, settings=settings) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="c1")]), Reply(text="Done."))
        d = await h.ws.mention(BOB, GENERAL, "restart api")  # Bob is in @oncall: two of Alice and Carol
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        assert "2" in blocks_text(request)
        await h.settle()
        other = await h.start_process(real_redis)  # a process that never looked up Bob's groups
        h.route_to(other)
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        assert approval_agent.RESTARTS == []  # the requester can't approve their own quorum call
        assert any(
            "Alice" in e["text"] or ALICE in e["text"] or "can't" in e["text"] for e in h.ws.ephemerals(user=BOB)
        )
        await h.ws.click(await current(h, request), "Approve", user=ALICE)
        await h.settle()
        assert approval_agent.RESTARTS == []  # one of two
        await h.ws.click(await current(h, request), "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]


async def test_approve_all_does_not_let_one_person_meet_a_group_rules_quorum(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings={**AGENT, "approval_policy": policy_file(tmp_path, "requester")}) as h:
        calls = [tool_call("restart_service", {"name": n}, id=f"r_{n}") for n in ("api", "web")]
        h.model.script(Reply(tool_calls=calls), Reply(text="Both handled."))
        d = await h.ws.mention(BOB, GENERAL, "restart api and web")
        header = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=is_header)
        await h.settle()
        await h.ws.click(header, "Approve all", user=ALICE)
        await h.settle()
        assert approval_agent.RESTARTS == []
        assert any("on your own" in e["text"] for e in h.ws.ephemerals(user=ALICE))


async def test_a_quorum_request_offers_no_standing_grant_and_the_next_call_is_asked_again(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    policy = policy_file(tmp_path, f"requester, {ALICE}, {CAROL}", grants="    grants: [once, thread]\n")
    async with harness(fake_redis, settings={**AGENT, "approval_policy": policy}) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="c1")]), Reply(text="One."))
        d = await h.ws.mention(BOB, GENERAL, "restart api")
        thread = d.message["ts"]
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Approve for this thread" not in blocks_text(request)  # a quorum's rule gives no standing grant
        await h.ws.click(request, "Approve", user=ALICE)
        await h.settle()
        await h.ws.click(await current(h, request), "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("One."))
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "db"}, id="c2")]), Reply(text="Two."))
        await h.ws.mention(BOB, GENERAL, "restart db", thread_ts=thread)
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]  # db waits for its own two approvals
        asked = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m)]
        assert asked and "db" in blocks_text(asked[-1])
