"""Past one machine, all at once (issue 10): a web process and three `manage.py supervise` processes with different
roots on one PostgreSQL database and one Redis; 300 short tasks; mid-run one supervisor is killed with SIGKILL and
every Bridge connection to the database is dropped (`pg_terminate_backend`).

Every task must end with a reason when it did not succeed; nothing may run twice (each run of the fake agent appends
its task's number to a file outside Bridge, and the database counts `spawned` events); nothing is left queued or
running; and each task ran on a supervisor whose roots hold its cwd. The tasks the killed supervisor was running are
orphaned, and no other supervisor runs them again. A replacement supervisor takes the killed one's queued tasks.

Everything is driven from outside, as an operator would: tasks are created and counted over REST; the database is
read directly only for the final account. Needs PostgreSQL and Redis: skips on a laptop without them, fails in CI.
"""

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support import (
    POSTGRES_URL,
    SuperviseProcess,
    WebProcess,
    fake_agent_script,
    manage,
    postgres_or_skip,
    private_postgres_database,
    redis_or_skip,
    terminate_backends,
)

REDIS_URL = os.environ.get("REDIS_URL") or os.environ.get("BRIDGE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
TASKS = 300
CAPACITY = 4  # per supervisor: 2 cores run 12 fake agents at once, and each supervisor's pool keeps up
SLEEP_S = 0.3  # how long each fake agent works, so that tasks are running when the faults strike
WAIT_S = 75  # for the last task to end, from the first create
SUPERVISORS = {"sup-a": ["a", "shared"], "sup-b": ["b", "shared"], "sup-c": ["c", "shared"]}
TERMINAL = {"done", "failed", "cancelled", "timeout", "orphaned"}


@pytest.fixture
def cluster(tmp_path, settings):
    """The database (made for this test, dropped after it), the roots, and a way to start Bridge processes on them."""
    redis_url = redis_or_skip(REDIS_URL)
    with private_postgres_database(postgres_or_skip(POSTGRES_URL), "scale_out") as (db_url, admin):
        cluster = Cluster(tmp_path, settings, db_url, redis_url, admin)
        try:
            yield cluster
        finally:
            cluster.stop()


class Cluster:
    """One Bridge deployment on this host: four roots, the database and Redis, each process with its own data dir."""

    def __init__(self, tmp_path: Path, settings, db_url: str, redis_url: str, admin) -> None:
        self.tmp, self.settings, self.db_url, self.admin = tmp_path, settings, db_url, admin
        self.db_name = db_url.rsplit("/", 1)[1]
        self.roots = {name: (tmp_path / f"root-{name}").resolve() for name in ("a", "b", "c", "shared")}
        for root in self.roots.values():
            root.mkdir()
        self.ran_log = tmp_path / "ran.log"  # one line per run of the fake agent: its task's number and cwd
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "BRIDGE_ALLOWED_ROOTS")},
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "BRIDGE_CLAUDE_BIN": fake_agent_script(tmp_path),
            "BRIDGE_MAX_CONCURRENT": str(CAPACITY),
            "BRIDGE_DB_POOL_SIZE": str(CAPACITY + 4),
            "BRIDGE_DRAIN_S": "0",
            "BRIDGE_KILL_GRACE_S": "1",
            "BRIDGE_POLL_S": "0.5",
            "PYTHONUNBUFFERED": "1",
        }
        self.supervisors: dict[str, SuperviseProcess] = {}
        self.web: WebProcess | None = None
        manage({**self.env, "BRIDGE_DATA_DIR": str(self.data_dir("migrate"))}, "migrate", "--no-input", "-v0")

    def data_dir(self, name: str) -> Path:
        path = self.tmp / f"data-{name}"
        path.mkdir(exist_ok=True)
        return path

    def start_web(self) -> tuple[str, str]:
        """The web process (serving only, no supervisor of its own) allowing every root; its URL and a token."""
        env = {
            **self.env,
            "BRIDGE_DATA_DIR": str(self.data_dir("web")),
            "BRIDGE_ALLOWED_ROOTS": os.pathsep.join(map(str, self.roots.values())),
        }
        token = manage(env, "token", "create", "scale-out").strip().splitlines()[-1]
        self.web = WebProcess(env, self.tmp / "web.log")
        return self.web.url, token

    def start_supervisor(self, name: str, roots: list[str]) -> SuperviseProcess:
        env = {**self.env, "BRIDGE_DATA_DIR": str(self.data_dir(name))}
        self.supervisors[name] = SuperviseProcess(self.settings, name, [self.roots[r] for r in roots], extra_env=env)
        return self.supervisors[name]

    def sql(self, query: str, *params) -> list[tuple]:
        """A read on the database itself, on a connection of its own (a fault drops the connections it finds)."""
        import psycopg

        with psycopg.connect(self.db_url) as conn:
            return conn.execute(query, params).fetchall()

    def explain(self) -> str:
        """For a failure: where the tasks stand, why queued ones wait, and what each process printed last."""
        by_worker = self.sql(
            "SELECT coalesce(w.name, '-'), t.status, count(*) FROM jobs_task t LEFT JOIN jobs_worker w"
            " ON w.id = t.worker_id GROUP BY 1, 2 ORDER BY 1, 2"
        )
        waits = self.sql("SELECT DISTINCT wait_reason FROM jobs_task WHERE status = 'queued'")
        lines = [f"tasks by supervisor and status: {by_worker}", f"why queued tasks wait: {waits}"]
        for name, proc in self.supervisors.items():
            alive = "alive" if proc.proc.poll() is None else f"exited {proc.proc.returncode}"
            lines += [f"--- {name} ({alive}), its last lines:", *[line.rstrip() for line in proc.lines[-25:]]]
        web = self.web.log()[-3000:] if self.web is not None else ""
        return "\n".join([*lines, "--- web, its log's end:", web])

    def stop(self) -> None:
        for proc in self.supervisors.values():
            proc.stop()
        if self.web is not None:
            self.web.stop()


class Rest:
    """The REST API as a planner uses it: a busy answer (503 database_busy) is retried after its Retry-After. A read
    answered with a 500 is noted in `failures` (asserted on at the end, after the account) and tried again."""

    def __init__(self, url: str, token: str) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30, trust_env=False
        )
        self.statuses: list[int] = []
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def call(self, method: str, path: str, **kwargs) -> dict:
        deadline = time.monotonic() + 30
        while True:
            response = self.client.request(method, path, **kwargs)
            with self.lock:
                self.statuses.append(response.status_code)
            retry = time.monotonic() < deadline
            if response.status_code == 503 and retry:
                assert response.json()["code"] == "database_busy", response.text
                time.sleep(float(response.headers["Retry-After"]))  # what the answer asks a client to do
                continue
            if response.status_code == 500 and method == "GET" and retry:
                self.failures.append(f"{method} {path} {kwargs}: 500 {response.headers['content-type']}")
                time.sleep(0.5)
                continue
            assert response.status_code == 200, f"{method} {path}: {response.status_code} {response.text[:500]}"
            return response.json()

    def count(self, status: str) -> int:
        return self.call("GET", "/v1/tasks", params={"status": status, "limit": 1})["count"]

    def running_on(self, name: str) -> int:
        workers = {w["name"]: w for w in self.call("GET", "/v1/workers")["workers"]}
        return workers[name]["running"] if name in workers else 0


def until(check, what: str, explain, timeout: float = WAIT_S):
    """Look again every 0.1 s until `check()` is truthy (each look is a REST read); fail after `timeout` seconds,
    with what `explain()` tells."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out waiting for {what}\n{explain()}", pytrace=False)
        time.sleep(0.1)
    return value


def prompt(number: int, ran_log: Path) -> str:
    """Append this task's number and the agent's working directory to `ran_log` (a tool call the supervisor allows:
    bypass), work a little, finish."""
    command = json.dumps({"command": f'echo {number} "$PWD" >> {ran_log}'})
    return f"ask Bash {command}\nsleep {SLEEP_S}\nsay done {number}"


def test_three_supervisors_run_300_tasks_once_through_a_kill_and_dropped_connections(cluster):
    started = time.monotonic()
    for name, roots in SUPERVISORS.items():
        cluster.start_supervisor(name, roots)
    rest = Rest(*cluster.start_web())
    dirs = ["a", "b", "c", "shared"]

    def create(number: int) -> tuple[str, int]:
        body = {
            "prompt": prompt(number, cluster.ran_log),
            "cwd": str(cluster.roots[dirs[number % len(dirs)]]),
            "permission_mode": "bypass",
            "timeout_s": 60,
        }
        return rest.call("POST", "/v1/task/create", json=body)["task_id"], number

    with ThreadPoolExecutor(4) as pool:
        numbers = dict(pool.map(create, range(TASKS)))
    created = time.monotonic()

    # Mid-run: kill sup-a while it runs tasks, then drop every connection Bridge has to the database.
    until(
        lambda: rest.count("done") >= TASKS // 4 and rest.running_on("sup-a") > 0,
        "sup-a to be busy mid-run",
        cluster.explain,
    )
    cluster.supervisors["sup-a"].kill()
    killed_with = {
        str(public_id)
        for (public_id,) in cluster.sql(
            "SELECT t.public_id FROM jobs_task t JOIN jobs_worker w ON w.id = t.worker_id "
            "WHERE w.name = 'sup-a' AND t.status IN ('running', 'orphaned')"
        )
    }
    assert killed_with, "sup-a was running tasks when it was killed"
    assert terminate_backends(cluster.admin, cluster.db_name) > 0
    # Its queued tasks in root a wait (saying why) until a replacement serves root a; then drop everything again.
    cluster.start_supervisor("sup-a2", SUPERVISORS["sup-a"])
    done = rest.count("done")
    until(
        lambda: rest.count("done") >= min(done + 30, TASKS - len(killed_with)),
        "progress after the restart",
        cluster.explain,
    )
    assert terminate_backends(cluster.admin, cluster.db_name) > 0

    until(lambda: rest.count("queued") + rest.count("running") == 0, "every task to end", cluster.explain)
    ended = time.monotonic()
    account(cluster, numbers, killed_with)
    for name in ("sup-b", "sup-c", "sup-a2"):
        assert cluster.supervisors[name].proc.poll() is None, f"{name} died:\n" + "".join(
            cluster.supervisors[name].lines[-40:]
        )
    print(
        f"\n{TASKS} tasks on {len(SUPERVISORS)} supervisors (+1 replacement), capacity {CAPACITY} each: created in "
        f"{created - started:.1f} s, all ended {ended - started:.1f} s after the start; {len(killed_with)} orphaned "
        f"by the kill; {rest.statuses.count(503)} busy answers (503) retried"
    )
    assert "Traceback" not in cluster.web.log(), cluster.web.log()[-5000:]
    assert not rest.failures, "answers that should have been 200 or a JSON 503:\n" + "\n".join(rest.failures)


def account(cluster: Cluster, numbers: dict[str, int], killed_with: set[str]) -> None:
    """The final account, from the database and the agents' own log: what ran where, how often, how it ended."""
    rows = cluster.sql(
        "SELECT t.public_id, t.status, t.error, t.cwd, w.name, w.roots FROM jobs_task t "
        "LEFT JOIN jobs_worker w ON w.id = t.worker_id"
    )
    spawned = dict(
        cluster.sql(
            "SELECT t.public_id, count(*) FROM jobs_taskevent e JOIN jobs_task t ON t.id = e.task_id "
            "WHERE e.kind = 'spawned' GROUP BY t.public_id"
        )
    )
    runs: dict[int, list[str]] = {}  # each task's runs: where its agent ran
    for line in cluster.ran_log.read_text().splitlines():
        number, where = line.split(" ", 1)
        runs.setdefault(int(number), []).append(where)
    assert len(rows) == TASKS
    problems = []
    for public_id, status, error, cwd, worker, roots in rows:
        task_id, number = str(public_id), numbers[str(public_id)]
        ran, spawns = len(runs.get(number, [])), spawned.get(public_id, 0)
        seen = f"task {number} ({task_id}, {cwd}): {status} on {worker}, ran {ran}x, spawned {spawns}x, {error!r}"
        if status not in TERMINAL:
            problems.append(f"not ended: {seen}")
        if status != "done" and not error:
            problems.append(f"no reason: {seen}")
        if ran > 1 or spawns > 1:
            problems.append(f"ran twice: {seen}")
        if status == "done" and (ran, spawns) != (1, 1):
            problems.append(f"done without exactly one run: {seen}")
        if any(where != cwd for where in runs.get(number, [])):
            problems.append(f"its agent ran elsewhere ({runs[number]}): {seen}")
        if worker is None or not any(cwd == root or cwd.startswith(root + os.sep) for root in roots):
            problems.append(f"ran where its cwd is not served: {seen} (roots {roots})")
        if task_id in killed_with and (status, worker) != ("orphaned", "sup-a"):
            problems.append(f"running on the killed supervisor, yet not its orphan: {seen}")
        if task_id not in killed_with and status != "done":
            problems.append(f"did not succeed though its supervisor lived: {seen}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
