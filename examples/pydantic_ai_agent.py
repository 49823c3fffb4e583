"""A Pydantic AI agent as the Slack bot's agent.

    pip install -e '.[pydantic-ai]'
    AGENT=examples.pydantic_ai_agent:build python -m bot          # the playground (no Slack credentials)
    AGENT=examples.pydantic_ai_agent:agent python -m bot serve    # or name the pydantic_ai.Agent itself

``build`` points the agent's model at the bot's own endpoint (OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL; in
the playground without a key, its offline demo model). ``agent`` is a plain Pydantic AI agent with its own model.

In Slack: "restart web" asks for an approval (a decline's reason reaches the model as ToolDenied's message);
"deploy" asks a question with buttons (the ``ask_user`` deferred tool); "where is order A-1" asks a person for the
result of ``order_status`` (CallDeferred), shown as its arguments with a free-text answer. The playground's offline
demo model knows only its keywords (``help`` lists them): there, ``call order_status {"order_id": "A-1"}`` makes
that call.
"""

from __future__ import annotations

import os

from pydantic_ai import Agent, CallDeferred
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from bot.agent import ChatModel
from bot.agent.store import RunStore
from bot.frameworks.endpoint import openai_endpoint
from bot.frameworks.pydantic_ai import PydanticAIAgent, ask_user

INSTRUCTIONS = "You help the ops team. Ask the user when a request is ambiguous."


def make_agent(model: OpenAIChatModel) -> Agent[None, str]:
    """The Pydantic AI agent: one tool that needs approval, one a person answers, and ``ask_user``."""
    agent = Agent(model, instructions=INSTRUCTIONS, name="ops-pydantic-ai")

    @agent.tool_plain(requires_approval=True)
    def restart_service(name: str) -> str:
        """Restart a service (a person approves it in Slack first)."""
        return f"restarted {name}"

    @agent.tool_plain
    def order_status(order_id: str) -> str:
        """The status of an order: a person looks it up and answers in Slack."""
        raise CallDeferred(metadata={"question": f"What is the status of order {order_id}?"})

    agent.tool_plain(ask_user)
    return agent


def build(*, model: ChatModel, store: RunStore) -> PydanticAIAgent:
    """The AGENT factory: the agent on the bot's model endpoint, run on the bot's store."""
    endpoint = openai_endpoint(model)
    provider = OpenAIProvider(base_url=endpoint.base_url, api_key=endpoint.api_key)
    return PydanticAIAgent(make_agent(OpenAIChatModel(endpoint.model, provider=provider)), store=store)


# AGENT=examples.pydantic_ai_agent:agent: the Pydantic AI agent itself, on its own model.
agent = make_agent(
    OpenAIChatModel(
        os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"),
        provider=OpenAIProvider(
            base_url=os.environ.get("OPENAI_BASE_URL"), api_key=os.environ.get("OPENAI_API_KEY", "unset")
        ),
    )
)
