"""`make bench`: every benchmark script, one after another, their rows printed as one table (tests/bench/table.py).

Scripts run as their own processes (each starts its own Bridge); a script that fails is named with its exit code and
the rest still run. The table ends with how fast the machine was at the start and at the end: this one's speed has
drifted by up to 2× within a day, and every row in ms or req/s drifts with it (the limits beside them too).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from tests.bench.table import ROWS_FILE_VAR, Row, load, render  # noqa: E402

SCRIPTS = (
    "run.py",
    "real_cli.py",
    "ingest.py",
    "http_load.py",
    "health_load.py",
    "idle.py",
    "scale_out.py",
    "dashboard.py",
    "mcp_first_output.py",
    "slow_clients.py",
    "doorbell_flood.py",
    "worktrees.py",
    "changes.py",
    "changes_overhead.py",
    "rules_overhead.py",
    "webhooks.py",
    "acp_agents.py",
)


def machine_speed_ms() -> float:
    """A fixed pure-Python workload's best time of five, in ms."""
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        sum(i * i for i in range(100_000))
        timings.append(time.perf_counter() - started)
    return min(timings) * 1000


def main() -> int:
    failed, speed_at_start = [], machine_speed_ms()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-rows-") as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        rows_file.touch()
        for script in SCRIPTS:
            started = time.monotonic()
            print(f"bench: {script} …", flush=True)
            code = subprocess.call(
                [sys.executable, str(HERE / script)], env={**os.environ, ROWS_FILE_VAR: str(rows_file)}
            )
            print(f"bench: {script} took {time.monotonic() - started:.0f} s", flush=True)
            if code:
                failed.append(f"{script} (exit {code})")
        rows = load(str(rows_file))
    rows += [Row(f"FAILED: {name}", None) for name in failed]
    note = "sum of 100,000 squares in Python, best of 5: lower is faster"
    rows += [
        Row("machine speed at the start", speed_at_start, note=note),
        Row("machine speed at the end", machine_speed_ms(), note=note),
    ]
    print()
    print(render(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
