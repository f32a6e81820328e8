"""The REST API: hbridge's paths and JSON shapes (so existing Hermes skills keep working), over jobs.actions.

hbridge's own replies (create, cancel, /v1/task/output) give a task's status in hbridge's words with Bridge's exact
status as `bridge_status` (jobs/hbridge.py); Bridge's own endpoints (/v1/task, /v1/tasks, events) use Bridge's."""

from typing import Literal

from django.conf import settings
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import Field, NinjaAPI, Query, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security.base import AuthBase
from ninja.utils import check_csrf
from pydantic import ConfigDict

from jobs import actions, auth, hbridge
from jobs.errors import BridgeError, DatabaseBusy, InvalidInput, is_database_busy
from jobs.models import PermissionRequest, Task
from jobs.vocabulary import Status


class TokenOrSession(AuthBase):
    """Bearer token, HTTP Basic with the token as password, or a logged-in browser session (CSRF-checked)."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> str | None:
        who = auth.authenticate(request)
        unsafe = request.method not in ("GET", "HEAD", "OPTIONS")
        if who and who.startswith("user:") and unsafe and check_csrf(request) is not None:
            return None
        return who


api = NinjaAPI(
    title="Bridge",
    version="1",
    description="Hand work to a coding agent, follow it live, answer its permission questions, collect the evidence.",
    auth=TokenOrSession(),
    docs_decorator=auth.token_or_login_required,
    urls_namespace="bridge-api",
)


def error_response(request: HttpRequest, exc: BridgeError) -> HttpResponse:
    """The REST API's one error shape: {"error": message, "code": code, …detail}, with the refusal's status."""
    return api.create_response(request, exc.as_dict(), status=exc.http_status)


@api.exception_handler(BridgeError)
def on_bridge_error(request: HttpRequest, exc: BridgeError) -> HttpResponse:
    return error_response(request, exc)


@api.exception_handler(OperationalError)
def on_database_error(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    """A database too busy to answer in time is a 503 with Retry-After, the body jobs/middleware.py gives elsewhere;
    any other database failure stays an internal error."""
    if not is_database_busy(exc):
        raise exc
    busy = DatabaseBusy(settings.BRIDGE_DB_RETRY_AFTER_S)
    response = error_response(request, busy)
    response["Retry-After"] = str(busy.retry_after_s)
    return response


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return auth.unauthorized()


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    message, code = str(exc), "bad_request"
    if message == "Cannot parse request body":
        message, code = "the request body is not valid JSON", "invalid_json"
    return error_response(request, BridgeError(message, code=code, http_status=exc.status_code))


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    problems = []
    for err in exc.errors:
        where = ".".join(str(part) for part in err.get("loc", ()) if part not in ("body", "payload", "query"))
        problems.append(f"{where or 'request'}: {err.get('msg', 'invalid')}")
    message = "invalid request: " + "; ".join(problems)
    return error_response(request, InvalidInput(message, code="invalid_request", http_status=422, detail=exc.errors))


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


class CreateTaskIn(Strict):
    prompt: str = Field(description="What the agent should do: self-contained, with absolute paths.")
    cwd: str | None = Field(
        None, description="Working directory; inside BRIDGE_ALLOWED_ROOTS or the roots a live supervisor serves."
    )
    agent: str = Field("claude", description="The executor.")
    permission_mode: Literal["approve", "bypass"] = "approve"
    skip_permissions: bool = False
    sessionId: str | None = Field(None, description="An agent session to continue (Claude's --resume).")
    model: str | None = None
    max_turns: int | None = Field(None, ge=1, le=10_000)
    allowed_tools: list[str] | None = None
    skills: list[str] | None = Field(None, description="Hermes skills to preload (one-shot mode).")
    toolsets: list[str] | None = Field(None, description="Hermes toolsets to enable (one-shot mode).")
    timeout_s: int | None = Field(None, ge=1, description="Wall-time limit; default BRIDGE_TASK_TIMEOUT_S.")
    taskTimeoutMs: int | None = Field(
        None, ge=0, description="hbridge's limit in milliseconds (rounded up to seconds); 0 = the server's default."
    )
    target: str | None = Field(
        None, description="Run only on the supervisor with this name, host or label (GET /v1/workers); default: any."
    )


class CreateTaskOut(Schema):
    task_id: str
    status: str = Field(description='hbridge\'s word: always "created".')
    bridge_status: str = Field(description="Bridge's status: queued, or cancelled when it ended at once.")


class TaskIdIn(Strict):
    task_id: str
    reason: str = ""


class PermissionIn(Strict):
    task_id: str
    behavior: Literal["allow", "deny"]
    request_id: str | None = None
    updatedInput: dict | None = None
    message: str = ""


def usage_of(task: Task) -> dict:
    return {
        "total_cost_usd": task.cost_usd,
        "input_tokens": task.input_tokens,
        "output_tokens": task.output_tokens,
        "cache_creation_input_tokens": task.cache_creation_input_tokens,
        "cache_read_input_tokens": task.cache_read_input_tokens,
    }


def task_summary(task: Task) -> dict:
    return {
        "id": str(task.public_id),
        "agent": task.agent,
        "status": task.status,
        "cwd": task.cwd,
        "prompt": task.prompt[:200],
        "created_at": task.created_at,
        "started_at": task.started_at,
        "finished_at": task.finished_at,
        "exitCode": task.exit_code,
        "usage": usage_of(task),
        "num_turns": task.num_turns,
        "source": task.source,
        "target": task.target,
        "wait_reason": task.wait_reason,
    }


def permission_out(perm: PermissionRequest) -> dict:
    return {
        "task_id": str(perm.task.public_id),
        **actions.permission_data(perm),
        "suggestions": perm.suggestions,
        "created_at": perm.created_at,
        "decided_at": perm.decided_at,
    }


@api.post("/task/create", response=CreateTaskOut, summary="Queue a task for an agent")
def create_task(request: HttpRequest, payload: CreateTaskIn):
    options = {
        "model": payload.model,
        "max_turns": payload.max_turns,
        "allowed_tools": payload.allowed_tools,
        "skills": payload.skills,
        "toolsets": payload.toolsets,
    }
    task = actions.create_task(
        actions.TaskSpec(
            prompt=payload.prompt,
            cwd=payload.cwd,
            agent=payload.agent,
            permission_mode=payload.permission_mode,
            skip_permissions=payload.skip_permissions,
            resume_session_id=payload.sessionId,
            timeout_s=hbridge.timeout_seconds(payload.timeout_s, payload.taskTimeoutMs),
            options=options,
            source="api",
            created_by=request.auth,
            target=payload.target or "",
        )
    )
    return hbridge.created_reply(str(task.public_id), task.status)


@api.post("/task/cancel", summary="Cancel a queued or running task")
def cancel_task(request: HttpRequest, payload: TaskIdIn):
    task = actions.request_cancel(actions.get_task(payload.task_id), reason=payload.reason, by=request.auth)
    return {"task_id": str(task.public_id), **hbridge.status_fields(task.status, task.error), "cancel_requested": True}


@api.post("/task/permission", summary="Answer a pending permission request")
def decide_permission(request: HttpRequest, payload: PermissionIn):
    task = actions.get_task(payload.task_id)
    perm = actions.decide_permission(
        task,
        behavior=payload.behavior,
        request_id=payload.request_id,
        updated_input=payload.updatedInput,
        message=payload.message,
        by=request.auth,
        via="api",
    )
    return {"ok": True, **permission_out(perm)}


@api.get("/task/output", summary="The result, when there is one (hbridge shape)")
def task_output(request: HttpRequest, task_id: str):
    task = actions.get_task(task_id)
    return {
        "retrieval_status": "success" if task.is_terminal else "pending",
        "task": {
            "id": str(task.public_id),
            **hbridge.status_fields(task.status, task.error),
            "result": task.result,
            "error": task.error,
            "exitCode": task.exit_code,
            "usage": usage_of(task),
        },
    }


@api.get("/task", summary="Everything about one task")
def task_detail(request: HttpRequest, task_id: str):
    task = actions.get_task(task_id)
    return {
        **task_summary(task),
        "prompt": task.prompt,
        "permission_mode": task.permission_mode,
        "options": task.options,
        "timeout_s": task.timeout_s,
        "result": task.result,
        "error": task.error,
        "stderr_tail": task.stderr_tail,
        "pid": task.pid,
        "worker": task.worker.name if task.worker_id else None,
        "session_id": task.session.session_id if task.session else None,
        "resume_session_id": task.resume_session_id or None,
        "created_by": task.created_by,
        "cancel_requested": task.cancel_requested_at is not None,
        "last_seq": task.last_seq,
        "pending_permissions": [permission_out(p) for p in actions.pending_permissions(task)],
    }


class TaskFilter(Schema):
    status: Literal[tuple(s.value for s in Status)] | None = None  # type: ignore[valid-type]
    agent: str | None = None
    cwd: str | None = None
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


@api.get("/tasks", summary="List tasks, newest first")
def list_tasks(request: HttpRequest, filters: Query[TaskFilter]):
    actions.settle_running_tasks()
    tasks = Task.objects.newest_first()
    for name in ("status", "agent", "cwd"):
        value = getattr(filters, name)
        if value:
            tasks = tasks.filter(**{name: value})
    page = tasks[filters.offset : filters.offset + filters.limit]
    return {"count": tasks.count(), "tasks": [task_summary(t) for t in page]}


@api.get("/workers", summary="Live supervisors: what each serves, its labels, and what it runs")
def list_workers(request: HttpRequest):
    running = actions.running_by_worker()
    return {"workers": [actions.worker_data(w, running, private=True) for w in actions.live_supervisors()]}


@api.get("/permissions", summary="Pending permission requests, oldest first")
def list_permissions(request: HttpRequest, task_id: str | None = None):
    task = actions.get_task(task_id) if task_id else None
    return {"permissions": [permission_out(p) for p in actions.pending_permissions(task)]}


@api.get("/task/events", summary="The transcript after a given seq")
def task_events(
    request: HttpRequest, task_id: str, since: int = Query(0, ge=0), limit: int = Query(500, ge=1, le=5000)
):
    task = actions.get_task(task_id)
    events = actions.events_since(task, since, limit)
    return {
        "task_id": str(task.public_id),
        "status": task.status,
        "last_seq": task.last_seq,
        "events": [actions.event_data(e) for e in events],
    }
