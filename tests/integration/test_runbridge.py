"""`manage.py runbridge` as an operator meets it: a port already taken, and a burst of connections at once."""

import io
import json
import random
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from functools import partial

import httpx
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.management.commands import runbridge
from tests.bridge_server import REPO, BridgeServer
from tests.support import wait_until


@pytest.fixture
def server(tmp_path):
    with BridgeServer(tmp_path, "http://127.0.0.1:9") as bridge:
        yield bridge


def test_a_port_in_use_fails_at_once_with_what_to_do_and_starts_nothing(tmp_path):
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        bridge = BridgeServer(tmp_path, "http://127.0.0.1:9")
        subprocess.run(
            [sys.executable, str(REPO / "manage.py"), "migrate", "-v0"], cwd=REPO, env=bridge.env, check=True
        )
        run = subprocess.run(
            [sys.executable, str(REPO / "manage.py"), "runbridge", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=bridge.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert run.returncode != 0, run.stdout
    assert f"cannot listen on 127.0.0.1:{port}" in run.stderr and f"PORT={port + 1}" in run.stderr, run.stderr
    with sqlite3.connect(bridge.data_dir / "bridge.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM jobs_worker").fetchone() == (0,), "no supervisor starts before the bind"


def test_two_hundred_connections_at_once_are_all_answered(server):
    """The listen backlog holds a burst: every one of 200 simultaneous connections gets its /health answer."""
    host, port = server.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    answers: list[bytes] = []
    errors: list[str] = []
    start = threading.Barrier(200)

    def get_health() -> None:
        start.wait()
        try:
            with socket.create_connection((host, int(port)), timeout=30) as conn:
                conn.sendall(f"GET /health HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                answers.append(b"".join(iter(lambda: conn.recv(65536), b"")))
        except OSError as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=get_health) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, f"{len(errors)} of 200 connections failed: {errors[:3]}"
    assert len(answers) == 200 and all(answer.startswith(b"HTTP/1.") and b" 200 " in answer[:20] for answer in answers)


def test_a_fresh_data_dir_says_which_migrate_to_run_not_a_traceback(tmp_path):
    bridge = BridgeServer(tmp_path, "http://127.0.0.1:9")
    run = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "runbridge", "--port", "0"],
        cwd=REPO,
        env=bridge.env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    assert shlex.join([sys.executable, str(REPO / "manage.py"), "migrate"]) in run.stderr, run.stderr


def test_start_up_tells_each_executor_and_records_where_it_listens(server):
    """The executors are told before the first task fails, and install_hermes_skill, run separately, writes the
    address this server really listens on."""
    log = server.log_path.read_text()
    assert "Executors:" in log
    assert "claude: NOT READY: not found" in log and "fix: install it" in log, log

    recorded = json.loads((server.data_dir / "server.json").read_text())
    assert recorded["url"] == server.url.rstrip("/")
    env = {**server.env, "HERMES_HOME": str(server.root / "hermes-home")}
    skill = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "install_hermes_skill", "--print"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"{recorded['url']} (where the running Bridge listens" in skill.stdout, skill.stdout + skill.stderr
    assert f'+B="${{BRIDGE_URL:-{recorded["url"]}}}"' in skill.stdout


def raw_request(server: BridgeServer, request_line: bytes) -> tuple[int, dict]:
    """Send one request line as bytes (no client library re-encodes it) and read the whole answer."""
    host, port = server.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(
            request_line
            + f"\r\nHost: {host}\r\nConnection: close\r\nAuthorization: Bearer {server.token}\r\n\r\n".encode()
        )
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        (b"/v1/task?task_id=" + b"a" * 60_000, 422, "invalid_request"),
        (b"/v1/task?task_id=" + b"a" * 70_000, 414, "uri_too_long"),
        ("/v1/task?task_id=6f1c…".encode(), 400, "bad_http_request"),
    ],
    ids=["long-id", "over-the-limit", "raw-non-ascii"],
)
def test_what_never_reaches_django_is_answered_in_the_apis_shape(server, path, status, code):
    """Twisted dropped a 60,000-character task_id without a word and gave the README's pasted `6f1c…` an empty 400."""
    got, body = raw_request(server, b"GET " + path + b" HTTP/1.1")
    assert (got, body["code"]) == (status, code), body
    assert body["error"]


def test_a_new_login_link_without_a_restart(server):
    """Issue 13.12: the link runbridge printed is valid for an hour and once; `login_link` makes another."""
    printed = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "login_link"],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    link = printed.stdout.strip().rsplit(" ", 1)[-1]
    assert link.startswith(server.url.rstrip("/") + "/login/link/"), printed.stdout + printed.stderr
    with httpx.Client(follow_redirects=True, trust_env=False, timeout=30) as browser:
        page = browser.get(link)
        assert page.status_code == 200 and str(page.url).rstrip("/") == server.url.rstrip("/"), page.url
        assert "Tasks" in page.text, "logged in: the dashboard, not the login page"
    unknown = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "login_link", "--user", "nobody"],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode != 0 and "no active user named 'nobody'" in unknown.stderr


# --- stopping: the first Ctrl-C drains while serving, the second cancels (issue 13.7) ----------------------------


def waiting_task(bridge: BridgeServer) -> str:
    """A task whose agent asks to run a command, then says 'finished' once it may."""
    prompt = "ask Bash " + json.dumps({"command": "touch allowed.txt"}) + "\nsay finished"
    task_id = bridge.create_task(prompt, bridge.work)
    wait_until(lambda: bridge.permissions(task_id), what="the agent's permission request")
    return task_id


@pytest.mark.parametrize("web_processes", ["1", "2"])  # one: the supervisor's process serves (Windows' only way)
def test_a_stop_serves_on_until_the_person_has_answered_the_waiting_task(tmp_path, fake_agent, web_processes):
    """Ctrl-C does not end a task that waits for a person: the server goes on serving, says where to answer, and
    stops once the task has finished."""
    env = {"BRIDGE_DRAIN_S": "120", "BRIDGE_WEB_PROCESSES": web_processes}
    with BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), env) as bridge:
        assert f"web processes: {web_processes}" in "\n".join(bridge.stdout_lines)
        task_id = waiting_task(bridge)
        bridge.proc.send_signal(signal.SIGINT)
        link = f"{bridge.url.rstrip('/')}/tasks/{task_id}/"
        wait_until(lambda: link in bridge.output(), what="the drain message naming the waiting task")
        assert "1 wait for a decision" in bridge.output() and "Ctrl-C again cancels them now" in bridge.output()

        assert bridge.decide(task_id, "allow").status_code == 200, "the server still takes the answer"
        assert bridge.proc.wait(timeout=60) == 0, bridge.output()
    with sqlite3.connect(bridge.data_dir / "bridge.sqlite3") as db:
        status, error = db.execute(
            "SELECT status, error FROM jobs_task WHERE public_id = ?", [task_id.replace("-", "")]
        ).fetchone()
    assert (status, error) == ("done", ""), bridge.output()
    assert (bridge.work / "allowed.txt").exists()
    assert "every task has ended; stopped serving" in bridge.output()


@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_a_second_stop_cancels_at_once_and_says_so_on_the_permission(tmp_path, fake_agent, web_processes):
    env = {"BRIDGE_DRAIN_S": "120", "BRIDGE_WEB_PROCESSES": web_processes}
    with BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), env) as bridge:
        task_id = waiting_task(bridge)
        bridge.proc.send_signal(signal.SIGINT)
        wait_until(lambda: "Ctrl-C again cancels them now" in bridge.output(), what="the drain message")
        bridge.proc.send_signal(signal.SIGINT)
        assert bridge.proc.wait(timeout=60) == 0, bridge.output()
    with sqlite3.connect(bridge.data_dir / "bridge.sqlite3") as db:
        row = db.execute(
            "SELECT t.status, t.error, p.status, p.decided_via, p.message FROM jobs_task t "
            "JOIN jobs_permissionrequest p ON p.task_id = t.id WHERE t.public_id = ?",
            [task_id.replace("-", "")],
        ).fetchone()
    status, error, perm_status, decided_via, message = row
    assert (status, perm_status, decided_via) == ("cancelled", "cancelled", "supervisor"), row
    assert "a second stop signal" in error and "a second stop signal" in message and "withdrew" not in message


# --- more web processes on one port (issue 12) ---------------------------------------------------------------------


def web_processes_of(bridge: BridgeServer, count: int = 2) -> list[psutil.Process]:
    """The `count` web processes runbridge started to serve its port (it supervises, and serves nothing itself)."""

    def find() -> list[psutil.Process] | None:
        web = bridge.web_processes()
        return web if len(web) == count else None

    return wait_until(find, what=f"{count} web processes")


def connection_served_by(bridge: BridgeServer, process: psutil.Process) -> socket.socket:
    """A client connection that `process` accepted (the kernel hands each new one to whichever web process takes
    it)."""
    host, port = bridge.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    web = bridge.web_processes()
    opened: list[socket.socket] = []
    try:
        for _ in range(200):
            opened.append(socket.create_connection((host, int(port))))
            address = opened[-1].getsockname()
            wait_until(partial(accepted_by_any, web, address), what="the connection's accept")
            if accepted_by_any([process], address):
                return opened.pop()
    finally:
        for other in opened:
            other.close()
    pytest.fail("200 connections in a row went to the other web processes")


def accepted_by_any(processes: list[psutil.Process], client_address: tuple) -> bool:
    return any(
        c.raddr and tuple(c.raddr) == tuple(client_address) for p in processes for c in p.net_connections(kind="tcp")
    )


@pytest.mark.parametrize("which", [0, 1])
def test_two_web_processes_share_the_port_and_stream_by_push(tmp_path, fake_agent, which):
    """A stream served by either web process hears the supervisor (in runbridge's own process) through the local
    doorbell: with every poll 30 s apart, only a push gets the agent's next line to it within 10 s."""
    env = {"BRIDGE_WEB_PROCESSES": "2", "BRIDGE_POLL_S": "30", "BRIDGE_SSE_HEARTBEAT_S": "30"}
    with BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), env) as bridge:
        assert "web processes: 2" in "\n".join(bridge.stdout_lines)
        web = web_processes_of(bridge)
        task_id = waiting_task(bridge)
        client = connection_served_by(bridge, web[which])
        request = f"GET /v1/task/output/stream?task_id={task_id} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        client.sendall(f"{request}Authorization: Bearer {bridge.token}\r\n\r\n".encode())
        client.settimeout(10)
        received = b""
        while b"permission_request" not in received:
            received += client.recv(65536)

        assert bridge.decide(task_id, "allow").status_code == 200
        while b"finished" not in received:
            received += client.recv(65536)  # a 30 s poll would time out here first
        client.close()
    gone, alive = psutil.wait_procs(web, timeout=30)
    assert not alive, f"web processes outlived runbridge: {alive}"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_burst_of_keep_alive_connections_is_shared_by_both_web_processes(tmp_path, seed):
    """Both processes wait on one socket, and the first to run used to accept the whole burst (a client's pool of
    connections all opened at once): in 5 rounds of 12 the other process served none and one core stayed idle. Each
    round opens a random number of connections at once and answers one request on each. Each process must hold some
    of every burst, and a quarter of them all (a process starved of CPU, on a loaded machine, may take fewer)."""
    rng = random.Random(seed)
    with BridgeServer(tmp_path, "http://127.0.0.1:9", extra_env={"BRIDGE_WEB_PROCESSES": "2"}) as bridge:
        host, port = bridge.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        processes = web_processes_of(bridge)
        rounds = []
        for _ in range(4):
            burst = [socket.create_connection((host, int(port)), timeout=30) for _ in range(rng.randint(6, 12))]
            for conn in burst:
                conn.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            for conn in burst:
                assert read_response(conn).startswith(b"HTTP/1.1 200 ")
            clients = {conn.getsockname() for conn in burst}
            held = [len(connections_from(process, clients)) for process in processes]
            for conn in burst:
                conn.close()
            rounds.append(held)
            assert sum(held) == len(burst) and min(held) >= 1, f"web processes held {rounds}"
            gone = partial(lambda addresses: not any(connections_from(p, addresses) for p in processes), clients)
            wait_until(gone, what="the burst's closes")
        totals = [sum(column) for column in zip(*rounds, strict=True)]
        assert min(totals) >= sum(totals) // 4, f"web processes held {rounds}"


def read_response(conn: socket.socket) -> bytes:
    """One HTTP/1.1 response with a Content-Length, read off a keep-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    while len(body) < length:
        body += conn.recv(65536)
    return head


def connections_from(process: psutil.Process, clients: set) -> list:
    """`process`'s connections whose far end is one of the `clients` addresses."""
    return [c for c in process.net_connections(kind="tcp") if c.raddr and tuple(c.raddr) in clients]


def test_the_web_processes_end_when_runbridge_is_killed(tmp_path, fake_agent):
    with BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), {"BRIDGE_WEB_PROCESSES": "2"}) as bridge:
        web = web_processes_of(bridge)
        bridge.proc.kill()
        gone, alive = psutil.wait_procs(web, timeout=30)  # their stdin pipes closed with the parent
        assert not alive, alive


def test_a_web_process_that_dies_is_replaced_and_tasks_run_on(tmp_path, fake_agent):
    """runbridge starts a web process again when one exits by itself; the task waiting meanwhile is not touched."""
    with BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), {"BRIDGE_WEB_PROCESSES": "2"}) as bridge:
        task_id = waiting_task(bridge)
        dead = web_processes_of(bridge)[0]
        dead.kill()

        def replaced() -> list[psutil.Process] | None:
            web = bridge.web_processes()
            return web if len(web) == 2 and dead.pid not in {process.pid for process in web} else None

        web = wait_until(replaced, what="a new web process")
        for process in web:
            connection_served_by(bridge, process).close()  # each one accepts
        assert bridge.decide(task_id, "allow").status_code == 200
        assert wait_until(lambda: bridge.task(task_id)["status"] == "done" or None, what="the task's end")
        assert f"web process {dead.pid} exited by itself" in bridge.output()


class ExitedAtOnce:
    """A web process that has already exited (the unit test below needs no real one)."""

    def __init__(self) -> None:
        self.pid, self.returncode = 4242, 1
        self.stdin, self.stdout = io.BytesIO(), io.BytesIO()

    def poll(self) -> int:
        return self.returncode


@given(checks=st.lists(st.floats(0.01, 3.0), min_size=1, max_size=40))
def test_a_web_process_that_keeps_exiting_is_started_again_at_most_every_restart_interval(checks):
    """Whenever runbridge looks (at generated intervals), a slot whose process has exited gets a new one only once
    WEB_RESTART_S has passed since the last start there, and then at that very look."""
    clock = [0.0]
    command = runbridge.Command()
    command.web_processes, command.web_started = [ExitedAtOnce()], [0.0]
    command._start_web_process = lambda listener: ExitedAtOnce()
    starts = [0.0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runbridge.time, "monotonic", lambda: clock[0])
        for gap in checks:
            clock[0] += gap
            due = clock[0] - starts[-1] >= runbridge.WEB_RESTART_S
            command._restart_exited(listener=None)
            if due:
                starts.append(clock[0])
            assert command.web_started == [starts[-1]], (starts, clock[0])
