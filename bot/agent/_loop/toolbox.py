"""The tools of an :class:`~bot.agent.agent.Agent` (:class:`Toolbox`, held by the agent): by id, the question tool
among them, and what the model is offered (hidden tools left out, their JSON schemas and token estimate built once,
not per turn)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent._loop.budget import tools_tokens
from bot.agent.tools import Tool
from bot.errors import RunNotResumable


class Toolbox:
    """An agent's tools: ``tools`` by id (one dict for the agent's life: added tools go into it); ``offered``,
    ``specs`` and ``tokens`` are what each model request carries. Raises ``ValueError`` when two tools share an
    id."""

    def __init__(self, tools: Sequence[Tool], *, agent_id: str) -> None:
        self.agent_id = agent_id
        self.tools: dict[str, Tool] = {tool.id: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError("tool ids must be unique")
        self.offered: dict[str, Tool] = {}
        self.specs: list[dict[str, object]] = []
        self.tokens = 0
        self._offer()

    def add(self, tools: Sequence[Tool]) -> None:
        """Offer ``tools`` too, from the next model turn on (e.g. tools of MCP servers, listed after start-up).

        Raises ``ValueError``, adding none, when an id is already taken or given twice.
        """
        ids = [tool.id for tool in tools]
        clashes = sorted({i for i in ids if i in self.tools or ids.count(i) > 1})
        if clashes:
            raise ValueError(f"tool ids must be unique; taken: {', '.join(clashes)}")
        self.tools.update((tool.id, tool) for tool in tools)
        self._offer()

    def _offer(self) -> None:
        """What the model is offered: every tool but hidden ones, their JSON schema built once, not per turn."""
        self.offered = {tool.id: tool for tool in self.tools.values() if not tool.hidden}
        self.specs = [tool.spec() for tool in self.offered.values()]
        self.tokens = tools_tokens(self.specs)

    def get(self, run_id: str, name: str) -> Tool:
        """The tool ``name`` a run ``run_id`` waits on. Raises ``RunNotResumable`` when there is none."""
        tool = self.tools.get(name)
        if tool is None:
            raise RunNotResumable(run_id, "suspended", f"this agent has no tool {name!r}")
        return tool

    def question_tool(self) -> Tool:
        """The tool this agent asks people with (``ask_user``: the first whose ``asks_person`` is set). Raises
        ``ValueError`` when it has none."""
        tool = next((t for t in self.tools.values() if t.asks_person), None)
        if tool is None:
            raise ValueError(f"agent {self.agent_id} has no question tool (ask_user)")
        return tool
