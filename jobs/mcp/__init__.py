"""MCP tools for planners (Claude Desktop and other MCP clients): a thin adapter over jobs.actions.

The same server answers on stdio (`manage.py mcp`, `serve_stdio`) and over Streamable HTTP at /mcp
(`McpHttpApp`). Modules: server (the MCPServer and the one error path), tools (the tools themselves), replies
(every reply's text), reads (the database reads replies need), waiting (no tool blocks past its wait_s),
http_app (/mcp behind a token), stdio (stdio serving and the detached supervisor it starts).
"""

from jobs.mcp import tools  # noqa: F401  (importing it registers every tool before the server is made)
from jobs.mcp.http_app import McpHttpApp
from jobs.mcp.server import get_server
from jobs.mcp.stdio import serve_stdio, supervisor_starter

__all__ = ["McpHttpApp", "get_server", "serve_stdio", "supervisor_starter"]
