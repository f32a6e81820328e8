"""No tool blocks past its wait_s: waiting re-reads the database whenever the doorbell rings or BRIDGE_POLL_S
passes (docs/architecture.md, principles 1 and 2)."""

import time

from django.conf import settings

from jobs.core import doorbell
from jobs.core.errors import InvalidInput
from jobs.mcp import reads, replies
from jobs.models import Task


def bounded(wait_s: float) -> tuple[float, list[str]]:
    """wait_s within [0, BRIDGE_MCP_MAX_WAIT_S]: negative is an error, more than the cap is clamped (and said),
    so a reply always comes before the MCP client's own 180 s limit."""
    if wait_s != wait_s or wait_s < 0:  # NaN or negative
        raise InvalidInput(f"wait_s must be a number of seconds >= 0, not {wait_s}")
    cap = settings.BRIDGE_MCP_MAX_WAIT_S
    if wait_s > cap:
        note = replies.clamped(
            "wait_s", f"{wait_s:g}", f"{cap} s", "BRIDGE_MCP_MAX_WAIT_S", ", below the client's 180 s limit"
        )
        return float(cap), [note]
    return float(wait_s), []


async def until_attention(task: Task, wait_s: float) -> None:
    """Until the task ends or asks a permission question, or wait_s passes: rings wake it, polls back it up."""
    deadline = time.monotonic() + wait_s
    waiter = doorbell.AsyncWaiter(str(task.public_id))
    try:
        while not await reads.in_db(reads.needs_attention)(task.pk):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await waiter.wait(min(settings.BRIDGE_POLL_S, left))
    finally:
        waiter.close()
