"""``GET /metrics`` on the bot's HTTP server, scraped over loopback after real flows through the fake Slack and the
loopback model: each counter moves by what happened, once."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from slack_sdk.errors import SlackApiError

from bot.testing.openai_server import Reply, tool_call
from bot.testing.scrape import Samples, get, scrape
from bot.testing.slack_scenarios import ALICE, BOB, GENERAL, MULTI, ask, past_deadline, text_is

AGENT = {"agent": "bot.testing.approval_agent:build"}


def base(h: Any) -> str:
    return h.processes[0].url.removesuffix("/slack/events")


async def test_a_question_asked_and_answered_moves_its_counters_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        before = await scrape(base(h))
        thread, q = await ask(h, then="Went on.")
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_questions_asked_total", mode="single_select") == 1
    assert after.since(before, "askbot_questions_answered_total", mode="single_select") == 1
    assert after.since(before, "askbot_questions_asked_total", mode="free_form") == 0
    assert after.since(before, "askbot_time_to_answer_seconds_count", kind="question") == 1
    assert after.since(before, "askbot_run_resumes_total", trigger="answer") == 1
    assert after.since(before, "askbot_model_turn_seconds_count") == 2
    assert after.since(before, "askbot_answers_duplicate_total", kind="question") == 0
    assert after.get("askbot_runs_in_flight") == 0


async def test_every_slack_call_is_counted_by_method(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        before = await scrape(base(h))
        seen_before = Counter(c.method for c in h.ws.calls())
        h.model.script(Reply(tool_calls=[tool_call("ask_user", MULTI, id="m1")]), Reply(text="Planned."))
        d = await h.ws.mention(ALICE, GENERAL, "plan")
        q = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: bool(m.get("blocks"))
        )
        await h.ws.toggle(q, "Refactor", user=ALICE)
        await h.ws.click(q, "Submit", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Planned."))
        await h.settle()
        after = await scrape(base(h))
        seen = Counter(c.method for c in h.ws.calls()) - seen_before
    del seen["auth.test"]  # Bolt's own first-request check, made with a client of its own (see bot.ops.metrics)
    assert seen  # the bot called Slack, and each call of each method is counted once
    for method, count in seen.items():
        assert after.since(before, "askbot_slack_api_calls_total", method=method) == count, method
    assert after.since(before, "askbot_questions_answered_total", mode="multi_select") == 1


async def test_a_slack_error_is_counted_by_method_and_error(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        before = await scrape(base(h))
        h.ws.fake.fail_next("chat.update", "internal_error")
        await h.ws.click(q, "api", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_slack_api_errors_total", method="chat.update", error="internal_error") == 1
    assert after.since(before, "askbot_slack_api_errors_total", method="chat.postMessage", error="internal_error") == 0


async def test_a_double_click_is_a_duplicate_and_a_wrong_person_is_refused(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="Went on.")
        before = await scrape(base(h))
        await h.ws.click(q, "web", user=BOB)  # not the requester
        await h.ws.wait_for_ephemeral(user=BOB)
        await h.ws.click(q, "web", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=text_is("Went on."))
        await h.ws.click(q, "api", user=ALICE, as_seen=True)  # a double click on the copy still shown
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_answers_refused_total", kind="question", reason="not_allowed") == 1
    assert after.since(before, "askbot_answers_duplicate_total", kind="question") == 1
    assert after.since(before, "askbot_questions_answered_total", mode="single_select") == 1


async def test_an_expired_question_is_counted_once(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings={"ask_on_timeout": "close"}) as h:
        thread, q = await ask(h)
        await past_deadline(h, thread)
        before = await scrape(base(h))
        await h.ws.click(q, "api", user=ALICE)  # too late: the question is closed as expired
        await h.settle()
        await h.ws.click(q, "web", user=ALICE, as_seen=True)
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_questions_expired_total", kind="question") == 1
    assert after.since(before, "askbot_answers_refused_total", kind="question", reason="expired") == 2
    assert after.since(before, "askbot_questions_answered_total", mode="single_select") == 0


async def test_a_deadline_that_goes_on_without_an_answer_is_expired_and_resumes(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:  # ASK_ON_TIMEOUT=resume
        thread, _q = await ask(h, then="No answer, going on.")
        state = await past_deadline(h, thread)
        before = await scrape(base(h))
        assert h.bot.scheduler is not None
        await h.bot.agent.time_out(run_id=state.run_id)  # what the deadline's handler claims
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_questions_expired_total", kind="question") == 1
    assert after.since(before, "askbot_run_resumes_total", trigger="no_answer") == 1
    assert after.since(before, "askbot_time_to_answer_seconds_count", kind="question") == 0


async def test_approvals_are_counted_by_decision(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis, settings=AGENT) as h:
        before = await scrape(base(h))
        h.model.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Ok."))
        d = await h.ws.mention(ALICE, GENERAL, "restart api")
        q = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: "Approve" in str(m.get("blocks"))
        )
        await h.ws.click(q, "Approve", user=BOB)  # not an approver
        await h.ws.click(q, "Approve", user=ALICE)
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=text_is("Ok."))
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_approvals_requested_total") == 1
    assert after.since(before, "askbot_approvals_total", decision="approved") == 1
    assert after.since(before, "askbot_approvals_total", decision="declined") == 0
    assert after.since(before, "askbot_answers_refused_total", kind="approval", reason="not_allowed") == 1
    assert after.since(before, "askbot_time_to_answer_seconds_count", kind="approval") == 1
    assert after.since(before, "askbot_run_resumes_total", trigger="approval") == 1


async def test_a_failed_model_turn_is_counted_by_kind(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        before = await scrape(base(h))
        h.model.script(Reply(status=500), Reply(status=500), Reply(status=500))
        d = await h.ws.mention(ALICE, GENERAL, "hello")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: "Retry" in str(m))
        await h.settle()
        after = await scrape(base(h))
    assert after.since(before, "askbot_model_errors_total", kind="server") == 1
    assert after.since(before, "askbot_model_turn_seconds_count") == 1


async def test_metrics_are_plain_prometheus_text_without_secrets(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str]
) -> None:
    async with harness(fake_redis) as h:
        await ask(h)
        status, text, _headers = await get(base(h), "/metrics")
    assert status == 200
    assert "# TYPE askbot_questions_asked_total counter" in text
    assert "# TYPE askbot_time_to_answer_seconds histogram" in text
    for secret in slack_secrets:
        assert secret not in text
    assert isinstance(Samples, type)


async def test_slack_error_strings_from_outside_make_a_bounded_set_of_label_values() -> None:
    """Slack (or a proxy in front of it) answering ever new error strings: the error label's values stay a bounded
    set (the rest counted as ``other``), so a scrape never grows without end."""
    from bot.fakeslack import Workspace
    from bot.ops.metrics import ERROR_LABELS_MAX, exposition
    from bot.slack.transport.web_api import SharedWebClient

    TOKEN = "xoxb-metrics-test-0123456789"
    async with Workspace(bot_token=TOKEN) as ws:
        client = SharedWebClient(token=TOKEN, base_url=ws.api_url)
        for n in range(ERROR_LABELS_MAX + 30):
            ws.fake.fail_next("chat.getPermalink", f"hostile_error_{n}")
            with contextlib.suppress(SlackApiError):
                await client.chat_getPermalink(channel="C1", message_ts="1.2")
    text = exposition().decode()
    values = {
        line.split('error="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("askbot_slack_api_errors_total{") and 'method="chat.getPermalink"' in line
    }
    assert len({v for v in values if v.startswith("hostile_error_")}) <= ERROR_LABELS_MAX
    assert "other" in values
