"""OpenAIChatModel against the loopback Chat Completions server (real HTTP through the openai SDK):
streaming, plain JSON replies (asked for, or sent to a stream request anyway), and failures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from openai import AsyncOpenAI

from bot.agent import OpenAIChatModel
from bot.agent.state import ToolCall
from bot.errors import ModelCallFailed
from bot.testing.openai_server import FakeOpenAI, Reply, collect_turn, tool_call


@pytest.fixture
async def model_for() -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    """``model_for(server, stream=True, **options)``: an OpenAIChatModel on ``server``, closed after the test."""
    made: list[OpenAIChatModel] = []

    def make(server: FakeOpenAI, *, stream: bool = True, **kwargs: Any) -> OpenAIChatModel:
        if not stream:
            kwargs["stream"] = False  # only when asked: the option is new
        made.append(OpenAIChatModel(model="m", base_url=server.base_url, api_key="sk-test", **kwargs))
        return made[-1]

    yield make
    for model in made:
        await model.aclose()


def completion(message: dict[str, object], finish_reason: str = "stop") -> dict[str, object]:
    """A plain ``chat.completion`` body."""
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


async def test_streams_text_and_tool_calls(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    openai_server.script(
        Reply(text="Let me ask you.", tool_calls=[tool_call("ask_user", {"question": "Which?"}, id="c1")])
    )
    texts, done = await collect_turn(model_for(openai_server))
    assert "".join(texts) == "Let me ask you." and len(texts) > 1
    assert done.tool_calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}')]
    assert done.finish_reason == "tool_calls" and done.extra == {}
    assert openai_server.requests[0]["stream"] is True and openai_server.requests[0]["model"] == "m"


async def test_server_error_after_client_retries_is_model_call_failed(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    openai_server.script(Reply(status=503), Reply(status=503))
    with pytest.raises(ModelCallFailed, match="HTTP 503"):
        await collect_turn(model_for(openai_server, max_retries=1))
    assert len(openai_server.requests) == 2  # the openai client retried once itself


async def test_connection_refused_is_model_call_failed() -> None:
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-secret-value", max_retries=0)
    with pytest.raises(ModelCallFailed) as info:
        await collect_turn(model)
    await model.aclose()
    assert "sk-secret-value" not in str(info.value) and "connect" in str(info.value)


async def test_honours_openai_env_variables(openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    openai_server.script(Reply(text="env ok"))
    model = OpenAIChatModel(model="gpt-4.1-mini")
    texts, _ = await collect_turn(model)
    await model.aclose()
    assert "".join(texts) == "env ok"


async def test_fake_server_speaks_plain_json_too(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", {"question": "q"}, id="c9")]))
    client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test")
    reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.id == "c9" and call.function.name == "ask_user"  # type: ignore[union-attr]
    assert reply.choices[0].finish_reason == "tool_calls"
    await client.close()


async def test_plain_json_reply_to_a_stream_request_becomes_the_turn(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    """A server ignoring ``stream: true`` answers application/json; the SDK alone would yield nothing."""
    call = {"id": "c1", "type": "function", "function": {"name": "ask_user", "arguments": '{"question": "Which?"}'}}
    openai_server.script(
        Reply(json_body=completion({"role": "assistant", "content": "Let me ask.", "tool_calls": [call]}, "tool_calls"))
    )
    texts, done = await collect_turn(model_for(openai_server))
    assert openai_server.requests[0]["stream"] is True
    assert texts == ["Let me ask."] and done.content == "Let me ask."
    assert done.tool_calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}')]
    assert done.finish_reason == "tool_calls"


async def test_stream_false_asks_for_and_reads_a_whole_completion(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    openai_server.script(
        Reply(text="Let me ask you.", tool_calls=[tool_call("ask_user", {"question": "Which?"}, id="c1")])
    )
    texts, done = await collect_turn(model_for(openai_server, stream=False))
    assert not openai_server.requests[0].get("stream")
    assert texts == ["Let me ask you."] and done.content == "Let me ask you."
    assert done.tool_calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}')]
    assert done.finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [True, False])
async def test_whole_message_arguments_sent_as_a_json_object_are_accepted(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI, stream: bool
) -> None:
    """``function.arguments`` as an object, not JSON text, in a plain JSON reply (asked for or not)."""
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "ask_user", "arguments": {"question": "Which?"}}},
        {"type": "function", "function": {"name": "echo", "arguments": {"text": "é"}}},
    ]
    openai_server.script(Reply(json_body=completion({"role": "assistant", "content": None, "tool_calls": calls})))
    texts, done = await collect_turn(model_for(openai_server, stream=stream))
    assert texts == [] and done.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in done.tool_calls] == [
        ("ask_user", {"question": "Which?"}),
        ("echo", {"text": "é"}),
    ]
    assert done.tool_calls[0].id == "c1" and done.tool_calls[1].id not in ("", "c1")


@pytest.mark.parametrize("stream", [True, False])
async def test_error_object_in_a_json_body_is_model_call_failed(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI, stream: bool
) -> None:
    """HTTP 200 with ``{"error": {...}}`` (some proxies do this); the server's message is not repeated."""
    error = {"message": "Incorrect API key provided: sk-abc", "type": "invalid_request_error", "code": "bad_key"}
    openai_server.script(Reply(json_body={"error": error}))
    with pytest.raises(ModelCallFailed, match=r"error \(bad_key\)") as info:
        await collect_turn(model_for(openai_server, stream=stream))
    assert "sk-abc" not in str(info.value)


async def test_http_error_with_stream_false_is_model_call_failed(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    openai_server.script(Reply(status=400))
    with pytest.raises(ModelCallFailed, match="HTTP 400"):
        await collect_turn(model_for(openai_server, stream=False, max_retries=0))


@pytest.fixture
async def raw_sse_server() -> AsyncIterator[Callable[..., str]]:
    """``base_url = raw_sse_server(body, drop=False)``: a loopback server answering every chat completion with
    the raw server-sent-events ``body`` (bytes as they are), then closing the connection abruptly with ``drop``."""
    runners: list[web.AppRunner] = []

    async def start(body: bytes, *, drop: bool = False) -> str:
        async def handle(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(body)
            if drop:
                await asyncio.sleep(0.05)
                assert request.transport is not None
                request.transport.abort()  # mid-stream: no terminating chunk
                return resp
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/v1"

    yield start  # type: ignore[misc]
    for runner in runners:
        await runner.cleanup()


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


FIRST = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"delta": {"content": "Hel"}}]}


async def test_a_stream_chunk_that_is_not_json_is_the_server_s_failure_not_the_adapter_s(
    raw_sse_server: Callable[..., Any],
) -> None:
    base_url = await raw_sse_server(sse(FIRST, b"{not json", b"[DONE]"))
    model = OpenAIChatModel(model="m", base_url=base_url, api_key="sk-test", max_retries=0)
    with pytest.raises(ModelCallFailed) as info:
        await collect_turn(model)
    await model.aclose()
    assert info.value.kind == "server" and "not valid JSON" in str(info.value)


async def test_a_connection_dropped_mid_stream_is_not_reported_as_could_not_connect(
    raw_sse_server: Callable[..., Any],
) -> None:
    base_url = await raw_sse_server(sse(FIRST), drop=True)
    model = OpenAIChatModel(model="m", base_url=base_url, api_key="sk-test", max_retries=0)
    with pytest.raises(ModelCallFailed) as info:
        await collect_turn(model)
    await model.aclose()
    assert info.value.kind == "connection" and "could not connect" not in str(info.value)
    assert "during its reply" in str(info.value)
