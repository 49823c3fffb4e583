"""A stdio MCP server for the tests, written with the SDK's ``MCPServer``.

``python basic.py [NAME]``: tools ``echo`` (plain text), ``add`` (structured output), ``delete_item`` (matched by
the tests' ``requireApproval`` pattern ``delete_*``), ``fail`` (an ``isError`` result), ``pid`` (this process's id),
``getenv`` (one of its environment variables), ``big`` (``chars`` characters of text) and ``crash`` (exits the
process mid-call).
``MCP_TEST_REFUSE_IF_EXISTS=path`` makes it exit at once (status 3) while that file exists (a server that can't be
restarted).
"""

from __future__ import annotations

import os
import sys

refuse = os.environ.get("MCP_TEST_REFUSE_IF_EXISTS")
if refuse and os.path.exists(refuse):  # before importing the SDK: a quick failure
    print("basic.py: refusing to start (marker file present)", file=sys.stderr, flush=True)
    sys.exit(3)

from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

server = MCPServer(sys.argv[1] if len(sys.argv) > 1 else "basic", log_level="WARNING")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


@server.tool(structured_output=False)
def delete_item(item_id: str) -> str:
    """Delete an item for good."""
    return f"deleted {item_id}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason given."""
    raise ToolError(f"refused: {reason}")


@server.tool(structured_output=False)
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool(structured_output=False)
def big(chars: int) -> str:
    """``chars`` characters of text (numbered lines), for a result larger than anyone should send a model."""
    line = "log line {:08d}: nothing to see here, all systems nominal\n"
    text = "".join(line.format(i) for i in range(chars // 50 + 1))
    return text[:chars]


@server.tool(structured_output=False)
def getenv(name: str) -> str:
    """The value of an environment variable of this server ("" when unset)."""
    return os.environ.get(name, "")


@server.tool(structured_output=False)
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(1)


if __name__ == "__main__":
    server.run()
