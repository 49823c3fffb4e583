"""What Slack sends to an app's Request URL: signed Events API envelopes and interaction payloads.

Signing (docs.slack.dev authentication/verifying-requests-from-slack): headers
``X-Slack-Request-Timestamp: <unix seconds>`` and
``X-Slack-Signature: v0=hex(HMAC-SHA256(signing_secret, "v0:{timestamp}:{body}"))``.
Events go as JSON; interactions as ``application/x-www-form-urlencoded`` ``payload=<json>``.

``Sender(bot_url, signing_secret, *, clock=time.time, timeout=10.0)``
    ``await send_event(event, *, event_id=None, retry_num=None, retry_reason="http_timeout") -> Ack``
        wraps ``event`` in an ``event_callback`` envelope (unique ``event_id`` "Ev...", ``event_time``,
        ``authorizations``) and posts it. Pass the same ``event_id`` with ``retry_num`` (1..3) to re-send
        as Slack's retries do (``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason``).
    ``await resend(ack, *, retry_num, retry_reason="http_timeout") -> Ack``: re-posts an earlier body as is.
    ``await send_interaction(payload) -> Ack``: block_actions / view_submission / view_closed.
    ``await url_verification(challenge=None) -> Ack``.
    ``acks``: every ``Ack`` in order. ``close()`` releases the HTTP session.

``Ack`` records: ``kind`` (event type or payload type), ``status`` (HTTP), ``duration_ms`` (time to ack),
``body`` (text), ``json`` (the body parsed, ``None`` when empty/not JSON), ``event_id``, ``retry_num``,
``request_body`` and ``content_type`` (and ``envelope_id`` when delivered over Socket Mode).
``ok`` is ``status == 200``; ``in_time`` is ok within 3 s.

Payload builders (pure): ``event_envelope``, ``block_actions_payload``, ``view_submission_payload``,
``user_ref``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from bot.fakeslack.state import APP_ID, BOT_USER_ID, JSON, TEAM_DOMAIN, TEAM_ID, Clock, Directory

VERIFICATION_TOKEN = "playground-verification-token"


def sign(signing_secret: str, timestamp: str, body: str) -> str:
    """Slack's v0 signature of ``body`` sent at ``timestamp`` (unix seconds as a string)."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass
class Ack:
    """How the app answered one request."""

    kind: str
    status: int
    duration_ms: float
    body: str
    json: Any
    request_body: str
    content_type: str
    event_id: str | None = None
    retry_num: int | None = None
    envelope_id: str | None = None  # Socket Mode deliveries (``socket_mode.SocketSender``)

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def in_time(self) -> bool:
        """Acknowledged with 200 within Slack's 3 seconds (else Slack shows an error / retries events)."""
        return self.ok and self.duration_ms < 3000


def new_event_id() -> str:
    """An Events API event_id: ``Ev`` + 9 upper-case letters/digits, unique."""
    return "Ev" + secrets.token_hex(5).upper()[:9]


def event_envelope(event: JSON, *, event_id: str, event_time: int) -> JSON:
    """The ``event_callback`` envelope Slack wraps every event in."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": TEAM_ID,
        "context_team_id": TEAM_ID,
        "context_enterprise_id": None,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": event_time,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": "4-" + secrets.token_urlsafe(24),
    }


def user_ref(directory: Directory, user: str) -> JSON:
    """The ``user`` object of interaction payloads: ``{id, username, name, team_id}``."""
    name = directory.user_name(user)
    return {"id": user, "username": name, "name": name, "team_id": TEAM_ID}


def block_actions_payload(
    *,
    directory: Directory,
    user: str,
    channel: str,
    message: JSON,
    is_ephemeral: bool,
    actions: list[JSON],
    state_values: dict[str, dict[str, JSON]],
    trigger_id: str,
    response_url: str,
) -> JSON:
    """A ``block_actions`` payload for an interaction with a message (docs.slack.dev
    reference/interaction-payloads/block_actions-payload). ``message`` is omitted for ephemerals."""
    payload: JSON = {
        "type": "block_actions",
        "user": user_ref(directory, user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": is_ephemeral,
        },
        "trigger_id": trigger_id,
        "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": directory.channels.get(channel, {}).get("name", "directmessage")},
        "state": {"values": state_values},
        "response_url": response_url,
        "actions": actions,
    }
    if message.get("thread_ts"):
        payload["container"]["thread_ts"] = message["thread_ts"]
    if not is_ephemeral:
        payload["message"] = message
    return payload


def view_submission_payload(
    *, directory: Directory, user: str, view: JSON, state_values: dict[str, dict[str, JSON]], trigger_id: str
) -> JSON:
    """A ``view_submission`` payload (docs.slack.dev reference/interaction-payloads/view-interactions-payload)."""
    submitted = dict(view)
    submitted["state"] = {"values": state_values}
    return {
        "type": "view_submission",
        "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
        "user": user_ref(directory, user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


class Sender:
    """Posts signed requests to the app and records its acks. See the module docstring."""

    def __init__(self, bot_url: str, signing_secret: str, *, clock: Clock = time.time, timeout: float = 10.0) -> None:
        self.bot_url = bot_url
        self._secret = signing_secret
        self._clock = clock
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self.acks: list[Ack] = []

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send_event(
        self,
        event: JSON,
        *,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str = "http_timeout",
    ) -> Ack:
        """Post ``event`` in an event_callback envelope (a retry when ``retry_num`` is given)."""
        envelope = event_envelope(event, event_id=event_id or new_event_id(), event_time=int(self._clock()))
        return await self._post(
            json.dumps(envelope),
            "application/json",
            kind=str(event.get("type")),
            event_id=envelope["event_id"],
            retry_num=retry_num,
            retry_reason=retry_reason,
        )

    async def resend(self, ack: Ack, *, retry_num: int, retry_reason: str = "http_timeout") -> Ack:
        """Re-post the exact body of an earlier request, as a Slack retry (same event_id)."""
        return await self._post(
            ack.request_body,
            ack.content_type,
            kind=ack.kind,
            event_id=ack.event_id,
            retry_num=retry_num,
            retry_reason=retry_reason,
        )

    async def send_interaction(self, payload: JSON) -> Ack:
        """Post an interaction payload form-encoded as ``payload=<json>``."""
        body = urlencode({"payload": json.dumps(payload)})
        return await self._post(body, "application/x-www-form-urlencoded", kind=str(payload.get("type")))

    async def url_verification(self, challenge: str | None = None) -> Ack:
        """The handshake Slack sends when the Request URL is saved; the app must echo ``challenge``."""
        body = {
            "token": VERIFICATION_TOKEN,
            "challenge": challenge or secrets.token_urlsafe(24),
            "type": "url_verification",
        }
        return await self._post(json.dumps(body), "application/json", kind="url_verification")

    async def _post(
        self,
        body: str,
        content_type: str,
        *,
        kind: str,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str = "http_timeout",
    ) -> Ack:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        timestamp = str(int(time.time()))  # Bolt checks it against its own wall clock (300 s skew)
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": sign(self._secret, timestamp, body),
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason
        started = time.perf_counter()
        async with self._session.post(self.bot_url, data=body.encode(), headers=headers) as response:
            text = await response.text()
            status = response.status
        duration_ms = (time.perf_counter() - started) * 1000
        try:
            parsed = json.loads(text) if text else None
        except json.JSONDecodeError:
            parsed = None
        ack = Ack(
            kind=kind,
            status=status,
            duration_ms=duration_ms,
            body=text,
            json=parsed,
            request_body=body,
            content_type=content_type,
            event_id=event_id,
            retry_num=retry_num,
        )
        self.acks.append(ack)
        return ack
