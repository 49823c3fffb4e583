"""An OpenAI Agents SDK agent as the Slack bot's agent.

    pip install -e '.[openai-agents]'
    AGENT=examples.openai_agents_agent:build python -m bot          # the playground (no Slack credentials)

``build`` points the SDK's Chat Completions model at the bot's own endpoint (OPENAI_BASE_URL / OPENAI_API_KEY /
OPENAI_MODEL; in the playground without a key, its offline demo model). In Slack: "restart web" stops the run on the
``needs_approval`` tool (``result.interruptions``); Approve calls ``state.approve(item)``, Decline
``state.reject(item, rejection_message=...)`` with who declined and why, and the run goes on from the stored
``RunState`` JSON in whichever process took the click.
"""

from __future__ import annotations

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

from bot.agent import ChatModel
from bot.agent.store import RunStore
from bot.frameworks.endpoint import openai_endpoint
from bot.frameworks.openai_agents import OpenAIAgentsAgent


@function_tool(needs_approval=True)
def restart_service(name: str) -> str:
    """Restart a service (a person approves it in Slack first).

    Args:
        name: The service to restart.
    """
    return f"restarted {name}"


def build(*, model: ChatModel, store: RunStore) -> OpenAIAgentsAgent:
    """The AGENT factory: the SDK agent on the bot's model endpoint, run on the bot's store."""
    endpoint = openai_endpoint(model)
    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
    agent = Agent(
        name="ops-openai-agents",
        instructions="You help the ops team.",
        model=OpenAIChatCompletionsModel(model=endpoint.model, openai_client=client),
        tools=[restart_service],
    )
    return OpenAIAgentsAgent(agent, store=store)
