"""Scale-out benchmarks (issue 10; `.venv/bin/python tests/bench/scale_out.py`; not collected by pytest): Bridge on
PostgreSQL with Redis, a web process (`runbridge --no-supervisor`) and `manage.py supervise` processes, all driven
over REST with the fake agent.

1. Tasks per second through 1 and through 3 supervisor processes (each BRIDGE_MAX_CONCURRENT=--capacity): --tasks
   one-line tasks created over REST by 4 clients at once; from the first create to the last finish (the database's
   own times), and each task's created → finished latency.
2. The permission round trip: the agent asks (it writes `stamp <time.time()>` just before), the client follows the
   SSE stream, answers over REST at once, and the agent receives the answer (it runs `date +%s.%N`, allowed). With
   the supervisor in another process, with and without REDIS_URL, next to one process (`runbridge` with its own
   supervisor). Shipped settings (BRIDGE_POLL_S=0.5): without Redis only polling carries news between processes.

Prints one table of medians and 95th percentiles, and each round trip's ratio to the single-process one (goal: the
cross-process ones within 2x). Needs PostgreSQL (BRIDGE_TEST_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/
bridge; a database `<name>_bench_scale` is made and dropped) and Redis (REDIS_URL or BRIDGE_TEST_REDIS_URL).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

POSTGRES_URL = os.environ.get("BRIDGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/bridge")
REDIS_URL = os.environ.get("REDIS_URL") or os.environ.get("BRIDGE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
ASK = "stamp 1 0\nask Bash " + json.dumps({"command": "date +%s.%N"}) + "\n"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Bridge:
    """A web process and its supervisors on the benchmark's database, with a REST client."""

    def __init__(self, tmp: Path, env: dict[str, str], name: str, *, supervisors: int, in_process: bool = False):
        from django.conf import settings

        from tests import support

        self.stack = ExitStack()
        self.work = tmp / "work"
        data = tmp / f"data-{name}"
        data.mkdir(exist_ok=True)
        self.env = {**env, "BRIDGE_DATA_DIR": str(data)}
        token = support.manage(self.env, "token", "create", f"bench-{name}").strip().splitlines()[-1]
        web = support.WebProcess(self.env, tmp / f"{name}-web.log", supervisor=in_process)
        self.stack.callback(web.stop)
        for number in range(supervisors):
            sup = support.SuperviseProcess(settings, f"{name}-{number}", [self.work], extra_env=self.env)
            self.stack.callback(sup.stop)
        self.client = httpx.Client(
            base_url=web.url, headers={"Authorization": f"Bearer {token}"}, timeout=30, trust_env=False
        )
        self.stack.callback(self.client.close)

    def call(self, method: str, path: str, **kwargs) -> dict:
        while True:
            response = self.client.request(method, path, **kwargs)
            if response.status_code == 503:  # database_busy: as a client should, try again when it says
                time.sleep(float(response.headers.get("Retry-After", "1")))
                continue
            if response.status_code != 200:
                raise SystemExit(f"{method} {path}: {response.status_code} {response.text[:500]}")
            return response.json()

    def create(self, prompt: str, **fields) -> str:
        body = {"prompt": prompt, "cwd": str(self.work), "timeout_s": 120, **fields}
        return self.call("POST", "/v1/task/create", json=body)["task_id"]

    def close(self) -> None:
        self.stack.close()


def throughput(bridge: Bridge, tasks: int) -> tuple[float, list[float]]:
    """Tasks per second from the first create to the last finish, and each task's created → finished seconds."""
    with ThreadPoolExecutor(4) as pool:
        ids = set(pool.map(lambda n: bridge.create(f"say task {n}"), range(tasks)))
    deadline = time.monotonic() + 120
    while (
        bridge.call("GET", "/v1/tasks", params={"status": "queued", "limit": 1})["count"]
        + bridge.call("GET", "/v1/tasks", params={"status": "running", "limit": 1})["count"]
    ):
        if time.monotonic() > deadline:
            raise SystemExit("tasks still queued or running after 120 s")
        time.sleep(0.1)
    rows = []
    for offset in range(0, tasks * 3, 500):  # every task of this Bridge's database, newest first
        rows += bridge.call("GET", "/v1/tasks", params={"limit": 500, "offset": offset})["tasks"]
    mine = [row for row in rows if row["id"] in ids]
    failed = [row for row in mine if row["status"] != "done"]
    if len(mine) != tasks or failed:
        raise SystemExit(f"{len(mine)} of {tasks} tasks found, {len(failed)} not done: {failed[:3]}")
    span = max(when(r["finished_at"]) for r in mine) - min(when(r["created_at"]) for r in mine)
    return tasks / span, [when(r["finished_at"]) - when(r["created_at"]) for r in mine]


def round_trips(bridge: Bridge, asks: int) -> list[float]:
    """Seconds from the agent's ask to its receiving the answer, for `asks` asks in one task (the first is dropped:
    it pays for the stream's start)."""
    from tests.bridge_server import sse_events

    task_id = bridge.create(ASK * (asks + 1) + "say done")
    answered: set[str] = set()
    for event in sse_events(bridge.client, task_id, deadline_s=120):
        data = event["data"]
        pending = event["event"] == "permission_request" and data.get("permission_status") == "pending"
        if pending and data["request_id"] not in answered:
            answered.add(data["request_id"])
            body = {"task_id": task_id, "behavior": "allow", "request_id": data["request_id"]}
            bridge.call("POST", "/v1/task/permission", json=body)
    events = bridge.call("GET", "/v1/task/events", params={"task_id": task_id, "limit": 5000})
    if events["status"] != "done":
        raise SystemExit(f"the permission task ended {events['status']}")
    texts = [e["data"]["text"] for e in events["events"] if e["kind"] == "text"]
    asked = [float(text.split()[1]) for text in texts if text.startswith("stamp ")]
    received = [float(str(e["data"]["content"]).strip()) for e in events["events"] if e["kind"] == "tool_result"]
    if len(asked) != asks + 1 or len(received) != asks + 1:
        raise SystemExit(f"{len(asked)} asks and {len(received)} answers seen, not {asks + 1}")
    return [got - sent for sent, got in zip(asked, received, strict=True)][1:]


def row(name: str, values: list[float], unit: str = "ms", scale: float = 1000, extra: str = "") -> str:
    median, p95 = statistics.median(values) * scale, percentile(values, 0.95) * scale
    return f"| {name:<50} | {len(values):>4} | {median:>9.1f} {unit:<3} | {p95:>9.1f} {unit:<3} | {extra:<14} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=120, help="tasks per throughput run")
    parser.add_argument("--capacity", type=int, default=4, help="BRIDGE_MAX_CONCURRENT of each supervisor")
    parser.add_argument("--asks", type=int, default=25, help="permission round trips per configuration")
    args = parser.parse_args()
    started = time.monotonic()
    outer = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY")}
    with tempfile.TemporaryDirectory(prefix="bridge-bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ.pop("DATABASE_URL", None)
        os.environ.pop("REDIS_URL", None)
        os.environ.update({"DJANGO_SETTINGS_MODULE": "bridge.settings", "BRIDGE_DATA_DIR": str(tmp / "bench")})
        import django

        django.setup()
        from tests import support

        (tmp / "work").mkdir()
        with support.private_postgres_database(POSTGRES_URL, "bench_scale") as (db_url, _admin):
            base = {
                **outer,
                "DATABASE_URL": db_url,
                "BRIDGE_ALLOWED_ROOTS": str((tmp / "work").resolve()),
                "BRIDGE_CLAUDE_BIN": support.fake_agent_script(tmp),
                "BRIDGE_MAX_CONCURRENT": str(args.capacity),
                "BRIDGE_DB_POOL_SIZE": str(args.capacity + 6),
                "BRIDGE_DRAIN_S": "0",
                "BRIDGE_POLL_S": "0.5",  # the shipped setting, for the supervisors too
                "PYTHONUNBUFFERED": "1",
            }
            support.manage({**base, "BRIDGE_DATA_DIR": str(tmp / "bench")}, "migrate", "--no-input", "-v0")
            redis = {**base, "REDIS_URL": REDIS_URL}
            lines = run_all(tmp, base, redis, args)
    print("\n".join(lines))
    print(f"(the benchmark took {time.monotonic() - started:.0f} s)")


def run_all(tmp: Path, plain: dict[str, str], redis: dict[str, str], args) -> list[str]:
    results: dict[str, list[float]] = {}
    rates: dict[int, float] = {}
    for supervisors in (1, 3):
        bridge = Bridge(tmp, redis, f"tp{supervisors}", supervisors=supervisors)
        try:
            rates[supervisors], results[f"tp{supervisors}"] = throughput(bridge, args.tasks)
            if supervisors == 1:
                results["rt-redis"] = round_trips(bridge, args.asks)
        finally:
            bridge.close()
    for name, env, in_process in (("rt-local", plain, False), ("rt-single", plain, True)):
        bridge = Bridge(tmp, env, name, supervisors=0 if in_process else 1, in_process=in_process)
        try:
            results[name] = round_trips(bridge, args.asks)
        finally:
            bridge.close()
    single = statistics.median(results["rt-single"])
    ratio = {name: statistics.median(results[name]) / single for name in ("rt-single", "rt-redis", "rt-local")}
    head = f"| {'measure':<50} | {'n':>4} | {'median':>13} | {'p95':>13} | {'rate / ratio':<14} |"
    return [
        "",
        f"PostgreSQL, fake agent, {os.cpu_count()} CPUs; supervisors with capacity {args.capacity} each",
        head,
        "|" + "|".join("-" * (len(part) + 0) for part in head.split("|")[1:-1]) + "|",
        row("1 supervisor: task created -> finished", results["tp1"], extra=f"{rates[1]:.1f} tasks/s"),
        row("3 supervisors: task created -> finished", results["tp3"], extra=f"{rates[3]:.1f} tasks/s"),
        row("permission round trip, one process", results["rt-single"], extra="1.00x"),
        row("permission round trip, supervisor apart, Redis", results["rt-redis"], extra=f"{ratio['rt-redis']:.2f}x"),
        row("permission round trip, apart, local doorbell", results["rt-local"], extra=f"{ratio['rt-local']:.2f}x"),
        "",
        "ratio: median round trip / the one-process median (goal: within 2x).",
    ]


if __name__ == "__main__":
    main()
