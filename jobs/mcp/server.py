"""The one MCP server both transports serve, and the one place where a tool's failure becomes its reply."""

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent
from pydantic import ConfigDict

from jobs.errors import BridgeError, DatabaseBusy, Refused, is_database_busy
from jobs.mcp import replies

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
Bridge runs coding agents (Hermes Agent, Claude Code) as supervised background jobs and records everything.

How to work with it:
- Give each task everything it needs: a self-contained description, absolute paths, and a definition of done
  (which files must exist, which command must pass). The agent sees nothing of this conversation.
- hermes_run / claude_run start a job and wait a few seconds. "STATUS: running" is NOT a failure and NOT a timeout:
  collect the result with hermes_status(job_id=…, wait_s=…) — it works for every job — and never re-run the task.
  Sending the same task for the same cwd again while it runs returns the same job.
- Continue an agent's conversation with hermes_resume / claude_resume (session_id from an earlier reply, or
  "latest" for the newest session Bridge ran in that cwd); hermes_resume also takes any Hermes session id.
- Claude jobs may ask permission for tools: permissions_pending lists the questions, permission_decide answers.
- Verify the artifacts yourself with hermes_read (files and directories, without waking an agent). A job's whole
  transcript is the file on its FULL_LOG line: open it with hermes_read too.
- Statuses: queued (waiting for a worker), running, ok (finished, exit 0), error (the agent failed; read the
  output and error), timeout (it hit its timeout_s), cancelled (by task_cancel or a shutdown), orphaned (its
  supervisor died; the output so far is kept; nothing is re-run), refused (cwd or path outside the allowed roots;
  nothing was started).
"""

TOOLS: list[Tool] = []  # filled by @tool as jobs.mcp.tools is imported (get_server imports it first)


@functools.cache
def get_server() -> MCPServer:
    """The one server, made once with every tool registered."""
    from jobs.mcp import tools  # noqa: F401  (importing it registers the tools; here, as it imports this module)

    root_handlers, root_level = list(logging.root.handlers), logging.root.level
    server = MCPServer("bridge", instructions=INSTRUCTIONS, version="1", tools=TOOLS)
    # Building the server configures the root logger (a handler, level INFO); Bridge's logging is Django's LOGGING.
    logging.root.handlers[:] = root_handlers
    logging.root.setLevel(root_level)
    return server


class ErrorReport(Exception):
    """A complete reply that reports trouble (hermes_health): sent as it is, flagged is_error."""


def _flagged(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def tool(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
    """Register a tool whose failures come back as `STATUS: refused|error` replies flagged is_error: the SDK's own
    error path would put "Error executing tool …" before the STATUS line and drop the error's code."""

    @functools.wraps(fn)
    async def replying(**arguments: Any) -> str | CallToolResult:
        try:
            return await fn(**arguments)
        except ErrorReport as exc:
            return _flagged(str(exc))
        except BridgeError as exc:
            return _flagged(replies.error(exc.message, exc.code, refused=isinstance(exc, Refused)))
        except Exception as exc:
            if is_database_busy(exc):
                busy = DatabaseBusy(settings.BRIDGE_DB_RETRY_AFTER_S)
                return _flagged(replies.error(busy.message, busy.code))
            log.exception("MCP tool %s failed", fn.__name__)
            return _flagged(replies.error(replies.unexpected(fn.__name__, exc), replies.INTERNAL_ERROR))

    # Replies are plain text only: with structured output the SDK would derive an output schema from `-> str` and
    # send {"result": "STATUS: …"} as structuredContent, which clients such as Claude Code show instead of the text.
    TOOLS.append(strict(Tool.from_function(replying, structured_output=False)))
    return fn


def strict(tool: Tool) -> Tool:
    """Refuse arguments a tool does not take, as REST refuses unknown fields: one rule on every interface. (The
    SDK's argument models ignore extra arguments, so a misspelt option would silently do nothing.)"""
    loose = tool.fn_metadata.arg_model
    config = ConfigDict(**loose.model_config, extra="forbid")
    tool.fn_metadata.arg_model = type(loose.__name__, (loose,), {"model_config": config})
    return tool
