"""Requests Slack did not sign, or signed too long ago, are refused (401) and start nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from bot.fakeslack.sender import sign
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import (
    ALICE,
    GENERAL,
    action_payload,
    blocks_text,
    button,
)


async def post_raw(url: str, body: str, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, data=body.encode(), headers=headers) as resp:
        return resp.status


async def test_bad_signature_stale_timestamp_and_missing_headers_are_401_and_start_nothing(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str]
) -> None:
    _token, secret = slack_secrets
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="must not run"))
        msg = h.ws.add_user_message(ALICE, GENERAL, "<@U_BOT> hi")
        envelope = {
            "type": "event_callback",
            "team_id": "T_PLAYGROUND",
            "api_app_id": "A_PLAYGROUND",
            "event_id": "EvFORGED01",
            "event_time": int(time.time()),
            "event": {"type": "app_mention", "user": ALICE, "text": msg["text"], "ts": msg["ts"], "channel": GENERAL},
        }
        body = json.dumps(envelope)
        now = str(int(time.time()))
        url = h.processes[0].url
        base = {"Content-Type": "application/json"}
        wrong = {**base, "X-Slack-Request-Timestamp": now, "X-Slack-Signature": sign("not-the-secret", now, body)}
        old = str(int(time.time()) - 600)
        stale = {**base, "X-Slack-Request-Timestamp": old, "X-Slack-Signature": sign(secret, old, body)}
        tampered = {**base, "X-Slack-Request-Timestamp": now, "X-Slack-Signature": sign(secret, now, body + " ")}
        statuses = [await post_raw(url, body, hd) for hd in (wrong, stale, tampered, base)]
        assert statuses == [401, 401, 401, 401]
        await h.settle()
        assert h.model.requests == []
        assert h.ws.calls("chat.postMessage") == [] and h.ws.calls("reactions.add") == []


async def test_a_replayed_signed_request_is_refused(fake_redis: aioredis.Redis, harness: Any) -> None:
    """README (Security): "Replayed and stale requests are refused." Alice's run fails, she presses Retry, it fails
    again. Someone who captured her Retry request re-sends it byte for byte (same timestamp and signature, inside the
    5-minute window): it is expected to be refused (nothing done); observed: accepted with 200 and the run is
    retried again (another model call, another failure notice)."""
    import time
    from urllib.parse import urlencode

    import aiohttp

    from bot.fakeslack.sender import sign

    async with harness(fake_redis) as h:
        h.model.script(Reply(status=500))
        d = await h.ws.mention(ALICE, GENERAL, "go")
        thread = d.message["ts"]
        notice = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "Retry" in blocks_text(m)
        )
        await h.settle()
        retry = button(notice, 0)
        payload = action_payload(h, notice, retry)
        body = urlencode({"payload": json.dumps(payload)})
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": sign(h.ws.sender._secret, timestamp, body),
        }
        h.model.script(Reply(status=500), Reply(status=500))
        async with aiohttp.ClientSession() as session:
            async with session.post(h.ws.sender.bot_url, data=body.encode(), headers=headers) as first:
                assert first.status == 200
            await h.settle()
            calls = len(h.model.requests)
            async with session.post(h.ws.sender.bot_url, data=body.encode(), headers=headers) as replay:
                replay_status = replay.status
            await h.settle()
        assert replay_status != 200 or len(h.model.requests) == calls, (replay_status, len(h.model.requests), calls)
