"""Plain views: the open health check and the SSE stream (ninja does not stream)."""

import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET

from jobs import actions, auth, doorbell
from jobs.errors import BridgeError
from jobs.models import TERMINAL_STATUSES, Task, TaskEvent

SSE_BATCH = 500


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """Open to everyone: says whether the server, its database and a supervisor are up, and nothing private."""
    try:
        counts = actions.queue_counts()
        workers = len(actions.live_workers())
        database = "ok"
    except Exception as exc:  # a health check reports a broken database rather than failing with it
        counts, workers, database = {}, 0, f"error: {exc.__class__.__name__}"
    status = "ok" if database == "ok" else "degraded"
    return JsonResponse(
        {"status": status, "database": database, "supervisors": workers, "tasks": counts},
        status=200 if status == "ok" else 503,
    )


def _sse(event_id: int | None, event: str, data: dict) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, cls=DjangoJSONEncoder)}\n\n".encode()


def _read_after(task_pk: int, since: int) -> tuple[str, list[tuple[int, str, dict, object]]]:
    """Status first, then events: if the status is final, every event up to it is already committed."""
    status = Task.objects.values_list("status", flat=True).get(pk=task_pk)
    events = list(
        TaskEvent.objects.filter(task_id=task_pk, seq__gt=since)
        .order_by("seq")
        .values_list("seq", "kind", "data", "created_at")[:SSE_BATCH]
    )
    connection.close_if_unusable_or_obsolete()
    return status, events


async def _stream(task: Task, since: int) -> AsyncIterator[bytes]:
    waiter = doorbell.AsyncWaiter(str(task.public_id))
    heartbeat = settings.BRIDGE_SSE_HEARTBEAT_S
    try:
        yield b"retry: 2000\n\n"
        last_sent = time.monotonic()
        while True:
            status, events = await sync_to_async(_read_after)(task.pk, since)
            for seq, kind, data, created_at in events:
                yield _sse(seq, kind, {"seq": seq, "kind": kind, "data": data, "time": created_at})
                since = seq
            if events:
                last_sent = time.monotonic()
            if status in TERMINAL_STATUSES and len(events) < SSE_BATCH:
                yield _sse(None, "end", {"task_id": str(task.public_id), "status": status, "last_seq": since})
                return
            if events:
                continue
            idle = time.monotonic() - last_sent
            await waiter.wait(timeout=max(0.05, min(settings.BRIDGE_POLL_S, heartbeat - idle)))
            if time.monotonic() - last_sent >= heartbeat:
                yield b": heartbeat\n\n"
                last_sent = time.monotonic()
    finally:
        waiter.close()


def _error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _open_stream(request: HttpRequest) -> tuple[Task | None, int, JsonResponse | None]:
    if auth.authenticate(request) is None:
        return None, 0, auth.unauthorized()
    raw_since = request.GET.get("since") or request.headers.get("Last-Event-ID") or "0"
    try:
        since = int(raw_since)
        if since < 0:
            raise ValueError
    except ValueError:
        return None, 0, _error(f"since / Last-Event-ID must be a whole number >= 0, not {raw_since!r}", 422)
    try:
        task = actions.get_task(request.GET.get("task_id", ""))
    except BridgeError as exc:
        return None, 0, _error(exc.message, exc.http_status)
    return task, since, None


async def task_stream(request: HttpRequest) -> HttpResponse:
    """SSE: `id:` is the event's seq; resume with Last-Event-ID or ?since=; ends with an `end` event."""
    if request.method != "GET":
        return _error("use GET", 405)
    task, since, error = await sync_to_async(_open_stream)(request)
    if error is not None:
        return error
    response = StreamingHttpResponse(_stream(task, since), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
