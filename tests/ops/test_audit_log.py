"""The audit trail: every decision on a question or approval is one line on ``bot.audit`` (one JSON object under
``LOG_FORMAT=json``, its fields top-level keys), logged where the decision is taken, once, with no secret and no
free-form answer text."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from bot.fakeslack.state import TEAM_ID
from bot.logs import configure_logging
from bot.testing.openai_server import Reply, tool_call
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    FREE,
    GENERAL,
    ask,
    has_controls,
    is_answer_form,
    past_deadline,
    text_is,
)
from tests.slack.test_web_worker_split import click_taken_by_a_dead_worker, consume

AGENT = {"agent": "bot.testing.approval_agent:build"}


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The process's log lines as ``LOG_FORMAT=json`` writes them (the bot's own handler, into a buffer)."""
    buffer = io.StringIO()
    handler = configure_logging("INFO", "json", stream=buffer)
    yield buffer
    logging.getLogger().removeHandler(handler)


def audit_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]  # every line is one JSON object
    return [line for line in lines if line["logger"] == "bot.audit"]


def events(buffer: io.StringIO) -> list[str]:
    return [line["event"] for line in audit_lines(buffer)]


async def test_each_decision_on_a_question_is_one_json_line(
    fake_redis: aioredis.Redis, harness: Any, json_logs: io.StringIO, slack_secrets: tuple[str, str]
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        await h.ws.click(q, "web", user=BOB)  # not the requester
        await h.ws.wait_for_ephemeral(user=BOB)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        await h.ws.click(q, "api", user=ALICE, as_seen=True)  # a double click
        await h.settle()
    assert events(json_logs) == ["question.asked", "question.refused", "question.answered", "question.duplicate"]
    asked, refused, answered, duplicate = audit_lines(json_logs)
    run_id = answered["run_id"]
    assert run_id.startswith("run_") and {line["run_id"] for line in audit_lines(json_logs)} == {run_id}
    for line in (asked, refused, answered, duplicate):
        assert line["tool_call_id"] == "c1" and line["kind"] == "question" and line["tool"] == "ask_user"
        assert line["team_id"] == TEAM_ID and line["channel_id"] == GENERAL
    assert asked["mode"] == refused["mode"] == answered["mode"] == "single_select"  # no longer pending: no mode
    assert refused["user_id"] == BOB and refused["reason"] == "not_allowed" and refused["outcome"] == "refused"
    assert answered["user_id"] == ALICE and answered["outcome"] == "answered"
    assert answered["answer_labels"] == ["web"] and answered["waited_seconds"] >= 0
    assert answered["at"] >= answered["asked_at"]
    assert duplicate["user_id"] == ALICE and duplicate["answered_by"] == ALICE
    text = json_logs.getvalue()
    for secret in slack_secrets:
        assert secret not in text


async def test_a_free_form_answer_is_logged_by_its_length_only(
    fake_redis: aioredis.Redis, harness: Any, json_logs: io.StringIO
) -> None:
    secret_plan = "merge the salary spreadsheet into payroll"
    async with harness(fake_redis) as h:
        thread, q = await ask(h, FREE, then="Noted.")
        await h.ws.click(q, "Answer", user=ALICE)
        view = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await h.ws.submit_view(view, {"answer_input": {"answer_text": secret_plan}}, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Noted."))
        await h.settle()
    [answered] = [line for line in audit_lines(json_logs) if line["event"] == "question.answered"]
    assert answered["mode"] == "free_form" and answered["answer_chars"] == len(secret_plan)
    assert "answer_labels" not in answered
    assert secret_plan not in json.dumps(audit_lines(json_logs))


async def test_approval_decisions_are_audited_with_the_reason_s_length(
    fake_redis: aioredis.Redis, harness: Any, json_logs: io.StringIO
) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "db"}, id="r1")]), Reply(text="Ok."))
        d = await h.ws.mention(ALICE, GENERAL, "restart db")
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=has_controls)
        await h.ws.click(q, "Decline", user=ALICE)
        form = await h.ws.wait_for_view(
            user=ALICE, predicate=lambda v: v.get("callback_id") == "approval_decline_modal"
        )
        await h.ws.submit_view(form, {"decline_reason": {"reason_text": "it's peak hours"}}, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Ok."))
        await h.settle()
    assert events(json_logs) == ["approval.asked", "approval.declined"]
    requested, declined = audit_lines(json_logs)
    assert requested["tool"] == declined["tool"] == "restart_service" and declined["tool_call_id"] == "r1"
    assert declined["mode"] == "approval" and declined["user_id"] == ALICE and declined["outcome"] == "declined"
    assert declined["reason_chars"] == len("it's peak hours") and "peak hours" not in json_logs.getvalue()


async def test_an_expired_question_is_one_line_and_late_answers_are_refused(
    fake_redis: aioredis.Redis, harness: Any, json_logs: io.StringIO
) -> None:
    async with harness(fake_redis, settings={"ask_on_timeout": "close"}) as h:
        thread, q = await ask(h)
        await past_deadline(h, thread)
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        await h.ws.click(q, "web", user=ALICE, as_seen=True)
        await h.settle()
    assert events(json_logs) == ["question.asked", "question.refused", "question.expired", "question.refused"]
    reasons = [line.get("reason") for line in audit_lines(json_logs) if line["outcome"] == "refused"]
    assert reasons == ["expired", "expired"]


async def test_a_redelivered_job_logs_its_answer_once(
    fake_server: fakeredis.FakeServer, harness: Any, prefix: str, json_logs: io.StringIO
) -> None:
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    async with harness(client) as h:
        worker, _key, thread = await click_taken_by_a_dead_worker(h, client, fake_server, prefix, then="Once.")
        await asyncio.sleep(0.35)
        stop = asyncio.Event()
        working = consume(worker, stop, lease_ttl=0.3)
        try:
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Once."))
            await asyncio.sleep(0.5)  # several reclaim rounds
            await h.settle()
        finally:
            stop.set()
            await asyncio.wait_for(working, 10)
    assert events(json_logs) == ["question.asked", "question.answered"]


async def test_in_text_format_an_audit_record_is_one_line_with_its_fields(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    buffer = io.StringIO()
    handler = configure_logging("INFO", "text", stream=buffer)
    try:
        async with harness(fake_redis) as h:
            thread, q = await ask(h, then="Went on.")
            await h.ws.click(q, "web", user=ALICE)
            await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
            await h.settle()
    finally:
        logging.getLogger().removeHandler(handler)
    [line] = [line for line in buffer.getvalue().splitlines() if " bot.audit: question answered " in line]
    assert "tool_call_id=c1" in line and f"user_id={ALICE}" in line and 'answer_labels=["web"]' in line


async def test_an_outside_agent_withdrawing_its_question_is_audited_by_the_asker_not_as_a_user(
    fake_redis: aioredis.Redis, harness: Any, json_logs: io.StringIO
) -> None:
    """Found by a new user's trial: the line said ``user_id=the agent that asked`` (a field that holds Slack ids),
    and the thread said the agent "was told so" of its own withdrawal."""
    from bot.mcp_server.asker import Asker

    async with harness(fake_redis) as h:
        asker = Asker(h.bot.threads, team_id=TEAM_ID, poll=0.05)
        asked = await asker.ask({"question": "Ship it?"}, channel=GENERAL, user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=asked.thread_ts, predicate=has_controls)
        await asker.withdraw(asked)
        await h.settle()
        said = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=asked.thread_ts)]
    (line,) = [a for a in audit_lines(json_logs) if a["outcome"] == "withdrawn"]
    assert line["by"] == "asker" and "user_id" not in line, line
    assert "The agent that asked withdrew the question." in said and not [t for t in said if "told so" in t], said
