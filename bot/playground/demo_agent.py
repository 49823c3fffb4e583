"""The playground's demo agent: the built-in ``ask_user`` tool plus four Python tools to try tool calls and approval.

``AGENT=bot.playground.demo_agent:build`` (the ``module:attribute`` factory shape any agent uses) makes the bot
run it. With the offline :class:`~bot.playground.demo_model.DemoModel` say ``ticket SUP-123`` (a plain tool call),
``restart web``, ``refund 250`` or ``deploy prod`` (calls that wait for someone to press Approve or Decline in
Slack). Who approves which call is the playground's demo approval policy (:data:`DEMO_POLICY`, used unless
``APPROVAL_POLICY`` or ``APPROVERS`` is set): two of Bob and Carol for a restart (either may edit the service's
name), someone of the ``@finance`` user group (Carol) for a refund over 100, the requester for a deploy, a prod
deploy's arguments shown only in Details.

- ``lookup_ticket(ticket_id)``: a made-up support ticket ``{"id", "title", "status", "assignee"}``, the same for
  the same id (:func:`fake_ticket`); nothing is looked up anywhere.
- ``restart_service(name)``, ``require_approval=True``: sleeps ``restart_delay`` seconds (so the approval message's
  "ran in N s" shows) and returns ``"restarted <name> (demo: nothing really restarted)"``; nothing is restarted.
- ``refund(amount, order_id)``, ``require_approval=True`` (the demo policy waives it up to 100): returns
  ``"refunded 250.00 on order ORD-1 (demo: no money moved)"``; no money moves.
- ``deploy(environment, version)``, ``require_approval=True``: ``environment`` ``"staging"`` or ``"prod"``; returns
  ``"deployed 1.4.2 to prod (demo: nothing really deployed)"``; nothing is deployed.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from bot.agent import Agent, ChatModel, Tool, make_ask_user_tool, tool
from bot.agent.store import RunStore
from bot.config import DEFAULT_INSTRUCTIONS

AGENT_ID = "playground-demo"
DEMO_POLICY = Path(__file__).with_name("demo_policy.yaml")
"""The playground's demo approval policy (an ``APPROVAL_POLICY`` file; docs/approvals.md, docs/playground.md)."""
RESTART_DELAY = 1.5
"""Seconds a demo restart takes."""

INSTRUCTIONS = (
    DEFAULT_INSTRUCTIONS + " You can look up support tickets with lookup_ticket, restart services with "
    "restart_service, refund orders with refund and deploy with deploy; a person approves each restart, deploy and "
    "large refund before it runs, and when they decline, say so and don't retry."
)

TICKET_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9]{0,9}-[0-9]{1,9}$"
ORDER_ID_PATTERN = r"^ORD-[0-9]{1,9}$"
DEFAULT_ORDER = "ORD-1"
VERSION_PATTERN = r"^[0-9]{1,4}(\.[0-9]{1,4}){0,3}$"
DEFAULT_VERSION = "1.4.2"
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


def demo_tools(
    *, restart_delay: float = RESTART_DELAY, restarts: list[str] | None = None, ran: list[dict[str, Any]] | None = None
) -> list[Tool]:
    """``[lookup_ticket, restart_service, refund, deploy]``. ``restarts``: when given, every restart that runs
    appends the service's name to it; ``ran``: every refund and deploy that runs appends ``{"tool", **arguments}``
    (what tests count)."""

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

    @tool(require_approval=True)
    async def refund(
        amount: Annotated[  # a whole amount stays an int: its approval card shows 250, not 250.0
            int | float, Field(gt=0, le=1_000_000, description="How much to refund, e.g. 250.")
        ],
        order_id: Annotated[
            str, Field(pattern=ORDER_ID_PATTERN, description='The order to refund, e.g. "ORD-1".')
        ] = DEFAULT_ORDER,
    ) -> str:
        """Refund an order (demo: no money moves). Large refunds wait for someone in finance to approve them."""
        if ran is not None:
            ran.append({"tool": "refund", "amount": amount, "order_id": order_id})
        return f"refunded {amount:.2f} on order {order_id} (demo: no money moved)"

    @tool(require_approval=True)
    async def deploy(
        environment: Annotated[Literal["staging", "prod"], Field(description="Where to deploy.")],
        version: Annotated[
            str, Field(pattern=VERSION_PATTERN, description='The version to deploy, e.g. "1.4.2".')
        ] = DEFAULT_VERSION,
    ) -> str:
        """Deploy a version to an environment (demo: nothing is deployed). A person approves each deploy."""
        if ran is not None:
            ran.append({"tool": "deploy", "environment": environment, "version": version})
        return f"deployed {version} to {environment} (demo: nothing really deployed)"

    return [lookup_ticket, restart_service, refund, deploy]


def build(
    *,
    model: ChatModel,
    store: RunStore,
    restart_delay: float = RESTART_DELAY,
    restarts: list[str] | None = None,
    ran: list[dict[str, Any]] | None = None,
) -> Agent:
    """The demo agent (``AGENT=bot.playground.demo_agent:build``): ``ask_user`` (up to 100 options),
    ``lookup_ticket``, and ``restart_service``, ``refund`` and ``deploy`` (approval required), with the bot's
    default instructions."""
    return Agent(
        id=AGENT_ID,
        name="Assistant",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[
            make_ask_user_tool(max_options=100),
            *demo_tools(restart_delay=restart_delay, restarts=restarts, ran=ran),
        ],
        store=store,
    )
