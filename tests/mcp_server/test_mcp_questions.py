"""An MCP server's questions in Slack, through the fake Slack: buttons for Yes / No and one choice, a modal with a
field each for a form, typed replies, Decline; both protocol generations (tests/agent/mcp/servers/asking.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, blocks_text, current, has_controls

ASKING = str(Path(__file__).resolve().parent.parent / "agent" / "mcp" / "servers" / "asking.py")


def mcp_settings(tmp_path: Path, *, protocol: str = "auto") -> dict[str, Any]:
    entry: dict[str, Any] = {"command": sys.executable, "args": [ASKING], "env": {"MCP_TEST_RUNS": str(runs(tmp_path))}}
    if protocol != "auto":
        entry["protocol"] = protocol
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"ask": entry}}))
    return {"mcp_config": str(path)}


def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def ran(tmp_path: Path) -> list[str]:
    return runs(tmp_path).read_text().splitlines() if runs(tmp_path).exists() else []


async def ask(h: Any, tool: str, args: dict[str, Any], *, then: str = "Done.") -> tuple[str, dict[str, Any]]:
    await h.bot.start()
    h.model.script(Reply(tool_calls=[tool_call(f"ask__{tool}", args, id="q1")]), Reply(text=then))
    d = await h.ws.mention(ALICE, GENERAL, f"please {tool}")
    message = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
    return d.message["ts"], message


def buttons(message: dict[str, Any]) -> list[str]:
    return [
        e["text"]["text"]
        for b in message["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["type"] == "button"
    ]


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_yes_no_question_is_two_buttons_and_decline_and_a_click_answers_it(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, protocol: str
) -> None:
    async with harness(fake_redis, settings=mcp_settings(tmp_path, protocol=protocol)) as h:
        thread, q = await ask(h, "deploy", {"service": "web"}, then="Deployed web.")
        assert "Deploy web now?" in blocks_text(q) and buttons(q) == ["Yes", "No", "Decline", "Cancel"]
        await h.ws.click(q, "Yes", user=BOB)  # not the requester: refused, nothing taken
        await h.ws.click(q, "Yes", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Deployed web.")
        await h.settle()
        done = await current(h, q)
        assert not has_controls(done) and "answered: *Yes*" in blocks_text(done)
        assert ran(tmp_path) == ['deploy web: accept {"confirm":true}']
        assert h.model.requests[-1]["messages"][-1]["content"] == 'deploy web: accept {"confirm":true}'


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_once_answered_the_tool_that_asked_shows_as_running_again(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, protocol: str
) -> None:
    """The answer resumes the server's tool where it asked; the status said "is thinking..." while it ran on (the
    segment told no call starting)."""
    async with harness(fake_redis, settings=mcp_settings(tmp_path, protocol=protocol)) as h:
        thread, q = await ask(h, "deploy", {"service": "web"}, then="Deployed web.")
        asked = h.ws.calls("chat.postMessage")[-1]
        await h.ws.click(q, "Yes", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Deployed web.")
        after = [c.params["status"] for c in h.ws.calls("assistant.threads.setStatus") if c.at > asked.at]
        assert "is running ask__deploy..." in after, after


async def test_decline_tells_the_server_and_the_message_says_so(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=mcp_settings(tmp_path)) as h:
        thread, q = await ask(h, "pick_region", {}, then="Fine.")
        assert buttons(q) == ["Europe", "Americas", "Asia-Pacific", "Decline", "Cancel"]
        await h.ws.click(q, "Decline", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Fine.")
        await h.settle()
        assert "answered: *Declined*" in blocks_text(await current(h, q))
        assert ran(tmp_path) == ["pick_region: decline"]


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_typed_reply_answers_a_one_field_question_and_a_bad_number_is_refused_with_the_reason(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path, protocol: str
) -> None:
    async with harness(fake_redis, settings=mcp_settings(tmp_path, protocol=protocol)) as h:
        thread, q = await ask(h, "set_replicas", {}, then="Scaled.")
        assert "whole number" in blocks_text(q) and buttons(q) == ["Answer", "Decline", "Cancel"]
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "a dozen")
        told = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "couldn't take" in m["text"])
        assert "must be a whole number" in told["text"]
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "4")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Scaled.")
        await h.settle()
        assert ran(tmp_path) == ['set_replicas: accept {"replicas":4}']
        assert "answered: *4*" in blocks_text(await current(h, q))


async def test_a_form_of_several_fields_is_one_modal_that_shows_each_problem_under_its_field(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=mcp_settings(tmp_path)) as h:
        thread, q = await ask(h, "profile", {}, then="Saved.")
        assert buttons(q) == ["Answer", "Decline", "Cancel"] and "press Answer to fill in the form" in blocks_text(q)
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "Ada, 36, red")
        told = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "several fields" in m["text"])
        assert "press Answer" in told["text"]
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: v.get("callback_id") == "ask_form_modal")
        inputs = [b for b in form["blocks"] if b["type"] == "input"]
        assert [(b["label"]["text"], b["element"]["type"], b.get("optional", False)) for b in inputs] == [
            ("Name", "plain_text_input", False),
            ("Age", "plain_text_input", False),
            ("Favourite colour", "radio_buttons", False),
            ("Subscribe", "radio_buttons", True),
        ]
        ack = await h.ws.submit_view(form, {"Name": "Ada", "Age": "very", "Favourite colour": "green"}, user=ALICE)
        assert ack.json == {"response_action": "errors", "errors": {"field_1": "must be a whole number"}}
        assert ran(tmp_path) == []
        await h.ws.submit_view(
            form, {"Name": "Ada", "Age": "36", "Favourite colour": "green", "Subscribe": "Yes"}, user=ALICE
        )
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Saved.")
        await h.settle()
        assert ran(tmp_path) == ['profile: accept {"name":"Ada","age":36,"color":"green","subscribe":true}']
        shown = blocks_text(await current(h, q))
        assert "Name: Ada, Age: 36, Favourite colour: green, Subscribe: Yes" in shown


async def test_a_stale_click_on_an_earlier_question_of_the_same_call_does_not_answer_the_next(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    async with harness(fake_redis, settings=mcp_settings(tmp_path)) as h:
        thread, q1 = await ask(h, "two_questions", {}, then="Both done.")
        await h.ws.click(q1, "Decline", user=ALICE)
        q2 = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: has_controls(m) and "Second" in m["text"]
        )
        await h.ws.click(q1, "Decline", user=ALICE, as_seen=True)  # the second click of a double click
        told = await h.ws.wait_for_ephemeral(user=ALICE, predicate=lambda m: "no longer open" in m["text"])
        assert told
        await h.settle()
        assert has_controls(await current(h, q2)) and ran(tmp_path) == []
        await h.ws.click(q2, "Yes", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Both done.")
        assert ran(tmp_path)[-1] == 'two_questions: first: decline | second: accept {"second":true}'


async def test_where_slack_refuses_the_status_a_live_question_takes_the_working_reaction_away_while_it_waits(
    fake_redis: aioredis.Redis, harness: Any, tmp_path: Path
) -> None:
    # A live question (legacy protocol: asked inside tools/call) keeps its run segment going while it waits; the
    # question's post clears a status in Slack, but not the reaction shown where Slack refused the status.
    async with harness(fake_redis, settings=mcp_settings(tmp_path, protocol="legacy")) as h:
        h.ws.fake.fail_next("assistant.threads.setStatus", "missing_scope")
        thread, q = await ask(h, "deploy", {"service": "web"}, then="Deployed web.")
        await h.ws.wait_for_call("reactions.add")
        await asyncio.sleep(1.0)  # the run's segment goes on while the question waits
        waiting = (h.ws.state.message(GENERAL, thread) or {}).get("reactions")
        await h.ws.click(q, "Yes", user=ALICE)  # answered first: a failing check must not leave the run waiting
        assert not waiting  # the question waits for a person: nothing shows as working
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Deployed web.")
        await h.settle()
        assert not (h.ws.state.message(GENERAL, thread) or {}).get("reactions")
        assert len(h.ws.calls("reactions.add")) == len(h.ws.calls("reactions.remove"))  # shown again once working


async def test_an_outside_agents_question_stopped_before_anyone_answered_is_told_cancelled(
    real_redis: aioredis.Redis, make_agent: Any, prefix: str
) -> None:
    """An outside agent's question run whose process died before its question was saved is an orphan; a stop
    taken then makes whoever takes it over end it stopped (its one call gets ``{"status": "stopped"}``). The asking
    agent is told it was cancelled (it was told ``{"status": "answered", "answer": None}``)."""
    from bot.agent import Agent
    from bot.agent.asking import ask_run
    from bot.mcp_server.asker import outcome_of
    from bot.store import RedisRunStore

    agent: Agent = make_agent(real_redis)
    run = ask_run(
        {"question": "Which repo?"},
        run_id="run_askonly_1",
        agent_id=agent.id,
        tool_name="ask_user",
        reply="Thanks, passed on.",
        metadata={},
    )
    dead = RedisRunStore(real_redis, prefix=prefix, lease_ttl=0.2)
    await dead.create(run, owner="died-after-create")  # its process dies before its first step
    for _ in range(50):
        if await agent.is_orphaned(await agent.get_run(run.run_id)):
            break
        await asyncio.sleep(0.05)
    assert await agent.stop(run_id=run.run_id, stopped_by="U2")
    await (await agent.retry_stream(run_id=run.run_id)).collect()
    state = await agent.get_run(run.run_id)
    assert state.status == "completed"
    assert outcome_of(state) == {"status": "cancelled", "cancelled_by": "stopped in Slack"}


def test_an_outside_agents_approval_request_stopped_before_anyone_decided_is_told_cancelled() -> None:
    from bot.agent._loop.stopping import wrap_up
    from bot.agent.asking import APPROVAL_TOOL, ask_run
    from bot.agent.stream import AgentStream
    from bot.mcp_server.asker import outcome_of

    """An outside agent's approval request stopped in Slack before anyone decided (``wrap_up`` gives its call
    ``{"status": "stopped"}``) is told ``cancelled``, as its question would be (it was told ``no_answer``: "nobody
    decided in time", although a person stopped it)."""
    state = ask_run(
        {"action": "deploy", "details": {"service": "api"}},
        run_id="run_stopped_approval",
        agent_id="assistant",
        tool_name=APPROVAL_TOOL,
        reply="Done.",
        metadata={},
    )
    state.status = "running"
    wrap_up(state, AgentStream(state.run_id))  # stopped in Slack before anyone decided
    assert outcome_of(state) == {"status": "cancelled", "cancelled_by": "stopped in Slack"}
