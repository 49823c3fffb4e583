"""Bolt decides what handles a request; nothing a request carries can change that: Bolt's lazy-only switches
(``X-Slack-Bolt-Lazy-Only`` / ``X-Slack-Bolt-Lazy-Function-Name``, meant for its FaaS adapters) are ignored, so a
signed request always runs its ack function first. Queued jobs of an unknown version are dropped, not run."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.fakeslack.sender import sign, view_submission_payload
from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import (
    ALICE,
    FREE,
    GENERAL,
    ask,
    current,
    has_controls,
    is_answer_form,
    resumed_requests,
)
from tests.conftest import SECRET


@pytest.mark.parametrize("function", ["on_modal_answer", "on_click", "nonexistent"])
async def test_lazy_only_headers_from_outside_do_not_skip_the_ack_function(
    fake_redis: aioredis.Redis, harness: Any, function: str
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        values = {MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": "   "}}}
        payload = view_submission_payload(
            directory=h.ws.state.directory,
            user=ALICE,
            view=form,
            state_values=values,
            trigger_id=h.ws.state.mint_trigger(ALICE),
        )
        body = urlencode({"payload": json.dumps(payload)})
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": sign(SECRET, stamp, body),
            "X-Slack-Bolt-Lazy-Only": "true",
            "X-Slack-Bolt-Lazy-Function-Name": function,
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(h.ws.sender.bot_url, data=body, headers=headers) as r,
        ):
            assert r.status == 200
            answer = await r.json()
        assert answer == {"response_action": "errors", "errors": {MODAL_INPUT_BLOCK: "Please write an answer."}}
        assert has_controls(await current(h, q)) and resumed_requests(h.model) == 0


async def test_a_queued_job_of_an_unknown_version_or_function_is_dropped(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(fake_redis) as h:
        _thread, q = await ask(h)
        worker = await h.start_process(fake_redis, role="worker")
        click = {"type": "block_actions", "user": {"id": ALICE}, "actions": [{"action_id": "ask_option_0"}]}
        await worker.bot.run_job({"v": 99, "id": "j1", "fn": "on_click", "body": click, "context": {}})
        await worker.bot.run_job({"v": 1, "id": "j2", "fn": "os.system", "body": click, "context": {}})
        await h.settle()
        dropped = [r.getMessage() for r in caplog.records if "dropping job" in r.getMessage()]
        assert len(dropped) == 2 and has_controls(await current(h, q))


async def test_click_ack_is_fast_while_the_model_takes_6s(fake_redis: aioredis.Redis, harness: Any) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then=Reply(text="Slow reply.", delay=6.0))
        ack = await h.ws.click(q, "api", user=ALICE)
        assert ack.status == 200 and ack.duration_ms < 3000, ack.duration_ms  # Slack's 3 s, well under the 6 s
        updated = await h.ws.wait_for_message(
            channel=GENERAL, predicate=lambda m: m["ts"] == q["ts"] and not has_controls(m), timeout=4.5
        )
        assert "answered" in json.dumps(updated["blocks"])  # the question closes before the model answers
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Slow reply.", timeout=10
        )
