"""Quorum (issue 23 part 2): a rule's ``required: N`` distinct approvers, through the fake Slack over signed HTTP.
The request shows its progress ("1 of 2: approved by @bob"), each person counts once (a click delivered twice
too), one decline vetoes with its reason, an approval may be taken back until the quorum is reached, the requester
doesn't count once more than one is required, and the call runs once: also when the last two approvals arrive at
the same moment in two bot processes on the real Redis (two bots in this process, and two ``python -m bot serve``
OS processes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.fakeslack import Workspace
from bot.fakeslack.sender import Sender
from bot.fakeslack.state import Directory
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    CAROL,
    GENERAL,
    action_payload,
    blocks_text,
    button,
    current,
    has_controls,
    past_deadline,
    text_is,
    thread_run,
)
from tests.conftest import SECRET

AGENT = {"agent": "bot.testing.approval_agent:build"}
DAVE = "U_DAVE"


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    yield


def policy(tmp_path: Path, approvers: str = f"[requester, {BOB}, {CAROL}]", *, more: str = "") -> dict[str, Any]:
    """The settings of a policy whose restarts need two approvals of ``approvers``; ``more``: the rule's other
    lines."""
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n"
        "  - name: restarts need two\n"
        "    tool: restart_service\n"
        f"    approvers: {approvers}\n"
        "    required: 2\n"
        f"{more}"
        "  - name: default\n"
        '    tool: "*"\n'
    )
    return {**AGENT, "approval_policy": str(path)}


async def requested(h: Any, *, then: str = "Done.") -> tuple[str, dict[str, Any]]:
    """Alice asks for a restart of api; returns (thread_ts, the approval request)."""
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text=then))
    d = await h.ws.mention(ALICE, GENERAL, "restart api")
    request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], request


async def test_two_distinct_approvers_the_card_shows_progress_and_the_call_runs_once(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=policy(tmp_path)) as h:
        thread, request = await requested(h)
        shown = blocks_text(request)
        assert f"Needs 2 approvals from <@{BOB}>, <@{CAROL}> (not <@{ALICE}>, who asked)" in shown
        assert "0 of 2 approvals so far" in shown
        await h.ws.click(request, "Approve", user=ALICE)  # the requester: doesn't count once two are required
        refused = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "your own request can't count" in refused["text"]
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        now = await current(h, request)
        assert f"1 of 2: approved by <@{BOB}>" in blocks_text(now) and has_controls(now)
        assert approval_agent.RESTARTS == []
        await h.ws.click(request, "Approve", user=BOB, as_seen=True)  # a second click: counted once
        again = await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "already counted" in m["text"])
        assert f"1 of 2: approved by <@{BOB}>" in again["text"]
        await h.settle()
        assert approval_agent.RESTARTS == []
        await h.ws.click(request, "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        done = await current(h, request)
        assert not has_controls(done)
        assert f"Approved by <@{BOB}>, <@{CAROL}> (2 of 2)" in blocks_text(done)


async def test_a_redelivered_click_never_counts_twice(fake_redis: aioredis.Redis, harness: Any, tmp_path: Path) -> None:
    """The same signed click payload delivered again (Slack retries; a double click) by Bob, then the bot
    restarted: still one approval of two."""
    async with harness(fake_redis, settings=policy(tmp_path)) as h:
        _thread, request = await requested(h)
        await asyncio.gather(*(h.ws.click(request, "Approve", user=BOB, as_seen=True) for _ in range(4)))
        await h.settle()
        assert f"1 of 2: approved by <@{BOB}>" in blocks_text(await current(h, request))
        assert approval_agent.RESTARTS == []


async def test_an_approval_can_be_taken_back_until_the_quorum_is_reached(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=policy(tmp_path)) as h:
        thread, request = await requested(h)
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        await h.ws.click(await current(h, request), "Take back my approval", user=CAROL)  # she gave none
        await h.ws.wait_for_ephemeral(user=CAROL, predicate=lambda m: "nothing to take back" in m["text"])
        await h.ws.click(await current(h, request), "Take back my approval", user=BOB)
        await h.ws.wait_for_ephemeral(user=BOB, predicate=lambda m: "taken back" in m["text"])
        now = await current(h, request)
        assert "0 of 2 approvals so far" in blocks_text(now) and "Take back" not in blocks_text(now)
        await h.ws.click(now, "Approve", user=CAROL)
        await h.settle()
        one_of_two = await current(h, request)
        assert f"1 of 2: approved by <@{CAROL}>" in blocks_text(one_of_two)
        assert approval_agent.RESTARTS == []  # Bob's taken-back approval no longer counts
        await h.ws.click(request, "Approve", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.ws.click(one_of_two, "Take back my approval", user=CAROL, as_seen=True)  # too late: it ran
        await h.ws.wait_for_ephemeral(
            user=CAROL, predicate=lambda m: "no longer" in m["text"] or "Too late" in m["text"]
        )
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        assert f"Approved by <@{CAROL}>, <@{BOB}> (2 of 2)" in blocks_text(await current(h, request))


async def test_one_decline_vetoes_with_its_reason(fake_redis: aioredis.Redis, harness: Any, tmp_path: Path) -> None:
    async with harness(fake_redis, settings=policy(tmp_path)) as h:
        thread, request = await requested(h, then="Not restarting.")
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        await h.ws.click(await current(h, request), "Decline", user=CAROL)
        form = await h.ws.wait_for_view(
            user=CAROL, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        await h.ws.submit_view(form, {"decline_reason": {"reason_text": "not during the sale"}}, user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Not restarting."))
        await h.ws.click(request, "Approve", user=ALICE, as_seen=True)  # after the veto: nothing more counts
        await h.settle()
        assert approval_agent.RESTARTS == []
        told = json.loads(h.model.requests[-1]["messages"][-1]["content"])
        assert told == {"status": "declined", "reason": "not during the sale", "declined_by": CAROL}
        done = await current(h, request)
        assert "Declined by <@U_CAROL>: not during the sale" in blocks_text(done) and not has_controls(done)


async def test_the_requester_counts_when_the_rule_says_so(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        f"rules:\n  - tool: restart_service\n    approvers: [requester, {BOB}]\n    required: 2\n"
        "    requester_counts: true\n  - tool: '*'\n"
    )
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(path)}) as h:
        thread, request = await requested(h)
        assert "who asked" not in blocks_text(request)
        await h.ws.click(request, "Approve", user=ALICE)
        await h.settle()
        assert f"1 of 2: approved by <@{ALICE}>" in blocks_text(await current(h, request))
        await h.ws.click(request, "Approve", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]


async def test_the_last_two_approvals_at_once_in_two_processes_run_the_call_once(
    real_redis: aioredis.Redis, connect_real_redis: Any, harness: Any, tmp_path: Path
) -> None:
    """Bob approves (1 of 2); then Carol's click reaches process A and Dave's reaches process B at the same moment:
    each would complete the quorum alone; the call runs once and the card names the two whose approvals counted."""
    settings = policy(tmp_path, approvers=f"[{BOB}, {CAROL}, {DAVE}]")
    directory = Directory.default()
    directory.add_user(DAVE, "dave")
    async with harness(real_redis, settings=settings, directory=directory) as h:
        a = h.processes[0]
        b = await h.start_process(connect_real_redis())
        thread, request = await requested(h, then="Once.")
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        seen = await current(h, request)
        assert f"1 of 2: approved by <@{BOB}>" in blocks_text(seen)
        for _ in range(3):  # the Lua script serialises them whatever the interleaving: try a few
            await asyncio.gather(
                click_via(h, a, seen, user=CAROL),
                click_via(h, b, seen, user=DAVE),
            )
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Once."))
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        resumed = [r for r in h.model.requests if any(m.get("role") == "tool" for m in r["messages"])]
        assert len(resumed) == 1
        done = blocks_text(await current(h, request))
        assert (f"Approved by <@{BOB}>, <@{CAROL}> (2 of 2)" in done) != (f"Approved by <@{BOB}>, <@{DAVE}>" in done)


async def click_via(h: Any, process: Any, message: dict[str, Any], *, user: str) -> None:
    """``user`` clicks Approve on ``message`` as they saw it, the signed request going to ``process``."""
    sender = Sender(process.url, SECRET)
    try:
        ack = await sender.send_interaction(action_payload(h, message, button(message, 0), user=user))
        assert ack.status == 200
    finally:
        await sender.close()


async def completed_unclaimed(client: aioredis.Redis, prefix: str, thread: str) -> None:
    """Bob's approval, then Carol's completing the quorum, recorded (as their clicks would) with no claim made on
    the run: as a completing click's process that died (or was turned away) before claiming leaves it."""
    from bot.store import Keys
    from bot.store.conversations import asked_id
    from bot.store.quorum import Quorums, asking_of
    from bot.testing.slack_scenarios import thread_run

    state = await thread_run(client, prefix, thread)
    assert state.pending is not None
    asking = asking_of(asked_id(state.pending.suspended_at), state.pending.args)
    quorums = Quorums(client, keys=Keys(prefix))
    await quorums.approve(state.run_id, "r1", asking, user=BOB, required=2)
    assert (await quorums.approve(state.run_id, "r1", asking, user=CAROL, required=2)).status == "reached"


async def test_the_completing_approval_whose_claim_was_lost_is_claimed_when_its_click_comes_again(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """The process that recorded the last approval died before claiming the decision (the tally says complete, the
    run still waits): the click delivered again (the job redelivered to another worker) claims it, once."""
    async with harness(fake_redis, settings=policy(tmp_path)) as h:
        thread, request = await requested(h)
        await completed_unclaimed(fake_redis, prefix, thread)
        await h.ws.click(request, "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.ws.click(request, "Approve", user=CAROL, as_seen=True)
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        assert f"Approved by <@{BOB}>, <@{CAROL}>" in blocks_text(await current(h, request))


async def test_a_completed_quorum_whose_claim_was_never_made_is_carried_through_by_the_next_approvers_click(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """Carol's approval completed the quorum, but her click's claim was never made (her run slot was full, Redis
    failed, her process died): Dave's click (an approver whose approval is no longer needed) or Bob's carries the
    decision through, once. Before: each was told it had all its approvals, and the call waited to its deadline."""
    directory = Directory.default()
    directory.add_user(DAVE, "dave")
    async with harness(fake_redis, settings=policy(tmp_path, f"[{BOB}, {CAROL}, {DAVE}]"), directory=directory) as h:
        thread, request = await requested(h)
        await completed_unclaimed(fake_redis, prefix, thread)
        await h.ws.click(request, "Approve", user=DAVE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.ws.click(request, "Approve", user=BOB, as_seen=True)  # after it ran: nothing more
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        done = blocks_text(await current(h, request))
        assert f"Approved by <@{BOB}>, <@{CAROL}>" in done and f"<@{DAVE}>" not in done  # whose approvals counted


@pytest.mark.parametrize("escalates", [False, True], ids=["plain", "escalating-rule"])
async def test_a_quorum_completed_in_time_whose_claim_was_never_made_is_approved_at_the_deadline(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str, escalates: bool
) -> None:
    """Carol's approval completed the quorum before the deadline but its claim was never made (her process died, or
    she was at her run limit) and nobody clicked again: at the deadline the scheduler approves it as hers, at the
    moment it completed, and the call runs once (before: declined "no answer", though both approvals came in time;
    a rule that escalates at its deadline escalated it instead)."""
    escalating = f"    deadline: 10m\n    on_deadline: {{escalate: [{DAVE}]}}\n"
    settings = policy(tmp_path, more=escalating if escalates else "")
    directory = Directory.default()
    directory.add_user(DAVE, "dave")
    async with harness(fake_redis, settings=settings, directory=directory) as h:
        thread, request = await requested(h)
        await completed_unclaimed(fake_redis, prefix, thread)
        await past_deadline(h, thread, ago=timedelta(0))  # the deadline came just after the last approval
        assert await h.bot.scheduler.tick(now=utcnow() + timedelta(days=2)) >= 1
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        state = await thread_run(fake_redis, prefix, thread)
        assert [(a.answered_by, a.outcome) for a in state.answers] == [(CAROL, "answer")]  # not "no_answer"
        done = blocks_text(await current(h, request))
        assert f"Approved by <@{BOB}>, <@{CAROL}> (2 of 2)" in done and "no answer" not in done.lower()
        assert not [m for m in h.ws.messages(channel=GENERAL, thread_ts=thread) if "escalated" in m["text"]]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_quorum_approved_at_the_deadline_whose_claims_reply_is_lost_still_runs_once(
    real_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """Found by a break-it review: the deadline's claim of a completed quorum is applied and its reply lost (Redis
    failed under it): the scheduler finds its own claim made and goes on with the run, which nobody drives (before:
    taken for someone else's decision, or on the retry for a run going on already; the call never ran, the run
    stayed "running" and the request kept its buttons)."""
    from bot.store import connect_redis
    from bot.testing.tcp_proxy import TcpProxy

    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0")
        try:
            async with harness(client, settings=policy(tmp_path)) as h:
                thread, request = await requested(h)
                await completed_unclaimed(client, prefix, thread)
                await past_deadline(h, thread, ago=timedelta(0))
                # the claim: applied, then Redis gone (its reply and the client's retries lost) for 2 s
                proxy.cut_at(containing=b'"status":"running"', when="applied", lasting=2.0)
                await h.bot.scheduler.tick(now=utcnow() + timedelta(days=2))
                await h.settle()
                await asyncio.sleep(2.5)  # Redis is back
                await h.bot.scheduler.tick(now=utcnow() + timedelta(days=2, minutes=5))  # the scheduler's retry
                await h.settle()
                await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
                await h.settle()
                assert approval_agent.RESTARTS == ["api"]
                done = blocks_text(await current(h, request))
                assert not has_controls(await current(h, request)) and f"<@{CAROL}>" in done, done
                assert (await thread_run(client, prefix, thread)).status == "completed"
        finally:
            await client.aclose()


async def test_a_quorum_completed_after_the_deadline_is_not_approved_by_it(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """The neighbour: the last approval was counted after the deadline had passed (its click raced the deadline):
    the request is declined for want of a decision in time, as before, and the call does not run."""
    async with harness(fake_redis, settings=policy(tmp_path)) as h:
        thread, _request = await requested(h)
        await past_deadline(h, thread)
        await completed_unclaimed(fake_redis, prefix, thread)
        assert await h.bot.scheduler.tick(now=utcnow() + timedelta(days=2)) >= 1
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        assert approval_agent.RESTARTS == []
        state = await thread_run(fake_redis, prefix, thread)
        assert [a.outcome for a in state.answers] == ["no_answer"]


async def test_a_quorum_completed_by_someone_at_their_run_limit_is_carried_through_by_the_next_approval(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, prefix: str
) -> None:
    """Found by a break-it review: Carol's approval completes the quorum while her one run slot
    (``MAX_RUNS_PER_PERSON=1``) is held by a slow run of hers, so her click is turned away; Dave's approval then
    carries it through (before: "already has all the approvals it needs", and nothing ran)."""
    directory = Directory.default()
    directory.add_user(DAVE, "dave")
    settings = {**policy(tmp_path, f"[{BOB}, {CAROL}, {DAVE}]"), "max_runs_per_person": 1}
    async with harness(fake_redis, settings=settings, directory=directory) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        thread = d.message["ts"]
        request = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        h.model.responder = lambda body: Reply(text="Done." if "restarted" in str(body) else "busy", delay=1.0)
        await h.ws.mention(CAROL, GENERAL, "something slow")  # holds Carol's one run slot for a second
        await asyncio.sleep(0.2)
        await h.ws.click(request, "Approve", user=CAROL)
        await h.ws.wait_for_ephemeral(user=CAROL, predicate=lambda m: "still working" in m["text"])
        await h.settle()
        assert approval_agent.RESTARTS == []
        await h.ws.click(request, "Approve", user=DAVE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        # the decision is the quorum's, recorded as its completer's (not Dave's, whose approval was not needed),
        # and Carol, clicking again, is told her approval went through (found by a break-it review)
        state = await thread_run(fake_redis, prefix, thread)
        assert [a.answered_by for a in state.answers] == [CAROL]
        await h.ws.click(request, "Approve", user=CAROL, as_seen=True)
        told = await h.ws.wait_for_ephemeral(user=CAROL, predicate=lambda m: "still working" not in m["text"])
        assert f"<@{DAVE}>" not in told["text"] and "not recorded" not in told["text"], told["text"]


@pytest.mark.real_redis
async def test_the_last_two_approvals_at_once_in_two_os_processes_run_the_call_once(
    real_redis: aioredis.Redis,
    real_redis_env: dict[str, str],
    prefix: str,
    openai_server: Any,
    tmp_path: Path,
) -> None:
    """As above, with each bot a ``python -m bot serve --http`` process of its own on the real Redis: Bob approves
    (1 of 2); then Carol's click reaches process A and Dave's process B at the same moment, a few times over. The
    call runs once (the model is asked to go on once: the tool's result reaches it once) and the card names the two
    whose approvals counted."""
    from tests.slack.test_serve_process import TOKEN, clean_env, free_port, read_until, start_bot, stop

    directory = Directory.default()
    directory.add_user(DAVE, "dave")
    settings = policy(tmp_path, approvers=f"[{BOB}, {CAROL}, {DAVE}]")
    ports = [free_port(), free_port()]
    async with Workspace(
        f"http://127.0.0.1:{ports[0]}/slack/events", SECRET, bot_token=TOKEN, directory=directory
    ) as ws:
        env = clean_env(
            SLACK_BOT_TOKEN=TOKEN,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=ws.api_url,
            OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=openai_server.base_url,
            REDIS_PREFIX=prefix,
            AGENT=settings["agent"],
            APPROVAL_POLICY=settings["approval_policy"],
            LOG_LEVEL="INFO",
            **real_redis_env,
        )
        procs = [await start_bot("serve", "--http", env={**env, "PORT": str(port)}) for port in ports]
        logs: list[str] = []
        try:
            for proc in procs:
                logs += await read_until(proc, "HTTP mode")
            openai_server.script(
                Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Once.")
            )
            d = await ws.mention(ALICE, GENERAL, "restart api")
            budget = 60  # seconds: for a loaded machine (a parallel suite), not a speed requirement
            request = await ws.wait_for_message(
                channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls, timeout=budget
            )
            await ws.click(request, "Approve", user=BOB)
            seen = await ws.wait_for_message(
                channel=GENERAL,
                thread_ts=d.message["ts"],
                predicate=lambda m: m["ts"] == request["ts"] and f"1 of 2: approved by <@{BOB}>" in blocks_text(m),
                timeout=budget,
            )
            urls = [f"http://127.0.0.1:{port}/slack/events" for port in ports]
            for _ in range(3):  # whatever the interleaving: a few tries
                await asyncio.gather(
                    click_to(ws, urls[0], seen, user=CAROL),
                    click_to(ws, urls[1], seen, user=DAVE),
                )
            await ws.wait_for_message(
                channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Once."), timeout=budget
            )
        finally:
            for proc in procs:
                logs.append(await stop(proc))  # each drains its work first: every click is handled by now
        done = blocks_text(ws.state.conversations[GENERAL].messages[request["ts"]])
    assert all(proc.returncode == 0 for proc in procs), "\n".join(logs)
    resumed = [r for r in openai_server.requests if any(m.get("role") == "tool" for m in r["messages"])]
    assert len(resumed) == 1, "\n".join(logs)
    [result] = [m for m in resumed[0]["messages"] if m.get("role") == "tool"]
    assert result["content"] == "api restarted"
    assert (f"Approved by <@{BOB}>, <@{CAROL}> (2 of 2)" in done) != (f"Approved by <@{BOB}>, <@{DAVE}>" in done)


async def click_to(ws: Workspace, url: str, message: dict[str, Any], *, user: str) -> None:
    """``user`` clicks Approve on ``message`` as they saw it, the signed request going to the bot at ``url``."""
    sender = Sender(url, SECRET)
    try:
        ack = await sender.send_interaction(
            action_payload(SimpleNamespace(ws=ws), message, button(message, 0), user=user)
        )
        assert ack.status == 200
    finally:
        await sender.close()


async def test_an_approval_given_a_retention_ago_still_counts_while_the_request_waits(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """``RUN_RETENTION_SECONDS`` of 2 stands for the 7 days' default, the rule's hour for a deadline of weeks: Bob's
    approval, given more than a retention ago, still counts when Carol's comes (before: its tally had expired, and
    Carol's was "1 of 2"). Found by a break-it review."""
    path = tmp_path / "policy.yaml"
    path.write_text(f"rules:\n  - tool: restart_service\n    approvers: [{BOB}, {CAROL}]\n    required: 2\n")
    path.write_text(path.read_text() + "    deadline: 1h\n  - tool: '*'\n")
    settings = {**AGENT, "approval_policy": str(path), "run_retention_seconds": 2}
    async with harness(fake_redis, settings=settings) as h:
        thread, request = await requested(h)
        await h.ws.click(request, "Approve", user=BOB)
        await h.settle()
        assert f"1 of 2: approved by <@{BOB}>" in blocks_text(await current(h, request))
        await asyncio.sleep(2.5)  # a retention later; the request waits on (its deadline is an hour)
        await h.ws.click(await current(h, request), "Approve", user=CAROL)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Done."))
        assert approval_agent.RESTARTS == ["api"]
