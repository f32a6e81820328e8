"""Benchmark: what a flood of datagrams from another local program costs a Bridge process that listens on the local
doorbell (jobs/core/doorbell.py, `_LocalBell`).

The receiver (this script with --receive: Django on a fresh data dir and SQLite database) is what runbridge runs on
one process: an idle `Supervisor` listening on the local doorbell, and an open task list that looks at the database
each time TASKS rings. This process sends it --flood datagrams without the install's secret (by default a task's key,
which where datagrams are not checked rings TASKS; `--payload queue` wakes the claim loop instead), in batches, each
followed by a ring of its own through the doorbell (`_LocalBell.send`) that the receiver acknowledges: so no batch
outruns the socket's receive buffer, and every datagram sent is read (--batch equal to --flood sends them all at once
instead; the kernel then drops what does not fit). The receiver's CPU seconds (user + system, psutil `cpu_times`)
over the flood, less those of the same acknowledged rings alone, divided by the datagrams it read, is the cost of one.

    .venv/bin/python tests/bench/doorbell_flood.py [--flood 100000] [--batch 100] [--payload KEY]
"""

import argparse
import asyncio
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.table import Row, emit  # noqa: E402

SENTINEL = "bench-sentinel"
FOREIGN_KEY = "0b7c6e2a-3d4f-4a8b-9c1d-2e3f4a5b6c7d"  # a task's key: it rings TASKS too, so an open task list looks
ACK_WAIT_S = 2.0  # a sentinel not acknowledged by then was dropped (a full receive buffer): it is sent again


def receive() -> None:
    """The receiver: a supervisor and an open task list, which also acknowledges each sentinel with two counts: the
    flood's datagrams that woke a subscriber, and those the doorbell dropped (-1: it drops none)."""
    import django

    django.setup()
    from jobs.core import doorbell
    from jobs.supervision.supervisor import Supervisor

    heard = threading.Semaphore(0)
    woken = [0]
    sentinel = [False]  # its TASKS ring comes next (a datagram's rings are rung in turn, on one thread)

    def on_queue() -> None:
        woken[0] += 1

    def on_sentinel() -> None:
        sentinel[0] = True

    def on_tasks() -> None:  # every key but QUEUE rings TASKS too
        if sentinel[0]:
            sentinel[0] = False
            heard.release()
        else:
            woken[0] += 1

    doorbell.subscribe(doorbell.QUEUE, on_queue, remote=False)
    doorbell.subscribe(SENTINEL, on_sentinel, remote=False)
    doorbell.subscribe(doorbell.TASKS, on_tasks, remote=False)
    threading.Thread(target=asyncio.run, args=(task_list(),), daemon=True).start()
    supervisor = Supervisor(name="bench-doorbell")
    threading.Thread(target=supervisor.run, daemon=True).start()
    if not supervisor.ready.wait(60) or supervisor.startup_error:
        raise SystemExit(f"the supervisor did not start: {supervisor.startup_error}")
    print("ready", flush=True)
    while True:
        heard.acquire()
        print(f"heard {woken[0]} {getattr(doorbell._local, 'foreign', -1)}", flush=True)


async def task_list() -> None:
    """What an open task list does in a web process (jobs/web/consumers.py, TaskListConsumer): a look at the
    database each time TASKS rings (rings that come while it looks are one)."""
    from django.db.models import Max

    from jobs import actions
    from jobs.core import doorbell
    from jobs.models import TaskEvent

    def look() -> None:
        actions.settle_running_tasks()
        TaskEvent.objects.aggregate(latest=Max("pk"))

    waiter = doorbell.AsyncWaiter(doorbell.TASKS)
    while True:
        await waiter.wait(None)
        await asyncio.to_thread(look)


class Receiver:
    """The receiver process, its acknowledgements read by a thread so a wait for one can time out."""

    def __init__(self) -> None:
        argv = [sys.executable, __file__, "--receive"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        if self.lines.get(timeout=60) != "ready":
            raise SystemExit("the receiver did not start")
        self.process = psutil.Process(self.proc.pid)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def acknowledged(receiver: Receiver) -> list[int]:
    """Ring the sentinel through the doorbell until the receiver says it heard it; returns its counts."""
    from jobs.core import doorbell

    while True:
        doorbell._local.send(SENTINEL)
        try:
            return [int(word) for word in receiver.lines.get(timeout=ACK_WAIT_S).split()[1:]]
        except queue.Empty:
            continue  # dropped with a full receive buffer: ring again


def flood(receiver: Receiver, count: int, batch: int, payload: bytes | None) -> tuple[float, list[int]]:
    """Send `count` datagrams in batches of `batch`, each batch followed by an acknowledged ring (with no payload,
    only the rings: what the measure itself costs). Returns the receiver's CPU seconds and its last counts."""
    from jobs.core import doorbell

    port = int(next(doorbell._local.folder().iterdir()).name.split("-")[1])
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    started = receiver.cpu_s()
    counts = [0, 0]
    for start in range(0, count, batch):
        for _ in range(min(batch, count - start) if payload is not None else 0):
            sender.sendto(payload, (doorbell.LOOPBACK, port))
        counts = acknowledged(receiver)
    sender.close()
    return receiver.cpu_s() - started, counts


def measure(args: argparse.Namespace) -> tuple[float, float, float, int, int]:
    """The flood's CPU seconds and wall seconds, the acknowledged rings' alone, and the receiver's two counts."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    receiver = Receiver()
    try:
        began = time.monotonic()
        flood_s, (woken, foreign) = flood(receiver, args.flood, args.batch, args.payload.encode())
        wall_s = time.monotonic() - began
        rings_s, _ = flood(receiver, args.flood, args.batch, None)
    finally:
        receiver.stop()
    return flood_s, wall_s, rings_s, woken, foreign


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100, help="datagrams between two acknowledged rings")
    parser.add_argument("--payload", default=FOREIGN_KEY, help="what each datagram holds (default: a task's key)")
    parser.add_argument("--receive", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receive:
        receive()
        return
    os.environ.update({"DJANGO_SETTINGS_MODULE": "bridge.settings", "BRIDGE_LOG_LEVEL": "WARNING"})
    data = tempfile.mkdtemp(prefix="bench-doorbell-")
    os.environ["BRIDGE_DATA_DIR"] = data
    try:
        flood_s, wall_s, rings_s, woken, foreign = measure(args)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    read = woken + max(foreign, 0)
    per_us = (flood_s - rings_s) / read * 1e6 if read else None
    note = f"{read:,} of {args.flood:,} read, {woken:,} woke a subscriber; {wall_s:.1f} s"
    emit(
        [
            Row("doorbell: receiver CPU over the flood", flood_s, "s", note=note),
            Row("doorbell: receiver CPU for its acknowledged rings alone", rings_s, "s"),
            Row("doorbell: receiver CPU per foreign datagram", per_us, "µs"),
        ]
    )


if __name__ == "__main__":
    main()
