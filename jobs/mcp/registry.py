"""The tools' register and the one place where a tool's failure becomes its reply: jobs.mcp.tools registers each
tool here as it is imported, and jobs.mcp.server builds the one server from the list."""

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from pydantic import ConfigDict

from jobs.core.errors import BridgeError, ErrorCode, Refused
from jobs.core.resilience import temporary_refusal
from jobs.mcp import replies

log = logging.getLogger(__name__)

TOOLS: list[Tool] = []  # filled by @tool as jobs.mcp.tools is imported


class ErrorReport(Exception):
    """A complete reply that reports trouble (hermes_health): sent as it is, flagged is_error."""


class NeedsInput(Exception):
    """This round of the call ends with a question for the client's user (2026-07-28: jobs/mcp/calls.py); the
    client's retry of the call brings the answer."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__("input required")
        self.result = result


def _flagged(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def tool(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
    """Register a tool whose failures come back as `STATUS: refused|error` replies flagged is_error: the SDK's own
    error path would put "Error executing tool …" before the STATUS line and drop the error's code."""

    @functools.wraps(fn)
    async def replying(**arguments: Any) -> str | CallToolResult | InputRequiredResult:
        try:
            return await fn(**arguments)
        except NeedsInput as asked:
            return asked.result
        except ErrorReport as exc:
            return _flagged(str(exc))
        except BridgeError as exc:
            return _flagged(replies.error(exc.message, exc.code, refused=isinstance(exc, Refused), files=exc.files))
        except Exception as exc:
            refusal = temporary_refusal(exc)
            if refusal is not None:
                return _flagged(replies.error(refusal.message, refusal.code))
            log.exception("MCP tool %s failed", fn.__name__)
            return _flagged(replies.error(replies.unexpected(fn.__name__, exc), ErrorCode.INTERNAL_ERROR))

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
