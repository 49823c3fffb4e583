"""A loopback HTTP server that speaks OpenAI Chat Completions (``POST /v1/chat/completions``).

Point ``AsyncOpenAI(base_url=server.base_url, api_key="test")`` at it. Answers come from a script:
``server.script(reply, ...)`` queues :class:`Reply` objects used in order; when the queue is empty the
optional ``responder(request_json) -> Reply`` decides. Every request body is recorded in ``requests``.

Both ``stream=True`` (server-sent events, ``data: {chunk}`` lines, ``data: [DONE]``) and plain JSON are
served. A reply can also carry raw streamed ``chunks`` (any delta dicts, for odd layouts), a raw
``json_body`` (answered as plain JSON even to a stream request, as some servers do), provider extras
(``reasoning`` text sent as ``reasoning_content``, other message fields, per-call fields), an HTTP error
``status``, or a ``delay``.

``FakeOpenAI(require_reasoning_roundtrip=True)`` behaves like DeepSeek's thinking mode: it refuses (HTTP 400)
a request whose assistant message with ``tool_calls`` lacks ``reasoning_content``, or does not send back
exactly the extras this server returned with those calls. :func:`collect_turn` runs one model turn for tests.

Usage: every answer reports ``usage.prompt_tokens`` counted by this server's own tokenizer (:func:`count_tokens`:
words, numbers and punctuation marks, plus 3 per message; not the agent's estimate, so calibration has something to
learn); a stream carries it in a last chunk without choices when the request asks for it
(``stream_options.include_usage``), as OpenAI does. ``FakeOpenAI(context_window=n)`` refuses a request of more than
``n`` counted tokens with OpenAI's HTTP 400 ``context_length_exceeded`` error and wording.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.agent.model import ChatModel, TextDelta, TurnDone

_TOKEN = re.compile(r"\w+|[^\w\s]")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def count_tokens(body: dict[str, Any]) -> int:
    """This server's count of a request's prompt tokens: the words, numbers and punctuation marks of every string
    of its messages and tools, plus 3 per message."""
    messages = body.get("messages") or []
    text = "\n".join(_strings(messages) + _strings(body.get("tools") or []))
    return len(_TOKEN.findall(text)) + 3 * len(messages)


@dataclass
class Reply:
    """One scripted answer.

    - ``text``: assistant content; ``tool_calls``: ``[(id, name, arguments_json_text), ...]``.
    - ``reasoning``: thinking text, streamed as ``delta.reasoning_content`` pieces before the text (or set as the
      message's ``reasoning_content`` when not streaming), as DeepSeek's thinking mode does. (OpenRouter's own
      ``reasoning`` field: put it in ``message_extra``.)
    - ``message_extra``: other assistant-message fields, e.g. ``{"reasoning_details": [...]}``; sent in one
      delta before the text (or set on the message).
    - ``tool_call_extra``: ``{call_id: {field: value}}``, fields added to that call's first streamed entry
      (or its message entry), e.g. ``{"c1": {"extra_content": {"google": {"thought_signature": "..."}}}}``.
    - ``chunks``: raw ``choices[0].delta`` dicts to stream instead (stream requests only; any keys and values,
      e.g. ``arguments`` as an object, no ``index``).
    - ``json_body``: a raw JSON body answered as ``application/json`` with ``status``, whatever the request's
      ``stream`` flag (a server that ignores ``stream: true``, or an ``{"error": ...}`` body).
    - ``finish_reason``: overrides the default (``"tool_calls"`` when there are calls, else ``"stop"``).
    - ``status``: HTTP error status to answer with (e.g. 500), ``delay``: seconds to wait first.
    - ``chunk_delay``: seconds between streamed deltas; ``endless``: after the deltas, keep streaming ``"x "``
      every ``chunk_delay`` seconds until the client goes away (a server that never finishes its turn).
    """

    text: str = ""
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    reasoning: str = ""
    message_extra: dict[str, Any] = field(default_factory=dict)
    tool_call_extra: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunks: list[dict[str, Any]] | None = None
    json_body: dict[str, Any] | None = None
    finish_reason: str | None = None
    status: int = 200
    delay: float = 0.0
    chunk_delay: float = 0.0
    endless: bool = False

    def message_fields(self) -> dict[str, Any]:
        """The assistant message's provider extras: ``reasoning_content`` (from ``reasoning``), ``message_extra``."""
        fields = {"reasoning_content": self.reasoning} if self.reasoning else {}
        return {**fields, **self.message_extra}


def tool_call(name: str, arguments: dict[str, Any] | str, *, id: str | None = None) -> tuple[str, str, str]:
    """A ``(id, name, arguments)`` tuple for :class:`Reply`; dict arguments are JSON-encoded."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return (id or f"call_{abs(hash((name, args))) % 10**8}", name, args)


async def collect_turn(
    model: ChatModel,
    messages: list[dict[str, Any]] | None = None,
    *,
    tools: list[dict[str, Any]] | None = None,
) -> tuple[list[str], TurnDone]:
    """Run one ``model.stream_turn`` (default messages: one user "hi"); returns its text pieces and the turn.

    Raises ``AssertionError`` when the stream ends without a :class:`TurnDone` or yields something after it.
    """
    texts: list[str] = []
    done: TurnDone | None = None
    async for event in model.stream_turn(messages or [{"role": "user", "content": "hi"}], tools=tools or []):
        assert done is None, f"event after TurnDone: {event!r}"
        if isinstance(event, TextDelta):
            texts.append(event.text)
        else:
            done = event
    assert done is not None, "the model stream ended without a TurnDone"
    return texts, done


class FakeOpenAI:
    """The loopback Chat Completions server; ``async with FakeOpenAI() as server: server.base_url``.

    ``require_reasoning_roundtrip``: refuse with HTTP 400 (DeepSeek's wording) any request with an assistant
    message that has ``tool_calls`` but no ``reasoning_content``, or whose calls this server returned with
    extras (:meth:`Reply.message_fields`, ``tool_call_extra``) not sent back exactly. The reason of every
    refusal is appended to ``rejections``.
    """

    def __init__(
        self,
        *,
        responder: Callable[[dict[str, Any]], Reply] | None = None,
        require_reasoning_roundtrip: bool = False,
        context_window: int | None = None,
    ) -> None:
        self.responder = responder
        self.require_reasoning_roundtrip = require_reasoning_roundtrip
        self.context_window = context_window
        self.prompt_tokens: list[int] = []  # the count of every request, as reported
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self._issued: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # call id -> (message, call) extras
        self._queue: deque[Reply] = deque()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def reset(self) -> None:
        """Forget queued replies, recorded requests, rejections and the extras issued so far."""
        self._queue.clear()
        self.requests.clear()
        self.prompt_tokens.clear()
        self.rejections.clear()
        self._issued.clear()

    def script(self, *replies: Reply) -> None:
        """Queue replies, used one per request in order."""
        self._queue.extend(replies)

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (0 = a free port); sets ``base_url`` (``http://host:port/v1``)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        self.base_url = f"http://{host}:{bound[1]}/v1"

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    def _next(self, body: dict[str, Any]) -> Reply:
        if self._queue:
            return self._queue.popleft()
        if self.responder:
            return self.responder(body)
        return Reply(text="(no scripted reply)")

    def _roundtrip_problem(self, body: dict[str, Any]) -> str | None:
        """Why a reasoning-mode server would refuse ``body`` (``None`` when it would not)."""
        for i, message in enumerate(body.get("messages") or []):
            if not isinstance(message, dict) or message.get("role") != "assistant" or not message.get("tool_calls"):
                continue
            if not isinstance(message.get("reasoning_content"), str):
                return (
                    f"Missing `reasoning_content` field in the assistant message at message index {i}. "
                    "The `reasoning_content` in the thinking mode must be passed back to the API."
                )
            for call in message["tool_calls"]:
                issued = self._issued.get(str(call.get("id"))) if isinstance(call, dict) else None
                if issued is None:
                    continue
                message_fields, call_fields = issued
                for key, value in message_fields.items():
                    if message.get(key) != value:
                        return f"The `{key}` of the assistant message at message index {i} is not the one returned."
                for key, value in call_fields.items():
                    if call.get(key) != value:
                        return f"The `{key}` of tool call {call['id']} at message index {i} is not the one returned."
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.require_reasoning_roundtrip:
            problem = self._roundtrip_problem(body)
            if problem:
                self.rejections.append(problem)
                error = {
                    "message": problem,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_request_error",
                }
                return web.json_response({"error": error}, status=400)
        prompt_tokens = count_tokens(body)
        self.prompt_tokens.append(prompt_tokens)
        if self.context_window is not None and prompt_tokens > self.context_window:
            text = (
                f"This model's maximum context length is {self.context_window} tokens. However, your "
                f"messages resulted in {prompt_tokens} tokens. Please reduce the length of the messages."
            )
            self.rejections.append(text)
            error = {
                "message": text,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            return web.json_response({"error": error}, status=400)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}
        reply = self._next(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.json_body is not None:
            return web.json_response(reply.json_body, status=reply.status)
        if reply.status != 200:
            return web.json_response(
                {"error": {"message": "scripted failure", "type": "server_error", "code": None}}, status=reply.status
            )
        for cid, _, _ in reply.tool_calls:
            self._issued[cid] = (reply.message_fields(), reply.tool_call_extra.get(cid, {}))
        cid, created, model = f"chatcmpl-{len(self.requests)}", int(time.time()), body.get("model", "fake")
        has_calls = bool(reply.tool_calls) or any(d.get("tool_calls") for d in reply.chunks or [])
        finish = reply.finish_reason or ("tool_calls" if has_calls else "stop")
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, **reply.message_fields()}
            if reply.tool_calls:
                message["tool_calls"] = [
                    {
                        **reply.tool_call_extra.get(i, {}),
                        "id": i,
                        "type": "function",
                        "function": {"name": n, "arguments": a},
                    }
                    for i, n, a in reply.tool_calls
                ]
            return web.json_response(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        deltas = reply.chunks if reply.chunks is not None else self._deltas(reply)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(delta: dict[str, Any], finish_reason: str | None) -> None:
            chunk = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""}, None)
        for delta in deltas:
            await send(delta, None)
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
        while reply.endless:
            try:
                await send({"content": "x "}, None)
            except (ConnectionError, RuntimeError):
                return resp  # the client went away
            await asyncio.sleep(reply.chunk_delay or 0.01)
        await send({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            last = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []}
            await resp.write(f"data: {json.dumps({**last, 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    @staticmethod
    def _deltas(reply: Reply) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if reply.reasoning:
            words = reply.reasoning.split(" ")
            out += [{"reasoning_content": w + (" " if i < len(words) - 1 else "")} for i, w in enumerate(words)]
        if reply.message_extra:
            out.append(dict(reply.message_extra))
        if reply.text:
            words = reply.text.split(" ")
            out += [{"content": w + (" " if i < len(words) - 1 else "")} for i, w in enumerate(words)]
        for index, (cid, name, args) in enumerate(reply.tool_calls):
            first = {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
            out.append({"tool_calls": [{**reply.tool_call_extra.get(cid, {}), **first}]})
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                out.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        return out
