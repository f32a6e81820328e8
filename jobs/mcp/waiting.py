"""No tool blocks past its wait_s: waiting re-reads the database whenever the doorbell rings or BRIDGE_POLL_S
passes (docs/architecture.md, principles 1 and 2). On the way it tells a client that asked for progress what the job
does, and puts the job's permission requests to a client's user who can answer them (jobs/mcp/calls.py)."""

import asyncio
import logging
import math
import time

from django.conf import settings

from jobs.core import doorbell
from jobs.core.errors import InvalidInput
from jobs.mcp import asking, reads, replies
from jobs.mcp.calls import Asking, Call
from jobs.mcp.reads import Watched, in_db
from jobs.mcp.registry import NeedsInput
from jobs.models import PermissionRequest, Task

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 2.0  # between progress notifications while nothing changes
MAX_ROUNDS = 8  # questions one call asks between its rounds: the SDK's client gives up after 10 rounds


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


async def until_attention(task: Task, wait_s: float, call: Call | None = None) -> list[str]:
    """Until the task ends or needs someone, or wait_s passes: rings wake it, polls back it up. Returns the NOTE
    lines saying what came of the questions put to the user; raises NeedsInput to end a round with one."""
    return await Wait(task, wait_s, call or Call(None)).run()


class Progress:
    """notifications/progress for a client that gave a progress token: at once when what the job does changes (it
    starts, says a new line, waits for a decision), and every PROGRESS_EVERY_S between; `progress` is the seconds
    waited so far, `total` the wait's bound."""

    def __init__(self, call: Call, total: float) -> None:
        self.call, self.total = call, total
        self.wanted = call.progress_token is not None
        self.started = time.monotonic()
        self.sent_at = -math.inf
        self.progress = 0.0
        self.seen: Watched | None = None

    @property
    def due(self) -> float:
        return self.sent_at + PROGRESS_EVERY_S if self.wanted else math.inf

    async def show(self, seen: Watched) -> None:
        changed = self.seen is None or seen.state != self.seen.state
        self.seen = seen
        if changed and self.wanted:
            await self._send()
        else:
            await self.tick()

    async def tick(self) -> None:
        if time.monotonic() >= self.due:
            await self._send()

    async def _send(self) -> None:
        assert self.seen is not None, "shown before it is sent"
        now = time.monotonic()
        self.progress = max(round(now - self.started, 3), self.progress + 0.001)  # the spec: it always grows
        self.sent_at = now
        seen = self.seen
        message = replies.progress_message(seen.status, seen.since, seen.pending, seen.last_line)
        await self.call.report(self.progress, self.total, message)


class Wait:
    """One tool call's wait on one task."""

    def __init__(self, task: Task, wait_s: float, call: Call) -> None:
        self.task, self.call = task, call
        self.progress = Progress(call, wait_s)
        self.started = self.progress.started
        self.deadline = self.started + wait_s
        self.asked = set(call.rounds.asked)
        self.notes: list[str] = []
        self.waiter: doorbell.AsyncWaiter | None = None

    async def run(self) -> list[str]:
        self.waiter = doorbell.AsyncWaiter(str(self.task.public_id))
        try:
            if self.call.rounds.open is not None:  # the answer to the question that ended the previous round
                asking.release(self.call.rounds.open)
                self.notes.append(
                    await in_db(asking.record)(self.task, self.call.rounds.open, self.call.answer, self.call.by)
                )
            while True:
                seen = await in_db(reads.watched)(self.task.pk, self.progress.wanted)
                await self.progress.show(seen)
                if seen.needs_attention and not await self._asked(seen):
                    return self.notes
                left = self.deadline - time.monotonic()
                if left <= 0:
                    return self.notes
                await self._pause(min(settings.BRIDGE_POLL_S, left))
        finally:
            self.waiter.close()

    async def _pause(self, look_in: float) -> None:
        """Until the doorbell rings or `look_in` seconds pass, with progress meanwhile."""
        assert self.waiter is not None, "paused only while it runs"
        look_at = time.monotonic() + look_in
        while (now := time.monotonic()) < look_at:
            if await self.waiter.wait(min(look_at, self.progress.due) - now):
                return
            await self.progress.tick()

    async def _asked(self, seen: Watched) -> bool:
        """Put the next pending request to the user, if the client can take it: True once it is settled."""
        perm = asking.next_to_ask(seen.pending, self.asked) if self.call.asking != Asking.NOT else None
        if perm is None:
            return False
        question = replies.question(self.task, perm)
        cap = settings.BRIDGE_MCP_MAX_WAIT_S
        if self.call.asking == Asking.BETWEEN_ROUNDS:
            if len(self.asked) >= MAX_ROUNDS:
                self.notes.append(replies.questions_for_the_next_call(MAX_ROUNDS))
                return False
            asking.hold(perm, time.monotonic() + cap)
            raise NeedsInput(self.call.next_round(perm.pk, question, asking.FORM, self.notes))
        self.asked.add(perm.pk)
        began = time.monotonic()
        self.notes.append(await self._ask_now(perm, question, until=self.started + cap))
        # the user's time to answer does not count against wait_s; the call still ends within the cap
        self.deadline = min(self.deadline + time.monotonic() - began, self.started + cap)
        self.progress.total = self.deadline - self.started
        return True

    async def _ask_now(self, perm: PermissionRequest, question: str, until: float) -> str:
        """Ask during the call, and withdraw the question when the request is answered elsewhere or `until` comes."""
        asking.hold(perm, until)
        asked = asyncio.ensure_future(self.call.ask(question, asking.FORM))
        settled = asyncio.ensure_future(self._until_settled(perm.pk))
        try:
            done, _ = await asyncio.wait(
                {asked, settled}, timeout=until - time.monotonic(), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiting in (asked, settled):
                waiting.cancel()
            await asyncio.gather(asked, settled, return_exceptions=True)
            asking.release(perm.pk)
        if asked in done and asked.exception() is None:
            return await in_db(asking.record)(self.task, perm.pk, asked.result(), self.call.by)
        if settled in done:
            return await in_db(asking.settled)(perm.pk)
        if asked in done:
            log.warning("could not ask about permission request %s: %r", perm.request_id, asked.exception())
            return replies.question_unanswered(perm, "the client failed to ask (Bridge's log says how)")
        return replies.question_unanswered(perm, f"got no answer in {until - self.started:.0f} s")

    async def _until_settled(self, perm_pk: int) -> None:
        while await in_db(reads.is_pending)(perm_pk):
            await self._pause(settings.BRIDGE_POLL_S)
