"""`manage.py mcp` serves the tools on stdio, and starts a detached supervisor when none is alive
(jobs/mcp/starter.py)."""

from jobs.mcp.server import get_server
from jobs.mcp.starter import supervisor_starter


def serve_stdio() -> None:
    """`manage.py mcp`: stdout is the protocol; this server may start a supervisor, which outlives it."""
    supervisor_starter.enabled = True
    get_server().run("stdio")
