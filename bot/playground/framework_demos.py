"""The playground's demo agents built on agent frameworks, one per framework, chosen with ``--agent``:

- ``bot.playground.framework_demos:pydantic_ai`` - a Pydantic AI agent: ``restart_service`` (``requires_approval``),
  ``lookup_ticket``, ``ask_user`` (a deferred tool: the question is asked in Slack); needs ``.[pydantic-ai]``;
- ``bot.playground.framework_demos:openai_agents`` - an OpenAI Agents SDK agent: ``restart_service``
  (``needs_approval``), ``lookup_ticket``; needs ``.[openai-agents]``;
- ``bot.playground.framework_demos:langgraph`` - a LangGraph graph: a ``think`` node calls the model (``ask_user``
  offered as a tool), an ``ask`` node asks its question with ``interrupt``, back to ``think`` with the answer;
  needs ``.[langgraph]``.

Each is an ``AGENT`` factory (``build(model=..., store=...)``) whose framework client talks to the bot's model's
endpoint (:func:`bot.frameworks.endpoint.openai_endpoint`): with no ``OPENAI_API_KEY``, the playground's demo model
served on loopback (:mod:`bot.playground.demo_endpoint`; say ``deploy``, ``plan`` or ``restart web`` to it), else the
configured OpenAI-compatible model. The tools do nothing real (:mod:`bot.playground.demo_agent`'s).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypedDict

from bot.agent.model import ChatModel
from bot.agent.store import RunStore
from bot.frameworks.base import FrameworkAgent
from bot.frameworks.endpoint import openai_endpoint
from bot.playground.demo_agent import INSTRUCTIONS, RESTART_DELAY, fake_ticket


class Chat(TypedDict, total=False):
    """The LangGraph demo's state: Chat Completions messages (at module level: LangGraph reads its type hints)."""

    messages: list[dict[str, Any]]


def _restarted(name: str) -> str:
    return f"restarted {name} (demo: nothing really restarted)"


def pydantic_ai(*, model: ChatModel, store: RunStore) -> FrameworkAgent:
    """The Pydantic AI demo agent (see the module docstring). Raises ``ConfigError`` when the model has no
    endpoint."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from bot.frameworks.pydantic_ai import PydanticAIAgent, ask_user

    endpoint = openai_endpoint(model)
    provider = OpenAIProvider(base_url=endpoint.base_url, api_key=endpoint.api_key)
    agent = Agent(
        OpenAIChatModel(endpoint.model, provider=provider), instructions=INSTRUCTIONS, name="pydantic-ai-demo"
    )

    @agent.tool_plain(requires_approval=True)
    async def restart_service(name: str) -> str:
        """Restart a service (a person approves it first)."""
        await asyncio.sleep(RESTART_DELAY)
        return _restarted(name)

    @agent.tool_plain
    def lookup_ticket(ticket_id: str) -> dict[str, Any]:
        """Look up a support ticket by id, e.g. SUP-123."""
        return fake_ticket(ticket_id)

    agent.tool_plain(ask_user)
    return PydanticAIAgent(agent, store=store, id="pydantic-ai-demo", name="Pydantic AI demo")


def openai_agents(*, model: ChatModel, store: RunStore) -> FrameworkAgent:
    """The OpenAI Agents SDK demo agent (see the module docstring). Raises ``ConfigError`` when the model has no
    endpoint."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    from bot.frameworks.openai_agents import OpenAIAgentsAgent

    endpoint = openai_endpoint(model)
    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)

    @function_tool(needs_approval=True)
    async def restart_service(name: str) -> str:
        """Restart a service (a person approves it first).

        Args:
            name: The service to restart.
        """
        await asyncio.sleep(RESTART_DELAY)
        return _restarted(name)

    @function_tool
    def lookup_ticket(ticket_id: str) -> str:
        """Look up a support ticket by id, e.g. SUP-123.

        Args:
            ticket_id: The ticket's id.
        """
        return json.dumps(fake_ticket(ticket_id))  # the SDK gives the model str() of anything else: Python's form

    agent = Agent(
        name="openai-agents-demo",
        instructions=INSTRUCTIONS,
        model=OpenAIChatCompletionsModel(model=endpoint.model, openai_client=client),
        tools=[restart_service, lookup_ticket],
    )
    return OpenAIAgentsAgent(agent, store=store, id="openai-agents-demo", name="OpenAI Agents SDK demo")


def langgraph(*, model: ChatModel, store: RunStore) -> FrameworkAgent:
    """The LangGraph demo graph (see the module docstring). Raises ``ConfigError`` when the model has no endpoint."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt
    from openai import AsyncOpenAI

    from bot.agent.ask_user import AskUserInput
    from bot.frameworks.langgraph import LangGraphAgent

    endpoint = openai_endpoint(model)
    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
    ask_spec = {
        "type": "function",
        "function": {
            "name": "ask_user",
            "description": "Ask the human user a question and wait for the answer.",
            "parameters": AskUserInput.model_json_schema(),
        },
    }

    async def think(state: Chat) -> Chat:
        messages = [{"role": "system", "content": INSTRUCTIONS}, *state["messages"]]
        done = await client.chat.completions.create(
            model=endpoint.model,
            messages=messages,  # type: ignore[arg-type]
            tools=[ask_spec],  # type: ignore[list-item]
        )
        reply = done.choices[0].message
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [c.model_dump(mode="json", exclude_none=True) for c in reply.tool_calls]
        return {"messages": [*state["messages"], message]}

    def ask(state: Chat) -> Chat:
        calls = state["messages"][-1].get("tool_calls") or []
        results = []
        for call in calls:
            answer = interrupt(json.loads(call["function"]["arguments"] or "{}"))
            results.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"answer": answer})})
        return {"messages": [*state["messages"], *results]}

    def route(state: Chat) -> str:
        return "ask" if state["messages"][-1].get("tool_calls") else END

    graph = StateGraph(Chat)
    graph.add_node("think", think)
    graph.add_node("ask", ask)
    graph.add_edge(START, "think")
    graph.add_conditional_edges("think", route, ["ask", END])
    graph.add_edge("ask", "think")
    return LangGraphAgent(graph.compile(name="langgraph-demo"), store=store, id="langgraph-demo", name="LangGraph demo")
