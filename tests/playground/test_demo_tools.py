"""The playground's demo agent (bot/playground/demo_agent.py) driven by the offline DemoModel through the real Agent
on fakeredis: a restart that needs approval (approved, declined), a ticket lookup; and the fake Slack's
``usergroups.users.list``, which the approver policy uses for user groups."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import Agent, make_ask_user_tool, tool
from bot.agent.decisions import Approve
from bot.agent.loading import load_agent
from bot.agent.stream import ApprovalChunk, ApprovalPayload, Chunk, FinishPayload, TextDeltaChunk, ToolResultChunk
from bot.agent.tools import ToolInputError
from bot.config import DEFAULT_INSTRUCTIONS
from bot.errors import RunAlreadyResumed
from bot.fakeslack import FakeSlack
from bot.fakeslack.state import FINANCE_GROUP_ID, ONCALL_GROUP_ID, Directory
from bot.playground import demo_agent
from bot.playground.demo_model import DemoModel
from bot.playground.demo_script import (
    DEPLOY_TOOL,
    HELP_TEXT,
    REFUND_TOOL,
    RESTART_TOOL,
    TICKET_TOOL,
    WITH_DEMO_TOOLS_HELP,
)
from bot.slack.context import SlackContext
from bot.slack.questions.approvers import ApproverPolicy
from bot.store import RedisRunStore

DONE = "(demo model) Done: restarted {} (demo: nothing really restarted)."


@pytest.fixture
def restarts() -> list[str]:
    """The services the demo agent's restart_service really ran for, in order."""
    return []


@pytest.fixture
def agent(fake_redis: aioredis.Redis, prefix: str, restarts: list[str]) -> Agent:
    return demo_agent.build(
        model=DemoModel(), store=RedisRunStore(fake_redis, prefix=prefix), restart_delay=0, restarts=restarts
    )


def approval(chunks: list[Chunk]) -> ApprovalPayload:
    """The one approval request of a segment that suspended on it."""
    found = [c.payload for c in chunks if isinstance(c, ApprovalChunk)]
    assert len(found) == 1, [c.type for c in chunks]
    assert isinstance(chunks[-1].payload, FinishPayload) and chunks[-1].payload.status == "suspended"
    return found[0]


def final_text(chunks: list[Chunk]) -> str:
    finish = chunks[-1].payload
    assert isinstance(finish, FinishPayload) and finish.status == "completed", chunks[-1]
    text = "".join(c.payload.text for c in chunks if isinstance(c, TextDeltaChunk))
    assert text == finish.text
    return text


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool"]


# --- the factory ---------------------------------------------------------------------------------------------


async def test_build_is_a_factory_the_bot_can_load(fake_redis: aioredis.Redis) -> None:
    store = RedisRunStore(fake_redis)
    agent = load_agent("bot.playground.demo_agent:build", model=DemoModel(), store=store)  # AGENT=... in the bot
    assert list(agent.tools) == ["ask_user", TICKET_TOOL, RESTART_TOOL, REFUND_TOOL, DEPLOY_TOOL]
    assert agent.tools[RESTART_TOOL].require_approval and not agent.tools[TICKET_TOOL].require_approval
    assert agent.tools[REFUND_TOOL].require_approval and agent.tools[DEPLOY_TOOL].require_approval
    assert agent.instructions.startswith(DEFAULT_INSTRUCTIONS) and "restart_service" in agent.instructions
    assert demo_agent.RESTART_DELAY > 0  # "ran in N s" shows in Slack
    too_many = {"question": "Pick", "options": [{"label": f"o{i}"} for i in range(101)]}
    with pytest.raises(ToolInputError, match="at most 100"):  # ask_user offers up to 100 options, as Slack's selects
        await agent.tools["ask_user"].execute(too_many)


# --- restart: approval ---------------------------------------------------------------------------------------


async def test_restart_approved_runs_once_and_says_so(agent: Agent, restarts: list[str]) -> None:
    stream = await agent.stream("<@U_BOT> please restart web")
    asked = approval(await stream.collect())
    assert asked.tool_name == RESTART_TOOL and asked.args == {"name": "web"}
    assert "approves each restart" in asked.description
    assert restarts == []  # nothing runs before someone approves

    chunks = await (await agent.approve_tool_call(run_id=stream.run_id, approved_by="U_BOB")).collect()
    assert final_text(chunks) == DONE.format("web")
    assert restarts == ["web"]
    [result] = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
    assert result.result == "restarted web (demo: nothing really restarted)" and not result.is_error

    with pytest.raises(RunAlreadyResumed):  # a second click does not run it again
        await agent.approve_tool_call(run_id=stream.run_id, approved_by="U_CAROL")
    state = await agent.get_run(stream.run_id)
    assert state.status == "completed" and restarts == ["web"]
    assert [m["content"] for m in tool_messages(state.messages)] == [result.result]


async def test_restart_defaults_to_api(agent: Agent, restarts: list[str]) -> None:
    stream = await agent.stream("restart")
    assert approval(await stream.collect()).args == {"name": "api"}
    chunks = await (await agent.approve_tool_call(run_id=stream.run_id)).collect()
    assert final_text(chunks) == DONE.format("api") and restarts == ["api"]


async def test_restart_declined_never_runs_and_quotes_the_reason(agent: Agent, restarts: list[str]) -> None:
    stream = await agent.stream("restart the api service")
    assert approval(await stream.collect()).args == {"name": "api"}
    reason = "not during the <!here> release"
    decided = await agent.decline_tool_call(run_id=stream.run_id, reason=reason, declined_by="U_BOB")
    text = final_text(await decided.collect())
    assert text == "(demo model) OK, I won't restart it (not during the &lt;!here&gt; release)."  # escaped for Slack
    assert restarts == []
    state = await agent.get_run(stream.run_id)
    [message] = tool_messages(state.messages)
    assert json.loads(message["content"]) == {"status": "declined", "reason": reason, "declined_by": "U_BOB"}
    assert state.status == "completed" and restarts == []


async def test_restart_declined_without_a_reason(agent: Agent, restarts: list[str]) -> None:
    stream = await agent.stream("restart web")
    approval(await stream.collect())
    text = final_text(await (await agent.decline_tool_call(run_id=stream.run_id, reason="  ")).collect())
    assert text == "(demo model) OK, I won't restart it." and restarts == []


async def test_the_conversation_goes_on_after_a_restart(agent: Agent, restarts: list[str]) -> None:
    first = await agent.stream("restart web")
    approval(await first.collect())
    await (await agent.decline_tool_call(run_id=first.run_id, reason="busy")).collect()
    history = (await agent.get_run(first.run_id)).messages

    second = await agent.stream("restart web now", history=history)  # a new request asks again
    assert approval(await second.collect()).args == {"name": "web"}
    text = final_text(await (await agent.approve_tool_call(run_id=second.run_id)).collect())
    assert text == DONE.format("web") and restarts == ["web"]  # the earlier decline does not count


# --- ticket: a plain tool call -------------------------------------------------------------------------------


async def test_the_help_of_the_demo_agent_does_not_send_you_to_get_its_tools(agent: Agent) -> None:
    """The playground's own agent has the demo tools: its help names them without telling to start it with AGENT=
    (it did, found trying the playground as a new user); an agent without them is still told how."""
    text = final_text(await (await agent.stream("help")).collect())
    assert text == WITH_DEMO_TOOLS_HELP and "AGENT=" not in text
    assert "`restart`" in text and "`refund`" in text and "`ticket`" in text
    assert HELP_TEXT.startswith(WITH_DEMO_TOOLS_HELP) and "AGENT=bot.playground.demo_agent:build" in HELP_TEXT


async def test_ticket_lookup_replies_with_a_summary(agent: Agent) -> None:
    chunks = await (await agent.stream("what's the status of ticket sup-123?")).collect()
    assert not [c for c in chunks if isinstance(c, ApprovalChunk)]  # no approval for a lookup
    [result] = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
    ticket = demo_agent.fake_ticket("SUP-123")
    assert result.tool_name == TICKET_TOOL and result.result == ticket
    assert set(ticket) == {"id", "title", "status", "assignee"} and ticket["id"] == "SUP-123"
    text = final_text(chunks)
    assert text == (
        f"(demo model) SUP-123 “{ticket['title']}”: *{ticket['status']}*, assigned to {ticket['assignee']}."
    )
    assert "\n" not in text


async def test_ticket_defaults_and_is_deterministic(agent: Agent) -> None:
    texts = [final_text(await (await agent.stream("ticket please")).collect()) for _ in range(2)]
    assert texts[0] == texts[1] and texts[0].startswith("(demo model) SUP-1 “")
    assert demo_agent.fake_ticket("sup-7") == demo_agent.fake_ticket("SUP-7")


async def test_tool_errors_are_explained() -> None:
    """Results the demo flows don't produce themselves (a real model's bad id, a failed restart) still read well."""
    model = DemoModel()
    for name, content, expected in [
        (TICKET_TOOL, {"error": "invalid arguments for lookup_ticket: ticket_id: bad"}, "I couldn't look up the"),
        (RESTART_TOOL, {"error": "tool restart_service failed: OSError: boom"}, "I couldn't restart it: tool"),
        (RESTART_TOOL, "all good.", "Done: all good."),
        # a framework agent's decline (its rejection text): before "Done: The tool call was declined by U_ALICE..."
        (
            RESTART_TOOL,
            "The tool call was declined by <@U_ALICE>: freeze week",
            "OK, I won't restart it (freeze week).",
        ),
        ("restart_web", "The tool call was declined by <@U_ALICE>", "OK, I won't call `restart_web`."),
    ]:
        call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": content if isinstance(content, str) else json.dumps(content),
            },
        ]
        done = model.turn(messages, tools=[])
        assert done.content.startswith("(demo model) " + expected) and not done.tool_calls


# --- the fake Slack's usergroups.users.list --------------------------------------------------------------------

TOKEN = "xoxb-test"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    directory = Directory.default()
    directory.usergroups["S_TWO"] = ["U_ALICE", "U_CAROL"]
    async with FakeSlack(TOKEN, directory=directory) as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=fake.api_url)


async def test_usergroups_users_list(client: AsyncWebClient, fake: FakeSlack) -> None:
    assert Directory.default().usergroups == {ONCALL_GROUP_ID: ["U_BOB"], FINANCE_GROUP_ID: ["U_CAROL"]}
    response = await client.usergroups_users_list(usergroup=ONCALL_GROUP_ID)
    assert response.data == {"ok": True, "users": ["U_BOB"]}
    assert (await client.usergroups_users_list(usergroup="S_TWO", include_disabled=True))["users"] == [
        "U_ALICE",
        "U_CAROL",
    ]
    [call, *_] = fake.calls_to("usergroups.users.list")
    assert call.params["usergroup"] == ONCALL_GROUP_ID and call.error is None


async def test_usergroups_users_list_errors(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as unknown:
        await client.usergroups_users_list(usergroup="S_NOPE")
    assert unknown.value.response.data == {"ok": False, "error": "no_such_subteam"}  # Slack's code for it
    with pytest.raises(SlackApiError) as missing:
        await client.api_call("usergroups.users.list", http_verb="GET", params={})
    assert missing.value.response["error"] == "invalid_arguments"
    assert missing.value.response["response_metadata"]["messages"] == ["[ERROR] missing required field: usergroup"]


async def test_approvers_from_a_user_group(client: AsyncWebClient) -> None:
    """The approver policy resolves ``APPROVERS=S_ONCALL`` against the fake: Bob may approve, Alice may not."""
    policy = ApproverPolicy(ONCALL_GROUP_ID, client=client)
    ctx = SlackContext(team_id="T_PLAYGROUND", channel_id="C_GENERAL", thread_ts="1.000100", requester="U_ALICE")
    assert await policy.may_approve(ctx, "U_BOB")
    assert not await policy.may_approve(ctx, "U_ALICE")
    unknown = ApproverPolicy("S_NOPE", client=client)
    assert not await unknown.may_approve(ctx, "U_BOB")  # an unknown group approves nobody


# --- call TOOL {json}: any tool the agent has ------------------------------------------------------------------


def coffee_agent(client: aioredis.Redis, cups: list[str]) -> Agent:
    """An agent of one's own (``--agent my_agent:build``): a tool the demo model has no flow for."""

    @tool
    async def coffee_count(team: str) -> dict[str, Any]:
        """How many coffees a team drank today.

        Args:
            team: The team's name, e.g. platform.
        """
        cups.append(team)
        return {"team": team, "cups": 3}

    return Agent(
        id="mine",
        name="Mine",
        instructions="Count coffee.",
        model=DemoModel(),
        tools=[coffee_count, make_ask_user_tool()],
        store=RedisRunStore(client, prefix="coffee:"),
    )


async def test_call_calls_a_tool_the_demo_model_has_no_flow_for(fake_redis: aioredis.Redis) -> None:
    cups: list[str] = []
    agent = coffee_agent(fake_redis, cups)
    chunks = await (await agent.stream('<@U_BOT> call coffee_count {"team": "platform"}')).collect()
    [result] = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
    assert result.tool_name == "coffee_count" and result.result == {"team": "platform", "cups": 3}
    assert cups == ["platform"]
    assert final_text(chunks) == '(demo model) `coffee_count` returned: {"team": "platform", "cups": 3}'
    for text in ["can you call me later?", "recall the deploy", "callback name please"]:  # only a leading `call`
        later = await (await agent.stream(text)).collect()
        assert not [c for c in later if isinstance(c, ToolResultChunk)] and cups == ["platform"]


@pytest.mark.parametrize(
    ("text", "team"),
    [
        ("Call coffee_count {“team”: “platform”}", "platform"),  # typographic quotes, as some keyboards type
        ('call coffee_count {"team": "R&amp;D &lt;3"}', "R&D <3"),  # Slack's escaping undone
        ('call   coffee_count{"team":"ops"}', "ops"),
    ],
    ids=["smart quotes", "slack escaping", "spacing"],
)
async def test_call_reads_the_json_as_typed(fake_redis: aioredis.Redis, text: str, team: str) -> None:
    cups: list[str] = []
    await (await coffee_agent(fake_redis, cups).stream(text)).collect()
    assert cups == [team]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'call coffee_cups {"team": "platform"}',
            '(demo model) This agent has no `coffee_cups` tool. Its tools: `call ask_user {"question": …}`, '
            '`call coffee_count {"team": …}`.',
        ),
        (
            "call coffee_count {team: platform}",
            "(demo model) I couldn't read the arguments of `call coffee_count` as JSON (Expecting property name "
            'enclosed in double quotes at character 2). Write them as one JSON object: `call coffee_count {"team": …}`',
        ),
        (
            'call coffee_count ["platform"]',
            "(demo model) The arguments of `call coffee_count` must be a JSON object, not list: "
            '`call coffee_count {"team": …}`',
        ),
        (
            "<@U_BOT> call",
            "(demo model) Say which tool to call, and with what: `call TOOL {json}`. Its tools: "
            '`call ask_user {"question": …}`, `call coffee_count {"team": …}`.',
        ),
        (  # before: called with {}, and the tool's own error came back
            "call coffee_count",
            "(demo model) `coffee_count` needs arguments; write them as one JSON object: "
            '`call coffee_count {"team": …}`',
        ),
    ],
    ids=["unknown tool", "not JSON", "not an object", "no tool named", "no arguments"],
)
async def test_call_with_a_wrong_tool_or_arguments_says_what_there_is(
    fake_redis: aioredis.Redis, text: str, expected: str
) -> None:
    cups: list[str] = []
    chunks = await (await coffee_agent(fake_redis, cups).stream(text)).collect()
    assert final_text(chunks) == expected and cups == []
    assert not [c for c in chunks if isinstance(c, ToolResultChunk)]


async def test_call_with_arguments_the_tool_refuses_explains_its_error(fake_redis: aioredis.Redis) -> None:
    cups: list[str] = []
    chunks = await (await coffee_agent(fake_redis, cups).stream("call coffee_count {}")).collect()
    [result] = [c.payload for c in chunks if isinstance(c, ToolResultChunk)]
    assert result.is_error and cups == []
    text = final_text(chunks)
    assert text.startswith("(demo model) I couldn't call `coffee_count`: ") and "team" in text


async def test_call_needs_approval_when_the_tool_does(agent: Agent, restarts: list[str]) -> None:
    stream = await agent.stream('call restart_service {"name": "db"}')
    request = approval(await stream.collect())
    assert request.tool_name == RESTART_TOOL and request.args == {"name": "db"} and restarts == []
    done = await (await agent.approve_tool_call(run_id=stream.run_id)).collect()
    assert restarts == ["db"] and final_text(done) == DONE.format("db")


# --- refund and deploy (the demo policy's other two rules; who approves: tests/playground/test_demo_policy.py) ----


@pytest.fixture
def ran() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def agent_with_refunds(fake_redis: aioredis.Redis, prefix: str, ran: list[dict[str, Any]]) -> Agent:
    return demo_agent.build(model=DemoModel(), store=RedisRunStore(fake_redis, prefix=prefix), restart_delay=0, ran=ran)


async def test_a_refund_waits_for_approval_then_runs_once(agent_with_refunds: Agent, ran: list[dict[str, Any]]) -> None:
    stream = await agent_with_refunds.stream("refund 250 on ORD-7")
    asked = approval(await stream.collect())
    assert asked.tool_name == REFUND_TOOL and asked.args == {"amount": 250, "order_id": "ORD-7"} and ran == []
    chunks = await (await agent_with_refunds.approve_tool_call(run_id=stream.run_id, approved_by="U_CAROL")).collect()
    assert final_text(chunks) == "(demo model) Done: refunded 250.00 on order ORD-7 (demo: no money moved)."
    assert ran == [{"tool": "refund", "amount": 250, "order_id": "ORD-7"}]


async def test_a_declined_deploy_never_runs(agent_with_refunds: Agent, ran: list[dict[str, Any]]) -> None:
    stream = await agent_with_refunds.stream("deploy prod")
    asked = approval(await stream.collect())
    assert asked.tool_name == DEPLOY_TOOL and asked.args == {"environment": "prod", "version": "1.4.2"}
    declined = await agent_with_refunds.decline_tool_call(run_id=stream.run_id, reason="change freeze")
    assert final_text(await declined.collect()) == "(demo model) OK, I won't deploy it (change freeze)."
    assert ran == []


async def test_an_edited_restart_is_reported_with_who_changed_it(agent: Agent, restarts: list[str]) -> None:
    """The runtime tells the model of an edit before the result (bot.agent.approvals.edit_note); the demo model
    says who changed the arguments instead of reading the note out as the tool's result."""
    stream = await agent.stream("restart web")
    asked = approval(await stream.collect())
    decided = await agent.resume(stream.run_id, {asked.tool_call_id: Approve(by="U_BOB", arguments={"name": "db"})})
    text = final_text(await decided.collect())
    assert text == "(demo model) <@U_BOB> changed the arguments before approving. " + DONE.format("db")[13:]
    assert restarts == ["db"]
