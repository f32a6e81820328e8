"""Several supervisors, each serving its own roots and labels: every task runs only where it may, a task nobody can
serve says why, and health lists each supervisor (docs/architecture.md, "Several hosts").

Real `manage.py supervise` processes on the test database (a SQLite file or PostgreSQL); the test process plays the
web process, with its own allowed roots. Readiness is the supervisor's own log line, never a sleep.
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.test import Client

from jobs import actions
from jobs.core.errors import Refused
from jobs.core.hints import manage_command
from jobs.core.vocabulary import Status
from jobs.models import Task
from tests.support import REPO, SuperviseProcess, database_url, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def supervisors():
    started: list[SuperviseProcess] = []

    def start(*args, **kwargs) -> SuperviseProcess:
        started.append(SuperviseProcess(*args, **kwargs))
        return started[-1]

    yield start
    for each in started:
        each.stop()


@pytest.fixture
def roots(tmp_path, settings) -> dict[str, Path]:
    made = {}
    for name in ("a", "b", "c", "shared", "lonely", "nowhere"):
        made[name] = (tmp_path / f"root-{name}").resolve()
        made[name].mkdir()
    # The web process (this one) allows only `lonely` itself; the others it accepts because a live supervisor
    # on this host serves them.
    settings.BRIDGE_ALLOWED_ROOTS = [made["lonely"]]
    settings.BRIDGE_DEFAULT_CWD = made["lonely"]
    return made


def worker_of(task: Task) -> str:
    task = wait_for(task, timeout=60)
    assert task.status == Status.DONE, (task.status, task.error)
    assert task.wait_reason == ""
    return task.worker.name


def test_each_task_runs_only_on_a_supervisor_that_serves_it(roots, fake_agent, settings, supervisors):
    start = [
        ("sup-a", [roots["a"], roots["shared"]], ()),
        ("sup-b", [roots["b"], roots["shared"]], ()),
        ("sup-c", [roots["c"], roots["shared"]], ("gpu",)),
    ]
    # Queued before any supervisor runs, for a root none will serve: it says so, and the claim loops of the
    # supervisors that start keep the reason up to date.
    lonely = make_task("say lonely", cwd=str(roots["lonely"]))
    assert lonely.wait_reason.startswith("no live supervisor is running")
    procs = {name: supervisors(settings, name, dirs, labels) for name, dirs, labels in start}

    # By root: each root's tasks run on the one supervisor serving it (two each, queued together).
    by_root = {name: [make_task("say hi", cwd=str(roots[name])) for _ in range(2)] for name in ("a", "b", "c")}
    # By target: in the root all three serve, a label and a name pick one.
    on_gpu = [make_task("say gpu", cwd=str(roots["shared"]), target="gpu") for _ in range(3)]
    on_b = [make_task("say b", cwd=str(roots["shared"]), target="sup-b") for _ in range(3)]
    # Nobody has this label: the task says so instead of waiting silently.
    on_tpu = make_task("say tpu", cwd=str(roots["shared"]), target="tpu")

    for name, tasks in by_root.items():
        assert [worker_of(task) for task in tasks] == [f"sup-{name}"] * 2
    assert [worker_of(task) for task in on_gpu] == ["sup-c"] * 3
    assert [worker_of(task) for task in on_b] == ["sup-b"] * 3

    on_tpu.refresh_from_db()
    assert on_tpu.status == Status.QUEUED
    assert "no live supervisor has the name, host or label 'tpu'" in on_tpu.wait_reason
    lonely = wait_for(lonely, lambda t: "sup-c@" in t.wait_reason)  # each change rings the task
    assert lonely.status == Status.QUEUED
    assert lonely.wait_reason.startswith(f"no live supervisor serves {roots['lonely']} (supervisors: ")
    assert "sup-c@" in lonely.wait_reason and "(labels: gpu)" in lonely.wait_reason
    detail = api_client().get("/v1/task", {"task_id": str(lonely.public_id)}).json()
    assert detail["wait_reason"] == lonely.wait_reason and detail["target"] == ""

    # A supervisor serving it appears: the task runs there, and no longer says it waits.
    supervisors(settings, "sup-d", [roots["lonely"]])
    assert worker_of(lonely) == "sup-d"

    # Outside what this process or any live supervisor serves: refused before anything is queued, as before.
    with pytest.raises(Refused):
        make_task("say no", cwd=str(roots["nowhere"]))

    health = Client().get("/health").json()
    listed = {w["name"]: w for w in health["workers"]}
    assert set(listed) == {"sup-a", "sup-b", "sup-c", "sup-d"}
    assert listed["sup-c"]["labels"] == ["gpu"] and listed["sup-c"]["roots"] == 2  # a count: paths stay private
    shown = {"name", "host", "capacity", "running", "labels", "roots", "started_by", "handing_over", "executors"}
    assert all(set(w) == shown for w in listed.values())
    full = {w["name"]: w for w in api_client().get("/v1/workers").json()["workers"]}
    assert full["sup-a"]["roots"] == [str(roots["a"]), str(roots["shared"])]

    # A dead supervisor drops out of health at once (same host: its pid is gone), and its roots are no longer served:
    # this process refuses them unless its own roots hold them, and then the task says that nobody serves it.
    procs["sup-a"].kill()
    assert "sup-a" not in {w["name"] for w in Client().get("/health").json()["workers"]}
    with pytest.raises(Refused):
        make_task("say a again", cwd=str(roots["a"]))
    settings.BRIDGE_ALLOWED_ROOTS = [roots["lonely"], roots["a"]]
    orphaned_root = make_task("say a again", cwd=str(roots["a"]))
    assert orphaned_root.wait_reason.startswith(f"no live supervisor serves {roots['a']}")
    for task in (on_tpu, orphaned_root):
        actions.request_cancel(task, reason="test over")


def test_a_supervisor_name_is_unique_among_live_ones(roots, fake_agent, settings, supervisors):
    supervisors(settings, "twin", [roots["a"]])
    env = {
        **os.environ,
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "BRIDGE_ALLOWED_ROOTS": str(roots["a"]),
    }
    second = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "supervise", "--name", "twin"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert "a supervisor named 'twin' is already running" in second.stderr
    bad = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "supervise", "--label=a b"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "supervisor label 'a b' is not allowed" in bad.stderr


def test_a_target_is_checked_like_other_argv_values(roots, settings):
    settings.BRIDGE_ALLOWED_ROOTS = [roots["a"]]
    response = api_client().post(
        "/v1/task/create",
        {"prompt": "say hi", "cwd": str(roots["a"]), "target": "-rf"},
        content_type="application/json",
    )
    assert response.status_code == 400 and "target" in response.json()["error"]
    ok = api_client().post(
        "/v1/task/create",
        {"prompt": "say hi", "cwd": str(roots["a"]), "target": "gpu"},
        content_type="application/json",
    )
    task = Task.objects.get(public_id=ok.json()["task_id"])
    # The command as it works when pasted: this interpreter and the absolute manage.py.
    assert task.target == "gpu" and task.wait_reason == (
        f"no live supervisor is running: start one (`{manage_command('supervise')}`, or runbridge)"
    )
    assert f"{sys.executable} {REPO / 'manage.py'} supervise" in task.wait_reason
    listed = api_client().get("/v1/tasks").json()["tasks"][0]
    assert listed["target"] == "gpu" and listed["wait_reason"] == task.wait_reason


def api_client() -> Client:
    """A REST client with a fresh token."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {actions.create_token(f'multihost-{uuid.uuid4().hex[:8]}')[1]}")
