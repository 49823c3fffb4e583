"""Agents built on Pydantic AI, the OpenAI Agents SDK and LangGraph run as the bot's agent (``AGENT=`` the
playground's demo factories), end to end: a mention in the fake Slack, the framework's own client calling the
loopback model, its question or approval shown in Slack and answered with a click, the reply in the thread."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.fakeslack.workspace import DEFAULT_SUBSCRIPTIONS
from bot.playground import framework_demos
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call
from bot.testing.slack_scenarios import ALICE, GENERAL, blocks_text, current, has_controls, thread_run_id
from tests.slack.replies.test_streamed_replies import declined_task_shows_not_run

QUESTION = {
    "question": "Which environment?",
    "options": [{"label": "staging"}, {"label": "production"}],
    "selection_mode": "single_select",
}


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framework_demos, "RESTART_DELAY", 0)


def agent(name: str) -> dict[str, Any]:
    return {"agent": f"bot.playground.framework_demos:{name}"}


@pytest.mark.parametrize("name", ["pydantic_ai", "langgraph"])
async def test_a_frameworks_question_is_asked_with_buttons_and_the_click_continues_it(
    name: str, fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=agent(name)) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("ask_user", QUESTION, id="q1")]), Reply(text="Deploying to production.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "deploy")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "Which environment?" in blocks_text(q)
        await h.ws.click(q, "production", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "Deploying to production." in m["text"]
        )
        await h.settle()
        assert not has_controls(await current(h, q))
        tool_results = [m for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert "production" in tool_results[-1]["content"]


@pytest.mark.parametrize("name", ["pydantic_ai", "langgraph"])
async def test_a_frameworks_question_with_more_options_than_slack_shows_is_asked_as_free_text(
    name: str, fake_redis: aioredis.Redis, harness: Any
) -> None:
    # Slack shows at most 100 options (a select menu's limit); before, 101 failed the listener and nothing showed
    many = {"question": "Which region?", "options": [{"label": f"region-{i}"} for i in range(101)]}
    async with harness(fake_redis, settings=agent(name)) as h:
        h.model.script(Reply(tool_calls=[tool_call("ask_user", many, id="q1")]), Reply(text="Deploying there."))
        d = await h.ws.mention(ALICE, GENERAL, "deploy")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        shown = blocks_text(q)
        assert "Which region?" in shown and "1. region-0" in shown and "101. region-100" in shown
        await h.ws.reply_in_thread(ALICE, GENERAL, thread, "region-100")
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Deploying there."
        )
        tool_results = [m for m in h.model.requests[-1]["messages"] if m["role"] == "tool"]
        assert "region-100" in tool_results[-1]["content"]


@pytest.mark.parametrize("name", ["pydantic_ai", "openai_agents"])
async def test_a_frameworks_declined_calls_task_shows_it_did_not_run(
    name: str, fake_redis: aioredis.Redis, harness: Any
) -> None:
    # the framework reports its own rejection as the call's result; before, its task showed as complete
    await declined_task_shows_not_run(fake_redis, harness, f"bot.testing.approval_agent:{name}")


@pytest.mark.parametrize("name", ["pydantic_ai", "openai_agents"])
async def test_a_frameworks_approval_is_approved_in_slack_and_the_tool_runs(
    name: str, fake_redis: aioredis.Redis, harness: Any
) -> None:
    async with harness(fake_redis, settings=agent(name)) as h:
        h.model.script(
            Reply(tool_calls=[tool_call("restart_service", {"name": "web"}, id="r1")]), Reply(text="Restarted web.")
        )
        d = await h.ws.mention(ALICE, GENERAL, "restart web")
        thread = d.message["ts"]
        q = await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=has_controls)
        assert "restart_service" in blocks_text(q) and "web" in blocks_text(q)
        await h.ws.click(q, "Approve", user=ALICE)
        await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: m["text"] == "Restarted web."
        )
        await h.settle()
        assert "Approved by <@U_ALICE>" in blocks_text(await current(h, q))
        assert h.model.requests[-1]["messages"][-1]["content"] == "restarted web (demo: nothing really restarted)"


@pytest.mark.parametrize("name", ["pydantic_ai", "openai_agents"])  # the LangGraph demo's reply comes whole
async def test_slacks_stop_cancels_the_frameworks_run_and_ends_its_reply_with_who_stopped_it(
    name: str, fake_redis: aioredis.Redis, harness: Any
) -> None:
    """Slack's Stop while the framework's own model call streams: the framework's run is cancelled as the
    runtime's model turn is (it went on to the end of its reply, and the run completed as if nobody had asked)."""
    sessions = {"agent_view": True, "subscriptions": (*DEFAULT_SUBSCRIPTIONS, "agent_session_stopped")}
    async with harness(fake_redis, settings=agent(name), **sessions) as h:
        h.model.script(Reply(text="one two three four five six seven eight nine ten " * 20, chunk_delay=0.05))
        d = await h.ws.mention(ALICE, GENERAL, "count slowly")
        thread = d.message["ts"]
        await h.ws.wait_for_message(channel=GENERAL, thread_ts=thread, predicate=lambda m: "three" in m["text"])
        await h.ws.stop_session(ALICE, GENERAL, thread)
        stopped = await h.ws.wait_for_message(
            channel=GENERAL, thread_ts=thread, predicate=lambda m: "Stopped by" in m["text"], timeout=10
        )
        await h.settle()
        assert "ten " * 20 not in stopped["text"]  # cut short
        state = await h.bot.agent.get_run(await thread_run_id(h, thread))
        assert state.status == "completed" and "Stopped" in str(state.messages[-1]["content"])


def restart_agent(
    store: Any,
    *,
    restart: Callable[[Any], Awaitable[None]],
    after: Callable[[], Awaitable[None]] | None = None,
    **kw: Any,
) -> Any:
    """A framework agent whose first run asks to approve ``restart`` (call ``r1``) and whose run once it is approved
    reports the call, awaits ``restart(agent)`` (the framework's tool: it may raise), reports its result, then awaits
    ``after()`` (e.g. its next model call) and finishes."""
    from bot.frameworks.base import Finished, FrameworkAgent, Turn, Waiting
    from bot.frameworks.record import Request

    class Restarts(FrameworkAgent):
        framework = "pydantic-ai"

        async def run_framework(self, turn: Turn) -> Any:
            if turn.record is None:
                ask = Request(tool_call_id="r1", kind="approval", tool_name="restart", args={"name": "api"})
                return Waiting(requests=[ask], state={"step": 1})
            if turn.record.decisions[-1].approved:
                turn.tool_call("r1", "restart", {"name": "api"})
                await restart(self)
                turn.tool_result("r1", "restart", "restarted")
                if after is not None:
                    await after()
            return Finished(text="Restarted.", state={"step": 2})

    kw.setdefault("id", "fw")
    kw.setdefault("name", "Framework")
    return Restarts(store=store, **kw)


async def test_a_stop_waits_for_a_framework_agents_tool_call_to_end_and_stops_the_run_after_it(
    real_redis: aioredis.Redis, prefix: str
) -> None:
    """A framework agent runs its approved tool inside its own run (``run_framework``); a stop arriving while the
    tool works does not cut it short ("an approved tool that is already running is not killed"): the framework's
    run is cancelled once the tool's result is reported, and nothing after it runs."""
    started, gate = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def restart(_agent: Any) -> None:
        started.set()
        await gate.wait()
        ran.append("api")

    async def next_model_call() -> None:  # cancelled by the stop
        await asyncio.sleep(5)
        ran.append("after")

    agent = restart_agent(RedisRunStore(real_redis, prefix=prefix), restart=restart, after=next_model_call)
    first = await agent.stream("restart api")
    assert [c.type for c in await first.collect() if c.type == "tool-call-approval"]
    resumed = await agent.approve_tool_call(run_id=first.run_id, approved_by="U1")
    await asyncio.wait_for(started.wait(), 10)
    assert await agent.stop(run_id=first.run_id, stopped_by="U2")
    await asyncio.sleep(0.2)
    gate.set()
    chunks = await asyncio.wait_for(resumed.collect(), 10)
    assert ran == ["api"]  # the tool finished; nothing after it ran
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "stopped", chunks[-1]


async def test_a_stop_never_cuts_short_an_openai_agents_approved_tool(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str
) -> None:
    """The OpenAI Agents SDK runs an approved call when the run goes on from its stored RunState, and reports no
    ToolCallItem for it then (only its ToolCallOutputItem): the adapter never calls ``turn.tool_call``, so
    ``Turn.running`` stays empty while the approved tool works and a stop cancels the framework's run inside the
    tool. The approved call is taken for running from the start of the run that carries it out, until its result is
    reported: the stop waits for it, then stops the run."""
    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    from bot.frameworks.openai_agents import OpenAIAgentsAgent

    started, gate = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    @function_tool(needs_approval=True)
    async def restart_service(name: str) -> str:
        """Restart a service.

        Args:
            name: The service to restart.
        """
        started.set()
        await gate.wait()
        ran.append(name)
        return f"restarted {name}"

    client = AsyncOpenAI(base_url=openai_server.base_url, api_key="sk-test")
    sdk = SdkAgent(
        name="sdk",
        instructions="Restart what you are asked to.",
        model=OpenAIChatCompletionsModel(model="test-model", openai_client=client),
        tools=[restart_service],
    )
    agent = OpenAIAgentsAgent(sdk, store=RedisRunStore(fake_redis, prefix=prefix), id="sdk", name="SDK")
    openai_server.script(
        Reply(tool_calls=[tool_call("restart_service", {"name": "web"}, id="r1")]), Reply(text="Restarted web.")
    )
    first = await agent.stream("restart web")
    assert [c for c in await first.collect() if c.type == "tool-call-approval"]
    resumed = await agent.approve_tool_call(run_id=first.run_id, approved_by="U1")
    await asyncio.wait_for(started.wait(), 10)
    assert await agent.stop(run_id=first.run_id, stopped_by="U2")
    await asyncio.sleep(0.2)
    gate.set()
    chunks = await asyncio.wait_for(resumed.collect(), 10)
    await client.close()
    assert ran == ["web"], "the approved tool was cancelled in the middle of its run by the stop"
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "stopped", chunks[-1]


@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_a_framework_driver_whose_lease_lapsed_and_was_taken_over_runs_no_further_framework_step(
    real_redis: aioredis.Redis, prefix: str
) -> None:
    """47e22da fences the runtime's own loop (``check_lease`` before each model turn and tool call), but
    ``FrameworkAgent._advance`` overrides that loop and never calls it: a framework driver cut off from Redis past
    its lease while its approval gate decides, whose run another process took over and finished, runs the
    framework again (its approved tool a second time) once Redis is back, and only its final save finds out. It
    looks before each run of the framework now: superseded, nothing run."""
    from bot.agent.approvals import GateVerdict
    from bot.store import Keys, connect_redis
    from bot.testing.tcp_proxy import TcpProxy

    ran: list[str] = []

    async def restart(agent: Any) -> None:  # the framework's approved tool: a side effect that must happen once
        ran.append(agent.id)

    deciding, decide = asyncio.Event(), asyncio.Event()

    async def slow_gate(tool: Any, args: Any, state: Any, needs: bool) -> GateVerdict:
        deciding.set()
        await decide.wait()
        return GateVerdict(False)  # no approval needed (a policy rule)

    async with TcpProxy("127.0.0.1", 6379) as proxy:
        client = connect_redis(f"redis://127.0.0.1:{proxy.port}/0", retries=0, socket_timeout=0.5)
        driver = restart_agent(RedisRunStore(client, prefix=prefix, lease_ttl=1.0), restart=restart, id="driver")
        driver.saver.lease_renew_every = 0.2  # FrameworkAgent takes no lease_renew_every
        driver.approval_gate = slow_gate
        other = restart_agent(RedisRunStore(real_redis, prefix=prefix), restart=restart, id="other")
        other.approval_gate = lambda tool, args, state, needs: GateVerdict(False)
        stream = await driver.stream("restart api")
        await asyncio.wait_for(deciding.wait(), 10)
        await proxy.cut_until_gone(real_redis, Keys(prefix).lease(stream.run_id))
        retried = await other.retry_stream(run_id=stream.run_id)  # an orphan, as far as anyone can see
        assert (await asyncio.wait_for(retried.collect(), 20))[-1].type == "finish"
        proxy.restore()
        await asyncio.sleep(0.5)  # the driver's renewals get through again (and are refused: the run moved on)
        decide.set()
        chunks = await asyncio.wait_for(stream.collect(), 20)
        await client.aclose()
        assert chunks[-1].type == "error" and chunks[-1].payload.kind == "superseded", chunks[-1]
        assert ran == ["other"], ran  # the driver ran the approved tool again after the takeover


async def test_a_stop_waiting_for_a_framework_tool_that_then_fails_still_stops_the_run(
    fake_redis: aioredis.Redis, prefix: str
) -> None:
    """d666ddc defers a stop's cancel while the framework is inside a tool call it reported. A framework whose tool
    then raises (the framework lets the error through: Pydantic AI with an unexpected exception, an SDK tool with
    ``failure_error_function=None``) ends the run ``failed`` (retryable, an error chunk) although the stop was taken
    and the person told it stops: the failed save dropped the stop request, and a Retry ran the framework again.
    The stop known then stops the run."""
    started, gate = asyncio.Event(), asyncio.Event()

    async def restart(_agent: Any) -> None:
        started.set()
        await gate.wait()
        raise RuntimeError("the service did not come back")  # the tool's error, let through by the framework

    agent = restart_agent(RedisRunStore(fake_redis, prefix=prefix), restart=restart)
    first = await agent.stream("restart api")
    assert [c for c in await first.collect() if c.type == "tool-call-approval"]
    resumed = await agent.approve_tool_call(run_id=first.run_id, approved_by="U1")
    await asyncio.wait_for(started.wait(), 10)
    assert await agent.stop(run_id=first.run_id, stopped_by="U2")  # taken: the person is told it stops
    await asyncio.sleep(0.1)
    gate.set()
    chunks = await asyncio.wait_for(resumed.collect(), 10)
    assert chunks[-1].type == "finish" and chunks[-1].payload.status == "stopped", chunks[-1]
    assert (await agent.get_run(first.run_id)).status == "completed"
