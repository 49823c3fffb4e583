"""Pydantic AI agents run by the bot's runtime: the real ``pydantic_ai`` library against the loopback Chat
Completions server. Deferred tools become approvals and questions, claimed exactly once in whichever "process"
(another adapter and Pydantic AI agent on the same store) takes the click, after a restart too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import CallDeferred, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from bot.agent.approvals import GateVerdict
from bot.agent.decisions import Approve
from bot.agent.run_limits import RunLimits
from bot.agent.stream import ApprovalChunk, ErrorChunk, FinishChunk, SuspendedChunk, TextDeltaChunk, ToolResultChunk
from bot.agent.tools import ToolInputError
from bot.errors import AnswerError, QuestionExpired, RunAlreadyResumed
from bot.frameworks.pydantic_ai import PydanticAIAgent, ask_user
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


class World:
    """What the tools change: the services restarted."""

    def __init__(self) -> None:
        self.restarted: list[str] = []
        self.refusal: str | None = None  # set: restarting raises this


Build = Callable[..., PydanticAIAgent]


@pytest.fixture
async def build(openai_server: FakeOpenAI, prefix: str) -> AsyncIterator[Build]:
    """``build(redis, world, **adapter_kwargs)``: a fresh Pydantic AI agent and adapter (one "process")."""

    def make(client: aioredis.Redis, world: World, **kwargs: Any) -> PydanticAIAgent:
        provider = OpenAIProvider(base_url=openai_server.base_url, api_key="sk-test")
        agent = PydanticAgent(OpenAIChatModel("test-model", provider=provider), instructions="Help with ops.")

        @agent.tool_plain(requires_approval=True)
        def restart_service(name: str) -> str:
            """Restart a service."""
            world.restarted.append(name)
            if world.refusal is not None:
                raise RuntimeError(world.refusal)
            return f"{name} restarted"

        @agent.tool_plain
        def order_status(order_id: str) -> str:
            """The status of an order (a person looks it up)."""
            raise CallDeferred()

        agent.tool_plain(ask_user)
        return PydanticAIAgent(agent, store=RedisRunStore(client, prefix=prefix), **kwargs)

    yield make


def restart(call_id: str = "c1") -> Reply:
    return Reply(tool_calls=[tool_call("restart_service", {"name": "api"}, id=call_id)])


def tool_messages(server: FakeOpenAI) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"}


async def test_a_question_is_answered_after_a_restart_and_the_answer_is_the_tools_result(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    question = {
        "question": "Which environment?",
        "options": [{"label": "staging"}, {"label": "production"}],
        "selection_mode": "single_select",
    }
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", question, id="q1")]), Reply(text="Deploying to production.")
    )
    first = build(fake_redis, World())
    stream = await first.stream("deploy")
    chunks = await stream.collect()
    asked = next(c for c in chunks if isinstance(c, SuspendedChunk))
    assert asked.payload.tool_call_id == "q1"
    assert asked.payload.suspend_payload.labels == ["staging", "production"]
    assert isinstance(chunks[-1], FinishChunk) and chunks[-1].payload.status == "suspended"

    after_restart = build(fake_redis, World())  # another process: nothing shared but the store
    resumed = await after_restart.resume_stream("production", run_id=stream.run_id, answered_by="U1")
    rest = await resumed.collect()
    assert "".join(c.payload.text for c in rest if isinstance(c, TextDeltaChunk)) == "Deploying to production."
    assert tool_messages(openai_server) == {"q1": "production"}
    state = await after_restart.get_run(stream.run_id)
    assert state.status == "completed" and state.messages[-1]["content"] == "Deploying to production."


async def test_several_options_reach_the_tool_as_a_list_of_labels_commas_and_all(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """A multi-select answer is the tool's result as the list of labels picked (before: joined by ", ", so "Red,
    dark" and "Green" read as three colours)."""
    question = {
        "question": "Which colours?",
        "options": [{"label": "Red, dark"}, {"label": "Green"}, {"label": "Blue"}],
        "selection_mode": "multi_select",
    }
    openai_server.script(Reply(tool_calls=[tool_call("ask_user", question, id="q1")]), Reply(text="Two colours."))
    agent = build(fake_redis, World())
    stream = await agent.stream("paint")
    await stream.collect()
    resumed = await agent.resume_stream(["Red, dark", "Green"], run_id=stream.run_id, answered_by="U1")
    await resumed.collect()
    assert json.loads(tool_messages(openai_server)["q1"]) == ["Red, dark", "Green"]


async def test_an_approval_approved_in_one_process_runs_the_tool_and_a_decline_in_another_tells_the_model_why(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    starter = build(fake_redis, world)
    openai_server.script(restart("a1"))
    approved_run = await starter.stream("restart api")
    approval = next(c for c in await approved_run.collect() if isinstance(c, ApprovalChunk))
    assert (approval.payload.tool_name, approval.payload.args) == ("restart_service", {"name": "api"})
    assert approval.payload.description == "Restart a service."
    assert world.restarted == []

    openai_server.script(Reply(text="Restarted."))
    approver = build(fake_redis, world)
    await (await approver.approve_tool_call(run_id=approved_run.run_id, approved_by="U1")).collect()
    assert world.restarted == ["api"]
    assert tool_messages(openai_server) == {"a1": "api restarted"}

    openai_server.script(restart("d1"))
    declined_run = await starter.stream("restart api again")
    await declined_run.collect()
    openai_server.script(Reply(text="OK, not restarting."))
    decliner = build(fake_redis, world)
    stream = await decliner.decline_tool_call(run_id=declined_run.run_id, reason="it is peak hour", declined_by="U2")
    await stream.collect()
    assert world.restarted == ["api"]  # never ran
    assert tool_messages(openai_server)["d1"] == "The tool call was declined by <@U2>: it is peak hour"
    assert (await decliner.get_run(declined_run.run_id)).status == "completed"


async def test_an_approved_tool_that_raises_is_a_failed_result_the_model_reads_and_the_run_goes_on(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """Found by a break-it review: the approved call raises. The model reads the failure (the bot's own agent's
    words) and the run completes with its reply; the call ran once (before: the run failed as "the model call
    failed", the card stayed "running…", and each Retry ran the call again and failed again)."""
    world = World()
    world.refusal = "the database refused the connection"
    openai_server.script(restart("a1"))
    run = await build(fake_redis, world).stream("restart api")
    await run.collect()
    openai_server.script(Reply(text="The restart failed: the database refused."))
    chunks = await (await build(fake_redis, world).approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    assert not [c for c in chunks if isinstance(c, ErrorChunk)]
    result = next(c for c in chunks if isinstance(c, ToolResultChunk))
    assert result.payload.is_error and result.payload.tool_call_id == "a1"
    told = tool_messages(openai_server)["a1"]
    assert "tool restart_service failed: RuntimeError: the database refused the connection" in told, told
    assert world.restarted == ["api"]
    state = await build(fake_redis, world).get_run(run.run_id)
    assert state.status == "completed" and state.messages[-1]["content"] == "The restart failed: the database refused."


async def test_a_double_click_in_two_processes_runs_the_tool_once(
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
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], RunAlreadyResumed)
    await won[0].collect()
    assert world.restarted == ["api"]


async def test_past_the_deadline_an_answer_is_refused_and_the_run_goes_on_without_one(
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
    openai_server.script(Reply(text="Nobody approved; not restarting."))
    await (await build(fake_redis, world, limits=limits).time_out(run_id=run.run_id)).collect()
    assert world.restarted == []
    assert tool_messages(openai_server) == {"c1": "The tool call was not run: nobody approved it in time."}


async def test_a_deferred_call_is_a_free_text_question_whose_answer_is_the_tools_result(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    openai_server.script(
        Reply(tool_calls=[tool_call("order_status", {"order_id": "A-7"}, id="o1")]), Reply(text="It shipped.")
    )
    agent = build(fake_redis, World())
    run = await agent.stream("where is order A-7?")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    shown = asked.payload.suspend_payload
    assert shown.options is None and "order_status" in shown.question
    assert "• order_id: A-7\nAnswer in your own words" in shown.question
    await (await agent.resume_stream("shipped yesterday", run_id=run.run_id, answered_by="U3")).collect()
    assert tool_messages(openai_server) == {"o1": "shipped yesterday"}


async def test_several_deferred_calls_are_asked_one_at_a_time_and_the_agent_runs_again_once(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    both = Reply(
        tool_calls=[
            tool_call("restart_service", {"name": "api"}, id="r1"),
            tool_call("ask_user", {"question": "Why?"}, id="q1"),
        ]
    )
    openai_server.script(both)
    agent = build(fake_redis, world)
    run = await agent.stream("restart and ask")
    await run.collect()
    second = await agent.approve_tool_call(run_id=run.run_id, approved_by="U1")
    asked = [c for c in await second.collect() if isinstance(c, SuspendedChunk)]
    assert [c.payload.tool_call_id for c in asked] == ["q1"]
    assert world.restarted == [] and len(openai_server.requests) == 1  # nothing runs before every decision
    openai_server.script(Reply(text="Done."))
    await (await agent.resume_stream("a deploy", run_id=run.run_id, answered_by="U1")).collect()
    assert world.restarted == ["api"]
    assert tool_messages(openai_server) == {"r1": "api restarted", "q1": "a deploy"}


async def test_questions_and_approvals_of_one_turn_are_asked_in_the_order_the_model_made_them(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """Found by a break-it review: the model asks, then restarts, then asks again: they are asked in that order
    (before: every approval first, then the questions, whatever the model's order)."""
    world = World()
    calls = [
        tool_call("ask_user", {"question": "Why?"}, id="q1"),
        tool_call("restart_service", {"name": "api"}, id="r1"),
        tool_call("ask_user", {"question": "When?"}, id="q2"),
    ]
    openai_server.script(Reply(tool_calls=calls), Reply(text="Done."))
    agent = build(fake_redis, world)
    run = await agent.stream("ask, restart, ask")
    asked = [next(c for c in await run.collect() if isinstance(c, SuspendedChunk)).payload.tool_call_id]
    second = await agent.resume_stream("a deploy", run_id=run.run_id, answered_by="U1")
    asked += [c.payload.tool_call_id for c in await second.collect() if isinstance(c, ApprovalChunk)]
    third = await agent.approve_tool_call(run_id=run.run_id, approved_by="U1")
    asked += [c.payload.tool_call_id for c in await third.collect() if isinstance(c, SuspendedChunk)]
    assert asked == ["q1", "r1", "q2"]
    await (await agent.resume_stream("now", run_id=run.run_id, answered_by="U1")).collect()
    assert world.restarted == ["api"]
    assert tool_messages(openai_server) == {"q1": "a deploy", "r1": "api restarted", "q2": "now"}


async def test_the_approval_gate_declines_at_once_without_asking(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent = build(fake_redis, world)
    agent.approval_gate = lambda tool, args, state, requires: GateVerdict(True, decline="nobody may restart api")
    openai_server.script(restart(), Reply(text="I may not."))
    chunks = await (await agent.stream("restart api")).collect()
    assert not any(isinstance(c, ApprovalChunk) for c in chunks)
    assert chunks[-1].payload.status == "completed"  # type: ignore[union-attr]
    assert world.restarted == []
    assert tool_messages(openai_server) == {"c1": "The tool call was declined: nobody may restart api"}


async def test_a_run_that_only_asks_is_the_runtimes_own_on_a_framework_agent(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    """An outside agent's question (the MCP server's ``Agent.ask``) never runs the framework: no model request."""
    agent = build(fake_redis, World())
    run = await agent.ask({"question": "Ship it?", "options": [{"label": "yes"}, {"label": "no"}]}, reply="Thanks.")
    asked = next(c for c in await run.collect() if isinstance(c, SuspendedChunk))
    assert asked.payload.suspend_payload.labels == ["yes", "no"]
    done = await (await agent.resume_stream("yes", run_id=run.run_id, answered_by="U1")).collect()
    assert done[-1].payload.status == "completed"  # type: ignore[union-attr]
    assert (await agent.get_run(run.run_id)).answers[-1].resume_data == "yes"
    assert openai_server.requests == []


async def test_a_failed_model_call_fails_the_run_retryably_and_a_retry_goes_on_from_the_decisions(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent = build(fake_redis, world)
    openai_server.script(restart())
    run = await agent.stream("restart api")
    await run.collect()
    openai_server.script(*[Reply(status=500)] * 3)  # the openai client's own retries too
    failed = await (await agent.approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    assert isinstance(failed[-1], ErrorChunk) and failed[-1].payload.kind == "model"
    assert (await agent.get_run(run.run_id)).status == "failed"
    openai_server.script(Reply(text="Restarted after all."))
    again = await (await agent.retry_stream(run_id=run.run_id)).collect()
    assert again[-1].payload.status == "completed"  # type: ignore[union-attr]
    assert tool_messages(openai_server) == {"c1": "api restarted"}
    # Pydantic AI keeps no history of a run that raised: the retry runs from the decisions again, so the approved
    # tool ran in the failed segment and again in the retry (docs/frameworks/index.md says so).
    assert world.restarted == ["api", "api"]


async def test_an_edit_in_another_process_is_checked_against_the_tools_schema_and_the_call_runs_with_it(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart("e1"), Reply(text="Done."))
    starter = build(fake_redis, world)
    run = await starter.stream("restart api")
    approval = next(c for c in await run.collect() if isinstance(c, ApprovalChunk))
    assert approval.payload.editable
    editor = build(fake_redis, world)  # another process: the schema comes with the stored request
    pending = (await editor.get_run(run.run_id)).pending
    assert pending is not None
    schema = editor.argument_schema(pending)
    assert schema is not None and schema["properties"]["name"]["type"] == "string"
    with pytest.raises(ToolInputError, match="name"):
        await editor.edit_tool_call(run_id=run.run_id, tool_call_id="e1", arguments={"name": 7}, edited_by="U2")
    await editor.edit_tool_call(run_id=run.run_id, tool_call_id="e1", arguments={"name": "db"}, edited_by="U2")
    await (await editor.approve_tool_call(run_id=run.run_id, approved_by="U2")).collect()
    assert world.restarted == ["db"]
    assert tool_messages(openai_server) == {"e1": "db restarted"}
    told = openai_server.requests[-1]["messages"][-1]
    assert told["role"] == "user" and 'Before (yours): {"name": "api"}' in told["content"]
    state = await editor.get_run(run.run_id)
    assert state.status == "completed"


async def test_approve_with_arguments_through_resume_runs_the_call_with_them(
    fake_redis: aioredis.Redis, build: Build, openai_server: FakeOpenAI
) -> None:
    world = World()
    openai_server.script(restart("r1"), Reply(text="Done."))
    agent = build(fake_redis, world)
    run = await agent.stream("restart api")
    await run.collect()
    with pytest.raises(AnswerError, match="name"):
        await agent.resume(run.run_id, {"r1": Approve(by="U3", arguments={"name": None})})
    await (await agent.resume(run.run_id, {"r1": Approve(by="U3", arguments={"name": "cache"})})).collect()
    assert world.restarted == ["cache"]
    told = openai_server.requests[-1]["messages"][-1]
    assert told["role"] == "user" and told["content"].startswith("Note: U3 changed the arguments of tool call r1")
    assert 'After (what ran): {"name": "cache"}' in told["content"]


async def test_the_agents_deps_reach_its_tools_in_the_first_run_and_after_a_resume_elsewhere(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str
) -> None:
    """``PydanticAIAgent(agent, deps=...)``: an agent with ``deps_type`` gets its dependencies in every run, a
    resumed one in another process too (before: no way to give them; a tool reading ``ctx.deps`` failed the run)."""
    seen: list[str] = []

    def make(tenant: str) -> PydanticAIAgent:
        provider = OpenAIProvider(base_url=openai_server.base_url, api_key="sk-test")
        agent = PydanticAgent(OpenAIChatModel("test-model", provider=provider), deps_type=Tenant)

        @agent.tool(requires_approval=True)
        def refund(ctx: RunContext[Tenant], order: str) -> str:
            """Refund an order."""
            seen.append(f"{ctx.deps.name}:{order}")
            return "refunded"

        return PydanticAIAgent(agent, store=RedisRunStore(fake_redis, prefix=prefix), deps=Tenant(tenant))

    openai_server.script(Reply(tool_calls=[tool_call("refund", {"order": "A-1"}, id="r1")]), Reply(text="Done."))
    run = await make("acme").stream("refund A-1")
    await run.collect()
    chunks = await (await make("acme").approve_tool_call(run_id=run.run_id, approved_by="U1")).collect()
    assert not [c for c in chunks if isinstance(c, ErrorChunk)]
    assert seen == ["acme:A-1"]


@dataclass
class Tenant:
    name: str
