"""Tool approval in the runtime: a call that needs a person's OK suspends the run, a decision is claimed exactly
once, an approved tool runs at most once per approval (a crash mid-call asks again), a declined one never runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, ask_user_tool, tool
from bot.agent.stream import ApprovalChunk, ToolResultChunk
from bot.errors import NotAwaitingThisKind, RunAlreadyResumed
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


class Service:
    """A stand-in for the world a tool changes: counts restarts."""

    def __init__(self) -> None:
        self.restarts: list[str] = []
        self.gate: asyncio.Event | None = None

    def tools(self) -> list[Any]:
        @tool(require_approval=True)
        async def restart_service(name: str, force: bool = False) -> str:
            """Restart a service.

            Args:
                name: The service to restart.
                force: Skip the graceful drain.
            """
            self.restarts.append(name)
            if self.gate is not None:
                await self.gate.wait()
            return f"{name} restarted"

        @tool
        async def lookup_ticket(ticket_id: str) -> dict[str, str]:
            """Look up a ticket."""
            return {"id": ticket_id, "status": "open"}

        return [restart_service, lookup_ticket, ask_user_tool]


def restart(name: str = "api", *, call_id: str = "r1") -> Reply:
    return Reply(tool_calls=[tool_call("restart_service", {"name": name}, id=call_id)])


async def test_a_call_needing_approval_suspends_with_its_validated_args_and_runs_once_approved(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(restart(), Reply(text="Done."))
    stream = await agent.stream("restart api")
    chunks = await stream.collect()
    approval = next(c for c in chunks if isinstance(c, ApprovalChunk))
    assert approval.payload.tool_name == "restart_service"
    assert approval.payload.args == {"name": "api", "force": False}  # validated: defaults filled in
    assert "Restart a service." in approval.payload.description
    assert world.restarts == [] and chunks[-1].type == "finish"
    resumed = await agent.approve_tool_call(run_id=stream.run_id, approved_by="U1")
    after = await resumed.collect()
    assert world.restarts == ["api"]
    result = next(c for c in after if isinstance(c, ToolResultChunk))
    assert result.payload.result == "api restarted"
    assert openai_server.requests[-1]["messages"][-1]["content"] == "api restarted"
    with pytest.raises(RunAlreadyResumed):
        await agent.approve_tool_call(run_id=stream.run_id, approved_by="U2")
    assert world.restarts == ["api"]


async def test_a_declined_call_never_runs_and_the_model_is_told_why(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(restart(), Reply(text="OK, I won't."))
    stream = await agent.stream("restart api")
    await stream.collect()
    resumed = await agent.decline_tool_call(run_id=stream.run_id, reason="peak hours", declined_by="U1")
    await resumed.collect()
    assert world.restarts == []
    told = openai_server.requests[-1]["messages"][-1]["content"]
    assert '"status": "declined"' in told and "peak hours" in told and "U1" in told


async def test_answers_and_decisions_go_to_the_right_kind_of_call(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(restart(), Reply(tool_calls=[tool_call("ask_user", {"question": "Why?"}, id="q1")]))
    stream = await agent.stream("restart api")
    await stream.collect()
    with pytest.raises(NotAwaitingThisKind):  # a ValueError, like AnswerError
        await agent.resume_stream("yes", run_id=stream.run_id)
    await (await agent.approve_tool_call(run_id=stream.run_id)).collect()
    with pytest.raises(ValueError):
        await agent.approve_tool_call(run_id=stream.run_id)  # now a question waits
    assert world.restarts == ["api"]


async def test_invalid_arguments_are_a_tool_error_and_nobody_is_asked(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(
        Reply(tool_calls=[tool_call("restart_service", {"service": "api"}, id="r1")]), Reply(text="Sorry.")
    )
    chunks = await (await agent.stream("restart api")).collect()
    assert not any(isinstance(c, ApprovalChunk) for c in chunks)
    assert "invalid arguments for restart_service" in openai_server.requests[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("where", ["agent", "run"])
async def test_require_tool_approval_covers_every_tool_but_questions(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, where: str
) -> None:
    world = Service()
    agent: Agent = make_agent(fake_redis, tools=world.tools(), require_tool_approval=where == "agent")
    openai_server.script(
        Reply(tool_calls=[tool_call("lookup_ticket", {"ticket_id": "SUP-1"}, id="t1")]),
        Reply(tool_calls=[tool_call("ask_user", {"question": "Which?"}, id="q1")]),
    )
    stream = await agent.stream("look it up", require_tool_approval=where == "run")
    first = await stream.collect()
    assert [c.payload.tool_name for c in first if isinstance(c, ApprovalChunk)] == ["lookup_ticket"]
    second = await (await agent.approve_tool_call(run_id=stream.run_id)).collect()
    assert not any(isinstance(c, ApprovalChunk) for c in second)
    assert any(c.type == "tool-call-suspended" for c in second)  # the question is asked, not approved


async def test_several_approvals_in_one_turn_are_asked_together_and_decided_one_by_one(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    calls = [tool_call("restart_service", {"name": n}, id=f"r_{n}") for n in ("api", "web")]
    openai_server.script(Reply(tool_calls=calls), Reply(text="Both handled."))
    stream = await agent.stream("restart both")
    first = [c for c in await stream.collect() if isinstance(c, ApprovalChunk)]
    assert [c.payload.args["name"] for c in first] == ["api"]  # one request, the batch with it
    assert [b.args["name"] for b in first[0].payload.batch] == ["web"]
    second = [c for c in await (await agent.approve_tool_call(run_id=stream.run_id, tool_call_id="r_api")).collect()]
    assert [c.type for c in second] == ["finish"] and world.restarts == []  # web is still undecided: nothing runs
    await (await agent.decline_tool_call(run_id=stream.run_id, tool_call_id="r_web", reason="one is enough")).collect()
    assert world.restarts == ["api"] and len(openai_server.requests) == 2


async def test_a_crash_mid_call_asks_again_as_interrupted_instead_of_running_twice(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    world.gate = asyncio.Event()  # the tool hangs, then the process "dies"
    dying: Agent = make_agent(fake_redis, tools=world.tools(), store_kwargs={"lease_ttl": 0.2}, lease_renew_every=60)
    openai_server.script(restart(), Reply(text="Restarted after all."))
    stream = await dying.stream("restart api")
    await stream.collect()
    resumed = await dying.approve_tool_call(run_id=stream.run_id, approved_by="U1")
    for _ in range(500):
        if world.restarts:
            break
        await asyncio.sleep(0.01)
    assert resumed._task is not None
    resumed._task.cancel()  # the process dies while the tool runs
    await asyncio.sleep(0.3)  # its lease lapses
    other: Agent = make_agent(fake_redis, tools=world.tools())
    again = [c for c in await (await other.retry_stream(run_id=stream.run_id)).collect()]
    asked = [c for c in again if isinstance(c, ApprovalChunk)]
    assert len(asked) == 1 and asked[0].payload.interrupted  # it may or may not have run: a person decides
    assert world.restarts == ["api"]
    world.gate.set()
    await (await other.approve_tool_call(run_id=stream.run_id, approved_by="U1")).collect()
    assert world.restarts == ["api", "api"]  # run again only because a person said so


@pytest.mark.real_redis
async def test_fifty_concurrent_approvals_run_the_tool_once(
    real_redis: aioredis.Redis, connect_real_redis: Any, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = Service()
    openai_server.script(restart())
    openai_server.responder = lambda body: Reply(text="done")
    first: Agent = make_agent(real_redis, tools=world.tools())
    stream = await first.stream("restart api")
    await stream.collect()
    clients = [connect_real_redis() for _ in range(5)]
    agents = [make_agent(clients[i % 5], tools=world.tools()) for i in range(50)]
    results = await asyncio.gather(
        *(a.approve_tool_call(run_id=stream.run_id, approved_by=f"U{i}") for i, a in enumerate(agents)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1 and all(isinstance(r, RunAlreadyResumed) for r in results if r not in winners)
    await winners[0].collect()
    assert world.restarts == ["api"]
