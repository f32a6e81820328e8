"""Benchmark (`make bench`): 200 running tasks whose agents all sleep, what the Bridge server costs meanwhile.

Measured on the `runbridge` process (web server and supervisor in one) once every task's agent is spawned: its
resident memory, its threads, the CPU it burns over SAMPLE_S while nothing happens, and how fast `/health` answers.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import SHIPPED, fake_agent  # noqa: E402
from tests.bench.table import Row, emit, ms, p50  # noqa: E402
from tests.e2e import BridgeServer  # noqa: E402

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
            server = psutil.Process(bridge.proc.pid)
            time.sleep(2)  # let the spawn burst settle
            before, started = server.cpu_times(), time.monotonic()
            time.sleep(SAMPLE_S)
            after, elapsed = server.cpu_times(), time.monotonic() - started
            cores = (after.user + after.system - before.user - before.system) / elapsed
            rss, threads = server.memory_info().rss / 2**20, server.num_threads()
            health = []
            for _ in range(20):
                sent = time.perf_counter()
                bridge.get("/health").raise_for_status()
                health.append(time.perf_counter() - sent)
            for task_id in ids:
                bridge.post("/v1/task/cancel", {"task_id": task_id})
    emit(
        [
            Row(f"{args.tasks} running tasks, agents asleep: server RSS", rss, unit="MB", goal=300),
            Row(f"{args.tasks} running tasks, agents asleep: server threads", threads, unit=""),
            Row(f"{args.tasks} running tasks, agents asleep: server CPU", cores, unit="cores", goal=0.05),
            Row(f"{args.tasks} running tasks, agents asleep: GET /health p50", p50(ms(health)), goal=50),
        ]
    )


if __name__ == "__main__":
    main()
