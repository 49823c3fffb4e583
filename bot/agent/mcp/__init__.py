"""The MCP client: configured servers' tools as agent tools, their elicitations as questions."""
