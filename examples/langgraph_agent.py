"""A LangGraph graph as the Slack bot's agent.

    pip install -e '.[langgraph]'
    AGENT=examples.langgraph_agent:build python -m bot          # the playground (no Slack credentials)

The graph asks with ``interrupt``: ``ask_user(...)`` (options -> buttons, ``multi_select`` -> checkboxes) or any
other payload (listed a key a line, answered with free text); ``Command(resume=...)`` continues it with the answer in
whichever process took the click. Its checkpoints live in the bot's Redis (``RedisCheckpointSaver``, plain hashes:
no Redis Stack needed). The reply node calls the bot's model endpoint with the ``openai`` client.
"""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from openai import AsyncOpenAI

from bot.agent import ChatModel
from bot.agent.store import RunStore
from bot.frameworks.endpoint import openai_endpoint
from bot.frameworks.langgraph import LangGraphAgent, ask_user


class Deploy(TypedDict, total=False):
    messages: list[dict[str, Any]]
    environment: str | None
    confirmed: Any


def build(*, model: ChatModel, store: RunStore) -> LangGraphAgent:
    """The AGENT factory: the graph, its model calls on the bot's endpoint, run on the bot's store."""
    endpoint = openai_endpoint(model)
    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)

    def choose(state: Deploy) -> Deploy:
        return {"environment": ask_user("Which environment?", ["staging", "production"])}

    def confirm(state: Deploy) -> Deploy:
        return {"confirmed": interrupt({"action": "deploy", "environment": state.get("environment")})}

    async def reply(state: Deploy) -> Deploy:
        # (the playground's offline demo model replies a "Summarize:" message's text as it is)
        note = f"Summarize: deploy to {state.get('environment')}; the person said: {state.get('confirmed')}"
        messages = [*state["messages"], {"role": "user", "content": note}]
        done = await client.chat.completions.create(model=endpoint.model, messages=messages)  # type: ignore[arg-type]
        answer = {"role": "assistant", "content": done.choices[0].message.content or ""}
        return {"messages": [*state["messages"], answer]}

    graph = StateGraph(Deploy)
    graph.add_node("choose", choose)
    graph.add_node("confirm", confirm)
    graph.add_node("reply", reply)
    graph.add_edge(START, "choose")
    graph.add_edge("choose", "confirm")
    graph.add_edge("confirm", "reply")
    graph.add_edge("reply", END)
    return LangGraphAgent(graph.compile(name="ops-langgraph"), store=store)
