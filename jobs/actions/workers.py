"""Supervisors (workers): registered, heartbeating, told apart alive from dead; and what a health check reports."""

import logging
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta

import psutil
from django.utils import timezone

from jobs.actions.tasks import queue_counts
from jobs.models import Worker

log = logging.getLogger(__name__)
WORKER_STALE_AFTER = timedelta(seconds=30)


def register_worker(capacity: int) -> Worker:
    """Record this process as a supervisor, with what tells it apart from a later process with its pid."""
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
    """Tell peers on other hosts that this supervisor is alive."""
    Worker.objects.filter(pk=worker.pk).update(heartbeat_at=timezone.now())


def stop_worker(worker: Worker) -> None:
    """A clean exit: peers need not wait for the heartbeat to go stale."""
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
    """Supervisors with a fresh heartbeat that have not stopped."""
    return list(Worker.objects.live(WORKER_STALE_AFTER))
