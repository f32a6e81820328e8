"""MCP tools for planners (Claude Desktop and other MCP clients): a thin adapter over jobs.actions.

The same server answers on stdio (`manage.py mcp`, `stdio.serve_stdio`) and over Streamable HTTP at /mcp
(`http_app.McpHttpApp`). Modules: server (the MCPServer and the one error path), tools (the tools themselves),
replies (every reply's text), reads (the database reads replies need), waiting (no tool blocks past its wait_s),
http_app (/mcp behind a token), stdio (stdio serving and the detached supervisor it starts).

This package imports nothing itself: a web process imports http_app alone, and the MCP SDK (about 20 MB a process)
loads with the first request to /mcp.
"""
