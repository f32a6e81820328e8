"""Benchmark (not collected by pytest): how long Claude Code waits for Bridge's status line.

    .venv/bin/python tests/bench/statusline.py [--runs 50]

Runs jobs/statusline.py the way Claude Code does (a new `python -S -I` process, its JSON on stdin) RUNS times against
a live stub /health on 127.0.0.1, then RUNS times with nothing listening, and prints the median and 95th percentile
of the wall time of each, beside a bare `python -S -I -c pass` for the interpreter's own start-up. The goal is well
under 100 ms for "on".
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "jobs" / "statusline.py"
STDIN = json.dumps({"session_id": "bench", "cwd": str(REPO), "model": {"id": "claude", "display_name": "Claude"}})
HEALTH = json.dumps(
    {"status": "ok", "database": "ok", "supervisors": 1, "tasks": {"running": 2, "queued": 1}, "pending_permissions": 1}
).encode()


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(HEALTH)))
        self.end_headers()
        self.wfile.write(HEALTH)

    def log_message(self, format, *args):
        pass


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def time_runs(argv: list[str], runs: int) -> tuple[list[float], str]:
    seconds, line = [], ""
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, input=STDIN.encode(), capture_output=True, timeout=30, check=True)
        seconds.append(time.perf_counter() - started)
        line = done.stdout.decode("utf-8").strip()
    return seconds, line


def report(name: str, seconds: list[float], line: str = "") -> None:
    ms = [s * 1000 for s in seconds]
    shown = f"  -> {line}" if line else ""
    print(f"{name}: n={len(ms)} median={statistics.median(ms):.1f} ms p95={percentile(ms, 0.95):.1f} ms{shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    runs = parser.parse_args().runs

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    command = [sys.executable, "-S", "-I", str(SCRIPT), "--url", url]
    try:
        report("python -S -I -c pass", time_runs([sys.executable, "-S", "-I", "-c", "pass"], runs)[0])
        report("status line, bridge on ", *time_runs(command, runs))
    finally:
        server.shutdown()
        server.server_close()
    report("status line, bridge off", *time_runs(command, runs))


if __name__ == "__main__":
    main()
