"""The playground's demo agent: the built-in ``ask_user`` tool plus two Python tools to try tool calls and approval.

``AGENT=bot.playground.demo_agent:build`` (the ``module:attribute`` factory shape any agent uses) makes the bot
run it. With the offline :class:`~bot.playground.demo_model.DemoModel` say ``ticket SUP-123`` (a plain tool call)
or ``restart web`` (a call that waits for someone to press Approve or Decline in Slack).

- ``lookup_ticket(ticket_id)``: a made-up support ticket ``{"id", "title", "status", "assignee"}``, the same for
  the same id (:func:`fake_ticket`); nothing is looked up anywhere.
- ``restart_service(name)``, ``require_approval=True``: sleeps ``restart_delay`` seconds (so the approval message's
  "ran in N s" shows) and returns ``"restarted <name> (demo: nothing really restarted)"``; nothing is restarted.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Annotated, Any

from pydantic import Field

from bot.agent import Agent, ChatModel, Tool, make_ask_user_tool, tool
from bot.agent.store import RunStore
from bot.config import DEFAULT_INSTRUCTIONS

AGENT_ID = "playground-demo"
RESTART_DELAY = 1.5
"""Seconds a demo restart takes."""

INSTRUCTIONS = (
    DEFAULT_INSTRUCTIONS + " You can look up support tickets with lookup_ticket and restart services with "
    "restart_service; a person approves each restart before it runs, and when they decline, say so and don't retry."
)

TICKET_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9]{0,9}-[0-9]{1,9}$"
_TITLES = (
    "Login page times out",
    "CSV export drops the last row",
    "Password reset email never arrives",
    "Dashboard shows yesterday's numbers",
    "Search ignores accented letters",
)
_STATUSES = ("open", "in progress", "waiting on customer", "resolved")
_ASSIGNEES = ("Alice", "Bob", "Carol")


def fake_ticket(ticket_id: str) -> dict[str, Any]:
    """A made-up ticket for ``ticket_id`` (upper-cased); deterministic: the same id gives the same ticket."""
    ticket = ticket_id.strip().upper()
    n = int(hashlib.sha256(ticket.encode()).hexdigest()[:8], 16)
    return {
        "id": ticket,
        "title": _TITLES[n % len(_TITLES)],
        "status": _STATUSES[(n // 7) % len(_STATUSES)],
        "assignee": _ASSIGNEES[(n // 31) % len(_ASSIGNEES)],
    }


def demo_tools(*, restart_delay: float = RESTART_DELAY, restarts: list[str] | None = None) -> list[Tool]:
    """``[lookup_ticket, restart_service]``. ``restarts``: when given, every restart that runs appends the service's
    name to it (what tests count)."""

    @tool
    async def lookup_ticket(
        ticket_id: Annotated[str, Field(pattern=TICKET_ID_PATTERN, description='The ticket\'s id, e.g. "SUP-123".')],
    ) -> dict[str, Any]:
        """Look up a support ticket: its title, status and assignee (demo data)."""
        return fake_ticket(ticket_id)

    @tool(require_approval=True)
    async def restart_service(
        name: Annotated[
            str, Field(min_length=1, max_length=64, description='The service to restart, e.g. "api" or "web".')
        ],
    ) -> str:
        """Restart a service. A person approves each restart before it runs (demo: nothing is really restarted)."""
        await asyncio.sleep(restart_delay)
        if restarts is not None:
            restarts.append(name)
        return f"restarted {name} (demo: nothing really restarted)"

    return [lookup_ticket, restart_service]


def build(
    *, model: ChatModel, store: RunStore, restart_delay: float = RESTART_DELAY, restarts: list[str] | None = None
) -> Agent:
    """The demo agent (``AGENT=bot.playground.demo_agent:build``): ``ask_user`` (up to 100 options),
    ``lookup_ticket`` and ``restart_service`` (approval required), with the bot's default instructions."""
    return Agent(
        id=AGENT_ID,
        name="Assistant",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[make_ask_user_tool(max_options=100), *demo_tools(restart_delay=restart_delay, restarts=restarts)],
        store=store,
    )
