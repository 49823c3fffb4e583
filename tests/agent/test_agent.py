"""The agent loop end to end: loopback Chat Completions server + fakeredis (several clients = processes)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import Agent, AskUserPayload, RunLimits, ask_user_tool
from bot.agent.approvals import GateVerdict
from bot.agent.stream import Chunk, ErrorPayload, SuspendedPayload
from bot.agent.tools import Tool, ToolContext
from bot.errors import AnswerError, RunAlreadyResumed, RunNotFound, RunNotResumable, ToolCallNotPending
from bot.store import Keys, connect_redis
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.tcp_proxy import TcpProxy

SINGLE = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web", "description": "frontend"}]}


def assert_tool_messages_complete(server: FakeOpenAI) -> None:
    """Before every model request, every tool_call_id has exactly one tool message."""
    for body in server.requests:
        msgs = body["messages"]
        wanted = [c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        got = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
        assert sorted(wanted) == sorted(got), (wanted, got)


def tool_messages(server: FakeOpenAI, index: int = -1) -> dict[str, Any]:
    """tool_call_id -> parsed content of the tool messages in one recorded request."""
    return {
        m["tool_call_id"]: json.loads(m["content"]) for m in server.requests[index]["messages"] if m["role"] == "tool"
    }


def suspended(chunks: list[Chunk]) -> SuspendedPayload:
    found = [c.payload for c in chunks if c.type == "tool-call-suspended"]
    assert len(found) == 1, [c.type for c in chunks]
    assert isinstance(found[0], SuspendedPayload)
    return found[0]


class Echo(BaseModel):
    text: str


async def _echo(args: Any, ctx: ToolContext | None) -> Any:
    return {"echo": args.text}


echo_tool = Tool(id="echo", description="Echo text.", input_schema=Echo, execute_fn=_echo)


async def test_three_modes_suspend_and_resume(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    cases: list[tuple[dict[str, Any], Any, dict[str, Any]]] = [
        ({"question": "What is the goal?"}, "ship it", {"answer": "ship it", "answer_type": "text"}),
        (SINGLE, "web", {"answer": "web", "answer_type": "option"}),
        (
            {**SINGLE, "selection_mode": "multi_select"},
            ["api", "web"],
            {"answers": ["api", "web"], "answer_type": "options"},
        ),
    ]
    for args, answer, expected in cases:
        openai_server.requests.clear()
        openai_server.script(Reply(tool_calls=[tool_call("ask_user", args, id="call_q")]), Reply(text="Done, thanks."))
        stream = await agent.stream("Summarize my project")
        chunks = await stream.collect()
        p = suspended(chunks)
        assert isinstance(p.suspend_payload, AskUserPayload)
        assert p.tool_call_id == "call_q" and p.tool_name == "ask_user" and p.args["question"] == args["question"]
        assert p.suspend_payload.question == args["question"]
        assert p.suspend_payload.selection_mode == args.get(
            "selection_mode", "single_select" if "options" in args else None
        )
        assert chunks[-1].type == "finish" and chunks[-1].payload.status == "suspended"  # type: ignore[union-attr]
        assert (await agent.get_run(stream.run_id)).status == "suspended"

        resumed = await agent.resume_stream(answer, run_id=stream.run_id, answered_by="U_ALICE")
        text = "".join([t async for t in resumed.text_stream])
        assert text == "Done, thanks."
        assert tool_messages(openai_server)["call_q"] == {**expected, "answered_by": "U_ALICE"}
        state = await agent.get_run(stream.run_id)
        assert state.status == "completed" and state.pending is None
        assert_tool_messages_complete(openai_server)


async def test_typed_text_for_single_select_is_marked(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="ok"))
    stream = await agent.stream("hi")
    await stream.collect()
    await (await agent.resume_stream("the mobile one", run_id=stream.run_id)).collect()
    result = tool_messages(openai_server)["c1"]
    assert result["answer_type"] == "typed_text" and result["answer"] == "the mobile one"


async def test_invalid_tool_input_goes_back_to_the_model(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    openai_server.script(
        Reply(
            tool_calls=[
                tool_call("ask_user", {"question": "  "}, id="bad"),
                tool_call("ask_user", {"question": "Pick", "options": [{"label": "a"}, {"label": "a"}]}, id="dup"),
            ]
        ),
        Reply(tool_calls=[("notjson", "ask_user", '{"question": "Wh')]),
        Reply(tool_calls=[tool_call("no_such_tool", {}, id="nst")]),
        Reply(text="Sorry, I will not ask."),
    )
    stream = await agent.stream("hi")
    chunks = await stream.collect()
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "completed"  # type: ignore[union-attr]
    errors = {k: v["error"] for k, v in tool_messages(openai_server).items()}
    assert errors["bad"] == "invalid arguments for ask_user: question: question must not be empty"
    assert "unique; repeated: a" in errors["dup"]
    assert "not valid JSON" in errors["notjson"]
    assert "unknown tool 'no_such_tool'" in errors["nst"]
    assert [c.payload.is_error for c in chunks if c.type == "tool-result"] == [True] * 4  # type: ignore[union-attr]
    assert_tool_messages_complete(openai_server)


class QuestionTool(BaseModel):
    question: str
    options: list[dict[str, str]]


async def _ask_anything(args: QuestionTool, ctx: ToolContext | None) -> Any:
    """A tool of a team's own that suspends with an ``ask_user`` payload as given (no cap of its own)."""
    assert ctx is not None
    if ctx.resume_data is None:
        ctx.suspend(args.model_dump())
    return {"answer": ctx.resume_data}


@pytest.mark.parametrize("tool", ["ask_user", "pick_one"])
async def test_a_question_with_more_options_than_the_limits_allow_goes_back_to_the_model(
    tool: str, fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    # the deployment's limit (Slack: 100) bounds every question, whichever tool asks it: uncapped ask_user_tool, a
    # tool of one's own; at the limit it is asked, one over it the model is told and asks again
    own = Tool(id="pick_one", description="Pick.", input_schema=QuestionTool, execute_fn=_ask_anything)
    agent: Agent = make_agent(fake_redis, tools=[ask_user_tool, own], limits=RunLimits(max_options=3))
    over = {"question": "Which?", "options": [{"label": str(i)} for i in range(4)]}
    at = {"question": "Which?", "options": [{"label": str(i)} for i in range(3)]}
    openai_server.script(
        Reply(tool_calls=[tool_call(tool, over, id="over")]), Reply(tool_calls=[tool_call(tool, at, id="at")])
    )
    stream = await agent.stream("hi")
    chunks = await stream.collect()
    assert tool_messages(openai_server)["over"] == {
        "error": "too many options (4); offer at most 3, or ask a free-form question"
    }
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "suspended"  # type: ignore[union-attr]
    pending = (await agent.get_run(stream.run_id)).pending
    assert pending is not None and pending.tool_call_id == "at"


async def test_a_live_question_with_more_options_than_the_limits_allow_goes_back_to_the_model(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    # a tool asking while it runs (ctx.ask_live) is bounded as every other way of asking; before, the question was
    # recorded with 4 options, and Slack's listener failed on it
    async def pick_live(args: QuestionTool, ctx: ToolContext | None) -> Any:
        assert ctx is not None and ctx.ask_live is not None
        return {"answer": await ctx.ask_live(args.model_dump())}

    own = Tool(id="pick_live", description="Pick.", input_schema=QuestionTool, execute_fn=pick_live)
    agent: Agent = make_agent(fake_redis, tools=[own], limits=RunLimits(max_options=3))
    over = {"question": "Which?", "options": [{"label": str(i)} for i in range(4)]}
    openai_server.script(Reply(tool_calls=[tool_call("pick_live", over, id="over")]), Reply(text="Asking less."))
    stream = await agent.stream("hi")
    chunks = await asyncio.wait_for(stream.collect(), 10)
    assert tool_messages(openai_server)["over"] == {
        "error": "too many options (4); offer at most 3, or ask a free-form question"
    }
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "completed"  # type: ignore[union-attr]


async def test_bad_resume_changes_nothing(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", {**SINGLE, "selection_mode": "multi_select"}, id="m")])
    )
    stream = await agent.stream("hi")
    await stream.collect()
    before = await agent.get_run(stream.run_id)
    for bad in ("api", [], ["api", "nope"], [""]):
        with pytest.raises(AnswerError):
            await agent.resume_stream(bad, run_id=stream.run_id)  # type: ignore[arg-type]
    with pytest.raises(ToolCallNotPending):
        await agent.resume_stream(["api"], run_id=stream.run_id, tool_call_id="other")
    after = await agent.get_run(stream.run_id)
    assert after == before and after.status == "suspended"


async def test_two_questions_in_one_message_are_asked_in_turn(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, tools=[ask_user_tool, echo_tool])
    openai_server.script(
        Reply(
            tool_calls=[
                tool_call("echo", {"text": "before"}, id="e1"),
                tool_call("ask_user", {"question": "First?"}, id="q1"),
                tool_call("echo", {"text": "between"}, id="e2"),
                tool_call("ask_user", SINGLE, id="q2"),
            ]
        ),
        Reply(text="Both answered."),
    )
    stream = await agent.stream("hi")
    first = suspended(await stream.collect())
    assert first.tool_call_id == "q1"
    state = await agent.get_run(stream.run_id)
    assert [m.get("tool_call_id") for m in state.messages if m["role"] == "tool"] == ["e1"]
    assert [c.id for c in state.queued] == ["e2", "q2"]

    with pytest.raises(ToolCallNotPending, match="waits on 'q1'"):
        await agent.resume_stream("api", run_id=stream.run_id, tool_call_id="q2")

    second_stream = await agent.resume_stream("one", run_id=stream.run_id, tool_call_id="q1", answered_by="U1")
    second = suspended(await second_stream.collect())
    assert second.tool_call_id == "q2" and len(openai_server.requests) == 1  # no model call in between
    with pytest.raises(RunAlreadyResumed, match="by U1"):
        await agent.resume_stream("again", run_id=stream.run_id, tool_call_id="q1")

    final = await agent.resume_stream("web", run_id=stream.run_id, tool_call_id="q2", answered_by="U2")
    assert "".join([t async for t in final.text_stream]) == "Both answered."
    results = tool_messages(openai_server)
    assert results["q1"] == {"answer": "one", "answer_type": "text", "answered_by": "U1"}
    assert results["q2"] == {"answer": "web", "answer_type": "option", "answered_by": "U2"}
    assert results["e1"] == {"echo": "before"} and results["e2"] == {"echo": "between"}
    order = [m["tool_call_id"] for m in openai_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert order == ["e1", "q1", "e2", "q2"]
    assert_tool_messages_complete(openai_server)


async def test_resume_after_restart_from_redis_alone(
    fake_server: fakeredis.FakeServer, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    first_client = fakeredis.FakeAsyncRedis(server=fake_server)
    agent: Agent = make_agent(first_client)
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="Using web."))
    stream = await agent.stream("hi")
    await stream.collect()
    await first_client.aclose()
    del agent

    new_client = fakeredis.FakeAsyncRedis(server=fake_server)  # a new process: nothing shared but Redis
    new_agent: Agent = make_agent(new_client)
    resumed = await new_agent.resume_stream("web", run_id=stream.run_id)
    assert "".join([t async for t in resumed.text_stream]) == "Using web."
    assert (await new_agent.get_run(stream.run_id)).status == "completed"
    await new_client.aclose()


async def test_second_resume_says_who_and_when(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]), Reply(text="ok"))
    stream = await agent.stream("hi")
    await stream.collect()
    await (await agent.resume_stream("api", run_id=stream.run_id, answered_by="U_ALICE")).collect()
    with pytest.raises(RunAlreadyResumed) as info:
        await agent.resume_stream("web", run_id=stream.run_id, answered_by="U_BOB")
    assert info.value.answered_by == "U_ALICE" and info.value.answered_at is not None
    assert "U_ALICE" in str(info.value)


async def test_unknown_run_is_not_found_and_not_created(
    fake_redis: aioredis.Redis, make_agent: Any, prefix: str
) -> None:
    agent: Agent = make_agent(fake_redis)
    with pytest.raises(RunNotFound):
        await agent.resume_stream("x", run_id="run_nope")
    with pytest.raises(RunNotFound):
        await agent.retry_stream(run_id="run_nope")
    assert await fake_redis.exists(f"{prefix}run:run_nope") == 0


async def test_model_failure_after_resume_loses_nothing_and_retry_continues(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")]),
        Reply(status=500),
        Reply(text="Finally: web."),
    )
    stream = await agent.stream("hi")
    await stream.collect()
    resumed = await agent.resume_stream("web", run_id=stream.run_id, answered_by="U1")
    chunks = await resumed.collect()
    assert chunks[-1].type == "error"
    err = chunks[-1].payload
    assert isinstance(err, ErrorPayload) and err.kind == "model" and "HTTP 500" in err.message
    state = await agent.get_run(stream.run_id)
    assert state.status == "failed" and state.error is not None and state.pending is None
    assert any(m.get("tool_call_id") == "c1" for m in state.messages)  # the answer is kept

    with pytest.raises(RunAlreadyResumed):
        await agent.resume_stream("api", run_id=stream.run_id)
    retried = await agent.retry_stream(run_id=stream.run_id)
    assert "".join([t async for t in retried.text_stream]) == "Finally: web."
    assert tool_messages(openai_server)["c1"]["answer"] == "web"
    assert len(openai_server.requests) == 3
    with pytest.raises(RunNotResumable, match="finished"):
        await agent.retry_stream(run_id=stream.run_id)


async def test_a_run_the_runtime_failed_is_recorded_failed_and_retry_continues_it(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """An exception the runtime does not expect (here an approval gate of one's own raising KeyError on the turn's
    second call, once the first ran) ends the segment with an ``internal`` error chunk and the run stored ``failed``
    (``error.kind`` ``internal``) as it was: the first call's result kept, the second queued again. Retry runs the
    second alone and asks the model once more (before: left ``running``, an orphan the next touch of its thread ran
    again unasked, from its last save: the first call ran twice)."""
    raised: list[str] = []

    def gate(tool: Tool, args: dict[str, Any], state: Any, needs: bool) -> GateVerdict:
        if tool.id == "other" and not raised:
            raised.append(tool.id)
            raise KeyError("rules")
        return GateVerdict(False)

    effects: list[str] = []

    async def effect(args: Any, ctx: ToolContext | None) -> Any:
        effects.append(args.text)
        return "done"

    tools = [Tool(id=n, description=n, input_schema=Echo, execute_fn=effect) for n in ("effect", "other")]
    agent: Agent = make_agent(fake_redis, tools=tools)
    agent.approval_gate = gate  # the approval policy's place (bot.slack.approvals.rules sets it so)
    openai_server.script(
        Reply(tool_calls=[tool_call("effect", {"text": "a"}, id="c1"), tool_call("other", {"text": "b"}, id="c2")]),
        Reply(text="Done."),
    )
    stream = await agent.stream("hi")
    chunks = await stream.collect()
    assert isinstance(chunks[-1].payload, ErrorPayload) and chunks[-1].payload.kind == "internal"
    state = await agent.get_run(stream.run_id)
    assert state.status == "failed" and state.error is not None and state.error.kind == "internal"
    assert [c.id for c in state.queued] == ["c2"] and effects == ["a"]
    assert not await agent.is_orphaned(state)
    retried = await agent.retry_stream(run_id=stream.run_id)
    assert "".join([t async for t in retried.text_stream]) == "Done."
    assert (await agent.get_run(stream.run_id)).status == "completed"
    assert effects == ["a", "b"] and len(openai_server.requests) == 2
    assert_tool_messages_complete(openai_server)


async def test_model_timeout_is_an_error_chunk(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str
) -> None:
    from bot.agent import OpenAIChatModel
    from bot.store import RedisRunStore

    model = OpenAIChatModel(model="m", base_url=openai_server.base_url, api_key="sk-x", timeout=0.3, max_retries=0)
    agent = Agent(
        id="a",
        name="A",
        instructions="",
        model=model,
        tools=[ask_user_tool],
        store=RedisRunStore(fake_redis, prefix=prefix),
    )
    openai_server.script(Reply(text="late", delay=1.0))
    chunks = await (await agent.stream("hi")).collect()
    assert chunks[-1].type == "error" and "timed out" in chunks[-1].payload.message  # type: ignore[union-attr]


async def test_max_turns_stops_the_run(fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI) -> None:
    agent: Agent = make_agent(fake_redis, tools=[echo_tool], max_turns=3)
    openai_server.responder = lambda body: Reply(tool_calls=[tool_call("echo", {"text": str(len(body["messages"]))})])
    stream = await agent.stream("loop forever")
    chunks = await stream.collect()
    assert chunks[-1].type == "error" and chunks[-1].payload.kind == "max_turns"  # type: ignore[union-attr]
    assert len(openai_server.requests) == 3
    state = await agent.get_run(stream.run_id)
    assert state.status == "failed" and state.turns == 3


async def test_raising_tool_becomes_tool_error(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    async def boom(args: Any, ctx: ToolContext | None) -> Any:
        raise RuntimeError("disk full")

    agent: Agent = make_agent(fake_redis, tools=[Tool(id="boom", description="x", input_schema=Echo, execute_fn=boom)])
    openai_server.script(Reply(tool_calls=[tool_call("boom", {"text": "x"}, id="b1")]), Reply(text="It failed."))
    chunks = await (await agent.stream("hi")).collect()
    assert chunks[-1].type == "finish"
    assert tool_messages(openai_server)["b1"]["error"] == "tool boom failed: RuntimeError: disk full"


async def test_outside_a_run_ask_user_returns_text() -> None:
    text = await ask_user_tool.execute(SINGLE)
    assert "Question: Which repo?" in text and "2. web - frontend" in text and "single_select" in text


async def test_run_whose_driver_died_is_taken_over_at_once_and_the_old_driver_cannot_overwrite(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    """A process that dies mid-run leaves it 'running' with a lease that stops being renewed: while the lease
    lives nobody else takes the run; once it is gone (lease TTL, no waiting for a long stale window) another
    process continues it, and the stranded process, if it wakes up, cannot overwrite the newer state."""
    # Windows of seconds, not tenths: on a loaded machine (the suite runs in parallel) a tenth passes unnoticed.
    stuck: Agent = make_agent(fake_redis, store_kwargs={"lease_ttl": 2.0}, lease_renew_every=60)
    openai_server.script(Reply(text="too late", delay=5.0), Reply(text="Continued elsewhere."))
    stream = await stuck.stream("hi")
    await asyncio.sleep(0.1)
    rescuer: Agent = make_agent(fake_redis)
    with pytest.raises(RunNotResumable, match="running"):
        await rescuer.retry_stream(run_id=stream.run_id)  # its lease is alive: someone is driving it
    await asyncio.sleep(2.5)  # the lease runs out (the process "died": it no longer renews it)
    rescued = await rescuer.retry_stream(run_id=stream.run_id)
    assert "".join([t async for t in rescued.text_stream]) == "Continued elsewhere."
    chunks = await stream.collect()
    assert chunks[-1].type == "error" and chunks[-1].payload.kind == "superseded"
    state = await rescuer.get_run(stream.run_id)
    assert state.status == "completed" and state.messages[-1]["content"] == "Continued elsewhere."


async def test_a_live_driver_keeps_its_lease_through_a_long_model_turn(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, store_kwargs={"lease_ttl": 1.0}, lease_renew_every=0.2)
    openai_server.script(Reply(text="slow but alive", delay=3.0))
    stream = await agent.stream("hi")
    await asyncio.sleep(2.0)  # twice the lease TTL
    other: Agent = make_agent(fake_redis)
    with pytest.raises(RunNotResumable, match="running"):
        await other.retry_stream(run_id=stream.run_id)
    assert "".join([t async for t in stream.text_stream]) == "slow but alive"


def two_steps(body: dict[str, Any]) -> Reply:
    """The model of the lease tests: first a slow step then a step with an effect, in one turn; then done."""
    if body["messages"][-1]["role"] == "tool":
        return Reply(text="Done.")
    return Reply(tool_calls=[tool_call("slow", {"text": "a"}, id="c1"), tool_call("effect", {"text": "b"}, id="c2")])


def lease_tools(*, started: asyncio.Event, release: asyncio.Event, effects: list[str]) -> list[Tool]:
    """``slow`` sets ``started`` and waits for ``release``; ``effect`` appends to ``effects`` (a side effect that
    must happen once)."""

    async def slow(args: Any, ctx: ToolContext | None) -> Any:
        started.set()
        await release.wait()
        return "slow done"

    async def effect(args: Any, ctx: ToolContext | None) -> Any:
        effects.append(args.text)
        return "effect done"

    return [
        Tool(id="slow", description="slow", input_schema=Echo, execute_fn=slow),
        Tool(id="effect", description="effect", input_schema=Echo, execute_fn=effect),
    ]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")  # a TcpProxy in front of one server
async def test_a_live_driver_whose_lease_lapsed_and_was_taken_over_does_no_further_step(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    """Redis is unreachable from the driving process long enough for its lease to lapse (1 s here, 30 s in
    production) while a tool of the run works; another process takes the orphan over and does the run again.
    When Redis is back, the first driver's next step would be the second call of the turn, which the new driver
    makes too: it stops before it instead (superseded), so the side effect happens once."""
    openai_server.responder = two_steps
    started, release, effects = asyncio.Event(), asyncio.Event(), []
    tools = lease_tools(started=started, release=release, effects=effects)
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0", retries=0, socket_timeout=0.5)
        driver: Agent = make_agent(client, tools=tools, store_kwargs={"lease_ttl": 1.0}, lease_renew_every=0.2)
        other: Agent = make_agent(real_redis, tools=tools)
        stream = await driver.stream("go")
        await asyncio.wait_for(started.wait(), 10)
        await proxy.cut_until_gone(real_redis, Keys(prefix).lease(stream.run_id))
        retried = await other.retry_stream(run_id=stream.run_id)  # an orphan, as far as anyone can see
        proxy.restore()
        release.set()
        chunks = await asyncio.wait_for(stream.collect(), 20)
        assert chunks[-1].type == "error" and chunks[-1].payload.kind == "superseded", chunks[-1]
        assert "c2" not in [c.payload.tool_call_id for c in chunks if c.type == "tool_call"]
        assert (await asyncio.wait_for(retried.collect(), 20))[-1].type == "finish"
        assert effects == ["b"]  # once, by the process that took the run over
        state = await other.get_run(stream.run_id)
        assert state.status == "completed" and state.messages[-1]["content"] == "Done."
        await client.aclose()


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_live_driver_whose_lease_lapsed_and_nobody_took_it_takes_it_back_and_finishes(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    """The same outage with nobody taking the run over: the driver's next renewal takes its lease back (the run is
    still the state it saved), so nobody can take over a run that is driven, and the run finishes as computed. The
    same process is never taken for an orphan's rescuer of a run it drives itself."""
    openai_server.responder = two_steps
    started, release, effects = asyncio.Event(), asyncio.Event(), []
    tools = lease_tools(started=started, release=release, effects=effects)
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0", retries=0, socket_timeout=0.5)
        driver: Agent = make_agent(client, tools=tools, store_kwargs={"lease_ttl": 1.0}, lease_renew_every=0.2)
        stream = await driver.stream("go")
        await asyncio.wait_for(started.wait(), 10)
        lease = Keys(prefix).lease(stream.run_id)
        await proxy.cut_until_gone(real_redis, lease)
        proxy.restore()
        with pytest.raises(RunNotResumable, match="running"):
            await driver.retry_stream(run_id=stream.run_id)  # it drives it: not an orphan for itself
        for _ in range(100):  # the next renewal takes it back
            if await real_redis.get(lease) == driver.owner.encode():
                break
            await asyncio.sleep(0.05)
        assert await real_redis.get(lease) == driver.owner.encode()
        other: Agent = make_agent(real_redis, tools=tools)
        with pytest.raises(RunNotResumable, match="running"):
            await other.retry_stream(run_id=stream.run_id)
        release.set()
        chunks = await asyncio.wait_for(stream.collect(), 20)
        assert chunks[-1].type == "finish", chunks[-1]
        assert effects == ["b"]
        assert (await other.get_run(stream.run_id)).messages[-1]["content"] == "Done."
        await client.aclose()


async def test_two_retries_at_once_in_one_process_drive_the_run_once(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Two Retry presses of a failed run reach one process together: one continues it, the other is told it is
    running, whenever the second reads the run (the second read the first's running save before the first's task
    started, and took the run, leased to this very process, for an orphan of its own: two drivers, the first
    superseded). The second starts after 0..11 turns of the event loop, to land in each gap of the first."""
    agent: Agent = make_agent(fake_redis)
    for gap in range(12):
        openai_server.script(Reply(status=500), Reply(text="Recovered."))
        failed = await (await agent.stream("go")).collect()
        assert failed[-1].type == "error"
        run_id = failed[-1].run_id
        first = asyncio.ensure_future(agent.retry_stream(run_id=run_id))
        for _ in range(gap):
            await asyncio.sleep(0)
        second = asyncio.ensure_future(agent.retry_stream(run_id=run_id))
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
        streams = [o for o in outcomes if not isinstance(o, BaseException)]
        assert [type(o) for o in outcomes if isinstance(o, BaseException)] == [RunNotResumable], (gap, outcomes)
        ends = [(await s.collect())[-1] for s in streams]
        assert [e.type for e in ends] == ["finish"], (gap, ends)
        assert (await agent.get_run(run_id)).status == "completed"


async def test_reasoning_content_goes_back_with_the_tool_call_message(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A thinking-mode server refuses (400) a request whose assistant tool-call message lacks the
    reasoning_content it returned; the run keeps it in history, so the request after the answer succeeds."""
    openai_server.require_reasoning_roundtrip = True
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", SINGLE, id="c1")], reasoning="Which repo? Ask."), Reply(text="ok")
    )
    agent: Agent = make_agent(fake_redis)
    stream = await agent.stream("hi")
    await stream.collect()
    resumed = await agent.resume_stream("api", run_id=stream.run_id)
    chunks = await resumed.collect()
    assert chunks[-1].type == "finish", chunks[-1]
    sent = [m for m in openai_server.requests[-1]["messages"] if m.get("tool_calls")]
    assert sent[0]["reasoning_content"] == "Which repo? Ask."


HALF_EMOJI = "\ud83d"  # a lone UTF-16 surrogate: a server's JSON may carry "\ud83d" without its other half


async def test_half_an_emoji_from_the_model_is_replaced_and_the_run_goes_on(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A lone surrogate in the model's text, a tool call's arguments or a provider field can't be encoded as UTF-8:
    kept as it is, the next request, the run's save and the post to Slack all failed. It arrives as U+FFFD."""
    question = {**SINGLE, "question": f"Which repo? {HALF_EMOJI}"}
    openai_server.script(
        Reply(
            text=f"Thinking {HALF_EMOJI}",
            tool_calls=[tool_call("ask_user", question, id="c1")],
            reasoning=f"why {HALF_EMOJI}",
        ),
        Reply(text=f"Done {HALF_EMOJI}!"),
    )
    agent: Agent = make_agent(fake_redis)
    stream = await agent.stream("hi")
    payload = suspended(await stream.collect()).suspend_payload
    assert isinstance(payload, AskUserPayload) and payload.question == "Which repo? \ufffd"
    asked = await agent.get_run(stream.run_id)
    assert asked.status == "suspended"  # the save went through
    resumed = await agent.resume_stream("api", run_id=stream.run_id)
    chunks = await resumed.collect()
    assert chunks[-1].type == "finish" and chunks[-1].payload.text == "Done \ufffd!", chunks[-1]
    sent = openai_server.requests[-1]["messages"]
    call_message = next(m for m in sent if m.get("tool_calls"))
    assert call_message["reasoning_content"] == "why \ufffd" and call_message["content"] == "Thinking \ufffd"


def asks_live(answers: list[Any]) -> Tool:
    """``deploy``: asks a person live at once and appends the answer to ``answers``."""

    async def deploy(args: Any, ctx: ToolContext | None) -> str:
        assert ctx is not None and ctx.ask_live is not None
        answers.append(await ctx.ask_live({"question": "Drain first?"}))
        return "deployed"

    return Tool(id="deploy", description="Deploy.", input_schema=Echo, execute_fn=deploy)


async def until_asking(agent: Agent, run_id: str) -> None:
    """Wait until run ``run_id`` of ``agent`` waits for a live question's answer."""
    for _ in range(200):
        if (await agent.store.load(run_id)).asks_live:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no live question")


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_an_answer_to_a_live_question_taken_by_the_process_that_asks_it_goes_to_its_tool(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    """A tool asks live; Redis is unreachable from its process a little longer than the lease TTL, and the answer
    reaches that same process right after Redis is back, before its next renewal takes the lease back. The claim
    sees no lease holder, so it does not hand the answer off (``Claims.claim``: ``lease_owner == live_owner``)
    although this very process drives the run (``Agent.driving``, which ``is_orphaned`` consults since 47e22da):
    it launches a second driver of the run in the same process, which takes the ``live_owner`` call for one cut
    short by a dead process and asks an ``interrupted`` approval, and the live driver is superseded: the tool that
    asked never gets the answer the person gave."""
    answers: list[Any] = []
    openai_server.script(Reply(tool_calls=[tool_call("deploy", {"text": "api"}, id="d1")]), Reply(text="Deployed."))
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0", retries=0, socket_timeout=0.5)
        agent: Agent = make_agent(
            client, tools=[asks_live(answers)], store_kwargs={"lease_ttl": 1.0}, lease_renew_every=0.2
        )
        stream = await agent.stream("deploy api")
        await until_asking(agent, stream.run_id)
        await proxy.cut_until_gone(real_redis, Keys(prefix).lease(stream.run_id))
        renew_sha = agent.store._renew.sha  # type: ignore[attr-defined]
        # the first renewal after the outage is refused too (a reply lost on the way, say): the answer lands first
        proxy.refuse_next(containing=renew_sha.encode(), error=b"ERR busy")
        proxy.restore()
        answered = await agent.resume_stream("yes", run_id=stream.run_id, answered_by="U1")
        answered_chunks = await asyncio.wait_for(answered.collect(), 20)
        chunks = await asyncio.wait_for(stream.collect(), 20)
        await client.aclose()
    assert answers == ["yes"], (answers, [c.type for c in chunks], [c.type for c in answered_chunks])
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "completed", chunks[-1]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_retry_cancelled_after_its_save_leaves_no_driven_mark(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, prefix: str
) -> None:
    """``retry_stream`` marks the run driven (``driving[run_id] = claimed``) right after its running save, then
    awaits ``stops.poll`` before ``_launch`` replaces the mark with its segment's token. A Retry cancelled in that
    await (its request's task cancelled: a handler timeout, a shutdown of the handler) leaves the mark for ever: no
    task's done-callback ever drops it, so this process never again takes the run, whose lease lapses, for an
    orphan (``is_orphaned`` answers False: "it is running") and, alone, leaves it ``running`` for good."""
    openai_server.script(Reply(status=500), Reply(text="Recovered."))
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0", retries=0, socket_timeout=5)
        agent: Agent = make_agent(client, store_kwargs={"lease_ttl": 0.5})
        failed = await (await agent.stream("go")).collect()
        run_id = failed[-1].run_id
        stop_key = Keys(prefix).stop(run_id).encode()
        poll = b"$3\r\nGET\r\n$" + str(len(stop_key)).encode() + b"\r\n" + stop_key  # stops.poll's GET
        # held long enough for a loaded CI machine to see the running save first (1 s was not, once: the Retry
        # went past its poll into the model call, and returned before the cancel)
        proxy.hold_next(containing=poll, seconds=4.0)
        retry = asyncio.ensure_future(agent.retry_stream(run_id=run_id))
        for _ in range(300):
            if (await agent.store.load(run_id)).status == "running":
                break
            await asyncio.sleep(0.01)
        retry.cancel()  # inside stops.poll
        with pytest.raises(asyncio.CancelledError):
            await retry
        await asyncio.sleep(1.5)  # nobody drives it: its lease lapses
        state = await agent.get_run(run_id)
        assert state.status == "running" and await agent.store.lease_owner(run_id) is None
        orphaned = await agent.is_orphaned(state)
        await client.aclose()
    assert orphaned, "the cancelled Retry's driven mark stays: this process never takes the run over"
