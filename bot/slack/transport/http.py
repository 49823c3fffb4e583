"""``POST /slack/events`` in HTTP mode: the raw body is capped, its signature verified, then parsed, then Bolt.

Bolt's own aiohttp adapter parses the body before Bolt's signature middleware runs, so a malformed body from
anyone (signed or not) raised inside Bolt: HTTP 500 and a traceback in the log per request. Here every
request goes through, in order (the first failing step answers, and logs one short line):

1. **Size.** At most :data:`MAX_BODY_BYTES` (1 MiB, aiohttp's default ``client_max_size``, which the Bolt
   adapter had; Slack's payloads are far smaller) -> else **413**, from ``Content-Length`` or while reading.
2. **Signature**, on the raw bytes, before anything is decoded (Slack: verify the v0 signature of the raw
   body, docs.slack.dev authentication/verifying-requests-from-slack): ``X-Slack-Request-Timestamp`` (unix
   seconds, within 5 minutes of our clock, either way) and ``X-Slack-Signature``
   (``v0=hex(HMAC-SHA256(signing_secret, "v0:{timestamp}:{raw body}"))``), with slack_sdk's
   ``SignatureVerifier`` -> else **401**. Missing or malformed headers (a timestamp that is not a number, a
   signature that is not ASCII) are 401 too, never a 500.
3. **Body.** UTF-8 (Slack sends UTF-8), parsed the way Bolt will parse it (JSON for ``application/json`` or a
   body starting with ``{``; else a form: ``payload=<JSON>`` for interactivity, plain fields for slash
   commands and ``ssl_check``), and the result a non-empty JSON object nested at most :data:`MAX_JSON_DEPTH`
   deep -> else **400**.
4. **Bolt.** An ``AsyncBoltRequest`` (the raw body as text, the headers, the query string) goes to
   ``app.async_dispatch``; its ``BoltResponse`` becomes the aiohttp response (status, headers, body). Bolt's
   signature middleware re-verifies the same body; URL verification and ``ssl_check`` (signed, like every
   request Slack sends) are answered by Bolt as before (200 with the challenge; 200, empty).

Refusals answer ``{"error": "<reason>"}`` and log one WARNING line on ``bot.slack.transport.http``: the status and a
fixed reason, never a body, a header value or a secret, no traceback. :class:`RefusalLog` keeps at most one
line per reason per 10 s and counts the rest. Requests aiohttp itself cannot parse (a bad request line or
header) get aiohttp's 400 and the same kind of short line, instead of aiohttp's traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import extract_content_type, parse_body
from slack_sdk.signature import Clock, SignatureVerifier

from bot.agent.text import nested_deeper_than
from bot.errors import BotError
from bot.ops.server import OpsEndpoints
from bot.slack.transport.runner import HttpBoltRequest

MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 64  # by our count Slack's deepest (rich text in the message of a block_actions) nest ~15 deep
SIGNATURE_MAX_AGE_SECONDS = 5 * 60  # slack_sdk's SignatureVerifier window, checked first to name the reason
LOG_WINDOW_SECONDS = 10.0
MAX_TIMESTAMP_DIGITS = 12  # unix seconds have 10 digits until the year 2286
READ_CHUNK_BYTES = 64 * 1024
REPLAY_CHECK_SECONDS = 0.5

log = logging.getLogger(__name__)
server_log = logging.getLogger(f"{__name__}.server")  # aiohttp's request handler logs here (see start)


class Refused(Exception):
    """A request refused with ``status`` for a fixed ``reason`` (no request data in it)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class RefusalLog:
    """One log line per refusal reason per ``window`` seconds; the lines in between are counted, and the next
    line for that reason says how many were suppressed. ``clock`` is monotonic seconds."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        window: float = LOG_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.window = window
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def note(self, reason: str, status: int) -> None:
        """Log ``refused <status>: <reason>`` unless a line for ``reason`` went out within the window."""
        now = self.clock()
        last = self._last.get(reason)
        if last is not None and now - last < self.window:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return
        self._last[reason] = now
        suppressed = self._suppressed.pop(reason, 0)
        more = f" ({suppressed} similar refusals suppressed since the last line)" if suppressed else ""
        self.logger.warning("Slack request refused with %d: %s%s", status, reason, more)


class RawBodyVerifier(SignatureVerifier):
    """slack_sdk's ``SignatureVerifier`` (5-minute window, constant-time compare) signing the raw bytes as
    they arrived: slack_sdk decodes a ``bytes`` body as UTF-8 first, which raises on bytes that are not."""

    def generate_signature(self, *, timestamp: str, body: str | bytes) -> str | None:
        if timestamp is None:
            return None
        raw = body if isinstance(body, bytes) else (body or "").encode()
        base = b"v0:" + timestamp.encode() + b":" + raw
        secret: str = self.signing_secret
        return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass
class SlackEventsEndpoint:
    """The aiohttp handler of ``POST /slack/events`` (see the module docstring for its steps and answers).

    ``SlackEventsEndpoint(app, signing_secret=...)``; ``await endpoint.handle(request)``.
    """

    app: AsyncApp
    signing_secret: str
    max_body_bytes: int = MAX_BODY_BYTES
    max_depth: int = MAX_JSON_DEPTH
    clock: Clock | None = None
    refusals: RefusalLog | None = None
    is_new_event: Callable[[str], Awaitable[bool]] | None = None  # replay guard: True the first time a key is seen

    def __post_init__(self) -> None:
        self._clock = self.clock or Clock()
        self._verifier = RawBodyVerifier(self.signing_secret, clock=self._clock)
        self._refusals = self.refusals or RefusalLog(log)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """413 / 401 / 400 for a body too large / not signed by Slack / malformed; else Bolt's answer."""
        try:
            raw = await self.read_body(request)
            headers = multi_headers(request.headers)
            self.verify(raw, headers)
            text, body = self.check_body(raw, headers)
            await self.refuse_replay(text, headers)
            bolt_request = bolt_request_of(text, body, headers, request.query_string)
        except Refused as refused:
            self._refusals.note(refused.reason, refused.status)
            response = web.json_response({"error": refused.reason}, status=refused.status)
            if refused.status == 413:
                response.force_close()  # the rest of the body was not read
            return response
        bolt_response = await self.app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)

    async def refuse_replay(self, text: str, headers: Mapping[str, list[str]]) -> None:
        """Refuse (401) an interaction (a ``payload=`` form: clicks, submissions) whose exact signature was seen
        before: a signed request replayed within Slack's 5-minute window. Events are not checked here (Slack's
        retries of an event are deduplicated by ``event_id``). A store that doesn't answer within
        :data:`REPLAY_CHECK_SECONDS` lets the request go on: the ack (and a modal's 3-second trigger) must not wait
        on Redis."""
        if self.is_new_event is None or not text.startswith("payload="):
            return
        signature = first(headers, "x-slack-signature") or ""
        try:
            fresh = await asyncio.wait_for(self.is_new_event(f"signature:{signature}"), REPLAY_CHECK_SECONDS)
        except (BotError, TimeoutError):
            return
        if not fresh:
            raise Refused(401, "request replayed")

    async def read_body(self, request: web.Request) -> bytes:
        """The raw body, at most ``max_body_bytes`` (413 beyond, before reading when ``Content-Length`` says so;
        400 for a body cut short)."""
        too_large = Refused(413, f"body over {self.max_body_bytes} bytes")
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        try:
            while chunk := await request.content.read(READ_CHUNK_BYTES):
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise too_large
                chunks.append(chunk)
        except (aiohttp.ClientError, HttpProcessingError, ConnectionError):
            raise Refused(400, "body cut short") from None
        return b"".join(chunks)

    def verify(self, raw: bytes, headers: Mapping[str, list[str]]) -> None:
        """Slack's v0 signature of the raw body, timestamp within 5 minutes (docs.slack.dev
        authentication/verifying-requests-from-slack); raises ``Refused(401, ...)``."""
        timestamp = first(headers, "x-slack-request-timestamp")
        signature = first(headers, "x-slack-signature")
        if (
            timestamp is None
            or signature is None
            or not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= MAX_TIMESTAMP_DIGITS)
            or not signature.isascii()
        ):
            raise Refused(401, "missing or malformed signature headers")
        if abs(self._clock.now() - int(timestamp)) > SIGNATURE_MAX_AGE_SECONDS:
            raise Refused(401, "timestamp outside the 5-minute window")
        if not self._verifier.is_valid(body=raw, timestamp=timestamp, signature=signature):
            raise Refused(401, "signature mismatch")

    def check_body(self, raw: bytes, headers: Mapping[str, list[str]]) -> tuple[str, dict[str, Any]]:
        """The body as text and parsed (as Bolt parses it), once it is UTF-8 and a non-empty JSON object at most
        ``max_depth`` deep; raises ``Refused(400, ...)``."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(400, "body is not UTF-8") from None
        too_deep = Refused(400, f"body nested deeper than {self.max_depth}")
        try:
            body = parse_body(text, extract_content_type(dict(headers)))
        except RecursionError:
            raise too_deep from None
        except ValueError:  # json.JSONDecodeError, and integers too long to convert
            raise Refused(400, "body is not JSON (or a form with a JSON payload)") from None
        if not isinstance(body, dict):
            raise Refused(400, "body is not a JSON object")
        if not body:
            raise Refused(400, "empty body")
        if nested_deeper_than(body, self.max_depth):
            raise too_deep
        problem = shape_problem(body)
        if problem:
            raise Refused(400, problem)
        return text, body


# The fields Bolt and the listeners read before any check of their own, with the type Slack always sends.
_SHAPES: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("type", str),
    ("event", dict),
    ("user", dict),
    ("actions", list),
    ("view", dict),
    ("container", dict),
    ("team", dict),
    ("channel", dict),
    ("message", dict),
    ("state", dict),
)


def shape_problem(body: dict[str, Any]) -> str | None:
    """Why ``body`` is not shaped as Slack sends it (a known field of the wrong type, an event or action that is
    not an object, an ``action_id`` that is not a string), or None. Slack's payloads always pass; a forged one that
    doesn't is refused (400) instead of failing inside Bolt (500 and a traceback)."""
    for name, kind in _SHAPES:
        if name in body and body[name] is not None and not isinstance(body[name], kind):
            return f"field {name} is not {'an object' if kind is dict else 'a list' if kind is list else 'a string'}"
    event = body.get("event")
    if isinstance(event, dict):
        for name in ("type", "subtype", "user", "channel", "text", "ts", "thread_ts"):
            if name in event and event[name] is not None and not isinstance(event[name], str):
                return f"event.{name} is not a string"
    if body.get("type") == "block_actions" and not body.get("actions"):
        return "block_actions without an action"
    for action in body.get("actions") or []:
        if not isinstance(action, dict) or not isinstance(action.get("action_id", ""), str):
            return "an action is not an object with a string action_id"
        for name in ("selected_option",):
            if name in action and not isinstance(action[name], dict | None):
                return f"action.{name} is not an object"
    view = body.get("view")
    return _view_problem(view) if isinstance(view, dict) else None


def _view_problem(view: dict[str, Any]) -> str | None:
    """Why a payload's ``view`` is not shaped as Slack sends it (Slack: ``view.state.values`` maps each input's
    ``block_id`` to its ``action_id`` to the element's state object; ``private_metadata``, ``callback_id``, ``id``,
    ``hash`` are strings), or None."""
    for name in ("private_metadata", "callback_id", "id", "hash", "type", "external_id"):
        if view.get(name) is not None and not isinstance(view[name], str):
            return f"view.{name} is not a string"
    state = view.get("state")
    if state is None:
        return None
    values = state.get("values") if isinstance(state, dict) else None
    if not isinstance(state, dict) or not isinstance(values, dict | None):
        return "view.state is not an object of values"
    for block in (values or {}).values():
        if not isinstance(block, dict) or not all(isinstance(element, dict) for element in block.values()):
            return "view.state.values is not block_id -> action_id -> an object"
    return None


def bolt_request_of(text: str, body: dict[str, Any], headers: Mapping[str, list[str]], query: str) -> AsyncBoltRequest:
    """Bolt's request for a checked body (``text``, parsed as ``body``); raises ``Refused(400, ...)`` if Bolt still
    cannot read it (a field of an unexpected type where Bolt looks for the team, user or channel)."""
    try:
        return HttpBoltRequest.parsed(text, body, query=query, headers=dict(headers))
    except Exception as exc:  # Bolt reads untyped JSON with plain indexing; anything it raises is a bad body
        raise Refused(400, f"body unreadable by Bolt ({type(exc).__name__})") from None


def multi_headers(headers: Mapping[str, str]) -> dict[str, list[str]]:
    """Headers as Bolt keeps them: lower-case names, every value in order (``request.headers`` is a multidict:
    its ``items()`` repeats a name)."""
    result: dict[str, list[str]] = {}
    for name, value in headers.items():
        result.setdefault(name.lower(), []).append(value)
    return result


def first(headers: Mapping[str, list[str]], name: str) -> str | None:
    values = headers.get(name)
    return values[0] if values else None


class QuietParserErrors(logging.Filter):
    """On aiohttp's request-handler logger: a request aiohttp could not parse (``HttpProcessingError``: a bad
    request line, header or length; aiohttp answers 400) becomes a short, rate-limited line with no traceback.
    Any other record passes unchanged."""

    def __init__(self, refusals: RefusalLog) -> None:
        super().__init__()
        self.refusals = refusals

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        self.refusals.note(f"malformed HTTP request ({type(exc).__name__})", exc.code or 400)
        return False


_parser_filter = QuietParserErrors(RefusalLog(log))
server_log.addFilter(_parser_filter)


def events_web_app(
    app: AsyncApp,
    *,
    signing_secret: str,
    path: str,
    is_new_event: Callable[[str], Awaitable[bool]] | None = None,
    ops: OpsEndpoints | None = None,
) -> web.Application:
    """An aiohttp application serving ``POST <path>`` with a :class:`SlackEventsEndpoint` (``is_new_event``: the
    replay guard, see :meth:`SlackEventsEndpoint.refuse_replay`), and ``ops``'s ``GET /metrics``, ``/healthz``,
    ``/readyz`` when given. Serve it with ``web.AppRunner(web_app, logger=server_log)`` so aiohttp's parse errors
    are logged short."""
    endpoint = SlackEventsEndpoint(app, signing_secret, is_new_event=is_new_event)
    web_app = web.Application(client_max_size=endpoint.max_body_bytes)
    web_app.router.add_post(path, endpoint.handle)
    if ops is not None:
        ops.add_routes(web_app)
    return web_app
