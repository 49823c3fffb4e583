"""``POST /slack/events`` checks the raw body before Bolt parses it (bot/slack/transport/http.py).

Malformed bodies (a form payload that is not JSON, a JSON array, invalid UTF-8, deep nesting, an empty body, a
body over the size cap) are refused with a status, never a 500: 401 when unsigned (the signature is checked
first, on the raw bytes), 400 when signed, 413 over the cap. Each kind of refusal logs one short line per
10 s window, without a traceback, a body, a header value or a secret; and nothing starts a run.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.fakeslack.sender import sign
from bot.slack.transport.http import MAX_BODY_BYTES, MAX_JSON_DEPTH, RefusalLog
from bot.testing.openai_server import Reply
from bot.testing.slack_scenarios import (
    ALICE,
    GENERAL,
    tracebacks,
)

JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"
LOGGER = "bot.slack.transport.http"


def deep(depth: int) -> bytes:
    """A JSON object whose innermost value sits ``depth`` containers deep."""
    return b'{"a":' + b"[" * (depth - 1) + b"1" + b"]" * (depth - 1) + b"}"


# name -> (raw body, content type); each is refused 401 unsigned and 400 signed
MALFORMED: dict[str, tuple[bytes, str]] = {
    "form payload not JSON": (b"payload=not-json{", FORM_TYPE),
    "form payload a JSON array": (b"payload=%5B1%2C2%5D", FORM_TYPE),
    "JSON array": (b'[{"type": "event_callback"}]', JSON_TYPE),
    "JSON string": (b'"event_callback"', JSON_TYPE),
    "not JSON at all": (b"{not json", JSON_TYPE),
    "invalid UTF-8": (b'{"type": "event_callback", "text": "\xff\xfe\xc3"}', JSON_TYPE),
    "deeply nested JSON": (deep(100_000), JSON_TYPE),
    "nested past the limit": (deep(MAX_JSON_DEPTH + 1), JSON_TYPE),
    "empty body": (b"", JSON_TYPE),
    "empty object": (b"{}", JSON_TYPE),
}


def sign_bytes(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's v0 signature over raw bytes (``sign`` takes text; invalid UTF-8 needs bytes)."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed(secret: str, body: bytes, content_type: str, *, at: float | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": sign_bytes(secret, timestamp, body),
    }


async def post(url: str, body: Any, headers: dict[str, str]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.text()


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def assert_quiet(caplog: pytest.LogCaptureFixture, secret: str, token: str) -> None:
    """No traceback anywhere, no 'Error handling request', and the refusal lines are short and clean."""
    for record in caplog.records:
        assert record.exc_info is None and record.exc_text is None, record.getMessage()[:200]
        assert "Error handling request" not in record.getMessage()
    for line in refusal_lines(caplog):
        assert len(line) < 200 and "\n" not in line
        for leaked in (secret, token, "not-json", "event_callback", "v0="):
            assert leaked not in line


@pytest.fixture
def quiet_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def test_our_byte_signature_is_slacks() -> None:
    assert sign_bytes("s3cret", "1700000000", b'{"a":1}') == sign("s3cret", "1700000000", '{"a":1}')


async def test_unsigned_malformed_bodies_are_401_with_one_log_line_and_start_nothing(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str], quiet_logs: pytest.LogCaptureFixture
) -> None:
    token, secret = slack_secrets
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="must not run"))
        url = h.processes[0].url
        statuses = {}
        for name, (body, content_type) in MALFORMED.items():
            for _ in range(2):
                statuses[name] = (await post(url, body, {"Content-Type": content_type}))[0]
        assert statuses == dict.fromkeys(MALFORMED, 401)
        await h.settle()
        assert h.model.requests == []
        assert h.ws.calls("chat.postMessage") == [] and h.ws.calls("reactions.add") == []
    assert_quiet(quiet_logs, secret, token)
    lines = refusal_lines(quiet_logs)
    assert len(lines) == 1 and "401" in lines[0], lines  # one kind (unsigned), one line per 10 s


async def test_signed_malformed_bodies_are_400_with_one_log_line_per_kind_and_start_nothing(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str], quiet_logs: pytest.LogCaptureFixture
) -> None:
    token, secret = slack_secrets
    async with harness(fake_redis) as h:
        h.model.script(Reply(text="must not run"))
        url = h.processes[0].url
        statuses: dict[str, list[int]] = {}
        for name, (body, content_type) in MALFORMED.items():
            for _ in range(3):
                status, _text = await post(url, body, signed(secret, body, content_type))
                statuses.setdefault(name, []).append(status)
        assert statuses == {name: [400, 400, 400] for name in MALFORMED}
        await h.settle()
        assert h.model.requests == []
        assert h.ws.calls("chat.postMessage") == [] and h.ws.calls("reactions.add") == []
    assert_quiet(quiet_logs, secret, token)
    lines = refusal_lines(quiet_logs)
    assert all("400" in line for line in lines), lines
    # one line per kind: not UTF-8, not JSON, not an object, too deep, empty (3 requests of each at least)
    assert len(lines) == len(set(lines)) == 5, lines


async def test_bad_headers_stale_and_future_timestamps_are_401(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str], quiet_logs: pytest.LogCaptureFixture
) -> None:
    token, secret = slack_secrets
    body = json.dumps({"type": "event_callback", "event": {"type": "app_mention", "user": ALICE}}).encode()
    now = time.time()
    async with harness(fake_redis) as h:
        url = h.processes[0].url
        good = signed(secret, body, JSON_TYPE)
        cases = {
            "old timestamp": signed(secret, body, JSON_TYPE, at=now - 6 * 60),
            "future timestamp": signed(secret, body, JSON_TYPE, at=now + 6 * 60),
            "timestamp not a number": {**good, "X-Slack-Request-Timestamp": "soon"},
            "timestamp far too long": {**good, "X-Slack-Request-Timestamp": "9" * 5000},
            "signature not ASCII": {**good, "X-Slack-Signature": "v0=\u00e9\u00e9"},
            "wrong secret": signed("not-the-secret", body, JSON_TYPE),
            "no signature": {"Content-Type": JSON_TYPE, "X-Slack-Request-Timestamp": good["X-Slack-Request-Timestamp"]},
        }
        statuses = {name: (await post(url, body, headers))[0] for name, headers in cases.items()}
        assert statuses == dict.fromkeys(cases, 401)
        await h.settle()
        assert h.model.requests == []
    assert_quiet(quiet_logs, secret, token)
    lines = refusal_lines(quiet_logs)
    assert 1 <= len(lines) <= 3 and all("401" in line for line in lines), lines


async def test_a_body_over_the_cap_is_413_signed_or_not(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str], quiet_logs: pytest.LogCaptureFixture
) -> None:
    token, secret = slack_secrets
    huge = b'{"type": "event_callback", "pad": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the cap holds while reading
        for start in range(0, len(huge), 64 * 1024):
            yield huge[start : start + 64 * 1024]

    async with harness(fake_redis) as h:
        url = h.processes[0].url
        statuses = [
            (await post(url, huge, {"Content-Type": JSON_TYPE}))[0],
            (await post(url, huge, signed(secret, huge, JSON_TYPE)))[0],
            (await post(url, chunked(), signed(secret, huge, JSON_TYPE)))[0],
        ]
        assert statuses == [413, 413, 413]
        await h.settle()
        assert h.model.requests == []
    assert_quiet(quiet_logs, secret, token)
    lines = refusal_lines(quiet_logs)
    assert len(lines) == 1 and "413" in lines[0], lines


async def raw_http(port: int, data: bytes, *, half_close: bool = False) -> bytes:
    """Send ``data`` as is on a fresh connection (then half-close it) and return what comes back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_requests_aiohttp_cannot_parse_or_cut_short_log_one_short_line_not_a_traceback(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str], quiet_logs: pytest.LogCaptureFixture
) -> None:
    token, secret = slack_secrets
    body = b'{"type": "event_callback", "event": {"type": "app_mention"}}'
    async with harness(fake_redis) as h:
        port = int(h.processes[0].url.split(":")[2].split("/")[0])
        malformed = [
            b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            b"POST /slack/events HTTP/1.1\r\nHost: x\r\nNot A Header\r\n\r\n",
            b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        ]
        answers = [await raw_http(port, data) for data in malformed]
        assert all(a.startswith(b"HTTP/1.0 400 ") or a.startswith(b"HTTP/1.1 400 ") for a in answers), answers
        headers = "".join(f"{k}: {v}\r\n" for k, v in signed(secret, body, JSON_TYPE).items())
        cut = f"POST /slack/events HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
        await raw_http(port, cut.encode() + body[:20], half_close=True)  # the connection ends 20 bytes into the body
        await h.settle()
        assert h.model.requests == []
    assert_quiet(quiet_logs, secret, token)
    lines = refusal_lines(quiet_logs)
    assert len(lines) == 2, lines  # one per kind: malformed HTTP, body cut short
    assert "malformed HTTP request" in lines[0] and "400" in lines[0]
    assert "body cut short" in lines[1]


async def test_valid_signed_requests_still_work(
    fake_redis: aioredis.Redis, harness: Any, slack_secrets: tuple[str, str], quiet_logs: pytest.LogCaptureFixture
) -> None:
    token, secret = slack_secrets
    async with harness(fake_redis) as h:
        url = h.processes[0].url
        challenge = await h.ws.sender.url_verification("abc")  # Bolt answers it, signed by the fake Slack
        assert challenge.status == 200 and challenge.json == {"challenge": "abc"}
        ssl_check = b"ssl_check=1&token=playground-verification-token"  # Bolt answers it: 200, empty body
        assert await post(url, ssl_check, signed(secret, ssl_check, FORM_TYPE)) == (200, "")
        nested_ok = deep(MAX_JSON_DEPTH)  # at the limit, not past it: through to Bolt (no listener -> 404)
        assert (await post(url, nested_ok, signed(secret, nested_ok, JSON_TYPE)))[0] == 404

        h.model.script(Reply(text="Hello from the model."))
        delivery = await h.ws.mention(ALICE, GENERAL, "hi")
        assert delivery.acks and all(a.status == 200 for a in delivery.acks)
        thread_ts = delivery.message["ts"]
        reply = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread_ts, predicate=lambda m: "Hello from the model" in json.dumps(m)
        )
        assert reply["thread_ts"] == thread_ts
        await h.settle()
    assert refusal_lines(quiet_logs) == []
    assert_quiet(quiet_logs, secret, token)


def test_refusal_log_keeps_one_line_per_reason_per_window_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    now = [1000.0]
    refusals = RefusalLog(logging.getLogger(LOGGER), window=10.0, clock=lambda: now[0])
    for _ in range(5):
        refusals.note("bad signature", 401)
    refusals.note("body is not UTF-8", 400)
    now[0] += 9.9
    refusals.note("bad signature", 401)
    now[0] += 0.2  # 10.1 s after the first line
    refusals.note("bad signature", 401)
    lines = refusal_lines(caplog)
    assert len(lines) == 3, lines
    assert "bad signature" in lines[0] and "401" in lines[0] and "suppressed" not in lines[0]
    assert "body is not UTF-8" in lines[1] and "400" in lines[1]
    assert "bad signature" in lines[2] and "5 similar refusals suppressed" in lines[2]


@pytest.mark.parametrize("kind", ["event-a-string", "event-a-list", "subtype-a-list", "view-a-string"])
async def test_odd_events_and_view_submissions_get_no_500_and_no_traceback(
    fake_redis: aioredis.Redis, harness: Any, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """Same promise as above for events and view submissions: a signed envelope whose ``event`` is a string or a
    list, a message event whose ``subtype`` is a list, or a view_submission whose ``view`` is a string, must be a
    200/400 with no traceback; each is an HTTP 500 with a traceback."""
    from bot.fakeslack.sender import event_envelope, new_event_id, view_submission_payload

    caplog.set_level(logging.INFO)
    async with harness(fake_redis) as h:
        message = {
            "type": "message",
            "user": ALICE,
            "text": "hi",
            "ts": "1700000000.000200",
            "channel": GENERAL,
            "channel_type": "channel",
            "event_ts": "1700000000.000200",
        }
        if kind == "view-a-string":
            payload = view_submission_payload(
                directory=h.ws.state.directory, user=ALICE, view={}, state_values={}, trigger_id="t"
            )
            payload["view"] = "x"
            ack = await h.ws.sender.send_interaction(payload)
        else:
            envelope = event_envelope(message, event_id=new_event_id(), event_time=1700000000)
            if kind == "event-a-string":
                envelope["event"] = "x"
            elif kind == "event-a-list":
                envelope["event"] = []
            else:
                envelope["event"]["subtype"] = ["x"]
            ack = await h.ws.sender._post(json.dumps(envelope), "application/json", kind="event_callback")
        await h.settle()
        assert ack.status in (200, 400, 404), ack.status
        assert tracebacks(caplog) == []
