"""Websockets: one task's events, and the task list's changes — thin adapters that read the database.

A client says which seq (or list cursor) it saw last and gets everything after it from the database, then live
news. Doorbell rings (in-process, or through the channel layer from another process) only wake the reader
(docs/architecture.md, "Principles" 1): a dropped one costs latency, never an event, because the process's sweep
wakes a task's reader when its task has news it has not read (jobs/web/watching.py), and the list's reader looks again
after BRIDGE_POLL_S.
"""

import asyncio
import logging
from urllib.parse import parse_qs, urlparse

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.db import connection
from django.db.models import Max, QuerySet
from django.db.models.functions import Substr
from django.http.request import split_domain_port, validate_host
from django.template.loader import render_to_string

from jobs import actions
from jobs.actions import tokens
from jobs.core import doorbell
from jobs.core.access import Caller, Scope
from jobs.core.errors import BridgeError, ErrorCode, NotFound
from jobs.core.vocabulary import TERMINAL_STATUSES, Status
from jobs.models import AgentSession, PermissionRequest, Task, TaskEvent, Worker
from jobs.web import auth
from jobs.web.watching import TaskWatch

log = logging.getLogger(__name__)
EVENT_BATCH = 500
LIST_MIN_INTERVAL_S = 0.25  # the list coalesces bursts of news (token streaming) into a few updates
PERMISSION_KINDS = ("permission_request", "permission_decision")
LIST_OVERLAP = 200  # ids can commit out of order on PostgreSQL: look back a little, rows are idempotent
PROMPT_HEAD = 100  # characters of a task's prompt the list sends for a notification to show
PENDING_SHOWN = 50  # the newest waiting requests a list message names (pending_permissions counts them all)


class SameOriginOnly:
    """Refuse a websocket for a Host outside ALLOWED_HOSTS (DNS rebinding) or opened by a page on another origin;
    programs (no Origin header) pass on to auth."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin", b"").decode("latin1")
        host = headers.get(b"host", b"").decode("latin1")
        if not validate_host(split_domain_port(host)[0], settings.ALLOWED_HOSTS) or (
            origin and not same_origin(origin, host)
        ):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


def same_origin(origin: str, host: str) -> bool:
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parsed = urlparse(origin)
    return parsed.scheme in ("http", "https") and bool(host) and parsed.netloc == host


def check_caller(scope: dict) -> Caller:
    """A token (programs) or the logged-in session (browsers), as auth.identify decides for every interface, with
    scope `read`: the sockets only send (a frame sent to them changes nothing). Refused, the reason names a token
    sent where Bridge does not read one, as on every HTTP interface."""
    header = auth.scope_headers(scope).get("authorization", "")
    caller = auth.identify(header, scope.get("user"))
    if caller is None:
        raise auth.refusal(header, auth.misplaced_in(scope))
    tokens.require_scope(caller, Scope.READ)
    return caller


def parse_since(scope: dict, meaning: str) -> int:
    """The `since` query parameter (0 when absent), or InvalidInput saying what it should be."""
    raw = parse_qs(scope.get("query_string", b"").decode()).get("since", ["0"])[-1]
    return actions.parse_seq(raw, "since", meaning)


def task_state(task: Task, worker: dict | None, session_id: str | None, pending: int) -> dict:
    """The live counters a task page shows next to the transcript, and where it runs (`worker`: its name and host)
    or why it waits."""
    return {
        "status": task.status,
        "last_seq": task.last_seq,
        "target": task.target,
        "wait_reason": task.wait_reason if task.status == Status.QUEUED else "",
        "worker": worker,
        "created_at": task.created_at.isoformat(),
        "started_at": task.started_at.isoformat() if task.started_at else None,
        "finished_at": task.finished_at.isoformat() if task.finished_at else None,
        "num_turns": task.num_turns,
        "input_tokens": task.input_tokens,
        "output_tokens": task.output_tokens,
        "cost_usd": task.cost_usd,
        "error": task.error,
        "result": task.result,
        "cancel_requested": task.cancel_requested_at is not None,
        "has_session": bool(task.session_id),
        "session_id": session_id,
        "pending_permissions": pending,
    }


class BridgeConsumer(AsyncJsonWebsocketConsumer):
    """Shared shape: authenticate, accept, pump news from the database until the socket closes."""

    key = ""
    caller: Caller  # set by connect, before open

    async def connect(self) -> None:
        """The websockets' one error path: a refusal is accepted only to say why in words and with its code, then
        closed with 4000 + its HTTP status (4400, 4401, 4403, 4404)."""
        try:
            self.caller = await database_sync_to_async(check_caller)(self.scope)
            await self.open()
        except BridgeError as exc:
            await self.accept()
            await self.send_json({"type": "error", "message": exc.message, "code": exc.code})
            await self.close(code=4000 + exc.http_status)
            return
        await self.accept_and_pump()

    async def open(self) -> None:
        """Read what the client asked for; raise BridgeError to refuse."""
        raise NotImplementedError

    async def accept_and_pump(self) -> None:
        """Listen before accepting: once a client sees the socket open, no later news can slip past it."""
        self.waiter = self.make_waiter()
        await self.waiter.joined()
        await self.accept()
        self.pump = asyncio.create_task(self.pump_or_close())

    def make_waiter(self) -> doorbell.AsyncWaiter | TaskWatch:
        return doorbell.AsyncWaiter(self.key)

    async def pump_or_close(self) -> None:
        """An unexpected error ends the socket with 1011 and a reason, after its traceback is logged: never silent."""
        try:
            await self.run_pump()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("websocket %s failed", self.scope.get("path"))
            await self.send_json(
                {"type": "error", "code": ErrorCode.INTERNAL_ERROR, "message": "Bridge failed; see its log"}
            )
            await self.close(code=1011)

    async def disconnect(self, code: int) -> None:
        pump = getattr(self, "pump", None)
        if pump is not None:
            pump.cancel()
        waiter = getattr(self, "waiter", None)
        if waiter is not None:
            waiter.close()

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """These sockets only send: any frame, text, JSON or binary, gets the same answer and the socket stays open."""
        message = "this socket only sends; use the page's forms or REST"
        await self.send_json({"type": "error", "code": ErrorCode.READ_ONLY, "message": message})

    async def run_pump(self) -> None:
        raise NotImplementedError


class NoSuchSocket(BridgeConsumer):
    """Any other /ws/ path: refused in words with 4404, like an unknown task, instead of a failed handshake."""

    async def open(self) -> None:
        raise NotFound(
            f"no websocket at {self.scope.get('path')!r}: use /ws/tasks/ or /ws/tasks/<task id>/",
            code=ErrorCode.NO_SUCH_SOCKET,
        )


class TaskEventsConsumer(BridgeConsumer):
    """/ws/tasks/<task_id>/?since=N — the task's events after seq N, then live ones, then `end`."""

    waiter: TaskWatch  # made by make_waiter, below

    async def open(self) -> None:
        self.since = parse_since(self.scope, "the last seq you saw")
        self.task = await database_sync_to_async(self.seen_task)(self.scope["url_route"]["kwargs"]["task_id"])
        self.key = str(self.task.public_id)
        self.worker_seen: tuple[int | None, dict | None] = (None, None)
        self.session_seen: tuple[int | None, str | None] = (None, None)
        self.pending: int | None = None  # counted again when a batch holds a permission event

    def seen_task(self, task_id: str) -> Task:
        return tokens.check_sees(self.caller, actions.get_task(task_id))

    def make_waiter(self) -> TaskWatch:
        return TaskWatch(self.task)

    @database_sync_to_async
    def read_after(self, settle: bool) -> tuple[dict, list[dict]]:
        """The events after `since` and the task's state: two queries while the task streams. The supervisor, its
        session and the pending count are read again only when they may have changed; `settle` (the first read)
        checks that the supervisor still lives, since a dead one rings no more (after that the sweep does,
        jobs/web/watching.py)."""
        if settle:
            actions.settle_if_orphaned(self.task)
        if self.task.status == Status.QUEUED:
            actions.explain_waits()  # a queued task no live supervisor serves says so (throttled per process)
        events = actions.read_transcript(self.task, self.since, EVENT_BATCH)
        if self.pending is None or any(event.kind in PERMISSION_KINDS for event in events):
            self.pending = PermissionRequest.objects.filter(task=self.task).pending().count()
        worker, session_id = self.worker_of(self.task.worker_id), self.session_of(self.task.session_id)
        state = task_state(self.task, worker, session_id, self.pending)
        connection.close_if_unusable_or_obsolete()
        return state, [{"type": "event", **actions.event_data(event)} for event in events]

    def worker_of(self, pk: int | None) -> dict | None:
        """The supervisor's name and host, looked up once per supervisor (they never change), not on every read."""
        if pk is None:
            return None
        if self.worker_seen[0] != pk:
            self.worker_seen = (pk, Worker.objects.filter(pk=pk).values("name", "host").first())
        return self.worker_seen[1]

    def session_of(self, pk: int | None) -> str | None:
        """The agent's session id, looked up once per session row (it never changes)."""
        if pk is None:
            return None
        if self.session_seen[0] != pk:
            self.session_seen = (pk, AgentSession.objects.filter(pk=pk).values_list("session_id", flat=True).first())
        return self.session_seen[1]

    async def run_pump(self) -> None:
        """Events, then the state whenever it differs from the last one sent in more than its last seq (which the
        events carry; a wait reason changes without an event), then `end` with the task's real last seq (not a
        `since` past it)."""
        sent, first = None, True
        while True:
            state, events = await self.read_after(settle=first)
            first = False
            for event in events:
                await self.send_json(event)
                self.since = event["seq"]
            news = {**state, "last_seq": None}
            if news != sent:
                await self.send_json({"type": "state", **state})
                sent = news
            if state["status"] in TERMINAL_STATUSES and len(events) < EVENT_BATCH:
                await self.send_json({"type": "end", "status": state["status"], "last_seq": state["last_seq"]})
                await self.close()
                return
            if len(events) < EVENT_BATCH:  # else more may be there already
                self.waiter.read(self.since, self.task)
                await self.waiter.wait()


class TaskListConsumer(BridgeConsumer):
    """/ws/tasks/?since=CURSOR — rows of tasks with news after the cursor (a transcript event id), re-rendered, and
    the permission requests waiting for someone. The first message comes at once, rows or not, so every page learns
    the counts and the cursor; without `since` the cursor is the newest event's: a page that shows no rows (the
    pending count in every tab's title, static/bridge/notify.js) wants only what comes next."""

    key = doorbell.TASKS

    async def open(self) -> None:
        if "since" in parse_qs(self.scope.get("query_string", b"").decode()):
            self.cursor = parse_since(self.scope, "the list cursor you saw")
        else:
            self.cursor = await database_sync_to_async(newest_event_id)()

    @database_sync_to_async
    def read_changes(self, first: bool) -> dict | None:
        """The rows with news after the cursor; None when there is none, except for the first message."""
        actions.settle_running_tasks()  # a row whose supervisor died turns orphaned here, with the event that says so
        newer = TaskEvent.objects.filter(pk__gt=max(0, self.cursor - LIST_OVERLAP))
        latest = newer.aggregate(latest=Max("pk"))["latest"] or 0
        if latest <= self.cursor and not first:
            return None
        changes = {
            "type": "tasks",
            "cursor": max(latest, self.cursor),
            "tasks": self.rows_with_news(newer) if latest > self.cursor else [],
            "pending_permissions": tokens.seen_requests(self.caller, PermissionRequest.objects.pending()).count(),
            "pending": self.pending_requests(),
            "counts": tokens.seen_counts(self.caller),
        }
        connection.close_if_unusable_or_obsolete()
        return changes

    def rows_with_news(self, newer: QuerySet[TaskEvent]) -> list[dict]:
        """Each task with an event in `newer`: its row as the dashboard renders it, and what a notification of its
        end says."""
        task_ids = set(newer.values_list("task_id", flat=True).distinct())
        tasks = Task.objects.filter(pk__in=task_ids).select_related("session").with_pending_count().newest_first()
        return [
            {
                "id": str(task.public_id),
                "status": task.status,
                "agent": task.agent,
                "prompt": task.prompt[:PROMPT_HEAD],
                "finished_at": task.finished_at.isoformat() if task.finished_at else None,
                "html": render_row(task),
            }
            for task in tasks
            if self.caller.covers(task.cwd)  # a token limited to roots sees only the tasks under them
        ]

    def pending_requests(self) -> list[dict]:
        """The newest permission requests waiting for someone the caller may see, with what a notification of each
        says."""
        waiting = (
            tokens.seen_requests(self.caller, PermissionRequest.objects.pending())
            .order_by("-created_at", "-id")
            .annotate(prompt=Substr("task__prompt", 1, PROMPT_HEAD))
            .values("request_id", "tool_name", "created_at", "prompt", "task__public_id")
        )
        return [
            {
                "request_id": row["request_id"],
                "task_id": str(row["task__public_id"]),
                "tool": row["tool_name"],
                "prompt": row["prompt"],
                "asked_at": row["created_at"].isoformat(),
            }
            for row in waiting[:PENDING_SHOWN]
        ]

    async def run_pump(self) -> None:
        first = True
        while True:
            changes = await self.read_changes(first)
            first = False
            if changes is not None:
                self.cursor = changes["cursor"]
                await self.send_json(changes)
                await asyncio.sleep(LIST_MIN_INTERVAL_S)
                continue
            await self.waiter.wait(timeout=settings.BRIDGE_POLL_S)


def newest_event_id() -> int:
    """The list cursor that names everything written so far."""
    return TaskEvent.objects.aggregate(latest=Max("pk"))["latest"] or 0


def render_row(task: Task) -> str:
    return render_to_string("jobs/_task_row.html", {"task": task})
