"""The offline demo model, driven through the real Agent on fakeredis: every flow from start to final reply."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.agent import Agent, AskUserPayload, ask_user_tool, make_ask_user_tool
from bot.agent.model import ChatModel, TextDelta, TurnDone
from bot.agent.stream import Chunk, FinishPayload, SuspendedPayload
from bot.agent.tools import Tool
from bot.playground.demo_model import DemoModel, split_pieces
from bot.playground.demo_script import HELP_TEXT, choose_flow, choose_tool_flow
from bot.store import RedisRunStore

KEYWORDS = ["two questions", "both", "deploy", "pick", "choose", "single", "plan", "features", "several", "multi"]
KEYWORDS += ["many", "lots", "name", "free", "text", "?", "help", "restart", "ticket"]
HINT = "Say `help` to try another flow."


@pytest.fixture
def agent(fake_redis: aioredis.Redis, prefix: str) -> Agent:
    return build_agent(fake_redis, prefix)


def build_agent(client: aioredis.Redis, prefix: str, *, tools: list[Tool] | None = None, **model: Any) -> Agent:
    return Agent(
        id="assistant",
        name="Assistant",
        instructions="Ask the user when in doubt.",
        model=DemoModel(**model),
        tools=[ask_user_tool] if tools is None else tools,
        store=RedisRunStore(client, prefix=prefix),
    )


def suspensions(chunks: list[Chunk]) -> list[SuspendedPayload]:
    return [c.payload for c in chunks if isinstance(c.payload, SuspendedPayload)]


def only_suspension(chunks: list[Chunk]) -> tuple[SuspendedPayload, AskUserPayload]:
    found = suspensions(chunks)
    assert len(found) == 1, [c.type for c in chunks]
    assert isinstance(found[0].suspend_payload, AskUserPayload)
    assert isinstance(chunks[-1].payload, FinishPayload) and chunks[-1].payload.status == "suspended"
    return found[0], found[0].suspend_payload


def final_text(chunks: list[Chunk]) -> str:
    """The streamed text of a completed segment; checks it equals the finish chunk's text."""
    assert not suspensions(chunks), [c.type for c in chunks]
    finish = chunks[-1].payload
    assert isinstance(finish, FinishPayload) and finish.status == "completed", chunks[-1]
    text = "".join(c.payload.text for c in chunks if c.type == "text-delta")  # type: ignore[union-attr]
    assert text == finish.text
    return text


async def answer(agent: Agent, run_id: str, data: str | list[str], **kwargs: Any) -> list[Chunk]:
    return await (await agent.resume_stream(data, run_id=run_id, **kwargs)).collect()


def tool_results(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


# --- the flows, start to finish ----------------------------------------------------------------------


async def test_it_is_a_chat_model() -> None:
    model: ChatModel = DemoModel()  # mypy checks the port's shape here
    events = [e async for e in model.stream_turn([{"role": "user", "content": "hi"}], tools=[])]
    assert isinstance(events[-1], TurnDone) and events[-1].content == HELP_TEXT


async def test_single_select_deploy(agent: Agent) -> None:
    stream = await agent.stream("<@UBOT> please deploy the app")
    call, question = only_suspension(await stream.collect())
    assert call.tool_name == "ask_user" and call.tool_call_id.startswith("call_demo_")
    assert question.question == "Which environment should I deploy to?"
    assert question.selection_mode == "single_select"
    assert question.labels == ["staging", "production", "development"]
    assert all(o.description for o in question.options or [])

    text = final_text(await answer(agent, stream.run_id, "production", answered_by="U_ALICE"))
    assert text == f"(demo model) Deploying to *production*, as <@U_ALICE> chose. {HINT}"
    state = await agent.get_run(stream.run_id)
    assert state.status == "completed"
    assert tool_results(state.messages)[call.tool_call_id]["answer_type"] == "option"


@pytest.mark.parametrize("words", ["pick one", "Choose for me", "single select please"])
async def test_other_single_select_keywords(agent: Agent, words: str) -> None:
    _, question = only_suspension(await (await agent.stream(words)).collect())
    assert question.selection_mode == "single_select" and len(question.labels) == 3


async def test_typed_text_for_single_select(agent: Agent) -> None:
    stream = await agent.stream("pick an environment")
    only_suspension(await stream.collect())
    text = final_text(await answer(agent, stream.run_id, "the <!channel> box", answered_by="U_BOB"))
    assert text.startswith("(demo model) None of the options")
    assert "*the &lt;!channel&gt; box*" in text and "<@U_BOB>" in text  # typed text is escaped for Slack


async def test_multi_select_plan(agent: Agent) -> None:
    stream = await agent.stream("Plan the next release")
    _, question = only_suspension(await stream.collect())
    assert question.selection_mode == "multi_select" and 4 <= len(question.labels) <= 5
    assert all(o.description for o in question.options or [])
    text = final_text(await answer(agent, stream.run_id, ["Search", "Dark mode"], answered_by="U1"))
    assert text == f"(demo model) Planned: Search, Dark mode. {HINT}"


async def test_many_shows_thirty_options(agent: Agent) -> None:
    stream = await agent.stream("show me many options")
    _, question = only_suspension(await stream.collect())
    assert question.selection_mode == "single_select" and len(question.labels) == 30
    text = final_text(await answer(agent, stream.run_id, "Lisbon", answered_by="U1"))
    assert text.startswith("(demo model) The next meetup is in *Lisbon*") and "<@U1>" in text


async def test_lots_shows_twelve_options_multi(agent: Agent) -> None:
    stream = await agent.stream("lots of checkboxes")
    _, question = only_suspension(await stream.collect())
    assert question.selection_mode == "multi_select" and len(question.labels) == 12
    text = final_text(await answer(agent, stream.run_id, ["Basil", "Olives", "Ham"], answered_by="U1"))
    assert text.startswith("(demo model) Pizza with Basil, Olives, Ham (3 of 12 toppings), as <@U1> chose.")


@pytest.mark.parametrize("words", ["name it", "free form", "some TEXT please", "what's up?"])
async def test_free_form(agent: Agent, words: str) -> None:
    stream = await agent.stream(words)
    _, question = only_suspension(await stream.collect())
    assert question.options is None and question.selection_mode is None
    text = final_text(await answer(agent, stream.run_id, "Moonshot", answered_by="U9"))
    assert text == f"(demo model) The project is called *Moonshot*, as <@U9> said. {HINT}"


@pytest.mark.parametrize("words", ["ask me two questions", "both please"])
async def test_two_questions_are_asked_in_turn(agent: Agent, words: str) -> None:
    stream = await agent.stream(words)
    first, q1 = only_suspension(await stream.collect())
    assert q1.question == "What's the project called?" and q1.options is None
    state = await agent.get_run(stream.run_id)
    assistant = [m for m in state.messages if m["role"] == "assistant"]
    assert len(assistant) == 1 and len(assistant[0]["tool_calls"]) == 2  # both calls in ONE assistant message
    ids = [c["id"] for c in assistant[0]["tool_calls"]]
    assert ids[0] == first.tool_call_id and len(set(ids)) == 2

    second, q2 = only_suspension(
        await answer(agent, stream.run_id, "Moonshot", tool_call_id=first.tool_call_id, answered_by="U1")
    )
    assert second.tool_call_id == ids[1]
    assert q2.question == "Which environment should I deploy to?" and q2.selection_mode == "single_select"
    assert q2.labels == ["staging", "production", "development"]

    chunks = await answer(agent, stream.run_id, "staging", tool_call_id=second.tool_call_id, answered_by="U2")
    text = final_text(chunks)
    assert text == (
        "(demo model) The project is called *Moonshot*, as <@U1> said. Deploying to *staging*, as <@U2> chose. " + HINT
    )
    state = await agent.get_run(stream.run_id)
    results = tool_results(state.messages)
    assert results[ids[0]] == {"answer": "Moonshot", "answer_type": "text", "answered_by": "U1"}
    assert results[ids[1]] == {"answer": "staging", "answer_type": "option", "answered_by": "U2"}
    assert state.status == "completed"


@pytest.mark.parametrize("words", ["help", "hello there", "", "Can you help?"])
async def test_help_reply_names_every_keyword(agent: Agent, words: str) -> None:
    text = final_text(await (await agent.stream(words)).collect())
    assert text == HELP_TEXT and text.startswith("(demo model) ")
    for keyword in KEYWORDS:
        assert f"`{keyword}`" in text, keyword


async def test_continuing_a_conversation(agent: Agent) -> None:
    first = await agent.stream("deploy")
    only_suspension(await first.collect())
    await answer(agent, first.run_id, "production", answered_by="U1")
    history = (await agent.get_run(first.run_id)).messages

    second = await agent.stream("now plan features", history=history)
    call, question = only_suspension(await second.collect())
    assert question.selection_mode == "multi_select"
    assert call.tool_call_id not in tool_results(history)
    text = final_text(await answer(agent, second.run_id, ["Search"], answered_by="U1"))
    assert text == f"(demo model) Planned: Search. {HINT}"  # the earlier deploy answer does not count

    third = await agent.stream("thanks!", history=(await agent.get_run(second.run_id)).messages)
    assert final_text(await third.collect()) == HELP_TEXT


async def test_tool_error_is_explained(fake_redis: aioredis.Redis, prefix: str) -> None:
    agent = build_agent(fake_redis, prefix, tools=[make_ask_user_tool(max_options=10)])
    chunks = await (await agent.stream("many")).collect()
    text = final_text(chunks)
    assert text.startswith("(demo model) Something went wrong: I couldn't ask “Which city should host")
    assert "too many options (30); offer at most 10" in text


async def test_no_ask_user_tool_means_text_only(fake_redis: aioredis.Redis, prefix: str) -> None:
    agent = build_agent(fake_redis, prefix, tools=[])
    text = final_text(await (await agent.stream("deploy")).collect())
    assert text.startswith("(demo model) ") and "no `ask_user` tool" in text
    assert final_text(await (await agent.stream("help")).collect()) == HELP_TEXT


# --- the model on its own -------------------------------------------------------------------------------

TOOLS = [ask_user_tool.spec()]


async def turn_events(model: DemoModel, messages: list[dict[str, Any]]) -> list[TextDelta | TurnDone]:
    return [e async for e in model.stream_turn(messages, tools=TOOLS)]


async def test_deterministic() -> None:
    for words in ["two questions", "deploy", "lots", "hello"]:
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": words}]
        a = await turn_events(DemoModel(), messages)
        b = await turn_events(DemoModel(), [dict(m) for m in messages])
        assert a == b and isinstance(a[-1], TurnDone)


async def test_end_to_end_runs_are_deterministic(fake_redis: aioredis.Redis, prefix: str) -> None:
    agent = build_agent(fake_redis, prefix)
    outputs = []
    for _ in range(2):
        stream = await agent.stream("both")
        first, _ = only_suspension(await stream.collect())
        second, _ = only_suspension(await answer(agent, stream.run_id, "X", answered_by="U1"))
        text = final_text(await answer(agent, stream.run_id, "production", answered_by="U1"))
        outputs.append((first.tool_call_id, second.tool_call_id, text))
    assert outputs[0] == outputs[1]


async def test_streams_text_in_small_pieces_with_delay() -> None:
    events = await turn_events(DemoModel(delay=0.001), [{"role": "user", "content": "help"}])
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    done = events[-1]
    assert isinstance(done, TurnDone) and done.tool_calls == [] and done.finish_reason == "stop"
    assert len(pieces) > 10 and "".join(pieces) == done.content == HELP_TEXT
    assert all(len(p.split()) <= 3 for p in pieces)


async def test_tool_call_turn_shape() -> None:
    events = await turn_events(DemoModel(), [{"role": "user", "content": [{"type": "text", "text": "Deploy"}]}])
    assert len(events) == 1
    done = events[0]
    assert isinstance(done, TurnDone) and done.content == "" and done.finish_reason == "tool_calls"
    (call,) = done.tool_calls
    assert call.name == "ask_user" and json.loads(call.arguments)["selection_mode"] == "single_select"
    assert len(call.id) <= 64


async def test_only_results_after_the_last_user_message_count() -> None:
    old_call = {"id": "old", "type": "function", "function": {"name": "ask_user", "arguments": '{"question": "Q?"}'}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "name"},
        {"role": "assistant", "content": None, "tool_calls": [old_call]},
        {"role": "tool", "tool_call_id": "old", "content": '{"answer": "Old", "answer_type": "text"}'},
        {"role": "assistant", "content": "(demo model) ..."},
        {"role": "user", "content": "hi"},
    ]
    done = DemoModel().turn(messages, tools=TOOLS)
    assert done.content == HELP_TEXT and not done.tool_calls
    messages[-1] = {"role": "user", "content": "name"}
    again = DemoModel().turn(messages, tools=TOOLS)
    assert len(again.tool_calls) == 1 and again.tool_calls[0].id != "old"


def test_unknown_question_and_plain_text_result() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "ask_user", "arguments": '{"question": "Why?"}'}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "because"},
    ]
    assert DemoModel().turn(messages, tools=TOOLS).content == f"(demo model) You answered *because* to “Why?”. {HINT}"


def test_choose_flow_and_split_pieces() -> None:
    assert choose_flow("<@UMANY> hi")[0] == "help"  # Slack mentions are ignored
    assert choose_flow("Germany")[0] == "help"  # keywords match at word starts only
    assert choose_flow("How MANY can you pick?")[0] == "many"  # many/lots win over the generic keywords
    assert choose_flow("multi-select")[0] == "multi_select"
    for text in ["", "one", "  lead and trail  ", "a b c d e f g"]:
        assert "".join(split_pieces(text, words=2)) == text
    with pytest.raises(ValueError):
        DemoModel(delay=-1)


# --- the demo tools' keywords (flows through the demo agent: test_playground_demo_tools.py) ------------------


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("restart", ("restart_service", {"name": "api"})),
        ("please restart web", ("restart_service", {"name": "web"})),
        ("<@UBOT> Restart the web service.", ("restart_service", {"name": "web"})),
        ("restarting api-gateway now", ("restart_service", {"name": "api-gateway"})),
        ("can you restart it?", ("restart_service", {"name": "api"})),
        ("ticket SUP-9 says: restart web", ("restart_service", {"name": "web"})),  # restart wins over ticket
        ("ticket", ("lookup_ticket", {"ticket_id": "SUP-1"})),
        ("what is ticket sup-123 about?", ("lookup_ticket", {"ticket_id": "SUP-123"})),
        ("tickets OPS-7 and SUP-8", ("lookup_ticket", {"ticket_id": "OPS-7"})),
        ("ticket #42", ("lookup_ticket", {"ticket_id": "SUP-42"})),
        ("deploy", None),  # the single-select question
        ("deploy please", None),
        ("refund 250", ("refund", {"amount": 250})),
        ("please refund $99.50 on ORD-7", ("refund", {"amount": 99.5, "order_id": "ORD-7"})),
        ("refund ORD-12", ("refund", {"amount": 25, "order_id": "ORD-12"})),  # the order's number is no amount
        ("deploy prod", ("deploy", {"environment": "prod"})),
        ("deploy 1.5.0 to production", ("deploy", {"environment": "prod", "version": "1.5.0"})),
        ("deploy it to staging", ("deploy", {"environment": "staging"})),
        ("restart web, then deploy prod", ("restart_service", {"name": "web"})),  # restart wins
        ("unrestarted", None),
        ("<@URESTART> hi", None),  # Slack mentions are ignored
    ],
)
def test_choose_tool_flow(words: str, expected: tuple[str, dict[str, Any]] | None) -> None:
    assert choose_tool_flow(words) == expected


async def test_without_the_demo_tools_old_flows_win(agent: Agent) -> None:
    """An agent with only ask_user: ``restart`` / ``ticket`` are not keywords; the old flows decide, and where they
    would give the help text the reply says which tool is missing and how to get it."""
    _, question = only_suspension(await (await agent.stream("restart the deploy")).collect())
    assert question.question == "Which environment should I deploy to?"
    _, question = only_suspension(await (await agent.stream("which ticket?")).collect())
    assert question.question == "What's the project called?"
    for words, tool_name in [("restart web", "restart_service"), ("ticket SUP-3", "lookup_ticket")]:
        text = final_text(await (await agent.stream(words)).collect())
        assert text.startswith(f"(demo model) This is where I'd call the `{tool_name}` tool, but this run has no")
        assert "`AGENT=bot.playground.demo_agent:build`" in text and text.endswith(HINT)
    assert "AGENT=bot.playground.demo_agent:build" in HELP_TEXT


def test_help_with_some_of_the_demo_tools_describes_only_those_and_names_the_missing_ones() -> None:
    """Found by a new user's trial: with a framework example's agent (only ``restart_service``), ``help`` promised
    Bob and Carol for a restart Alice alone approved, and said restart needs the demo agent's tools."""
    from bot.playground.demo_script import WITH_DEMO_TOOLS_HELP, help_text

    def tool(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    some = DemoModel().turn([{"role": "user", "content": "help"}], tools=[tool("ask_user"), tool("restart_service")])
    assert "`restart` (e.g. `restart web`): a call of this agent's `restart_service` tool" in some.content
    assert "Bob and Carol" not in some.content and "`ticket` (e.g." not in some.content
    assert some.content.endswith(
        "(`refund`, `deploy prod`, `ticket`: need the demo agent's tools: `AGENT=bot.playground.demo_agent:build`)"
    )
    assert help_text({"restart_service", "refund", "deploy", "lookup_ticket"}) == WITH_DEMO_TOOLS_HELP
    assert help_text(set()) == HELP_TEXT
