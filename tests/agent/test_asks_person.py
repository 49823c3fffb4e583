"""``Tool.asks_person``: the one mark of a tool that asks a person, whatever its id or suspend schema: the agent's
question tool is the one that has it, its calls never wait for an approval, and Slack shows no progress line for
them; a tool without it (one that suspends mid-work, or only has a suspend schema) is none of these."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import Agent, make_ask_user_tool, tool
from bot.agent.approvals import needs_approval
from bot.agent.state import RunState
from bot.agent.tools import Tool, ToolContext
from bot.slack.app import quiet_tool


class Question(BaseModel):
    text: str


async def _ask(args: Any, ctx: ToolContext | None) -> Any:
    return "asked"


def asking_tool(**extra: Any) -> Tool:
    return Tool(id="ask_the_team", description="Ask the team.", input_schema=Question, execute_fn=_ask, **extra)


@tool
async def lookup(ticket_id: str) -> str:
    """Look up a ticket."""
    return ticket_id


def test_ask_user_asks_a_person_and_a_plain_tool_does_not() -> None:
    assert make_ask_user_tool().asks_person and make_ask_user_tool(tool_id="ask_human").asks_person
    assert not lookup.asks_person


def test_the_mark_not_the_id_nor_the_schema_makes_a_question_tool(fake_redis: aioredis.Redis, make_agent: Any) -> None:
    own = asking_tool(asks_person=True)  # no suspend schema, another id: still the question tool
    agent: Agent = make_agent(fake_redis, tools=[lookup, own])
    assert agent.question_tool() is own
    state = RunState(run_id="run_x", agent_id=agent.id, messages=[])
    assert not needs_approval(own, state, agent_wide=True)  # a question never waits for an approval
    assert quiet_tool(agent, "ask_the_team") and not quiet_tool(agent, "lookup")

    schema_only = asking_tool(suspend_schema=Question)  # suspends with a schema, but asks nobody
    other: Agent = make_agent(fake_redis, tools=[lookup, schema_only])
    assert needs_approval(schema_only, state, agent_wide=True)
    assert not quiet_tool(other, "ask_the_team")
