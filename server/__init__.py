"""The MCP server, the application service it calls, and the convmem CLI."""
