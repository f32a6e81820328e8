"""Every state change Bridge makes, in one place (DESIGN.md principle 3).

The REST API, MCP tools, web views and the supervisor call these functions and hold no rules of their own.
Each change is committed together with the events that describe it, and only then announced on the doorbell.
"""

import json
import logging
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F
from django.utils import timezone

from jobs import doorbell, paths
from jobs.errors import Conflict, InvalidInput, NotFound, QueueFull
from jobs.models import AgentSession, PermissionRequest, Task, TaskEvent, Worker
from jobs.vocabulary import Agent, DecidedVia, PermissionMode, PermissionStatus, Source, Status

log = logging.getLogger(__name__)

SUPPORTED_AGENTS = tuple(Agent)
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_TURNS = 10_000
MAX_REASON_CHARS = 2_000
MAX_MESSAGE_CHARS = 10_000
MAX_UPDATED_INPUT_BYTES = 1024 * 1024
# Which options each agent takes; every adapter's options are checked here, once.
AGENT_OPTIONS = {
    Agent.CLAUDE: {"model", "max_turns", "allowed_tools"},
    Agent.HERMES: {"model", "max_turns", "skills", "toolsets"},
}
LIST_OPTIONS = {"allowed_tools", "skills", "toolsets"}
WORKER_STALE_AFTER = timedelta(seconds=30)


# --- reading --------------------------------------------------------------------------------------------


def get_task(task_id: str | uuid.UUID) -> Task:
    """The task with this public id, or NotFound (also for ids that are not UUIDs at all)."""
    try:
        public_id = task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id).strip())
    except ValueError:
        raise NotFound(f"no task {task_id!r}: task ids look like 0b4f8e2c-…") from None
    try:
        return Task.objects.select_related("session").get(public_id=public_id)
    except Task.DoesNotExist:
        raise NotFound(f"no task {task_id}") from None


def events_since(task: Task, since: int = 0, limit: int = 1000) -> list[TaskEvent]:
    return list(TaskEvent.objects.filter(task=task, seq__gt=since).order_by("seq")[:limit])


def event_data(event: TaskEvent) -> dict:
    """One transcript event as REST, SSE and websockets all show it."""
    return {"seq": event.seq, "kind": event.kind, "data": event.data, "time": event.created_at.isoformat()}


def read_transcript(task: Task, since: int, limit: int) -> list[TaskEvent]:
    """Re-read the task first, then its events after `since`. Streams rely on the order: when the task they hold
    has ended, every event up to its end was committed before, so a short batch means they have seen it all."""
    task.refresh_from_db()
    return events_since(task, since, limit)


def parse_seq(raw: str | None, name: str = "since") -> int:
    """A client's last-seen seq: a whole number >= 0 (0 when absent)."""
    try:
        value = int(raw or 0)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidInput(f"{name} must be a whole number >= 0 (the last seq you saw), not {raw!r}")
    return value


# --- events ---------------------------------------------------------------------------------------------


def append_events(task: Task, events: Iterable[tuple[str, dict]]) -> int:
    """Append events with gap-free seqs in one transaction; returns the task's last seq."""
    events = list(events)
    if not events:
        return task.last_seq
    with transaction.atomic():
        Task.objects.filter(pk=task.pk).update(last_seq=F("last_seq") + len(events))
        last = Task.objects.values_list("last_seq", flat=True).get(pk=task.pk)
        first = last - len(events) + 1
        TaskEvent.objects.bulk_create(
            TaskEvent(task_id=task.pk, seq=first + i, kind=kind, data=data) for i, (kind, data) in enumerate(events)
        )
        doorbell.ring(str(task.public_id))
    task.last_seq = last
    return last


def _status_event(task: Task, **extra: Any) -> tuple[str, dict]:
    return ("status", {"status": task.status, **extra})


# --- creating and cancelling ----------------------------------------------------------------------------


@dataclass
class TaskSpec:
    """What a planner asks for; every adapter builds one of these and calls create_task."""

    prompt: str
    cwd: str | None = None
    agent: str = Agent.CLAUDE
    permission_mode: str = PermissionMode.APPROVE
    skip_permissions: bool = False
    resume_session_id: str | None = None
    timeout_s: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    source: str = Source.API
    created_by: str = ""


def argv_value(name: str, value: object) -> str:
    """A value that goes into an agent's argv: a non-empty single-line string that cannot pass for a flag."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string")
    value = value.strip()
    if value.startswith("-") or any(ord(c) < 32 for c in value) or len(value) > 200:
        raise InvalidInput(
            f"{name} {value[:50]!r} is not allowed: at most 200 characters, one line, not starting with '-'"
        )
    return value


def checked_options(agent: str, options: dict[str, Any]) -> dict[str, Any]:
    """The task options an agent takes, validated (None values dropped); anything else is a clear error."""
    allowed = AGENT_OPTIONS[agent]
    checked: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if value is None:
            continue
        if key not in allowed:
            raise InvalidInput(f"{agent} tasks take no {key!r} option; they take: {', '.join(sorted(allowed))}")
        if key == "max_turns":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TURNS:
                raise InvalidInput(f"max_turns must be a whole number from 1 to {MAX_TURNS}, not {value!r}")
            checked[key] = value
        elif key in LIST_OPTIONS:
            if not isinstance(value, list):
                raise InvalidInput(f"{key} must be a list of names")
            checked[key] = [argv_value(f"an entry of {key}", item) for item in value]
        else:
            checked[key] = argv_value(key, value)
    return checked


def task_cwd_and_session(spec: TaskSpec) -> tuple[Path, AgentSession | None]:
    """The confined cwd a task would run in, and the known session it resumes (which fixes the cwd)."""
    resume_id = (spec.resume_session_id or "").strip()
    if not resume_id:
        return paths.resolve_cwd(spec.cwd), None
    session = AgentSession.objects.filter(agent=spec.agent, session_id=resume_id).first()
    cwd = paths.resolve_cwd(session.cwd if session is not None and spec.cwd is None else spec.cwd)
    if session is not None and str(cwd) != session.cwd:
        raise InvalidInput(
            f"session {resume_id} belongs to cwd {session.cwd!r}, not {str(cwd)!r}: "
            "an agent session can only be resumed where it started"
        )
    return cwd, session


def create_task(spec: TaskSpec) -> Task:
    """Validate, confine and queue a task. Nothing runs until a supervisor claims it."""
    prompt = spec.prompt if isinstance(spec.prompt, str) else ""
    if not prompt.strip():
        raise InvalidInput("prompt is empty: say what the agent should do")
    size = len(prompt.encode())
    if size > settings.BRIDGE_MAX_PROMPT_BYTES:
        raise InvalidInput(
            f"prompt is {size} bytes, over the limit of {settings.BRIDGE_MAX_PROMPT_BYTES} "
            "(BRIDGE_MAX_PROMPT_BYTES); put long material in a file in the working directory instead"
        )
    if spec.agent not in SUPPORTED_AGENTS:
        raise InvalidInput(
            f"unknown agent {spec.agent!r}; this Bridge runs: {', '.join(SUPPORTED_AGENTS)}",
            supported=list(SUPPORTED_AGENTS),
        )
    if spec.permission_mode not in (PermissionMode.APPROVE, PermissionMode.BYPASS):
        raise InvalidInput(f"permission_mode must be 'approve' or 'bypass', not {spec.permission_mode!r}")
    mode = PermissionMode.SKIP if spec.skip_permissions else spec.permission_mode
    options = checked_options(spec.agent, spec.options)
    if spec.resume_session_id:
        argv_value("the session id", spec.resume_session_id)
    timeout_s = settings.BRIDGE_TASK_TIMEOUT_S if spec.timeout_s is None else spec.timeout_s
    if not 1 <= timeout_s <= MAX_TIMEOUT_S:
        raise InvalidInput(f"timeout_s must be between 1 and {MAX_TIMEOUT_S} seconds, not {timeout_s}")

    cwd, session = task_cwd_and_session(spec)
    resume_id = (spec.resume_session_id or "").strip()

    with transaction.atomic():
        queued = Task.objects.filter(status=Status.QUEUED).count()
        if queued >= settings.BRIDGE_MAX_QUEUED:
            raise QueueFull(
                f"the queue is full: {queued} tasks are waiting (BRIDGE_MAX_QUEUED={settings.BRIDGE_MAX_QUEUED});"
                " try again when some have finished",
                queued=queued,
            )
        task = Task.objects.create(
            agent=spec.agent,
            prompt=prompt,
            cwd=str(cwd),
            permission_mode=mode,
            options=options,
            timeout_s=timeout_s,
            session=session,
            resume_session_id=resume_id,
            source=spec.source,
            created_by=spec.created_by,
        )
        append_events(task, [_status_event(task)])
        doorbell.ring(doorbell.QUEUE)
    return task


def create_or_join_task(spec: TaskSpec) -> tuple[Task, bool]:
    """Queue a task unless an identical one (agent, prompt, cwd, resumed session, permission mode, options) is
    queued or running: a planner that re-sends a task it lost track of gets the job already doing it.
    Returns (task, created)."""
    cwd, _ = task_cwd_and_session(spec)
    mode = PermissionMode.SKIP if spec.skip_permissions else spec.permission_mode
    options = checked_options(spec.agent, spec.options)
    with transaction.atomic():
        candidates = Task.objects.filter(
            agent=spec.agent,
            prompt=spec.prompt,
            cwd=str(cwd),
            resume_session_id=(spec.resume_session_id or "").strip(),
            permission_mode=mode,
            status__in=(Status.QUEUED, Status.RUNNING),
        ).order_by("created_at", "id")
        same = next((task for task in candidates if task.options == options), None)
        if same is not None:
            return same, False
        return create_task(spec), True


def known_session_id(agent: str, session_id: str, cwd: str | None) -> str:
    """The agent session a resume should continue: `latest` is the newest one Bridge ran for that cwd (the
    default cwd when none is given); any other id must be one Bridge has recorded, so typos fail before a run."""
    session_id = (session_id or "").strip()
    if session_id == "latest":
        resolved = str(paths.resolve_cwd(cwd))
        task = (
            Task.objects.filter(agent=agent, cwd=resolved, session__isnull=False)
            .select_related("session")
            .order_by("-created_at", "-id")
            .first()
        )
        if task is None:
            raise NotFound(f"Bridge has run no {agent} session in {resolved} yet, so there is no 'latest' to resume")
        return task.session.session_id
    if not AgentSession.objects.filter(agent=agent, session_id=session_id).exists():
        raise NotFound(
            f"Bridge knows no {agent} session {session_id!r}; use a session id from an earlier reply, or 'latest'"
        )
    return session_id


def continue_task(task: Task, prompt: str, *, source: str = Source.API, created_by: str = "") -> Task:
    """A follow-up in the same agent session and directory, with the same agent, mode and options."""
    if task.session is None:
        raise Conflict(
            f"task {task.public_id} has no agent session to continue (the agent never reported one: it "
            f"{'has not started yet' if task.status == Status.QUEUED else 'ended before it did'}); start a new task"
        )
    spec = TaskSpec(
        prompt=prompt,
        cwd=task.session.cwd,
        agent=task.agent,
        permission_mode=PermissionMode.APPROVE if task.permission_mode == PermissionMode.SKIP else task.permission_mode,
        skip_permissions=task.permission_mode == PermissionMode.SKIP,
        resume_session_id=task.session.session_id,
        timeout_s=task.timeout_s,
        options=task.options,
        source=source,
        created_by=created_by,
    )
    return create_task(spec)


def request_cancel(task: Task, reason: str = "cancelled by request", by: str = "") -> Task:
    """Cancel a task: a queued one leaves the queue at once; a running one is stopped by its supervisor."""
    reason = reason or "cancelled by request"
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(f"reason is {len(reason)} characters, over the limit of {MAX_REASON_CHARS}")
    with transaction.atomic():
        now = timezone.now()
        dequeued = Task.objects.filter(pk=task.pk, status=Status.QUEUED).update(
            status=Status.CANCELLED, finished_at=now, cancel_requested_at=now, cancel_reason=reason, error=reason
        )
        if dequeued:
            task.refresh_from_db()
            append_events(task, [_status_event(task, reason=reason, by=by)])
            return task
        flagged = Task.objects.filter(pk=task.pk, status=Status.RUNNING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now, cancel_reason=reason
        )
        task.refresh_from_db()
        if flagged:
            append_events(task, [("cancel_requested", {"reason": reason, "by": by})])
            return task
    if task.status == Status.RUNNING:
        return task  # already being cancelled: asking twice is harmless
    raise Conflict(f"task {task.public_id} has already ended ({task.status}); there is nothing to cancel")


# --- supervisor side: claiming, starting, finishing ----------------------------------------------------


def register_worker(capacity: int) -> Worker:
    proc = psutil.Process()
    host = socket.gethostname()
    now = timezone.now()
    return Worker.objects.create(
        name=f"{host}:{proc.pid}:{uuid.uuid4().hex[:6]}",
        host=host,
        pid=proc.pid,
        process_create_time=proc.create_time(),
        capacity=capacity,
        heartbeat_at=now,
    )


def heartbeat(worker: Worker) -> None:
    Worker.objects.filter(pk=worker.pk).update(heartbeat_at=timezone.now())


def stop_worker(worker: Worker) -> None:
    Worker.objects.filter(pk=worker.pk).update(stopped_at=timezone.now())


def worker_is_alive(worker: Worker | None) -> bool:
    """Same host: ask the OS (pid plus create time). Another host: trust a fresh heartbeat."""
    if worker is None or worker.stopped_at is not None:
        return False
    if worker.host == socket.gethostname():
        return process_matches(worker.pid, worker.process_create_time)
    return timezone.now() - worker.heartbeat_at < WORKER_STALE_AFTER


def process_matches(pid: int | None, create_time: float | None) -> bool:
    if pid is None or create_time is None:
        return False
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 0.01
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def claim_next_task(worker: Worker) -> Task | None:
    """Atomically take the oldest queued task (FIFO), or None. Safe with several supervisors."""
    with transaction.atomic():
        queued = Task.objects.filter(status=Status.QUEUED).order_by("created_at", "id")
        if connection.features.has_select_for_update_skip_locked:
            queued = queued.select_for_update(skip_locked=True)
        candidate = queued.values_list("pk", flat=True).first()
        if candidate is None:
            return None
        claimed = Task.objects.filter(pk=candidate, status=Status.QUEUED).update(
            status=Status.RUNNING, worker=worker, started_at=timezone.now()
        )
        if not claimed:
            return None
        task = Task.objects.select_related("session").get(pk=candidate)
        append_events(task, [_status_event(task, worker=worker.name)])
    return task


def mark_spawned(task: Task, pid: int, create_time: float, argv: list[str]) -> None:
    Task.objects.filter(pk=task.pk).update(pid=pid, process_create_time=create_time)
    task.pid, task.process_create_time = pid, create_time
    append_events(task, [("spawned", {"pid": pid, "argv": argv})])


def link_session(task: Task, session_id: str) -> AgentSession:
    """Record the agent's own session id (first seen on its init line) and link the task to it."""
    session, _ = AgentSession.objects.get_or_create(
        agent=task.agent,
        session_id=session_id,
        defaults={"cwd": task.cwd, "title": task.prompt.strip().splitlines()[0][:200]},
    )
    if task.session_id != session.pk:
        Task.objects.filter(pk=task.pk).update(session=session)
        task.session = session
    return session


@dataclass
class Outcome:
    """How a run ended, as the runner and supervisor saw it."""

    status: str
    exit_code: int | None = None
    result: str = ""
    error: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


USAGE_FIELDS = (
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "num_turns",
)


def finish_task(
    task: Task,
    *,
    status: str,
    exit_code: int | None = None,
    result: str = "",
    error: str = "",
    usage: dict[str, Any] | None = None,
    stderr_tail: str = "",
) -> Task:
    """Record the end of a run; pending permission requests that outlive their task become cancelled."""
    usage = {k: usage[k] for k in USAGE_FIELDS if (usage or {}).get(k) is not None}
    with transaction.atomic():
        updated = Task.objects.filter(pk=task.pk, status=Status.RUNNING).update(
            status=status,
            finished_at=timezone.now(),
            exit_code=exit_code,
            result=result,
            error=error,
            stderr_tail=stderr_tail,
            **usage,
        )
        cancel_open_permissions(task, "the task ended before it was answered")
        task.refresh_from_db()
        if not updated:
            return task
        if task.session_id and usage.get("cost_usd"):
            AgentSession.objects.filter(pk=task.session_id).update(
                total_cost_usd=F("total_cost_usd") + usage["cost_usd"]
            )
        append_events(
            task,
            [_status_event(task, exit_code=exit_code, error=error, result=result, usage=usage)],
        )
    return task


def mark_orphaned(task: Task, reason: str) -> Task:
    with transaction.atomic():
        updated = Task.objects.filter(pk=task.pk, status=Status.RUNNING).update(
            status=Status.ORPHANED, finished_at=timezone.now(), error=reason
        )
        cancel_open_permissions(task, "the task's supervisor died before it was answered")
        task.refresh_from_db()
        if updated:
            append_events(task, [_status_event(task, error=reason)])
    return task


def find_orphans(current: Worker) -> list[Task]:
    """Running tasks whose supervisor is gone (not `current`): their process cannot be managed any more."""
    orphans = []
    running = Task.objects.filter(status=Status.RUNNING).exclude(worker=current).select_related("worker")
    for task in running:
        if not worker_is_alive(task.worker):
            orphans.append(task)
    return orphans


# --- permissions ----------------------------------------------------------------------------------------


def record_permission_request(
    task: Task,
    *,
    request_id: str,
    tool_name: str,
    tool_input: dict,
    tool_use_id: str = "",
    suggestions: list | None = None,
) -> PermissionRequest:
    """Store an executor's question. In bypass mode it is answered 'allow' at once, recorded as policy."""
    bypass = task.permission_mode == PermissionMode.BYPASS
    now = timezone.now()
    with transaction.atomic():
        perm = PermissionRequest.objects.create(
            task=task,
            request_id=request_id,
            tool_name=tool_name,
            input=tool_input,
            tool_use_id=tool_use_id,
            suggestions=suggestions or [],
            status=PermissionStatus.ALLOWED if bypass else PermissionStatus.PENDING,
            decided_via=DecidedVia.POLICY if bypass else "",
            decided_by="permission_mode=bypass" if bypass else "",
            decided_at=now if bypass else None,
        )
        events = [("permission_request", permission_data(perm))]
        if bypass:
            events.append(("permission_decision", permission_data(perm)))
        append_events(task, events)
    return perm


def permission_data(perm: PermissionRequest) -> dict:
    """A permission request as events and every adapter show it."""
    return {
        "request_id": perm.request_id,
        "tool_name": perm.tool_name,
        "input": perm.input,
        "tool_use_id": perm.tool_use_id,
        "status": perm.status,
        "updated_input": perm.updated_input,
        "message": perm.message,
        "decided_by": perm.decided_by,
        "decided_via": perm.decided_via,
    }


def pending_permissions(task: Task | None = None) -> list[PermissionRequest]:
    pending = PermissionRequest.objects.filter(status=PermissionStatus.PENDING).select_related("task")
    if task is not None:
        pending = pending.filter(task=task)
    return list(pending.order_by("created_at", "id"))


def decide_permission(
    task: Task,
    *,
    behavior: str,
    request_id: str | None = None,
    updated_input: dict | None = None,
    message: str = "",
    by: str = "",
    via: str = DecidedVia.API,
) -> PermissionRequest:
    """Answer one pending request (the oldest when request_id is None). Exactly one answer ever wins."""
    if behavior not in ("allow", "deny"):
        raise InvalidInput(f"behavior must be 'allow' or 'deny', not {behavior!r}")
    if updated_input is not None and not isinstance(updated_input, dict):
        raise InvalidInput("updatedInput must be a JSON object")
    if updated_input is not None and len(json.dumps(updated_input)) > MAX_UPDATED_INPUT_BYTES:
        raise InvalidInput(f"updatedInput is over the limit of {MAX_UPDATED_INPUT_BYTES} bytes")
    if len(message or "") > MAX_MESSAGE_CHARS:
        raise InvalidInput(f"message is {len(message)} characters, over the limit of {MAX_MESSAGE_CHARS}")
    with transaction.atomic():
        requests = PermissionRequest.objects.filter(task=task)
        if request_id:
            perm = requests.filter(request_id=request_id).first()
            if perm is None:
                raise NotFound(f"task {task.public_id} has no permission request {request_id!r}")
        else:
            perm = requests.filter(status=PermissionStatus.PENDING).order_by("created_at", "id").first()
            if perm is None:
                task.refresh_from_db()
                state = "has ended" if task.is_terminal else "is not waiting for one"
                raise Conflict(f"task {task.public_id} has no pending permission request (it {state}, {task.status})")
        if perm.status != PermissionStatus.PENDING:
            raise Conflict(
                f"permission request {perm.request_id} was already {perm.status}"
                + (f" via {perm.decided_via}" if perm.decided_via else "")
                + "; nothing was sent to the agent",
                request_id=perm.request_id,
                status=perm.status,
            )
        allowed = behavior == "allow"
        if not allowed and not message:
            message = f"Denied by {by or 'the planner'}"
        won = PermissionRequest.objects.filter(pk=perm.pk, status=PermissionStatus.PENDING).update(
            status=PermissionStatus.ALLOWED if allowed else PermissionStatus.DENIED,
            updated_input=updated_input if allowed else None,
            message=message,
            decided_by=by,
            decided_via=via,
            decided_at=timezone.now(),
        )
        if not won:
            raise Conflict(f"permission request {perm.request_id} was answered meanwhile; nothing was sent")
        perm.refresh_from_db()
        append_events(task, [("permission_decision", permission_data(perm))])
    return perm


def expire_permissions(task: Task) -> list[PermissionRequest]:
    """Deny requests that waited longer than BRIDGE_PERMISSION_TIMEOUT_S, saying so."""
    timeout = settings.BRIDGE_PERMISSION_TIMEOUT_S
    cutoff = timezone.now() - timedelta(seconds=timeout)
    expired = []
    for perm in PermissionRequest.objects.filter(task=task, status=PermissionStatus.PENDING, created_at__lt=cutoff):
        with transaction.atomic():
            message = f"No decision within {timeout} s (BRIDGE_PERMISSION_TIMEOUT_S); denied automatically."
            won = PermissionRequest.objects.filter(pk=perm.pk, status=PermissionStatus.PENDING).update(
                status=PermissionStatus.EXPIRED,
                message=message,
                decided_via=DecidedVia.TIMEOUT,
                decided_by="bridge",
                decided_at=timezone.now(),
            )
            if won:
                perm.refresh_from_db()
                append_events(task, [("permission_decision", permission_data(perm))])
                expired.append(perm)
    return expired


def undelivered_decisions(task: Task) -> list[PermissionRequest]:
    """Answers that the executor has not been told yet, oldest first."""
    return list(
        PermissionRequest.objects.filter(
            task=task,
            delivered_at__isnull=True,
            status__in=[PermissionStatus.ALLOWED, PermissionStatus.DENIED, PermissionStatus.EXPIRED],
        ).order_by("decided_at", "id")
    )


def mark_delivered(perm: PermissionRequest) -> None:
    PermissionRequest.objects.filter(pk=perm.pk).update(delivered_at=timezone.now())


def cancel_permission(task: Task, request_id: str, reason: str) -> None:
    """The executor withdrew its question (or never will read an answer)."""
    with transaction.atomic():
        perm = PermissionRequest.objects.filter(
            task=task, request_id=request_id, status=PermissionStatus.PENDING
        ).first()
        if perm is None:
            return
        PermissionRequest.objects.filter(pk=perm.pk).update(
            status=PermissionStatus.CANCELLED, message=reason, decided_via=DecidedVia.AGENT, decided_at=timezone.now()
        )
        perm.refresh_from_db()
        append_events(task, [("permission_decision", permission_data(perm))])


def cancel_open_permissions(task: Task, reason: str) -> None:
    """Pending requests of a task that has ended can never be answered: close them."""
    with transaction.atomic():
        open_requests = list(PermissionRequest.objects.filter(task=task, status=PermissionStatus.PENDING))
        if not open_requests:
            return
        PermissionRequest.objects.filter(pk__in=[p.pk for p in open_requests]).update(
            status=PermissionStatus.CANCELLED,
            message=reason,
            decided_via=DecidedVia.SUPERVISOR,
            decided_at=timezone.now(),
        )
        for perm in open_requests:
            perm.refresh_from_db()
        append_events(task, [("permission_decision", permission_data(p)) for p in open_requests])


def queue_counts() -> dict[str, int]:
    counts = dict.fromkeys((s.value for s in Status), 0)
    for row in Task.objects.values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


@dataclass
class SystemState:
    database: str  # "ok", or the error that reaching it raised
    counts: dict[str, int]
    workers: list[Worker]


def system_state() -> SystemState:
    """What a health check reports; a broken database is reported, not raised."""
    try:
        return SystemState("ok", queue_counts(), live_workers())
    except Exception as exc:
        log.warning("health: the database cannot be read: %s", exc)
        return SystemState(f"error: {exc.__class__.__name__}: {exc}", {}, [])


def live_workers() -> list[Worker]:
    recent = timezone.now() - WORKER_STALE_AFTER
    return list(Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=recent))
