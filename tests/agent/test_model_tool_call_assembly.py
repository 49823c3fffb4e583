"""Streamed tool calls assembled whatever the server does with ``index``, ``id``, ``name`` and ``arguments``.

Every case goes through real HTTP and the openai SDK: the fake server streams the raw delta dicts given.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.agent import OpenAIChatModel, ToolCallAssembler
from bot.agent.model import MAX_ARGUMENT_DEPTH, parse_arguments
from bot.agent.state import ToolCall
from bot.testing.openai_server import FakeOpenAI, Reply, collect_turn


def entry(
    index: int | None = None, id: str | None = None, name: str | None = None, arguments: Any = None
) -> dict[str, Any]:
    """One ``tool_calls[]`` delta entry with only the keys given."""
    e: dict[str, Any] = {}
    if index is not None:
        e["index"] = index
    if id is not None:
        e["id"] = id
        e["type"] = "function"
    fn = {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}
    if fn:
        e["function"] = fn
    return e


async def calls_of(server: FakeOpenAI, *deltas: list[dict[str, Any]]) -> list[ToolCall]:
    """Stream one delta per list of entries; the assembled calls."""
    server.script(Reply(chunks=[{"tool_calls": entries} for entries in deltas]))
    model = OpenAIChatModel(model="m", base_url=server.base_url, api_key="sk-test")
    _, done = await collect_turn(model)
    await model.aclose()
    return done.tool_calls


async def test_deltas_assembled_by_index_when_interleaved(openai_server: FakeOpenAI) -> None:
    """First chunk: two entries for index 0; a later chunk interleaves index 1 and index 0."""
    calls = await calls_of(
        openai_server,
        [entry(0, "call_a", "ask_user", ""), entry(0, arguments='{"question": ')],
        [entry(1, "call_b", "echo", '{"te'), entry(0, arguments='"Which?"}')],
        [entry(1, arguments='xt": "x"}')],
    )
    assert calls == [
        ToolCall(id="call_a", name="ask_user", arguments='{"question": "Which?"}'),
        ToolCall(id="call_b", name="echo", arguments='{"text": "x"}'),
    ]


async def test_whole_calls_sharing_index_0_with_different_ids_stay_apart(openai_server: FakeOpenAI) -> None:
    """A local server sends each call complete in one entry, every one with ``index: 0``."""
    calls = await calls_of(
        openai_server,
        [entry(0, "call_a", "ask_user", '{"question": "Which?"}')],
        [entry(0, "call_b", "ask_user", '{"question": "When?"}')],
    )
    assert calls == [
        ToolCall(id="call_a", name="ask_user", arguments='{"question": "Which?"}'),
        ToolCall(id="call_b", name="ask_user", arguments='{"question": "When?"}'),
    ]


async def test_whole_calls_without_ids_at_one_index_split_on_a_new_name(openai_server: FakeOpenAI) -> None:
    """No ids, ``index: 0`` each time: a name arriving after complete arguments starts a call (same tool or not)."""
    calls = await calls_of(
        openai_server,
        [entry(0, name="ask_user", arguments='{"question": "Which?"}')],
        [entry(0, name="ask_user", arguments='{"question": "When?"}')],
        [entry(0, name="echo"), entry(0, arguments='{"text": "x"}')],
    )
    assert [(c.name, c.arguments) for c in calls] == [
        ("ask_user", '{"question": "Which?"}'),
        ("ask_user", '{"question": "When?"}'),
        ("echo", '{"text": "x"}'),
    ]
    assert all(c.id for c in calls) and len({c.id for c in calls}) == 3


async def test_name_sent_in_pieces_before_arguments_is_concatenated(openai_server: FakeOpenAI) -> None:
    """Guard: the rules above must not split a name streamed in pieces."""
    calls = await calls_of(
        openai_server,
        [entry(0, "c1", "ask_")],
        [entry(0, name="user")],
        [entry(0, arguments='{"question": "Which?"}')],
    )
    assert calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}')]


async def test_name_repeated_on_every_delta_assembles_one_call(openai_server: FakeOpenAI) -> None:
    """Guard: a server repeating id and name beside each argument fragment, then once more with nothing."""
    calls = await calls_of(
        openai_server,
        [entry(0, "c1", "ask_user", '{"question": ')],
        [entry(0, "c1", "ask_user", '"Which?"')],
        [entry(0, "c1", "ask_user", "}")],
        [entry(0, "c1", "ask_user", "")],
    )
    assert calls == [ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?"}')]


async def test_entries_without_index_follow_their_id(openai_server: FakeOpenAI) -> None:
    """No ``index`` at all: fragments of two interleaved calls are told apart by id."""
    calls = await calls_of(
        openai_server,
        [entry(id="call_a", name="ask_user", arguments='{"question": ')],
        [entry(id="call_b", name="echo", arguments='{"text": ')],
        [entry(id="call_a", arguments='"Which?"}')],
        [entry(id="call_b", arguments='"x"}')],
    )
    assert calls == [
        ToolCall(id="call_a", name="ask_user", arguments='{"question": "Which?"}'),
        ToolCall(id="call_b", name="echo", arguments='{"text": "x"}'),
    ]


async def test_entries_without_index_or_id_continue_the_last_call(openai_server: FakeOpenAI) -> None:
    calls = await calls_of(
        openai_server,
        [entry(name="ask_user", arguments='{"question": ')],
        [entry(arguments='"Which?"}')],
        [entry(name="echo", arguments='{"text": "x"}')],
    )
    assert [(c.name, c.arguments) for c in calls] == [
        ("ask_user", '{"question": "Which?"}'),
        ("echo", '{"text": "x"}'),
    ]
    assert all(c.id for c in calls) and calls[0].id != calls[1].id


async def test_a_reused_id_at_two_indexes_gives_two_calls_with_unique_ids(openai_server: FakeOpenAI) -> None:
    """Servers that number every call ``call_0``: two calls, and ids unique within the turn."""
    calls = await calls_of(
        openai_server,
        [entry(0, "call_0", "ask_user", '{"question": "Which?"}')],
        [entry(1, "call_0", "echo", '{"text": "x"}')],
    )
    assert [(c.name, c.arguments) for c in calls] == [
        ("ask_user", '{"question": "Which?"}'),
        ("echo", '{"text": "x"}'),
    ]
    assert calls[0].id == "call_0" and calls[1].id not in ("", "call_0")


async def test_calls_keep_arrival_order_not_index_order(openai_server: FakeOpenAI) -> None:
    calls = await calls_of(
        openai_server,
        [entry(3, "call_a", "ask_user", '{"question": "Which?"}')],
        [entry(1, "call_b", "echo", '{"text": "x"}')],
    )
    assert [c.id for c in calls] == ["call_a", "call_b"]


async def test_streamed_arguments_sent_as_a_json_object_are_serialised(openai_server: FakeOpenAI) -> None:
    """``function.arguments`` as an object (the SDK passes it through as a dict)."""
    calls = await calls_of(
        openai_server,
        [entry(0, "c1", "ask_user", {"question": "Which?", "options": [{"label": "é"}]})],
        [entry(1, "c2", "echo", {})],
    )
    assert calls == [
        ToolCall(id="c1", name="ask_user", arguments='{"question": "Which?", "options": [{"label": "é"}]}'),
        ToolCall(id="c2", name="echo", arguments="{}"),
    ]


def test_assembler_accepts_repeated_names() -> None:
    a = ToolCallAssembler()
    a.feed([{"index": 0, "id": "c", "function": {"name": "ask_user", "arguments": "{}"}}])
    a.feed([{"index": 0, "function": {"name": "ask_user", "arguments": ""}}])
    assert a.calls() == [ToolCall(id="c", name="ask_user", arguments="{}")]


def test_arguments_nest_at_most_max_argument_depth_levels() -> None:
    """Up to :data:`MAX_ARGUMENT_DEPTH` levels parse; one more, or past what Python's recursion follows (json.loads
    raises RecursionError), is a ``ValueError`` naming the bound (the tool error the model reads)."""
    inner = MAX_ARGUMENT_DEPTH - 1  # the object itself is the first level
    assert parse_arguments('{"a": ' + "[" * inner + "]" * inner + "}")["a"] is not None
    for depth in (inner + 1, 100_000):
        with pytest.raises(ValueError, match="nested too deeply"):
            parse_arguments('{"a": ' + "[" * depth + "]" * depth + "}")
    assembler = ToolCallAssembler()  # a name again on the same index asks whether the arguments so far are whole
    assembler.feed([entry(index=0, id="c1", name="t", arguments='{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")])
    assembler.feed([entry(index=0, name="t", arguments="{}")])
    assert [c.id for c in assembler.calls()] == ["c1"]  # assembled: its arguments refused when the call is run
