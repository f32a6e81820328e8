"""Permission requests: recorded when an executor asks, answered exactly once, delivered back to the executor."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.actions import rows
from jobs.actions.events import append_events
from jobs.actions.rules import check_remember, decide_by_rules, suggested_rules
from jobs.actions.rules import remember as remember_decision
from jobs.core.access import Caller
from jobs.core.errors import Conflict, ErrorCode, InvalidInput, NotFound
from jobs.core.inputs import check_json, check_text
from jobs.core.vocabulary import DecidedVia, PermissionMode, PermissionStatus, RuleDecision
from jobs.models import ANSWERS_TO_PASS_ON, PermissionRequest, PermissionRule, Task

MAX_MESSAGE_CHARS = 10_000
MAX_UPDATED_INPUT_BYTES = 1024 * 1024
MAX_REQUEST_ID_CHARS = 200  # what PermissionRequest.request_id holds


def record_permission_request(
    task: Task,
    *,
    request_id: str,
    tool_name: str,
    tool_input: dict,
    tool_use_id: str = "",
    suggestions: list | None = None,
) -> PermissionRequest:
    """Store an executor's question. In bypass mode it is answered 'allow' at once, recorded as policy; otherwise the
    user's rules may answer it at once (allow, deny: recorded as policy, naming the rule) or leave it pending (ask,
    or no rule speaks about it) (jobs/actions/rules.py)."""
    with transaction.atomic():
        perm = PermissionRequest.objects.create(
            task=task,
            request_id=request_id,
            tool_name=tool_name,
            input=tool_input,
            tool_use_id=tool_use_id,
            suggestions=suggestions or [],
            expires_at=timezone.now() + timedelta(seconds=permission_timeout(task)),
            **_answer_on_arrival(task, tool_name, tool_input),
        )
        events = [("permission_request", permission_data(perm))]
        if perm.status != PermissionStatus.PENDING:
            events.append(("permission_decision", permission_data(perm)))
        append_events(task, events)
    return perm


def permission_timeout(task: Task) -> int:
    """How long the task's requests wait for a decision, in seconds: its own setting, else the server's."""
    return task.permission_timeout_s or settings.BRIDGE_PERMISSION_TIMEOUT_S


def _answer_on_arrival(task: Task, tool_name: str, tool_input: dict) -> dict:
    """The columns of a request answered as it arrives (by bypass mode or a rule), or of one left pending."""
    if task.permission_mode == PermissionMode.BYPASS:
        return _by_policy(PermissionStatus.ALLOWED, "permission_mode=bypass")
    return _answer_by_rules(task, tool_name, tool_input) or {"status": PermissionStatus.PENDING}


def _answer_by_rules(task: Task, tool_name: str, tool_input: dict) -> dict | None:
    """The columns the user's rules write for a request (pending with the rule for `ask`); None when no rule
    speaks about it."""
    found = decide_by_rules(task, tool_name, tool_input)
    if found is None:
        return None
    decision, rule = found
    if decision == RuleDecision.ASK:
        return {"status": PermissionStatus.PENDING, "rule": rule}
    named = f"rule {rule.pk}: {rule.pattern}"
    if decision == RuleDecision.ALLOW:
        return _by_policy(PermissionStatus.ALLOWED, named, rule=rule)
    message = rule.message or f"Denied by the user's permission rule {rule.pk} ({rule.pattern})"
    return _by_policy(PermissionStatus.DENIED, named, rule=rule, message=message)


def _by_policy(status: PermissionStatus, by: str, **more: object) -> dict:
    return {"status": status, "decided_via": DecidedVia.POLICY, "decided_by": by, "decided_at": timezone.now(), **more}


PERMISSION_FIELDS_SHOWN = (
    "request_id",
    "tool_name",
    "input",
    "tool_use_id",
    "status",
    "updated_input",
    "message",
    "decided_by",
    "decided_via",
)


def permission_data(perm: PermissionRequest, remembered: list[PermissionRule] | None = None) -> dict:
    """A permission request as events and every adapter show it: the user's rule that matched it (its id and
    pattern; None when none did), when it is denied if nobody answers, the rules the agent suggested (each one click
    to make), and, for a decision just remembered, the rules it made."""
    shown = {field: getattr(perm, field) for field in PERMISSION_FIELDS_SHOWN}
    rule = perm.rule if perm.rule_id is not None else None
    return shown | {
        "expires_at": perm.expires_at.isoformat() if perm.expires_at is not None else None,
        "rule_id": perm.rule_id,
        "rule": rule.pattern if rule is not None else None,
        "suggested_rules": suggested_rules(perm) if perm.status == PermissionStatus.PENDING else [],
        "remembered": [{"id": made.pk, "rule": made.pattern, "decision": made.decision} for made in remembered or []],
    }


def pending_permissions(task: Task | None = None) -> list[PermissionRequest]:
    """Requests waiting for an answer, oldest first: of one task, or of all."""
    if task is None:
        return list(PermissionRequest.objects.pending().select_related("task").oldest_first())
    pending = rows.select(
        PermissionRequest, task_id=task.pk, status=PermissionStatus.PENDING, order_by=("created_at", "id")
    )
    for perm in pending:
        perm.task = task  # known already: no join
    return pending


def check_decision(behavior: str, request_id: str | None, updated_input: dict | None, message: str) -> None:
    """Refuse an answer that could not be stored or sent to an executor, before anything is looked up."""
    if behavior not in ("allow", "deny"):
        raise InvalidInput(f"behavior must be 'allow' or 'deny', not {str(behavior)[:50]!r}", field="behavior")
    if request_id is not None:
        check_text("request_id", request_id, MAX_REQUEST_ID_CHARS)
    if updated_input is not None and not isinstance(updated_input, dict):
        raise InvalidInput("updatedInput must be a JSON object", field="updatedInput")
    if updated_input is not None:
        check_json("updatedInput", updated_input, MAX_UPDATED_INPUT_BYTES)
    check_text("message", message or "", MAX_MESSAGE_CHARS)


def request_to_decide(task: Task, request_id: str | None) -> PermissionRequest:
    """The pending request an answer is for: the named one, or the task's oldest pending one."""
    if request_id:
        perm = next(iter(rows.select(PermissionRequest, task_id=task.pk, request_id=request_id, limit=1)), None)
        if perm is None:
            raise NotFound(
                f"task {task.public_id} has no permission request {request_id!r}", code=ErrorCode.NO_SUCH_REQUEST
            )
    else:
        oldest = rows.select(
            PermissionRequest, task_id=task.pk, status=PermissionStatus.PENDING, order_by=("created_at", "id"), limit=1
        )
        perm = next(iter(oldest), None)
        if perm is None:
            task.refresh_from_db()
            state = "has ended" if task.is_terminal else "is not waiting for one"
            raise Conflict(
                f"task {task.public_id} has no pending permission request (it {state}, {task.status})",
                code=ErrorCode.NOTHING_PENDING,
            )
    if perm.status != PermissionStatus.PENDING:
        raise Conflict(
            f"permission request {perm.request_id} was already {perm.status}"
            + (f" via {perm.decided_via}" if perm.decided_via else "")
            + "; nothing was sent to the agent",
            code=ErrorCode.ALREADY_DECIDED,
            request_id=perm.request_id,
            status=perm.status,
        )
    return perm


def lock_task_row(task: Task) -> None:
    """Take the task's row before its permission requests', the order a run's writes take them in (runs.under_claim),
    so a decision and a run's write on one task never deadlock (PostgreSQL; SQLite's one writer lock has no order)."""
    list(Task.objects.select_for_update().filter(pk=task.pk).values_list("pk", flat=True))


def decide_permission(
    task: Task,
    *,
    behavior: str,
    request_id: str | None = None,
    updated_input: dict | None = None,
    message: str = "",
    by: str = "",
    via: str = DecidedVia.API,
    remember: str | None = None,
    rule: str | None = None,
    caller: Caller | None = None,
) -> PermissionRequest:
    """Answer one pending request (the oldest when request_id is None). Exactly one answer ever wins. `remember`
    makes the rules that answer the next identical request the same way (jobs/actions/rules.py, `remember`): made in
    the same transaction, so a rule that cannot be made leaves the request undecided and says why; the request's
    `remembered_as` holds them."""
    check_decision(behavior, request_id, updated_input, message)
    scope = check_remember(remember, rule)
    allowed = behavior == "allow"
    if not allowed and not message:
        message = f"Denied by {by or 'the planner'}"
    with transaction.atomic():
        lock_task_row(task)
        perm = request_to_decide(task, request_id)
        decision = {
            "status": PermissionStatus.ALLOWED if allowed else PermissionStatus.DENIED,
            "updated_input": updated_input if allowed else None,
            "message": message,
            "decided_by": by,
            "decided_via": via,
            "decided_at": timezone.now(),
        }
        if not PermissionRequest.objects.pending().filter(pk=perm.pk).update(**decision):
            raise Conflict(
                f"permission request {perm.request_id} was answered meanwhile; nothing was sent",
                code=ErrorCode.ALREADY_DECIDED,
            )
        for field, value in decision.items():  # what was written, without reading it back
            setattr(perm, field, value)
        perm.task = task
        made = []
        if scope is not None:
            made = remember_decision(
                perm, scope, allowed=allowed, rule=rule, message=message, by=by or via, caller=caller
            )
        append_events(task, [("permission_decision", permission_data(perm, made))])
    if made:
        answer_waiting_by_rules(made)
    return perm


def answer_waiting_by_rules(made: list[PermissionRule]) -> list[PermissionRequest]:
    """Requests already waiting that rules just remembered decide: answered now, as if they had arrived after them
    (the rules are evaluated whole, so a deny or ask rule still wins). Each in a transaction of its own."""
    answered = []
    for waiting in pending_permissions():
        if not any(rule.task_id in (None, waiting.task_id) for rule in made):
            continue
        columns = _answer_by_rules(waiting.task, waiting.tool_name, waiting.input)
        if columns is None or columns["status"] == PermissionStatus.PENDING:
            continue
        with transaction.atomic():
            lock_task_row(waiting.task)
            if PermissionRequest.objects.pending().filter(pk=waiting.pk).update(**columns):
                for field, value in columns.items():
                    setattr(waiting, field, value)
                append_events(waiting.task, [("permission_decision", permission_data(waiting))])
                answered.append(waiting)
    return answered


def expire_permissions(task: Task) -> list[PermissionRequest]:
    """Deny requests that waited past their task's permission timeout, saying so."""
    timeout = permission_timeout(task)
    setting = "permission_timeout_s" if task.permission_timeout_s else "BRIDGE_PERMISSION_TIMEOUT_S"
    expired = []
    for perm in PermissionRequest.objects.overdue().filter(task=task):
        with transaction.atomic():
            lock_task_row(task)
            message = f"No decision within {timeout} s ({setting}); denied automatically."
            won = (
                PermissionRequest.objects.pending()
                .filter(pk=perm.pk)
                .update(
                    status=PermissionStatus.EXPIRED,
                    message=message,
                    decided_via=DecidedVia.TIMEOUT,
                    decided_by="bridge",
                    decided_at=timezone.now(),
                )
            )
            if won:
                perm.refresh_from_db()
                append_events(task, [("permission_decision", permission_data(perm))])
                expired.append(perm)
    return expired


def undelivered_decisions(task: Task) -> list[PermissionRequest]:
    """Answers that the executor has not been told yet, in the order they were decided (`undelivered`, read by its
    one column: a run asks after every ring)."""
    not_told = rows.select(PermissionRequest, task_id=task.pk, delivered_at=None, order_by=("decided_at", "id"))
    return [perm for perm in not_told if perm.status in ANSWERS_TO_PASS_ON]


def mark_delivered(perm: PermissionRequest) -> None:
    """The executor has been told this answer: it must never be sent twice."""
    PermissionRequest.objects.filter(pk=perm.pk).update(delivered_at=timezone.now())


def cancel_permission(task: Task, request_id: str, reason: str) -> None:
    """The executor withdrew its question (or never will read an answer)."""
    with transaction.atomic():
        perm = PermissionRequest.objects.pending().filter(task=task, request_id=request_id).first()
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
        open_requests = rows.select(PermissionRequest, task_id=task.pk, status=PermissionStatus.PENDING)
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
