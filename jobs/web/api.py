"""The REST API: hbridge's paths and JSON shapes (so existing Hermes skills keep working), over jobs.actions.

Every reply about one task (create, cancel, /v1/task/output, /v1/task) gives its status in hbridge's words with
Bridge's exact status as `bridge_status` (jobs/web/hbridge.py), so a client that polls any of them until `done` or
`failed` comes to an end; Bridge's own lists and transcripts (/v1/tasks, /v1/task/events) use Bridge's words."""

import logging
from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field, NinjaAPI, Path, Query, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.responses import Status as Answer
from ninja.security.base import AuthBase
from ninja.utils import check_csrf
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

from jobs import actions
from jobs.actions import tokens
from jobs.actions.rules import MAX_RULE_CHARS, MAX_RULE_MESSAGE_CHARS
from jobs.actions.tasks import (
    MAX_ADD_DIRS,
    MAX_ARGV_CHARS,
    MAX_LIST_ENTRIES,
    MAX_SYSTEM_PROMPT_CHARS,
    PERMISSION_MODES,
)
from jobs.core.access import Caller, Scope
from jobs.core.errors import BridgeError, ErrorCode, InvalidInput
from jobs.core.inputs import MAX_INT, MAX_PATH_BYTES, check_text
from jobs.core.resilience import temporary_refusal
from jobs.core.vocabulary import TOKEN_FIELDS, Status
from jobs.models import PermissionRequest, Task
from jobs.web import auth, hbridge
from jobs.web.middleware import internal_error, too_large
from jobs.web.watching import follow_transcript

log = logging.getLogger(__name__)
AGENT_NAME_CHARS = 20  # the agent columns' width (jobs/agents/registry.py NAME_RE)
AGENT_WORDS = (
    "claude, hermes, a preset ACP agent (gemini, qwen, opencode, codex, claude-acp) or one declared in "
    "BRIDGE_AGENTS_FILE; GET /v1/agents lists them"
)
MAX_TASK_ID_CHARS = 64  # a UUID, also in braces or as urn:uuid:…, with room for spaces around it


class TokenOrSession(AuthBase):
    """Bearer token, HTTP Basic with the token as password, or a logged-in browser session (CSRF-checked), holding
    the scope the operation needs: the REST API's one place for who may call what. A caller without it is refused
    (403 scope_missing) before its request is read."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __init__(self, needs: Scope) -> None:
        super().__init__()
        self.needs = needs

    def __call__(self, request: HttpRequest) -> Caller | None:
        who = auth.authenticate(request)
        unsafe = request.method not in ("GET", "HEAD", "OPTIONS")
        if who is None or (who.name.startswith("user:") and unsafe and check_csrf(request) is not None):
            return None
        tokens.require_scope(who, self.needs)
        return who


NEEDS_READ = TokenOrSession(Scope.READ)
NEEDS_RUN = TokenOrSession(Scope.RUN)
NEEDS_DECIDE = TokenOrSession(Scope.DECIDE)


def caller(request: HttpRequest) -> Caller:
    """Who is calling a view: the caller TokenOrSession returned, which django-ninja sets as `request.auth`."""
    return request.auth  # type: ignore[attr-defined]  # ninja sets request.auth


def seen_task(request: HttpRequest, task_id: str) -> Task:
    """The task with this id, if the caller may see it (a token limited to roots sees only tasks under them)."""
    return tokens.check_sees(caller(request), actions.get_task(task_id))


api = NinjaAPI(
    title="Bridge",
    version="1",
    description="Hand work to a coding agent, follow it live, answer its permission questions, collect the evidence.",
    auth=NEEDS_DECIDE,  # an operation that names no scope of its own needs the most
    docs_decorator=auth.token_or_login_required,
    urls_namespace="bridge-api",
)


def query_names(view: Callable) -> set[str]:
    """The query parameters a view takes: its plain arguments, and the fields of a `Query[Model]` one (a model
    argument without Query is the JSON body, not the query)."""
    names: set[str] = set()
    for name, hint in get_type_hints(view, include_extras=True).items():
        if name in ("request", "return"):
            continue
        query_model = get_origin(hint) is Annotated and isinstance(get_args(hint)[0], type)
        model = get_args(hint)[0] if query_model else hint
        if isinstance(model, type) and issubclass(model, BaseModel):
            names |= set(model.model_fields) if query_model else set()
        else:
            names.add(name)
    return names


def refuse_odd_query(view: Callable) -> Callable:
    """One rule on every interface: an argument Bridge does not know is refused, not ignored (bodies forbid extra
    fields and MCP tools unknown arguments), so a misspelt `?taskid=` cannot silently list everything; and each
    parameter takes one value (`?cwd=a&cwd=b` would otherwise mean only its last)."""
    known = query_names(view)

    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        unknown = sorted(set(request.GET) - known)
        repeated = sorted(name for name in set(request.GET) & known if len(request.GET.getlist(name)) > 1)
        if unknown or repeated:
            problem = (
                f"unknown query parameter {', '.join(repr(n[:50]) for n in unknown[:5])}; this operation takes "
                f"{', '.join(sorted(known)) or 'none'}"
                if unknown
                else f"query parameter {', '.join(map(repr, repeated))} given more than once; each takes one value"
            )
            raise InvalidInput(f"invalid request: {problem}", code=ErrorCode.INVALID_REQUEST, http_status=422)
        return view(request, *args, **kwargs)

    return checked


api.add_decorator(refuse_odd_query)


def error_response(request: HttpRequest, exc: BridgeError) -> HttpResponse:
    """The REST API's one error shape: {"error": message, "code": code, …detail}, with the refusal's status."""
    return api.create_response(request, exc.as_dict(), status=exc.http_status)


@api.exception_handler(BridgeError)
def on_bridge_error(request: HttpRequest, exc: BridgeError) -> HttpResponse:
    return error_response(request, exc)


@api.exception_handler(Exception)
def on_unexpected_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Anything else is a bug: logged with its traceback, answered in the API's shape (never Django's HTML page)."""
    log.error("internal error answering %s %s", request.method, request.path, exc_info=exc)
    return internal_error()


@api.exception_handler(SuspiciousOperation)
def on_unreadable_request(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413; too many fields and the like, a 400."""
    if isinstance(exc, RequestDataTooBig):
        return too_large()
    return error_response(request, InvalidInput(f"the request cannot be read: {exc}", code=ErrorCode.BAD_REQUEST))


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, BridgeError(str(exc) or "not found", code=ErrorCode.NOT_FOUND, http_status=404))


@api.exception_handler(OperationalError)
def on_database_error(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    """A database too busy to answer in time, or whose disk is full, is a 503 with Retry-After, the body
    jobs/web/middleware.py gives elsewhere; any other database failure is an internal error."""
    refusal = temporary_refusal(exc)
    if refusal is None:
        return on_unexpected_error(request, exc)
    response = error_response(request, refusal)
    response["Retry-After"] = str(refusal.retry_after_s)
    return response


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return auth.unauthorized(auth.refusal_of(request))


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    message, code = str(exc), ErrorCode.BAD_REQUEST
    if message == "Cannot parse request body":
        message, code = "the request body is not valid JSON", ErrorCode.INVALID_JSON
    return error_response(request, BridgeError(message, code=code, http_status=exc.status_code))


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    problems, detail = [], []
    for err in exc.errors:
        loc = [str(part) for part in err.get("loc", ())]
        where = ".".join(part for part in loc if part not in ("body", "payload", "query", "filters"))
        problems.append(f"{where or 'request'}: {err.get('msg', 'invalid')}")
        detail.append({"type": str(err.get("type", "")), "loc": loc, "msg": str(err.get("msg", ""))})
    message = "invalid request: " + "; ".join(problems)
    return error_response(
        request, InvalidInput(message, code=ErrorCode.INVALID_REQUEST, http_status=422, detail=detail)
    )


class ErrorOut(Schema):
    """Every refusal and failure: what happened and what to do (`error`), a stable `code`, and what it is about."""

    model_config = ConfigDict(extra="allow")
    error: str = Field(description="For people: what was wrong, why, and what to do.")
    code: ErrorCode = Field(description="For programs: a stable code (the README's table says what each means).")


# The answers each kind of operation can give besides 200 (all in ErrorOut's shape): 400 a value Bridge refuses,
# 401 no or a wrong token, 403 a token without the scope or outside its roots, 422 a request the schema refuses,
# 500 a bug (logged), 503 a busy database (Retry-After); reads of one task add 404; bodies add 413 (over
# DATA_UPLOAD_MAX_MEMORY_SIZE).
COMMON_ERRORS = {400, 401, 403, 422, 500, 503}
READ_ONE = COMMON_ERRORS | {404}
WRITE_ONE = READ_ONE | {409, 413}
CREATE = COMMON_ERRORS | {404, 409, 413, 429}


def answers(ok: Any, errors: set[int]) -> dict:
    """A `response=` mapping: the success schema for 200, ErrorOut for every error status the operation can give."""
    return {200: ok, **{status: ErrorOut for status in sorted(errors)}}


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


NameList = list[Annotated[StrictStr, Field(max_length=MAX_ARGV_CHARS)]] | None


class CreateTaskIn(Strict):
    prompt: StrictStr = Field(
        min_length=1,
        max_length=settings.BRIDGE_MAX_PROMPT_BYTES,
        description="What the agent should do: self-contained, with absolute paths. Not blank, at most "
        "BRIDGE_MAX_PROMPT_BYTES bytes as UTF-8, no NUL characters.",
    )
    cwd: StrictStr | None = Field(
        None,
        max_length=MAX_PATH_BYTES,
        description="Working directory (absolute); inside BRIDGE_ALLOWED_ROOTS or the roots a live supervisor serves.",
    )
    agent: StrictStr = Field("claude", max_length=AGENT_NAME_CHARS, description=f"The executor: {AGENT_WORDS}.")
    permission_mode: Literal[PERMISSION_MODES] = Field(  # type: ignore[valid-type]
        "approve",
        description="approve: every tool call the agent asks about waits for a decision; bypass: Bridge allows "
        "them all (recorded). Claude Code's own, for claude tasks: acceptEdits (Claude accepts file edits itself, "
        "the rest wait as in approve), plan (Claude plans; what it would change waits as in approve).",
    )
    skip_permissions: StrictBool = False
    sessionId: StrictStr | None = Field(
        None, max_length=MAX_ARGV_CHARS, description="An agent session to continue (Claude's --resume)."
    )
    model: StrictStr | None = Field(None, max_length=MAX_ARGV_CHARS)
    max_turns: StrictInt | None = Field(None, ge=1, le=actions.MAX_TURNS)
    allowed_tools: NameList = Field(None, max_length=MAX_LIST_ENTRIES)
    disallowed_tools: NameList = Field(
        None, max_length=MAX_LIST_ENTRIES, description='Claude Code tools to deny, e.g. "Bash(git push:*)", "WebFetch".'
    )
    append_system_prompt: StrictStr | None = Field(
        None, max_length=MAX_SYSTEM_PROMPT_CHARS, description="Text added to the end of Claude Code's system prompt."
    )
    add_dirs: list[Annotated[StrictStr, Field(max_length=MAX_PATH_BYTES)]] | None = Field(
        None,
        max_length=MAX_ADD_DIRS,
        description="More directories Claude Code may work in besides cwd (absolute; each confined as cwd is).",
    )
    skills: NameList = Field(None, max_length=MAX_LIST_ENTRIES, description="Hermes skills to preload (one-shot).")
    toolsets: NameList = Field(None, max_length=MAX_LIST_ENTRIES, description="Hermes toolsets to enable (one-shot).")
    timeout_s: StrictInt | None = Field(
        None, ge=1, le=actions.MAX_TIMEOUT_S, description="Wall-time limit; default BRIDGE_TASK_TIMEOUT_S."
    )
    permission_timeout_s: StrictInt | None = Field(
        None,
        ge=1,
        le=actions.MAX_PERMISSION_TIMEOUT_S,
        description="How long each permission request waits for a decision before it is denied; default "
        "BRIDGE_PERMISSION_TIMEOUT_S.",
    )
    taskTimeoutMs: StrictInt | None = Field(
        None,
        ge=0,
        le=actions.MAX_TIMEOUT_S * 1000,
        description="hbridge's limit in milliseconds (rounded up to seconds); 0 = the server's default.",
    )
    target: StrictStr | None = Field(
        None,
        max_length=MAX_ARGV_CHARS,
        description="Run only on the supervisor with this name, host or label (GET /v1/workers); default: any; a "
        "follow-up of a session Bridge ran defaults to the supervisor that ran it.",
    )
    isolation: Literal["worktree", "none"] | None = Field(
        None,
        description="worktree: the agent works in a git worktree of its own, on a branch bridge/<id>, to merge or "
        "discard afterwards (POST /v1/task/merge, /v1/task/discard); the cwd must be in a git repository. none: in "
        "the cwd itself. Default: worktree under BRIDGE_WORKTREE_ROOTS, else none. A follow-up runs in its session's.",
    )
    base: StrictStr | None = Field(
        None, max_length=MAX_ARGV_CHARS, description="worktree only: the branch, tag or commit it starts from (HEAD)."
    )


class CreateTaskOut(Schema):
    task_id: str
    status: str = Field(description='hbridge\'s word: always "created".')
    bridge_status: str = Field(description="Bridge's status: queued, or cancelled when it ended at once.")
    wait_reason: str = Field(
        "",
        description="Why it cannot start yet, other than the queue ahead of it (e.g. no live supervisor can run its "
        'agent: what stops each, and the fix); "" when nothing holds it back.',
    )
    worktree: dict | None = Field(None, description="An isolated task's worktree (its state, branch, path once made).")
    note: str = Field("", description="What the planner should know, e.g. uncommitted changes not in the worktree.")


TaskId = Annotated[
    StrictStr,
    Field(min_length=1, max_length=MAX_TASK_ID_CHARS, description="The task_id a create answered with (a UUID)."),
]


class TaskIdIn(Strict):
    task_id: TaskId
    reason: StrictStr = Field("", max_length=actions.MAX_REASON_CHARS)


class PermissionIn(Strict):
    task_id: TaskId
    behavior: Literal["allow", "deny"]
    request_id: StrictStr | None = Field(None, max_length=200)
    updatedInput: dict[str, Any] | None = Field(
        None,
        description=f"allow only: the tool's input to use instead (at most {actions.MAX_UPDATED_INPUT_BYTES} "
        "bytes as JSON).",
    )
    message: StrictStr = Field("", max_length=actions.MAX_MESSAGE_CHARS)
    remember: Literal["task", "session", "project", "always"] | None = Field(
        None,
        description="Also make the rule that answers the next identical request the same way, for this task, its "
        "agent session, its project (the task's cwd and everything under it) or everywhere. The answer's "
        "`remembered` lists the rules made.",
    )
    rule: StrictStr | None = Field(
        None,
        max_length=MAX_RULE_CHARS,
        description="With remember: the rule to make instead of the exact one Bridge writes, such as one of the "
        "request's `suggested_rules`; it must decide this request the same way.",
    )


def usage_of(task: Task) -> dict:
    return {"total_cost_usd": task.cost_usd, **{field: getattr(task, field) for field in TOKEN_FIELDS}}


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


@api.post("/task/create", auth=NEEDS_RUN, response=answers(CreateTaskOut, CREATE), summary="Queue a task for an agent")
def create_task(request: HttpRequest, payload: CreateTaskIn):
    options = {
        "model": payload.model,
        "max_turns": payload.max_turns,
        "allowed_tools": payload.allowed_tools,
        "disallowed_tools": payload.disallowed_tools,
        "append_system_prompt": payload.append_system_prompt,
        "add_dirs": payload.add_dirs,
        "skills": payload.skills,
        "toolsets": payload.toolsets,
    }
    spec = actions.TaskSpec(
        prompt=payload.prompt,
        cwd=payload.cwd,
        agent=payload.agent,
        permission_mode=payload.permission_mode,
        skip_permissions=payload.skip_permissions,
        resume_session_id=payload.sessionId,
        timeout_s=hbridge.timeout_seconds(payload.timeout_s, payload.taskTimeoutMs),
        permission_timeout_s=payload.permission_timeout_s,
        options=options,
        source="api",
        created_by=caller(request).name,
        target=payload.target or "",
        isolation=payload.isolation or "",
        base=payload.base or "",
    )
    tokens.check_creates(caller(request), spec)
    task = actions.create_task(spec)
    return hbridge.created_reply(str(task.public_id), task.status) | {
        "wait_reason": task.wait_reason,
        "worktree": actions.worktree_data(task.worktree),
        "note": actions.left_out_note(task),
    }


@api.post("/task/cancel", auth=NEEDS_RUN, response=answers(dict, WRITE_ONE), summary="Cancel a queued or running task")
def cancel_task(request: HttpRequest, payload: TaskIdIn):
    task = actions.request_cancel(seen_task(request, payload.task_id), reason=payload.reason, by=caller(request).name)
    return {"task_id": str(task.public_id), **hbridge.status_fields(task.status, task.error), "cancel_requested": True}


@api.post(
    "/task/permission",
    auth=NEEDS_DECIDE,
    response=answers(dict, WRITE_ONE),
    summary="Answer a pending permission request",
)
def decide_permission(request: HttpRequest, payload: PermissionIn):
    task = seen_task(request, payload.task_id)
    perm = actions.decide_permission(
        task,
        behavior=payload.behavior,
        request_id=payload.request_id,
        updated_input=payload.updatedInput,
        message=payload.message,
        by=caller(request).name,
        via="api",
        remember=payload.remember,
        rule=payload.rule,
        caller=caller(request),
    )
    remembered = [actions.rule_data(rule) for rule in perm.remembered_as.all()]
    return {"ok": True, **permission_out(perm), "remembered": remembered}


@api.get(
    "/task/output",
    auth=NEEDS_READ,
    response=answers(dict, READ_ONE),
    summary="The result, when there is one (hbridge shape)",
)
def task_output(request: HttpRequest, task_id: str = Query(..., min_length=1, max_length=MAX_TASK_ID_CHARS)):
    task = seen_task(request, task_id)
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


class TaskDetailOut(BaseModel):
    """Everything about one task: its status in hbridge's words, as on every reply about one task, and in Bridge's."""

    model_config = ConfigDict(extra="allow")  # a pydantic model (a ninja Schema drops what it does not name)
    id: str = Field(description="The task's id (the task_id create answered with).")
    status: Literal[hbridge.TASK_WORDS] = Field(  # type: ignore[valid-type]
        description="hbridge's word: running (queued or running), done, or failed (every other end: failed, "
        "cancelled, timeout, orphaned; `reason` then says why). Poll until done or failed."
    )
    bridge_status: Literal[tuple(s.value for s in Status)] = Field(  # type: ignore[valid-type]
        description="Bridge's exact status."
    )


@api.get("/task", auth=NEEDS_READ, response=answers(TaskDetailOut, READ_ONE), summary="Everything about one task")
def task_detail(request: HttpRequest, task_id: str = Query(..., min_length=1, max_length=MAX_TASK_ID_CHARS)):
    task = seen_task(request, task_id)
    return {
        **task_summary(task),
        **hbridge.status_fields(task.status, task.error),
        "prompt": task.prompt,
        "permission_mode": task.permission_mode,
        "options": task.options,
        "timeout_s": task.timeout_s,
        "permission_timeout_s": actions.permission_timeout(task),
        "result": task.result,
        "error": task.error,
        "stderr_tail": task.stderr_tail,
        "pid": task.pid,
        "worker": task.worker.name if task.worker else None,
        "session_id": task.session.session_id if task.session else None,
        "resume_session_id": task.resume_session_id or None,
        "created_by": task.created_by,
        "cancel_requested": task.cancel_requested_at is not None,
        "last_seq": task.last_seq,
        "pending_permissions": [permission_out(p) for p in actions.pending_permissions(task)],
        "worktree": actions.worktree_data(task.worktree),
    }


class TaskFilter(Schema):
    status: Literal[tuple(s.value for s in Status)] | None = None  # type: ignore[valid-type]
    agent: str | None = Field(None, max_length=AGENT_NAME_CHARS)
    cwd: str | None = Field(None, min_length=1, max_length=MAX_PATH_BYTES, description="Only tasks in this directory.")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=MAX_INT)


@api.get("/agents", auth=NEEDS_READ, response=answers(dict, COMMON_ERRORS), summary="The agents Bridge can run")
def list_agents(request: HttpRequest):
    """Each executor by name (what `agent` takes): its protocol, where it comes from (built-in, preset, or the agents
    file), the options and permission modes it takes, its limits, and its readiness as health reports it."""
    return {"agents": actions.agents_data(actions.live_supervisors())}


@api.get("/tasks", auth=NEEDS_READ, response=answers(dict, COMMON_ERRORS), summary="List tasks, newest first")
def list_tasks(request: HttpRequest, filters: Query[TaskFilter]):
    actions.settle_running_tasks()
    tasks = tokens.seen_tasks(caller(request), Task.objects.newest_first())
    for name in ("status", "agent", "cwd"):
        value = getattr(filters, name)
        if value:
            tasks = tasks.filter(**{name: check_text(name, value)})
    page = tasks[filters.offset : filters.offset + filters.limit]
    return {"count": tasks.count(), "tasks": [task_summary(t) for t in page]}


@api.get(
    "/workers",
    auth=NEEDS_READ,
    response=answers(dict, COMMON_ERRORS),
    summary="Live supervisors: what each serves, its labels, and what it runs",
)
def list_workers(request: HttpRequest):
    running = actions.running_by_worker()
    return {"workers": [actions.worker_data(w, running, private=True) for w in actions.live_supervisors()]}


@api.get(
    "/permissions",
    auth=NEEDS_READ,
    response=answers(dict, READ_ONE),
    summary="Pending permission requests, oldest first",
)
def list_permissions(
    request: HttpRequest, task_id: str | None = Query(None, min_length=1, max_length=MAX_TASK_ID_CHARS)
):
    task = seen_task(request, task_id) if task_id else None
    pending = tokens.seen_permissions(caller(request), actions.pending_permissions(task))
    return {"permissions": [permission_out(p) for p in pending]}


@api.get("/task/events", auth=NEEDS_READ, response=answers(dict, READ_ONE), summary="The transcript after a given seq")
def task_events(
    request: HttpRequest,
    task_id: str = Query(..., min_length=1, max_length=MAX_TASK_ID_CHARS),
    since: int = Query(0, ge=0, le=MAX_INT, description="The last seq you saw (0: from the start)."),
    limit: int = Query(500, ge=1, le=5000),
):
    task = seen_task(request, task_id)
    events = actions.events_since(task, since, limit)
    return {
        "task_id": str(task.public_id),
        "status": task.status,
        "last_seq": task.last_seq,
        "events": [actions.event_data(e) for e in events],
    }


# One line of GET /v1/task/transcript's answer: a row of the task's raw transcript, a line of the agent's or, in place
# of lines not kept, a note.
TRANSCRIPT_ROW = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 1, "description": "From 1 without a gap; resume with after=<the last n>."},
        "line": {
            "type": "string",
            "description": "A line the agent wrote on stdout, without its newline, as text. Claude Code's and Hermes "
            "ACP's lines are JSON as the CLI printed them: parse this string to get the object.",
        },
        "base64": {"type": "string", "description": "The line's exact bytes, only when they are not UTF-8."},
        "cut": {"type": "string", "description": "Why only the line's start is kept (over BRIDGE_MAX_LINE_BYTES)."},
        "omitted": {"type": "string", "description": "Why the lines this row stands for were not kept."},
        "lines": {"type": "integer", "minimum": 1, "description": "How many of the agent's lines were not kept."},
        "bytes": {"type": "integer", "description": "A cut line's whole size, or the omitted lines' (newlines in)."},
    },
    "oneOf": [{"required": ["n", "line"]}, {"required": ["n", "omitted", "lines", "bytes"]}],
}
TRANSCRIPT_LINES = {
    "description": "NDJSON, one object a line: every row after `after` in order, then, while the task is queued or "
    "running, each row as it is written; the answer ends once the task has ended and every row is sent.",
    "content": {"application/x-ndjson": {"schema": TRANSCRIPT_ROW}},
}


@api.get(
    "/task/transcript",
    auth=NEEDS_READ,
    response={status: ErrorOut for status in sorted(READ_ONE)},
    summary="The agent's raw stdout, line by line (NDJSON), followed until the task ends",
    openapi_extra={"responses": {"200": TRANSCRIPT_LINES}},
)
def task_transcript(
    request: HttpRequest,
    task_id: str = Query(..., min_length=1, max_length=MAX_TASK_ID_CHARS),
    after: int = Query(0, ge=0, le=MAX_INT, description="The last n you saw (0: from the start)."),
) -> StreamingHttpResponse:
    """What hbridge kept in ~/.hbridge_transcript.jsonl, per task. Refusals are JSON errors before the stream starts;
    the stream itself runs on the event loop, holding no thread (jobs/web/watching.py `follow_transcript`)."""
    task = seen_task(request, task_id)
    response = StreamingHttpResponse(follow_transcript(task, after), content_type="application/x-ndjson")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


class FileChangeOut(Schema):
    path: str = Field(description="Relative to the task's working directory, with forward slashes.")
    status: Literal["added", "modified", "deleted", "renamed"]
    added: int = Field(description="Lines added (0 for a binary file).")
    removed: int = Field(description="Lines removed (0 for a binary file).")
    binary: bool
    old_path: str = Field("", description="Renamed: where it was.")


class ChangesOut(Schema):
    task_id: str
    state: Literal["none", "pending", "recorded", "unavailable"] = Field(
        description="none: no snapshot was taken (the agent has not started, or never did); pending: taken, the task "
        "has not ended; recorded; unavailable: nothing could be recorded (see reason)."
    )
    kind: str = Field(description="How: git (a tree of the working state) or manifest (outside git).")
    base: str = Field(description="git: the id of the tree the changes are against.")
    files: list[FileChangeOut] = Field(description="At most BRIDGE_CHANGES_MAX_FILES, sorted by path.")
    patch: str = Field(description="The unified diff of the text files, at most BRIDGE_CHANGES_MAX_BYTES.")
    truncated: bool
    left_out: str = Field(description="What the limits left out, in words; empty when nothing was.")
    reason: str = Field(description="Why nothing is (or not yet) recorded; empty when it is.")
    files_changed: int = Field(description="All the files changed, those past the list too.")
    lines_added: int
    lines_removed: int
    recorded_at: str | None


@api.get("/task/changes", auth=NEEDS_READ, response=answers(ChangesOut, READ_ONE), summary="What the task changed")
def task_changes(request: HttpRequest, task_id: str = Query(..., min_length=1, max_length=MAX_TASK_ID_CHARS)):
    """The files the task added, modified, deleted or renamed in its working directory, and their patch, compared
    with the snapshot taken as its agent started."""
    return actions.changes_data(seen_task(request, task_id))


class MergeIn(Strict):
    task_id: TaskId
    strategy: Literal["merge", "squash"] = Field(
        "merge", description="merge: a merge commit on the base branch; squash: the task's work as one commit."
    )
    message: StrictStr = Field(
        "",
        max_length=MAX_SYSTEM_PROMPT_CHARS,
        description="The commit message (default: the prompt's first line and the task id).",
    )


class WorktreeOut(Schema):
    task_id: str
    worktree: dict


# 200: done; 202: asked of the supervisor on the worktree's host, which has not finished within 30 s (it goes on:
# `GET /v1/task` shows `worktree.requested` until it has, then the state, or `worktree.refused` and why).
REVIEWED = {**answers(WorktreeOut, WRITE_ONE), 202: WorktreeOut}


def reviewed(task: Task, review: actions.Review) -> Answer:
    """A merge's or discard's answer: done, or still pending on the worktree's host."""
    return Answer(200 if review.done else 202, {"task_id": str(task.public_id), "worktree": review.worktree})


@api.post("/task/merge", auth=NEEDS_RUN, response=REVIEWED, summary="Land an isolated task's work")
def merge_task(request: HttpRequest, payload: MergeIn):
    """Commit the task's worktree on its branch and land it on the base branch; the worktree and branch are then
    removed. A conflict (409 merge_conflict) or a base checkout with changes the merge would overwrite (409
    checkout_not_clean) names the files, and nothing anywhere is changed. A worktree on another host is merged by a
    supervisor there (409 worktree_elsewhere when none runs); 202 when it has not finished within 30 s."""
    task = seen_task(request, payload.task_id)
    by = caller(request).name
    return reviewed(task, actions.merge_worktree(task, payload.strategy, payload.message, by=by))


@api.post("/task/discard", auth=NEEDS_RUN, response=REVIEWED, summary="Throw away an isolated task's work")
def discard_task(request: HttpRequest, payload: TaskIdIn):
    """Remove the task's worktree and its branch (on another host, by a supervisor there, as for a merge)."""
    task = seen_task(request, payload.task_id)
    return reviewed(task, actions.discard_worktree(task, by=caller(request).name))


# --- permission rules ----------------------------------------------------------------------------------------------


# Which tasks a rule or a webhook is for (jobs/web/webhooks_api.py uses them too).
TaskRoot = Annotated[
    StrictStr,
    Field(
        max_length=MAX_PATH_BYTES,
        description="Only tasks whose cwd is this directory or under it (inside the allowed roots); empty: every task.",
    ),
]
TaskAgent = Annotated[
    StrictStr, Field(max_length=AGENT_NAME_CHARS, description=f"Only this agent's tasks ({AGENT_WORDS}); empty: any.")
]
TaskCreator = Annotated[
    StrictStr,
    Field(
        max_length=200,
        description="Only tasks made by this token or user, as tasks name them ('token:ci', 'user:alice'); empty: "
        "anyone's.",
    ),
]


class RuleIn(Strict):
    rule: StrictStr = Field(
        min_length=1,
        max_length=MAX_RULE_CHARS,
        description="A pattern in Claude Code's permission-rule syntax: Bash, Bash(git status), Bash(npm run test:*), "
        "Read(src/**), Edit(docs/*.md), WebFetch(domain:example.com), mcp__server__tool.",
    )
    decision: Literal["allow", "deny", "ask"] = Field(
        description="allow or deny: answered at once (recorded as policy, naming the rule); ask: always left to a "
        "person, even where an allow rule matches. Deny beats ask beats allow."
    )
    message: StrictStr = Field("", max_length=MAX_RULE_MESSAGE_CHARS, description="deny only: what the agent is told.")
    root: TaskRoot = ""
    agent: TaskAgent = ""
    created_for: TaskCreator = ""
    expires_at: datetime | None = Field(None, description="When it stops deciding (with a time zone); none: never.")


@api.post("/rules", auth=NEEDS_DECIDE, response=answers(dict, COMMON_ERRORS | {413}), summary="Add a permission rule")
def add_rule(request: HttpRequest, payload: RuleIn):
    """A rule answers matching permission requests as they arrive, before anyone is asked. A token limited to roots
    makes rules under its roots only."""
    who = caller(request)
    fields = payload.model_dump()
    rule = actions.add_rule(fields.pop("rule"), fields.pop("decision"), **fields, by=who.name, caller=who)
    return actions.rule_data(rule)


@api.get("/rules", auth=NEEDS_READ, response=answers(dict, COMMON_ERRORS), summary="List the permission rules")
def list_rules(request: HttpRequest, all: bool = Query(False, description="Removed and expired rules too.")):
    return {"rules": [actions.rule_data(rule) for rule in actions.list_rules(all, caller(request))]}


class PresetIn(Strict):
    preset: Literal[tuple(actions.PRESETS)] = Field(  # type: ignore[valid-type]
        description="read-only: reading and searching the task's directory, and git status, diff and log."
    )
    root: StrictStr = Field(
        "", max_length=MAX_PATH_BYTES, description="Switch it for tasks under this directory; empty: everywhere."
    )
    on: bool = Field(True, description="false switches the preset off for the root: its rules there are removed.")


@api.get("/rules/presets", auth=NEEDS_READ, response=answers(dict, COMMON_ERRORS), summary="List the rule presets")
def list_presets(request: HttpRequest):
    """Each preset, its rules, and the roots it is on for."""
    return {"presets": actions.presets_data(caller(request))}


@api.post("/rules/presets", auth=NEEDS_DECIDE, response=answers(dict, COMMON_ERRORS), summary="Switch a preset")
def switch_preset(request: HttpRequest, payload: PresetIn):
    """Switching a preset on makes its rules for the root (none again when it is on already); off removes them.
    Answers the rules made or removed."""
    who = caller(request)
    changed = actions.switch_preset(payload.preset, payload.root, on=payload.on, by=who.name, caller=who)
    rules = [actions.rule_data(rule) for rule in changed]
    return {"preset": payload.preset, "root": payload.root, "on": payload.on, "rules": rules}


@api.delete("/rules/{rule_id}", auth=NEEDS_DECIDE, response=answers(dict, READ_ONE), summary="Remove a permission rule")
def remove_rule(request: HttpRequest, rule_id: int = Path(..., ge=1, le=MAX_INT)):
    """The rule stops deciding; it stays listed with ?all=1, with who removed it and when."""
    who = caller(request)
    return actions.rule_data(actions.remove_rule(rule_id, by=who.name, caller=who))


api.add_router("/webhooks", "jobs.web.webhooks_api.router")  # by name: that module imports this one
