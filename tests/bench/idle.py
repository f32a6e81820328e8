"""Benchmark (`make bench`): 200 running tasks whose agents all sleep, what the Bridge server costs meanwhile.

Measured on the `runbridge` process (the supervisor) and the web processes it started, once every task's agent is
spawned: their resident memory, their threads, the CPU they burn over SAMPLE_S while nothing happens, and how
fast `/health` answers. Then the same with an SSE stream open on every task, as a client watching them all holds
them (each has read its first events and waits for news).
"""

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import SHIPPED, fake_agent  # noqa: E402
from tests.bench.table import Row, emit, ms, p50  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402

SAMPLE_S = 10.0


def all_spawned(bridge: BridgeServer, ids: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(ids)
    while waiting:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(waiting)} of {len(ids)} tasks not spawned after {timeout} s")
        for event in bridge.stream(waiting[0], deadline_s=timeout):
            if event["event"] == "text":
                waiting.pop(0)
                break


def cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(times.user + times.system for times in (process.cpu_times() for process in processes))


def memory_mb(processes: list[psutil.Process]) -> tuple[float, str]:
    """Their memory together: PSS where the OS reports it (a page they share, such as a library's, counted once
    across them), else the sum of their RSS (shared pages counted in each)."""
    try:
        return sum(process.memory_full_info().pss for process in processes) / 2**20, "PSS"
    except (AttributeError, psutil.AccessDenied):
        return sum(process.memory_info().rss for process in processes) / 2**20, "RSS"


def open_streams(bridge: BridgeServer, ids: list[str]) -> list[socket.socket]:
    """One SSE stream per task, each read until its first event with a seq (it has read the database)."""
    address = urlsplit(bridge.url)
    streams = []
    for task_id in ids:
        sock = socket.create_connection((address.hostname, address.port), timeout=30)
        streams.append(sock)
        head = f"GET /v1/task/output/stream?task_id={task_id} HTTP/1.1\r\nHost: {address.hostname}\r\n"
        sock.sendall(f"{head}Authorization: Bearer {bridge.token}\r\n\r\n".encode())
        received = b""
        while b"\nid: " not in received:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit(f"the stream of task {task_id} closed before its first event: {received!r}")
            received += chunk
    return streams


def server_costs(bridge: BridgeServer, what: str) -> list[Row]:
    """What the server costs with nothing happening: memory, threads, CPU over SAMPLE_S, and `/health`."""
    web = bridge.processes()
    before, started = cpu_seconds(web), time.monotonic()
    time.sleep(SAMPLE_S)
    cores = (cpu_seconds(web) - before) / (time.monotonic() - started)
    rss, kind = memory_mb(web)
    threads = sum(process.num_threads() for process in web)
    note = f"runbridge (the supervisor) and {len(web) - 1} web process(es)"
    health = []
    for _ in range(20):
        sent = time.perf_counter()
        bridge.get("/health").raise_for_status()
        health.append(time.perf_counter() - sent)
    return [
        Row(f"{what}: server {kind}", rss, unit="MB", goal=300, note=note),
        Row(f"{what}: server threads", threads, unit=""),
        Row(f"{what}: server CPU", cores, unit="cores", goal=0.05),
        Row(f"{what}: GET /health p50", p50(ms(health)), goal=50),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        env = {**SHIPPED, "BRIDGE_MAX_CONCURRENT": str(args.tasks), "BRIDGE_DRAIN_S": "0", "BRIDGE_KILL_GRACE_S": "1"}
        with BridgeServer(root, "http://127.0.0.1:9", fake_agent(root), extra_env=env) as bridge:
            ids = [bridge.create_task("say asleep\nsleep 600", bridge.work, timeout_s=900) for _ in range(args.tasks)]
            all_spawned(bridge, ids)
            time.sleep(2)  # let the spawn burst settle
            rows = server_costs(bridge, f"{args.tasks} running tasks, agents asleep")
            streams = open_streams(bridge, ids)
            rows += server_costs(bridge, f"{args.tasks} running tasks, an SSE stream open on each")
            for sock in streams:
                sock.close()
            for task_id in ids:
                bridge.post("/v1/task/cancel", {"task_id": task_id})
    emit(rows)


if __name__ == "__main__":
    main()
