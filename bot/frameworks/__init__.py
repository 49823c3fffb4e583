"""Agents built on other frameworks, run by the bot as its own (Pydantic AI, the OpenAI Agents SDK, LangGraph).

Each adapter (:mod:`bot.frameworks.pydantic_ai`, :mod:`bot.frameworks.openai_agents`, :mod:`bot.frameworks.langgraph`)
is an :class:`~bot.agent.Agent` (:class:`bot.frameworks.base.FrameworkAgent`): the Slack layer drives it exactly as
it drives the built-in agent. Each needs its framework, an optional extra (``pip install -e '.[pydantic-ai]'``,
``'.[openai-agents]'``, ``'.[langgraph]'``); this package imports none of them until an adapter is imported.

:func:`adopt` turns a framework's agent object into the bot's agent (``AGENT=module:attr`` naming one, or a factory
returning one: :func:`bot.agent.loading.load_agent`).
"""

from __future__ import annotations

from typing import Any

from bot.agent.agent import Agent
from bot.agent.store import RunStore


def adopt(target: Any, *, store: RunStore) -> Agent | None:
    """``target`` as the bot's agent when it is a framework's agent: a ``pydantic_ai.Agent`` (:class:`PydanticAIAgent
    <bot.frameworks.pydantic_ai.PydanticAIAgent>`), an ``agents.Agent`` (:class:`OpenAIAgentsAgent
    <bot.frameworks.openai_agents.OpenAIAgentsAgent>`) or a compiled LangGraph graph (:class:`LangGraphAgent
    <bot.frameworks.langgraph.LangGraphAgent>`), run on ``store``; None for anything else. A framework is imported
    only when ``target`` comes from it (told by its type's module), so a missing extra is never imported."""
    module = type(target).__module__.split(".", 1)[0]
    if module == "pydantic_ai":
        from pydantic_ai import Agent as PydanticAgent

        from bot.frameworks.pydantic_ai import PydanticAIAgent

        return PydanticAIAgent(target, store=store) if isinstance(target, PydanticAgent) else None
    if module == "agents":
        from agents import Agent as SdkAgent

        from bot.frameworks.openai_agents import OpenAIAgentsAgent

        return OpenAIAgentsAgent(target, store=store) if isinstance(target, SdkAgent) else None
    if module == "langgraph":
        from langgraph.pregel import Pregel

        from bot.frameworks.langgraph import LangGraphAgent

        return LangGraphAgent(target, store=store) if isinstance(target, Pregel) else None
    return None
