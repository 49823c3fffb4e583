"""Agents built on other frameworks, run by the bot as its own (Pydantic AI, the OpenAI Agents SDK, LangGraph).

Each adapter (:mod:`bot.frameworks.pydantic_ai`, :mod:`bot.frameworks.openai_agents`, :mod:`bot.frameworks.langgraph`)
is an :class:`~bot.agent.Agent` (:class:`bot.frameworks.base.FrameworkAgent`): the Slack layer drives it exactly as
it drives the built-in agent. Each needs its framework, an optional extra (``pip install -e '.[pydantic-ai]'``,
``'.[openai-agents]'``, ``'.[langgraph]'``); this package imports none of them until an adapter is imported.
"""
