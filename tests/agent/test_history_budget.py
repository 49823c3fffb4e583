"""The token budget of model requests and the bound on stored history (``bot.agent._loop.budget``), end to end over the
loopback Chat Completions server (its own token count, usage reports and context window) and Redis."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, OpenAIChatModel
from bot.agent._loop.budget import (
    LEFT_OUT_NOTE,
    PER_MESSAGE,
    STORE_HIGH,
    Calibration,
    HistoryBudget,
    fit,
    message_tokens,
    tools_tokens,
)
from bot.agent.state import RunState
from bot.store.keys import Keys
from bot.testing.openai_server import FakeOpenAI, Reply, collect_turn, count_tokens, tool_call

FIXTURES = Path(__file__).parent.parent / "fixtures"


def chat(n: int, *, size: int = 200) -> list[dict[str, Any]]:
    """``n`` alternating user/assistant messages of about ``size`` characters."""
    words = "the quick brown fox jumps over a lazy dog and keeps running far away "
    text = (words * (size // len(words) + 1))[:size]
    return [{"role": ("user", "assistant")[i % 2], "content": f"{i}: {text}"} for i in range(n)]


def calls_turn(ids: list[str], *, result: str = "ok") -> list[dict[str, Any]]:
    """An assistant message with parallel tool calls ``ids`` and one tool result each."""
    calls = [{"id": i, "type": "function", "function": {"name": "echo", "arguments": '{"text": "x"}'}} for i in ids]
    return [
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": i, "content": result} for i in ids),
    ]


def request_tokens(agent: Agent, body: dict[str, Any]) -> int:
    """The agent's calibrated estimate of a recorded request (messages and tool specs)."""
    raw = sum(message_tokens(m) for m in body["messages"]) + tools_tokens(body.get("tools") or [])
    return int(raw * agent.budget.calibration.ratio(agent.budget.model))


def assert_well_formed(messages: list[dict[str, Any]]) -> None:
    """Chat Completions: every tool call has its result, every result its call, and nothing starts with a result."""
    body = [m for m in messages if m["role"] != "system"]
    assert body and body[0]["role"] != "tool", [m["role"] for m in body]
    wanted = [c["id"] for m in body if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in body if m["role"] == "tool"]
    assert sorted(wanted) == sorted(answered), (wanted, answered)
    for i, m in enumerate(body):  # results follow their call directly
        if m["role"] == "tool":
            j = i
            while body[j]["role"] == "tool":
                j -= 1
            assert m["tool_call_id"] in {c["id"] for c in body[j].get("tool_calls") or []}


async def budget_agent(make_agent: Any, client: aioredis.Redis, budget: int | None, **kwargs: Any) -> Agent:
    agent: Agent = make_agent(client, history_budget=budget, **kwargs)
    agent.budget.calibration = Calibration()  # this test's own, not the process's
    return agent


async def test_a_request_fits_the_budget_oldest_turns_out_first(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = await budget_agent(make_agent, fake_redis, 2000)
    history = chat(400)
    openai_server.script(Reply(text="Sure."))
    await (await agent.stream("and now?", history=history)).result()
    [body] = openai_server.requests
    assert request_tokens(agent, body) <= 2000
    sent = body["messages"]
    assert sent[0]["role"] == "system" and sent[0]["content"].endswith(LEFT_OUT_NOTE)
    assert sent[-1] == {"role": "user", "content": "and now?"}
    assert sent[1:-1] == history[len(history) - (len(sent) - 2) :]  # the newest turns, in order
    assert 4 < len(sent) < 100


async def test_without_a_budget_everything_is_sent(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = await budget_agent(make_agent, fake_redis, None)
    openai_server.script(Reply(text="Sure."))
    await (await agent.stream("and now?", history=chat(400))).result()
    assert len(openai_server.requests[0]["messages"]) == 402


SHAPES = {
    "single calls": [m for k in range(30) for m in chat(1) + calls_turn([f"s{k}"], result="r" * 300)],
    "parallel calls": [m for k in range(20) for m in chat(1) + calls_turn([f"p{k}a", f"p{k}b", f"p{k}c"])],
    "calls in a row": chat(1) + [m for k in range(40) for m in calls_turn([f"c{k}"], result="x" * 150)],
    "one big result": chat(20) + calls_turn(["big1", "big2"], result="y" * 4000) + chat(20),
    "ending on calls": chat(30) + calls_turn(["e1", "e2"], result="z" * 500),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_tool_call_and_its_results_are_never_separated(shape: str) -> None:
    messages = SHAPES[shape]
    sizes = [message_tokens(m) for m in messages]
    for budget, quantum in itertools.product(range(0, sum(sizes) + 200, 37), (0, 100)):
        kept, left_out = fit(messages, sizes, budget=budget, quantum=quantum)
        assert_well_formed(kept)
        assert left_out == len(messages) - len(kept)
        assert kept == [m for m in messages if any(m is k for k in kept)]  # in order, nothing invented
        last_turn = messages[-3:] if shape == "ending on calls" else messages[-1:]
        assert kept[-len(last_turn) :] == last_turn


async def test_requests_over_tool_call_histories_stay_well_formed(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    from tests.agent.test_agent import echo_tool

    agent = await budget_agent(make_agent, fake_redis, 1200, tools=[echo_tool])
    history = SHAPES["parallel calls"] + SHAPES["single calls"]
    openai_server.script(
        Reply(tool_calls=[tool_call("echo", {"text": "a"}, id="n1"), tool_call("echo", {"text": "b"}, id="n2")]),
        Reply(text="Done."),
    )
    await (await agent.stream("go", history=history)).result()
    assert len(openai_server.requests) == 2
    for body in openai_server.requests:
        assert_well_formed(body["messages"])
        assert len(body["messages"]) < len(history)
    last = openai_server.requests[1]["messages"]
    assert [m.get("tool_call_id") for m in last[-2:]] == ["n1", "n2"] and last[-4]["content"] == "go"


async def test_the_pending_question_is_sent_with_everything_older_left_out(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """The newest turn and the latest user message are kept whatever else must go: here every older message (each
    ~1,000 tokens, none fits beside them)."""
    agent = await budget_agent(make_agent, fake_redis, 4000)
    long_question = "please weigh all of this: " + "detail " * 1500  # ~2,600 tokens alone
    question = {"question": "Which one?", "options": [{"label": "a"}, {"label": "b"}]}
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", question, id="q1")]), Reply(text="Going with a."))
    stream = await agent.stream(long_question, history=chat(200, size=4000))
    await stream.result()
    await (await agent.resume_stream("a", run_id=stream.run_id)).result()
    first, second = openai_server.requests
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == long_question
    assert [m["role"] for m in second["messages"]][-3:] == ["user", "assistant", "tool"]  # (calibrated: more fits)
    assert second["messages"][-3]["content"] == long_question
    assert second["messages"][-1]["tool_call_id"] == "q1"


def test_calibration_moves_toward_the_reported_count() -> None:
    cal = Calibration(weight=0.5)
    assert cal.ratio("m") == 1.0
    assert cal.observe("m", estimated=1000, reported=2000) == 2.0  # the first report is taken as is
    assert cal.observe("m", estimated=1000, reported=1000) == 1.5
    assert cal.observe("m", estimated=1000, reported=1) == 1.5  # placeholder counts are ignored
    assert cal.observe("m", estimated=10, reported=10_000) == pytest.approx(2.75)  # clamped at 4
    assert cal.ratio("other") == 1.0


def test_a_lone_surrogate_is_estimated_not_raised_on() -> None:
    """A server may send half of an emoji (a lone UTF-16 surrogate, ``\\ud83d`` in its JSON); the estimate counts
    it as 3 bytes instead of failing on it (it is not UTF-8)."""
    half = {"role": "assistant", "content": "half an emoji \ud83d", "reasoning_content": "\udc00"}
    assert message_tokens(half) == PER_MESSAGE + (len("assistanthalf an emoji ") + 3 + 3 + 3) // 4


def test_calibration_ignores_reports_that_are_not_counts() -> None:
    cal = Calibration()
    for nonsense in ("100", None, True, float("nan"), float("inf"), -5, 0, [100]):
        assert cal.observe("m", estimated=100, reported=nonsense) == 1.0  # type: ignore[arg-type]
        assert cal.observe("m", estimated=nonsense, reported=100) == 1.0  # type: ignore[arg-type]
    assert cal.observe("m", estimated=100, reported=150) == 1.5  # the first real report is still taken as is


async def test_reported_usage_calibrates_the_next_request(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Short words: the server counts more than the chars/4 estimate; after one report the budget holds by the
    server's own count."""
    agent = await budget_agent(make_agent, fake_redis, 1500)
    history = [{"role": ("user", "assistant")[i % 2], "content": "a b c d e f g h " * 10} for i in range(300)]
    openai_server.script(Reply(text="One."), Reply(text="Two."))
    first = await agent.stream("next", history=history)
    await first.result()
    assert openai_server.prompt_tokens[0] > 1500  # the estimate alone was off
    ratio = agent.budget.calibration.ratio(agent.budget.model)
    assert 1.2 < ratio < 2.4
    previous = await agent.get_run(first.run_id)
    await (await agent.stream("again", history=agent.history_of(previous))).result()
    assert openai_server.prompt_tokens[1] <= 1500


@pytest.mark.parametrize("stream", [True, False])
async def test_the_adapter_passes_the_reported_prompt_tokens_on(openai_server: FakeOpenAI, stream: bool) -> None:
    model = OpenAIChatModel("m", base_url=openai_server.base_url, api_key="sk-test", max_retries=0, stream=stream)
    try:
        _, done = await collect_turn(model, [{"role": "user", "content": "how many tokens is this?"}])
    finally:
        await model.aclose()
    assert done.prompt_tokens == openai_server.prompt_tokens[0] == count_tokens(openai_server.requests[0])
    assert openai_server.requests[0].get("stream_options") == ({"include_usage": True} if stream else None)


async def test_a_server_that_refuses_stream_options_is_asked_without_them(openai_server: FakeOpenAI) -> None:
    refusal = {"error": {"message": "Unrecognized request argument supplied: stream_options", "code": None}}
    openai_server.script(Reply(json_body=refusal, status=400), Reply(text="fine"), Reply(text="again"))
    model = OpenAIChatModel("m", base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
    try:
        texts, done = await collect_turn(model)
        await collect_turn(model)
    finally:
        await model.aclose()
    assert "".join(texts) == "fine" and done.prompt_tokens is None
    assert ["stream_options" in r for r in openai_server.requests] == [True, False, False]


async def test_a_server_that_validates_with_422_and_names_stream_options_is_asked_without_them(
    openai_server: FakeOpenAI,
) -> None:
    # FastAPI/pydantic servers (extra fields forbidden) refuse an unknown field with 422 and no "error" object.
    refusal = {"detail": [{"loc": ["body", "stream_options"], "msg": "Extra inputs are not permitted"}]}
    openai_server.script(Reply(json_body=refusal, status=422), Reply(text="fine"))
    model = OpenAIChatModel("m", base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
    try:
        texts, _ = await collect_turn(model)
    finally:
        await model.aclose()
    assert "".join(texts) == "fine"
    assert ["stream_options" in r for r in openai_server.requests] == [True, False]


async def test_a_context_length_refusal_is_learned_and_tried_once_smaller(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = await budget_agent(make_agent, fake_redis, 24_000)
    openai_server.context_window = 3000
    openai_server.script(Reply(text="Fits now."))
    stream = await agent.stream("and?", history=chat(300))
    state = await stream.result()
    assert state is not None and state.status == "completed"
    assert len(openai_server.requests) == 2 and openai_server.prompt_tokens[1] <= 3000
    assert agent.budget.calibration.limit(agent.budget.model) == 3000


async def test_a_request_too_long_even_alone_fails_as_context_length(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent = await budget_agent(make_agent, fake_redis, 24_000)
    openai_server.context_window = 500
    stream = await agent.stream("word " * 2000)
    chunks = [c async for c in stream]
    assert chunks[-1].type == "error" and chunks[-1].payload.kind == "context_length"
    assert "context window of 500 tokens" in chunks[-1].payload.message
    state = await agent.get_run(stream.run_id)
    assert state.status == "failed" and state.error is not None
    assert len(openai_server.requests) == 1  # nothing more could be left out: not sent again


async def test_the_stored_history_is_bounded(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    """A thread of 2,000 messages continued turn after turn: what is stored (and loaded and saved every turn) stops
    growing at the bound, while a request still gets its budget's worth."""
    agent = await budget_agent(make_agent, real_redis, 1000)
    openai_server.responder = lambda body: Reply(text="noted " * 40)
    history, sizes = chat(2000), []
    for turn in range(12):
        stream = await agent.stream(f"turn {turn}", history=history)
        state = await stream.result()
        assert state is not None and state.status == "completed"
        history = agent.history_of(await agent.get_run(stream.run_id))
        sizes.append(await real_redis.hstrlen(Keys(prefix).run(stream.run_id), "state"))
        ratio = agent.budget.calibration.ratio(agent.budget.model)
        assert sum(message_tokens(m) for m in history) * ratio <= STORE_HIGH * 1000 + 200
    assert len(history) < 200 and history[-1]["content"].startswith("noted")
    assert max(sizes) < 25_000 and max(sizes[4:]) <= 1.3 * min(sizes[4:])
    assert request_tokens(agent, openai_server.requests[-1]) > 500  # still a budget's worth of context


def test_a_message_longer_than_the_stored_bound_does_not_cost_the_turns_after_it() -> None:
    """The latest user message is always kept, so the stored bound keeps it whatever its size (a request holding one
    over the budget is not sent: :func:`test_a_request_over_the_budget_even_alone_is_not_sent`, but a run stored
    under a larger budget has one); the turns after it are kept by their own sizes: once a newer message comes,
    requests have room for them again."""
    budget = HistoryBudget(1000, model="m", calibration=Calibration())
    pasted = "error: disk quota exceeded on /var " * 400  # ~3,600 tokens: over 2 x the budget alone
    stored = [
        *chat(40),
        {"role": "user", "content": pasted},
        *calls_turn(["t1"], result="first look " * 30),
        *calls_turn(["t2"], result="second look " * 30),
        {"role": "assistant", "content": "The log shows a full disk."},
    ]
    kept = budget.bound_stored(stored)
    assert kept is not None and kept[0] != stored[0] and any(m["content"] == pasted for m in kept)  # cut, kept
    assert [m.get("tool_call_id") for m in kept if m["role"] == "tool"] == ["t1", "t2"]
    request = budget.request("sys", [*kept, {"role": "user", "content": "and the fix?"}], tools_tokens=0)
    sent = request.messages
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"][-1:] == ["t2"]
    assert sent[-2]["content"] == "The log shows a full disk." and all(pasted not in str(m) for m in sent)
    assert budget.over(request) is None


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_runs_of_every_stored_version_load_and_fit(version: int) -> None:
    state = RunState.from_json((FIXTURES / f"run_state_v{version}.json").read_text())
    padded = chat(600) + state.messages
    budget = HistoryBudget(1000, model="m", calibration=Calibration())
    request = budget.request("be brief", padded, tools_tokens=0)
    assert request.messages[-len(state.messages) :] == state.messages  # the run's own turn is always sent
    assert request.left_out > 0 and request.messages[1]["role"] != "tool"
    bounded = budget.bound_stored(padded)
    assert bounded is not None and bounded[-len(state.messages) :] == state.messages
    assert RunState.from_json(state.model_copy(update={"messages": bounded}).to_json()).messages == bounded


def test_estimates_count_tool_calls_and_extras() -> None:
    plain = message_tokens({"role": "assistant", "content": "x" * 400})
    with_call = message_tokens({**calls_turn(["c"])[0], "content": "x" * 400, "reasoning_content": "r" * 400})
    assert plain == 4 + 103 and with_call > plain + 100 + 4
    assert message_tokens({"role": "user", "content": "日本語" * 100}) > 200  # UTF-8 bytes, not characters
    assert json.loads(json.dumps(SHAPES["single calls"])) == SHAPES["single calls"]
