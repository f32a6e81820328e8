"""Supervisors (workers): registered with what they can serve, heartbeating, told apart alive from dead; which
supervisor may run which task; and how a supervisor is described to a health check.

Each supervisor declares what it serves: the allowed roots of its own host (BRIDGE_ALLOWED_ROOTS there, resolved),
and optionally a name (unique among live supervisors) and labels. It runs a task when the task's cwd is one of its
roots or lies below one (resolved path strings compared by `paths.within`: whole components, without case where the
file system ignores case), and the task's `target` is empty or equal to its name, its host or one of its labels
(`places`), and it can run the task's agent in its own environment (`can_run`: found, logged in, as it recorded with
its heartbeat): `serves`, and `servable_by` for the claim's query (one rule, two forms). A queued task says why it
waits (`wait_reason`): for no live supervisor that serves it (naming what stops those that could, and the fix), or
behind a task of its agent session (`runs.waiting_for`).

One data dir, one supervisor for its tasks: a `runbridge` that finds a live supervisor the MCP server started asks it
to hand over (`ask_to_hand_over`); that one stops claiming, lets its running tasks end, and exits.
"""

import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from functools import reduce
from operator import or_
from pathlib import Path

import psutil
from django.conf import settings
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from jobs import processes
from jobs.actions import rows
from jobs.agents import executors, registry
from jobs.agents.executors import ExecutorStatus
from jobs.core import paths
from jobs.core.errors import Conflict, ErrorCode, InvalidInput, Refused
from jobs.core.hints import manage_command
from jobs.core.inputs import check_path_text
from jobs.models import Task, Worker

log = logging.getLogger(__name__)
WORKER_STALE_AFTER = timedelta(seconds=30)
LOCAL_ROWS_WITHIN = timedelta(days=1)  # rows of this host older than this are not asked whether they live
# A supervisor's name or label: one word a planner can type as a task's target.
IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")
MAX_LABELS = 50
LISTED_IN_REASON = 10  # supervisors a wait reason names before "and N more"
# What started a supervisor (Worker.started_by): `runbridge` takes over from one the MCP server started.
STARTED_BY_RUNBRIDGE, STARTED_BY_SUPERVISE, STARTED_BY_MCP = "runbridge", "supervise", "mcp"
READINESS_RANK = {executors.YES: 0, executors.UNKNOWN: 1, executors.NO: 2}  # best first


# --- who a supervisor is ---------------------------------------------------------------------------------------
def check_identity(name: str | None, labels: Iterable[str] | None) -> tuple[str, list[str]]:
    """A supervisor's declared name ("" for none) and labels, each one word of letters, digits and `._@+-`."""
    name = (name or "").strip()
    labels = [label.strip() for label in labels or () if label.strip()]
    for what, value in [("name", name)] * bool(name) + [("label", label) for label in labels]:
        if not IDENTITY.fullmatch(value):
            raise InvalidInput(
                f"supervisor {what} {value[:50]!r} is not allowed: up to 100 letters, digits and . _ @ + -, "
                "starting with a letter or digit"
            )
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"a supervisor takes at most {MAX_LABELS} labels, not {len(labels)}")
    return name, list(dict.fromkeys(labels))


def own_roots() -> list[str]:
    """This host's allowed roots as a supervisor declares them: resolved, as strings."""
    return [str(root) for root in paths.allowed_roots()]


def register_worker(
    capacity: int,
    *,
    name: str | None = None,
    labels: Iterable[str] | None = None,
    started_by: str = STARTED_BY_SUPERVISE,
) -> Worker:
    """Record this process as a supervisor, with what tells it apart from a later process with its pid, what it
    serves and which executors it can run. `name` and `labels` default to BRIDGE_SUPERVISOR_NAME and
    BRIDGE_SUPERVISOR_LABELS; without a name it is called `host:pid:random`. A name another live supervisor has is
    refused (Conflict)."""
    name, labels = check_identity(
        settings.BRIDGE_SUPERVISOR_NAME if name is None else name,
        settings.BRIDGE_SUPERVISOR_LABELS if labels is None else labels,
    )
    proc = psutil.Process()
    host = socket.gethostname()
    if name:
        free_name(name)
    identity = processes.process_identity(proc.pid)
    if identity is None:  # not reached: a process can always read its own start
        raise RuntimeError(f"cannot read this process's start time (pid {proc.pid})")
    return Worker.objects.create(
        name=name or f"{host}:{proc.pid}:{uuid.uuid4().hex[:6]}",
        host=host,
        machine=settings.BRIDGE_MACHINE_ID,
        pid=proc.pid,
        process_create_time=identity,
        capacity=capacity,
        heartbeat_at=timezone.now(),
        roots=own_roots(),
        labels=labels,
        executors=executor_readiness(),
        started_by=started_by,
    )


def free_name(name: str) -> None:
    """Make `name` free for a new supervisor: refused while a live one has it; a dead one's row is renamed
    `name~<id>` (its tasks keep pointing at it, so they are still found and told apart as orphans)."""
    old = Worker.objects.filter(name=name).first()
    if old is None:
        return
    if worker_is_alive(old):
        raise Conflict(
            f"a supervisor named {name!r} is already running (host {old.host}, pid {old.pid}); "
            "give this one another name, or stop that one first",
            code=ErrorCode.SUPERVISOR_NAME_TAKEN,
        )
    Worker.objects.filter(pk=old.pk).update(name=f"{name}~{old.pk}")


def heartbeat(worker: Worker) -> None:
    """Tell peers on other hosts that this supervisor is alive, and which executors it can run now (a login made or
    lost since it started counts from its next heartbeat)."""
    worker.executors = executor_readiness()
    Worker.objects.filter(pk=worker.pk).update(heartbeat_at=timezone.now(), executors=worker.executors)


def ask_to_hand_over() -> list[Worker]:
    """Ask the live supervisors of this data dir that an MCP server started (in its client's environment, which may
    lack the agents' logins) to hand over to the caller, a `runbridge`: each stops claiming, lets its running tasks
    end, and exits (`handover_requested`). Returns those asked."""
    asked = [
        worker
        for worker in live_supervisors()
        if worker.started_by == STARTED_BY_MCP
        and worker.machine == settings.BRIDGE_MACHINE_ID
        and worker.handover_requested_at is None
    ]
    Worker.objects.filter(pk__in=[worker.pk for worker in asked]).update(handover_requested_at=timezone.now())
    return asked


def handover_requested(worker: Worker) -> bool:
    """Whether a `runbridge` asked this supervisor to hand over (`ask_to_hand_over`)."""
    return Worker.objects.filter(pk=worker.pk, handover_requested_at__isnull=False).exists()


def stop_worker(worker: Worker) -> None:
    """A clean exit: peers need not wait for the heartbeat to go stale."""
    Worker.objects.filter(pk=worker.pk).update(stopped_at=timezone.now())


def worker_is_alive(worker: Worker | None) -> bool:
    """Same host: ask the OS (pid plus create time). Another host: trust a fresh heartbeat."""
    if worker is None or worker.stopped_at is not None:
        return False
    if worker.host == socket.gethostname():
        return processes.same_process(worker.pid, worker.process_create_time)
    return timezone.now() - worker.heartbeat_at < WORKER_STALE_AFTER


# --- which supervisor may run which task -------------------------------------------------------------------------
def live_supervisors() -> list[Worker]:
    """Supervisors alive now, as `worker_is_alive` decides: on this host still the process that registered, whatever
    the clocks say (a supervisor killed a second ago keeps a fresh heartbeat; a live one's can look stale after a
    clock step), elsewhere a fresh heartbeat. Rows of this host that have not beaten for a day are not asked."""
    now, host = timezone.now(), socket.gethostname()
    oldest = now - max(WORKER_STALE_AFTER, LOCAL_ROWS_WITHIN)
    recent = rows.select(Worker, stopped_at=None, above={"heartbeat_at": oldest})
    return [
        worker
        for worker in recent
        if worker.may_be_alive(now, WORKER_STALE_AFTER, host, LOCAL_ROWS_WITHIN) and worker_is_alive(worker)
    ]


def root_prefix(root: str) -> str:
    """What a path below `root` starts with: the root and one separator (its own kind: `\\` for Windows roots)."""
    sep = "\\" if "\\" in root and "/" not in root else "/"
    return root if root.endswith(sep) else root + sep


def covers(roots: Iterable[str], cwd: str) -> bool:
    """Whether `cwd` (a resolved path string) is one of `roots` or lies below one."""
    return any(paths.within(cwd, root) for root in roots)


def answers_to(worker: Worker) -> set[str]:
    """The targets a supervisor runs: its name, its host and its labels."""
    return {worker.name, worker.host, *(worker.labels or ())}


def places(worker: Worker, cwd: str, target: str) -> bool:
    """Whether a task with this cwd and target is `worker`'s to run, its agent aside."""
    return covers(worker.roots or (), cwd) and (not target or target in answers_to(worker))


def serves(worker: Worker, cwd: str, target: str, agent: str) -> bool:
    """Whether `worker` may run a task with this cwd, target and agent."""
    return places(worker, cwd, target) and can_run(worker, agent)


def servable_by(worker: Worker) -> Q:
    """`serves` as a query on tasks: a prefilter that never leaves out a task `serves` accepts (a root on a file
    system that ignores case matches without case; SQLite's LIKE always does), so the claim checks `serves` too."""
    inside = [_below(root) for root in worker.roots or ()]
    if not inside:
        return Q(pk__in=[])
    targets = Q(target="") | Q(target__in=sorted(answers_to(worker)))
    return reduce(or_, inside) & targets & Q(agent__in=runnable_agents(worker))


def _below(root: str) -> Q:
    if not paths.folds_case(root):
        return Q(cwd=root) | Q(cwd__startswith=root_prefix(root))
    if connection.vendor == "sqlite" and not root.isascii():
        # SQLite's LIKE ignores the case of ASCII letters only: select by what comes before the first other one.
        return Q(cwd__istartswith=root[: next(i for i, c in enumerate(root) if not c.isascii())])
    return Q(cwd__iexact=root) | Q(cwd__istartswith=root_prefix(root))


def described(worker: Worker) -> str:
    """`name@host`, or just the name when it is the default `host:pid:random`."""
    return worker.name if worker.name.startswith(f"{worker.host}:") else f"{worker.name}@{worker.host}"


def _listing(workers: list[Worker], show: Callable[[Worker], str]) -> str:
    shown = [show(worker) for worker in workers[:LISTED_IN_REASON]]
    if len(workers) > LISTED_IN_REASON:
        shown.append(f"and {len(workers) - LISTED_IN_REASON} more")
    return "; ".join(shown)


def none_can_run(task: Task) -> bool:
    """Whether supervisors are alive and none of them can run this queued task: a planner waiting for it should be
    told now (its wait_reason says why) rather than at the end of its wait. False while no supervisor lives: one may
    be starting."""
    workers = live_supervisors()
    return bool(workers) and bool(supervisor_wait_reason(task.cwd, task.target, task.agent, workers))


def _cannot_run(worker: Worker, agent: str) -> str:
    """What stops `worker` running `agent`, with each fix, as it recorded it."""
    status = recorded_status(worker, agent)
    told = " ".join(f"{problem.what}. Fix: {problem.fix}." for problem in status.problems) or "it is not ready."
    if worker.started_by != STARTED_BY_MCP:
        return f"{described(worker)}: {told}"
    return (
        f"{described(worker)}, which an MCP server started in its client's environment: {told} Or run `make run` "
        f"(or `{manage_command('runbridge')}`) in a terminal where {agent} works: it takes over from that supervisor"
    )


def _serves_what(worker: Worker) -> str:
    text = f"{described(worker)} serves {', '.join(worker.roots or ()) or 'no directory'}"
    return text + (f" (labels: {', '.join(worker.labels)})" if worker.labels else "")


def wait_reason(cwd: str, target: str, agent: str, workers: list[Worker], *, behind: uuid.UUID | None = None) -> str:
    """Why a queued task with this cwd, target and agent cannot start yet, other than the queue ahead of it: the task
    of its agent session it must follow (`behind`, its public id: `runs.waiting_for`), and why no supervisor of
    `workers` (the live ones) can run it; "" when nothing holds it back."""
    for_supervisor = supervisor_wait_reason(cwd, target, agent, workers)
    if behind is None:
        return for_supervisor
    for_session = (
        f"waits for task {behind}, which is in the same agent session: a session runs one task at a time, so this "
        "one starts when that one ends"
    )
    return f"{for_session}; {for_supervisor}" if for_supervisor else for_session


def supervisor_wait_reason(cwd: str, target: str, agent: str, workers: list[Worker]) -> str:
    """Why no supervisor of `workers` (the live ones) can run a task with this cwd, target and agent; "" when one
    can."""
    if any(serves(worker, cwd, target, agent) for worker in workers):
        return ""
    if not workers:
        return f"no live supervisor is running: start one (`{manage_command('supervise')}`, or runbridge)"
    placed = [worker for worker in workers if places(worker, cwd, target)]
    if placed:
        cannot = _listing(placed, lambda worker: _cannot_run(worker, agent))
        return f"no live supervisor that serves {cwd} can run {agent}: {cannot}"
    listing = _listing(workers, _serves_what)
    by_cwd = [worker for worker in workers if covers(worker.roots or (), cwd)]
    if not target or not by_cwd:
        return f"no live supervisor serves {cwd} (supervisors: {listing})"
    if not any(target in answers_to(worker) for worker in workers):
        return f"no live supervisor has the name, host or label {target!r} (supervisors: {listing})"
    return f"no live supervisor both serves {cwd} and has the name, host or label {target!r} (supervisors: {listing})"


def served_cwd(raw: str | None, live: Callable[[], list[Worker]]) -> Path:
    """The cwd a task may be queued with: inside this process's own allowed roots, resolved with symlinks followed
    (`paths.resolve_cwd`); or else inside the roots a live supervisor declared. A supervisor on this host is checked
    the same way against its roots; one on another host by the path's normalised text, since only that host can
    resolve it (and its supervisor does, against its own roots, before it runs the task: `runs.claim_next_task`).
    What neither allows is refused as before, naming this process's roots."""
    try:
        return paths.resolve_cwd(raw)
    except (Refused, InvalidInput) as refusal:
        if raw is None or not str(raw).strip():
            raise
        found = _served_elsewhere(str(raw), live())
        if found is None:
            raise refusal from None
        return found


def _served_elsewhere(raw: str, workers: list[Worker]) -> Path | None:
    candidate = paths.expanded("cwd", check_path_text("cwd", raw).strip())
    if not candidate.is_absolute():
        return None
    here = socket.gethostname()
    for worker in workers:
        roots = [str(root) for root in worker.roots or ()]
        if worker.host == here:
            try:
                resolved = candidate.resolve()
            except (OSError, RuntimeError):
                continue
            if resolved.is_dir() and paths.is_inside(resolved, [Path(root) for root in roots]):
                return resolved
        elif covers(roots, os.path.normpath(candidate)):
            return Path(os.path.normpath(candidate))
    return None


# --- which executors a supervisor can run --------------------------------------------------------------------------
def executor_readiness() -> dict[str, dict]:
    """Which executors this process can run in its own environment, as a supervisor's row records them."""
    return {status.agent: status.as_dict() for status in executors.executor_report()}


def recorded_status(worker: Worker, agent: str) -> ExecutorStatus:
    """`agent`'s executor as `worker` recorded it; one that recorded nothing (it predates the record) is taken as
    unknown, not as unable."""
    recorded = (worker.executors or {}).get(agent)
    if recorded is None:
        return ExecutorStatus.unrecorded(agent)
    return ExecutorStatus.from_dict(recorded)


def can_run(worker: Worker, agent: str) -> bool:
    """Whether `worker` may be given a task of `agent`: not when it found the executor unable to run ("no"); when it
    cannot tell ("unknown", e.g. a login kept in the macOS keychain) it tries."""
    return recorded_status(worker, agent).ready != executors.NO


def runnable_agents(worker: Worker) -> list[str]:
    """The agents `worker` may be given tasks of (`can_run`)."""
    return [agent for agent in registry.agent_names() if can_run(worker, agent)]


def executor_statuses(workers: list[Worker]) -> list[ExecutorStatus]:
    """Each executor as health reports it: from the live supervisors `workers`, the best any of them can do (it is
    they that run tasks); with none alive, as this process sees it (what a supervisor started from here would)."""
    if not workers:
        return executors.executor_report()
    return [
        min((recorded_status(worker, agent) for worker in workers), key=lambda status: READINESS_RANK[status.ready])
        for agent in registry.agent_names()
    ]


def agents_data(workers: list[Worker]) -> list[dict]:
    """Every executor Bridge runs, what it offers and whether it can run now (`executor_statuses`), for
    GET /v1/agents."""
    statuses = {status.agent: status for status in executor_statuses(workers)}
    return [
        definition.describe() | {"readiness": statuses[name].as_dict()}
        for name, definition in registry.all_agents().items()
    ]


# --- describing supervisors --------------------------------------------------------------------------------------
def running_by_worker() -> dict[int, int]:
    """How many tasks each supervisor (by pk) is running."""
    counts = Task.objects.running().exclude(worker=None).order_by().values("worker").annotate(n=Count("id"))
    return {row["worker"]: row["n"] for row in counts}


def worker_data(worker: Worker, running: dict[int, int], *, private: bool = False) -> dict:
    """A supervisor as health shows it: on the open /health only counts (roots may be private paths); with
    `private`, for an authenticated caller, the roots themselves, its pid and times."""
    data = {
        "name": worker.name,
        "host": worker.host,
        "capacity": worker.capacity,
        "running": running.get(worker.pk, 0),
        "labels": list(worker.labels or ()),
        "started_by": worker.started_by,
        "handing_over": worker.handover_requested_at is not None,
        "executors": {agent: recorded_status(worker, agent).ready for agent in registry.agent_names()},
    }
    if not private:
        return {**data, "roots": len(worker.roots or ())}
    return {
        **data,
        "roots": list(worker.roots or ()),
        "pid": worker.pid,
        "started_at": worker.started_at,
        "heartbeat_at": worker.heartbeat_at,
    }
