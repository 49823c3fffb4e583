"""``Agent.resume(run_id, decisions)``: decisions keyed by tool_call_id for several pending calls at once (a batch of
one turn's approvals), edited arguments, scopes, declines with reasons, a question's reply; conditional approval
with a callable ``require_approval``; concurrent decisions on one batch from two agents on the real Redis."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, ToolContext, ask_user_tool, tool
from bot.agent.approvals import GateVerdict
from bot.agent.decisions import Approve, Decline, Reply
from bot.agent.state import utcnow
from bot.agent.stream import ApprovalChunk, FinishChunk, SuspendedChunk, ToolCallChunk, ToolResultChunk
from bot.agent.tools import ToolInputError
from bot.errors import (
    AnswerError,
    NotAwaitingThisKind,
    QuestionExpired,
    RunAlreadyResumed,
    RunNotResumable,
    ToolCallNotPending,
)
from bot.testing.openai_server import FakeOpenAI, tool_call
from bot.testing.openai_server import Reply as ModelReply


class World:
    """What the tools change: restarts and refunds, in order."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def tools(self, *, refund_check: Any = None) -> list[Any]:
        @tool(require_approval=True)
        async def restart_service(name: str) -> str:
            """Restart a service."""
            self.done.append(f"restart {name}")
            return f"{name} restarted"

        @tool
        async def lookup(ticket: str) -> str:
            """Look up a ticket."""
            self.done.append(f"lookup {ticket}")
            return "open"

        def over_100(ctx: ToolContext, args: dict[str, Any]) -> bool:
            return bool(args["amount"] > 100)

        @tool(require_approval=refund_check or over_100)
        async def refund(order: str, amount: float) -> str:
            """Refund an order."""
            self.done.append(f"refund {order} {amount:g}")
            return "refunded"

        return [restart_service, lookup, refund, ask_user_tool]


def three_calls() -> ModelReply:
    return ModelReply(
        tool_calls=[
            tool_call("restart_service", {"name": "api"}, id="c_api"),
            tool_call("lookup", {"ticket": "T-1"}, id="c_look"),
            tool_call("restart_service", {"name": "web"}, id="c_web"),
        ]
    )


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


async def test_one_resume_decides_a_whole_batch_and_the_calls_run_in_the_models_order(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await agent.stream("restart api and web, and look up T-1")
    asked = [c for c in await stream.collect() if isinstance(c, ApprovalChunk)]
    assert len(asked) == 1 and asked[0].payload.tool_call_id == "c_api"
    assert [(b.tool_call_id, b.args) for b in asked[0].payload.batch] == [("c_web", {"name": "web"})]
    assert world.done == []  # nothing of the turn ran before the decisions (lookup comes after c_api)
    resumed = await agent.resume(
        stream.run_id, {"c_web": Decline(by="U2", reason="not web"), "c_api": Approve(by="U1")}
    )
    chunks = await resumed.collect()
    assert world.done == ["restart api", "lookup T-1"]
    assert [c.payload.tool_call_id for c in chunks if isinstance(c, ToolResultChunk)] == ["c_api", "c_look", "c_web"]
    told = tool_messages(openai_server.requests[-1])
    assert told["c_api"] == "api restarted"
    assert json.loads(told["c_web"]) == {"status": "declined", "reason": "not web", "declined_by": "U2"}
    state = await agent.get_run(stream.run_id)
    assert state.status == "completed"
    assert {a.tool_call_id: a.answered_by for a in state.answers} == {"c_api": "U1", "c_web": "U2"}


async def test_a_partial_resume_waits_for_the_rest_and_a_decided_call_is_not_decided_again(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await agent.stream("go")
    await stream.collect()
    waiting = await (await agent.resume(stream.run_id, {"c_web": Approve(by="U1")})).collect()
    assert [(type(c), c.payload.status) for c in waiting if isinstance(c, FinishChunk)] == [(FinishChunk, "suspended")]
    assert len(waiting) == 1
    assert world.done == [] and (await agent.get_run(stream.run_id)).status == "suspended"
    with pytest.raises(RunAlreadyResumed) as again:
        await agent.resume(stream.run_id, {"c_web": Decline(by="U2")})
    assert again.value.answered_by == "U1"
    with pytest.raises(ToolCallNotPending):
        await agent.resume(stream.run_id, {"c_look": Approve(by="U1")})  # needs no approval: not pending
    await (await agent.resume(stream.run_id, {"c_api": Approve(by="U3")})).collect()
    assert world.done == ["restart api", "lookup T-1", "restart web"]


async def test_approved_with_edited_arguments_runs_with_them_and_the_model_is_told_before_and_after(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(
        ModelReply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="c1")]), ModelReply(text="ok")
    )
    stream = await agent.stream("restart api")
    await stream.collect()
    with pytest.raises(AnswerError, match="edited arguments"):
        await agent.resume(stream.run_id, {"c1": Approve(by="U1", arguments={"name": 5})})
    with pytest.raises(AnswerError, match="scope"):
        await agent.resume(stream.run_id, {"c1": Approve(by="U1", scope="not a scope!")})
    assert (await agent.get_run(stream.run_id)).answers == []  # refused whole: nothing recorded
    chunks = await (
        await agent.resume(stream.run_id, {"c1": Approve(by="U1", arguments={"name": "web"}, scope="thread")})
    ).collect()
    assert world.done == ["restart web"]
    assert [c.payload.args for c in chunks if isinstance(c, ToolCallChunk)] == [{"name": "web"}]
    told = tool_messages(openai_server.requests[-1])["c1"]
    assert "U1 changed this call's arguments" in told and '{"name": "api"}' in told and '{"name": "web"}' in told
    assert told.endswith("web restarted")
    answer = (await agent.get_run(stream.run_id)).answer_for("c1")
    assert answer is not None and answer.arguments == {"name": "web"} and answer.scope == "thread"


async def test_the_wrong_kind_of_decision_is_refused_and_a_question_takes_a_reply(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    question = {"question": "Which one?", "options": [{"label": "api"}, {"label": "web"}]}
    openai_server.script(
        ModelReply(tool_calls=[tool_call("ask_user", question, id="q1")]),
        ModelReply(tool_calls=[tool_call("restart_service", {"name": "api"}, id="c1")]),
        ModelReply(text="ok"),
    )
    stream = await agent.stream("restart one")
    assert any(isinstance(c, SuspendedChunk) for c in await stream.collect())
    with pytest.raises(NotAwaitingThisKind):
        await agent.resume(stream.run_id, {"q1": Approve(by="U1")})
    with pytest.raises(AnswerError):
        await agent.resume(stream.run_id, {})
    asked = await (await agent.resume(stream.run_id, {"q1": Reply("api", by="U1")})).collect()
    assert any(isinstance(c, ApprovalChunk) for c in asked)
    with pytest.raises(NotAwaitingThisKind):
        await agent.resume(stream.run_id, {"c1": Reply("yes", by="U1")})
    await (await agent.resume(stream.run_id, {"c1": Approve(by="U1")})).collect()
    assert world.done == ["restart api"]


async def test_a_callable_require_approval_asks_only_for_the_calls_it_says(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(
        ModelReply(
            tool_calls=[
                tool_call("refund", {"order": "A", "amount": 40}, id="small"),
                tool_call("refund", {"order": "B", "amount": 400}, id="big"),
            ]
        ),
        ModelReply(text="ok"),
    )
    stream = await agent.stream("refund both")
    asked = [c for c in await stream.collect() if isinstance(c, ApprovalChunk)]
    assert world.done == ["refund A 40"]  # 40 is not over 100: it ran unasked
    assert [c.payload.tool_call_id for c in asked] == ["big"] and asked[0].payload.batch == ()


@pytest.mark.parametrize("kind", ["async", "raises"])
async def test_an_async_check_is_awaited_and_a_check_that_raises_asks(
    kind: str, fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    async def by_async(ctx: ToolContext, args: dict[str, Any]) -> bool:
        seen.append((ctx.run_id, ctx.tool_call_id, args))
        await asyncio.sleep(0)
        return False

    def broken(ctx: ToolContext, args: dict[str, Any]) -> bool:
        raise RuntimeError("no such field")

    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools(refund_check=by_async if kind == "async" else broken))
    openai_server.script(
        ModelReply(tool_calls=[tool_call("refund", {"order": "A", "amount": 400}, id="c1")]), ModelReply(text="ok")
    )
    stream = await agent.stream("refund")
    asked = [c for c in await stream.collect() if isinstance(c, ApprovalChunk)]
    if kind == "async":
        assert not asked and world.done == ["refund A 400"]
        assert seen == [(stream.run_id, "c1", {"order": "A", "amount": 400.0})]
    else:
        assert len(asked) == 1 and world.done == []  # a broken condition never lets the call run unasked


async def test_two_agents_deciding_a_batch_at_once_on_the_real_redis_run_it_once(
    real_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Two processes (two agents, each its own owner and store client) decide the two calls of one batch at the
    same moment: both decisions are recorded (the one that loses the compare-and-set tries again), exactly one finds
    the batch complete and drives the run, and each tool runs once."""
    world = World()
    first: Agent = make_agent(real_redis, tools=world.tools())
    second: Agent = make_agent(real_redis, tools=world.tools())
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await first.stream("go")
    await stream.collect()
    for _ in range(20):  # several rounds of the race, each on a fresh run
        streams = await asyncio.gather(
            first.resume(stream.run_id, {"c_api": Approve(by="U1")}),
            second.resume(stream.run_id, {"c_web": Approve(by="U2")}),
        )
        results = [await s.collect() for s in streams]
        finishes = [c.payload.status for r in results for c in r if isinstance(c, FinishChunk)]
        assert sorted(finishes) == ["completed", "suspended"]
        assert sorted(world.done) == ["lookup T-1", "restart api", "restart web"]
        state = await first.get_run(stream.run_id)
        assert state.status == "completed" and {a.answered_by for a in state.answers} == {"U1", "U2"}
        world.done.clear()
        openai_server.script(three_calls(), ModelReply(text="Done."))
        stream = await first.stream("go")
        await stream.collect()


async def test_a_gates_cover_is_used_once_at_the_calls_turn_never_when_looked_at_ahead(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """A gate that says a call is covered (a standing grant, say): its ``use`` is awaited once, when the call runs,
    not when the call was looked at ahead for a batch; a ``use`` that says the cover is gone makes the call asked.
    The rule a verdict names is kept with the request it asks."""
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    uses: list[str] = []
    gone = {"web"}

    def gate(t: Any, args: dict[str, Any], state: Any, tool_requires: bool) -> GateVerdict:
        if t.id != "restart_service" or args["name"] == "api":
            return GateVerdict(tool_requires, rule="plain")

        async def use() -> bool:
            uses.append(args["name"])
            return args["name"] not in gone

        return GateVerdict(False, use=use, rule="granted")

    agent.approval_gate = gate
    openai_server.script(
        ModelReply(
            tool_calls=[
                tool_call("restart_service", {"name": "api"}, id="c_api"),  # asked: looks at the rest ahead
                tool_call("restart_service", {"name": "db"}, id="c_db"),  # covered
                tool_call("restart_service", {"name": "web"}, id="c_web"),  # covered, but the cover is gone
            ]
        ),
        ModelReply(text="ok"),
    )
    stream = await agent.stream("restart three")
    asked = [c for c in await stream.collect() if isinstance(c, ApprovalChunk)]
    assert [c.payload.tool_call_id for c in asked] == ["c_api"] and asked[0].payload.batch == ()
    assert uses == []  # looked at ahead: nothing used
    assert (await agent.get_run(stream.run_id)).pending.suspend_payload["rule"] == "plain"  # type: ignore[union-attr]
    again = [c for c in await (await agent.resume(stream.run_id, {"c_api": Approve(by="U1")})).collect()]
    assert uses == ["db", "web"] and world.done == ["restart api", "restart db"]
    assert [c.payload.tool_call_id for c in again if isinstance(c, ApprovalChunk)] == ["c_web"]


async def test_past_the_deadline_the_undecided_calls_of_a_batch_are_declined_and_the_decided_ones_stand(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools(), ask_ttl=3600)
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await agent.stream("go")
    await stream.collect()
    await (await agent.resume(stream.run_id, {"c_web": Approve(by="U1")})).collect()
    state = await agent.get_run(stream.run_id)
    assert state.pending is not None and state.pending.expires_at is not None
    by = timedelta(hours=-2)  # let the deadline pass (the stored times moved back, no sleeping)
    moved = {"expires_at": state.pending.expires_at + by, "suspended_at": state.pending.suspended_at + by}
    await agent.store.save(state.model_copy(update={"pending": state.pending.model_copy(update=moved)}), owner="t")
    await (await agent.time_out(run_id=stream.run_id)).collect()
    assert world.done == ["lookup T-1", "restart web"]  # c_api (undecided) declined, c_web (approved) ran
    told = tool_messages(openai_server.requests[-1])
    assert json.loads(told["c_api"]) == {"status": "declined", "reason": "no answer", "outcome": "no_answer"}


async def test_each_call_of_a_batch_times_out_by_its_own_deadline(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """c_api's deadline passed, c_web's not: ``time_out`` of c_api (or of whatever is past its deadline) declines c_api
    alone and the run waits on (its stream finishes ``suspended``, ``waiting``); c_web is still decided on its own,
    then the run goes on. A batch closed as a whole (``expired``) is not reopened by a time-out: all of it ends."""
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools(), ask_ttl=3600)
    openai_server.script(three_calls(), ModelReply(text="Done."), three_calls(), ModelReply(text="Done again."))
    stream = await agent.stream("go")
    await stream.collect()
    state = await agent.get_run(stream.run_id)
    assert state.pending is not None and [c.tool_call_id for c in state.pending.calls()] == ["c_api", "c_web"]
    late = state.pending.model_copy(update={"expires_at": utcnow() - timedelta(seconds=1)})
    await agent.store.save(state.model_copy(update={"pending": late}), owner="t")
    with pytest.raises(RunNotResumable):
        await agent.time_out(run_id=stream.run_id, tool_call_id="c_web")  # its deadline has not passed
    timed_out = await agent.time_out(run_id=stream.run_id)
    assert timed_out.waiting and [c.payload.status for c in await timed_out.collect()] == ["suspended"]
    assert world.done == [] and (await agent.get_run(stream.run_id)).status == "suspended"
    await (await agent.resume(stream.run_id, {"c_web": Approve(by="U1")})).collect()
    assert world.done == ["lookup T-1", "restart web"]
    told = tool_messages(openai_server.requests[1])
    assert json.loads(told["c_api"])["outcome"] == "no_answer" and told["c_web"] == "web restarted"

    again = await agent.stream("go again")
    await again.collect()
    state = await agent.get_run(again.run_id)
    assert state.pending is not None
    late = state.pending.model_copy(update={"expires_at": utcnow() - timedelta(seconds=1)})
    state = await agent.store.save(state.model_copy(update={"pending": late}), owner="t")
    assert (await agent.expire(state, "c_api", whole=True)).status == "expired"  # ASK_ON_TIMEOUT=close's
    await (await agent.time_out(run_id=again.run_id, tool_call_id="c_api")).collect()
    told = tool_messages(openai_server.requests[-1])
    assert json.loads(told["c_api"])["outcome"] == "no_answer" and json.loads(told["c_web"])["outcome"] == "no_answer"


async def test_a_batch_calls_time_out_is_taken_once_and_a_sweep_finds_a_later_call_past_its_deadline(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """c_web (the batch's second call) is past its deadline, c_api not: ``time_out(run_id)`` finds c_web and declines
    it (before: it looked at c_api alone, "its deadline has not passed"); a second time-out of c_web (the scheduler
    delivers at least once) is refused, its one answer kept (before: recorded twice, audited and counted twice)."""
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools(), ask_ttl=3600)
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await agent.stream("go")
    await stream.collect()
    state = await agent.get_run(stream.run_id)
    assert state.pending is not None
    late = state.pending.batch[0].model_copy(update={"expires_at": utcnow() - timedelta(seconds=1)})
    await agent.store.save(state.model_copy(update={"pending": state.pending.replacing(late)}), owner="t")
    assert (await agent.time_out(run_id=stream.run_id)).waiting
    for again in (None, "c_web"):
        with pytest.raises(RunAlreadyResumed if again else RunNotResumable):
            await agent.time_out(run_id=stream.run_id, tool_call_id=again)
    state = await agent.get_run(stream.run_id)
    assert [a.tool_call_id for a in state.answers] == ["c_web"] and state.answers[0].outcome == "no_answer"
    await (await agent.resume(stream.run_id, {"c_api": Approve(by="U1")})).collect()
    assert world.done == ["restart api", "lookup T-1"]


async def test_edited_arguments_nested_too_deeply_are_refused_before_anything_changes(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """Edited arguments (``Approve(arguments=...)``, ``edit_tool_call``) are bound as a model's are: deeper than
    MAX_ARGUMENT_DEPTH is refused (before: Python's recursion limit, an internal error, past ~500 levels)."""
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools())
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await agent.stream("go")
    await stream.collect()
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(AnswerError, match="nested too deeply"):
        await agent.resume(stream.run_id, {"c_api": Approve(by="U1", arguments={"name": "api", "x": deep})})
    with pytest.raises(ToolInputError, match="nested too deeply"):
        await agent.edit_tool_call(run_id=stream.run_id, tool_call_id="c_api", arguments={"x": deep}, edited_by="U1")
    assert (await agent.get_run(stream.run_id)).answers == []


async def test_a_decision_made_before_the_deadline_is_claimed_after_it_judged_at_its_own_time(
    fake_redis: aioredis.Redis, make_agent: Any, openai_server: FakeOpenAI
) -> None:
    """``Approve(decided_at=)``: a decision made in time (a quorum's last approval) and claimed after the deadline
    (by the scheduler) is taken, answered at that moment; one made after the deadline is refused as late, one dated
    before the call was asked or after now is an error, and a decision claimed now beside it is still judged now."""
    world = World()
    agent: Agent = make_agent(fake_redis, tools=world.tools(), ask_ttl=3600)
    openai_server.script(three_calls(), ModelReply(text="Done."))
    stream = await agent.stream("go")
    await stream.collect()
    state = await agent.get_run(stream.run_id)
    assert state.pending is not None and state.pending.expires_at is not None
    by = timedelta(hours=-2)  # the deadline passed an hour ago (the stored times moved back, no sleeping)
    moved = {"expires_at": state.pending.expires_at + by, "suspended_at": state.pending.suspended_at + by}
    late = state.pending.model_copy(update=moved)
    late = late.model_copy(update={"batch": [c.model_copy(update=moved) for c in late.batch]})
    await agent.store.save(state.model_copy(update={"pending": late}), owner="t")
    asked, deadline = late.suspended_at, late.expires_at
    assert deadline is not None
    for wrong in (asked - timedelta(seconds=1), utcnow() + timedelta(minutes=10)):
        with pytest.raises(AnswerError, match="decided_at"):
            await agent.resume(stream.run_id, {"c_api": Approve(by="U1", decided_at=wrong)})
    with pytest.raises(QuestionExpired):  # decided after the deadline
        await agent.resume(stream.run_id, {"c_api": Approve(by="U1", decided_at=deadline + timedelta(seconds=1))})
    await agent.store.save((await agent.get_run(stream.run_id)).model_copy(update={"status": "suspended"}), owner="t")
    with pytest.raises(QuestionExpired):  # c_web's decision is made now, past its deadline
        await agent.resume(
            stream.run_id,
            {"c_api": Approve(by="U1", decided_at=deadline - timedelta(minutes=1)), "c_web": Approve(by="U2")},
        )
    await agent.store.save((await agent.get_run(stream.run_id)).model_copy(update={"status": "suspended"}), owner="t")
    in_time = deadline - timedelta(minutes=1)
    both = {"c_api": Approve(by="U1", decided_at=in_time), "c_web": Approve(by="U2", decided_at=in_time)}
    await (await agent.resume(stream.run_id, both)).collect()
    assert world.done == ["restart api", "lookup T-1", "restart web"]
    answers = {a.tool_call_id: a for a in (await agent.get_run(stream.run_id)).answers}
    assert answers["c_api"].answered_by == "U1" and answers["c_api"].answered_at == in_time
