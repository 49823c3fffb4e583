"""Stored runs the bot can't read (corrupt, an unknown schema version) and runs stored by earlier releases.

An unreadable run under an open question: every request is still acked, the person is told plainly, the operator
gets one log line naming the run, and the thread starts fresh. A run suspended by an earlier release (a frozen
fixture per released RunState version, with the Slack context stored with it) resumes after an upgrade.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent.state import utcnow
from bot.errors import QuestionExpired
from bot.fakeslack.state import TEAM_ID
from bot.store import Keys
from bot.testing import approval_agent
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, GENERAL, ask, has_controls, thread_run_id

FIXTURES = Path(__file__).parent.parent / "fixtures"
FROZEN = sorted(p.name for p in FIXTURES.glob("run_state_v*.json"))


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def moved_to_now(raw: dict[str, Any], *, expires_in: timedelta) -> dict[str, Any]:
    """The frozen record with every time in it moved by one offset, so that its pending call's deadline falls
    `expires_in` from now (negative: already past) and every other time keeps its distance to it. A record with
    no deadline (schema 1) is moved so that it was suspended a minute ago. The fixtures on disk never change:
    a test that read their absolute dates against the wall clock failed once that date passed."""
    pending = raw["pending"]
    anchor, target = (
        (parse_time(pending["expires_at"]), utcnow() + expires_in)
        if pending.get("expires_at")
        else (parse_time(pending["suspended_at"]), utcnow() - timedelta(minutes=1))
    )
    offset = target - anchor

    def move(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: move(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, str) and (key.endswith("_at") or key.endswith("_since")):
            return (parse_time(value) + offset).isoformat()
        return value

    moved: dict[str, Any] = move(raw)
    return moved


async def spoil(h: Any, thread: str, how: str) -> str:
    """Replace the thread's stored run with an unreadable record; returns its run id."""
    run_id = await thread_run_id(h, thread)
    key = Keys(h.settings.redis_prefix).run(run_id)
    client = h.bot.agent.store.client
    if how == "corrupt":
        await client.hset(key, "state", '{"schema_version": 2, "run_id": ')
    else:
        raw = json.loads(await client.hget(key, "state"))
        raw["schema_version"] = 99  # written by a newer release, then rolled back
        await client.hset(key, "state", json.dumps(raw))
    return run_id


@pytest.mark.parametrize("how", ["corrupt", "unknown-version"])
async def test_an_unreadable_run_is_reported_once_and_the_thread_starts_fresh(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h)
        await h.settle()
        run_id = await spoil(h, thread, how)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            ack = await h.ws.click(q, "api", user=ALICE)
            assert ack.status == 200
            note = await h.ws.wait_for_ephemeral(user=ALICE)
            assert "can't read" in note["text"] and "start again" in note["text"]
            await h.settle()
        lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(lines) == 1 and run_id in lines[0].getMessage(), [r.getMessage() for r in lines]
        h.model.reset()
        h.model.script(Reply(text="Fresh start."))
        await h.ws.mention(ALICE, GENERAL, "let's try again", thread_ts=thread)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Fresh start.")
        assert h.model.requests[-1]["messages"][1:] == [{"role": "user", "content": "let's try again"}]


async def stored_in_a_thread(h: Any, raw: dict[str, Any]) -> str:
    """Store the frozen record as the run of a new thread of this workspace (its Slack context pointed at that
    thread, same shape); returns the thread's ts."""
    d = await h.ws.mention(ALICE, GENERAL, "started before the upgrade")
    thread: str = d.message["ts"]
    await h.settle()
    slack = raw["metadata"]["slack"]
    slack.update(team_id=TEAM_ID, channel_id=GENERAL, thread_ts=thread, requester=ALICE)
    if "message_ts" in slack:
        slack["message_ts"] = thread
    keys = Keys(h.settings.redis_prefix)
    client = h.bot.agent.store.client
    await client.hset(keys.run(raw["run_id"]), mapping={"rev": str(raw["revision"]), "state": json.dumps(raw)})
    await client.hset(keys.thread(TEAM_ID, channel_id=GENERAL, thread_ts=thread), "run_id", raw["run_id"])
    return thread


@pytest.mark.parametrize("fixture", FROZEN)
async def test_a_run_suspended_by_an_earlier_release_resumes(
    fake_redis: aioredis.Redis, harness: Any, fixture: str
) -> None:
    """The frozen record (its times moved so that its deadline is an hour away), answered by a reply in the thread:
    the answer and the queued second question go on where the old release stopped."""
    raw = moved_to_now(json.loads((FIXTURES / fixture).read_text()), expires_in=timedelta(hours=1))
    if raw["pending"].get("kind") == "approval":
        await resume_a_stored_approval(fake_redis, harness, raw)
        return
    async with harness(fake_redis) as h:
        thread = await stored_in_a_thread(h, raw)
        h.model.reset()
        h.model.script(Reply(text="Resumed after the upgrade."))
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "api")
        second = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Anything else?" in json.dumps(second["blocks"])  # the queued call, asked without a model turn
        assert h.model.requests == []
        await h.ws.click(second, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=lambda v: v.get("callback_id") == "ask_answer_modal")
        await h.ws.submit_view(form, {"answer_input": {"answer_text": "no"}}, user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Resumed after the upgrade."
        )
        sent = h.model.requests[-1]["messages"]
        results = [json.loads(m["content"]) for m in sent if m["role"] == "tool"]
        assert [r["answer"] for r in results] == ["api", "no"]
        assistant = next(m for m in sent if m.get("tool_calls"))
        stored = next(m for m in raw["messages"] if m.get("tool_calls"))
        assert assistant == stored  # provider fields of the old record go back as they were


async def resume_a_stored_approval(fake_redis: aioredis.Redis, harness: Any, raw: dict[str, Any]) -> None:
    """A stored run waiting on a tool approval: approving it runs the tool once and the run goes on."""
    approval_agent.RESTARTS.clear()
    async with harness(fake_redis, settings={"agent": "bot.testing.approval_agent:build"}) as h:
        keys = Keys(h.settings.redis_prefix)
        client = h.bot.agent.store.client
        await client.hset(keys.run(raw["run_id"]), mapping={"rev": str(raw["revision"]), "state": json.dumps(raw)})
        h.model.script(Reply(text="Restarted after the upgrade."))
        resumed = await h.bot.agent.approve_tool_call(run_id=raw["run_id"], approved_by=ALICE)
        chunks = await resumed.collect()
        results = [m for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        if raw["pending"].get("batch"):  # schema 5: a batch, its other call decided already (with edited arguments)
            assert chunks[-1].type == "finish" and approval_agent.RESTARTS == ["api", "web-2"]
            assert [m["tool_call_id"] for m in results] == ["call_1", "call_2", "call_3"]
            assert "changed this call's arguments" in results[-1]["content"]
            return
        assert chunks[-1].type == "finish" and approval_agent.RESTARTS == ["api"]
        assert [m["content"] for m in results][-1] == "api restarted"


WITH_DEADLINE = [f for f in FROZEN if json.loads((FIXTURES / f).read_text())["pending"].get("expires_at")]


@pytest.mark.parametrize("fixture", WITH_DEADLINE)
async def test_a_run_stored_by_an_earlier_release_past_its_deadline_is_told_as_expired(
    fake_redis: aioredis.Redis, harness: Any, fixture: str
) -> None:
    """The same frozen records with their deadline an hour ago: a question answered in the thread is told it
    expired and the model is not asked; an approval is refused as expired and its tool does not run."""
    raw = moved_to_now(json.loads((FIXTURES / fixture).read_text()), expires_in=-timedelta(hours=1))
    if raw["pending"].get("kind") == "approval":
        approval_agent.RESTARTS.clear()
        async with harness(fake_redis, settings={"agent": "bot.testing.approval_agent:build"}) as h:
            keys = Keys(h.settings.redis_prefix)
            client = h.bot.agent.store.client
            await client.hset(keys.run(raw["run_id"]), mapping={"rev": str(raw["revision"]), "state": json.dumps(raw)})
            with pytest.raises(QuestionExpired):
                await h.bot.agent.approve_tool_call(run_id=raw["run_id"], approved_by=ALICE)
            assert approval_agent.RESTARTS == [] and h.model.requests == []
        return
    async with harness(fake_redis) as h:
        thread = await stored_in_a_thread(h, raw)
        h.model.reset()
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "api")
        note = await h.ws.wait_for_ephemeral(user=ALICE)
        assert "expired" in note["text"]
        await h.settle()
        assert h.model.requests == []
        assert (await h.bot.agent.get_run(raw["run_id"])).status == "expired"
