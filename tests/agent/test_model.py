"""OpenAIChatModel against the loopback Chat Completions server (real HTTP through the openai SDK)."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from bot.agent import OpenAIChatModel, TextDelta, ToolCallAssembler, TurnDone
from bot.agent.state import ToolCall
from bot.errors import ModelCallFailed
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


async def one_turn(model: OpenAIChatModel) -> tuple[list[str], TurnDone]:
    texts: list[str] = []
    done = None
    async for event in model.stream_turn([{"role": "user", "content": "hi"}], tools=[]):
        if isinstance(event, TextDelta):
            texts.append(event.text)
        else:
            done = event
    assert done is not None
    return texts, done


def model_for(server: FakeOpenAI, **kwargs: object) -> OpenAIChatModel:
    return OpenAIChatModel(model="m", base_url=server.base_url, api_key="sk-test", **kwargs)  # type: ignore[arg-type]


async def test_streams_text_and_tool_calls(openai_server: FakeOpenAI) -> None:
    openai_server.script(
        Reply(text="Let me ask you.", tool_calls=[tool_call("ask_user", {"question": "Which?"}, id="c1")])
    )
    texts, done = await one_turn(model_for(openai_server))
    assert "".join(texts) == "Let me ask you." and len(texts) > 1
    assert done.tool_calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}')]
    assert done.finish_reason == "tool_calls"
    assert openai_server.requests[0]["stream"] is True and openai_server.requests[0]["model"] == "m"


async def test_deltas_assembled_by_index_when_interleaved(openai_server: FakeOpenAI) -> None:
    """First chunk: two entries for index 0; a later chunk interleaves index 1 and index 0."""
    openai_server.script(
        Reply(
            chunks=[
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "ask_user", "arguments": ""},
                        },
                        {"index": 0, "function": {"arguments": '{"question": '}},
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "echo", "arguments": '{"te'},
                        },
                        {"index": 0, "function": {"arguments": '"Which?"}'}},
                    ]
                },
                {"tool_calls": [{"index": 1, "function": {"arguments": 'xt": "x"}'}}]},
            ]
        )
    )
    _, done = await one_turn(model_for(openai_server))
    assert done.tool_calls == [
        ToolCall(id="call_a", name="ask_user", arguments='{"question": "Which?"}'),
        ToolCall(id="call_b", name="echo", arguments='{"text": "x"}'),
    ]


def test_assembler_accepts_repeated_names() -> None:
    a = ToolCallAssembler()
    a.feed([{"index": 0, "id": "c", "function": {"name": "ask_user", "arguments": "{}"}}])
    a.feed([{"index": 0, "function": {"name": "ask_user", "arguments": ""}}])
    assert a.calls() == [ToolCall(id="c", name="ask_user", arguments="{}")]


async def test_server_error_after_client_retries_is_model_call_failed(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(status=503), Reply(status=503))
    with pytest.raises(ModelCallFailed, match="HTTP 503"):
        await one_turn(model_for(openai_server, max_retries=1))
    assert len(openai_server.requests) == 2  # the openai client retried once itself


async def test_connection_refused_is_model_call_failed() -> None:
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-secret-value", max_retries=0)
    with pytest.raises(ModelCallFailed) as info:
        await one_turn(model)
    assert "sk-secret-value" not in str(info.value) and "connect" in str(info.value)


async def test_honours_openai_env_variables(openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    openai_server.script(Reply(text="env ok"))
    texts, _ = await one_turn(OpenAIChatModel(model="gpt-4.1-mini"))
    assert "".join(texts) == "env ok"


async def test_fake_server_speaks_plain_json_too(openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", {"question": "q"}, id="c9")]))
    client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test")
    reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.id == "c9" and call.function.name == "ask_user"  # type: ignore[union-attr]
    assert reply.choices[0].finish_reason == "tool_calls"
    await client.close()
