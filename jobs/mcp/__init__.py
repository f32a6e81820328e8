"""MCP tools for planners (Claude Desktop and other MCP clients): a thin adapter over jobs.actions.

The same server answers on stdio (`manage.py mcp`, `stdio.serve_stdio`) and over Streamable HTTP at /mcp
(jobs/web/mcp_http.py mounts it). Modules: server (the one MCPServer), registry (the tools' list and the one
error path), tools (the tools themselves), replies (every reply's text), reads (the database reads replies need),
waiting (no tool blocks past its wait_s), full_log (each job's transcript as a file), starter (the detached
supervisor the stdio server starts), stdio (stdio serving).

This package imports nothing itself: a web process imports jobs.web.mcp_http alone, and the MCP SDK (about 20 MB a
process) loads with the first request to /mcp.
"""
