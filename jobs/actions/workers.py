"""Supervisors (workers): registered, heartbeating, told apart alive from dead; and what a health check reports."""

import logging
import socket
import uuid
from datetime import timedelta

import psutil
from django.utils import timezone

from jobs import processes
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
        return processes.same_process(worker.pid, worker.process_create_time)
    return timezone.now() - worker.heartbeat_at < WORKER_STALE_AFTER
