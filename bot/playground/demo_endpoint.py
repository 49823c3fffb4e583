"""The playground's demo model served as a loopback OpenAI-compatible endpoint (``POST /v1/chat/completions``), so
an agent framework's own client (Pydantic AI's, the OpenAI Agents SDK's, the ``openai`` client in a LangGraph node)
can use the offline :class:`~bot.playground.demo_model.DemoModel` as it would use OpenAI.

:func:`serve_demo_model` starts it on 127.0.0.1 (a free port) and sets ``model.openai_endpoint``
(:class:`~bot.frameworks.endpoint.OpenAIEndpoint`, model ``demo``, key ``demo``), which
:func:`bot.frameworks.endpoint.openai_endpoint` hands to the framework demo agents
(:mod:`bot.playground.framework_demos`). It is the suite's loopback server (:class:`bot.testing.openai_server.
FakeOpenAI`: both streamed and plain answers) answering every request with the demo model's turn for its messages and
tools.
"""

from __future__ import annotations

from typing import Any

from bot.frameworks.endpoint import OpenAIEndpoint
from bot.playground.demo_model import DemoModel
from bot.testing.openai_server import FakeOpenAI, Reply


def demo_reply(model: DemoModel, body: dict[str, Any]) -> Reply:
    """The demo model's turn for a Chat Completions request ``body`` (its ``messages`` and ``tools``) as a reply."""
    turn = model.turn(list(body.get("messages") or []), tools=list(body.get("tools") or []))
    return Reply(text=turn.content, tool_calls=[(c.id, c.name, c.arguments) for c in turn.tool_calls])


async def serve_demo_model(model: DemoModel, *, host: str = "127.0.0.1") -> FakeOpenAI:
    """Serve ``model`` on ``host`` (a free port) and set its ``openai_endpoint``; returns the server (``stop()`` it)."""
    server = FakeOpenAI(responder=lambda body: demo_reply(model, body))
    await server.start(host=host)
    model.openai_endpoint = OpenAIEndpoint(base_url=server.base_url, api_key="demo", model="demo")
    return server
