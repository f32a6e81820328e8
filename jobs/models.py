"""Bridge's data: the database is the truth (docs/architecture.md, "Principles").

Rows are changed only through `jobs.actions` (and `TaskCount`'s by the database's own triggers); everything else
reads them, through the named QuerySet methods here when a read recurs.
"""

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from jobs.agents import registry
from jobs.core.access import DEFAULT_SCOPE, Caller, Scope
from jobs.core.vocabulary import (
    TERMINAL_STATUSES,
    Agent,
    ChangesState,
    DecidedVia,
    PermissionMode,
    PermissionStatus,
    RuleDecision,
    Source,
    Status,
    WorktreeState,
    choices,
)


class TaskQuerySet(models.QuerySet):
    """The task reads every interface shares, so each list sorts and filters the same way."""

    def newest_first(self) -> "TaskQuerySet":
        return self.order_by("-created_at", "-id")

    def queued_in_order(self) -> "TaskQuerySet":
        """The queue, first come first served."""
        return self.filter(status=Status.QUEUED).order_by("created_at", "id")

    def running(self) -> "TaskQuerySet":
        return self.filter(status=Status.RUNNING)

    def active(self) -> "TaskQuerySet":
        """Queued or running: not ended yet."""
        return self.filter(status__in=(Status.QUEUED, Status.RUNNING))

    def with_pending_count(self) -> "TaskQuerySet":
        """Annotated with how many of each task's permission requests wait for an answer (the dashboard badge)."""
        pending = models.Q(permission_requests__status=PermissionStatus.PENDING)
        return self.annotate(pending_count=models.Count("permission_requests", filter=pending))

    def first_with_pending_count(self, limit: int) -> list["Task"]:
        """The first `limit` rows, each with `pending_count` like `with_pending_count`, but counted for those rows
        only: annotating before the limit makes the database count over every task (the dashboard at 100k)."""
        tasks = list(self[:limit])
        pending = (
            PermissionRequest.objects.pending()
            .filter(task_id__in=[task.pk for task in tasks])
            .order_by()
            .values("task_id")
            .annotate(n=models.Count("id"))
        )
        counts = {row["task_id"]: row["n"] for row in pending}
        for task in tasks:
            task.pending_count = counts.get(task.pk, 0)
        return tasks


# The outcomes of a permission request that the executor must be told (a cancelled one it withdrew itself).
ANSWERS_TO_PASS_ON = (PermissionStatus.ALLOWED, PermissionStatus.DENIED, PermissionStatus.EXPIRED)


class PermissionRequestQuerySet(models.QuerySet):
    def pending(self) -> "PermissionRequestQuerySet":
        """Waiting for an answer."""
        return self.filter(status=PermissionStatus.PENDING)

    def oldest_first(self) -> "PermissionRequestQuerySet":
        return self.order_by("created_at", "id")

    def overdue(self) -> "PermissionRequestQuerySet":
        """Pending past its `expires_at` (its task's permission timeout, else BRIDGE_PERMISSION_TIMEOUT_S): the one
        spelling of "past its timeout", for the supervisor's sweep and for the denial (`actions.expire_permissions`).
        A row from before `expires_at` existed is read by the setting."""
        now = timezone.now()
        cutoff = now - timedelta(seconds=settings.BRIDGE_PERMISSION_TIMEOUT_S)
        return self.pending().filter(models.Q(expires_at__lt=now) | models.Q(expires_at=None, created_at__lt=cutoff))

    def undelivered(self) -> "PermissionRequestQuerySet":
        """Answered, but the executor has not been told yet, in the order they were decided."""
        return self.filter(delivered_at__isnull=True, status__in=ANSWERS_TO_PASS_ON).order_by("decided_at", "id")


class TaskEventQuerySet(models.QuerySet):
    def after(self, seq: int) -> "TaskEventQuerySet":
        """The transcript after the seq a reader saw last, in order."""
        return self.filter(seq__gt=seq).order_by("seq")

    def newest_first(self) -> "TaskEventQuerySet":
        return self.order_by("-seq")


class WorkerQuerySet(models.QuerySet):
    def recent(self, within: timedelta) -> "WorkerQuerySet":
        """Supervisors alive at some time in the last `within`, stopped since or not."""
        return self.filter(heartbeat_at__gte=timezone.now() - within)


class Worker(models.Model):
    """One supervisor process; its heartbeat tells peers whether it is alive."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=200)
    machine = models.CharField(max_length=64, blank=True, default="")  # settings.BRIDGE_MACHINE_ID of its data dir
    pid = models.IntegerField()
    process_create_time = models.FloatField()
    capacity = models.IntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    # What it can serve: the allowed roots on its host, and labels a planner may target (besides its name and host).
    roots = models.JSONField(default=list, blank=True)
    labels = models.JSONField(default=list, blank=True)
    # Which executors it can run in its own environment ({agent: readiness}), refreshed with its heartbeat.
    executors = models.JSONField(default=dict, blank=True)
    # What started it (runbridge, supervise, mcp); when a `runbridge` asked it to hand over (it drains and exits).
    started_by = models.CharField(max_length=20, blank=True, default="")
    handover_requested_at = models.DateTimeField(null=True, blank=True)

    objects = WorkerQuerySet.as_manager()

    def __str__(self) -> str:
        return self.name

    def may_be_alive(self, now: datetime, stale_after: timedelta, host: str, host_within: timedelta) -> bool:
        """Not stopped, and either its heartbeat is fresher than `stale_after`, or it runs on `host` and beat within
        `host_within`: there the process itself is asked, because a clock stepped since the last heartbeat (NTP, a
        resumed VM) can make a live one's look stale."""
        if self.stopped_at is not None:
            return False
        return self.heartbeat_at >= now - stale_after or (self.host == host and self.heartbeat_at >= now - host_within)


class AgentSession(models.Model):
    """An executor's own conversation, which later tasks can resume."""

    agent = models.CharField(max_length=20)  # an executor's name (jobs/agents/registry.py)
    session_id = models.CharField(max_length=200)
    cwd = models.TextField()
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    total_cost_usd = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "session_id"], name="unique_agent_session")]

    def __str__(self) -> str:
        return f"{self.agent}:{self.session_id}"


class Task(models.Model):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    agent = models.CharField(max_length=20, default=Agent.CLAUDE)  # an executor's name (jobs/agents/registry.py)
    prompt = models.TextField()
    cwd = models.TextField()
    status = models.CharField(max_length=20, choices=choices(Status), default=Status.QUEUED, db_index=True)
    permission_mode = models.CharField(max_length=20, choices=choices(PermissionMode), default=PermissionMode.APPROVE)
    options = models.JSONField(default=dict, blank=True)
    timeout_s = models.IntegerField(null=True, blank=True)  # None: no limit (BRIDGE_TASK_TIMEOUT_S=0)
    # How long its permission requests wait for a decision before they are denied; None: BRIDGE_PERMISSION_TIMEOUT_S.
    permission_timeout_s = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.ForeignKey(Worker, null=True, blank=True, on_delete=models.SET_NULL)
    pid = models.IntegerField(null=True, blank=True)
    process_create_time = models.FloatField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    stderr_tail = models.TextField(blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cache_creation_input_tokens = models.BigIntegerField(null=True, blank=True)
    cache_read_input_tokens = models.BigIntegerField(null=True, blank=True)
    num_turns = models.IntegerField(null=True, blank=True)
    session = models.ForeignKey(AgentSession, null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks")
    resume_session_id = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=10, choices=choices(Source), default=Source.API)
    created_by = models.CharField(max_length=200, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(blank=True)
    last_seq = models.IntegerField(default=0)
    # Who may still write to the task (docs/architecture.md, "Fencing"): which claim a running task runs under, moved
    # on by every claim (runs._take), so a run's writes land only while the task runs under the run's own; NULL once
    # its terminal status event is written, after which nothing more is appended (events.append_events).
    claim = models.IntegerField(null=True, db_default=models.Value(0))
    # Set by create-or-join: one active (queued or running) task per key, enforced by the database across processes.
    dedupe_key = models.CharField(max_length=64, blank=True, default="")
    # A supervisor name, host or label the planner asked for; empty: any supervisor that serves the cwd.
    target = models.CharField(max_length=200, blank=True, default="")
    # Why a queued task is not running yet, when that is not just a busy queue (e.g. no live supervisor serves it).
    wait_reason = models.TextField(blank=True, default="")
    # The id an imported task had in the older tool it came from (`manage.py import_legacy`, jobs/actions/imports.py),
    # by which `actions.get_task` finds it too; one task per id (constraint unique_legacy_id). NULL, not "", for
    # Bridge's own tasks: the constraint's index then holds imported tasks only, and a lookup by id uses it on SQLite
    # too (a partial index serves `legacy_id = ?` only when its condition is `IS NOT NULL`).
    legacy_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001  (see above)
    # Isolated (`isolation: "worktree"`): the git worktree its agent works in, made by the supervisor that runs it; a
    # follow-up in the same session runs in the same one. NULL: the agent works in the cwd itself. No constraint and
    # no index of its own (the partial index below serves it): SQLite then adds and drops the column in place, where
    # it would rebuild the task table and lose the triggers that keep jobs_taskcount (0006).
    worktree = models.ForeignKey(
        "Worktree",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="tasks",
        db_constraint=False,
        db_index=False,
    )

    objects = TaskQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["status", "created_at"], name="task_queue_order"),
            # The dashboard filtered by agent, newest first, reads 200 rows however many tasks there are.
            models.Index(fields=["agent", "created_at"], name="task_agent_newest"),
            # The tasks of an agent session that a resume waits for, by the two ways a task is in a session (it resumed
            # it, or ran in it): jobs/actions/runs.py, `session_is_free`. A claim over a full queue (1,000) of waiting
            # resumes took 1-11 ms with them, 0.2-3 s without (each queued one read every task of its agent).
            models.Index(fields=["agent", "resume_session_id", "status"], name="task_active_resuming"),
            models.Index(fields=["session", "status"], name="task_active_in_session"),
            models.Index(fields=["worktree"], condition=models.Q(worktree__isnull=False), name="task_isolated"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["dedupe_key"],
                condition=models.Q(status__in=["queued", "running"]) & ~models.Q(dedupe_key=""),
                name="one_active_task_per_dedupe_key",
            ),
            models.UniqueConstraint(
                fields=["legacy_id"], condition=models.Q(legacy_id__isnull=False), name="unique_legacy_id"
            ),
        ]

    def __str__(self) -> str:
        return str(self.public_id)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def agent_label(self) -> str:
        """The executor in a person's words (its name is all the column keeps: agents are declared, not fixed)."""
        return registry.label(self.agent)


class WorktreeQuerySet(models.QuerySet):
    def requested_on(self, machine: str) -> "WorktreeQuerySet":
        """The live worktrees of `machine` with a merge or discard asked of them (a supervisor there carries it out);
        read through the partial index `worktree_requested`, so the sweep that looks costs nothing while none is."""
        return self.filter(machine=machine, state=WorktreeState.LIVE).exclude(request="")


class Worktree(models.Model):
    """A git worktree Bridge made for an isolated task, on a branch of its own (jobs/workspace/worktrees.py). It lives
    on the host whose supervisor made it (`machine`), which alone merges, discards and prunes it: a merge or discard
    asked elsewhere is recorded here (`request`…) for a supervisor there, which records what came of it."""

    base_ref = models.CharField(max_length=200, blank=True)  # what the planner asked it to start from ("" = HEAD)
    # Filled in when the supervisor makes it (state `planned` until then):
    repo = models.TextField(blank=True)  # the user's repository (its main working tree's top level)
    path = models.TextField(blank=True)  # the worktree's directory
    branch = models.CharField(max_length=200, blank=True)
    base_branch = models.CharField(max_length=200, blank=True)
    base_commit = models.CharField(max_length=64, blank=True)
    relative_cwd = models.TextField(blank=True)  # the task's cwd relative to the repository's top level
    machine = models.CharField(max_length=64, blank=True)  # settings.BRIDGE_MACHINE_ID of the supervisor that made it
    state = models.CharField(max_length=10, choices=choices(WorktreeState), default=WorktreeState.PLANNED)
    merged_commit = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    # The merge or discard asked of it and not yet done ("" when none is): merge, squash or discard; cleared when it
    # is done (the state then says) or refused (`refusal` then says why), so it can be asked again.
    request = models.CharField(max_length=10, blank=True)
    request_message = models.TextField(blank=True)  # the commit message a merge will use
    requested_by = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField(null=True, blank=True)  # also tells one request's outcome from the next's
    request_taken_at = models.DateTimeField(null=True, blank=True)  # when a process began carrying it out
    refusal = models.JSONField(default=dict, blank=True)  # the last request refused: action, code, error, files, by, at

    objects = WorktreeQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["machine"], condition=~models.Q(request=""), name="worktree_requested")]

    def __str__(self) -> str:
        return self.branch or f"worktree {self.pk} ({self.state})"


class TaskChanges(models.Model):
    """What a task changed in its working directory (jobs/workspace/snapshots.py): the snapshot taken as its agent
    started, then, once it ended, the files it added, modified, deleted or renamed and their patch, bounded by
    BRIDGE_CHANGES_MAX_FILES and BRIDGE_CHANGES_MAX_BYTES (`truncated`, `left_out`)."""

    task = models.OneToOneField(Task, on_delete=models.CASCADE, primary_key=True, related_name="changes")
    machine = models.CharField(
        max_length=64
    )  # the data dir whose store holds the snapshot (settings.BRIDGE_MACHINE_ID)
    snapshot = models.JSONField(default=dict)
    state = models.CharField(max_length=12, choices=choices(ChangesState), default=ChangesState.PENDING)
    kind = models.CharField(max_length=10, blank=True)  # git, manifest, or none
    base = models.CharField(max_length=64, blank=True)
    files = models.JSONField(default=list)
    patch = models.TextField(blank=True)
    truncated = models.BooleanField(default=False)
    left_out = models.TextField(blank=True)
    reason = models.TextField(blank=True)  # unavailable: why nothing could be recorded
    files_changed = models.IntegerField(default=0)  # the whole count, also when `files` was cut
    lines_added = models.IntegerField(default=0)
    lines_removed = models.IntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    recorded_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.task_id}: {self.state}"


class TaskCount(models.Model):
    """How many tasks are in one status. The database keeps it: triggers on the task table (migration 0006) move the
    counts in the transaction of every insert, delete and status change, whoever makes it (jobs.actions, the admin,
    a bulk update, raw SQL), so the dashboard, `/health` and every list update read a handful of rows where counting
    the tasks read all of them (15 ms at 100,000 tasks on SQLite, 33 ms on PostgreSQL). On SQLite a migration that
    rebuilds the task table drops its triggers: integration/test_task_counts.py checks that they are there after every
    migration."""

    status = models.CharField(max_length=20, primary_key=True)
    tasks = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.status}: {self.tasks}"

    @classmethod
    def by_status(cls) -> dict[str, int]:
        """How many tasks are in each status, every status present (zeros included)."""
        counts = dict.fromkeys((s.value for s in Status), 0)
        counts.update(cls.objects.values_list("status", "tasks"))
        return counts


class TaskEvent(models.Model):
    """One line of the transcript. Append-only; seq is gap-free per task."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    seq = models.IntegerField()
    kind = models.CharField(max_length=40)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TaskEventQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="unique_task_seq")]
        ordering = ["task", "seq"]

    def __str__(self) -> str:
        return f"{self.task_id}#{self.seq} {self.kind}"


class TaskLine(models.Model):
    """A stretch of a task's raw transcript (what hbridge kept in ~/.hbridge_transcript.jsonl): the lines its agent
    wrote on stdout, as it wrote them. Each line is an entry numbered gap-free per task from 1; a row holds entries
    `n` to `last`: a run of whole lines, one cut line, or a note where lines were not kept
    (jobs/actions/transcripts.py). Append-only."""

    # No index of its own: the (task, last) constraint's index serves every read by task, and each index is one more
    # write per row recorded.
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="lines", db_index=False)
    n = models.IntegerField()  # the number of its first entry
    last = models.IntegerField()  # the number of its last entry
    # zlib-compressed: for a run, its lines' bytes exactly as the agent wrote them, newlines included (bytes, not
    # text: an agent may write any); for a cut line, its first BRIDGE_MAX_LINE_BYTES. A note: empty.
    data = models.BinaryField(default=b"")
    size = models.BigIntegerField(default=0)  # the bytes of stdout the row stands for, newlines included
    omitted = models.IntegerField(default=0)  # a note: how many of the agent's lines it stands for; 0: lines
    note = models.TextField(blank=True, default="")  # why the line was cut, or the lines were not kept

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "last"], name="unique_task_line")]
        ordering = ["task", "last"]

    def __str__(self) -> str:
        return f"{self.task_id}:{self.n}-{self.last}"


class PermissionRequest(models.Model):
    """An executor asking to use a tool; answered once, by a person, a planner, a policy or the clock."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="permission_requests")
    request_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    input = models.JSONField(default=dict)
    tool_use_id = models.CharField(max_length=200, blank=True)
    suggestions = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=20, choices=choices(PermissionStatus), default=PermissionStatus.PENDING, db_index=True
    )
    updated_input = models.JSONField(null=True, blank=True)
    message = models.TextField(blank=True)
    decided_by = models.CharField(max_length=200, blank=True)
    decided_via = models.CharField(max_length=20, choices=choices(DecidedVia), blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # a pending request is denied after it (`overdue`)
    # The user's rule that matched it as it arrived: one that decided it (decided_via policy), or an `ask` rule that
    # sent it to a person; NULL when no rule matched (jobs/actions/rules.py).
    rule = models.ForeignKey(
        "PermissionRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="permission_requests"
    )

    objects = PermissionRequestQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "request_id"], name="unique_task_request")]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.task_id}/{self.request_id} {self.tool_name} {self.status}"


class PermissionRuleQuerySet(models.QuerySet):
    def live(self) -> "PermissionRuleQuerySet":
        """Rules that still decide: not removed, not expired."""
        unexpired = models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())
        return self.filter(unexpired, removed_at__isnull=True)


class PermissionRule(models.Model):
    """A user's rule that answers routine permission requests as they arrive (jobs/actions/rules.py): a pattern in
    Claude Code's rule syntax (jobs/core/permission_rules.py), what it decides, and where it applies. Rows are never
    deleted: a removed rule keeps who removed it and when."""

    pattern = models.TextField()  # normalised (`permission_rules.parse`)
    decision = models.CharField(max_length=10, choices=choices(RuleDecision))
    message = models.TextField(blank=True)  # deny: what the agent is told
    root = models.TextField(blank=True)  # a resolved directory: tasks whose cwd is it or under it; "" = everywhere
    agent = models.CharField(max_length=20, blank=True)  # an executor's name; "" = any
    created_for = models.CharField(max_length=200, blank=True)  # a task's created_by ("token:x", "user:y"); "" = any
    # A remembered decision's narrower scopes (jobs/actions/rules.py, `remember`): one task, or one agent session.
    task = models.ForeignKey("Task", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(AgentSession, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    expires_at = models.DateTimeField(null=True, blank=True)
    # Where the rule came from: the decision it remembers, or the preset that made it ("" for neither).
    from_request = models.ForeignKey(
        "PermissionRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="remembered_as"
    )
    preset = models.CharField(max_length=40, blank=True)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.CharField(max_length=200, blank=True)

    objects = PermissionRuleQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"rule {self.pk}: {self.decision} {self.pattern}"


class PermissionRulesVersion(models.Model):
    """One row whose `stamp` changes in the same transaction as every rule added or removed: each process keeps the
    rules parsed and reads only this to know whether they are still current (jobs/actions/rules.py)."""

    stamp = models.UUIDField(default=uuid.uuid4)

    def __str__(self) -> str:
        return str(self.stamp)


class ApiToken(models.Model):
    """A bearer token: only its prefix and SHA-256 are kept; the token itself is shown once. Its scope and roots say
    what it may do (jobs/core/access.py); a token made before scopes existed may do everything, as before."""

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=16, db_index=True)
    hash = models.CharField(max_length=64)
    scope = models.CharField(max_length=10, choices=choices(Scope), default=DEFAULT_SCOPE.value)
    roots = models.JSONField(default=list, blank=True)  # resolved paths as text; empty: not limited
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name

    def caller(self) -> Caller:
        """What a request made with this token may do."""
        return Caller(f"token:{self.name}", Scope(self.scope), tuple(self.roots or ()))


class WebhookQuerySet(models.QuerySet):
    def live(self) -> "WebhookQuerySet":
        """Webhooks still told about tasks: not removed."""
        return self.filter(removed_at__isnull=True)


class Webhook(models.Model):
    """A receiver Bridge tells about tasks (jobs/actions/webhooks.py): the events it wants, which tasks (a root, an
    agent, the token or user who made them), the shape of what it gets, and the secret each delivery is signed with.
    Rows are never deleted: a removed webhook keeps who removed it and when, and its delivery log."""

    class Format(models.TextChoices):
        BRIDGE = "bridge", "Bridge's JSON"
        SLACK = "slack", "Slack incoming webhook"
        DISCORD = "discord", "Discord webhook"
        NTFY = "ntfy", "ntfy topic"

    # What a webhook can ask for, in the order a task meets them.
    EVENTS = ("task.started", "permission.requested", "permission.decided", "task.finished")

    url = models.TextField()
    events = models.JSONField(default=list)  # some of EVENTS
    root = models.TextField(blank=True)  # a resolved directory: tasks whose cwd is it or under it; "" = everywhere
    agent = models.CharField(max_length=20, blank=True)  # an executor's name; "" = any
    created_for = models.CharField(max_length=200, blank=True)  # a task's created_by ("token:x", "user:y"); "" = any
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.BRIDGE)
    # The HMAC key of X-Bridge-Signature, shown once when the webhook is made. Kept as it is, not hashed like a token:
    # signing needs the key itself, where checking a token needs only its hash.
    secret = models.CharField(max_length=100)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.CharField(max_length=200, blank=True)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"webhook {self.pk}: {self.format} {self.url}"


class WebhookDeliveryQuerySet(models.QuerySet):
    def pending(self) -> "WebhookDeliveryQuerySet":
        """Not delivered yet, and not given up on."""
        return self.filter(status=WebhookDelivery.Status.PENDING)

    def unclaimed(self, now: datetime) -> "WebhookDeliveryQuerySet":
        """Pending and held by no sender: never claimed, handed back, or claimed by one whose lease has run out (it
        died or froze while sending)."""
        free = models.Q(lease_until__isnull=True) | models.Q(lease_until__lt=now)
        return self.pending().filter(free)

    def due(self, now: datetime) -> "WebhookDeliveryQuerySet":
        """What a delivery loop may send now: unclaimed, and its next try has come."""
        return self.unclaimed(now).filter(next_attempt_at__lte=now)


class WebhookDelivery(models.Model):
    """One event to deliver to one webhook: the outbox row written in the transaction of the event it tells of, sent
    by a supervisor's delivery loop (jobs/supervision/deliveries.py) until the receiver takes it or Bridge gives up, and
    kept as the delivery log. `delivery_id` stays the same across retries, so a receiver can drop what it has seen."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # given up: refused by the receiver, or not taken within BRIDGE_WEBHOOK_RETRY_S

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    event = models.CharField(max_length=40)  # one of Webhook.EVENTS, or "ping"
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    payload = models.JSONField(default=dict)  # Bridge's JSON; decision links are added as it is sent, never stored
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The claim of the process sending it now, until `lease_until`: another takes it only once that has passed (its
    # sender died), so each row is sent by one process at a time.
    lease = models.UUIDField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    objects = WebhookDeliveryQuerySet.as_manager()

    class Meta:
        indexes = [
            # What the delivery loops look for: pending rows, soonest first; delivered and failed ones are not in it.
            models.Index(fields=["next_attempt_at"], condition=models.Q(status="pending"), name="webhook_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → webhook {self.webhook_id}: {self.status}"
