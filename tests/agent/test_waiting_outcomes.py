"""Questions that end without an answer, and runs stopped while working: ``Agent.time_out`` (the deadline passed:
the run goes on, the tool told nobody answered), ``Agent.cancel_question`` (withdrawn), ``Agent.stop``; and the
race between an answer and the deadline, judged by one clock (Redis's), one outcome per trial."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import Agent, ask_user_tool, tool
from bot.agent.answers import Expired
from bot.agent.stream import FinishChunk, ToolResultChunk
from bot.agent.tools import Tool, ToolContext
from bot.errors import QuestionExpired, RunAlreadyResumed, RunConflict, RunNotResumable
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

QUESTION = {"question": "Which repo?", "options": [{"label": "api"}, {"label": "web"}]}


async def asked(agent: Agent, openai_server: FakeOpenAI, *, then: str = "ok") -> str:
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", QUESTION, id="q1")]), Reply(text=then))
    stream = await agent.stream("summarize")
    await stream.collect()
    return stream.run_id


async def move_deadline(agent: Agent, run_id: str, *, by: timedelta) -> None:
    """Move the stored question (asked, deadline) back in time: the test's way to let time pass, no sleeping."""
    state = await agent.get_run(run_id)
    assert state.pending is not None and state.pending.expires_at is not None
    moved = {"expires_at": state.pending.expires_at + by, "suspended_at": state.pending.suspended_at + by}
    pending = state.pending.model_copy(update=moved)
    await agent.store.save(state.model_copy(update={"pending": pending}), owner="test")


def results(openai_server: FakeOpenAI) -> list[Any]:
    return [json.loads(m["content"]) for m in openai_server.requests[-1]["messages"] if m["role"] == "tool"]


async def test_past_its_deadline_a_question_goes_on_without_an_answer_and_the_model_is_told(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, ask_ttl=3600)
    run_id = await asked(agent, openai_server, then="Nobody answered; I used api.")
    with pytest.raises(RunNotResumable, match="deadline has not passed"):
        await agent.time_out(run_id=run_id)
    await move_deadline(agent, run_id, by=timedelta(hours=-2))
    chunks = await (await agent.time_out(run_id=run_id)).collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.text == "Nobody answered; I used api."
    [result] = results(openai_server)
    assert result["status"] == "no_answer" and 7195 <= result["waited_seconds"] <= 7205
    state = await agent.get_run(run_id)
    assert state.status == "completed" and state.answers[-1].outcome == "no_answer"
    assert isinstance(await agent.check(state, "q1"), Expired)  # a late click is told it expired
    with pytest.raises(RunNotResumable):
        await agent.time_out(run_id=run_id)  # once
    with pytest.raises((QuestionExpired, RunNotResumable)):
        await agent.resume_stream("api", run_id=run_id)


async def test_an_approval_past_its_deadline_is_declined_with_reason_no_answer(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    ran: list[str] = []

    @tool(require_approval=True)
    async def restart_service(name: str) -> str:
        """Restart a service."""
        ran.append(name)
        return "restarted"

    agent: Agent = make_agent(fake_redis, tools=[restart_service])
    openai_server.script(
        Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="Not restarted.")
    )
    stream = await agent.stream("restart api")
    await stream.collect()
    await move_deadline(agent, stream.run_id, by=timedelta(days=-2))
    await (await agent.time_out(run_id=stream.run_id)).collect()
    assert ran == []
    assert results(openai_server) == [{"status": "declined", "reason": "no answer", "outcome": "no_answer"}]


async def test_a_withdrawn_question_tells_the_model_who_cancelled_it(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis)
    run_id = await asked(agent, openai_server, then="Cancelled, stopping.")
    chunks = await (await agent.cancel_question(run_id=run_id, cancelled_by="U1")).collect()
    assert chunks[-1].type == "finish"
    assert results(openai_server) == [{"status": "cancelled", "cancelled_by": "U1"}]
    with pytest.raises(RunAlreadyResumed):
        await agent.resume_stream("api", run_id=run_id)


async def test_a_stopped_run_stops_at_its_next_step_and_its_conversation_stays_well_formed(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    @tool
    async def slow_lookup(item: str) -> str:
        """Look something up, slowly."""
        calls.append(item)
        started.set()
        await gate.wait()
        return f"found {item}"

    agent: Agent = make_agent(fake_redis, tools=[slow_lookup, ask_user_tool])
    openai_server.script(
        Reply(
            tool_calls=[
                tool_call("slow_lookup", {"item": "a"}, id="s1"),
                tool_call("slow_lookup", {"item": "b"}, id="s2"),
            ]
        ),
        Reply(text="never asked for"),
    )
    stream = await agent.stream("look up a and b")
    await asyncio.wait_for(started.wait(), 10)
    await agent.stop(run_id=stream.run_id, stopped_by="U1")
    gate.set()
    chunks = await stream.collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
    assert calls == ["a"] and len(openai_server.requests) == 1  # b never ran, no further model turn
    done = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
    assert [(r.tool_call_id, r.result) for r in done] == [("s1", "found a"), ("s2", {"status": "stopped"})]
    state = await agent.get_run(stream.run_id)
    assert state.status == "completed" and state.messages[-1]["role"] == "assistant"
    assert [m["tool_call_id"] for m in state.messages if m["role"] == "tool"] == ["s1", "s2"]


async def test_an_answer_and_the_deadline_racing_end_with_exactly_one_outcome(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Many trials: the answer and the timeout are sent at the deadline, from two agents (two processes); the
    store takes one, the other learns it lost, and the model sees exactly one tool result either way."""
    answers = timeouts = 0
    for trial in range(20):
        agent_a: Agent = make_agent(real_redis, ask_ttl=3600)
        agent_b: Agent = make_agent(real_redis, ask_ttl=3600)
        run_id = await asked(agent_a, openai_server)
        state = await agent_a.get_run(run_id)
        assert state.pending is not None
        now = await agent_a.store.now()
        pending = state.pending.model_copy(update={"expires_at": now + timedelta(milliseconds=30)})
        await agent_a.store.save(state.model_copy(update={"pending": pending}), owner="test")
        await asyncio.sleep(0.03 * (trial % 3) / 2)  # before, at and after the deadline

        async def answer(agent_a: Agent = agent_a, run_id: str = run_id) -> str:
            try:
                await (await agent_a.resume_stream("api", run_id=run_id)).collect()
                return "answer"
            except (QuestionExpired, RunAlreadyResumed, RunNotResumable, RunConflict):
                return "lost"

        async def time_out(agent_b: Agent = agent_b, run_id: str = run_id) -> str:
            for _ in range(5):
                try:
                    await (await agent_b.time_out(run_id=run_id)).collect()
                    return "no_answer"
                except RunConflict:
                    continue
                except RunNotResumable as exc:
                    if "deadline has not passed" in str(exc):
                        await asyncio.sleep(0.01)
                        continue
                    return "lost"
                except RunAlreadyResumed:
                    return "lost"
            return "lost"

        outcome = sorted(await asyncio.gather(answer(), time_out()))
        assert outcome in (["answer", "lost"], ["lost", "no_answer"]), outcome
        final = await agent_a.get_run(run_id)
        tool_messages = [m for m in final.messages if m["role"] == "tool"]
        assert len(tool_messages) == 1 and len(final.answers) == 1
        answers += outcome[0] == "answer"
        timeouts += outcome[1] == "no_answer"
    assert answers + timeouts == 20


async def test_a_stop_asked_in_another_process_reaches_the_driving_process_with_its_lease_renewal(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    gate, started = asyncio.Event(), asyncio.Event()

    @tool
    async def slow_lookup(item: str) -> str:
        """Look something up, slowly."""
        started.set()
        await gate.wait()
        return f"found {item}"

    driver: Agent = make_agent(fake_redis, tools=[slow_lookup], lease_renew_every=0.05)
    other: Agent = make_agent(fake_redis, tools=[slow_lookup])
    openai_server.script(Reply(tool_calls=[tool_call("slow_lookup", {"item": "a"}, id="s1")]), Reply(text="never"))
    stream = await driver.stream("look up a")
    await asyncio.wait_for(started.wait(), 10)
    await other.stop(run_id=stream.run_id, stopped_by="U2")  # only the store knows
    await asyncio.sleep(0.2)  # a few renewals
    gate.set()
    chunks = await stream.collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
    assert len(openai_server.requests) == 1


async def test_the_lease_loop_ends_with_its_segment_even_when_a_cancel_is_lost(fake_redis: aioredis.Redis) -> None:
    """A cancellation that reaches the lease loop inside a store call can be lost; the segment's end still stops
    it (it renewed forever, and pytest's event loop never closed, about one run in eight of the test above)."""
    import contextlib

    from bot.agent._loop.saving import RunSaver
    from bot.agent.state import RunState
    from bot.store import RedisRunStore

    saver = RunSaver(RedisRunStore(fake_redis), owner="me", persist_for=1.0, lease_renew_every=0.01)
    inside = asyncio.Event()

    async def loses_a_cancel(run_id: str) -> None:
        inside.set()
        with contextlib.suppress(asyncio.CancelledError):  # what a store call did once in a while
            await asyncio.sleep(0.05)

    ended = asyncio.Event()
    state = RunState(run_id="run_x", agent_id="a")
    task = asyncio.ensure_future(saver.keep_lease(state, also=loses_a_cancel, until=ended))
    await asyncio.wait_for(inside.wait(), 5)
    ended.set()
    task.cancel()
    await asyncio.wait_for(task, 2)


async def test_a_stop_the_segment_never_saw_does_not_stop_the_next_one(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Another process asks the run to stop while this one drives it; the model fails before the driver's next look
    at the store. The stop ends with that segment: the Retry goes on (it was stopped by the old request at its
    first step, up to an hour later)."""
    driver: Agent = make_agent(fake_redis, lease_renew_every=60)  # reads stops only at its renewals
    other: Agent = make_agent(fake_redis, lease_renew_every=0.2)  # where the Retry lands
    refused = Reply(status=400, delay=0.3)  # refused: not retried by the client
    openai_server.script(refused, Reply(text="Working on it. " * 20, chunk_delay=0.05))  # long: renewals read stops
    stream = await driver.stream("summarize")
    await asyncio.sleep(0.05)
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")  # only the store knows
    await stream.collect()
    assert (await other.get_run(stream.run_id)).status == "failed"
    chunks = await (await other.retry_stream(run_id=stream.run_id)).collect()
    assert isinstance(chunks[-1], FinishChunk)
    assert chunks[-1].payload.status == "completed", chunks[-1].payload


@pytest.mark.parametrize("asks", ["question", "approval"])
async def test_a_stop_asked_in_another_process_before_the_run_asks_asks_nobody(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, asks: str
) -> None:
    """Another process takes a stop (the person is told it is stopping) while this one drives the run, which then
    asks (a question, or an approval after its check) before its next look at the store: the store refuses the save
    that would make it wait, and the run ends stopped, asking nobody; the stop does not outlive it either."""

    @tool(require_approval=True)
    async def restart_service(name: str) -> str:
        """Restart a service."""
        return "restarted"

    driver: Agent = make_agent(fake_redis, tools=[restart_service, ask_user_tool], lease_renew_every=60)
    other: Agent = make_agent(fake_redis, tools=[restart_service, ask_user_tool])
    call = (
        tool_call("ask_user", QUESTION, id="c1")
        if asks == "question"
        else tool_call("restart_service", {"name": "api"}, id="c1")
    )
    openai_server.script(Reply(text="Let me see. " * 5, tool_calls=[call], chunk_delay=0.05), Reply(text="never"))
    stream = await driver.stream("go")
    await asyncio.sleep(0.05)
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")  # only the store knows
    chunks = await stream.collect()
    assert not [c for c in chunks if c.type in ("tool-call-approval", "tool-call-suspended")]
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
    assert chunks[-1].payload.stopped_by == "U2"
    done = [
        (c.payload.tool_call_id, c.payload.result, c.payload.stopped) for c in chunks if isinstance(c, ToolResultChunk)
    ]
    assert done == [("c1", {"status": "stopped"}, True)]
    state = await other.get_run(stream.run_id)
    assert state.status == "completed" and state.pending is None and len(openai_server.requests) == 1
    assert await other.store.stop_requested(stream.run_id) is None


async def test_a_stop_asked_while_the_approval_check_weighs_a_call_asks_nobody(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """The call's approval check is awaited (a condition that looks something up) when the stop comes: the run
    stops there; no approval request goes out (a person would be asked to decide on a run already stopped), and the
    call gets the stopped result like any call the stop kept from running."""
    weighing, go_on = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def during_deploys(ctx: Any, args: dict[str, Any]) -> bool:
        weighing.set()
        await go_on.wait()
        return True

    @tool(require_approval=during_deploys)
    async def restart_service(name: str) -> str:
        """Restart a service."""
        ran.append(name)
        return "restarted"

    agent: Agent = make_agent(fake_redis, tools=[restart_service])
    calls = [tool_call("restart_service", {"name": n}, id=f"r_{n}") for n in ("api", "web")]
    openai_server.script(Reply(tool_calls=calls), Reply(text="never asked for"))
    stream = await agent.stream("restart both")
    await asyncio.wait_for(weighing.wait(), 10)
    await agent.stop(run_id=stream.run_id, stopped_by="U1")
    go_on.set()
    chunks = await stream.collect()
    assert not [c for c in chunks if c.type == "tool-call-approval"]
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
    assert chunks[-1].payload.stopped_by == "U1"
    done = [(c.payload.tool_call_id, c.payload.result) for c in chunks if isinstance(c, ToolResultChunk)]
    assert done == [("r_api", {"status": "stopped"}), ("r_web", {"status": "stopped"})]
    state = await agent.get_run(stream.run_id)
    assert state.status == "completed" and state.pending is None and ran == []
    assert [m["tool_call_id"] for m in state.messages if m["role"] == "tool"] == ["r_api", "r_web"]
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize("decided", ["approved", "answered"])
async def test_a_stop_of_an_orphaned_run_keeps_its_decided_call_from_running(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, decided: str
) -> None:
    """The process that claimed a decision died before the call started (the run is ``running``, nobody drives it);
    a person stops the run; whoever takes it over stops it before its first step: the approved tool never runs
    (and a tool that asked mid-work is not run again with its answer)."""
    ran: list[str] = []

    class Service(BaseModel):
        name: str

    async def restart(args: Any, ctx: ToolContext | None) -> str:
        if decided == "answered" and ctx is not None and ctx.resume_data is None:
            ctx.suspend({"question": "Drain first?"})  # asks mid-work, goes on with the answer
        ran.append(args.name)
        return "restarted"

    restart_service = Tool(
        id="restart_service",
        description="Restart a service.",
        input_schema=Service,
        execute_fn=restart,
        require_approval=decided == "approved",
    )
    dying: Agent = make_agent(fake_redis, tools=[restart_service], store_kwargs={"lease_ttl": 0.2})
    openai_server.script(
        Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="r1")]), Reply(text="never asked for")
    )
    stream = await dying.stream("restart api")
    await stream.collect()
    if decided == "approved":
        resumed = await dying.approve_tool_call(run_id=stream.run_id, approved_by="U1")
    else:
        resumed = await dying.resume_stream("yes", run_id=stream.run_id, answered_by="U1")
    assert resumed._task is not None
    resumed._task.cancel()  # the process dies right after its claim, before the call starts
    await asyncio.sleep(0.3)  # its lease lapses
    other: Agent = make_agent(fake_redis, tools=[restart_service])
    assert await other.is_orphaned(await other.get_run(stream.run_id))
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")
    # kept for whoever takes it over, however late (a takeover refused at a run limit is tried at a later touch)
    assert await fake_redis.pttl(other.store.keys.stop(stream.run_id)) > 2 * 3600 * 1000  # type: ignore[attr-defined]
    chunks = await (await other.retry_stream(run_id=stream.run_id)).collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
    assert ran == [] and len(openai_server.requests) == 1
    state = await other.get_run(stream.run_id)
    assert state.status == "completed" and state.pending is None
    tool_results = [m for m in state.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], json.loads(m["content"])) for m in tool_results] == [("r1", {"status": "stopped"})]


async def test_a_stop_asked_after_the_segment_ended_does_not_stop_the_next_one(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A person stops a run just after it stopped working (it asked a question: its last save landed first, Slack
    still showed it working). Nothing was working, so nothing is stopped: the reply to the answer goes on, instead
    of stopping at its first look at the store, up to an hour later."""
    agent: Agent = make_agent(fake_redis, lease_renew_every=0.2)  # reads stops at its renewals
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", QUESTION, id="q1")]),
        Reply(text="Working on it. " * 20, chunk_delay=0.05),  # long: lease renewals read stops
    )
    stream = await agent.stream("summarize")
    await stream.collect()
    await agent.stop(run_id=stream.run_id, stopped_by="U2")
    chunks = await (await agent.resume_stream("api", run_id=stream.run_id, answered_by="U1")).collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "completed", chunks[-1].payload
    assert await agent.store.stop_requested(stream.run_id) is None


class Named(BaseModel):
    name: str


@pytest.mark.parametrize("run", ["ask_user", "outside agent's question"])
async def test_a_stop_of_an_orphan_whose_question_was_answered_keeps_the_answer(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, run: str
) -> None:
    """A person answered; the process that claimed the answer died before the run went on; a stop is asked and the
    run taken over. Recording an answer runs nothing, so the answer reaches the conversation (the model's next
    turn, or the outside agent that asked) before the run stops; it was replaced by ``{"status": "stopped"}``."""
    from bot.agent.asking import ask_outcome

    dying: Agent = make_agent(fake_redis, store_kwargs={"lease_ttl": 0.2})
    if run == "ask_user":
        openai_server.script(Reply(tool_calls=[tool_call("ask_user", {"question": "Which repo?"}, id="q1")]))
        stream = await dying.stream("summarize")
    else:
        stream = await dying.ask({"question": "Which repo?"}, reply="Thanks, passed on.")
    await stream.collect()
    resumed = await dying.resume_stream("api", run_id=stream.run_id, answered_by="U1")
    assert resumed._task is not None
    resumed._task.cancel()  # the process dies right after its claim
    await asyncio.sleep(0.3)  # its lease lapses
    other: Agent = make_agent(fake_redis)
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")
    chunks = await (await other.retry_stream(run_id=stream.run_id)).collect()
    state = await other.get_run(stream.run_id)
    assert state.status == "completed"
    if run == "ask_user":
        assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
        [result] = [json.loads(m["content"]) for m in state.messages if m["role"] == "tool"]
        assert result["answer"] == "api" and result["answered_by"] == "U1"
    else:  # a run that only asks is done once it has the answer
        outcome = ask_outcome(state)
        assert outcome is not None and outcome["answer"] == "api"


def asks_live_when_told(*, running: asyncio.Event, go_on: asyncio.Event, answers: list[Any]) -> Tool:
    """``deploy``: sets ``running``, waits for ``go_on``, then asks a person live and appends the answer (None:
    nobody was asked, or nobody answered) to ``answers``."""

    async def deploy(args: Any, ctx: ToolContext | None) -> str:
        running.set()
        await go_on.wait()
        assert ctx is not None and ctx.ask_live is not None
        answers.append(await ctx.ask_live({"question": "Drain first?"}))
        return "deployed"

    return Tool(id="deploy", description="Deploy.", input_schema=Named, execute_fn=deploy)


async def test_a_tool_whose_stop_is_known_before_it_asks_live_asks_nobody(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """The stop is known while the tool runs, before it asks a person (``ask_live``: e.g. an MCP server's question
    during its call): nobody is asked for a stopped run; the tool is told nobody answered, and the run stops."""
    running, go_on = asyncio.Event(), asyncio.Event()
    answers: list[Any] = []
    deploy_tool = asks_live_when_told(running=running, go_on=go_on, answers=answers)
    agent: Agent = make_agent(fake_redis, tools=[deploy_tool])
    openai_server.script(Reply(tool_calls=[tool_call("deploy", {"name": "api"}, id="d1")]), Reply(text="never"))
    stream = await agent.stream("deploy api")
    await asyncio.wait_for(running.wait(), 10)
    assert await agent.stop(run_id=stream.run_id, stopped_by="U1")
    go_on.set()
    chunks = await asyncio.wait_for(stream.collect(), 20)
    assert not [c for c in chunks if c.type == "tool-call-suspended"] and answers == [None]
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"


async def test_a_stop_while_a_tools_live_question_waits_is_not_taken_and_a_stop_of_its_orphan_says_it_may_have_run(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A tool's question asked live waits: the run waits for an answer as a suspended one does, so a stop is not
    taken (it was, and stopped nothing until the question closed, up to its deadline), even once its process died.
    Answered, and the answer's process dying too: a stop is taken, whoever takes the run over stops it, and the
    call, cut short mid-run, is said to maybe have run."""
    asking = asyncio.Event()

    async def deploy(args: Any, ctx: ToolContext | None) -> str:
        assert ctx is not None and ctx.ask_live is not None
        asking.set()
        await ctx.ask_live({"question": "Drain first?"})
        return "deployed"

    deploy_tool = Tool(id="deploy", description="Deploy.", input_schema=Named, execute_fn=deploy)
    dying: Agent = make_agent(fake_redis, tools=[deploy_tool], store_kwargs={"lease_ttl": 0.2})
    openai_server.script(Reply(tool_calls=[tool_call("deploy", {"name": "api"}, id="d1")]), Reply(text="never"))
    stream = await dying.stream("deploy api")
    await asyncio.wait_for(asking.wait(), 10)
    await asyncio.sleep(0.1)
    assert not await dying.stop(run_id=stream.run_id, stopped_by="U1")  # a question waits
    assert await dying.store.stop_requested(stream.run_id) is None
    assert stream._task is not None
    stream._task.cancel()  # the process dies while the question waits
    await asyncio.sleep(0.4)  # its lease lapses
    other: Agent = make_agent(fake_redis, tools=[deploy_tool])
    state = await other.get_run(stream.run_id)
    assert await other.is_orphaned(state) and state.pending is not None and state.pending.live_owner
    assert not await other.stop(run_id=stream.run_id, stopped_by="U2")  # its question still waits for an answer
    claimer: Agent = make_agent(fake_redis, tools=[deploy_tool], store_kwargs={"lease_ttl": 0.2})
    resumed = await claimer.resume_stream("no", run_id=stream.run_id, answered_by="U1")
    assert resumed._task is not None
    resumed._task.cancel()  # answered, and the process that took the answer dies at once too
    await asyncio.sleep(0.3)
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")
    chunks = await (await other.retry_stream(run_id=stream.run_id)).collect()
    results = [(c.payload.result, c.payload.stopped) for c in chunks if isinstance(c, ToolResultChunk)]
    assert results == [({"status": "stopped", "may_have_run": True}, True)]
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"


async def test_a_stop_taken_in_another_process_before_a_tool_asks_live_asks_nobody(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A stop is taken in another process (the person is told it stops) while a tool of the run works; the tool
    then asks a question live. The driver has not learnt the stop yet (it reads stops at its renewals), but the
    store refuses the save that would make the run wait for a person, as for a suspended question: nobody is
    asked, the tool gets no answer, and the run ends stopped. (A live question's save keeps the run ``running``
    and was taken: the person was asked for a stopped run, and no later stop was taken while it waited.)"""
    running, go_on = asyncio.Event(), asyncio.Event()
    answers: list[Any] = []
    deploy_tool = asks_live_when_told(running=running, go_on=go_on, answers=answers)
    driver: Agent = make_agent(real_redis, tools=[deploy_tool], lease_renew_every=60)  # learns stops at renewals
    other: Agent = make_agent(real_redis, tools=[deploy_tool])
    openai_server.script(Reply(tool_calls=[tool_call("deploy", {"name": "api"}, id="d1")]), Reply(text="never"))
    stream = await driver.stream("deploy api")
    await asyncio.wait_for(running.wait(), 10)
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")  # taken: the person is told it stops
    go_on.set()
    chunks = await asyncio.wait_for(stream.collect(), 10)
    assert not [c for c in chunks if c.type == "tool-call-suspended"] and answers == [None]
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"
    assert chunks[-1].payload.stopped_by == "U2" and len(openai_server.requests) == 1


async def test_a_stop_taken_while_the_run_was_driven_outlasts_its_process(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A stop taken while a process drives the run (a live lease) waits for the driver's next step; if that
    process dies first (during a long tool call), the run is an orphan, and whoever takes it over, however late,
    must still be stopped by it: the request is kept as long as the run (it lapsed after an hour)."""
    running = asyncio.Event()

    async def build(args: Any, ctx: ToolContext | None) -> str:
        running.set()
        await asyncio.sleep(3600)  # a long call; its process dies during it
        return "built"

    build_tool = Tool(id="build", description="Build.", input_schema=Named, execute_fn=build)
    dying: Agent = make_agent(real_redis, tools=[build_tool], store_kwargs={"lease_ttl": 0.3})
    other: Agent = make_agent(real_redis, tools=[build_tool])
    openai_server.script(Reply(tool_calls=[tool_call("build", {"name": "api"}, id="b1")]), Reply(text="never"))
    stream = await dying.stream("build api")
    await asyncio.wait_for(running.wait(), 10)
    assert await other.stop(run_id=stream.run_id, stopped_by="U2")  # taken: a live lease
    assert stream._task is not None
    stream._task.cancel()  # its process dies during the call (its task, and so its lease renewals, end)
    for _ in range(50):
        if await other.is_orphaned(await other.get_run(stream.run_id)):
            break
        await asyncio.sleep(0.1)
    kept = await real_redis.pttl(other.store.keys.stop(stream.run_id))  # type: ignore[attr-defined]
    run_kept = await real_redis.pttl(other.store.keys.run(stream.run_id))  # type: ignore[attr-defined]
    assert kept >= run_kept - 5_000 and kept > 2 * 3600 * 1000, (kept, run_kept)
    chunks = await (await other.retry_stream(run_id=stream.run_id)).collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "stopped"


async def test_a_stop_read_from_the_segment_that_asked_does_not_stop_the_reply_to_its_answer(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A stop computed from the run as it worked (Claims.stop loads it, then asks: one round trip apart) lands
    after the run asked, was answered, and started its reply under a lease of its own: the store tells the
    segments apart and refuses it, so the reply is not stopped by a stop meant for the segment before."""
    agent: Agent = make_agent(real_redis, lease_renew_every=0.1)  # reads stops at its renewals
    asks = Reply(text="Let me ask. ", tool_calls=[tool_call("ask_user", {"question": "Which repo?"}, id="q1")])
    openai_server.script(asks, Reply(text="Working on it. " * 30, chunk_delay=0.05))
    stream = await agent.stream("summarize")
    working = await agent.get_run(stream.run_id)  # what the stop was computed from: the first segment, working
    assert working.status == "running"
    await stream.collect()  # it asked
    reply = await agent.resume_stream("api", run_id=stream.run_id, answered_by="U1")
    await asyncio.sleep(0.1)  # the reply works under a lease of its own
    assert not await agent.store.request_stop(working, by="U2")
    chunks = await reply.collect()
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "completed"


async def test_a_stop_read_before_a_tool_asked_live_is_not_taken_once_the_question_waits(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """``Claims.stop`` loads the run, refuses while a live question waits (``asks_live``), then asks the store: one
    round trip apart. A tool's live question saved in between (the run still ``running`` under the same lease, in
    the same segment) must make the store refuse: it was taken (the person told the run stops) while the question
    waited, and it
    stops nothing until the question is answered or its deadline passes. The store keeps whether the run waits for
    a person (field ``waits``) and refuses it."""
    running, go_on = asyncio.Event(), asyncio.Event()
    answers: list[Any] = []
    deploy_tool = asks_live_when_told(running=running, go_on=go_on, answers=answers)
    agent: Agent = make_agent(fake_redis, tools=[deploy_tool], ask_ttl=2.0, lease_renew_every=0.1)
    openai_server.script(Reply(tool_calls=[tool_call("deploy", {"name": "api"}, id="d1")]), Reply(text="Deployed."))
    stream = await agent.stream("deploy api")
    await asyncio.wait_for(running.wait(), 10)
    working = await agent.get_run(stream.run_id)  # what Claims.stop loads: working, no question yet
    assert working.status == "running" and not working.asks_live
    go_on.set()
    for _ in range(200):  # the tool's question waits now (same segment, same lease)
        if (await agent.get_run(stream.run_id)).asks_live:
            break
        await asyncio.sleep(0.05)
    taken = await agent.store.request_stop(working, by="U2")  # Claims.stop's second round trip
    chunks = await asyncio.wait_for(stream.collect(), 20)
    assert not taken, f"stop taken while a live question waits; the run went on: {[c.type for c in chunks]}"
