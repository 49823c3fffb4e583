"""An agent factory for tests of tool approval through Slack: ``AGENT=bot.testing.approval_agent:build``.

Its tools: ``restart_service(name)`` (needs approval; records each run in :data:`RESTARTS`, and waits on
:data:`GATE` when a test sets one), ``lookup_ticket(ticket_id)`` (plain) and ``ask_user``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bot.agent import Agent, make_ask_user_tool, tool
from bot.agent.model import ChatModel
from bot.agent.store import RunStore

RESTARTS: list[str] = []
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
        tools=[restart_service, lookup_ticket, make_ask_user_tool(max_options=100)],
        store=store,
    )
