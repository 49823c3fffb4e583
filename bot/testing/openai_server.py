"""A loopback HTTP server that speaks OpenAI Chat Completions (``POST /v1/chat/completions``).

Point ``AsyncOpenAI(base_url=server.base_url, api_key="test")`` at it. Answers come from a script:
``server.script(reply, ...)`` queues :class:`Reply` objects used in order; when the queue is empty the
optional ``responder(request_json) -> Reply`` decides. Every request body is recorded in ``requests``.

Both ``stream=True`` (server-sent events, ``data: {chunk}`` lines, ``data: [DONE]``) and plain JSON are
served. A reply can carry raw streamed ``chunks`` (for odd delta layouts), an HTTP error ``status``, or a
``delay`` in seconds before the first byte.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    """One scripted answer.

    - ``text``: assistant content; ``tool_calls``: ``[(id, name, arguments_json_text), ...]``.
    - ``chunks``: raw ``choices[0].delta`` dicts to stream instead (stream mode only).
    - ``status``: HTTP error status to answer with (e.g. 500), ``delay``: seconds to wait first.
    """

    text: str = ""
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    chunks: list[dict[str, Any]] | None = None
    status: int = 200
    delay: float = 0.0


def tool_call(name: str, arguments: dict[str, Any] | str, *, id: str | None = None) -> tuple[str, str, str]:
    """A ``(id, name, arguments)`` tuple for :class:`Reply`; dict arguments are JSON-encoded."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return (id or f"call_{abs(hash((name, args))) % 10**8}", name, args)


class FakeOpenAI:
    """The loopback Chat Completions server; ``async with FakeOpenAI() as server: server.base_url``."""

    def __init__(self, *, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self._queue: deque[Reply] = deque()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def reset(self) -> None:
        """Forget queued replies and recorded requests."""
        self._queue.clear()
        self.requests.clear()

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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        reply = self._next(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return web.json_response(
                {"error": {"message": "scripted failure", "type": "server_error", "code": None}}, status=reply.status
            )
        cid, created, model = f"chatcmpl-{len(self.requests)}", int(time.time()), body.get("model", "fake")
        finish = "tool_calls" if reply.tool_calls else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.tool_calls:
                message["tool_calls"] = [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in reply.tool_calls
                ]
            return web.json_response(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
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
        await send({}, finish)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    @staticmethod
    def _deltas(reply: Reply) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if reply.text:
            words = reply.text.split(" ")
            out += [{"content": w + (" " if i < len(words) - 1 else "")} for i, w in enumerate(words)]
        for index, (cid, name, args) in enumerate(reply.tool_calls):
            out.append(
                {
                    "tool_calls": [
                        {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]
                }
            )
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                out.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        return out
