"""A loopback HTTP server that speaks enough of Anthropic's Messages API (``POST /v1/messages``) to drive the real
Claude Code CLI offline (``ANTHROPIC_BASE_URL=server.base_url``, any ``ANTHROPIC_API_KEY``).

The model's script: a request offering the tool named ``tool_use`` (``{"name", "input"}``) and carrying no
``tool_result`` yet is answered with that tool use; a request carrying a ``tool_result`` is answered with a final
text saying what the result was (``RESULT: <its text>``); any other request (Claude Code's side requests: a
title, a quota probe) with a short text. Both ``stream: true`` (server-sent events: ``message_start``,
``content_block_start`` / ``_delta`` / ``_stop``, ``message_delta``, ``message_stop``) and plain JSON are served.
Every request body is kept in ``requests``; other paths answer 404.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class FakeAnthropic:
    """The fake Messages API; ``tool_use``: the tool call its model makes (e.g. ``{"name": "Bash", "input":
    {"command": "echo hi", "description": "Say hi"}}``)."""

    tool_use: dict[str, Any]
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def tool_results(self) -> list[dict[str, Any]]:
        """Every ``tool_result`` block the CLI sent back, in order."""
        return [block for body in self.requests for block in _blocks(body) if block.get("type") == "tool_result"]

    def _content(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        results = [b for b in _blocks(body) if b.get("type") == "tool_result"]
        if results:
            return [{"type": "text", "text": f"RESULT: {_text(results[-1].get('content'))}"}], "end_turn"
        offered = {str(t.get("name")) for t in body.get("tools") or []}
        if self.tool_use["name"] in offered:
            call = {"type": "tool_use", "id": f"toolu_{secrets.token_hex(12)}", **self.tool_use}
            return [call], "tool_use"
        return [{"type": "text", "text": "ok"}], "end_turn"

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        content, stop = self._content(body)
        message = {
            "id": f"msg_{secrets.token_hex(12)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        if not body.get("stream"):
            return web.json_response({**message, "content": content, "stop_reason": stop})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await resp.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode())

        await send("message_start", {"message": {**message, "content": []}})
        for index, block in enumerate(content):
            if block["type"] == "tool_use":
                await send("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                await send("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                delta = {"type": "text_delta", "text": block["text"]}
            await send("content_block_delta", {"index": index, "delta": delta})
            await send("content_block_stop", {"index": index})
        await send(
            "message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}}
        )
        await send("message_stop", {})
        await resp.write_eof()
        return resp


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of the request's last user message."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""
