"""Benchmark (`make bench`; not collected by pytest): webhook deliveries (issue 32, "Performance and reliability").

    .venv/bin/python tests/bench/webhooks.py [--asks 30] [--backlog 1000] [--down-s 10] [--rounds 2000]

1. `permission.requested` → a receiver on 127.0.0.1: a real `runbridge` (shipped webhook settings) runs the fake
   agent, which asks to run a command; the receiver in this process notes when each delivery arrives, against the
   payload's `created_at` (set in the transaction that records the request, before its commit). Goal: p50 ≤ 50 ms.
2. A backlog while the receiver is down: BACKLOG test deliveries (POST /v1/webhooks/<id>/test) to a port nothing
   listens on, for at least DOWN_S; then the receiver starts there. Goal: every one arrives within a minute of the
   receiver coming up, each exactly once by its delivery id (counted again once Bridge has recorded them all).
3. What the outbox costs `append_events` (in this process, SQLite in a temporary data dir): a batch of output (the
   hot path: it only looks at the batch's kinds), and a status event with no webhook, and with 1 and 10 that want it
   (each a delivery row written in the same transaction). Informational rows; the "limit" column is the same batch
   with no status event in it.
"""

import argparse
import json
import os
import queue
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import fake_agent  # noqa: E402
from tests.bench.table import Row, emit, ms, p50, percentile  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402

P50_GOAL_MS = 50.0
BACKLOG_GOAL_S = 60.0
# The shipped webhook settings: the bench measures what a user gets.
SHIPPED = {
    "BRIDGE_WEBHOOK_BACKOFF_S": "5",
    "BRIDGE_WEBHOOK_TIMEOUT_S": "10",
    "BRIDGE_WEBHOOK_CONCURRENCY": "4",
}


class Receiver:
    """Webhook receiver on 127.0.0.1: (arrival time, payload, delivery id) of every POST, answered 200."""

    def __init__(self, port: int = 0) -> None:
        self.got: queue.Queue[tuple[float, dict, str]] = queue.Queue()
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got.put((time.time(), json.loads(body), self.headers["X-Bridge-Delivery"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def asks_to_receiver(bridge: BridgeServer, asks: int) -> list[float]:
    """Seconds from each request's recording to its delivery's arrival."""
    receiver = Receiver()
    bridge.ok(bridge.post("/v1/webhooks", {"url": receiver.url, "events": ["permission.requested"]}))
    latencies = []
    try:
        for number in range(asks):
            command = json.dumps({"command": f"echo {number}"})
            task_id = bridge.create_task(f"ask Bash {command}\nsay done", bridge.work)
            arrived, payload, _ = receiver.got.get(timeout=30)
            if payload["task"]["id"] != task_id or not payload["permission"]["links"]:
                raise SystemExit(f"unexpected delivery: {payload}")
            latencies.append(arrived - datetime.fromisoformat(payload["created_at"]).timestamp())
            bridge.ok(bridge.decide(task_id, "allow"))
            for _ in bridge.stream(task_id):
                pass
    finally:
        receiver.close()
    return latencies


def backlog_after_outage(bridge: BridgeServer, backlog: int, down_s: float) -> tuple[float, float, int, int]:
    """Queue `backlog` deliveries while the receiver is down; returns (seconds they took to queue, seconds from the
    receiver's start to the last arrival, deliveries received, distinct ids received)."""
    port = free_port()
    webhook = bridge.ok(bridge.post("/v1/webhooks", {"url": f"http://127.0.0.1:{port}/hook"}))
    started = time.monotonic()
    for _ in range(backlog):
        bridge.ok(bridge.post(f"/v1/webhooks/{webhook['id']}/test", {}))
    queued_in = time.monotonic() - started
    time.sleep(max(0.0, down_s - queued_in))  # the receiver stays down that long: nothing to wait on but the clock
    receiver = Receiver(port)
    up = time.monotonic()
    ids: list[str] = []
    try:
        while len(set(ids)) < backlog:
            ids.append(receiver.got.get(timeout=BACKLOG_GOAL_S * 3)[2])
        last = time.monotonic() - up
        while recorded(bridge, webhook["id"]) < backlog:
            time.sleep(0.2)  # Bridge's log, read over REST: no doorbell reaches this process
        while not receiver.got.empty():
            ids.append(receiver.got.get_nowait()[2])
    finally:
        receiver.close()
    return queued_in, last, len(ids), len(set(ids))


def recorded(bridge: BridgeServer, webhook_id: int) -> int:
    webhooks = bridge.ok(bridge.get("/v1/webhooks"))["webhooks"]
    return next(hook["deliveries"]["delivered"] for hook in webhooks if hook["id"] == webhook_id)


def served_rows(asks: int, backlog: int, down_s: float) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bridge-bench-webhooks-") as tmp:
        server = BridgeServer(
            Path(tmp) / "bridge", "http://127.0.0.1:9", claude=fake_agent(Path(tmp)), extra_env=SHIPPED
        )
        with server as bridge:
            latencies = ms(asks_to_receiver(bridge, asks))
            queued_in, last, received, distinct = backlog_after_outage(bridge, backlog, down_s)
    spread = f"p90 {percentile(latencies, 0.9):.1f} ms, max {max(latencies):.1f} ms, {len(latencies)} requests"
    exactly = "each exactly once" if received == distinct == backlog else f"{received} received, {distinct} distinct"
    return [
        Row("permission.requested → receiver (p50)", p50(latencies), goal=P50_GOAL_MS, note=spread),
        Row(
            f"{backlog} deliveries queued while down {down_s:.0f} s: receiver up → last arrives",
            last,
            unit="s",
            goal=BACKLOG_GOAL_S,
            note=f"{exactly}; queued in {queued_in:.1f} s over REST",
        ),
    ]


# --- the hook's cost in append_events ------------------------------------------------------------------------------


def setup_django(tmp: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    os.environ.update(
        DJANGO_SETTINGS_MODULE="bridge.settings",
        BRIDGE_DATA_DIR=str(tmp / "data"),
        BRIDGE_ALLOWED_ROOTS=str(work),
        BRIDGE_LOG_LEVEL="WARNING",
    )
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return work.resolve()


def timed(append, batch: list, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        append(batch)
        times.append(time.perf_counter() - started)
    return times


def hook_rows(rounds: int) -> list[Row]:
    """append_events of an output batch, and of a status event with 0, 1 and 10 webhooks that want it."""
    with tempfile.TemporaryDirectory(prefix="bridge-bench-hook-") as tmp:
        work = setup_django(Path(tmp))
        from jobs import actions
        from jobs.models import Task

        task = actions.create_task(actions.TaskSpec(prompt="the measured task", cwd=str(work)))
        Task.objects.filter(pk=task.pk).update(status="running")
        task.refresh_from_db()

        def append(batch: list) -> None:
            actions.append_events(task, batch)

        output = [("text_delta", {"text": "x" * 40})] * 100
        status = [("text", {"text": "x"}), ("status", {"status": "running"})]
        plain = [("text", {"text": "x"}), ("usage", {"input_tokens": 1})]
        rows = [
            Row("append_events: 100 output events (kinds looked at)", p50(ms(timed(append, output, rounds)))),
            Row(
                "append_events: a status event, no webhook",
                p50(ms(timed(append, status, rounds))),
                limit=p50(ms(timed(append, plain, rounds))),
                note="limit: the same batch without a status event",
            ),
        ]
        for count in (1, 10):
            while len(actions.list_webhooks()) < count:
                actions.create_webhook("http://127.0.0.1:9/hook", events=["task.started"])
            took = p50(ms(timed(append, status, rounds)))
            rows.append(Row(f"append_events: a status event, {count} webhook(s) want it", took))
        rows.append(Row("isdisjoint over 500 kinds (the check alone)", check_alone(), unit="µs"))
    return rows


def check_alone() -> float:
    from jobs.actions.webhooks import EVENT_KINDS

    batch = [("text_delta", {"text": "x"})] * 500
    times = []
    for _ in range(2000):
        started = time.perf_counter()
        EVENT_KINDS.isdisjoint(kind for kind, _ in batch)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--asks", type=int, default=30)
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--down-s", type=float, default=10.0, help="how long the receiver is down, at least")
    parser.add_argument("--rounds", type=int, default=2000, help="appends timed per row")
    args = parser.parse_args()
    rows = served_rows(args.asks, args.backlog, args.down_s) + hook_rows(args.rounds)
    emit(rows)


if __name__ == "__main__":
    main()
