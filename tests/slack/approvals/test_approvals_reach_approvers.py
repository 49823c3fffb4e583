"""A waiting approval reaches the people its policy rule lets decide it (issue 23 parts 1, 2, 4), through the fake
Slack over signed HTTP: each approver (a user, a user group's member, a named channel's member) sees it in their
App Home, with what they can do there (its quorum's progress, the standing grants the rule allows) and is reminded;
someone who may not decide is neither. A request's DM and channel copies keep their link back to the thread on
every update (a quorum's progress, the decision), and a redraw keeps the grant buttons the rule allows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.fakeslack.home_tab import click_home, home_view
from bot.fakeslack.state import BOT_USER_ID, Directory
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    CAROL,
    GENERAL,
    blocks_text,
    current,
    has_controls,
    open_homes,
    text_is,
)

AGENT = {"agent": "bot.testing.approval_agent:build"}
DAVE = "U_DAVE"  # in the run's channel, in no approver group: may not decide
LINK_BACK = f":link: Asked by <@{ALICE}> in <"


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


def policy(tmp_path: Path, rule: str) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - name: restarts\n    tool: restart_service\n" + rule + "  - tool: '*'\n")
    return {**AGENT, "approval_policy": str(path)}


def with_dave() -> Directory:
    directory = Directory.default()
    directory.add_user(DAVE, "dave")
    directory.channel_members["C_GENERAL"].append(DAVE)
    directory.channel_members["C_RANDOM"].append(CAROL)  # Carol decides as a member of #random
    return directory


async def requested(h: Any) -> tuple[str, dict[str, Any]]:
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Done."))
    d = await h.ws.mention(ALICE, GENERAL, "restart api")
    request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], request


async def tick(h: Any, *, after: float) -> None:
    """Carry out what is due ``after`` seconds from now (then the work it started)."""
    await h.settle()
    assert h.bot.scheduler is not None
    await h.bot.scheduler.tick(now=utcnow() + timedelta(seconds=after))
    await h.settle()


def buttons(view: dict[str, Any]) -> list[str]:
    return [
        e["text"]["text"]
        for b in view.get("blocks", [])
        if b.get("type") == "actions"
        for e in b.get("elements", [])
        if e.get("type") == "button"
    ]


async def test_each_approver_of_the_rule_sees_the_request_in_app_home_and_is_reminded_others_are_not(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Approvers a user group (``@oncall``: Bob) and a channel's members (``channel:C_RANDOM``: Carol); Dave, in the
    run's channel, is neither. Bob and Carol find it on Home with Approve and the rule's grant button, are
    reminded after an hour; Dave is not; Bob approves from Home."""
    rule = "    approvers: ['@oncall', channel:C_RANDOM]\n    grants: [once, thread]\n"
    settings = {**policy(tmp_path, rule), "ask_remind_after": "1h", "ask_remind_max": 1}
    async with harness(fake_redis, ttl=86400, settings=settings, directory=with_dave()) as h:
        await open_homes(h, DAVE, BOB, CAROL, ALICE)
        thread, _request = await requested(h)
        await tick(h, after=5)  # the Home refreshes
        for person in (BOB, CAROL):
            view = home_view(h.ws, person)
            assert view is not None and "restart_service" in blocks_text(view), person
            assert {"Approve", "Approve for that thread", "Decline"} <= set(buttons(view)), person  # away from it
        dave = home_view(h.ws, DAVE)  # opened: it lists nothing
        assert dave is not None and "restart_service" not in blocks_text(dave)
        assert home_view(h.ws, BOT_USER_ID) is None  # #random's bot: nobody
        await tick(h, after=3601)  # the reminder
        await tick(h, after=3601 + COALESCE_SECONDS + 1)  # its messages
        reminders = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread) if m["text"].startswith(":bell:")]
        for person in (ALICE, BOB, CAROL):
            assert [r for r in reminders if r.startswith(f":bell: <@{person}>:")], (person, reminders)
        assert not [r for r in reminders if f"<@{DAVE}>" in r or f"<@{BOT_USER_ID}>" in r]
        await click_home(h.ws, BOB, "Approve")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]


async def test_a_quorums_home_card_shows_its_progress_as_the_thread_card_does(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}, {CAROL}]\n    required: 2\n")
    async with harness(fake_redis, settings=settings, directory=with_dave()) as h:
        await open_homes(h, CAROL, DAVE)
        thread, request = await requested(h)
        await h.ws.click(request, "Approve", user=BOB)
        await tick(h, after=5)
        in_thread = blocks_text(await current(h, request))
        assert f"1 of 2: approved by <@{BOB}>" in in_thread
        carol = home_view(h.ws, CAROL)
        assert carol is not None and f"1 of 2: approved by <@{BOB}>" in blocks_text(carol)
        dave = home_view(h.ws, DAVE)  # opened: it lists nothing
        assert dave is not None and "restart_service" not in blocks_text(dave)
        await click_home(h.ws, CAROL, "Approve")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]
        assert f"Approved by <@{BOB}>, <@{CAROL}> (2 of 2)" in blocks_text(await current(h, request))


async def test_dm_copies_keep_their_link_back_through_the_quorums_redraws_and_the_decision(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}, {CAROL}]\n    required: 2\n    where: dm\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        bob = await h.ws.wait_for_message(channel="D_BOB", predicate=has_controls)
        carol = await h.ws.wait_for_message(channel="D_CAROL", predicate=has_controls)
        assert LINK_BACK in blocks_text(bob)
        await h.ws.click(bob, "Approve", user=BOB)
        await h.settle()
        for copy in (bob, carol):  # redrawn with the progress, still linking back
            now = blocks_text(await current(h, copy))
            assert f"1 of 2: approved by <@{BOB}>" in now and LINK_BACK in now and "|the thread> in <#C_GENERAL>" in now
        assert LINK_BACK not in blocks_text(await current(h, request))  # the thread's own card needs none
        await h.ws.click(await current(h, carol), "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        for copy in (bob, carol):  # closed with the outcome, still linking back
            done = await current(h, copy)
            assert not has_controls(done) and "(2 of 2)" in blocks_text(done) and LINK_BACK in blocks_text(done)


async def test_a_channel_copy_keeps_its_link_back_when_declined(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    where: channel:C_RANDOM\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, _request = await requested(h)
        elsewhere = await h.ws.wait_for_message(channel="C_RANDOM", predicate=has_controls)
        await h.ws.click(elsewhere, "Decline", user=BOB)
        form = await h.ws.wait_for_view(user=BOB, predicate=lambda v: v.get("callback_id") == "approval_decline_modal")
        await h.ws.submit_view(form, {}, user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        done = blocks_text(await current(h, elsewhere))
        assert f"Declined by <@{BOB}>" in done and LINK_BACK in done


async def test_a_redraw_after_an_edit_keeps_the_grant_buttons_the_rule_allows(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Bob edits the arguments: the request is redrawn with the new ones while his approval is claimed; every drawing
    of it that still offers Approve offers the rule's grants too."""
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    edit: [name]\n    grants: [once, thread, always]\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        offered = {"Approve", "Approve for this thread", "Approve always (these arguments)"}
        assert offered <= set(buttons(request))
        await h.ws.click(request, "Edit", user=BOB)
        form = await h.ws.wait_for_view(user=BOB, predicate=lambda v: v.get("callback_id") == "approval_edit_modal")
        await h.ws.submit_view(form, {"edit:name": {"edit_value": "api-canary"}}, user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api-canary"]
        redraws = [
            drawn
            for call in h.ws.fake.calls_to("chat.update")
            if call.params.get("ts") == request["ts"]
            and "Approve" in buttons(drawn := {"blocks": _blocks(call.params.get("blocks"))})
        ]
        assert redraws and all("*name*: api-canary" in blocks_text(d) for d in redraws)
        assert all(offered <= set(buttons(d)) for d in redraws)


def _blocks(raw: Any) -> list[dict[str, Any]]:
    return json.loads(raw) if isinstance(raw, str) else list(raw or [])
