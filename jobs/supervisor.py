"""The supervisor: claims queued tasks, runs each executor as a child process, records what it does.

One `Supervisor` per process (`manage.py supervise`, or inside `manage.py runbridge`); one `TaskRun` thread per
running task. A TaskRun spawns its child itself and lives until the child is reaped, because Linux's parent-death
signal fires when the *thread* that forked the child ends. Each child leads its own process group, so a stop
reaches whatever the agent started too.
"""

import logging
import queue
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from enum import Enum

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from jobs import actions, doorbell, processes
from jobs.errors import Conflict
from jobs.models import PermissionRequest, Task
from jobs.runners import runner_for
from jobs.runners.base import Decision, Runner, RunSpec, Step
from jobs.vocabulary import PermissionStatus, Status

log = logging.getLogger(__name__)

ESSENTIAL_KINDS = frozenset({"init", "result"})
LINE_HEAD_BYTES = 2000
INBOX_SIZE = 10_000
BATCH_LINES = 500
HEARTBEAT_S = 5.0
ORPHAN_SCAN_S = 30.0
EXIT_DRAIN_S = 5.0  # after the child exits, how long to wait for the end of its stdout (a grandchild may hold it)


# --- plain data for the runners ---------------------------------------------------------------------------------
def run_spec(task: Task) -> RunSpec:
    """What the task's runner may read: a copy, so runners never touch the models."""
    return RunSpec(
        agent=task.agent,
        prompt=task.prompt,
        cwd=str(task.cwd),
        permission_mode=task.permission_mode,
        options=dict(task.options or {}),
        resume_session_id=task.resume_session_id,
    )


def decision_for(perm: PermissionRequest) -> Decision:
    """A decided permission request as the runner passes it on."""
    return Decision(
        request_id=perm.request_id,
        status=perm.status,
        tool_input=perm.input,
        updated_input=perm.updated_input,
        message=perm.message,
    )


class LineReader(threading.Thread):
    """Reads a child's stdout as lines; a line over the cap is cut to its head and counted, never held whole."""

    def __init__(self, stream, inbox: queue.Queue, max_bytes: int) -> None:
        super().__init__(daemon=True, name="stdout-reader")
        self.stream, self.inbox, self.max_bytes = stream, inbox, max_bytes

    def run(self) -> None:
        try:
            while line := self.stream.readline(self.max_bytes + 1):
                if len(line) > self.max_bytes and not line.endswith(b"\n"):
                    head, size = line[:LINE_HEAD_BYTES], len(line)
                    while more := self.stream.readline(self.max_bytes + 1):
                        size += len(more)
                        if more.endswith(b"\n"):
                            break
                    self.inbox.put(("oversized", head, size))
                else:
                    self.inbox.put(("line", line))
        except (OSError, ValueError):
            pass
        finally:
            self.inbox.put(("eof",))


class TailReader(threading.Thread):
    """Keeps the last `limit` bytes of a stream (the child's stderr)."""

    def __init__(self, stream, limit: int) -> None:
        super().__init__(daemon=True, name="stderr-reader")
        self.stream, self.limit = stream, limit
        self.buffer = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            while chunk := self.stream.read1(65536):
                self.total += len(chunk)
                self.buffer += chunk
                del self.buffer[: max(0, len(self.buffer) - self.limit)]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        text = self.buffer.decode(errors="replace")
        if self.total > len(self.buffer):
            text = f"[… {self.total - len(self.buffer)} earlier bytes of stderr not kept]\n" + text
        return text


class StopStep(Enum):
    """How far a stop has gone: the agent was asked (its own interrupt, or its turn had already ended), then the
    process group got SIGTERM, then SIGKILL."""

    ASKED = "asked"
    SIGTERM = "SIGTERM"
    SIGKILL = "SIGKILL"


@dataclass
class Stopping:
    """A stop under way (a cancel request or the timeout)."""

    reason: str
    status: str | None  # the status to record; None when the agent had already said how it ended, which stands
    started: float  # time.monotonic() when the stop began; the signals follow BRIDGE_KILL_GRACE_S after it
    step: StopStep = StopStep.ASKED


class TaskRun(threading.Thread):
    """Runs one claimed task from spawn to its recorded end: `_spawn`, `_pump` until the child is gone, `_finish`."""

    def __init__(self, supervisor: "Supervisor", task: Task) -> None:
        super().__init__(daemon=True, name=f"task-{task.public_id}")
        self.supervisor = supervisor
        self.task = task
        self.inbox: queue.Queue = queue.Queue(maxsize=INBOX_SIZE)
        self.proc: subprocess.Popen | None = None
        self.create_time: float | None = None  # with the pid, names the agent even after its pid is reused
        self.runner: Runner | None = None
        self.stderr: TailReader | None = None
        self.pending: list[tuple[str, dict]] = []
        self.output_bytes = 0
        self.truncated = False
        self.session_linked = False
        self.finished = False  # the agent reported how it ended (Claude's result line, ACP's stopReason)
        self.eof = False  # the child's stdout is read to its end
        self.exited_at: float | None = None
        self.abandoned = False  # someone else ended the task (a peer marked it orphaned): stop recording
        self.stopping: Stopping | None = None
        self.deadline = 0.0
        self.last_db_check = 0.0

    def wake(self) -> None:
        try:
            self.inbox.put_nowait(("wake",))
        except queue.Full:
            pass  # the run is busy with output and will look at the database soon anyway

    def run(self) -> None:
        unsubscribe = doorbell.subscribe(str(self.task.public_id), self.wake)
        try:
            self._run()
        except Exception as exc:
            log.exception("task %s: supervisor error", self.task.public_id)
            if self.proc is not None:
                processes.kill_tree(self.proc.pid, self.create_time)
            actions.finish_task(self.task, status=Status.FAILED, error=f"Bridge failed while running it: {exc!r}")
        finally:
            if self.proc is not None:  # after the end is recorded: what left the agent's group, wherever it went
                processes.kill_tagged(str(self.task.public_id))
            unsubscribe()
            connection.close()
            self.supervisor.wake()

    def _run(self) -> None:
        self.runner = runner_for(run_spec(self.task))
        if not self._spawn():
            return
        self._pump()
        if not self.abandoned:
            self._finish()

    # --- the phases -------------------------------------------------------------------------------------------
    def _spawn(self) -> bool:
        """Start the child and its readers; False when it could not start (then the task is recorded as failed)."""
        argv = self.runner.argv()
        try:
            env, with_stdin, tag = self.runner.env(), self.runner.uses_stdin, str(self.task.public_id)
            self.proc = processes.spawn(argv, cwd=self.task.cwd, env=env, stdin_pipe=with_stdin, tag=tag)
        except OSError as exc:
            error = f"could not start {argv[0]!r}: {exc.strerror or exc}"
            if self.runner.executable_setting:
                error += f" (the executable is set by {self.runner.executable_setting})"
            actions.finish_task(self.task, status=Status.FAILED, error=error)
            return False
        # no timeout_s: the operator set no limit (BRIDGE_TASK_TIMEOUT_S=0), so the clock never stops it
        self.deadline = time.monotonic() + self.task.timeout_s if self.task.timeout_s else float("inf")
        self.create_time = processes.process_identity(self.proc.pid) or time.time()
        actions.mark_spawned(self.task, self.proc.pid, self.create_time, argv)
        LineReader(self.proc.stdout, self.inbox, settings.BRIDGE_MAX_LINE_BYTES).start()
        self.stderr = TailReader(self.proc.stderr, settings.BRIDGE_STDERR_TAIL_BYTES)
        self.stderr.start()
        for line in self.runner.stdin_lines():
            self._write(line)
        return True

    def _pump(self) -> None:
        """Record output, pass on decisions and stops, until the child is gone or the task was abandoned."""
        while True:
            items = self._next_items()
            self._read(items)
            self._flush()
            now = time.monotonic()
            if any(item[0] == "wake" for item in items) or now - self.last_db_check >= settings.BRIDGE_POLL_S:
                self.last_db_check = now
                self._check_database()
                if self.abandoned:
                    return
            self._check_clock(now)
            if self._child_gone(now):
                return

    def _finish(self) -> None:
        """Record how the run ended; a stop's status and reason win over what the agent said."""
        self.stderr.join(timeout=2)
        stderr_tail = self.stderr.text()
        self._handle(self.runner.on_exit(stderr_tail), 0)
        self._flush()
        outcome = self.runner.outcome(self.proc.returncode, stderr_tail)
        if self.stopping is not None and self.stopping.status is not None:
            outcome.status, outcome.error = self.stopping.status, self.stopping.reason
        actions.finish_task(self.task, **asdict(outcome), stderr_tail=stderr_tail)

    # --- reading and writing ----------------------------------------------------------------------------------
    def _next_items(self) -> list[tuple]:
        try:
            items = [self.inbox.get(timeout=self._wait_time())]
        except queue.Empty:
            return []
        while len(items) < BATCH_LINES:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        return items

    def _wait_time(self) -> float:
        wait = settings.BRIDGE_POLL_S
        if self.stopping is None:
            wait = min(wait, self.deadline - time.monotonic())
        return max(0.01, wait)

    def _read(self, items: list[tuple]) -> None:
        for item in items:
            if item[0] == "line":
                self._handle(self.runner.on_line(item[1]), len(item[1]))
            elif item[0] == "oversized":
                self._on_oversized(item[1], item[2])
            elif item[0] == "eof":
                self.eof = True

    def _child_gone(self, now: float) -> bool:
        """The child has exited and its stdout is read (or it exited EXIT_DRAIN_S ago and a grandchild holds it)."""
        if self.proc.poll() is None:
            return False
        if self.exited_at is None:
            self.exited_at = now
            processes.kill_tree(self.proc.pid, self.create_time)  # whatever the agent left behind dies with it
        return self.eof or now - self.exited_at > EXIT_DRAIN_S

    def _write(self, line: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(line)
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the child is gone; its exit is recorded when the loop sees it

    def _close_stdin(self) -> None:
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass

    def _handle(self, step: Step, size: int) -> None:
        self.output_bytes += size
        if step.session_id and not self.session_linked:
            actions.link_session(self.task, step.session_id)
            self.session_linked = True
        self._keep(step.events)
        for reply in step.replies:
            self._write(reply)
        for ask in step.asks:
            self._flush()
            perm = actions.record_permission_request(
                self.task,
                request_id=ask.request_id,
                tool_name=ask.tool_name,
                tool_input=ask.tool_input,
                tool_use_id=ask.tool_use_id,
                suggestions=ask.suggestions,
            )
            if perm.status != PermissionStatus.PENDING:
                self._deliver(perm)
        for request_id in step.withdrawn:
            self._flush()
            actions.cancel_permission(self.task, request_id, "the agent withdrew the request")
        if step.finished:
            self.finished = True
            self._close_stdin()

    def _keep(self, events: list[tuple[str, dict]]) -> None:
        """Queue events for recording; past BRIDGE_MAX_OUTPUT_BYTES only the essential ones, after one note."""
        if self.output_bytes > settings.BRIDGE_MAX_OUTPUT_BYTES:
            if not self.truncated:
                self.truncated = True
                limit = settings.BRIDGE_MAX_OUTPUT_BYTES
                note = f"output over {limit} bytes (BRIDGE_MAX_OUTPUT_BYTES): later output is not recorded"
                self.pending.append(("truncated", {"reason": note, "bytes": self.output_bytes}))
            events = [event for event in events if event[0] in ESSENTIAL_KINDS]
        self.pending.extend(events)

    def _on_oversized(self, head: bytes, size: int) -> None:
        limit = settings.BRIDGE_MAX_LINE_BYTES
        self.pending.append(
            (
                "truncated",
                {
                    "reason": f"an output line of {size} bytes is over BRIDGE_MAX_LINE_BYTES ({limit}); its start:",
                    "bytes": size,
                    "head": head.decode(errors="replace"),
                },
            )
        )
        self._handle(self.runner.on_oversized_line(head, size), size)

    def _flush(self) -> None:
        if self.pending:
            events, self.pending = self.pending, []
            actions.append_events(self.task, events)

    def _deliver(self, perm: PermissionRequest) -> None:
        self._write(self.runner.answer(decision_for(perm)))
        actions.mark_delivered(perm)

    # --- the database and the clock ---------------------------------------------------------------------------
    def _check_database(self) -> None:
        """Cancel requests, expired permission requests and decisions to pass on: all come from the database."""
        row = Task.objects.filter(pk=self.task.pk).values("status", "cancel_requested_at", "cancel_reason").get()
        if row["status"] != Status.RUNNING:
            self._abandon(row["status"])
            return
        if self.stopping is None and row["cancel_requested_at"] is not None:
            self._begin_stop(Status.CANCELLED, row["cancel_reason"] or "cancelled by request")
        actions.expire_permissions(self.task)
        for perm in actions.undelivered_decisions(self.task):
            self._deliver(perm)

    def _abandon(self, status: str) -> None:
        """The task was ended elsewhere (a peer found this supervisor's heartbeat stale and marked it orphaned):
        its record is closed, so the agent is stopped at once and nothing more is written."""
        log.warning("task %s is %s elsewhere; killing its agent", self.task.public_id, status)
        processes.kill_tree(self.proc.pid, self.create_time)
        self.pending = []
        self.abandoned = True

    def _check_clock(self, now: float) -> None:
        if self.stopping is None and now >= self.deadline:
            self._begin_stop(Status.TIMEOUT, f"ran longer than its timeout of {self.task.timeout_s} s")
        if self.stopping is not None and self.proc.poll() is None:
            self._escalate(now)

    # --- stopping: interrupt, then SIGTERM, then SIGKILL ------------------------------------------------------
    def _begin_stop(self, status: str, reason: str) -> None:
        """Ask the agent to stop its own way (the runner's stop lines); with nothing to write, SIGTERM at once."""
        if self.finished:
            # The agent already said how it ended; that outcome stands, only its process still has to go.
            self.stopping = Stopping(reason=reason, status=None, started=time.monotonic())
            self.pending.append(("stopping", {"reason": reason, "after_result": True}))
            self._signal(StopStep.SIGTERM)
            return
        self.stopping = Stopping(reason=reason, status=status, started=time.monotonic())
        self.pending.append(("stopping", {"status": status, "reason": reason}))
        lines = self.runner.stop_lines()
        for line in lines:
            self._write(line)
        if not lines:
            self._signal(StopStep.SIGTERM)

    def _escalate(self, now: float) -> None:
        """SIGTERM BRIDGE_KILL_GRACE_S after the stop began, SIGKILL at twice that: an agent may not ignore a stop."""
        grace = settings.BRIDGE_KILL_GRACE_S
        elapsed = now - self.stopping.started
        if self.stopping.step is StopStep.ASKED and elapsed >= grace:
            self._signal(StopStep.SIGTERM)
        elif self.stopping.step is StopStep.SIGTERM and elapsed >= 2 * grace:
            self._signal(StopStep.SIGKILL)

    def _signal(self, step: StopStep) -> None:
        """Terminate, then kill, the agent with everything it started (named by the POSIX signals on every OS)."""
        self.stopping.step = step
        self.pending.append(("signal", {"signal": step.value}))
        if step is StopStep.SIGKILL:
            processes.kill_tree(self.proc.pid, self.create_time)
        else:
            processes.terminate_tree(self.proc.pid, self.create_time)


class Supervisor:
    """Claims tasks up to its capacity and runs them; stops claiming on request and drains."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity or settings.BRIDGE_MAX_CONCURRENT
        self.runs: dict[int, TaskRun] = {}
        self.worker = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.startup_error = ""
        self._exited = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def run(self) -> None:
        """Blocks until request_stop(), then drains running tasks and returns.

        If it cannot start (no database, no migrations), `startup_error` says why and `ready` is set all the same,
        so whoever waits for it can report the reason instead of hanging.
        """
        if not self._start():
            return
        unsubscribe = doorbell.subscribe(doorbell.QUEUE, self.wake)
        heartbeat = threading.Thread(target=self._heartbeat, name="supervisor-heartbeat", daemon=True)
        heartbeat.start()
        log.info("supervisor %s: up to %d tasks at once", self.worker.name, self.capacity)
        self.ready.set()
        try:
            self._serve()
            self._drain()
        finally:
            unsubscribe()
            self._exited.set()
            heartbeat.join(timeout=HEARTBEAT_S + 5)
            actions.stop_worker(self.worker)
            connection.close()

    def _start(self) -> bool:
        """Register this worker and close what a gone supervisor left running; False, with `startup_error`, if not."""
        try:
            self.worker = actions.register_worker(self.capacity)
            self.reap_orphans()
        except Exception as exc:
            log.exception("supervisor: could not start")
            self.startup_error = f"the supervisor could not start: {exc.__class__.__name__}: {exc}"
            if self.worker is not None:
                actions.stop_worker(self.worker)
            connection.close()
            self.ready.set()
            return False
        return True

    def _serve(self) -> None:
        """Claim tasks and look for orphans until request_stop()."""
        next_scan = time.monotonic() + ORPHAN_SCAN_S
        while not self._stop.is_set():
            self._wake.clear()
            self._forget_finished()
            try:
                self._claim()
                if time.monotonic() >= next_scan:
                    self.reap_orphans()
                    next_scan = time.monotonic() + ORPHAN_SCAN_S
            except DatabaseError:
                # A busy or restarting database must not end the supervisor: running tasks go on, and
                # claiming resumes when the database answers again.
                log.exception("supervisor: database error; retrying")
                connection.close()
            close_old_connections()
            self._wake.wait(timeout=settings.BRIDGE_POLL_S)

    def _heartbeat(self) -> None:
        """Its own thread, so a slow claim or scan (or a long drain) never makes peers think this supervisor is dead."""
        while not self._exited.wait(HEARTBEAT_S):
            try:
                actions.heartbeat(self.worker)
            except DatabaseError:
                log.exception("supervisor: heartbeat failed; retrying")
                connection.close()
        connection.close()

    def _forget_finished(self) -> None:
        for pk, run in list(self.runs.items()):
            if not run.is_alive():
                del self.runs[pk]

    def _claim(self) -> None:
        while len(self.runs) < self.capacity and not self._stop.is_set():
            task = actions.claim_next_task(self.worker)
            if task is None:
                return
            run = TaskRun(self, task)
            self.runs[task.pk] = run
            run.start()

    def reap_orphans(self) -> None:
        """Tasks left running by a supervisor that is gone cannot be managed any more: say so, keep their events."""
        for task in actions.find_orphans(self.worker):
            worker = task.worker.name if task.worker else "unknown"
            reason = f"its supervisor ({worker}) stopped while the task was running"
            if (
                task.worker
                and task.worker.host == self.worker.host
                and processes.same_process(task.pid, task.process_create_time)
            ):
                processes.kill_tree(task.pid, task.process_create_time)
                reason += "; the agent process was still alive and has been killed"
            if task.worker and task.worker.host == self.worker.host:
                processes.kill_tagged(str(task.public_id))  # what the agent started, wherever it was re-parented
            actions.mark_orphaned(task, reason + ". Nothing was re-run.")
            log.warning("task %s orphaned: %s", task.public_id, reason)

    def _drain(self) -> None:
        runs = list(self.runs.values())
        if runs:
            log.info("supervisor stopping: waiting up to %d s for %d running tasks", settings.BRIDGE_DRAIN_S, len(runs))
        deadline = time.monotonic() + settings.BRIDGE_DRAIN_S
        for run in runs:
            run.join(timeout=max(0, deadline - time.monotonic()))
        reason = (
            "Bridge's supervisor shut down and the task was still running after "
            f"BRIDGE_DRAIN_S={settings.BRIDGE_DRAIN_S} s"
        )
        for run in runs:
            if run.is_alive():
                try:
                    actions.request_cancel(actions.get_task(run.task.public_id), reason=reason, by="supervisor")
                except Conflict:
                    pass  # it ended between the check and the request
        for run in runs:
            run.join(timeout=2 * settings.BRIDGE_KILL_GRACE_S + 10)
