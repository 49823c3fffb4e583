"""What watches a run (``bot.agent.hooks.RunHooks``): an agent tells its hooks of each segment, model turn, tool
call, question asked and answer claimed, in the order they happen; and the runtime imports nothing of ``bot.ops``
(the Slack bot's metrics, audit and tracing reach it only as hooks installed by ``build_bot``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

import bot.agent
from bot.agent import Agent, RunHooks
from bot.agent.state import Answer, PendingCall, RunState
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call


class Recording(RunHooks):
    def __init__(self) -> None:
        self.seen: list[str] = []

    @contextlib.asynccontextmanager
    async def _segment(self, run_id: str) -> AsyncIterator[None]:
        self.seen.append("segment")
        yield
        self.seen.append("/segment")

    def run_segment(self, run_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._segment(run_id)

    @contextlib.contextmanager
    def model_turn(self, run_id: str) -> Iterator[None]:
        self.seen.append("turn")
        yield

    @contextlib.contextmanager
    def tool_call(self, run_id: str, *, tool: str, tool_call_id: str) -> Iterator[None]:
        self.seen.append(f"tool {tool} {tool_call_id}")
        yield

    def on_asked(self, state: RunState, pending: PendingCall) -> None:
        self.seen.append(f"asked {pending.tool_call_id}")

    def on_claimed(self, state: RunState, pending: PendingCall, answer: Answer) -> None:
        self.seen.append(f"claimed {answer.resume_data} by {answer.answered_by}")


async def test_an_agent_tells_its_hooks_what_its_runs_do(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    hooks = Recording()
    agent: Agent = make_agent(fake_redis).with_hooks(hooks)
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", {"question": "Which repo?"}, id="call_q")]), Reply(text="Done.")
    )
    stream = await agent.stream("Summarize my project")
    await stream.collect()
    resumed = await agent.resume_stream("api", run_id=stream.run_id, answered_by="U1")
    await resumed.collect()
    assert hooks.seen == [
        "segment",
        "turn",
        "tool ask_user call_q",
        "asked call_q",
        "/segment",
        "claimed api by U1",
        "segment",
        "tool ask_user call_q",
        "turn",
        "/segment",
    ]


def test_the_agent_runtime_imports_nothing_of_bot_ops() -> None:
    package = Path(bot.agent.__file__).parent
    importing = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*(from|import)\s+bot\.ops\b", line)
    ]
    assert importing == []


class Raising(RunHooks):
    """Hooks that fail everywhere a deployment's hook could: in each method, entering and leaving each context
    manager, and a context manager that tries to swallow the work's exception (a tool's suspension)."""

    def __init__(self) -> None:
        self.entered: list[str] = []

    @contextlib.asynccontextmanager
    async def _segment(self, run_id: str) -> AsyncIterator[None]:
        self.entered.append("segment")
        yield
        raise RuntimeError("segment hook broke on the way out")

    def run_segment(self, run_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._segment(run_id)

    def model_turn(self, run_id: str) -> contextlib.AbstractContextManager[None]:
        raise RuntimeError("model_turn hook broke")

    @contextlib.contextmanager
    def tool_call(self, run_id: str, *, tool: str, tool_call_id: str) -> Iterator[None]:
        self.entered.append(f"tool {tool_call_id}")
        with contextlib.suppress(Exception):  # a hook that swallows what it surrounds: must not hide a suspension
            yield

    def on_asked(self, state: RunState, pending: PendingCall) -> None:
        raise ValueError("on_asked hook broke")

    def on_claimed(self, state: RunState, pending: PendingCall, answer: Answer) -> None:
        raise ValueError("on_claimed hook broke")


async def test_hooks_that_raise_or_swallow_never_break_a_run_and_are_logged(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI, caplog: Any
) -> None:
    hooks = Raising()
    agent: Agent = make_agent(fake_redis).with_hooks(hooks)
    openai_server.script(
        Reply(tool_calls=[tool_call("ask_user", {"question": "Which repo?"}, id="call_q")]), Reply(text="Done.")
    )
    with caplog.at_level("ERROR", logger="bot.agent.hooks"):
        stream = await agent.stream("Summarize my project")
        await stream.collect()
        waiting = await agent.get_run(stream.run_id)
        assert waiting is not None and waiting.status == "suspended"  # the suspension got through the hook
        assert waiting.pending is not None and waiting.pending.tool_call_id == "call_q"
        resumed = await agent.resume_stream("api", run_id=stream.run_id, answered_by="U1")
        await resumed.collect()
    done = await agent.get_run(stream.run_id)
    assert done is not None and done.status == "completed"
    assert done.messages[-1]["content"] == "Done."
    assert hooks.entered == ["segment", "tool call_q", "segment", "tool call_q"]
    failed = {r.getMessage() for r in caplog.records if r.name == "bot.agent.hooks"}
    assert failed == {
        f"the run hook Raising.{name} raised; the run goes on without it"
        for name in ("run_segment", "model_turn", "on_asked", "on_claimed")
    }


async def test_an_agent_built_with_hooks_guards_them_as_with_hooks_does(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    agent: Agent = make_agent(fake_redis, hooks=Raising())
    openai_server.script(Reply(text="Hello."))
    stream = await agent.stream("Hi")
    await stream.collect()
    done = await agent.get_run(stream.run_id)
    assert done is not None and done.status == "completed"
