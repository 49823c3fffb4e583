"""A stdio MCP server for the tests: ``python named.py SERVER TOOL...`` offers one tool per ``TOOL`` name (any
characters, any length), each answering ``SERVER:TOOL``, so a test sees which server and tool a call reached."""

from __future__ import annotations

import sys
from collections.abc import Callable

from mcp.server.mcpserver import MCPServer

server_name, *tools = sys.argv[1:]
server = MCPServer(server_name, log_level="ERROR")


def answer(name: str) -> Callable[[], str]:
    def tool() -> str:
        return f"{server_name}:{name}"

    return tool


for name in tools:
    server.add_tool(answer(name), name=name, description=f"Say which tool this is ({name}).", structured_output=False)

if __name__ == "__main__":
    server.run()
