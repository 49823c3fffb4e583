"""OpenAI Agents SDK agents run by the bot's runtime: the real ``agents`` library against the loopback Chat
Completions server. ``needs_approval`` tools become approvals; the SDK's ``RunState`` JSON is what is stored, and
``state.approve`` / ``state.reject`` continue it in whichever "process" (another adapter and SDK agent on the same
store) takes the click."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from agents import Agent as SdkAgent
from agents import OpenAIChatCompletionsModel, RunContextWrapper, function_tool, handoff
from openai import AsyncOpenAI
from pydantic import BaseModel

from bot.agent.decisions import Approve
from bot.agent.run_limits import RunLimits
from bot.agent.stream import ApprovalChunk, FinishChunk, TextDeltaChunk, ToolResultChunk
from bot.agent.tools import ToolInputError
from bot.errors import AnswerError, QuestionExpired, RunAlreadyResumed
from bot.frameworks.openai_agents import BROKEN_ARGUMENTS, OpenAIAgentsAgent
from bot.frameworks.record import FrameworkRecord
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


class World:
    def __init__(self) -> None:
        self.restarted: list[str] = []
        self.refusal: str | None = None  # set: restarting raises this


Build = Callable[..., OpenAIAgentsAgent]


@pytest.fixture
async def build(openai_server: FakeOpenAI, prefix: str) -> AsyncIterator[Build]:
    """``build(redis, world, **adapter_kwargs)``: a fresh SDK agent and adapter (one "process")."""
    clients: list[AsyncOpenAI] = []

    def make(client: aioredis.Redis, world: World, *, output_type: Any = None, **kwargs: Any) -> OpenAIAgentsAgent:
        openai_client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
        clients.append(openai_client)

        @function_tool(needs_approval=True)
        def restart_service(name: str) -> str:
            """Restart a service."""
            world.restarted.append(name)
            if world.refusal is not None:
                raise RuntimeError(world.refusal)
            return f"{name} restarted"

        @function_tool
        def service_status(name: str) -> str:
            """A service's status."""
            return f"{name} is up"

        agent = SdkAgent(
            name="ops",
            instructions="Help with ops.",
            model=OpenAIChatCompletionsModel(model="test-model", openai_client=openai_client),
            tools=[restart_service, service_status],
            **({"output_type": output_type} if output_type is not None else {}),
        )
        return OpenAIAgentsAgent(agent, store=RedisRunStore(client, prefix=prefix), **kwargs)

    yield make
    for openai_client in clients:
        await openai_client.close()


def restart(call_id: str = "c1") -> Reply:
    return Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id=call_id)])


def tool_messages(server: FakeOpenAI) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"}


async def test_an_approval_is_stored_as_the_sdks_run_state_and_approved_after_a_restart(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart())
    first = build(fake_redis, world)
    run = await first.stream("restart api")
    chunks = await run.collect()
    approval = next(c for c in chunks if isinstance(c, ApprovalChunk))
    assert (approval.payload.tool_call_id, approval.payload.args) == ("c1", {"name": "api"})
    assert approval.payload.description == "Restart a service."
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "suspended"
    record = FrameworkRecord.of(await first.get_run(run.run_id))
    assert record is not None and record.framework == "openai-agents" and isinstance(record.state, dict)

    openai_server.script(Reply(text="Restarted api."))
    after_restart = build(fake_redis, world)
    rest = await (await after_restart.approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    assert world.restarted == ["api"]
    assert tool_messages(openai_server) == {"c1": "api restarted"}
    assert "".join(c.payload.text for c in rest if isinstance(c, TextDeltaChunk)) == "Restarted api."
    assert (await after_restart.get_run(run.run_id)).status == "completed"


async def test_each_tool_result_is_reported_with_its_tools_name(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    # the SDK's tool output item has no name; before, every result was reported as "" (Slack's step: "tool")
    world = World()
    openai_server.script(Reply(tool_calls=[tool_call("service_status", {"name": "api"}, id="s1")]), restart())
    run = await build(fake_redis, world).stream("restart api if it is up")
    first = [
        (c.payload.tool_call_id, c.payload.tool_name) for c in await run.collect() if isinstance(c, ToolResultChunk)
    ]
    assert first == [("s1", "service_status")]
    openai_server.script(Reply(text="Restarted api."))
    rest = await (await build(fake_redis, world).approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    approved = [(c.payload.tool_call_id, c.payload.tool_name) for c in rest if isinstance(c, ToolResultChunk)]
    assert approved == [("c1", "restart_service")]  # run in the next segment, its start never reported there


async def test_a_decline_in_another_process_rejects_with_the_reason(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart("d1"))
    run = await build(fake_redis, world).stream("restart api")
    await run.collect()
    openai_server.script(Reply(text="Not restarting."))
    decliner = build(fake_redis, world)
    await (await decliner.decline_tool_call(run_id=run.run_id, reason="a deploy is on", declined_by="U2")).collect()
    assert world.restarted == []
    assert tool_messages(openai_server) == {"d1": "The tool call was declined by <@U2>: a deploy is on"}


async def test_a_double_click_runs_the_tool_once(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart(), Reply(text="Restarted."))
    run = await build(fake_redis, world).stream("restart api")
    await run.collect()
    one, two = build(fake_redis, world), build(fake_redis, world)
    outcomes = await asyncio.gather(
        one.approve_tool_call(run_id=run.run_id, approved_by="U1"),
        two.approve_tool_call(run_id=run.run_id, approved_by="U2"),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1 and any(isinstance(o, RunAlreadyResumed) for o in outcomes)
    await won[0].collect()
    assert world.restarted == ["api"]


async def test_past_the_deadline_the_call_is_rejected_as_unanswered(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    limits = RunLimits(ask_ttl=0.3)
    openai_server.script(restart())
    agent = build(fake_redis, world, limits=limits)
    run = await agent.stream("restart api")
    await run.collect()
    await asyncio.sleep(0.4)
    with pytest.raises(QuestionExpired):
        await agent.approve_tool_call(run_id=run.run_id, approved_by="U1")
    openai_server.script(Reply(text="Nobody approved it."))
    await (await build(fake_redis, world, limits=limits).time_out(run_id=run.run_id)).collect()
    assert world.restarted == []
    assert tool_messages(openai_server) == {"c1": "The tool call was not run: nobody approved it in time."}


async def test_the_sdk_takes_no_edited_arguments_so_its_approvals_are_not_editable(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart("n1"), Reply(text="Restarted api."))
    agent = build(fake_redis, world)
    run = await agent.stream("restart api")
    approval = next(c for c in await run.collect() if isinstance(c, ApprovalChunk))
    assert not approval.payload.editable
    pending = (await agent.get_run(run.run_id)).pending
    assert pending is not None and agent.argument_schema(pending) is None
    with pytest.raises(ToolInputError, match="no edited arguments"):
        await agent.edit_tool_call(run_id=run.run_id, tool_call_id="n1", arguments={"name": "db"}, edited_by="U2")
    await (await agent.approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    assert world.restarted == ["api"]  # as the model asked: nothing was changed


async def test_approve_with_arguments_is_refused_before_anything_changes(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart("m1"))
    agent = build(fake_redis, world)
    run = await agent.stream("restart api")
    await run.collect()
    with pytest.raises(AnswerError, match="no edited arguments"):
        await agent.resume(run.run_id, {"m1": Approve(by="U3", arguments={"name": "db"})})
    state = await agent.get_run(run.run_id)
    assert state.status == "suspended" and state.answers == [] and world.restarted == []


class Address(BaseModel):
    city: str
    zips: list[int]


async def test_a_structured_output_is_replied_as_its_json(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """Found by a break-it review: an agent with ``output_type`` (a pydantic model) replies with the output's JSON
    (before: ``json.dumps(..., default=str)`` quoted its ``str``, ``"city='Zurich' zips=[8001]"``)."""
    openai_server.script(Reply(text='{"city": "Zurich", "zips": [8001]}'))
    chunks = await (await build(fake_redis, World(), output_type=Address).stream("where?")).collect()
    finish = chunks[-1]
    assert isinstance(finish, FinishChunk) and finish.payload.status == "completed"
    assert json.loads(finish.payload.text or "") == {"city": "Zurich", "zips": [8001]}


@dataclass
class Tenant:
    name: str


async def test_the_run_context_reaches_its_tools_in_the_first_run_and_after_a_resume_elsewhere(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str
) -> None:
    """``OpenAIAgentsAgent(agent, context=...)``: the SDK's run context reaches the tools in every run, a resumed
    one in another process too (before: no way to give it; a tool reading ``ctx.context`` failed)."""
    seen: list[str] = []
    clients: list[AsyncOpenAI] = []

    def make() -> OpenAIAgentsAgent:
        client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
        clients.append(client)

        @function_tool(needs_approval=True)
        def refund(ctx: RunContextWrapper[Tenant], order: str) -> str:
            """Refund an order."""
            seen.append(f"{ctx.context.name}:{order}")
            return "refunded"

        agent: SdkAgent[Tenant] = SdkAgent(
            name="billing", model=OpenAIChatCompletionsModel(model="test-model", openai_client=client), tools=[refund]
        )
        return OpenAIAgentsAgent(agent, store=RedisRunStore(fake_redis, prefix=prefix), context=Tenant("acme"))

    try:
        openai_server.script(Reply(tool_calls=[tool_call("refund", {"order": "A-1"}, id="r1")]), Reply(text="Done."))
        run = await make().stream("refund A-1")
        await run.collect()
        await (await make().approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
        assert seen == ["acme:A-1"]
    finally:
        for client in clients:
            await client.close()


@pytest.mark.parametrize("wrapped", [False, True], ids=["agent", "handoff(agent)"])
async def test_a_handed_off_agents_approval_shows_its_tools_description(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str, wrapped: bool
) -> None:
    """Found by a break-it review: the triage agent hands off to billing, whose refund needs approval: the request
    shows refund's description (before: empty, only the first agent's tools were looked at), and runs once."""
    refunds: list[int] = []
    client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
    model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)

    @function_tool(needs_approval=True)
    def refund(amount: int) -> str:
        """Refund money."""
        refunds.append(amount)
        return "refunded"

    billing: SdkAgent[Any] = SdkAgent(name="billing", instructions="b", model=model, tools=[refund])
    triage: SdkAgent[Any] = SdkAgent(
        name="triage", instructions="t", model=model, handoffs=[handoff(billing) if wrapped else billing]
    )
    try:
        openai_server.script(
            Reply(tool_calls=[tool_call("transfer_to_billing", {}, id="h1")]),
            Reply(tool_calls=[tool_call("refund", {"amount": 5}, id="r1")]),
        )
        run = await OpenAIAgentsAgent(triage, store=RedisRunStore(fake_redis, prefix=prefix)).stream("refund me")
        approval = next(c for c in await run.collect() if isinstance(c, ApprovalChunk))
        assert (approval.payload.tool_name, approval.payload.description) == ("refund", "Refund money.")
        openai_server.script(Reply(text="Refunded."))
        again = OpenAIAgentsAgent(triage, store=RedisRunStore(fake_redis, prefix=prefix))
        await (await again.approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
        assert refunds == [5]
    finally:
        await client.close()


async def test_an_approved_tool_that_raises_is_reported_as_failed(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """Found by a break-it review: the SDK gives the model a fixed text for a tool that raised; the adapter reports
    that result as a failed call (before: as a success, so an approved call's request said it ran), and the run goes
    on with the model's reply."""
    world = World()
    world.refusal = "the database refused"
    openai_server.script(restart("a1"))
    run = await build(fake_redis, world).stream("restart api")
    await run.collect()
    openai_server.script(Reply(text="It failed."))
    chunks = await (await build(fake_redis, world).approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    result = next(c for c in chunks if isinstance(c, ToolResultChunk))
    assert result.payload.is_error and result.payload.tool_call_id == "a1"
    assert world.restarted == ["api"]
    finish = chunks[-1]
    assert isinstance(finish, FinishChunk) and finish.payload.status == "completed"


async def test_an_approval_whose_arguments_are_not_json_says_so(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """Found by a break-it review: the model's arguments for a call needing approval are broken JSON. The request
    says so before the tool's description (before: it looked like any other, and approving it ran nothing)."""
    openai_server.script(Reply(tool_calls=[("b1", "restart_service", '{"name": "api"')]))
    chunks = await (await build(fake_redis, World()).stream("restart api")).collect()
    approval = next(c for c in chunks if isinstance(c, ApprovalChunk))
    assert approval.payload.description == f"{BROKEN_ARGUMENTS} Restart a service."
