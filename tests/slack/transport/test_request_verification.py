"""Requests Slack did not sign, or signed too long ago, are refused (401) and start nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from bot.fakeslack.sender import sign
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import ALICE, GENERAL


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
