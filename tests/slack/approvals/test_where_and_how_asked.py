"""Where a request is asked and how its arguments are shown (issue 23 part 1, the rule's ``where``, ``arguments``
and ``deadline``), through the fake Slack over signed HTTP: ``where: dm`` sends each approver a DM copy with a link
back to the thread, ``where: channel:C...`` a copy in that channel, and a decision on a copy updates the thread's
request too; ``arguments: details-only`` keeps the arguments out of the channel (Details shows them);
``deadline`` is the request's own."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.fakeslack.home_tab import home_view
from bot.fakeslack.state import Directory
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
    kept_shorter,
    open_homes,
    past_deadline,
    text_is,
    thread_run,
)
from bot.testing.tcp_proxy import TcpProxy

AGENT = {"agent": "bot.testing.approval_agent:build"}


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


def policy(tmp_path: Path, rule: str) -> dict[str, Any]:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - tool: restart_service\n" + rule + "  - tool: '*'\n")
    return {**AGENT, "approval_policy": str(path)}


async def requested(h: Any) -> tuple[str, dict[str, Any]]:
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "db-7"}, id="r1")]), Reply(text="Done."))
    d = await h.ws.mention(ALICE, GENERAL, "restart db-7")
    request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], request


async def test_a_person_an_approval_was_escalated_to_approves_it_once_and_gives_no_standing_grant(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Found by a break-it review: Dana, to whom the request was escalated at its deadline, clicks "Approve for this
    thread". The call runs, approved by her, once; she is told grants are the rule's approvers' to give, and none is
    recorded (before: a grant shown live on her Home and in the outcome, which covered nothing: the next call in the
    thread was asked again all the same). Her DM copy and her App Home offer her no grant button at all (before:
    offered, then refused)."""
    dana = "U_DANA"
    rule = (
        f"    approvers: [{BOB}]\n    grants: [once, thread]\n    deadline: 10m\n"
        f"    on_deadline: {{escalate: [{dana}]}}\n"
    )
    directory = Directory.default()
    directory.add_user(dana, "dana")
    async with harness(fake_redis, settings=policy(tmp_path, rule), directory=directory) as h:
        await open_homes(h, dana)
        thread, request = await requested(h)
        assert "Approve for this thread" in blocks_text(request)  # Bob's, the rule's approver, in the thread
        await past_deadline(h, thread)
        await h.bot.scheduler.tick(now=utcnow() + timedelta(minutes=11))
        await h.settle()
        await h.bot.scheduler.tick(now=utcnow() + timedelta(minutes=11, seconds=COALESCE_SECONDS + 1))
        await h.settle()
        copy = await h.ws.wait_for_message(channel="D_DANA", predicate=has_controls)
        home = home_view(h.ws, dana)
        assert home is not None and "restart_service" in blocks_text(home) and "Approve" in blocks_text(home)
        for drawing in (copy, home):  # hers: Approve (once), no grant to give
            assert "Approve for" not in blocks_text(drawing) and "Approve always" not in blocks_text(drawing)
        await h.ws.click(await current(h, request), "Approve for this thread", user=dana)  # the thread's, as Bob's
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        told = await h.ws.wait_for_ephemeral(user=dana)
        assert "Approved once: standing grants are given by the rule's own approvers" in told["text"], told["text"]
        assert approval_agent.RESTARTS == ["db-7"]
        assert "for this thread until" not in blocks_text(await current(h, copy))
        assert [k async for k in fake_redis.scan_iter("*grant*")] == []  # none recorded


async def test_where_dm_asks_each_approver_by_dm_and_a_decision_there_closes_the_thread_request(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}, '@oncall', {CAROL}]\n    where: dm\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        bob = await h.ws.wait_for_message(channel="D_BOB", predicate=has_controls)
        carol = await h.ws.wait_for_message(channel="D_CAROL", predicate=has_controls)
        assert len([m for m in h.ws.messages("D_BOB") if has_controls(m)]) == 1  # Bob once, named and in @oncall
        assert not [m for m in h.ws.messages("D_ALICE") if has_controls(m)]  # the requester is not an approver
        assert f"Asked by <@{ALICE}> in <" in blocks_text(bob) and "|the thread> in <#C_GENERAL>" in blocks_text(bob)
        assert "*name*: db-7" in blocks_text(carol)
        await h.ws.click(carol, "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["db-7"]
        for message in (request, bob, carol):  # every copy shows the outcome, without controls
            done = await current(h, message)
            assert not has_controls(done) and f"Approved by <@{CAROL}>" in blocks_text(done)


async def test_where_a_channel_posts_a_copy_there_with_a_link_back(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    where: channel:C_RANDOM\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        elsewhere = await h.ws.wait_for_message(channel="C_RANDOM", predicate=has_controls)
        assert "|the thread> in <#C_GENERAL>" in blocks_text(elsewhere)
        await h.ws.click(elsewhere, "Decline", user=BOB)
        form = await h.ws.wait_for_view(user=BOB, predicate=lambda v: v.get("callback_id") == "approval_decline_modal")
        await h.ws.submit_view(form, {}, user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == []
        assert f"Declined by <@{BOB}>" in blocks_text(await current(h, request))


async def test_a_copy_elsewhere_says_that_thread_and_that_channel_and_its_grant_is_the_runs_channels(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Found by a review: a copy in #random offered "Approve in this channel", which there reads as #random; it
    says "that channel" (the run's, named above it), and the grant it gives is the run's channel's: the next
    request in #general runs without asking."""
    rule = f"    approvers: [{BOB}]\n    where: channel:C_RANDOM\n    grants: [once, thread, channel]\n"
    async with harness(fake_redis, settings=policy(tmp_path, rule)) as h:
        thread, request = await requested(h)
        elsewhere = await h.ws.wait_for_message(channel="C_RANDOM", predicate=has_controls)
        assert "Approve for this thread" in blocks_text(request) and "Approve in this channel" in blocks_text(request)
        assert "Approve for that thread" in blocks_text(elsewhere) and "Approve in that channel" in blocks_text(
            elsewhere
        )
        assert "this thread" not in blocks_text(elsewhere) and "this channel" not in blocks_text(elsewhere)
        await h.ws.click(elsewhere, "Approve in that channel", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "db-7"}, id="r2")]), Reply(text="Done."))
        again = await h.ws.mention(CAROL, GENERAL, "restart db-7")  # a new thread: the channel's grant covers it
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=again.message["ts"], predicate=text_is("Done."))
        said = " ".join(m.get("text", "") + blocks_text(m) for m in h.ws.messages(GENERAL))
        assert "ran without asking" in said and "in this channel" in said
        assert approval_agent.RESTARTS == ["db-7", "db-7"]


async def test_details_only_keeps_the_arguments_out_of_the_channel(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, "    arguments: details-only\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        assert "db-7" not in json.dumps(request) and "shown only in Details" in blocks_text(request)
        await h.ws.click(request, "Details", user=ALICE)
        details = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: "db-7" in json.dumps(v["blocks"]))
        assert "restart_service" in json.dumps(details["blocks"])
        await h.ws.click(request, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert "db-7" not in json.dumps(await current(h, request))  # the outcome neither
        assert approval_agent.RESTARTS == ["db-7"]


async def test_a_rules_deadline_is_the_requests_own(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    settings = policy(tmp_path, "    deadline: 90s\n")
    async with harness(fake_redis, ttl=3600, settings=settings) as h:
        thread, _request = await requested(h)
        state = await thread_run(fake_redis, prefix, thread)
        assert state.pending is not None and state.pending.expires_at is not None
        assert state.pending.expires_at - state.pending.suspended_at == timedelta(seconds=90)
        assert state.pending.suspend_payload["policy"] == {"rule": "rule 1", "arguments": "shown", "where": "thread"}


async def test_a_copy_away_from_the_thread_has_no_cancel(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """``where: dm``: Bob's DM copy offers Approve, Decline, Details, not the requester's Cancel, which her thread's
    request has (before: the copy showed it, and Bob's click was told only Alice may withdraw it)."""
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    where: dm\n")
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h)
        copy = await h.ws.wait_for_message(channel="D_BOB", predicate=has_controls)
        assert '"Cancel"' in json.dumps(request["blocks"]) and '"Cancel"' not in json.dumps(copy["blocks"])


async def test_on_deadline_escalate_asks_the_people_named_who_may_then_decide(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """Nobody decides within the rule's deadline: the request goes by DM to the people ``on_deadline`` names (user
    groups expanded), for the rule's deadline again, and they may decide it."""
    dana = "U_DANA"
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    deadline: 10m\n    on_deadline: {{escalate: [{dana}]}}\n")
    directory = Directory.default()
    directory.add_user(dana, "dana")
    async with harness(fake_redis, settings=settings, directory=directory) as h:
        await open_homes(h, dana)
        thread, request = await requested(h)
        await h.ws.click(request, "Approve", user=dana)  # not an approver before the deadline
        await h.ws.wait_for_ephemeral(user=dana, predicate=lambda m: "configured approvers" in m["text"])
        await past_deadline(h, thread)
        assert await h.bot.scheduler.tick(now=utcnow() + timedelta(minutes=11)) >= 1
        await h.settle()
        await h.bot.scheduler.tick(now=utcnow() + timedelta(minutes=11, seconds=COALESCE_SECONDS + 1))  # the DM
        copy = await h.ws.wait_for_message(channel="D_DANA", predicate=has_controls)
        await h.settle()
        await h.bot.scheduler.tick(
            now=utcnow() + timedelta(minutes=11, seconds=COALESCE_SECONDS + 5)
        )  # Home, debounced
        await h.settle()
        home = home_view(h.ws, dana)  # in her Home too, with the controls she may now use (before: not listed)
        assert home is not None and "db-7" in blocks_text(home) and '"Approve"' in json.dumps(home)
        assert "No decision in time: escalated to you" in blocks_text(copy) and "*name*: db-7" in blocks_text(copy)
        said = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "escalated to" in m["text"]
        )
        assert f"<@{dana}>" in said["text"]
        state = await thread_run(fake_redis, prefix, thread)
        assert state.status == "suspended" and state.pending is not None and state.pending.expires_at is not None
        assert state.pending.expires_at - utcnow() > timedelta(minutes=9)  # the rule's deadline again
        await h.ws.click(copy, "Approve", user=dana)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["db-7"]
        done = await current(h, request)
        assert f"Approved by <@{dana}>" in blocks_text(done) and not has_controls(done)


async def test_details_only_details_are_for_who_may_decide_and_who_asked(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    arguments: details-only\n")
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h)
        await h.ws.click(request, "Details", user=CAROL)  # in the channel, but not one who decides
        refused = await h.ws.wait_for_view(user=CAROL, predicate=lambda v: "Only the people" in json.dumps(v))
        assert "db-7" not in json.dumps(refused)
        assert not [c for c in h.ws.calls() if c.method.startswith("views.") and "db-7" in json.dumps(c.params)]
        for reader in (BOB, ALICE):  # the approver, and the requester
            await h.ws.click(request, "Details", user=reader)
            await h.ws.wait_for_view(user=reader, predicate=lambda v: "db-7" in json.dumps(v["blocks"]))


async def test_details_of_a_request_shown_in_the_channel_are_anyones(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n")
    async with harness(fake_redis, settings=settings) as h:
        _thread, request = await requested(h)
        await h.ws.click(request, "Details", user=CAROL)
        await h.ws.wait_for_view(user=CAROL, predicate=lambda v: "db-7" in json.dumps(v["blocks"]))


async def escalated_at_deadline(h: Any, dana: str, *, fault: Callable[[float], object]) -> tuple[str, dict[str, Any]]:
    """The request asked, its deadline passed, and the scheduler ticked over the next few minutes (the escalation,
    its DM a few seconds later, and each retry a lease later), ``fault(seconds)`` called before each tick."""
    await open_homes(h, dana)
    thread, request = await requested(h)
    await past_deadline(h, thread)
    for extra in (0, COALESCE_SECONDS + 1, 70, 140, 210):
        fault(extra)
        await h.bot.scheduler.tick(now=utcnow() + timedelta(minutes=11, seconds=extra))
        await h.settle()
    return thread, request


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_an_escalation_whose_new_deadline_redis_refused_still_reaches_the_people_named(
    proxied_redis: tuple[aioredis.Redis, TcpProxy], harness: Any, tmp_path: Path
) -> None:
    """The request is extended and escalated, then Redis refuses scheduling its new deadline: the DM and the thread's
    notice still go out (before: the retry found it escalated already and sent neither)."""
    client, proxy = proxied_redis
    dana = "U_DANA"
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    deadline: 10m\n    on_deadline: {{escalate: [{dana}]}}\n")
    directory = Directory.default()
    directory.add_user(dana, "dana")
    async with harness(client, settings=settings, directory=directory) as h:
        oom = b"OOM command not allowed when used memory > 'maxmemory'."
        refuse = functools.partial(proxy.refuse_next, containing=b'["deadline",', error=oom)
        thread, _request = await escalated_at_deadline(h, dana, fault=lambda at: at == 0 and refuse())
        copies = [m for m in h.ws.messages("D_DANA") if has_controls(m)]
        assert len(copies) == 1, "escalated to Dana, who was never told"
        said = [m for m in h.ws.messages(GENERAL, thread_ts=thread) if "escalated to" in m["text"]]
        assert len(said) == 1 and f"<@{dana}>" in said[0]["text"]
        await h.ws.click(copies[0], "Approve", user=dana)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["db-7"]


async def test_an_escalation_dm_slack_refused_is_sent_on_a_later_try(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Slack unavailable (through the client's own retries) at the escalation and at the next try: the DM still
    reaches Dana, once (before: a refused DM was dropped)."""
    dana = "U_DANA"
    settings = policy(tmp_path, f"    approvers: [{BOB}]\n    deadline: 10m\n    on_deadline: {{escalate: [{dana}]}}\n")
    directory = Directory.default()
    directory.add_user(dana, "dana")
    async with harness(fake_redis, settings=settings, directory=directory) as h:

        def fault(at: float) -> None:
            for _ in range(3 if at < 60 else 0):
                h.ws.fake.fail_next("chat.postMessage", "service_unavailable")

        await escalated_at_deadline(h, dana, fault=fault)
        assert len([m for m in h.ws.messages("D_DANA") if has_controls(m)]) == 1


async def test_what_a_request_waiting_past_the_run_retention_needs_is_kept_until_its_longest_wait_ends(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """A rule's deadline (30 days, twice that with its escalation) past ``RUN_RETENTION_SECONDS`` (7 days): every
    record the waiting request needs (the thread's, where it shows, its quorum, the inboxes) is kept past its
    longest wait plus the retention, as its run is. Before: 7 days after its last write, so an approval given then
    was lost, a click on a DM copy refused, and the copies left open (found by a break-it review)."""
    dana = "U_DANA"
    rule = f"    approvers: [{BOB}, {CAROL}]\n    required: 2\n    where: dm\n    deadline: 30d\n"
    settings = policy(tmp_path, rule + f"    on_deadline: {{escalate: [{dana}]}}\n")
    directory = Directory.default()
    directory.add_user(dana, "dana")
    async with harness(fake_redis, settings=settings, directory=directory) as h:
        await open_homes(h, BOB)
        _thread, request = await requested(h)
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        assert "1 of 2" in blocks_text(await current(h, request))
        short = await kept_shorter(fake_redis, prefix, than=60 * 86400 + 7 * 86400)  # the escalation's end + 7d
        run = [ttl for name, ttl in short.items() if name.startswith("run:")]  # to its present deadline (extended by
        assert run and run[0] > 37 * 86400 - 60  # the escalation, as its own record)
        assert [name for name in short if not name.startswith("run:")] == [], sorted(short.items())
