"""``APPROVAL_POLICY`` in today's approval flow (issue 23 part 1): the matching rule says who may approve each call,
through the one place that decides it (bot.slack.questions.permissions); a call whose rule can't be satisfied for its
requester can be approved by nobody, and its message and the
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


async def test_a_call_its_rule_cant_satisfy_is_declined_at_once_saying_why(
    fake_redis: aioredis.Redis, harness: Any, policy_file: str
) -> None:
    async with harness(fake_redis, settings={**AGENT, "approval_policy": policy_file}) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "db-1"}, id="r1")]), Reply(text="No."))
        d = await h.ws.mention(ALICE, GENERAL, "restart db-1")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("No."))
        assert not any(has_controls(m) for m in h.ws.messages(GENERAL))  # nobody was asked
        assert approval_agent.RESTARTS == []
        [result] = [m for m in h.model.requests[-1]["messages"] if m.get("role") == "tool"]
        why = "2 distinct approvers are required but only 1 can approve besides the requester"
        assert '"status": "declined"' in result["content"] and '"outcome": "unsatisfiable"' in result["content"]
        assert "the approval policy's rule 'db restarts need two'" in result["content"] and why in result["content"]


async def test_require_always_and_never_overrule_the_tool(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - tool: lookup_ticket\n    require: always\n"
        "  - tool: restart_service\n    when: {name: {glob: 'dev-*'}}\n    require: never\n  - tool: '*'\n"
    )
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "dev-1"}, id="r1")]), Reply(text="Ok."))
        d = await h.ws.mention(ALICE, GENERAL, "restart dev-1")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Ok."))
        assert approval_agent.RESTARTS == ["dev-1"]  # ran unasked, though the tool requires approval
        h.model.script(Reply(tool_calls=[tool_call("lookup_ticket", {"ticket_id": "T-1"}, id="l1")]), Reply(text="Hm."))
        d = await h.ws.mention(ALICE, GENERAL, "look up T-1")
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        assert "lookup_ticket" in blocks_text(request)  # asked, though the tool does not require approval


# --- the rule's approvers, unit by unit -------------------------------------------------------------------------


def approvers_for(policy: str) -> Any:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.approval_policy import parse_text
    from bot.slack.questions.approvers import ApproverPolicy

    client = AsyncWebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/")  # no group: never called
    return ApproverPolicy("requester", client=client, policy=parse_text(policy, kind="yaml"))


async def test_a_channel_wide_entry_admits_only_from_the_runs_channel_and_named_people_from_anywhere() -> None:
    from bot.slack.context import Origin, SlackContext

    base = approvers_for(f'rules:\n  - tool: "*"\n    approvers: [channel, {CAROL}]\n')
    ctx = SlackContext(team_id="T1", channel_id=GENERAL, thread_ts="1.0", requester=ALICE)
    approvers = base.for_call(ctx, "restart_service", {"name": "api"})
    in_run = Origin(user=BOB, surface="message", team_id="T1", channel_id=GENERAL)
    elsewhere = Origin(user=BOB, surface="message", team_id="T1", channel_id="C_RANDOM")
    assert await approvers.admits(ctx, BOB, where=in_run)
    assert not await approvers.admits(ctx, BOB, where=elsewhere)  # an escalated copy elsewhere is not the channel
    dm = Origin(user=CAROL, surface="message", team_id="T1", channel_id="D1")
    assert await approvers.admits(ctx, CAROL, where=dm)
    assert approvers.describe(ctx) == f"Waiting for anyone in this channel, <@{CAROL}> to approve or decline"
    blocked = approvers_for(f'rules:\n  - tool: "*"\n    approvers: [{ALICE}, {CAROL}]\n    required: 2\n')
    approvers = blocked.for_call(ctx, "restart_service", {})
    why = "2 distinct approvers are required but only 1 can approve besides the requester"
    assert not await approvers.admits(ctx, CAROL, where=None)
    assert approvers.refusal(ctx) == f"Nobody can approve this: {why} (whose own approval doesn't count)."
    bobs = ctx.model_copy(update={"requester": BOB})
    quorum = blocked.for_call(bobs, "restart_service", {})  # Alice and Carol can: a quorum (part 2)
    assert await quorum.admits(bobs, CAROL, where=None) and not await quorum.admits(bobs, BOB, where=None)
    assert quorum.describe(bobs).startswith(f"Needs 2 approvals from <@{ALICE}>, <@{CAROL}> (not <@{BOB}>, who asked)")


async def test_a_requester_entry_beside_named_people_is_the_channels_for_a_run_asked_for_nobody() -> None:
    """``approvers: [requester, Carol]`` of a run with no requester (an outside agent's request for nobody in
    particular): anyone in the run's channel may decide, and the request says so (channel_wide, the one reading
    the MCP server's approvals_anyone_in_channel refusal uses too)."""
    from bot.slack.context import Origin, SlackContext

    base = approvers_for(f'rules:\n  - tool: "*"\n    approvers: [requester, {CAROL}]\n')
    nobody = SlackContext(team_id="T1", channel_id=GENERAL, thread_ts="1.0", requester="")
    approvers = base.for_call(nobody, "restart_service", {})
    in_run = Origin(user=BOB, surface="message", team_id="T1", channel_id=GENERAL)
    assert approvers.channel_wide(nobody.requester) and await approvers.admits(nobody, BOB, where=in_run)
    assert approvers.describe(nobody) == f"Waiting for anyone in this channel, <@{CAROL}> to approve or decline"
    alices = nobody.model_copy(update={"requester": ALICE})
    approvers = base.for_call(alices, "restart_service", {})
    assert not approvers.channel_wide(ALICE) and not await approvers.admits(alices, BOB, where=in_run)
    assert approvers.describe(alices) == f"Waiting for <@{ALICE}>, <@{CAROL}> to approve or decline"


async def test_an_outside_agents_approval_request_goes_through_the_policy_with_its_action_as_the_tool(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """The MCP server's request_approval (asked through the Asker it uses): the rule matching its action (and its
    key/value details as arguments) says who decides; another action gets the default rule."""
    import asyncio

    from bot.agent.asking import APPROVAL_TOOL
    from bot.fakeslack.state import TEAM_ID
    from bot.mcp_server.asker import Asker

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


async def test_the_rules_see_the_arguments_as_approvers_do_with_defaults_filled_in(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """The model leaves out ``force`` (default false): the rule on ``force: false`` matches, as it would on the stored
    approval request's arguments (so the gate and who-may-approve never judge different arguments)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - tool: restart_service\n    when: {force: false}\n    require: never\n  - tool: '*'\n"
    )
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Ok."))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Ok."))
        assert approval_agent.RESTARTS == ["api"]


def test_the_start_logs_no_field_of_the_issues_policy_as_not_carried_out(caplog: pytest.LogCaptureFixture) -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.approval_policy import load_policy
    from bot.config import load_settings
    from bot.slack.questions.approvers import approver_policy

    issue = Path(__file__).resolve().parent.parent / "fixtures" / "policies" / "issue23.yaml"
    client = AsyncWebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/")
    with caplog.at_level("WARNING", logger="bot.slack.questions.approvers"):
        approvers = approver_policy(load_settings(approval_policy=str(issue)), client=client, rules=load_policy(issue))
    assert approvers.policy is not None and [r.name for r in approvers.policy.rules][-1] == "default"
    assert [r.getMessage() for r in caplog.records] == []  # quorum, edit, groups, where, grants: all carried out
    plain = approver_policy(load_settings(), client=client, rules=None)
    assert plain.policy is None and plain.entries == ("requester",)
