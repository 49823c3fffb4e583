"""Tool approval in Slack: the request shows what the agent wants to run, who may decide decides exactly once,
a declined call never runs (the model is told why), and the message says who decided and how the call went."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.slack.replies.thread_writer import ran_in
from bot.testing import approval_agent
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, CAROL, GENERAL, blocks_text, current, has_controls

AGENT = {"agent": "bot.testing.approval_agent:build"}


@pytest.fixture(autouse=True)
def fresh_service() -> Iterator[None]:
    approval_agent.RESTARTS.clear()
    approval_agent.GATE.clear()
    yield
    approval_agent.GATE.clear()


async def request(h: Any, *, name: str = "api", then: str = "Done.") -> tuple[str, dict[str, Any]]:
    h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": name}, id="r1")]), Reply(text=then))
    d = await h.ws.mention(ALICE, GENERAL, f"restart {name}")
    message = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], message


async def test_approve_runs_the_tool_once_and_the_message_says_who_and_how_it_went(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread, q = await request(h, then="Restarted api.")
        shown = blocks_text(q)
        assert "restart_service" in shown and "Restart a service." in shown and "*name*: api" in shown
        assert "Waiting for <@U_ALICE>" in shown
        await h.ws.click(q, "Approve", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Restarted api."
        )
        await h.ws.click(q, "Approve", user=ALICE, as_seen=True)  # a double click
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
        done = await current(h, q)
        assert not has_controls(done) and "Approved by <@U_ALICE>" in blocks_text(done)
        assert "ran in under 0.1 s" in blocks_text(done)  # the test's tool takes no time (it read "ran in 0.0 s")
        assert h.model.requests[-1]["messages"][-1]["content"] == "api restarted"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "ran in under 0.1 s"),
        (0.049, "ran in under 0.1 s"),
        (0.05, "ran in 0.1 s"),
        (2.44, "ran in 2.4 s"),
        (59.9, "ran in 59.9 s"),
        (185, "ran in 3 min"),
    ],
)
def test_how_long_an_approved_call_ran_reads_as_a_person_would_say_it(seconds: float, shown: str) -> None:
    assert ran_in(seconds) == shown


async def test_while_an_approved_call_runs_the_status_says_it_is_running(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """The segment an approval starts runs the tool first: its status said "is thinking..." all through the call
    (the run's stream told no call starting: its tool-call chunk was the earlier segment's)."""
    async with harness(fake_redis, settings=AGENT) as h:
        gate = approval_agent.GATE["gate"] = asyncio.Event()
        thread, q = await request(h, then="Restarted api.")
        try:
            await h.ws.click(q, "Approve", user=ALICE)
            await h.ws.wait_for_message(  # this segment's reply shows the call running (its post clears the status)
                channel=GENERAL,
                thread_ts=thread,
                predicate=lambda m: (m.get("tasks") or {}).get("r1", {}).get("status") == "in_progress",
            )
            posted = h.ws.calls("chat.startStream")[-1]
            await h.ws.wait_for_call(  # shown again once that post went out
                "assistant.threads.setStatus",
                predicate=lambda c: c.at > posted.at and c.params.get("status") == "is running restart_service...",
            )
            assert h.ws.state.status_of(GENERAL, thread) == "is running restart_service..."
            assert approval_agent.RESTARTS == ["api"]  # running, held by the gate
        finally:
            gate.set()
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Restarted api."
        )
        await h.settle()
        assert h.ws.state.status_of(GENERAL, thread) == ""  # cleared at the end


async def test_a_failing_tool_shows_it_failed(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread, q = await request(h, name="broken", then="It failed.")
        await h.ws.click(q, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "It failed.")
        assert "failed: tool restart_service failed" in blocks_text(await current(h, q))


async def test_decline_with_a_reason_never_runs_and_the_model_is_told(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread, q = await request(h, then="OK, not restarting.")
        await h.ws.click(q, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        ack = await h.ws.submit_view(form, {"decline_reason": {"reason_text": "it's peak hours"}}, user=ALICE)
        assert ack.status == 200 and not ack.body
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "OK, not restarting."
        )
        assert approval_agent.RESTARTS == []
        told = json.loads(h.model.requests[-1]["messages"][-1]["content"])
        assert told == {"status": "declined", "reason": "it's peak hours", "declined_by": ALICE}
        done = await current(h, q)
        assert "Declined by <@U_ALICE>: it's peak hours" in blocks_text(done) and not has_controls(done)


async def test_the_decline_forms_label_says_optional_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    """Slack shows "(optional)" after an optional input's label itself: the label said it too ("Reason (optional)
    (optional)")."""
    async with harness(fake_redis, settings=AGENT) as h:
        _thread, q = await request(h)
        await h.ws.click(q, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        reason = next(b for b in form["blocks"] if b["type"] == "input")
        assert reason["optional"] is True and reason["label"]["text"] == "Reason"


async def test_decline_without_a_reason_is_fine(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        thread, q = await request(h, then="Fine.")
        await h.ws.click(q, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        await h.ws.submit_view(form, {}, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Fine.")
        assert json.loads(h.model.requests[-1]["messages"][-1]["content"])["reason"] is None


async def test_details_show_the_full_arguments(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        _thread, q = await request(h)
        await h.ws.click(q, "Details", user=BOB)  # anyone who sees the request may read it
        view = await h.ws.wait_for_view(user=BOB, predicate=lambda v: "force" in json.dumps(v["blocks"]))
        assert "*name*\\n```api```" in json.dumps(view["blocks"])


async def test_someone_not_allowed_to_approve_is_refused_and_nothing_runs(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        _thread, q = await request(h)
        await h.ws.click(q, "Approve", user=BOB)
        note = await h.ws.wait_for_ephemeral(user=BOB)
        assert "Only <@U_ALICE> can approve" in note["text"]
        await h.ws.click(q, "Decline", user=BOB)
        await h.ws.wait_for_view(user=BOB, predicate=lambda v: "Only <@U_ALICE>" in json.dumps(v["blocks"]))
        await h.settle()
        assert approval_agent.RESTARTS == [] and has_controls(await current(h, q))


async def test_approvers_can_be_named_people_and_user_groups(fake_redis: aioredis.Redis, harness: Any) -> None:
    """APPROVERS names who may decide: the requester (Alice) may not, Carol may, and Bob may as a member of
    the on-call user group (resolved with usergroups.users.list)."""
    async with harness(fake_redis, settings={**AGENT, "approvers": "U_CAROL,S_ONCALL"}) as h:
        thread, q = await request(h, then="Done by on-call.")
        assert "<@U_CAROL>" in blocks_text(q) and "S_ONCALL" in blocks_text(q)
        await h.ws.click(q, "Approve", user=ALICE)
        assert "configured approvers" in (await h.ws.wait_for_ephemeral(user=ALICE))["text"]
        await h.ws.click(q, "Approve", user=BOB)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Done by on-call."
        )
        assert approval_agent.RESTARTS == ["api"] and h.ws.calls("usergroups.users.list")
        assert not h.ws.ephemerals(user=CAROL)


async def test_a_late_decision_says_who_decided_what_and_that_it_was_not_recorded(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Once Bob approved, Carol's Approve is told Bob had already approved (hers not recorded), and Bob's second
    click that his approval was recorded: never a bare "Your answer was recorded."."""
    async with harness(fake_redis, settings={**AGENT, "approvers": "U_BOB,U_CAROL"}) as h:
        thread, q = await request(h, then="Restarted.")
        await h.ws.click(q, "Approve", user=BOB)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Restarted.")
        await h.settle()
        await h.ws.click(q, "Approve", user=CAROL, as_seen=True)
        note = await h.ws.wait_for_ephemeral(user=CAROL)
        assert note["text"] == "<@U_BOB> had already approved this; your approval was not recorded."
        await h.ws.click(q, "Approve", user=BOB, as_seen=True)
        mine = await h.ws.wait_for_ephemeral(user=BOB)
        assert mine["text"] == "Your approval was recorded."
        await h.ws.click(q, "Decline", user=CAROL, as_seen=True)  # its form says so, not "no longer open"
        told = "<@U_BOB> had already approved this; your decline was not recorded."
        await h.ws.wait_for_view(user=CAROL, predicate=lambda v: told in json.dumps(v["blocks"]))
        assert approval_agent.RESTARTS == ["api"]


async def test_ten_people_approving_at_once_run_the_tool_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings={**AGENT, "approvers": "channel"}) as h:
        thread, q = await request(h, then="Once.")
        users = [ALICE, BOB, CAROL] * 4
        acks = await asyncio.gather(*(h.ws.click(q, "Approve", user=u, as_seen=True) for u in users[:10]))
        assert all(a.status == 200 for a in acks)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Once.")
        await h.settle()
        assert approval_agent.RESTARTS == ["api"]
