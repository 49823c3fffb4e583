"""Provider fields beside the standard ones (reasoning, thought signatures) are kept so they can be sent back.

``TurnDone.extra`` holds the assistant message's non-standard fields, ``ToolCall.extra`` a call's. The fake
server's ``require_reasoning_roundtrip`` mode refuses, as DeepSeek's thinking mode does, a history whose
assistant tool-call message lacks them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.agent import OpenAIChatModel
from bot.agent.model import TurnDone
from bot.agent.state import ToolCall
from bot.errors import ModelCallFailed
from bot.testing.openai_server import FakeOpenAI, Reply, collect_turn, tool_call

SIGNATURE = {"extra_content": {"google": {"thought_signature": "c2lnbmF0dXJl"}}}


@pytest.fixture
async def model_for() -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    """``model_for(server, stream=True, **options)``: an OpenAIChatModel on ``server``, closed after the test."""
    made: list[OpenAIChatModel] = []

    def make(server: FakeOpenAI, *, stream: bool = True, **kwargs: Any) -> OpenAIChatModel:
        if not stream:
            kwargs["stream"] = False  # only when asked: the option is new
        made.append(OpenAIChatModel(model="m", base_url=server.base_url, api_key="sk-test", max_retries=0, **kwargs))
        return made[-1]

    yield make
    for model in made:
        await model.aclose()


def assistant_message(done: TurnDone) -> dict[str, Any]:
    """The assistant message a caller keeps in its history: standard fields plus the turn's extras."""
    message: dict[str, Any] = {**done.extra, "role": "assistant", "content": done.content or None}
    if done.tool_calls:
        message["tool_calls"] = [c.to_message_part() for c in done.tool_calls]
    return message


@pytest.mark.parametrize("stream", [True, False])
async def test_reasoning_content_and_call_extras_are_kept(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI, stream: bool
) -> None:
    """DeepSeek thinking mode's ``reasoning_content`` (streamed in pieces) and a Gemini thought signature."""
    openai_server.script(
        Reply(
            reasoning="The user must pick one, so I will ask.",
            text="Let me ask.",
            tool_calls=[tool_call("ask_user", {"question": "Which?"}, id="c1")],
            tool_call_extra={"c1": SIGNATURE},
        )
    )
    texts, done = await collect_turn(model_for(openai_server, stream=stream))
    assert "".join(texts) == "Let me ask."
    assert done.extra == {"reasoning_content": "The user must pick one, so I will ask."}
    assert done.tool_calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}', extra=SIGNATURE)]


async def test_streamed_extras_merge_across_deltas(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    """OpenRouter / vLLM style: strings concatenate, lists extend, dicts merge, nulls are skipped."""
    detail_1 = {"type": "reasoning.text", "text": "Think", "index": 0}
    detail_2 = {"type": "reasoning.text", "text": "ing.", "index": 0}
    openai_server.script(
        Reply(
            chunks=[
                {"reasoning": "Think", "reasoning_details": [detail_1], "meta": {"a": 1}},
                {"reasoning": None, "reasoning_details": [], "refusal": None},
                {"reasoning": "ing.", "reasoning_details": [detail_2], "meta": {"b": 2}},
                {"content": "Hello", "reasoning": None},
                {
                    "tool_calls": [
                        {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": "{}"}, **SIGNATURE}
                    ]
                },
            ]
        )
    )
    texts, done = await collect_turn(model_for(openai_server))
    assert texts == ["Hello"]
    assert done.extra == {"reasoning": "Thinking.", "reasoning_details": [detail_1, detail_2], "meta": {"a": 1, "b": 2}}
    assert done.tool_calls == [ToolCall(id="c1", name="echo", arguments="{}", extra=SIGNATURE)]


async def test_whole_message_extras_are_its_non_standard_non_null_keys(
    model_for: Callable[..., OpenAIChatModel], openai_server: FakeOpenAI
) -> None:
    message = {
        "role": "assistant",
        "content": "Hi",
        "refusal": None,
        "annotations": [],
        "reasoning": "Short.",
        "reasoning_details": [{"type": "reasoning.encrypted", "data": "eyJ4Ijox"}],
        "reasoning_content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}, "index": 0, **SIGNATURE}
        ],
    }
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"message": message}]}
    openai_server.script(Reply(json_body=body))
    _, done = await collect_turn(model_for(openai_server, stream=False))
    assert done.extra == {"reasoning": "Short.", "reasoning_details": message["reasoning_details"]}
    assert done.tool_calls == [ToolCall(id="c1", name="echo", arguments="{}", extra=SIGNATURE)]


@pytest.mark.parametrize("stream", [True, False])
async def test_reasoning_roundtrip_server_refuses_history_without_the_extras(
    model_for: Callable[..., OpenAIChatModel], stream: bool
) -> None:
    """The fake's DeepSeek mode: the turn's extras sent back are accepted; dropping them is HTTP 400."""
    async with FakeOpenAI(require_reasoning_roundtrip=True) as server:
        server.script(
            Reply(
                reasoning="I should ask.",
                tool_calls=[tool_call("ask_user", {"question": "Which?"}, id="c1")],
                tool_call_extra={"c1": SIGNATURE},
            ),
            Reply(text="Thanks."),
        )
        model = model_for(server, stream=stream)
        _, first = await collect_turn(model)
        history = [
            {"role": "user", "content": "hi"},
            assistant_message(first),
            {"role": "tool", "tool_call_id": "c1", "content": '{"answer": "web"}'},
        ]
        texts, _ = await collect_turn(model, history)
        assert "".join(texts) == "Thanks." and server.rejections == []
        assert server.requests[1]["messages"][1]["reasoning_content"] == "I should ask."

        without = [{**history[1]}]
        del without[0]["reasoning_content"]
        wrong_signature = {**history[1], "tool_calls": [{**history[1]["tool_calls"][0], "extra_content": {}}]}
        for bad in (without[0], wrong_signature):
            with pytest.raises(ModelCallFailed, match="HTTP 400"):
                await collect_turn(model, [history[0], bad, history[2]])
        assert "Missing `reasoning_content`" in server.rejections[0]
        assert "`extra_content` of tool call c1" in server.rejections[1]
