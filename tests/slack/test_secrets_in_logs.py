"""No token or secret reaches a log line, at any level, on success or failure."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.errors import StoreUnavailable
from bot.fakeslack.sender import view_submission_payload
from bot.slack.refs import QuestionRef
from bot.slack.render.modals import ACT_TEXT, MODAL_INPUT_BLOCK
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import (
    ALICE,
    BOB,
    FREE,
    GENERAL,
    ask,
    is_answer_form,
    resumed_requests,
    still_open,
)
from bot.testing.tcp_proxy import TcpProxy


async def test_no_secret_in_logs_even_at_debug_and_on_failures(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, slack_secrets: tuple[str, str]
) -> None:
    token, secret = slack_secrets
    caplog.set_level(logging.DEBUG)
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("chat.postMessage", "invalid_auth")
        h.ws.fake.fail_next("views.open", "invalid_trigger_id")
        h.model.script(Reply(status=401))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        await h.settle()
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        await h.settle()
        assert d.ack is not None
    text = "\n".join(r.getMessage() + (str(r.exc_info) if r.exc_info else "") for r in caplog.records)
    assert token not in text and secret not in text and "sk-test" not in text


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_real_redis_outage_during_final_save_leaves_thread_usable(
    real_redis: aioredis.Redis, harness: Any
) -> None:
    """Redis goes away while the model thinks: the reply still reaches the thread, the run is saved in the
    background once Redis is back, and the thread goes on."""
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = aioredis.from_url(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=2, socket_connect_timeout=1)
        try:
            async with harness(client) as h:
                thread, q = await ask(h, then=Reply(text="Reply during the outage.", delay=1.0))
                await h.ws.click(q, "api", user=ALICE)
                await asyncio.sleep(0.5)  # the answer is claimed; the model is thinking
                proxy.cut()
                await h.ws.wait_for_message(
                    channel=GENERAL,
                    thread_ts=thread,
                    predicate=lambda m: m["text"] == "Reply during the outage.",
                    timeout=15,
                )
                proxy.restore()
                run_id = next(iter(QuestionRef.from_block_id(b["block_id"])[0].run_id for b in q["blocks"]))
                for _ in range(150):  # the background save: every 2, 4, 8 s while Redis is away
                    with contextlib.suppress(StoreUnavailable):  # this probe's pooled connection was cut too
                        if (await h.bot.agent.get_run(run_id)).status == "completed":
                            break
                    await asyncio.sleep(0.1)
                assert (await h.bot.agent.get_run(run_id)).status == "completed"
                h.model.script(Reply(text="Back on track."))
                await h.ws.mention(ALICE, GENERAL, "hello again?", thread_ts=thread)
                await h.ws.wait_for_message(
                    channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Back on track.", timeout=5
                )
        finally:
            await client.aclose()


async def test_user_not_allowed_is_refused_before_typing_and_a_forged_submission_too(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Someone the policy does not allow never gets an input to type into: the modal says who may answer. A
    submission they forge anyway (the form's callback and metadata) is refused under the input."""
    async with harness(fake_redis) as h:
        _thread, q = await ask(h, FREE)
        await h.ws.click(q, "Answer", user=ALICE)
        form = await h.ws.wait_for_view(user=ALICE, predicate=is_answer_form)
        await h.ws.close_view(form, user=ALICE)
        await h.ws.click(q, "Answer", user=BOB)
        view = await h.ws.wait_for_view(user=BOB, predicate=lambda v: "Only <@U_ALICE>" in json.dumps(v["blocks"]))
        assert not any(b["type"] == "input" for b in view["blocks"])
        values = {MODAL_INPUT_BLOCK: {ACT_TEXT: {"type": "plain_text_input", "value": "my answer"}}}
        payload = view_submission_payload(
            directory=h.ws.state.directory,
            user=BOB,
            view=form,
            state_values=values,
            trigger_id=h.ws.state.mint_trigger(BOB),
        )
        ack = await h.ws.sender.send_interaction(payload)
        assert ack.json["response_action"] == "errors"
        assert "wasn't opened for you" in ack.json["errors"][MODAL_INPUT_BLOCK]
        await h.settle()
        assert await still_open(h, q) and resumed_requests(h.model) == 0


async def test_very_long_model_reply_reaches_the_thread_whole(fake_redis: aioredis.Redis, harness: Any) -> None:
    reply = "word " * 7500 + "THE-END"  # three messages' worth, under MAX_REPLY_CHARS
    async with harness(fake_redis) as h:
        h.model.script(Reply(text=reply))
        d = await h.ws.mention(ALICE, GENERAL, "write a lot")
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=d.message["ts"], predicate=lambda m: m["text"] != "")
        await h.settle()
        posted = "".join(m["text"] for m in h.ws.messages(GENERAL, thread_ts=d.message["ts"]) if m.get("bot_id"))
        assert "THE-END" in posted


async def test_transient_slack_error_on_final_reply_is_not_silently_lost(
    fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis) as h:
        thread, q = await ask(h, then="The important reply.")
        h.ws.fake.fail_next("chat.postMessage", "service_unavailable", status=503)
        await h.ws.click(q, "api", user=ALICE)
        await h.settle()
        texts = [m["text"] for m in h.ws.messages(GENERAL, thread_ts=thread)]
        assert "The important reply." in texts or any("try" in t.lower() for t in texts), texts


async def test_secrets_never_reach_logs(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, slack_secrets: tuple[str, str]
) -> None:
    token, secret = slack_secrets
    caplog.set_level(logging.DEBUG)
    async with harness(fake_redis) as h:
        h.ws.fake.fail_next("assistant.threads.setStatus", "invalid_auth")
        _thread, q = await ask(h)
        await h.ws.click(q, "web", user=ALICE)
        await h.settle()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "assistant.threads.setStatus refused: invalid_auth" in text  # Slack errors are logged with Slack's code
    assert token not in text and secret not in text
