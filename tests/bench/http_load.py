"""Benchmark (`make bench`): requests per second the REST API answers, next to what Daphne answers for a trivial app.

A `runbridge` with the fake agent; a finished task to read. Each endpoint is loaded for --seconds by --connections
keep-alive connections split over --clients processes (asyncio, raw HTTP/1.1: a client must cost far less than the
server on a 2-core machine). The machine's own limit is the same load on Daphne serving a 20-line ASGI app that
answers "ok". Measured with the two web processes Bridge runs by default on two cores, and with one
(BRIDGE_WEB_PROCESSES=1) for comparison; the goal is the default's. Only the load is timed: the clients have started
and connected before the clock starts.

This machine's speed drifts by half within minutes (the same server, the same CPU time, 990 to 1,590 GET/s), so the
goal's row alternates Bridge and the trivial app, --rounds times each, with both servers up: its figure and its limit
are the medians, and the note gives the median of each round's Bridge ÷ the trivial rate just before it, and the
range. A round's connections open at once, and both processes accept from one socket, taking turns
(jobs/web/webserver.py `AcceptTurns`).
"""

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import SHIPPED, fake_agent  # noqa: E402
from tests.bench.table import Row, emit  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402

CONNECT_S = 60.0  # for the client processes to start (a fresh interpreter each) and connect

TRIVIAL_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})
"""


async def _one_connection(reader, writer, request: bytes, until: float) -> tuple[int, int]:
    """(answers, errors) over one keep-alive connection until the clock passes `until`."""
    answers = errors = 0
    try:
        while time.monotonic() < until:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            answers += status < 400
            errors += status >= 400
    finally:
        writer.close()
    return answers, errors


def _client(host: str, port: int, request: bytes, connections: int, seconds: float, connected, out) -> None:
    """Open the connections, wait at the `connected` barrier until every client has, then load for `seconds`; put
    (answers, errors)."""

    async def main() -> list[tuple[int, int]]:
        opened = [await asyncio.open_connection(host, port) for _ in range(connections)]
        connected.wait(timeout=CONNECT_S)
        until = time.monotonic() + seconds
        return await asyncio.gather(*(_one_connection(*pair, request, until) for pair in opened))

    results = asyncio.run(main())
    out.put((sum(a for a, _ in results), sum(e for _, e in results)))


def load(url: str, path: str, headers: dict[str, str], args) -> float:
    """Answers per second (non-error ones) over args.seconds; fails on any error answer."""
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    context = multiprocessing.get_context("spawn")
    out, connected = context.Queue(), context.Barrier(args.clients + 1)
    per_client = max(1, args.connections // args.clients)
    clients = [
        context.Process(target=_client, args=(host, int(port), request, per_client, args.seconds, connected, out))
        for _ in range(args.clients)
    ]
    for client in clients:
        client.start()
    try:
        connected.wait(timeout=CONNECT_S)  # only the load is timed: every client has started and connected
    except threading.BrokenBarrierError:
        raise SystemExit(f"the load clients were not all connected within {CONNECT_S} s") from None
    results = [out.get(timeout=args.seconds + 60) for _ in clients]
    for client in clients:
        client.join()
    answers, errors = sum(a for a, _ in results), sum(e for _, e in results)
    if errors:
        raise SystemExit(f"{errors} error answers from {path}")
    return answers / args.seconds


@contextlib.contextmanager
def trivial_server(root: Path) -> Iterator[str]:
    """Daphne serving TRIVIAL_APP; yields its URL."""
    (root / "trivial_app.py").write_text(TRIVIAL_APP)
    daphne = Path(sys.executable).with_name("daphne")
    proc = subprocess.Popen(
        [str(daphne), "-b", "127.0.0.1", "-p", "0", "--access-log", os.devnull, "trivial_app:app"],
        cwd=root,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in proc.stderr:
            if "Listening on TCP address" in line:
                yield "http://" + line.rsplit(" ", 1)[-1].strip()
                return
        raise SystemExit("daphne did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def alternating(bridge_url: str, path: str, headers: dict[str, str], trivial_url: str, args) -> tuple[list, list]:
    """(Bridge's rates, the trivial app's rates), measured in turn, --rounds times each."""
    bridge, trivial = [], []
    for _ in range(args.rounds):
        trivial.append(load(trivial_url, "/", {}, args))
        bridge.append(load(bridge_url, path, headers, args))
    return bridge, trivial


def rows_of(root: Path, web_processes: int, trivial_url: str, args) -> list[Row]:
    """A row per endpoint from a runbridge serving with `web_processes` processes."""
    env = {**SHIPPED, "BRIDGE_WEB_PROCESSES": str(web_processes)}
    agent = fake_agent(root)
    shipped = web_processes == 2  # the default where there are two cores; one is for comparison
    label = f"req/s, {web_processes} web process{'es (the default)' if shipped else ''}"
    note = f"{args.connections} keep-alive connections from {args.clients} client processes"
    with BridgeServer(root / f"bridge-{web_processes}", "http://127.0.0.1:9", agent, extra_env=env) as bridge:
        task_id = bridge.create_task("say hello", bridge.work)
        for _ in bridge.stream(task_id):
            pass
        auth = {"Authorization": f"Bearer {bridge.token}"}
        load(bridge.url, "/health", {}, argparse.Namespace(**{**vars(args), "seconds": 3}))  # every process up
        rows = []
        if shipped:
            rates, limits = alternating(bridge.url, f"/v1/task?task_id={task_id}", auth, trivial_url, args)
            ratios = sorted(b / t for b, t in zip(rates, limits, strict=True))
            limit = statistics.median(limits)
            rows.append(
                Row(
                    f"GET /v1/task, {label}",
                    statistics.median(rates),
                    unit="req/s",
                    goal=1000,
                    limit=limit,
                    higher_is_better=True,
                    note=f"{note}; medians of {args.rounds} rounds of {args.seconds:g} s, each after the trivial "
                    f"app's; Bridge ÷ trivial per round {statistics.median(ratios):.3f} "
                    f"({ratios[0]:.3f}–{ratios[-1]:.3f}); Bridge's rounds {min(rates):,.0f}–{max(rates):,.0f}",
                )
            )
        else:
            limit = load(trivial_url, "/", {}, args)
            rows.append(
                Row(
                    f"GET /v1/task, {label}",
                    load(bridge.url, f"/v1/task?task_id={task_id}", auth, args),
                    unit="req/s",
                    limit=limit,
                    higher_is_better=True,
                    note=note,
                )
            )
        rate = load(bridge.url, "/v1/tasks?limit=20", auth, args)  # /health has its own script: health_load.py
        rows.append(Row(f"GET /v1/tasks, {label}", rate, unit="req/s", limit=limit, higher_is_better=True, note=note))
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=4, help="turns of Bridge and the trivial app for the goal's row")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        with trivial_server(root) as trivial_url:
            for processes in (2, 1):
                rows += rows_of(root, processes, trivial_url, args)
    emit(rows)


if __name__ == "__main__":
    main()
