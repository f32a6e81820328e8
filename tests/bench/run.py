"""Benchmarks (`make bench`; not collected by pytest): Bridge's own latency with the fake agent, each beside the
same work done without Bridge in the same run.

1. create → child spawned: from just before POST /v1/task/create to the `spawned` event's commit; beside it, a
   plain Popen of the same fake agent.
2. agent line → SSE / websocket client at 1,000 lines/s: the fake agent writes `stamp <time.time()>` lines a
   millisecond apart; the client notes when each arrives. Beside it, the same lines read straight from the agent's
   pipe.
3. end to end: a task that takes about a second (`sleep 1`), from the create POST to the SSE `end` event, against
   the same fake run directly (prompt on stdin, read to its result, close stdin, wait for its exit). Runs are
   interleaved; a run more than LATE_S slower than its direct twin counts as a late finish.
4. permission round trip, Bridge's part: (the request's commit → the SSE client sees it) + (the answering POST sent
   → the agent's next line committed). The fake answers an allowed non-Bash tool at once.
"""

import argparse
import base64
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.table import Row, emit, ms, p50, percentile  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402

LATE_S = 0.25
# Measure the shipped settings (the tests' servers change these).
SHIPPED = {
    "BRIDGE_POLL_S": "0.5",
    "BRIDGE_SSE_HEARTBEAT_S": "15",
}


def fake_agent(directory: Path) -> str:
    script = directory / "fake-claude"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests/fakes/fake_claude.py"}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def event_time(event: dict) -> float:
    return datetime.fromisoformat(event["data"]["time"].replace("Z", "+00:00")).timestamp()


def user_message(prompt: str) -> bytes:
    message = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}}
    return (json.dumps(message) + "\n").encode()


def run_directly(agent: str, prompt: str, cwd: Path, on_line=None) -> float:
    """The fake agent without Bridge, driven as Bridge drives it; seconds from start to its exit."""
    started = time.time()
    proc = subprocess.Popen([agent], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdin.write(user_message(prompt))
    proc.stdin.flush()
    for line in proc.stdout:
        if on_line is not None:
            on_line(line, time.time())
        if json.loads(line).get("type") == "result":
            proc.stdin.close()
    proc.wait()
    return time.time() - started


def spawn_latency(bridge: BridgeServer, agent: str, runs: int) -> tuple[list[float], list[float], list[float]]:
    """Per task: create POST sent → `spawned` committed, the claim's commit → `spawned`; and a plain Popen."""
    latencies, after_claim, direct = [], [], []
    for _ in range(runs):
        sent = time.time()
        task_id = bridge.create_task("say hi", bridge.work)
        for event in bridge.stream(task_id):
            if event["event"] == "status" and event["data"]["data"]["status"] == "running":
                claimed = event_time(event)
            elif event["event"] == "spawned":
                latencies.append(event_time(event) - sent)
                after_claim.append(event_time(event) - claimed)
        if bridge.task(task_id)["status"] != "done":
            raise SystemExit(f"task {task_id} did not finish: {bridge.task(task_id)}")
        started = time.time()
        proc = subprocess.Popen([agent], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        direct.append(time.time() - started)
        proc.wait()
    return latencies, after_claim, direct


def stamp_latency(text: str, seen: float) -> float | None:
    return seen - float(text.split()[1]) if text.startswith("stamp ") else None


def ws_messages(bridge: BridgeServer, task_id: str) -> Iterator[dict]:
    """The task's websocket (/ws/tasks/<id>/) as JSON messages until its `end`: a minimal RFC 6455 client (the server
    sends whole, unmasked text frames), so the benchmark needs no websocket library."""
    url = urlsplit(bridge.url)
    with socket.create_connection((url.hostname, url.port), timeout=60) as sock, sock.makefile("rb") as stream:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET /ws/tasks/{task_id}/ HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {bridge.token}\r\n\r\n".encode()
        )
        if b" 101 " not in stream.readline():
            raise SystemExit(f"websocket for task {task_id} refused")
        while stream.readline() not in (b"\r\n", b""):
            pass
        while head := stream.read(2):
            size = head[1] & 0x7F
            if size >= 126:
                size = struct.unpack(">H" if size == 126 else ">Q", stream.read(2 if size == 126 else 8))[0]
            payload, opcode = stream.read(size), head[0] & 0x0F
            if opcode == 8:
                return
            if opcode == 1:
                message = json.loads(payload)
                yield message
                if message.get("type") == "end":
                    return


def ws_line_latency(bridge: BridgeServer, lines: int, interval: float) -> list[float]:
    task_id = bridge.create_task(f"stamp {lines} {interval}", bridge.work)
    latencies = []
    for message in ws_messages(bridge, task_id):
        text = message["data"].get("text", "") if message.get("type") == "event" and message["kind"] == "text" else ""
        if (late := stamp_latency(text, time.time())) is not None:
            latencies.append(late)
    if len(latencies) != lines:
        raise SystemExit(f"websocket: saw {len(latencies)} of {lines} lines")
    return latencies


def line_latency(bridge: BridgeServer, agent: str, lines: int, interval: float) -> tuple[list[float], list[float]]:
    prompt = f"stamp {lines} {interval}"
    task_id = bridge.create_task(prompt, bridge.work)
    latencies = []
    for event in bridge.stream(task_id, deadline_s=lines * interval + 60):
        if event["event"] == "text" and (late := stamp_latency(event["data"]["data"]["text"], time.time())) is not None:
            latencies.append(late)
    if len(latencies) != lines:
        raise SystemExit(f"saw {len(latencies)} of {lines} lines")
    direct = []

    def on_line(line: bytes, seen: float) -> None:
        message = json.loads(line)
        for block in message.get("message", {}).get("content", []) if message.get("type") == "assistant" else []:
            if block.get("type") == "text" and (late := stamp_latency(block["text"], seen)) is not None:
                direct.append(late)

    run_directly(agent, prompt, bridge.work, on_line)
    return latencies, direct


def end_to_end(bridge: BridgeServer, agent: str, runs: int) -> tuple[list[float], list[float]]:
    prompt = "say working\nsleep 1\nsay done"
    through, direct = [], []
    for _ in range(runs):
        direct.append(run_directly(agent, prompt, bridge.work))
        sent = time.time()
        task_id = bridge.create_task(prompt, bridge.work)
        for _event in bridge.stream(task_id):
            pass
        through.append(time.time() - sent)
        if bridge.task(task_id)["status"] != "done":
            raise SystemExit(f"task {task_id} did not finish: {bridge.task(task_id)}")
    return through, direct


class Decider:
    """Answers permission requests over one kept-open connection with the standard library's HTTP client, so the
    round trip counts Bridge's time and not a client library's: httpx spends about 2 ms of its own on a POST here,
    before the request leaves and after the answer arrives."""

    def __init__(self, bridge: BridgeServer) -> None:
        url = urlsplit(bridge.url)
        self.connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        self.headers = {"Authorization": f"Bearer {bridge.token}", "Content-Type": "application/json"}

    def allow(self, task_id: str) -> None:
        body = json.dumps({"task_id": task_id, "behavior": "allow"})
        self.connection.request("POST", "/v1/task/permission", body, self.headers)
        response = self.connection.getresponse()
        answer = response.read()
        if response.status != 200:
            raise SystemExit(f"POST /v1/task/permission: {response.status} {answer[:500]!r}")

    def close(self) -> None:
        self.connection.close()


def permission_round_trip(bridge: BridgeServer, asks: int) -> tuple[list[float], list[float], list[float]]:
    """Per ask: (request committed → SSE client sees it), (answering POST sent → agent's next line committed), and
    how long the POST itself took."""
    prompt = "\n".join(f'ask Edit {{"file_path": "f{i}.txt"}}' for i in range(asks))
    task_id = bridge.create_task(prompt, bridge.work, permission_mode="approve")
    to_client, to_agent, posts, posted = [], [], [], None
    decider = Decider(bridge)
    try:
        for event in bridge.stream(task_id, deadline_s=asks * 5 + 30):
            if event["event"] == "permission_request":
                posted = time.time()
                to_client.append(posted - event_time(event))
                decider.allow(task_id)
                posts.append(time.time() - posted)
            elif event["event"] == "tool_result" and posted is not None:
                to_agent.append(event_time(event) - posted)
                posted = None
    finally:
        decider.close()
    if len(to_agent) != asks:
        raise SystemExit(f"saw {len(to_agent)} of {asks} permission round trips")
    return to_client, to_agent, posts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=0.001)
    parser.add_argument("--e2e-runs", type=int, default=10)
    parser.add_argument("--asks", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        agent = fake_agent(root)
        with BridgeServer(root, "http://127.0.0.1:9", agent, extra_env=SHIPPED) as bridge:
            spawn, after_claim, spawn_direct = spawn_latency(bridge, agent, args.tasks)
            lines, lines_direct = line_latency(bridge, agent, args.lines, args.interval)
            ws_lines = ws_line_latency(bridge, args.lines, args.interval)
            through, direct = end_to_end(bridge, agent, args.e2e_runs)
            to_client, to_agent, posts = permission_round_trip(bridge, args.asks)
    late = sum(1 for b, d in zip(through, direct, strict=True) if b - d > LATE_S)
    overhead = ms([b - d for b, d in zip(through, direct, strict=True)])
    emit(
        [
            Row(
                "create → child spawned, p50",
                p50(ms(spawn)),
                goal=25,
                limit=p50(ms(spawn_direct)),
                note=f"of which the claim → spawned p50 {p50(ms(after_claim)):.1f} ms",
            ),
            Row("agent line → SSE client at 1,000 lines/s, p50", p50(ms(lines)), goal=5, limit=p50(ms(lines_direct))),
            Row(
                "agent line → SSE client at 1,000 lines/s, p99",
                percentile(ms(lines), 0.99),
                goal=25,
                limit=percentile(ms(lines_direct), 0.99),
            ),
            Row(
                "agent line → websocket client at 1,000 lines/s, p50",
                p50(ms(ws_lines)),
                goal=5,
                limit=p50(ms(lines_direct)),
            ),
            Row(
                "agent line → websocket client at 1,000 lines/s, p99",
                percentile(ms(ws_lines), 0.99),
                goal=25,
                limit=percentile(ms(lines_direct), 0.99),
            ),
            Row(
                "end to end, fake agent (≈1 s), Bridge ÷ direct, p50",
                p50(through) / p50(direct),
                unit="×",
                goal=1.05,
                limit=1.0,
                note=f"overhead p50 {p50(overhead):.0f} ms, max {max(overhead):.0f} ms",
            ),
            Row(f"end to end: runs finishing > {LATE_S * 1000:.0f} ms late", late, unit=f"of {len(through)}", goal=0),
            Row(
                "permission round trip, Bridge's part, p50",
                p50(ms([a + b for a, b in zip(to_client, to_agent, strict=True)])),
                goal=10,
                note=f"request → SSE client p50 {p50(ms(to_client)):.1f} ms, POST → agent's next line "
                f"{p50(ms(to_agent)):.1f} ms, the POST itself {p50(ms(posts)):.1f} ms",
            ),
        ]
    )


if __name__ == "__main__":
    main()
