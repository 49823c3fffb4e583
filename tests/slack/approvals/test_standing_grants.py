"""Standing grants (issue 23 part 4) through the fake Slack over signed HTTP: where the call's rule allows, Approve
"for this thread" / "always (these arguments)" approves and records a grant; a later call it covers runs without
asking and the thread says which grant approved it (audited); the person's grants are on their App Home with
Revoke, after which the call is asked again; a rule without grants offers none."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.asking import APPROVAL_TOOL
from bot.agent.decisions import args_hash
from bot.approval_policy import parse_text
from bot.fakeslack.home_tab import click_home, home_view, open_home
from bot.fakeslack.state import dm_channel_id
from bot.slack.approvals.grants import StandingGrants
from bot.slack.context import SlackContext
from bot.slack.questions.approvers import ApproverPolicy
from bot.slack.transport.web_api import SlackWeb
from bot.store import Keys
from bot.store.grants import GrantStore
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.scrape import scrape
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, current, has_controls, text_is

AGENT = {"agent": "bot.testing.approval_agent:build"}
POLICY = f"""
rules:
  - name: restarts
    tool: restart_service
    approvers: [requester, {BOB}]
    grants: [once, thread, always]
    grant_for: 2h
  - name: default
    tool: "*"
    approvers: [requester]
"""


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


@pytest.fixture
def settings(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return {**AGENT, "approval_policy": str(path)}


async def restart(h: Any, name: str, *, thread: str | None = None, call: str, user: str = ALICE) -> str:
    """``user`` (Alice) asks for a restart of ``name`` (in ``thread``, or a new one); returns the thread's ts."""
    h.model.script(
        Reply(tool_calls=[tool_call("restart_service", {"name": name}, id=call)]), Reply(text=f"Done {call}.")
    )
    d = await h.ws.mention(user, GENERAL, f"restart {name}", thread_ts=thread)
    return thread or d.message["ts"]


async def test_a_second_persons_thread_grant_covers_what_the_first_ones_does_not(
    fake_redis: aioredis.Redis, harness: Any, settings: dict[str, str]
) -> None:
    """Found by a break-it review: Alice gives a thread grant (it covers her own calls: she is an approver as their
    requester); Carol asks in the same thread, Alice's grant does not cover her, Bob approves for the thread. Carol's
    next call runs under Bob's grant (before: the store answered with Alice's grant only, the first on that scope,
    which did not fit, and Carol's call was asked again though Bob's grant was live)."""
    async with harness(fake_redis, settings=settings) as h:
        thread = await restart(h, "api", call="c1")
        first = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(first, "Approve for this thread", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c1."))
        await restart(h, "web", thread=thread, call="c2", user=CAROL)
        second = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and "web" in blocks_text(m)
        )
        await h.ws.click(second, "Approve for this thread", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c2."))
        await restart(h, "db", thread=thread, call="c3", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c3."))
        assert approval_agent.RESTARTS == ["api", "web", "db"]
        assert not [m for m in h.ws.messages(GENERAL, thread_ts=thread) if has_controls(m) and "db" in blocks_text(m)]


async def test_a_thread_grant_lets_later_calls_in_the_thread_run_unasked_until_revoked_on_home(
    fake_redis: aioredis.Redis, harness: Any, settings: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis, settings=settings) as h:
        thread = await restart(h, "api", call="c1")
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        shown = blocks_text(request)
        assert "Approve for this thread" in shown and "Approve always (these arguments)" in shown
        assert "Approve in this channel" not in shown  # not in the rule's grants
        await h.ws.click(request, "Approve for this thread", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c1."))
        done = blocks_text(await current(h, request))
        assert "Approved by <@U_ALICE>, for this thread until" in done
        with caplog.at_level(logging.INFO, logger="bot.audit"):
            await restart(h, "web", thread=thread, call="c2")
            note = await h.ws.wait_for_message(
                channel=GENERAL, thread_ts=thread, predicate=lambda m: "ran without asking" in m["text"]
            )
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c2."))
        assert f"a standing grant from <@{ALICE}> (for this thread, expires <!date^" in note["text"]
        assert approval_agent.RESTARTS == ["api", "web"]
        used = [a for r in caplog.records if (a := getattr(r, "audit", {})).get("event") == "grant.used"]
        assert len(used) == 1 and used[0]["granted_by"] == ALICE and used[0]["tool"] == "restart_service"
        assert not any(has_controls(m) for m in h.ws.messages(GENERAL, thread_ts=thread))  # nobody was asked

        await open_home(h.ws, ALICE)
        await h.settle()
        view = home_view(h.ws, ALICE)
        assert view is not None and "Your standing grants" in blocks_text(view)
        assert "`restart_service` runs without asking in a thread of" in blocks_text(view)
        assert "Your standing grants" not in blocks_text(home_view(h.ws, BOB) or {})
        await click_home(h.ws, ALICE, "Revoke")
        told = await h.ws.wait_for_message(
            channel=dm_channel_id(ALICE), predicate=lambda m: "Standing grant revoked" in m["text"]
        )
        assert "it had approved 1 call" in told["text"]
        await h.settle()
        assert "Your standing grants" not in blocks_text(home_view(h.ws, ALICE) or {})

        await restart(h, "db", thread=thread, call="c3")
        asked = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "*name*: db" in blocks_text(asked) and approval_agent.RESTARTS == ["api", "web"]


async def test_an_always_grant_covers_the_same_arguments_anywhere_and_nothing_else(
    fake_redis: aioredis.Redis, harness: Any, settings: dict[str, str]
) -> None:
    async with harness(fake_redis, settings=settings) as h:
        first = await restart(h, "api", call="c1")
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=first, predicate=has_controls)
        await h.ws.click(request, "Approve always (these arguments)", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=first, predicate=text_is("Done c1."))
        other = await restart(h, "api", call="c2")  # a new thread, the same arguments
        note = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=other, predicate=lambda m: "ran without asking" in m["text"]
        )
        assert f"from <@{BOB}> (always, with these arguments" in note["text"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=other, predicate=text_is("Done c2."))
        third = await restart(h, "web", call="c3")  # other arguments: asked
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=third, predicate=has_controls)
        assert approval_agent.RESTARTS == ["api", "api"]


async def test_a_rule_without_grants_offers_approve_once_only(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread = await restart(h, "api", call="c1")
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Approve for this thread" not in blocks_text(request) and "Approve" in blocks_text(request)


async def test_each_decision_and_grant_use_is_audited_with_its_rule_and_counted(
    fake_redis: aioredis.Redis, harness: Any, settings: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The audit line of a decision: who, which call (its name and argument hash, never the arguments), the rule
    that asked, edited or not, the scope; the metrics by rule and outcome, and the grants given and used."""
    async with harness(fake_redis, settings=settings) as h:
        before = await scrape(h.processes[0].url.removesuffix("/slack/events"))
        with caplog.at_level(logging.INFO, logger="bot.audit"):
            thread = await restart(h, "api", call="c1")
            request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
            await h.ws.click(request, "Approve for this thread", user=BOB)
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c1."))
            await restart(h, "web", thread=thread, call="c2")
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done c2."))
        lines = {r.audit["event"]: r.audit for r in caplog.records if hasattr(r, "audit")}
        decided = lines["approval.approved"]
        assert decided["user_id"] == BOB and decided["tool"] == "restart_service" and decided["rule"] == "restarts"
        assert decided["args_hash"] == args_hash({"name": "api", "force": False}) and decided["edited"] is False
        assert decided["scope"] == "thread" and "api" not in json.dumps(decided)
        assert lines["approval.asked"]["tool"] == "restart_service"
        assert lines["grant.given"]["granted_by"] == BOB and lines["grant.given"]["scope"] == "thread"
        assert lines["grant.used"]["args_hash"] == args_hash({"name": "web", "force": False})
        await h.settle()
        after = await scrape(h.processes[0].url.removesuffix("/slack/events"))
    assert after.since(before, "askbot_approval_decisions_total", rule="restarts", outcome="approved") == 1
    assert after.since(before, "askbot_approval_grants_given_total", rule="restarts", scope="thread") == 1
    assert after.since(before, "askbot_approval_grants_used_total", rule="restarts", scope="thread") == 1


async def test_an_outside_agents_approval_request_offers_no_grant_and_none_covers_it(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """The MCP server's request_approval (its action is the rule's tool name) is a person's decision each time."""
    policy = parse_text(POLICY, kind="yaml")
    client = AsyncWebClient(token="xoxb-test")
    grants = StandingGrants(
        GrantStore(fake_redis, keys=Keys(prefix)),
        policy=policy,
        approvers=ApproverPolicy("requester", client=client, policy=policy),
        web=SlackWeb(client),
    )
    ctx = SlackContext(team_id="T1", channel_id="C1", thread_ts="1.0", requester=ALICE)
    assert grants.scopes(ctx, "restart_service", {"name": "api"}) == ["thread", "always"]
    assert grants.scopes(ctx, APPROVAL_TOOL, {"action": "restart_service", "details": {}}) == []
