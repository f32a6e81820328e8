"""Benchmarks (`make bench`; not collected by pytest): Bridge's own latency, with the fake agent.

1. create → child spawned: from just before POST /v1/task/create to the moment Bridge has the child's pid
   (the `spawned` event's commit time), for tasks created one after another on an idle server.
2. child output line → SSE client: the fake agent writes `stamp <time.time()>` lines; the SSE client notes when
   each arrives. Same machine, same clock.

Prints medians and 95th percentiles; the figures go in the closing notes with this command.
"""

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.e2e import BridgeServer  # noqa: E402


def fake_agent(directory: Path) -> str:
    script = directory / "fake-claude"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests/fakes/fake_claude.py"}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(
        f"{name}: n={len(ms)} median={statistics.median(ms):.1f} ms "
        f"p95={percentile(ms, 0.95):.1f} ms min={min(ms):.1f} ms max={max(ms):.1f} ms"
    )


def spawn_latency(bridge: BridgeServer, runs: int) -> list[float]:
    latencies = []
    for _ in range(runs):
        sent = time.time()
        task_id = bridge.create_task("say hi", bridge.work)
        for event in bridge.stream(task_id):
            if event["event"] == "spawned":
                spawned = datetime.fromisoformat(event["data"]["time"].replace("Z", "+00:00")).timestamp()
                latencies.append(spawned - sent)
        if bridge.task(task_id)["status"] != "done":
            raise SystemExit(f"task {task_id} did not finish: {bridge.task(task_id)}")
    return latencies


def line_latency(bridge: BridgeServer, lines: int, interval: float) -> list[float]:
    task_id = bridge.create_task(f"stamp {lines} {interval}", bridge.work)
    latencies = []
    for event in bridge.stream(task_id, deadline_s=lines * interval + 60):
        if event["event"] == "text" and event["data"]["data"]["text"].startswith("stamp "):
            latencies.append(time.time() - float(event["data"]["data"]["text"].split()[1]))
    if len(latencies) != lines:
        raise SystemExit(f"saw {len(latencies)} of {lines} lines")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        defaults = {"BRIDGE_POLL_S": "0.5", "BRIDGE_SSE_HEARTBEAT_S": "15"}  # measure the shipped settings
        with BridgeServer(root, "http://127.0.0.1:9", fake_agent(root), extra_env=defaults) as bridge:
            report("create -> child spawned", spawn_latency(bridge, args.tasks))
            report("child output line -> SSE client", line_latency(bridge, args.lines, args.interval))


if __name__ == "__main__":
    main()
