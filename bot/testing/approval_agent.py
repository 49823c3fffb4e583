"""An agent factory for tests of tool approval through Slack: ``AGENT=bot.testing.approval_agent:build``.

Its tools: ``restart_service(name)`` (needs approval; records each run in :data:`RESTARTS`, and waits on
:data:`GATE` when a test sets one), ``scale_service(name, replicas, region, labels)`` (needs approval; arguments of
several JSON types, for the Edit modal; records each run's arguments in :data:`SCALES`), ``lookup_ticket(ticket_id)``
(plain) and ``ask_user``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from pydantic import Field

from bot.agent import Agent, make_ask_user_tool, tool
from bot.agent.model import ChatModel
from bot.agent.store import RunStore

RESTARTS: list[str] = []
SCALES: list[dict[str, Any]] = []
GATE: dict[str, asyncio.Event] = {}


@tool(require_approval=True)
async def restart_service(name: str, force: bool = False) -> str:
    """Restart a service.

    Args:
        name: The service to restart.
        force: Skip the graceful drain.
    """
    RESTARTS.append(name)
    if "gate" in GATE:
        await GATE["gate"].wait()
    if name == "broken":
        raise RuntimeError("the service did not come back")
    return f"{name} restarted"


@tool(require_approval=True)
async def scale_service(
    name: str,
    replicas: Annotated[int, Field(ge=1, le=50, description="How many instances")],
    region: Literal["eu", "us"] = "eu",
    labels: dict[str, str] | None = None,
) -> str:
    """Scale a service.

    Args:
        name: The service to scale.
        region: Origin.
        labels: Labels to set.
    """
    SCALES.append({"name": name, "replicas": replicas, "region": region, "labels": labels})
    return f"{name} scaled to {replicas} in {region}"


@tool
async def lookup_ticket(ticket_id: str) -> dict[str, Any]:
    """Look up a support ticket."""
    return {"id": ticket_id, "status": "open"}


def build(*, model: ChatModel, store: RunStore) -> Agent:
    """The test agent (see the module docstring)."""
    return Agent(
        id="approvals-test",
        name="Ops",
        instructions="You restart services when asked.",
        model=model,
        tools=[restart_service, scale_service, lookup_ticket, make_ask_user_tool(max_options=100)],
        store=store,
    )


def pydantic_ai(*, model: ChatModel, store: RunStore) -> Agent:
    """The same ``restart_service`` (recorded in :data:`RESTARTS`) as a Pydantic AI agent's tool
    (``requires_approval``), its client talking to the bot's model's endpoint: ``AGENT=
    bot.testing.approval_agent:pydantic_ai`` (needs ``.[pydantic-ai]``)."""
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from bot.frameworks.endpoint import openai_endpoint
    from bot.frameworks.pydantic_ai import PydanticAIAgent

    endpoint = openai_endpoint(model)
    provider = OpenAIProvider(base_url=endpoint.base_url, api_key=endpoint.api_key)
    agent = PydanticAgent(OpenAIChatModel(endpoint.model, provider=provider), instructions="You restart services.")

    @agent.tool_plain(requires_approval=True)
    def restart_service(name: str, force: bool = False) -> str:
        """Restart a service.

        Args:
            name: The service to restart.
            force: Skip the graceful drain.
        """
        RESTARTS.append(name)
        return f"{name} restarted"

    return PydanticAIAgent(agent, store=store, id="approvals-test-pydantic-ai", name="Ops")


def openai_agents(*, model: ChatModel, store: RunStore) -> Agent:
    """The same ``restart_service`` (recorded in :data:`RESTARTS`) as an OpenAI Agents SDK agent's tool
    (``needs_approval``): ``AGENT=bot.testing.approval_agent:openai_agents`` (needs ``.[openai-agents]``)."""
    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    from bot.frameworks.endpoint import openai_endpoint
    from bot.frameworks.openai_agents import OpenAIAgentsAgent

    endpoint = openai_endpoint(model)
    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)

    @function_tool(needs_approval=True)
    def restart_service(name: str, force: bool = False) -> str:
        """Restart a service.

        Args:
            name: The service to restart.
            force: Skip the graceful drain.
        """
        RESTARTS.append(name)
        return f"{name} restarted"

    agent = SdkAgent(
        name="Ops",
        instructions="You restart services.",
        model=OpenAIChatCompletionsModel(model=endpoint.model, openai_client=client),
        tools=[restart_service],
    )
    return OpenAIAgentsAgent(agent, store=store, id="approvals-test-openai-agents", name="Ops")
