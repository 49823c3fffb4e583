"""``APPROVAL_POLICY`` in today's approval flow (issue 23 part 1): the matching rule says who may approve each call,
through the one place that decides it (bot.slack.permissions); a call whose rule can't be satisfied for its
requester, or needs more approvals than this version collects, can be approved by nobody, and its message and the
refusal say why."""

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
POLICY = f"""
rules:
  - name: api restarts by carol
    tool: restart_service
    when: {{name: api}}
    approvers: [{CAROL}]
  - name: db restarts need two
    tool: restart_service
    when: {{name: {{glob: "db-*"}}}}
    approvers: [{ALICE}, {CAROL}]
    required: 2
  - name: default
    tool: "*"
    approvers: [requester, {BOB}]
"""


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


@pytest.fixture
def policy_file(tmp_path: Path) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return str(path)


async def requested(h: Any, name: str) -> tuple[str, dict[str, Any]]:
    """Alice asks for a restart of ``name``; returns (thread_ts, the approval request)."""
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": name}, id="r1")]), Reply(text="Done."))
    d = await h.ws.mention(ALICE, GENERAL, f"restart {name}")
    request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], request


async def test_the_matching_rule_says_who_may_approve(
    fake_redis: aioredis.Redis, harness: Any, policy_file: str
) -> None:
    async with harness(fake_redis, settings={**AGENT, "approval_policy": policy_file}) as h:
        thread, request = await requested(h, "api")
        assert f"Waiting for <@{CAROL}> to approve or decline" in blocks_text(request)
        await h.ws.click(request, "Approve", user=ALICE)  # the requester, whom this rule does not name
        refused = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "Only the configured approvers" in refused["text"]
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))
        await h.ws.click(request, "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]


async def test_a_call_no_rule_before_the_default_matches_is_the_default_rules(
    fake_redis: aioredis.Redis, harness: Any, policy_file: str
) -> None:
    async with harness(fake_redis, settings={**AGENT, "approval_policy": policy_file}) as h:
        thread, request = await requested(h, "web")
        assert f"Waiting for <@{ALICE}>, <@{BOB}> to approve or decline" in blocks_text(request)
        await h.ws.click(request, "Approve", user=CAROL)  # named by an earlier rule, not this one
        refused = await h.ws.wait_for_ephemeral(user=CAROL)
        assert "Only the configured approvers can approve or decline this." in refused["text"]
        await h.settle()
        assert approval_agent.RESTARTS == []
        await h.ws.click(request, "Approve", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["web"]


async def test_a_rule_the_requester_cant_satisfy_admits_nobody_and_says_why(
    fake_redis: aioredis.Redis, harness: Any, policy_file: str
) -> None:
    async with harness(fake_redis, settings={**AGENT, "approval_policy": policy_file}) as h:
        _thread, request = await requested(h, "db-1")
        why = "2 distinct approvers are required but only 1 can approve besides the requester"
        assert f"Nobody can approve this: {why}" in blocks_text(request)
        for user in (CAROL, ALICE, BOB):
            await h.ws.click(request, "Approve", user=user)
            refused = await h.ws.wait_for_ephemeral(user=user)
            assert f"Nobody can approve this: {why}" in refused["text"]
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, request))


# --- the rule's approvers, unit by unit -------------------------------------------------------------------------


def approvers_for(policy: str) -> Any:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.approval_policy import parse_text
    from bot.slack.approvers import ApproverPolicy

    client = AsyncWebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/")  # no group: never called
    return ApproverPolicy("requester", client=client, policy=parse_text(policy, kind="yaml"))


async def test_a_channel_wide_entry_admits_only_from_the_runs_channel_and_named_people_from_anywhere() -> None:
    from bot.slack.context import SlackContext, Where

    base = approvers_for(f'rules:\n  - tool: "*"\n    approvers: [channel, {CAROL}]\n')
    ctx = SlackContext(team_id="T1", channel_id=GENERAL, thread_ts="1.0", requester=ALICE)
    approvers = base.for_call(ctx, "restart_service", {"name": "api"})
    in_run = Where(user=BOB, surface="message", team_id="T1", channel_id=GENERAL)
    elsewhere = Where(user=BOB, surface="message", team_id="T1", channel_id="C_RANDOM")
    assert await approvers.admits(ctx, BOB, where=in_run)
    assert not await approvers.admits(ctx, BOB, where=elsewhere)  # an escalated copy elsewhere is not the channel
    assert await approvers.admits(ctx, CAROL, where=Where(user=CAROL, surface="message", team_id="T1", channel_id="D1"))
    assert approvers.describe(ctx) == f"Waiting for anyone in this channel, <@{CAROL}> to approve or decline"
    assert base.named() == []  # reminders and inboxes: the requester only, for now


def test_the_fields_not_carried_out_yet_are_named_for_the_start_up_log() -> None:
    from bot.approval_policy import load_policy
    from bot.slack.approvers import not_carried_out

    issue = Path(__file__).resolve().parent.parent / "fixtures" / "policies" / "issue23.yaml"
    assert not_carried_out(load_policy(issue)) == [
        "rule 1 ('restarts need two'): not carried out yet: required: 2 (nobody can approve such calls yet); edit",
        "rule 2 ('big refunds by finance'): not carried out yet: where: dm; approvers @handle / channel:C... (they"
        " admit nobody yet)",
        "rule 3 ('prod deploys'): not carried out yet: arguments: details-only; grants",
    ]


async def test_an_outside_agents_approval_request_goes_through_the_policy_with_its_action_as_the_tool(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """The MCP server's request_approval (asked through the Asker it uses): the rule matching its action (and its
    key/value details as arguments) says who decides; another action gets the default rule."""
    import asyncio

    from bot.agent.asking import APPROVAL_TOOL
    from bot.mcp_server.asker import Asker
    from bot.playground.state import TEAM_ID

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f'rules:\n  - tool: "Drop the *"\n    when: {{env: prod}}\n    approvers: [{CAROL}]\n  - tool: "*"\n'
    )
    async with harness(fake_redis, settings={"approval_policy": str(policy)}) as h:
        assert h.bot.threads is not None
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        prod = {"action": "Drop the cache", "details": {"env": "prod"}}
        request = await asker.ask(prod, channel=GENERAL, user=ALICE, tool_id=APPROVAL_TOOL)
        message = await h.ws.wait_for_message(channel=GENERAL, thread_ts=request.thread_ts, predicate=has_controls)
        assert f"Waiting for <@{CAROL}> to approve or decline" in blocks_text(message)
        await h.ws.click(message, "Approve", user=ALICE)
        await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "configured approvers" in m["text"])
        await h.ws.click(message, "Approve", user=CAROL)
        assert await asyncio.wait_for(asker.wait(request), 10) == {"status": "approved", "approved_by": CAROL}
        staging = {"action": "Drop the cache", "details": {"env": "staging"}}
        other = await asker.ask(staging, channel=GENERAL, user=ALICE, tool_id=APPROVAL_TOOL)
        message = await h.ws.wait_for_message(channel=GENERAL, thread_ts=other.thread_ts, predicate=has_controls)
        assert f"Waiting for <@{ALICE}> to approve or decline" in blocks_text(message)
