"""End to end: a client written from hbridge's README and DESIGN polls `GET /v1/task` until `status` is `done` or
`failed`, and comes to that end however the task ends: cancelled, timed out, or orphaned by its supervisor's death.

Real processes on the test database: `runbridge --no-supervisor` serves HTTP, `manage.py supervise` runs the fake
agent, and the client speaks HTTP to the server. The client's pause between polls is its own polling interval (what
hbridge's docs tell a client to do), not a wait for the test: each scenario's step is taken on what a poll answered.
"""

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from jobs import actions
from tests.support import SuperviseProcess, WebProcess, database_url

pytestmark = pytest.mark.django_db(transaction=True)

POLL_INTERVAL_S = 0.1
POLL_DEADLINE_S = 60.0
HBRIDGE_ENDS = ("done", "failed")  # hbridge's README: "poll until status is done or failed"


class HbridgePoller:
    """hbridge's documented client, nothing Bridge-specific: HTTP Basic with the key as password, create, cancel, and
    a poll of one task until its status is done or failed."""

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(base_url=url, auth=("bridge", key), timeout=30.0, trust_env=False)

    def create(self, prompt: str, **fields) -> str:
        reply = self.http.post("/v1/task/create", json={"prompt": prompt, **fields})
        assert reply.status_code == 200, reply.text
        return reply.json()["task_id"]

    def cancel(self, task_id: str) -> None:
        reply = self.http.post("/v1/task/cancel", json={"task_id": task_id})
        assert reply.status_code == 200, reply.text

    def poll(self, task_id: str, on_reply: Callable[[dict], None] = lambda reply: None) -> list[dict]:
        """Every reply of GET /v1/task until one says done or failed; `on_reply` sees each (the scenario's hook)."""
        replies: list[dict] = []
        deadline = time.monotonic() + POLL_DEADLINE_S
        while time.monotonic() < deadline:
            answer = self.http.get("/v1/task", params={"task_id": task_id})
            assert answer.status_code == 200, answer.text
            replies.append(answer.json())
            if replies[-1]["status"] in HBRIDGE_ENDS:
                return replies
            on_reply(replies[-1])
            time.sleep(POLL_INTERVAL_S)  # the client's polling interval
        seen = [(r["status"], r.get("bridge_status")) for r in replies[-3:]]
        raise AssertionError(f"an hbridge client polling {task_id} never saw done or failed; last: {seen}")

    def close(self) -> None:
        self.http.close()


def once_running(act: Callable[[], None]) -> Callable[[dict], None]:
    """A poll hook that does `act` once, on the first reply saying the task runs."""
    done: list[bool] = []

    def hook(reply: dict) -> None:
        if reply.get("bridge_status") == "running" and not done:
            done.append(True)
            act()

    return hook


@pytest.fixture
def supervisor_process(settings, fake_agent, work_root) -> Iterator[SuperviseProcess]:
    sup = SuperviseProcess(settings, "hbridge-poll", [work_root], extra_env={"ANTHROPIC_API_KEY": "unused-by-the-fake"})
    yield sup
    sup.stop()


@pytest.fixture
def client(settings, tmp_path: Path, work_root, supervisor_process) -> Iterator[HbridgePoller]:
    data = tmp_path / "web-data"
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SECRET_KEY")}
    env.update(
        {
            "DATABASE_URL": database_url(settings.DATABASES["default"]),
            "BRIDGE_DATA_DIR": str(data),
            "BRIDGE_ALLOWED_ROOTS": str(work_root),
            "PYTHONUNBUFFERED": "1",
        }
    )
    web = WebProcess(env, tmp_path / "runbridge.log")
    poller = HbridgePoller(web.url, actions.create_token("hbridge-poller")[1])
    yield poller
    poller.close()
    web.stop()


def test_polling_a_cancelled_task_ends_failed_with_bridges_cancelled(client, work_root):
    task_id = client.create("say working\nsleep 30", cwd=str(work_root), permission_mode="bypass")

    replies = client.poll(task_id, once_running(lambda: client.cancel(task_id)))

    assert "running" in [r["bridge_status"] for r in replies[:-1]], "the cancel came while it ran"
    assert (replies[-1]["status"], replies[-1]["bridge_status"]) == ("failed", "cancelled")
    assert {r["status"] for r in replies[:-1]} == {"running"}


def test_polling_a_timed_out_task_ends_failed_with_bridges_timeout(client, work_root):
    task_id = client.create("say working\nsleep 30", cwd=str(work_root), permission_mode="bypass", taskTimeoutMs=1000)

    replies = client.poll(task_id)

    assert (replies[-1]["status"], replies[-1]["bridge_status"]) == ("failed", "timeout")
    assert "timeout of 1 s" in replies[-1]["reason"]
    assert {r["status"] for r in replies[:-1]} <= {"running"}


def test_polling_an_orphaned_task_ends_failed_with_bridges_orphaned(client, work_root, supervisor_process):
    task_id = client.create("say working\nsleep 30", cwd=str(work_root), permission_mode="bypass")

    replies = client.poll(task_id, once_running(supervisor_process.kill))

    assert (replies[-1]["status"], replies[-1]["bridge_status"]) == ("failed", "orphaned")
    assert "hbridge-poll" in replies[-1]["reason"], "the reason names the supervisor that died"
    assert {r["status"] for r in replies[:-1]} == {"running"}
