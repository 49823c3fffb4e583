"""Tools from MCP servers, through the official MCP Python SDK's client (``mcp``).

    servers = load_mcp_config("mcp.json")           # see bot.agent.mcp.config for the file
    async with McpTools(servers) as mcp:            # or: tools = await mcp.start(); ...; await mcp.aclose()
        agent.add_tools(mcp.tools)

- **Start.** :meth:`McpTools.start` opens every server at once (stdio servers are started as subprocesses) and
  lists its tools. A server that fails to start, or whose tools can't be listed within ``connect_timeout``, is
  reported with one WARNING line naming it and why; the others work.
- **Tools.** Each MCP tool becomes a :class:`McpTool` named ``server__tool`` (:func:`~bot.agent.mcp.config.
  tool_names`: valid for the model API, deterministic, collision-free). Its schema is the MCP tool's JSON schema
  as given, and arguments are validated against it (``jsonschema``) before the call; its description is the MCP
  tool's. ``requireApproval`` (the server, or patterns on the tool's MCP name) makes it ``require_approval``.
- **Results.** Structured content as JSON; otherwise the text content joined (other content described in
  brackets). An ``isError`` result, a protocol error, a timeout (``call_timeout``) or an unavailable server
  becomes a tool error for the model (:class:`McpToolError`).
- **A server that dies** makes its calls fail with "MCP server NAME is unavailable: ...", logged once per outage;
  the next call tries to reconnect (and logs when it did).
- **Lifecycle.** Each session lives in one task of its own, which opens and closes the SDK's contexts (anyio task
  groups want both in the same task); :meth:`McpTools.aclose` ends them all, stopping the subprocesses.
- **Not supported yet:** elicitation (a server asking the user for input mid-call) and sampling: the SDK's
  defaults answer such requests with an error, and the client does not announce them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Collection, Sequence
from types import TracebackType

import mcp_types as types

from bot.agent.forms import URL_SCHEMES
from bot.agent.mcp.config import McpServerConfig, load_mcp_config, tool_names
from bot.agent.mcp.connection import CALL_TIMEOUT, CONNECT_TIMEOUT, McpConnection
from bot.agent.mcp.tool import McpArguments, McpTool, McpToolError, McpUnavailable, content_text

log = logging.getLogger(__name__)


class McpTools:
    """The tools of the MCP servers ``servers`` (see the module docstring).

    ``connect_timeout``: seconds a server has to start and list its tools (also when reconnecting);
    ``call_timeout``: seconds one tool call may take; ``url_schemes``: the schemes a link a server asks a person to
    open may have (``MCP_ELICIT_URL_SCHEMES``; :func:`bot.agent.forms.url_to_show`).
    """

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        url_schemes: Collection[str] = URL_SCHEMES,
    ) -> None:
        if len({s.name for s in servers}) != len(servers):
            raise ValueError("MCP server names must be unique")
        self.connections = {
            s.name: McpConnection(
                s, connect_timeout=connect_timeout, call_timeout=call_timeout, url_schemes=url_schemes
            )
            for s in servers
        }
        self.tools: list[McpTool] = []
        self.failed: dict[str, str] = {}  # servers that did not start: name -> why
        self._started = False
        self._start_lock = asyncio.Lock()

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        url_schemes: Collection[str] = URL_SCHEMES,
    ) -> McpTools:
        """Servers from the ``MCP_CONFIG`` file at ``path``. Raises ``McpConfigError`` (a ``ConfigError``)."""
        return cls(
            load_mcp_config(path), connect_timeout=connect_timeout, call_timeout=call_timeout, url_schemes=url_schemes
        )

    async def start(self, *, reserved: Collection[str] = ()) -> list[McpTool]:
        """Open every server and list its tools (once; later calls return the same tools). ``reserved``: names the
        tools must not take (the agent's own tools). A server that fails is logged (one WARNING) and left out."""
        async with self._start_lock:
            if not self._started:
                await self._start(reserved)
                self._started = True
        return self.tools

    async def _start(self, reserved: Collection[str]) -> None:
        self.tools, self.failed = [], {}
        connections = list(self.connections.values())
        listed = await asyncio.gather(*(c.start() for c in connections), return_exceptions=True)
        offered: list[tuple[McpConnection, types.Tool]] = []
        for connection, outcome in zip(connections, listed, strict=True):
            if isinstance(outcome, McpUnavailable):
                self.failed[connection.name] = outcome.reason
                log.warning("MCP server %s failed to start: %s", connection.name, outcome.reason)
            elif isinstance(outcome, BaseException):
                raise outcome  # cancelled (or a bug): nothing to offer
            else:
                offered += [(connection, t) for t in outcome]
        names = tool_names([(c.name, t.name) for c, t in offered], reserved=reserved)
        for connection, mcp_tool in offered:
            made = connection.make_tool(mcp_tool, names[(connection.name, mcp_tool.name)])
            if made is not None:
                self.tools.append(made)
        if offered:
            started = [c.name for c in connections if c.name not in self.failed]
            counts = ", ".join(f"{name}: {sum(t.server == name for t in self.tools)}" for name in started)
            log.info("MCP: %d tools (%s)", len(self.tools), counts)

    async def aclose(self) -> None:
        """Close every session (stdio servers are stopped, killed if they don't stop). Idempotent."""
        await asyncio.gather(*(c.aclose() for c in self.connections.values()))

    async def __aenter__(self) -> McpTools:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["McpArguments", "McpConnection", "McpTool", "McpToolError", "McpTools", "McpUnavailable", "content_text"]
