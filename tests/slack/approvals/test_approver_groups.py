"""Approvers the policy names by user-group handle (``@oncall``) or as a channel's members (``channel:C...``), and
rules matching on the requester's user groups (issue 23 part 1): the fake Slack answers ``usergroups.list`` and
``conversations.members`` with Slack's validation and errors; the bot looks them up, caches them a minute and
admits nobody when Slack can't say."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.fakeslack import FakeSlack
from bot.fakeslack.state import FINANCE_GROUP_ID, ONCALL_GROUP_ID, Directory
from bot.slack.approvals.people import CACHE_SECONDS, People
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, has_controls, text_is

TOKEN = "xoxb-test-token-0123456789"
AGENT = {"agent": "bot.testing.approval_agent:build"}


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    directory = Directory.default()
    directory.usergroups[FINANCE_GROUP_ID] = ["U_ALICE", "U_CAROL"]
    directory.channels["C_BIG"] = {**directory.channels["C_RANDOM"], "id": "C_BIG", "name": "big"}
    directory.channel_members["C_BIG"] = [f"U_{n:04d}" for n in range(2500)]
    async with FakeSlack(TOKEN, directory=directory) as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=fake.api_url)


# --- the fake Slack's two new methods ------------------------------------------------------------------------------


async def test_usergroups_list_gives_each_group_with_its_handle_and_users_when_asked(client: AsyncWebClient) -> None:
    plain = await client.usergroups_list()
    assert [(g["id"], g["handle"]) for g in plain["usergroups"]] == [
        (ONCALL_GROUP_ID, "oncall"),
        (FINANCE_GROUP_ID, "finance"),
    ]
    assert all("users" not in g and "user_count" not in g for g in plain["usergroups"])
    full = await client.usergroups_list(include_users=True, include_count=True)
    fin = next(g for g in full["usergroups"] if g["id"] == FINANCE_GROUP_ID)
    assert fin["users"] == ["U_ALICE", "U_CAROL"] and fin["user_count"] == 2 and fin["is_usergroup"] is True
    with pytest.raises(SlackApiError) as bad:
        await client.api_call("usergroups.list", http_verb="GET", params={"include_users": "maybe"})
    assert bad.value.response["error"] == "invalid_arguments"


async def test_conversations_members_pages_and_refuses_as_slack_does(client: AsyncWebClient) -> None:
    first = await client.conversations_members(channel="C_BIG", limit=1000)
    assert len(first["members"]) == 1000
    cursor = first["response_metadata"]["next_cursor"]
    second = await client.conversations_members(channel="C_BIG", limit=1000, cursor=cursor)
    assert second["members"][0] == "U_1000"
    general = await client.conversations_members(channel=GENERAL)
    assert set(general["members"]) >= {ALICE, BOB, CAROL} and general["response_metadata"]["next_cursor"] == ""
    for params, error in (
        ({"channel": "C_NOPE"}, "channel_not_found"),
        ({"channel": GENERAL, "limit": 0}, "invalid_limit"),
        ({"channel": GENERAL, "limit": 1001}, "invalid_limit"),
        ({"channel": GENERAL, "cursor": "garbage"}, "invalid_cursor"),
        ({}, "invalid_arguments"),
    ):
        with pytest.raises(SlackApiError) as refused:
            await client.api_call("conversations.members", http_verb="GET", params=params)
        assert refused.value.response["error"] == error, params


# --- looking people up, cached -------------------------------------------------------------------------------------


async def test_handles_and_channels_are_looked_up_and_cached_a_minute(client: AsyncWebClient, fake: FakeSlack) -> None:
    now = [1000.0]
    people = People(client, clock=lambda: now[0])
    assert await people.group_members("@finance") == {ALICE, CAROL}
    assert await people.group_id("@finance") == FINANCE_GROUP_ID and await people.group_id("@nobody") is None
    assert await people.group_members("@nobody") == set()  # an unknown handle admits nobody
    assert len(await people.channel_members("C_BIG")) == 2500  # every page
    assert len(fake.calls_to("usergroups.list")) == 1 and len(fake.calls_to("conversations.members")) == 3
    fake.state.directory.usergroups[FINANCE_GROUP_ID] = [BOB]
    now[0] += CACHE_SECONDS - 1
    assert await people.group_members("@finance") == {ALICE, CAROL}  # still cached
    now[0] += 2
    assert await people.group_members("@finance") == {BOB}
    assert await people.groups_of(BOB, among=("@finance",)) >= {"@finance", FINANCE_GROUP_ID}


async def test_a_lookup_slack_refuses_keeps_the_last_known_members_or_none(
    client: AsyncWebClient, fake: FakeSlack
) -> None:
    now = [0.0]
    people = People(client, clock=lambda: now[0])
    assert await people.channel_members("C_NOPE") == set()  # channel_not_found: nobody
    assert await people.channel_members(GENERAL) >= {ALICE}
    del fake.state.directory.channel_members[GENERAL]
    fake.state.conversations.pop(GENERAL)
    now[0] += CACHE_SECONDS + 1
    assert await people.channel_members(GENERAL) >= {ALICE}  # refused now: the last known members


# --- through the fake Slack over signed HTTP ------------------------------------------------------------------------


def policy(tmp_path: Path, rules: str) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n" + rules + "  - tool: '*'\n")
    return {**AGENT, "approval_policy": str(path)}


async def requested(h: Any, user: str = ALICE) -> tuple[str, dict[str, Any]]:
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Done."))
    d = await h.ws.mention(user, GENERAL, "restart api")
    request = await h.ws.wait_for_message(
        channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: has_controls(m) or text_is("Done.")(m)
    )
    return d.message["ts"], request


async def test_an_approver_group_by_handle(fake_redis: aioredis.Redis, harness: Any, tmp_path: Path) -> None:
    settings = policy(tmp_path, "  - tool: restart_service\n    approvers: ['@oncall']\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        await h.ws.click(request, "Approve", user=CAROL)  # not in @oncall
        await h.ws.wait_for_ephemeral(user=CAROL, predicate=lambda m: "configured approvers" in m["text"])
        await h.settle()
        assert approval_agent.RESTARTS == []
        await h.ws.click(request, "Approve", user=BOB)  # in @oncall (S_ONCALL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]
        assert h.ws.fake.calls_to("usergroups.list")


async def test_approvers_as_a_channels_members(fake_redis: aioredis.Redis, harness: Any, tmp_path: Path) -> None:
    settings = policy(tmp_path, "  - tool: restart_service\n    approvers: [channel:C_RANDOM]\n")
    async with harness(fake_redis, settings=settings) as h:
        h.ws.state.directory.channel_members["C_RANDOM"].append(CAROL)
        thread, request = await requested(h)
        assert "members of <#C_RANDOM>" in blocks_text(request)
        await h.ws.click(request, "Approve", user=BOB)  # in the run's channel, not in C_RANDOM
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "configured approvers" in m["text"])
        await h.ws.click(request, "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]


async def test_a_rule_on_the_requesters_user_group(fake_redis: aioredis.Redis, harness: Any, tmp_path: Path) -> None:
    """On-call people restart without asking; anyone else is asked."""
    settings = policy(tmp_path, "  - tool: restart_service\n    requester: {groups: ['@oncall']}\n    require: never\n")
    async with harness(fake_redis, settings=settings) as h:
        _thread, reply = await requested(h, user=BOB)
        assert reply["text"] == "Done." and approval_agent.RESTARTS == ["api"]
        _thread, request = await requested(h, user=ALICE)
        assert has_controls(request) and approval_agent.RESTARTS == ["api"]
