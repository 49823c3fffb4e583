"""LangGraph graphs run by the bot's runtime: the real ``langgraph`` library, its nodes calling the loopback Chat
Completions server with the real ``openai`` client, its checkpoints in Redis through our checkpointer.
``interrupt`` becomes a question; ``Command(resume=...)`` continues the graph in whichever "process" (another
adapter and graph on the same Redis) takes the answer, after a restart too."""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypedDict

import pytest
import redis.asyncio as aioredis
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from openai import AsyncOpenAI

from bot.agent.run_limits import RunLimits
from bot.agent.stream import ErrorChunk, FinishChunk, SuspendedChunk, TextDeltaChunk
from bot.errors import QuestionExpired, RunAlreadyResumed
from bot.frameworks.langgraph import LangGraphAgent, ask_user
from bot.frameworks.record import FrameworkRecord
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply


class Deploy(TypedDict, total=False):
    messages: list[dict[str, str]]
    env: Any
    reply: str


Build = Callable[..., LangGraphAgent]


@pytest.fixture
async def build(openai_server: FakeOpenAI, prefix: str) -> AsyncIterator[Build]:
    """``build(redis, ask=..., **adapter_kwargs)``: a fresh graph and adapter (one "process"). The graph asks with
    ``ask(state)`` (default: ``ask_user`` with three environments), then one model call writes the reply."""
    clients: list[AsyncOpenAI] = []

    def make(
        client: aioredis.Redis, ask: Callable[[Deploy], Any] | None = None, *, retention: int = 3600, **kwargs: Any
    ) -> LangGraphAgent:
        openai_client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
        clients.append(openai_client)

        def choose(state: Deploy) -> Deploy:
            if ask is not None:
                return {"env": ask(state)}
            return {"env": ask_user("Which environment?", ["staging", "production", "development"])}

        async def reply(state: Deploy) -> Deploy:
            prompt = [*state["messages"], {"role": "user", "content": f"answer: {json.dumps(state['env'])}"}]
            done = await openai_client.chat.completions.create(model="test-model", messages=prompt)  # type: ignore[arg-type]
            text = done.choices[0].message.content or ""
            return {"messages": [*state["messages"], {"role": "assistant", "content": text}]}

        graph = StateGraph(Deploy)
        graph.add_node("choose", choose)
        graph.add_node("reply", reply)
        graph.add_edge(START, "choose")
        graph.add_edge("choose", "reply")
        graph.add_edge("reply", END)
        store = RedisRunStore(client, prefix=prefix, retention=retention)
        return LangGraphAgent(graph.compile(name="deployer"), store=store, **kwargs)

    yield make
    for openai_client in clients:
        await openai_client.close()


def last_answer(server: FakeOpenAI) -> str:
    return str(server.requests[-1]["messages"][-1]["content"])


@pytest.mark.real_redis
async def test_an_ask_user_interrupt_is_a_choice_answered_after_a_restart(
    real_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI, prefix: str
) -> None:
    first = build(real_redis)
    run = await first.stream("deploy please")
    chunks = await run.collect()
    asked = next(c for c in chunks if isinstance(c, SuspendedChunk))
    assert asked.payload.suspend_payload.labels == ["staging", "production", "development"]
    assert asked.payload.suspend_payload.selection_mode == "single_select"
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "suspended"
    assert openai_server.requests == []  # the graph stopped before its model call
    checkpoints = [k async for k in real_redis.scan_iter(match=f"{prefix}lg:*")]
    assert checkpoints, "the graph's checkpoints are in Redis, under the bot's prefix"

    openai_server.script(Reply(text="Deploying to production."))
    after_restart = build(real_redis)
    rest = await (await after_restart.resume_stream("production", run_id=run.run_id, answered_by="U1")).collect()
    assert last_answer(openai_server) == 'answer: "production"'
    assert "".join(c.payload.text for c in rest if isinstance(c, TextDeltaChunk)) == "Deploying to production."
    state = await after_restart.get_run(run.run_id)
    assert state.status == "completed" and state.messages[-1]["content"] == "Deploying to production."
    record = FrameworkRecord.of(state)
    assert record is not None and record.state == run.run_id  # the LangGraph thread is the run


@pytest.mark.real_redis
async def test_the_graphs_checkpoints_live_as_long_as_the_run_waiting_on_them(
    real_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI, prefix: str
) -> None:
    # the store keeps a waiting run until its question's deadline plus its retention; before, the checkpoints lived
    # the retention only, so an answer after it (ASK_TTL_SECONDS over RUN_RETENTION_SECONDS) found no checkpoint: the
    # graph started over and asked again, the answer lost
    first = build(real_redis, retention=1).with_limits(RunLimits(ask_ttl=30))  # as the bot applies its limits
    run = await first.stream("deploy please")
    await run.collect()
    ttls = [await real_redis.ttl(k) async for k in real_redis.scan_iter(match=f"{prefix}lg:*")]
    assert ttls and all(29 <= ttl <= 31 for ttl in ttls), ttls
    await asyncio.sleep(1.5)  # past the retention, long before the deadline
    openai_server.script(Reply(text="Deploying to production."))
    later = build(real_redis, retention=1, limits=RunLimits(ask_ttl=30))
    await (await later.resume_stream("production", run_id=run.run_id, answered_by="U1")).collect()
    assert last_answer(openai_server) == 'answer: "production"'
    assert (await later.get_run(run.run_id)).status == "completed"


class Fanned(TypedDict, total=False):
    messages: list[dict[str, str]]
    got: Annotated[list[Any], operator.add]


def fanned_out(which: tuple[str, ...]) -> Any:
    """A graph whose nodes ask ``which`` at once (parallel interrupts), then reply with the answers."""

    def fan(state: Fanned) -> list[Send]:
        return [Send("ask", {"which": w}) for w in which]

    def ask(state: dict[str, Any]) -> Fanned:
        return {"got": [[state["which"], interrupt(f"{state['which']}?")]]}

    def done(state: Fanned) -> Fanned:
        return {"messages": [{"role": "assistant", "content": json.dumps(sorted(state["got"]))}]}

    graph = StateGraph(Fanned)
    graph.add_node("ask", ask)
    graph.add_node("done", done)
    graph.add_conditional_edges(START, fan, ["ask"])
    graph.add_edge("ask", "done")
    graph.add_edge("done", END)
    return graph.compile()


@pytest.mark.parametrize("unindexed", [False, True], ids=["indexed", "written-before-the-index"])
async def test_the_checkpoints_of_interrupts_asked_one_after_another_live_until_the_last_ones_deadline(
    fake_redis: aioredis.Redis, prefix: str, unindexed: bool
) -> None:
    """Found by a break-it review: three parallel interrupts are asked one after another, each with its own
    deadline, and the graph writes nothing until the last is answered: its checkpoints are kept again from each
    question on (before: from the graph's last write only, so answers given in time, later than the retention plus
    one deadline, found the checkpoints gone and the run failed with every answer lost)."""

    def make() -> LangGraphAgent:
        store = RedisRunStore(fake_redis, prefix=prefix, retention=600)
        return LangGraphAgent(fanned_out(("A", "B", "C")), store=store).with_limits(RunLimits(ask_ttl=600))

    run = await make().stream("go")
    await run.collect()
    if unindexed:  # written before the key index was kept (an upgrade with runs waiting)
        await fake_redis.delete(*[k async for k in fake_redis.scan_iter(match=f"{prefix}lg:*:keys")])
    keys = [k async for k in fake_redis.scan_iter(match=f"{prefix}lg:*")]
    for answer in ("a", "b"):
        for key in keys:
            await fake_redis.expire(key, 5)  # as time would have it: 1,195 s since the graph's last write
        chunks = await (await make().resume_stream(answer, run_id=run.run_id, answered_by="U1")).collect()
        assert [c for c in chunks if isinstance(c, SuspendedChunk)], "the next interrupt is asked"
        ttls = [await fake_redis.ttl(k) async for k in fake_redis.scan_iter(match=f"{prefix}lg:*")]
        assert ttls and all(1190 <= ttl <= 1200 for ttl in ttls), ttls  # retention + the new question's deadline
    chunks = await (await make().resume_stream("c", run_id=run.run_id, answered_by="U1")).collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "completed", chunks[-1]
    text = "".join(c.payload.text for c in chunks if isinstance(c, TextDeltaChunk))
    assert sorted(answer for _which, answer in json.loads(text)) == ["a", "b", "c"]


async def test_an_answer_finding_the_graphs_checkpoint_gone_fails_the_run_instead_of_starting_the_graph_over(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI, prefix: str
) -> None:
    # whatever took the checkpoint (an eviction, a hand's DEL): LangGraph would run the graph from its start and
    # ask again, the answer lost without a word
    agent = build(fake_redis)
    run = await agent.stream("deploy please")
    await run.collect()
    await fake_redis.delete(*[k async for k in fake_redis.scan_iter(match=f"{prefix}lg:*")])
    chunks = await (await agent.resume_stream("production", run_id=run.run_id, answered_by="U1")).collect()
    errors = [c.payload.message for c in chunks if isinstance(c, ErrorChunk)]
    assert errors and "checkpoint of thread" in errors[0] and "is gone" in errors[0]
    assert not [c for c in chunks if isinstance(c, SuspendedChunk)]  # not asked again
    assert openai_server.requests == []  # nor went on as if answered
    assert (await agent.get_run(run.run_id)).status == "failed"


async def test_several_options_resume_with_the_list_of_labels(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    agent = build(fake_redis, ask=lambda s: ask_user("Which?", ["a", "b", "c"], selection_mode="multi_select"))
    run = await agent.stream("pick")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    assert asked.payload.suspend_payload.selection_mode == "multi_select"
    openai_server.script(Reply(text="ok"))
    await (await agent.resume_stream(["a", "c"], run_id=run.run_id, answered_by="U1")).collect()
    assert last_answer(openai_server) == 'answer: ["a", "c"]'


async def test_any_other_payload_is_shown_as_json_with_a_free_text_answer(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    agent = build(fake_redis, ask=lambda s: interrupt({"action": "deploy", "targets": ["eu", "us"]}))
    run = await agent.stream("deploy")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    shown = asked.payload.suspend_payload
    assert shown.options is None
    assert json.loads(shown.question.split("```")[1]) == {"action": "deploy", "targets": ["eu", "us"]}
    openai_server.script(Reply(text="ok"))
    await (await build(fake_redis).resume_stream("only eu", run_id=run.run_id, answered_by="U1")).collect()
    assert last_answer(openai_server) == 'answer: "only eu"'


@pytest.mark.parametrize(
    ("payload", "labels"),
    [
        ({"question": "Approve this refund?", "amount": 5000, "customer": "ACME", "items": ["a", "b"]}, None),
        ({"question": "Refund?", "options": [{"label": "yes"}, {"label": "no"}], "amount": 5000}, ["yes", "no"]),
    ],
)
async def test_a_question_payloads_other_keys_are_shown_with_it(
    payload: dict[str, Any], labels: list[str] | None, fake_redis: aioredis.Redis, build: Build
) -> None:
    """Found by a break-it review: an ``interrupt`` payload with a ``question`` and other keys (what the person
    decides on: the amount, the customer) shows them under the question, its options kept (before: only the
    question was shown, the rest dropped)."""
    agent = build(fake_redis, ask=lambda s: interrupt(payload))
    run = await agent.stream("refund")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    shown = asked.payload.suspend_payload
    assert shown.question.startswith(payload["question"] + "\n")
    assert "amount: 5000" in shown.question
    assert labels is not None or ("customer: ACME" in shown.question and 'items: ["a", "b"]' in shown.question)
    assert shown.labels == labels if labels else shown.options is None


@pytest.mark.parametrize(
    ("payload", "shown"),
    [
        ({1: "one", "two": {2.5: True}}, {"1": "one", "two": {"2.5": True}}),  # keys JSON writes as strings
        ({(1, 2): "pair"}, "{(1, 2): 'pair'}"),  # a key JSON can't hold: the payload's repr
    ],
)
async def test_a_payload_json_does_not_hold_as_it_is_is_asked_as_json_reads_it(
    payload: Any, shown: Any, fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    # before: any payload with a non-string key failed the run (the record's args are a JSON object)
    agent = build(fake_redis, ask=lambda s: interrupt(payload))
    run = await agent.stream("deploy")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    question = asked.payload.suspend_payload.question
    assert (question if isinstance(shown, str) else json.loads(question.split("```")[1])) == shown  # text as text
    openai_server.script(Reply(text="ok"))
    await (await build(fake_redis).resume_stream("fine", run_id=run.run_id, answered_by="U1")).collect()
    assert last_answer(openai_server) == 'answer: "fine"'


async def test_a_double_click_resumes_the_graph_once(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    run = await build(fake_redis).stream("deploy")
    await run.collect()
    openai_server.script(Reply(text="Deploying."), Reply(text="Deploying again."))
    one, two = build(fake_redis), build(fake_redis)
    outcomes = await asyncio.gather(
        one.resume_stream("staging", run_id=run.run_id, answered_by="U1"),
        two.resume_stream("production", run_id=run.run_id, answered_by="U2"),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1 and any(isinstance(o, RunAlreadyResumed) for o in outcomes)
    await won[0].collect()
    assert len(openai_server.requests) == 1  # the graph went on once


async def test_past_the_deadline_the_graph_is_resumed_with_none(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    limits = RunLimits(ask_ttl=0.3)
    agent = build(fake_redis, limits=limits)
    run = await agent.stream("deploy")
    await run.collect()
    await asyncio.sleep(0.4)
    with pytest.raises(QuestionExpired):
        await agent.resume_stream("staging", run_id=run.run_id, answered_by="U1")
    openai_server.script(Reply(text="Nobody chose; not deploying."))
    await (await build(fake_redis, limits=limits).time_out(run_id=run.run_id)).collect()
    assert last_answer(openai_server) == "answer: null"
