"""The MCP server for outside agents (``python -m bot mcp``): see :mod:`bot.mcp_server.server`."""
