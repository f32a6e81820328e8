"""A full disk is an outage, not a bug (docs/architecture.md, "Database outages"): a real `runbridge` whose data
directory is a 20 MB tmpfs this module mounts, and a fake agent that floods it full.

One scenario, run once for the test run (it takes about half a minute), records what it saw; each test then judges one
behaviour of it. While the disk is full: authenticated reads answer 200 (their token's bookkeeping cannot be
written), a write answers 503 `storage_full` with Retry-After, and /health says the store is full. The flooding agent
is stopped after BRIDGE_DB_OUTAGE_S; once space is freed its task ends `failed`, saying the disk was full, its
transcript whole up to a bounded summary of what was dropped. A new task runs. Then the disk is filled again under a
running task and Bridge is sent SIGTERM: its drain ends within BRIDGE_DRAIN_S. The database stays intact throughout.

Mounting needs root; where it cannot mount, the module skips with the reason (and fails when CI is set).
"""

import errno
import os
import pickle
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from tests.bridge_server import BridgeServer, run_manage
from tests.support import fake_agent_script, skip_or_fail, wait_until

MOUNT_SIZE = "20m"
BALLAST_BYTES = 10 * 1024 * 1024  # freed to give space back: half the file system, more than the WAL can hold back
OUTAGE_S = 3
DRAIN_S = 5
KILL_GRACE_S = 1
FLOOD = "flood 40000 1000\nsleep 300"  # 40 MB of output, then an agent that lives on
FULL_LOG_LINE = "nothing can be stored, the disk that holds the database is full"
PROBE = "full_disk_probe"  # the test's own table in Bridge's database (take_the_last_room)
SQLITE_FULL = 13


@contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` for the block, unmounted after it whatever happens."""
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        skip_or_fail(
            f"a small file system is mounted for this test, which needs root and mount(8) (euid {os.geteuid()})"
        )
    path.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], capture_output=True, text=True
    )
    if made.returncode != 0:
        skip_or_fail(
            f"cannot mount a tmpfs at {path}: {made.stderr.strip() or made.returncode} (needs mount permission)"
        )
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # still busy (a process that has not exited yet)


def fill(path: Path, database: Path) -> None:
    """Write a file at `path` until its file system has no room left for a byte more, then take the room left inside
    the database's write-ahead log (`take_the_last_room`): nothing that needs a byte more can be written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1024 * 1024, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    take_the_last_room(database)


def take_the_last_room(database: Path) -> None:
    """Commit one-row updates of the test's own table until not one more fits. A write that failed for a full disk
    leaves the room it had taken at the end of SQLite's WAL (the next write starts there), and a small write still
    fits into it: this takes that room, so no write of Bridge's finds any. Its commits start no checkpoint, which
    could move the WAL back to its start and leave room again."""
    with closing(sqlite3.connect(database, timeout=30, isolation_level=None)) as db:
        db.execute("PRAGMA wal_autocheckpoint = 0")
        for _ in range(100_000):  # far more pages than 20 MB hold
            try:
                db.execute(f"UPDATE {PROBE} SET n = n + 1")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF == SQLITE_FULL:
                    return
                raise
    pytest.fail("100,000 commits fitted into a full 20 MB file system: something gives the WAL room again")


def make_probe(database: Path) -> None:
    with closing(sqlite3.connect(database, timeout=30, isolation_level=None)) as db:
        db.execute(f"CREATE TABLE {PROBE} (n INTEGER)")
        db.execute(f"INSERT INTO {PROBE} VALUES (0)")


@dataclass
class Seen:
    """What the scenario saw, for the tests to judge one behaviour at a time."""

    reads_while_full: list[httpx.Response] = field(default_factory=list)
    bookkeeping_failed: bool = False  # the reads' token could not be marked used (logged)
    write_while_full: httpx.Response | None = None
    health_while_full: httpx.Response | None = None
    full_at: float = 0.0  # time.monotonic() when the run logged that nothing could be stored
    agent_stopped_at: float = 0.0
    status_when_stopped: str = ""  # the flooding task's status, read when its agent was seen gone
    freed_at: float = 0.0
    ended_at: float = 0.0
    flood: dict = field(default_factory=dict)  # GET /v1/task once it ended
    events: list[dict] = field(default_factory=list)  # its whole transcript
    new_task: dict = field(default_factory=dict)
    health_after: httpx.Response | None = None
    drain_s: float = 0.0  # from SIGTERM until runbridge exited, with the disk full under a running task
    drain_under_a_task: bool = False  # a task's agent was running when the disk filled
    drain_exit_code: int | None = None
    integrity: str = ""


def status_of(task: dict) -> str:
    return task.get("bridge_status", task["status"])  # /v1/task may give hbridge's word, with Bridge's beside it


def transcript(server: BridgeServer, task_id: str) -> list[dict]:
    events: list[dict] = []
    while True:
        since = events[-1]["seq"] if events else 0
        page = server.ok(server.get("/v1/task/events", task_id=task_id, since=since, limit=5000))
        if not page["events"]:
            return events
        events.extend(page["events"])


def ended(server: BridgeServer, task_id: str) -> dict | None:
    task = server.task(task_id)
    return task if status_of(task) not in ("queued", "running") else None


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def logged(server: BridgeServer, text: str) -> bool:
    return text in server.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def seen(tmp_path_factory, worker_id, testrun_uid) -> Seen:
    return once_per_run(tmp_path_factory, worker_id, f"full-disk-{testrun_uid}", lambda: watch(tmp_path_factory))


def once_per_run(tmp_path_factory, worker_id: str, name: str, make: Callable[[], Seen]) -> Seen:
    """`make()` once for the whole test run. pytest-xdist's work stealing may hand the last tests of this module to
    another worker, whose module fixture would run the half-minute scenario a second time: the first worker to get
    here runs it and leaves what it saw (pickled) in the directory all workers share; the others wait on the lock and
    read that."""
    if worker_id == "master":  # not distributed: the module fixture runs once
        return make()
    import fcntl  # POSIX only, as mounting is: imported here so the module still loads elsewhere

    shared = tmp_path_factory.getbasetemp().parent  # the run's base directory above each worker's own
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        saved = shared / f"{name}.pickle"
        if saved.exists():
            return pickle.loads(saved.read_bytes())
        seen = make()
        saved.write_bytes(pickle.dumps(seen))
        return seen


def watch(tmp_path_factory) -> Seen:
    """The scenario on a fresh tmpfs and a fresh runbridge: what it saw."""
    root = tmp_path_factory.mktemp("full-disk")
    with small_filesystem(root / "bridge" / "data", MOUNT_SIZE) as data:
        env = {
            "BRIDGE_DB_OUTAGE_S": str(OUTAGE_S),
            "BRIDGE_DRAIN_S": str(DRAIN_S),
            "BRIDGE_KILL_GRACE_S": str(KILL_GRACE_S),
            "BRIDGE_SANDBOX": "off",
            "BRIDGE_HERMES_BIN": str(root / "no-such-hermes"),
        }
        server = BridgeServer(
            root / "bridge", fake_url="http://127.0.0.1:9", claude=fake_agent_script(root), extra_env=env
        )
        with server:
            return run_scenario(server, data)


def run_scenario(server: BridgeServer, data: Path) -> Seen:
    seen = Seen()
    reader_token = (
        run_manage(["token", "create", "reader", "--scope", "read"], server.env).stdout.strip().splitlines()[-1]
    )
    reader = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {reader_token}"}, trust_env=False)
    database = data / "bridge.sqlite3"
    make_probe(database)
    (data / "ballast").write_bytes(b"\0" * BALLAST_BYTES)
    flood = server.create_task(FLOOD, server.work)
    wait_until(lambda: logged(server, FULL_LOG_LINE), timeout=60, what="the flood to fill the disk")
    seen.full_at = time.monotonic()
    fill(data / "filler", database)  # the last bytes too: a write small enough for them would land
    pid = server.task(flood)["pid"]
    with reader:  # the reader token's first use: its bookkeeping cannot be written now
        seen.reads_while_full = [reader.get("/v1/task", params={"task_id": flood}), reader.get("/v1/tasks")]
    seen.bookkeeping_failed = logged(server, "its last use was not recorded")
    seen.write_while_full = server.post("/v1/task/create", {"prompt": "say hi", "cwd": str(server.work)})
    seen.health_while_full = server.client.get("/health")
    wait_until(lambda: not alive(pid), timeout=OUTAGE_S + 30, what="the flooding agent to be stopped")
    seen.agent_stopped_at = time.monotonic()
    seen.status_when_stopped = status_of(server.task(flood))
    (data / "ballast").unlink()
    (data / "filler").unlink()
    seen.freed_at = time.monotonic()
    seen.flood = wait_until(lambda: ended(server, flood), timeout=60, what="the flooding task to end")
    seen.ended_at = time.monotonic()
    seen.events = transcript(server, flood)
    new_task = server.create_task("say back again", server.work)
    seen.new_task = once_ended(server, new_task, within=60)
    seen.health_after = health_once_ok(server, within=30)
    drain_while_full(server, data, seen)
    seen.integrity = integrity_of(database)
    return seen


def wait_for_pid(server: BridgeServer, task_id: str, within: float) -> int | None:
    """The pid of the task's agent once it is recorded, or None after `within` seconds."""
    deadline = time.monotonic() + within
    while not (pid := server.task(task_id)["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pid


def once_ended(server: BridgeServer, task_id: str, within: float) -> dict:
    """The task once it has ended, or as it is after `within` seconds (it rings no one outside the server)."""
    deadline = time.monotonic() + within
    while status_of(task := server.task(task_id)) in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
    return task


def health_once_ok(server: BridgeServer, within: float) -> httpx.Response:
    """/health's first answer that says the store is ok, or its last within `within` seconds."""
    deadline = time.monotonic() + within
    while (response := server.client.get("/health")).json().get("storage") != "ok" and time.monotonic() < deadline:
        time.sleep(0.2)  # a snapshot at most 1 s old: nothing rings when it changes
    return response


def drain_while_full(server: BridgeServer, data: Path, seen: Seen) -> None:
    """A task runs, the disk fills under it, and Bridge is asked to stop: how long the drain takes."""
    quiet = server.create_task("sleep 300", server.work)
    seen.drain_under_a_task = bool(wait_for_pid(server, quiet, within=30))
    fill(data / "filler", data / "bridge.sqlite3")
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    seen.drain_exit_code = server.proc.wait(timeout=DRAIN_S + 60)
    seen.drain_s = time.monotonic() - t0
    (data / "filler").unlink()


def integrity_of(database: Path) -> str:
    with sqlite3.connect(database) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


# --- while the disk is full ---------------------------------------------------------------------------------------


def test_authenticated_reads_answer_200_while_the_disk_is_full(seen):
    assert seen.bookkeeping_failed, "the token's first use while the disk is full: marking it used cannot be written"
    assert [r.status_code for r in seen.reads_while_full] == [200, 200], [r.text for r in seen.reads_while_full]


def test_a_write_while_the_disk_is_full_answers_503_storage_full_with_retry_after(seen):
    response = seen.write_while_full
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "storage_full"
    assert "full" in response.json()["error"]
    assert int(response.headers["Retry-After"]) > 0


def test_health_says_the_store_is_full_while_it_is(seen):
    body = seen.health_while_full.json()
    assert (seen.health_while_full.status_code, body["status"], body["storage"]) == (503, "degraded", "full")


def test_the_agent_is_stopped_after_the_outage_limit_while_nothing_can_be_recorded(seen):
    assert seen.status_when_stopped == "running", "nothing can be written while the disk is full"
    assert OUTAGE_S - 1 < seen.agent_stopped_at - seen.full_at < OUTAGE_S + 10


# --- once space is freed ------------------------------------------------------------------------------------------


def test_the_flooding_task_ends_failed_saying_the_disk_was_full_once_space_is_freed(seen):
    assert status_of(seen.flood) == "failed"
    error = seen.flood["error"]
    assert "disk that holds the database was full" in error and f"(BRIDGE_DB_OUTAGE_S={OUTAGE_S})" in error
    assert seen.ended_at - seen.freed_at < 30


def test_its_transcript_ends_with_its_terminal_event_and_has_no_gap(seen):
    seqs = [event["seq"] for event in seen.events]
    assert seqs == list(range(1, len(seqs) + 1)) and seqs[-1] == seen.flood["last_seq"]
    last = seen.events[-1]
    assert (last["kind"], last["data"]["status"]) == ("status", "failed")


def test_the_output_held_past_the_bound_is_dropped_and_the_transcript_says_so(seen):
    notes = [event["data"] for event in seen.events if event["kind"] == "truncated"]
    full_notes = [note for note in notes if "the disk that holds the database is full" in note["reason"]]
    assert full_notes and all("BRIDGE_DB_FULL_BUFFER_BYTES" in note["reason"] for note in full_notes)
    assert sum(note["events"] for note in full_notes) > 0


def test_a_new_task_runs_once_space_is_back(seen):
    assert status_of(seen.new_task) == "done", seen.new_task["error"]


def test_health_says_ok_again_once_space_is_back(seen):
    body = seen.health_after.json()
    assert (seen.health_after.status_code, body["status"], body["storage"]) == (200, "ok", "ok")


# --- a drain with the disk full, and the database after it all ----------------------------------------------------


def test_a_drain_while_the_disk_is_full_ends_within_bridge_drain_s(seen):
    assert seen.drain_under_a_task, "a task was running when the disk filled"
    assert seen.drain_exit_code == 0
    # past BRIDGE_DRAIN_S: its agent's stop (at most twice the grace) and the processes' own exit
    assert seen.drain_s < DRAIN_S + 2 * KILL_GRACE_S + 2, f"SIGTERM to exit took {seen.drain_s:.1f} s"


def test_the_database_stays_intact(seen):
    assert seen.integrity == "ok"
