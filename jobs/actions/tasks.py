"""Tasks as planners see them: validate and queue, follow up, cancel, look up."""

import hashlib
import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from jobs.actions import rows
from jobs.actions.events import append_events, status_event
from jobs.actions.liveness import live_supervisors, settle_if_orphaned
from jobs.actions.runs import release_session, tell_why_queued
from jobs.actions.workers import served_cwd, wait_reason
from jobs.actions.worktrees import worktree_for
from jobs.agents import hermes_skills, registry
from jobs.core import doorbell, paths
from jobs.core.errors import Conflict, ErrorCode, InvalidInput, NotFound, QueueFull, Refused
from jobs.core.inputs import check_int, check_path_text, check_text
from jobs.core.vocabulary import CLAUDE_PERMISSION_MODES, Agent, PermissionMode, Source, Status
from jobs.models import AgentSession, Task, Worker

MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_PERMISSION_TIMEOUT_S = 7 * 24 * 3600
MAX_TURNS = 10_000
MAX_REASON_CHARS = 2_000
MAX_ARGV_CHARS = 200  # one value in an agent's argv (docs/architecture.md, "Confinement before execution")
SHOWN_ID_CHARS = 36  # a UUID as text: a longer id is shown shortened in the answer
MAX_LEGACY_ID_CHARS = 200  # Task.legacy_id's max_length: the longest old id an imported task keeps
LIST_OPTIONS = {"allowed_tools", "disallowed_tools", "skills", "toolsets"}
# A list option goes into the agent's argv (shown by `ps`, and one argv string is capped at 128 KiB by Linux).
MAX_LIST_ENTRIES = 100
MAX_LIST_CHARS = 8_000  # the entries joined with commas, as the agents take them
# The permission modes a planner may ask for (`skip` comes with skip_permissions instead), as every adapter offers them.
PERMISSION_MODES = tuple(str(mode) for mode in PermissionMode if mode != PermissionMode.SKIP)
MAX_ADD_DIRS = 20  # directories besides the cwd a Claude task may reach (`--add-dir`), each one argv string
# append_system_prompt is one argv string too: at 4 bytes a character at most, well under Linux's 128 KiB.
MAX_SYSTEM_PROMPT_CHARS = 16_000
# PostgreSQL advisory lock that admits one task into the queue at a time, on every host ("brdgqueu" in ASCII).
QUEUE_ADMISSION_LOCK = 0x6272_6467_7175_6575
# Tries to queue-or-join when the task to join ends between the failed insert and the look-up.
JOIN_ATTEMPTS = 5
# Supervisors seen this recently count as ones a follow-up might reach (session_home).
MACHINES_SEEN_WITHIN = timedelta(days=1)


def get_task(task_id: str | uuid.UUID) -> Task:
    """The task with this public id, or else the imported task that had this id in the older tool it came from
    (`Task.legacy_id`), or NotFound (also for ids that are neither: a placeholder such as the README's `6f1c…`, or
    text of any length, shown shortened)."""
    text = str(task_id).strip()
    try:
        public_id = task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(text)
    except ValueError:
        public_id = None
    # with its session and supervisor, so that every reader of the task has them without a query
    found = rows.select(Task, public_id=public_id, related=("session", "worker")) if public_id else []
    if not found and could_be_legacy_id(text):
        found = rows.select(Task, legacy_id=text, related=("session", "worker"))
    if not found:
        raise _no_such_task(task_id, public_id)
    return settle_if_orphaned(found[0])  # every read sees a dead supervisor's task as orphaned at once


def could_be_legacy_id(text: str) -> bool:
    """Whether `text` could be an imported task's old id: short enough for the column, and storable (a NUL or a lone
    surrogate would fail the look-up itself, not just miss)."""
    if not text or len(text) > MAX_LEGACY_ID_CHARS:
        return False
    try:
        check_text("task id", text)
    except InvalidInput:
        return False
    return True


def _no_such_task(task_id: object, public_id: uuid.UUID | None) -> NotFound:
    if public_id is not None:
        return NotFound(f"no task {task_id}", code=ErrorCode.NO_SUCH_TASK)
    shown = str(task_id)
    shown = shown if len(shown) <= SHOWN_ID_CHARS else f"{shown[:SHOWN_ID_CHARS]}… ({len(shown)} characters)"
    return NotFound(
        f"no task {shown!r}: task ids look like 0b4f8e2c-5d7a-4c1e-9f3b-2a6d8e1c4b70 (the task_id a create answered "
        "with; GET /v1/tasks lists them), or are the id an imported task had in the older tool it came from",
        code=ErrorCode.NO_SUCH_TASK,
    )


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
    permission_timeout_s: int | None = None  # None: BRIDGE_PERMISSION_TIMEOUT_S
    options: dict[str, Any] = field(default_factory=dict)
    source: str = Source.API
    created_by: str = ""
    target: str = ""  # a supervisor name, host or label to run on; "" = any supervisor that serves the cwd
    isolation: str = ""  # "worktree": a git worktree of its own; "none"; "": the default for its cwd
    base: str = ""  # what an isolated task's worktree starts from: a branch, tag or commit ("" = HEAD)


def argv_value(name: str, value: object) -> str:
    """A value that goes into an agent's argv: a non-empty single-line string that cannot pass for a flag."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string", field=name)
    value = check_text(name, value).strip()
    if value.startswith("-") or any(ord(c) < 32 for c in value) or len(value) > MAX_ARGV_CHARS:
        raise InvalidInput(
            f"{name} {value[:50]!r} is not allowed: at most {MAX_ARGV_CHARS} characters, one line, "
            "not starting with '-'",
            field=name,
        )
    return value


def agent_options(agent: str) -> frozenset[str]:
    """The task options `agent` takes (jobs/agents/registry.py); every adapter's options are checked against them."""
    definition = registry.get_agent(agent)
    return definition.options if definition else frozenset()


def checked_options(agent: str, options: dict[str, Any]) -> dict[str, Any]:
    """The task options an agent takes, validated (None values dropped); anything else is a clear error."""
    checked: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if value is None:
            continue
        if key not in agent_options(agent):
            raise _not_an_option(agent, key)
        checked[key] = _checked_option(key, value)
    return checked


def _not_an_option(agent: str, key: object) -> InvalidInput:
    """Naming the agent that does take it, when another one does (Claude Code's options given to a Hermes task)."""
    name = check_text("option", key, MAX_ARGV_CHARS)
    owners = [other for other in registry.BUILT_IN.values() if other.name != agent and name in other.options]
    whose = "".join(f" (it is {owner.label}'s: give it to a {owner.name} task)" for owner in owners)
    return InvalidInput(
        f"{agent} tasks take no {name!r} option{whose}; they take: {', '.join(sorted(agent_options(agent)))}",
        field=name,
    )


def _checked_option(key: str, value: object) -> object:
    if key == "max_turns":
        return check_int("max_turns", value, 1, MAX_TURNS)
    if key in LIST_OPTIONS:
        return checked_names(key, value)
    if key == "append_system_prompt":
        return checked_system_prompt(value)
    if key == "add_dirs":
        return checked_add_dirs(value)
    return argv_value(key, value)


def checked_names(key: str, value: object) -> list[str]:
    """A list option's names (tools, skills, toolsets), each an argv value, bounded in count and in size."""
    if not isinstance(value, list):
        raise InvalidInput(f"{key} must be a list of names", field=key)
    entries = [argv_value(f"an entry of {key}", item) for item in value[: MAX_LIST_ENTRIES + 1]]
    size = len(",".join(entries))
    if len(value) > MAX_LIST_ENTRIES or size > MAX_LIST_CHARS:
        what = f"{len(value)} entries" if len(value) > MAX_LIST_ENTRIES else f"{size} characters"
        raise InvalidInput(
            f"{key} has {what}, over the limit of {MAX_LIST_ENTRIES} entries and {MAX_LIST_CHARS} characters "
            "in all (they go on the agent's command line): name fewer",
            option=key,
            max_entries=MAX_LIST_ENTRIES,
            max_chars=MAX_LIST_CHARS,
        )
    return entries


def checked_system_prompt(value: object) -> str:
    """Text Claude Code adds to its system prompt (`--append-system-prompt`): any lines, not blank, bounded."""
    text = check_text("append_system_prompt", value, MAX_SYSTEM_PROMPT_CHARS)
    if not text.strip():
        raise InvalidInput(
            "append_system_prompt is blank: give the text to add to Claude's system prompt, or leave it out",
            field="append_system_prompt",
        )
    return text


def checked_add_dirs(value: object) -> list[str]:
    """The directories besides the cwd a Claude task may reach (`--add-dir`): at most MAX_ADD_DIRS, each confined
    as the cwd is (`served_dir`), kept as the real paths that were checked."""
    if not isinstance(value, list):
        raise InvalidInput("add_dirs must be a list of absolute paths", field="add_dirs")
    if len(value) > MAX_ADD_DIRS:
        raise InvalidInput(
            f"add_dirs has {len(value)} entries, over the limit of {MAX_ADD_DIRS}: name fewer (a common parent)",
            field="add_dirs",
            max_entries=MAX_ADD_DIRS,
        )
    return [str(served_dir("add_dirs", raw)) for raw in value]


def served_dir(name: str, raw: object) -> Path:
    """A directory besides the cwd, taken where a cwd would be (`workers.served_cwd`): inside this process's
    allowed roots with every symlink followed (`paths.resolve_dir`), or else inside the roots a live supervisor declared
    (its host checks it again before the run). Refused in words that name `name`."""
    text = check_path_text(name, raw).strip()
    try:
        return paths.resolve_dir(text, name, f"{name} entry")
    except (Refused, InvalidInput) as refusal:
        if not Path(text).is_absolute():
            raise
        try:
            return served_cwd(text, live_supervisors)
        except (Refused, InvalidInput):
            raise refusal from None


def task_cwd_and_session(spec: TaskSpec) -> tuple[Path, AgentSession | None]:
    """The confined cwd a task would run in, and the known session it resumes (which fixes the cwd)."""
    resume_id = (spec.resume_session_id or "").strip()
    if not resume_id:
        return served_cwd(spec.cwd, live_supervisors), None
    session = AgentSession.objects.filter(agent=spec.agent, session_id=resume_id).first()
    cwd = served_cwd(session.cwd if session is not None and spec.cwd is None else spec.cwd, live_supervisors)
    if session is not None and str(cwd) != session.cwd:
        raise InvalidInput(
            f"session {resume_id} belongs to cwd {session.cwd!r}, not {str(cwd)!r}: "
            "an agent session can only be resumed where it started"
        )
    if session is not None:
        check_resumable_now(session)
    return cwd, session


def check_resumable_now(session: AgentSession, now: datetime | None = None) -> None:
    """Refuse to resume, for now, a session of an agent that resumes only from the minute after the session started
    (Gemini CLI 0.61 erases a session loaded within that minute: tests/fakes/GEMINI_NOTES.md), saying when it can."""
    definition = registry.get_agent(session.agent)
    if definition is None or not definition.resumes_from_next_minute:
        return
    now = now or timezone.now()
    from_minute = session.created_at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if now < from_minute:
        wait_s = math.ceil((from_minute - now).total_seconds())
        raise Conflict(
            f"{definition.label} can resume session {session.session_id} only from {from_minute:%H:%M:%S} UTC, the "
            f"minute after it started (in {wait_s} s): loading it sooner would erase its history. Try again then",
            retry_after_s=wait_s,
        )


def check_prompt(prompt: object) -> str:
    """The task text, refused when it is empty, cannot be stored, or is over BRIDGE_MAX_PROMPT_BYTES."""
    prompt = check_text("prompt", "" if prompt is None else prompt)
    if not prompt.strip():
        raise InvalidInput("prompt is empty: say what the agent should do", field="prompt")
    size = len(prompt.encode())
    if size > settings.BRIDGE_MAX_PROMPT_BYTES:
        raise InvalidInput(
            f"prompt is {size} bytes, over the limit of {settings.BRIDGE_MAX_PROMPT_BYTES} "
            "(BRIDGE_MAX_PROMPT_BYTES); put long material in a file in the working directory instead",
            field="prompt",
        )
    return prompt


def checked_run_settings(spec: TaskSpec) -> tuple[str, dict[str, Any], int | None]:
    """The permission mode, options and timeout a spec asks for, validated: (mode, options, timeout_s)."""
    names = registry.agent_names()
    if spec.agent not in names:
        raise InvalidInput(
            f"unknown agent {str(spec.agent)[:50]!r}; this Bridge runs: {', '.join(names)} (GET /v1/agents "
            f"describes each; more ACP agents can be declared in {registry.agents_file()})",
            field="agent",
            supported=names,
        )
    mode = checked_mode(spec)
    options = checked_options(spec.agent, spec.options)
    if spec.resume_session_id:
        argv_value("the session id", spec.resume_session_id)
    # None: no limit, when the operator set BRIDGE_TASK_TIMEOUT_S=0 and the task names none
    timeout_s = (settings.BRIDGE_TASK_TIMEOUT_S or None) if spec.timeout_s is None else spec.timeout_s
    if timeout_s is not None:
        check_int("timeout_s", timeout_s, 1, MAX_TIMEOUT_S)
    return mode, options, timeout_s


def checked_mode(spec: TaskSpec) -> PermissionMode:
    """The permission mode a task is stored with: the one asked for (Claude Code's own modes for Claude tasks only),
    or `skip` for skip_permissions, which replaces Bridge's modes and goes with none of Claude Code's."""
    if spec.permission_mode not in PERMISSION_MODES:
        raise InvalidInput(
            f"permission_mode must be one of {', '.join(map(repr, PERMISSION_MODES))}, "
            f"not {str(spec.permission_mode)[:50]!r}",
            field="permission_mode",
        )
    mode = PermissionMode(spec.permission_mode)
    if mode in CLAUDE_PERMISSION_MODES and spec.agent != Agent.CLAUDE:
        raise InvalidInput(
            f"permission_mode {str(mode)!r} is Claude Code's (give it to a claude task); "
            f"{spec.agent} tasks take 'approve' or 'bypass'",
            field="permission_mode",
        )
    definition = registry.get_agent(spec.agent)
    if spec.skip_permissions and definition is not None and definition.is_acp and not definition.skip_mode:
        raise InvalidInput(
            f"{definition.label} offers no mode that asks nothing, so skip_permissions cannot be given to a "
            f"{spec.agent} task: use permission_mode 'bypass', where Bridge allows every request it asks",
            field="skip_permissions",
        )
    if mode in CLAUDE_PERMISSION_MODES and spec.skip_permissions:
        raise InvalidInput(
            f"skip_permissions lets Claude do anything without asking, which permission_mode {str(mode)!r} does "
            "not: give one or the other",
            field="skip_permissions",
        )
    return PermissionMode.SKIP if spec.skip_permissions else mode


def session_home(session: AgentSession) -> str:
    """Where a follow-up of `session` must run: the supervisor that ran its newest task, since the agent keeps its
    session on that host. Its declared name when it has one, else its host (the default name `host:pid:random` dies
    with the process); "" when no supervisor has run it yet, or when every supervisor seen lately runs on the machine
    it ran on (one machine needs no pin, and a laptop the network renames would otherwise wait for its old name)."""
    last = Task.objects.filter(session=session, worker__isnull=False).select_related("worker").newest_first().first()
    if last is None:
        return ""
    worker = last.worker
    if worker.machine and not Worker.objects.recent(MACHINES_SEEN_WITHIN).exclude(machine=worker.machine).exists():
        return ""
    return worker.host if worker.name.startswith(f"{worker.host}:") else worker.name


def checked_target(spec: TaskSpec, session: AgentSession | None) -> str:
    """The supervisor a task must run on: the one the caller names; for a follow-up of a known session, its home
    (`session_home`); else "" (any supervisor that serves the cwd)."""
    if spec.target is not None and str(spec.target).strip():
        return argv_value("target", spec.target)
    return session_home(session) if session is not None else ""


def lock_queue_admissions() -> None:
    """Hold, until this transaction ends, the right to add to the queue, so counting it against BRIDGE_MAX_QUEUED and
    inserting are one step for every process and host. PostgreSQL: a transaction-scoped advisory lock (no lock row,
    released by commit or rollback, even by a process that dies). SQLite needs none: Bridge's transactions there are
    IMMEDIATE, so a writer holds the database's one write lock from its first statement."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [QUEUE_ADMISSION_LOCK])


def checked_permission_timeout(seconds: int | None) -> int | None:
    """How long a task's permission requests may wait: 1 s to MAX_PERMISSION_TIMEOUT_S; None for the setting."""
    if seconds is not None:
        check_int("permission_timeout_s", seconds, 1, MAX_PERMISSION_TIMEOUT_S)
    return seconds


def create_task(spec: TaskSpec, *, dedupe_key: str = "") -> Task:
    """Validate, confine and queue a task. Nothing runs until a supervisor claims it, and a resume only once no other
    task of its agent session is running or queued before it (its wait_reason then names the one it follows).

    `dedupe_key` is set only by create_or_join_task: the database then refuses a second queued-or-running task with
    the same key (constraint one_active_task_per_dedupe_key, IntegrityError). Plain creates keep it empty."""
    prompt = check_prompt(spec.prompt)
    mode, options, timeout_s = checked_run_settings(spec)
    permission_timeout_s = checked_permission_timeout(spec.permission_timeout_s)
    cwd, session = task_cwd_and_session(spec)
    resume_id = (spec.resume_session_id or "").strip()
    target = checked_target(spec, session)
    worktree = worktree_for(spec.isolation, spec.base.strip(), cwd, session)
    workers = live_supervisors()
    waits_because = wait_reason(str(cwd), target, spec.agent, workers)  # "" when a live supervisor can run it

    with transaction.atomic():
        lock_queue_admissions()
        queued = Task.objects.queued_in_order().count()
        if queued >= settings.BRIDGE_MAX_QUEUED:
            raise QueueFull(
                f"the queue is full: {queued} tasks are waiting (BRIDGE_MAX_QUEUED={settings.BRIDGE_MAX_QUEUED});"
                " try again when some have finished",
                queued=queued,
            )
        if worktree is not None and worktree.pk is None:
            worktree.save()
        task = Task.objects.create(
            agent=spec.agent,
            prompt=prompt,
            cwd=str(cwd),
            permission_mode=mode,
            options=options,
            timeout_s=timeout_s,
            permission_timeout_s=permission_timeout_s,
            session=session,
            resume_session_id=resume_id,
            source=spec.source,
            created_by=spec.created_by,
            dedupe_key=dedupe_key,
            target=target,
            wait_reason=waits_because,
            worktree=worktree,
        )
        if resume_id and tell_why_queued(Task.objects.filter(pk=task.pk), workers):
            rows.refresh(task)  # it follows a task of its session, and says so
        append_events(task, [status_event(task)])
        doorbell.ring(doorbell.QUEUE)
    return task


def task_dedupe_key(
    agent: str, prompt: str, cwd: str, resume_id: str, mode: str, options: dict[str, Any], target: str
) -> str:
    """What makes two tasks the same job: SHA-256 (hex) of the canonical JSON of agent, prompt, cwd, resumed session,
    permission mode, options (keys sorted, so option order does not matter; list order does) and target (the same
    work on another machine is another job)."""
    canonical = json.dumps(
        [agent, prompt, cwd, resume_id, mode, options, target], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _is_dedupe_conflict(exc: IntegrityError) -> bool:
    """PostgreSQL names the constraint; SQLite names its column."""
    text = str(exc)
    return "one_active_task_per_dedupe_key" in text or "jobs_task.dedupe_key" in text


def create_or_join_task(spec: TaskSpec) -> tuple[Task, bool]:
    """Queue a task unless an identical one (agent, prompt, cwd, resumed session, permission mode, options, target,
    and isolation and base when given) is queued or running: a planner that re-sends a task it lost track of gets the
    job already doing it. Returns (task, created).

    Exactly once across processes and hosts: the task carries a dedupe key, and the database admits one queued or
    running task per key. Of two identical requests at once, one inserts; the other's insert fails (its own
    transaction, or savepoint inside a caller's, rolls back) and it joins the winner's task. Only tasks made here
    have a key: a task made by a plain create is never joined."""
    prompt = check_prompt(spec.prompt)
    mode, options, _ = checked_run_settings(spec)
    cwd, session = task_cwd_and_session(spec)
    resume_id = (spec.resume_session_id or "").strip()
    target = checked_target(spec, session)
    where = {"isolation": spec.isolation, "base": spec.base.strip()} if spec.isolation or spec.base.strip() else {}
    key = task_dedupe_key(spec.agent, prompt, str(cwd), resume_id, mode, options | where, target)
    for _ in range(JOIN_ATTEMPTS):
        same = Task.objects.active().filter(dedupe_key=key).order_by("created_at", "id").first()
        if same is not None:
            return same, False
        try:
            return create_task(spec, dedupe_key=key), True
        except IntegrityError as exc:
            if not _is_dedupe_conflict(exc):
                raise
            # another process queued it first: join that task (looked up again, as it may have ended meanwhile)
    raise Conflict(
        f"an identical task kept starting and ending while this one was being queued ({JOIN_ATTEMPTS} tries); "
        "send it again",
        code=ErrorCode.DEDUPE_CONTENTION,
    )


@dataclass(frozen=True)
class KnownSession:
    """The session a resume continues; `hermes_own` when 'latest' is Hermes' own newest session in the cwd, one
    Bridge did not run (the one the older MCP server continued, `hermes chat --continue`)."""

    session_id: str
    hermes_own: bool = False


def known_session_id(agent: str, session_id: str, cwd: str | None) -> KnownSession:
    """The agent session a resume should continue: `latest` is the newest one Bridge ran for that cwd (the
    default cwd when none is given), and for Hermes, where Bridge ran none there, Hermes' own newest session recorded
    there; any other id must be one Bridge has recorded or, for Hermes, one in Hermes' own session store
    ($HERMES_HOME/state.db, read without starting Hermes), so typos fail before a run. Where no store can be read
    here, any well-formed Hermes id is taken and the agent's own error tells if it is wrong."""
    session_id = check_text("session_id", session_id or "", MAX_ARGV_CHARS).strip()
    if session_id == "latest":
        return _latest_session(agent, str(paths.resolve_cwd(cwd)))
    return KnownSession(_recorded_session_id(agent, session_id))


def _latest_session(agent: str, cwd: str) -> KnownSession:
    task = Task.objects.filter(agent=agent, cwd=cwd, session__isnull=False).select_related("session").newest_first()
    newest = task.first()
    if newest is not None:
        return KnownSession(newest.session.session_id)
    hermes_says = ""
    if agent == Agent.HERMES:
        found = hermes_skills.hermes_newest_session(cwd)
        if found:
            return KnownSession(found, hermes_own=True)
        store = hermes_skills.session_store()
        hermes_says = (
            f", and Hermes' session store {store} has none recorded there either"
            if found is not None
            else f", and there is no Hermes session store to look in here ({store} is missing or unreadable)"
        )
    advice = ": start one, or pass a session id (`hermes sessions list` shows Hermes' own)" if hermes_says else ""
    raise NotFound(
        f"Bridge has run no {agent} session in {cwd} yet{hermes_says}, so there is no 'latest' to resume{advice}",
        code=ErrorCode.NO_SUCH_SESSION,
    )


def _recorded_session_id(agent: str, session_id: str) -> str:
    if AgentSession.objects.filter(agent=agent, session_id=session_id).exists():
        return session_id
    if agent == Agent.HERMES:  # a session started by hand, or by the older MCP server
        source = hermes_skills.hermes_session_source(session_id)
        if source is None:
            return argv_value("the session id", session_id)  # no store to ask here: let Hermes say
        if source:
            return session_id
    raise NotFound(
        f"Bridge knows no {agent} session {session_id!r}"
        + (f", and neither does Hermes' session store {hermes_skills.session_store()}" if agent == Agent.HERMES else "")
        + "; use a session id from an earlier reply, or 'latest'",
        code=ErrorCode.NO_SUCH_SESSION,
    )


def continue_task(task: Task, prompt: str, *, source: str = Source.API, created_by: str = "", target: str = "") -> Task:
    """A follow-up in the same agent session and directory, with the same agent, mode and options, on the supervisor
    that ran the session (`session_home`) unless `target` names another."""
    if task.session is None:
        raise Conflict(
            f"task {task.public_id} has no agent session to continue (the agent never reported one: it "
            f"{'has not started yet' if task.status == Status.QUEUED else 'ended before it did'}); start a new task",
            code=ErrorCode.NO_SESSION_TO_CONTINUE,
        )
    spec = TaskSpec(
        prompt=prompt,
        cwd=task.session.cwd,
        agent=task.agent,
        permission_mode=PermissionMode.APPROVE if task.permission_mode == PermissionMode.SKIP else task.permission_mode,
        skip_permissions=task.permission_mode == PermissionMode.SKIP,
        resume_session_id=task.session.session_id,
        timeout_s=task.timeout_s,
        permission_timeout_s=task.permission_timeout_s,
        options=task.options,
        source=source,
        created_by=created_by,
        target=target,
    )
    return create_task(spec)


def request_cancel(task: Task, reason: str = "cancelled by request", by: str = "") -> Task:
    """Cancel a task: a queued one leaves the queue at once; a running one is stopped by its supervisor."""
    reason = check_text("reason", reason or "cancelled by request", MAX_REASON_CHARS)
    with transaction.atomic():
        now = timezone.now()
        dequeued = (
            Task.objects.queued_in_order()
            .filter(pk=task.pk)
            .update(
                status=Status.CANCELLED, finished_at=now, cancel_requested_at=now, cancel_reason=reason, error=reason
            )
        )
        if dequeued:
            task.refresh_from_db()
            append_events(task, [status_event(task, reason=reason, by=by)])
            release_session(task)
            return task
        flagged = (
            Task.objects.running()
            .filter(pk=task.pk, cancel_requested_at__isnull=True)
            .update(cancel_requested_at=now, cancel_reason=reason)
        )
        task.refresh_from_db()
        if flagged:
            append_events(task, [("cancel_requested", {"reason": reason, "by": by})])
            return task
    if task.status == Status.RUNNING:
        return task  # already being cancelled: asking twice is harmless
    raise Conflict(
        f"task {task.public_id} has already ended ({task.status}); there is nothing to cancel",
        code=ErrorCode.TASK_ENDED,
    )
