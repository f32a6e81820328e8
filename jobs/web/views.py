"""Plain views: the open health check, the SSE stream (ninja does not stream), the browser pages and login link.

Pages are thin adapters: every button calls the same jobs.actions function as the REST API, with via="web".
"""

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from functools import wraps
from typing import TypeVar

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.tokens import default_token_generator
from django.contrib.staticfiles import finders
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import urlsafe_base64_decode
from django.views.decorators.http import require_GET, require_http_methods, require_POST, require_safe

from jobs import actions, processes
from jobs.actions import tokens
from jobs.agents import executors, hermes_skills, registry
from jobs.core.access import Caller, Scope
from jobs.core.errors import BridgeError, ErrorCode, InvalidInput, Unauthenticated
from jobs.core.hints import manage_command
from jobs.core.vocabulary import TERMINAL_STATUSES, Agent, DecidedVia, PermissionMode, Source, Status
from jobs.models import PermissionRequest, Task, TaskCount, TaskEvent
from jobs.web import auth, hbridge, reports
from jobs.web.forms import REMEMBER_CHOICES, DecisionForm, FollowUpForm, MergeForm, NewTaskForm, PresetForm, RuleForm
from jobs.web.watching import TaskWatch, on_stream_readers

SSE_BATCH = 500
SSE_PRIME = 200  # events a resumed stream re-reads so it does not send a streamed text twice


@require_safe
def health(request: HttpRequest) -> JsonResponse:
    """Open to everyone: says whether the server, its database and a supervisor are up, whether the disk that holds
    the database is full (`storage`), and nothing private. Bridge's web server answers most polls from a snapshot of
    this answer (jobs/web/health.py); this view makes it fresh."""
    state = actions.system_state()
    database = "ok" if state.database == "ok" else "error (details in the server log)"
    status = "ok" if database == "ok" and state.storage == "ok" else "degraded"
    body = {"status": status, "database": database, "storage": state.storage, "supervisors": len(state.workers)}
    body["tasks"] = state.counts
    body["pending_permissions"] = state.pending_permissions
    body["workers"] = [actions.worker_data(worker, state.running) for worker in state.workers]  # roots: counts only
    # what the live supervisors can run (they run the tasks), or this process's view while none lives; no paths
    body["executors"] = [status.as_dict(private=False) for status in actions.executor_statuses(state.workers)]
    body["sandbox"] = processes.agent_sandbox().as_dict(private=False)
    return JsonResponse(body, status=200 if status == "ok" else 503)


def _sse(event_id: int | None, event: str, data: dict) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, cls=DjangoJSONEncoder)}\n\n".encode()


def _frames(frames: Iterable[hbridge.Frame]) -> bytes:
    return b"".join(_sse(event_id, name, payload) for name, payload, event_id in frames)


def _read_after(task: Task, since: int, settle: bool) -> list[dict]:
    """The events after `since`, the task re-read first; `settle` first on the stream's first read (a dead
    supervisor rings no more; after that the sweep sees to it, jobs/web/watching.py)."""
    if settle:
        actions.settle_if_orphaned(task)
    return [actions.event_data(e) for e in actions.read_transcript(task, since, SSE_BATCH)]


def _read_before(task: Task, since: int) -> list[dict]:
    """The events a resumed stream sent last time (up to SSE_PRIME of them), for its translation's memory."""
    start = max(0, since - SSE_PRIME)
    events = actions.events_since(task, start, since - start) if since else []
    return [actions.event_data(e) for e in events]


async def _stream(task: Task, since: int) -> AsyncIterator[bytes]:
    """Bridge's events and hbridge's (web/hbridge.py), read from the database by seq, until the task has ended. It
    reads when its task rings or the sweep finds news for it (web/watching.py), and sends a heartbeat when quiet."""
    translator = hbridge.StreamTranslator(str(task.public_id))
    translator.prime(await on_stream_readers(_read_before)(task, since))
    watch = TaskWatch(task)
    heartbeat = settings.BRIDGE_SSE_HEARTBEAT_S
    try:
        yield b"retry: 2000\n\n" + _frames([translator.opened(task.status, task.error)])
        last_sent, first = time.monotonic(), True
        while True:
            events = await on_stream_readers(_read_after)(task, since, settle=first)
            first = False
            if events:
                yield _frames(frame for event in events for frame in translator.translate(event))
                since, last_sent = events[-1]["seq"], time.monotonic()
            if task.status in TERMINAL_STATUSES and len(events) < SSE_BATCH:  # the real end, whatever `since` said
                yield _frames(translator.ending(task.status, task.exit_code, task.error, task.last_seq))
                return
            if len(events) == SSE_BATCH:  # more may be there already; any news after this read rings the waiter
                continue
            watch.read(since, task)
            while not await watch.wait(timeout=max(0.05, heartbeat - (time.monotonic() - last_sent))):
                yield b": heartbeat\n\n"  # a quiet while: nothing to read (the sweep would have said)
                last_sent = time.monotonic()
    finally:
        watch.close()


_Result = TypeVar("_Result")


def json_errors(view: Callable[..., _Result]) -> Callable[..., _Result | JsonResponse]:
    """The JSON endpoints' one error path: a refusal becomes {"error", "code", …} with its HTTP status."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> _Result | JsonResponse:
        try:
            return view(request, *args, **kwargs)
        except BridgeError as exc:
            return JsonResponse(exc.as_dict(), status=exc.http_status)

    return wrapper


def page_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The pages' one error path: a refused button press is shown as a message on the task's page; any other
    refusal (an unknown task, say) is the error page with the refusal's status."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except BridgeError as exc:
            task_id = kwargs.get("task_id")
            if request.method == "POST" and task_id and exc.code != ErrorCode.NO_SUCH_TASK:
                messages.error(request, exc.message)
                return redirect("task-page", task_id=task_id)
            context = {"message": exc.message, "code": exc.code}
            return render(request, "jobs/error.html", context, status=exc.http_status)

    return wrapper


@json_errors
def _open_stream(request: HttpRequest) -> tuple[Task, int] | HttpResponse:
    try:
        who = auth.require(request, Scope.READ)
    except Unauthenticated as refused:
        return auth.unauthorized(refused)
    since = actions.parse_seq(request.GET.get("since") or request.headers.get("Last-Event-ID"), "since / Last-Event-ID")
    task_id = request.GET.get("task_id") or request.GET.get("id") or ""  # ?id= as hbridge's DESIGN wrote it
    return tokens.check_sees(who, actions.get_task(task_id)), since


def task_stream(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """SSE in Bridge's and hbridge's vocabularies (web/hbridge.py): Bridge's events have `id:` = seq (resume with
    Last-Event-ID or ?since=); the stream opens with `connected` and ends with `end`, then hbridge's `done`.

    A sync view like the others: it checks the request on its thread and returns; the stream's coroutine runs on the
    event loop (jobs/web/webserver.py `PooledDjango`), holding no thread while it waits."""
    if request.method != "GET":
        return JsonResponse(
            {"error": "use GET", "code": ErrorCode.METHOD_NOT_ALLOWED}, status=405, headers={"Allow": "GET"}
        )
    opened = _open_stream(request)
    if isinstance(opened, HttpResponse):
        return opened
    task, since = opened
    response = StreamingHttpResponse(_stream(task, since), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


# --- browser pages ----------------------------------------------------------------------------------------------

DASHBOARD_LIMIT = 200


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Every task, newest first; rows update live over /ws/tasks/ from the cursor the page was rendered at. Its cost
    does not grow with the number of tasks: only the rows shown have their pending permissions counted."""
    status, agent = request.GET.get("status", ""), request.GET.get("agent", "")
    actions.settle_running_tasks()
    tasks = Task.objects.select_related("session").newest_first()
    if status:
        tasks = tasks.filter(status=status)
    if agent:
        tasks = tasks.filter(agent=agent)
    live = actions.live_supervisors()  # it is they that run tasks: their readiness is what counts
    context = {
        "tasks": tasks.first_with_pending_count(DASHBOARD_LIMIT),
        "cursor": TaskEvent.objects.aggregate(latest=Max("pk"))["latest"] or 0,
        "pending_permissions": PermissionRequest.objects.pending().count(),
        "counts": TaskCount.by_status(),
        "statuses": list(Status),
        "agents": registry.choices(),
        "status": status,
        "agent": agent,
        "executors": [
            status
            for status in executors.worth_telling(actions.executor_statuses(live))
            if status.ready != executors.YES
        ],
        "sandbox": processes.agent_sandbox(),
    }
    return render(request, "jobs/dashboard.html", context)


@login_required
@page_errors
def task_page(request: HttpRequest, task_id: str) -> HttpResponse:
    """The live transcript is filled in by static/bridge/task.js from /ws/tasks/<id>/ (replayed from seq 0)."""
    task = actions.get_task(task_id)
    if task.status == Status.QUEUED:
        actions.explain_waits()  # so the page says now why it waits, if no live supervisor serves it
        task.refresh_from_db()
    context = {
        "task": task,
        "permissions": permissions_label(task),
        "follow_up_form": FollowUpForm(),
        "admin_url": reverse("admin:jobs_task_change", args=[task.pk]),
        "is_terminal": task.is_terminal,
        "session_total": reports.session_total(task.session) if task.session else None,
        "worktree": actions.worktree_data(task.worktree),
        "remember_choices": REMEMBER_CHOICES,
    }
    return render(request, "jobs/task.html", context)


def hermes_one_shot(task: Task) -> bool:
    """Whether a Hermes task runs (or will run) in one-shot mode: as its spawned argv says, else as it would now."""
    argv = task.events.filter(kind="spawned").newest_first().values_list("data__argv", flat=True).first()
    if argv:
        return "chat" in argv
    return hermes_skills.run_mode(task.options or {}, task.resume_session_id) == "oneshot"


def permissions_label(task: Task) -> str:
    """The permission mode in words that hold for this run: Hermes asks only about edits and risky commands (ACP),
    and one-shot Hermes has no channel to ask on at all (it runs with --yolo unless asked to approve)."""
    mode = PermissionMode(task.permission_mode)
    if task.agent != Agent.HERMES:
        return mode.label
    one_shot = hermes_one_shot(task)
    if mode == PermissionMode.APPROVE and one_shot:
        return "none relayed: one-shot Hermes cannot ask, so it refuses commands it would ask about"
    if mode == PermissionMode.APPROVE:
        return "ask for what Hermes asks about (file edits, risky commands)"
    return "allow every tool (one-shot Hermes with --yolo)" if one_shot else mode.label


@login_required
def new_task(request: HttpRequest) -> HttpResponse:
    form = NewTaskForm(request.POST or None, initial={"cwd": str(settings.BRIDGE_DEFAULT_CWD)})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            who = auth.require(request, Scope.RUN)
            spec = actions.TaskSpec(
                prompt=data["prompt"],
                cwd=data["cwd"] or None,
                agent=data["agent"],
                permission_mode=data["permission_mode"],
                timeout_s=data["timeout_s"],
                permission_timeout_s=data["permission_timeout_s"],
                options=form.options(),
                source=Source.WEB,
                created_by=who.name,
                isolation=data["isolation"],
                base=data["base"],
            )
            tokens.check_creates(who, spec)
            task = actions.create_task(spec)
        except BridgeError as exc:  # shown on the form, with what was typed kept
            form.add_error(None, exc.message)
        else:
            messages.success(request, "Task queued.", extra_tags="transient")  # the page drops it once it runs
            left_out = actions.left_out_note(task)
            if left_out:
                messages.warning(request, left_out)
            return redirect("task-page", task_id=task.public_id)
    roots = [str(root) for root in settings.BRIDGE_ALLOWED_ROOTS]
    agents = actions.agents_data(actions.live_supervisors())  # what each can do, and whether it can run now
    return render(request, "jobs/new_task.html", {"form": form, "allowed_roots": roots, "agents": agents})


@login_required
@require_POST
@page_errors
def cancel_task(request: HttpRequest, task_id: str) -> HttpResponse:
    who, task = auth.task_for(request, task_id, Scope.RUN)
    actions.request_cancel(task, reason=f"cancelled in the browser by {who.name}", by=who.name)
    messages.success(request, "Cancelled." if task.is_terminal else "Cancel requested: the agent is being stopped.")
    return redirect("task-page", task_id=task.public_id)


@login_required
@require_POST
@page_errors
def follow_up(request: HttpRequest, task_id: str) -> HttpResponse:
    who, task = auth.task_for(request, task_id, Scope.RUN)
    form = FollowUpForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Write a follow-up prompt first.")
        return redirect("task-page", task_id=task.public_id)
    new = actions.continue_task(task, form.cleaned_data["prompt"], source=Source.WEB, created_by=who.name)
    messages.success(request, f"Follow-up queued in the same agent session as task {task.public_id}.")
    return redirect("task-page", task_id=new.public_id)


# A merge or discard the worktree's host has not finished within 30 s: it goes on there, and this page shows it.
STILL_PENDING = (
    "Asked of the supervisor on the worktree's host, which has not finished within 30 s; it goes on there. "
    "Reload this page to see the outcome."
)


@login_required
@require_POST
@page_errors
def merge_task(request: HttpRequest, task_id: str) -> HttpResponse:
    """Land an isolated task's work on its base branch. A refusal (a conflict, a checkout the merge would overwrite)
    is shown on the task page with the files it names: nothing was changed, so the person can act and try again."""
    who, task = auth.task_for(request, task_id, Scope.RUN)
    form = MergeForm(request.POST)
    strategy = form.cleaned_data["strategy"] if form.is_valid() else "merge"
    try:
        review = actions.merge_worktree(task, strategy, by=who.name)
    except BridgeError as exc:
        messages.error(request, exc.message + (f" Files: {', '.join(exc.files)}." if exc.files else ""))
    else:
        done = review.worktree
        if review.done:
            messages.success(request, f"Merged into {done['base_branch']} ({done['merged_commit'][:12]}).")
        else:
            messages.info(request, STILL_PENDING)
    return redirect("task-page", task_id=task.public_id)


@login_required
@require_POST
@page_errors
def discard_task(request: HttpRequest, task_id: str) -> HttpResponse:
    who, task = auth.task_for(request, task_id, Scope.RUN)
    try:
        review = actions.discard_worktree(task, by=who.name)
    except BridgeError as exc:
        messages.error(request, exc.message)
    else:
        if review.done:
            messages.success(request, "Discarded: its worktree and branch are removed.")
        else:
            messages.info(request, STILL_PENDING)
    return redirect("task-page", task_id=task.public_id)


@login_required
@require_POST
@json_errors
def decide(request: HttpRequest, task_id: str, request_id: str) -> JsonResponse:
    """Answer one permission card (JSON for the page's script); a card answered elsewhere gets 409 and its state."""
    who, task = auth.task_for(request, task_id, Scope.DECIDE)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        raise InvalidInput(form_problems(form))
    data = form.cleaned_data
    perm = actions.decide_permission(
        task,
        behavior=data["behavior"],
        request_id=request_id,
        updated_input=data["updated_input"] if data["behavior"] == "allow" else None,
        message=data["message"],
        by=who.name,
        via=DecidedVia.WEB,
        remember=data["remember"],
        rule=data["rule"],
        caller=who,
    )
    return JsonResponse(actions.permission_data(perm, list(perm.remembered_as.order_by("pk"))))


def form_problems(form: forms.Form) -> str:
    """What a form refused, in one line."""
    return "; ".join(str(error) for errors in form.errors.values() for error in errors)


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    by_day = reports.usage_by_day()
    context = {
        "by_day": by_day,
        "by_directory": reports.usage_by_directory(),
        "by_session": reports.usage_by_session(),
        "cost_chart": reports.bar_chart(by_day, "day", "cost", money=True),
        "token_chart": reports.bar_chart(by_day, "day", "tokens"),
        "chart_width": reports.CHART_WIDTH,
        "chart_height": reports.CHART_HEIGHT,
        "chart_left": reports.CHART_LEFT,
    }
    return render(request, "jobs/usage.html", context)


# --- permission rules ----------------------------------------------------------------------------------------------

RULE_USES_SHOWN = 5  # the newest requests each rule met that its row lists


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
@page_errors
def rules_page(request: HttpRequest) -> HttpResponse:
    """The user's permission rules: what each decides, where, who made it and which requests it met; the form adds
    one (a refusal is shown on it, with what was typed kept), and the presets switch on and off per directory."""
    if request.method != "POST":
        return render(request, "jobs/rules.html", rules_context(request, auth.require(request, Scope.READ), RuleForm()))
    who = auth.require(request, Scope.DECIDE)
    form = RuleForm(request.POST)
    if form.is_valid():
        try:
            made = actions.add_rule(**form.cleaned_data, by=who.name, caller=who)
        except BridgeError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Rule {made.pk} added: {made.decision} {made.pattern}.")
            return redirect("rules")
    return render(request, "jobs/rules.html", rules_context(request, who, form))


def rules_context(request: HttpRequest, who: Caller, form: RuleForm) -> dict:
    """The rules page's rules (live ones, or with ?all=1 every rule ever made), each with the requests it met."""
    include_ended = request.GET.get("all") == "1"
    rules = actions.list_rules(include_ended, caller=who)
    uses = actions.requests_met(rules, newest=RULE_USES_SHOWN)
    return {
        "form": form,
        "rules": [{"rule": actions.rule_data(rule), "uses": uses.get(rule.pk)} for rule in rules],
        "include_ended": include_ended,
        "presets": actions.presets_data(who),
        "allowed_roots": [str(root) for root in settings.BRIDGE_ALLOWED_ROOTS],
        "may_change": who.has(Scope.DECIDE),
    }


@login_required
@require_POST
@page_errors
def remove_rule(request: HttpRequest, rule_id: int) -> HttpResponse:
    who = auth.require(request, Scope.DECIDE)
    try:
        rule = actions.remove_rule(rule_id, by=who.name, caller=who)
    except BridgeError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Rule {rule.pk} removed: {rule.decision} {rule.pattern}.")
    return redirect("rules")


@login_required
@require_POST
@page_errors
def switch_preset(request: HttpRequest) -> HttpResponse:
    who = auth.require(request, Scope.DECIDE)
    form = PresetForm(request.POST)
    if not form.is_valid():
        messages.error(request, form_problems(form))
        return redirect("rules")
    name, root, on = form.cleaned_data["preset"], form.cleaned_data["root"], form.cleaned_data["on"]
    try:
        changed = actions.switch_preset(name, root, on=on, by=who.name, caller=who)
    except BridgeError as exc:
        messages.error(request, exc.message)
        return redirect("rules")
    where, rules = root or "everywhere", f"{len(changed)} rule{pluralize(len(changed))}"
    if on:
        messages.success(request, f"Preset {name} is on for {where}: {f'{rules} made' if changed else 'on already'}.")
    else:
        messages.success(request, f"Preset {name} is off for {where}: {rules} removed.")
    return redirect("rules")


# --- webhooks ------------------------------------------------------------------------------------------------------

DELIVERIES_SHOWN = 20  # the newest deliveries each webhook's log shows on the page


@login_required
@require_safe
@page_errors
def webhooks_page(request: HttpRequest) -> HttpResponse:
    """The webhooks and their delivery logs (status, tries, the last answer or error), newest first. The URL is shown
    whole only to a caller who may decide: a Slack URL or an ntfy topic is itself a key (actions.webhook_data)."""
    who = auth.require(request, Scope.READ)
    hooks = actions.list_webhooks(caller=who)
    stats = actions.delivery_stats(hooks)
    items = [
        {
            "hook": actions.webhook_data(hook, stats[hook.pk], full_url=who.has(Scope.DECIDE)),
            "deliveries": [actions.delivery_data(d) for d in actions.list_deliveries(hook, limit=DELIVERIES_SHOWN)],
        }
        for hook in hooks
    ]
    return render(request, "jobs/webhooks.html", {"webhooks": items})


# --- login ---------------------------------------------------------------------------------------------------------


class LoginView(auth_views.LoginView):
    """The password form, naming the commands that make a new login link or an account as they work when pasted."""

    template_name = "jobs/login.html"

    def get_context_data(self, **kwargs) -> dict:
        commands = {"createsuperuser": manage_command("createsuperuser"), "login_link": manage_command("login_link")}
        return {**super().get_context_data(**kwargs), **commands}


@require_GET
def favicon(request: HttpRequest) -> FileResponse:
    """/favicon.ico, which browsers ask for on their own: the icon the pages link to."""
    path = finders.find("bridge/favicon.ico")
    if path is None:
        raise RuntimeError("bridge/favicon.ico is missing from the static files")
    return FileResponse(open(path, "rb"), content_type="image/x-icon")  # noqa: SIM115 - FileResponse closes it


# --- one-time login link ------------------------------------------------------------------------------------------


def login_with_link(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    try:
        user = get_user_model().objects.get(pk=urlsafe_base64_decode(uidb64).decode())
    except (ValueError, get_user_model().DoesNotExist):
        user = None
    if user is None or not user.is_active or not default_token_generator.check_token(user, token):
        message = (
            "This login link has been used or has expired. Print a fresh one with "
            f"`{manage_command('login_link')}`, or log in."
        )
        return render(request, "jobs/error.html", {"message": message}, status=403)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("dashboard")
