"""Batches (issue 23 part 5): several calls of one turn that wait for approval are asked together: a header with
Approve all, then each call's own request. Approve all approves the calls the clicking person may approve alone;
a call decided on its own card waits for the rest of the batch; the run goes on once every call is decided, the
calls running in the model's order. Through the fake Slack over signed HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.fakeslack.state import Directory
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    CAROL,
    GENERAL,
    action_payload,
    blocks_text,
    current,
    has_controls,
    past_deadline,
    text_is,
    thread_run_id,
)

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


def deadlines_policy(tmp_path: Path, web_rule: str) -> dict[str, Any]:
    """api's calls: the requester decides within 10 minutes; web's: as ``web_rule`` says (YAML lines)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n"
        "  - name: web\n    tool: restart_service\n    when: {name: web}\n" + web_rule + "  - name: quick\n"
        "    tool: '*'\n    approvers: [requester]\n    deadline: 10m\n"
    )
    return {**AGENT, "approval_policy": str(policy)}


async def tick(h: Any, *, after: timedelta) -> None:
    assert h.bot.scheduler is not None
    await h.bot.scheduler.tick(now=utcnow() + after)
    await h.settle()


async def test_each_call_of_a_batch_waits_until_its_own_rules_deadline(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """api's rule gives it 10 minutes, web's 2 hours: at api's deadline api alone is declined "no answer" (its card
    says so), web still waits and may be approved; the run goes on once it is (before: both were declined at the
    batch's first call's deadline, web's own 2 hours ignored)."""
    settings = deadlines_policy(tmp_path, "    approvers: [requester]\n    deadline: 2h\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, _header, api, web = await two_restarts(h)
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        assert state.pending is not None and [c.tool_call_id for c in state.pending.calls()] == ["r_api", "r_web"]
        left = [c.expires_at - utcnow() for c in state.pending.calls() if c.expires_at is not None]
        assert timedelta(minutes=9) < left[0] < timedelta(minutes=11) < timedelta(hours=1, minutes=59) < left[1]
        await past_deadline(h, thread, call="r_api")
        await tick(h, after=timedelta(minutes=11))
        closed = await current(h, api)
        assert not has_controls(closed) and "No decision in time" in blocks_text(closed)
        assert has_controls(await current(h, web)) and len(h.model.requests) == 1  # web waits: nothing went on
        assert (await h.bot.agent.get_run(state.run_id)).status == "suspended"
        await h.ws.click(api, "Approve", user=ALICE, as_seen=True)  # too late for api
        await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "in time" in m["text"] or "expired" in m["text"])
        await h.ws.click(web, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["web"]
        results = {m["tool_call_id"]: m["content"] for m in h.model.requests[-1]["messages"] if m["role"] == "tool"}
        assert json.loads(results["r_api"])["outcome"] == "no_answer" and results["r_web"] == "web restarted"


async def test_a_late_click_on_one_call_of_a_batch_leaves_the_others_open(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """A click on api after its deadline, before the scheduler comes to it: told it is too late, api's card closes,
    the run is not closed as a whole: web may still be approved (before: the run was marked expired, web's click
    refused as expired)."""
    settings = deadlines_policy(tmp_path, "    approvers: [requester]\n    deadline: 2h\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, _header, api, web = await two_restarts(h)
        await past_deadline(h, thread, call="r_api")
        await h.ws.click(api, "Approve", user=ALICE)
        await h.ws.wait_for_ephemeral(user=ALICE)
        await h.settle()
        assert not has_controls(await current(h, api)) and has_controls(await current(h, web))
        run_id = await thread_run_id(h, thread)
        assert (await h.bot.agent.get_run(run_id)).status == "suspended"
        await h.ws.click(web, "Approve", user=ALICE)
        await h.settle()
        assert approval_agent.RESTARTS == [] and "runs once the other calls" in blocks_text(await current(h, web))
        await tick(h, after=timedelta(minutes=11))  # api's deadline: declined, and the batch is complete
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["web"]


async def test_a_later_call_of_a_batch_escalates_at_its_own_rules_deadline(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """web's rule: Bob within 10 minutes, then escalated to Dana; api's (the batch's first call): the requester
    within 10 minutes. At the deadline api is declined and web goes to Dana by DM, who approves it (before: web's
    escalation was dropped, ``extend_approval`` refusing a call that is not the batch's first, and web declined)."""
    dana = "U_DANA"
    web_rule = f"    approvers: [{BOB}]\n    deadline: 10m\n    on_deadline: {{escalate: [{dana}]}}\n"
    directory = Directory.default()
    directory.add_user(dana, "dana")
    async with harness(fake_redis, settings=deadlines_policy(tmp_path, web_rule), directory=directory) as h:
        thread, _header, api, web = await two_restarts(h)
        await past_deadline(h, thread)
        await tick(h, after=timedelta(minutes=11))
        await tick(h, after=timedelta(minutes=11, seconds=COALESCE_SECONDS + 1))  # the DM
        copy = await h.ws.wait_for_message(channel="D_DANA", predicate=has_controls)
        assert "*name*: web" in blocks_text(copy)
        assert "No decision in time" in blocks_text(await current(h, api)) and has_controls(await current(h, web))
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        extended = state.waiting_call("r_web")
        assert state.status == "suspended" and extended is not None and extended.expires_at is not None
        assert extended.expires_at - utcnow() > timedelta(minutes=9)  # the rule's deadline again
        await h.ws.click(copy, "Approve", user=dana)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["web"]


async def test_with_on_timeout_close_the_first_deadline_of_a_batch_closes_all_of_it(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """``ASK_ON_TIMEOUT=close``: the run can't go on without api, so api's deadline closes the whole batch (web's
    card too), nothing runs."""
    settings = deadlines_policy(tmp_path, "    approvers: [requester]\n    deadline: 2h\n")
    async with harness(fake_redis, settings={**settings, "ask_on_timeout": "close"}) as h:
        thread, _header, api, web = await two_restarts(h)
        await past_deadline(h, thread, call="r_api")
        await tick(h, after=timedelta(minutes=11))
        for request in (api, web):
            assert not has_controls(await current(h, request))
        assert (await h.bot.agent.get_run(await thread_run_id(h, thread))).status == "expired"
        assert approval_agent.RESTARTS == [] and len(h.model.requests) == 1


async def test_an_edit_of_a_later_call_of_a_batch_changes_that_call_alone(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Edit (and approve) web, the batch's second call: api still waits, web runs with the edited name once api is
    decided (before: the edited call took the batch's place, the batch was lost, the original web ran unapproved and
    the run failed on mismatched tool results)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - tool: '*'\n    approvers: [requester]\n    edit: [name]\n")
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        thread, _header, api, web = await two_restarts(h)
        await h.ws.click(web, "Edit", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_edit_modal")
        ack = await h.ws.submit_view(form, {"edit:name": {"edit_value": "web2"}}, user=ALICE)
        assert ack.status == 200 and not ack.body
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, api))
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        assert state.pending is not None and [c.tool_call_id for c in state.pending.calls()] == ["r_api", "r_web"]
        await h.ws.click(api, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["api", "web2"]
        told = {m["tool_call_id"]: m["content"] for m in h.model.requests[-1]["messages"] if m["role"] == "tool"}
        assert 'After (what ran): {"force": false, "name": "web2"}' in told["r_web"]  # the model is told


@pytest.mark.parametrize("first", ["timed out", "approved"])
async def test_a_mention_while_a_later_call_of_a_batch_waits_starts_no_run(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, first: str
) -> None:
    """api is decided (declined at its deadline, or approved), web still waits: a mention in the thread is told to use
    web's buttons, and no new run takes the thread (before: a new run took it, and web's approval later finished
    the old batch, whose reply then came into the same thread; or api's deadline closed web unasked)."""
    settings = deadlines_policy(tmp_path, "    approvers: [requester]\n    deadline: 2h\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, _header, api, web = await two_restarts(h)
        if first == "approved":
            await h.ws.click(api, "Approve", user=ALICE)
        else:
            await past_deadline(h, thread, call="r_api")
            await tick(h, after=timedelta(minutes=11))
        await h.settle()
        run_id = await thread_run_id(h, thread)
        h.model.script(Reply(text="A new run."))
        await h.ws.mention(ALICE, GENERAL, "what now?", thread_ts=thread)
        told = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "Approve or Decline" in told["text"]
        await h.settle()
        assert await thread_run_id(h, thread) == run_id and len(h.model.requests) == 1
        assert has_controls(await current(h, web))
        await h.ws.click(web, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))


async def test_approve_all_with_one_call_past_its_own_deadline_approves_the_rest(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """api is past its deadline (the scheduler not there yet), web is open: Approve all approves web, and api is
    declined at its deadline (before: nothing was approved, "Some of these calls were decided meanwhile")."""
    settings = deadlines_policy(tmp_path, "    approvers: [requester]\n    deadline: 2h\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, header, _api, web = await two_restarts(h)
        await past_deadline(h, thread, call="r_api")
        await h.ws.click(header, "Approve all", user=ALICE)
        await h.settle()
        assert "Approve all" in blocks_text(await current(h, web)) and not has_controls(await current(h, web))
        await tick(h, after=timedelta(minutes=11))
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["web"]


async def test_the_requester_withdraws_her_request_with_cancel_and_only_she_may(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """A request needing Bob's and Carol's approvals, which Alice (who asked) can't approve or decline: her Cancel
    withdraws it (the whole batch: the model told each call was withdrawn), Bob's is refused (before: no way to
    withdraw it, and it counted toward her waiting limit until someone decided or it expired)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"rules:\n  - tool: '*'\n    approvers: [{BOB}, {CAROL}]\n    required: 2\n")
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        thread, _header, api, web = await two_restarts(h)
        assert '"Cancel"' in json.dumps(api["blocks"])
        await h.ws.click(api, "Cancel", user=BOB)
        told = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE> can withdraw this request" in told["text"]
        assert has_controls(await current(h, api))
        await h.ws.click(web, "Cancel", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        for request in (api, web):
            done = await current(h, request)
            assert not has_controls(done) and "Withdrawn by <@U_ALICE>" in blocks_text(done)
        assert approval_agent.RESTARTS == []
        results = {m["tool_call_id"]: m["content"] for m in h.model.requests[-1]["messages"] if m["role"] == "tool"}
        assert {json.loads(c)["outcome"] for c in results.values()} == {"cancelled"}


@pytest.mark.parametrize("said", ["reply", "mention"])
async def test_the_requester_saying_stop_in_the_thread_withdraws_her_waiting_request(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, said: str
) -> None:
    """Found by a break-it review: Alice (who asked, not an approver) says ``stop`` in the thread while the request
    waits: it is withdrawn, as her Cancel would (before: told once she may not decide it, then silence, the request
    left waiting). Bob (an approver) saying ``cancel`` is told to use the buttons; nothing is withdrawn by him."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"rules:\n  - tool: '*'\n    approvers: [{BOB}, {CAROL}]\n    required: 2\n")
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        thread, _header, api, web = await two_restarts(h)
        await h.ws.reply_in_thread(BOB, GENERAL, thread, "cancel")
        told = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Use the Approve or Decline button" in told["text"], told["text"]
        assert has_controls(await current(h, api))
        if said == "reply":
            await h.ws.reply_in_thread(ALICE, GENERAL, thread, "stop")
        else:
            await h.ws.mention(ALICE, GENERAL, "stop", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        for request in (api, web):
            done = await current(h, request)
            assert not has_controls(done) and "Withdrawn by <@U_ALICE>" in blocks_text(done)
        assert approval_agent.RESTARTS == []


@pytest.mark.parametrize("said", ["reply", "mention"])
async def test_the_requesters_stop_withdraws_the_open_calls_when_an_earlier_one_is_past_its_deadline(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, said: str
) -> None:
    """Found by a break-it review: api (the batch's first call) is past its own deadline, the scheduler not there yet,
    web still open: Alice's ``stop`` withdraws web, as its Cancel would (before: it tried api, and she was told "this
    question has expired, so your answer wasn't used"; web kept its buttons)."""
    settings = deadlines_policy(tmp_path, "    approvers: [requester]\n    deadline: 2h\n")
    async with harness(fake_redis, settings=settings) as h:
        thread, _header, _api, web = await two_restarts(h)
        await past_deadline(h, thread, call="r_api")
        if said == "reply":
            await h.ws.reply_in_thread(ALICE, GENERAL, thread, "stop")
        else:
            await h.ws.mention(ALICE, GENERAL, "stop", thread_ts=thread)
        await h.settle()
        done = await current(h, web)
        assert not has_controls(done) and "Withdrawn by <@U_ALICE>" in blocks_text(done)
        assert not [m for m in h.ws.ephemerals(user=ALICE) if "expired" in m["text"]]
        assert approval_agent.RESTARTS == []


async def test_the_model_is_told_who_edited_a_later_call_of_a_batch_under_a_quorum(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    """Carol edits web (the batch's second call) and Bob's approval completes its quorum: the model's note names
    Carol, who changed it, as the audit does (before: Bob, whose approval came last)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"rules:\n  - tool: '*'\n    approvers: [{BOB}, {CAROL}]\n    required: 2\n    edit: [name]\n")
    async with harness(fake_redis, settings={**AGENT, "approval_policy": str(policy)}) as h:
        thread, _header, api, web = await two_restarts(h)
        await h.ws.click(web, "Edit", user=CAROL)
        form = await h.ws.wait_for_view(user=CAROL, predicate=lambda v: v.get("callback_id") == "approval_edit_modal")
        await h.ws.submit_view(form, {"edit:name": {"edit_value": "web2"}}, user=CAROL)
        await h.settle()
        for request, user in ((web, BOB), (api, BOB), (api, CAROL)):
            await h.ws.click(await current(h, request), "Approve", user=user)
            await h.settle()
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        assert approval_agent.RESTARTS == ["api", "web2"]
        told = {m["tool_call_id"]: m["content"] for m in h.model.requests[-1]["messages"] if m["role"] == "tool"}
        assert told["r_web"].startswith(f"Note: {CAROL} changed this call's arguments"), told["r_web"]


async def test_a_withdrawn_batch_shows_how_its_approved_call_went_and_late_clicks_say_request(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Alice approves web, then withdraws the batch with api's Cancel: web (approved) runs and its card says how it
    went (before: "runs once the other calls ... are decided" for good); a late click on api is told the request was
    withdrawn (before: "This question was withdrawn")."""
    async with harness(fake_redis, settings=AGENT) as h:
        thread, _header, api, web = await two_restarts(h)
        await h.ws.click(web, "Approve", user=ALICE)
        await h.settle()
        await h.ws.click(api, "Cancel", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        await h.settle()
        assert approval_agent.RESTARTS == ["web"]
        assert "ran in" in blocks_text(await current(h, web)) and "runs once" not in blocks_text(await current(h, web))
        await h.ws.click(api, "Approve", user=ALICE, as_seen=True)
        told = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "withdrawn" in m["text"])
        assert told["text"] == "This approval request was withdrawn by you."


@pytest.mark.parametrize("named", ["another thread's reply", "a call's own request", "the thread's first message"])
async def test_approve_all_whose_container_names_another_message_rewrites_none(
    fake_redis: aioredis.Redis, harness: Any, named: str
) -> None:
    """A signed Approve all whose ``container`` names another of the bot's messages (Bob's reply in another thread,
    with no ``thread_ts``; one of the batch's own requests; the thread's first message) replaced that message with
    the batch's header (a break-it pass): the calls are approved, only the header is ever rewritten as one."""
    async with harness(fake_redis, settings=AGENT) as h:
        h.model.script(Reply(text="Bob's own answer."))
        d = await h.ws.mention(BOB, GENERAL, "hello")
        bobs = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Bob's own answer.")
        )
        await h.settle()
        thread, header, api, _web = await two_restarts(h)
        root = next(m for m in h.ws.messages(GENERAL) if m["ts"] == thread)
        victim = {"another thread's reply": bobs, "a call's own request": api, "the thread's first message": root}[
            named
        ]
        container = {k: v for k, v in victim.items() if k != "thread_ts"} if named != "a call's own request" else victim
        approve_all = next(
            e
            for b in header["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["text"]["text"] == "Approve all"
        )
        await h.ws.sender.send_interaction(action_payload(h, container, approve_all, user=ALICE))
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Both handled."))
        await h.settle()
        assert approval_agent.RESTARTS == ["api", "web"]
        rewritten = [c.params.get("text") for c in h.ws.calls("chat.update") if c.params.get("ts") == victim["ts"]]
        assert not any("calls need approval" in str(t) for t in rewritten), rewritten
