"""Benchmark: clients that hold connections and do nothing with them (issue 27.5), against a `runbridge` with the
shipped settings.

Opens --slow connections that send a request line and then one header line every --dribble-s seconds, and --silent
connections that send nothing, all at once from this one address; then asks `/health` on a new connection every
0.5 s until the server has closed every one of them. Reports when the last was closed, how many were refused at once
(past BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT), and how long `/health` took meanwhile (the first ask, right after the
burst, apart). Before issue 27.5 none was closed within a minute, and the first `/health` took 3–5 s.
"""

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import SHIPPED, fake_agent  # noqa: E402
from tests.bench.table import Row, emit, ms, p50  # noqa: E402
from tests.bridge_server import BridgeServer, closing_times  # noqa: E402

BOUND_S = 120.0  # the longest the bench waits for the server to close them


class Dribbler(threading.Thread):
    """Sends each slow connection one more header line every `every_s` until stopped."""

    def __init__(self, socks: list[socket.socket], every_s: float) -> None:
        super().__init__(daemon=True)
        self.socks, self.every_s = socks, every_s
        self.done = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.done.wait(self.every_s):
            number += 1
            for sock in self.socks:
                try:
                    sock.send(f"X-Slow-{number}: {number}\r\n".encode())
                except OSError:
                    pass  # closed by the server


class HealthProbe(threading.Thread):
    """Times `GET /health` on a new connection every 0.5 s until stopped."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.took: list[float] = []
        self.statuses: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            sent = time.perf_counter()
            with socket.create_connection(self.address, timeout=30) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            self.took.append(time.perf_counter() - sent)
            self.statuses.append(int(answer.split()[1]))
            if self.done.wait(0.5):
                return


def open_all(address: tuple[str, int], slow: int, silent: int) -> tuple[list[socket.socket], list[socket.socket]]:
    slow_socks, silent_socks = [], []
    for _ in range(slow):
        sock = socket.create_connection(address, timeout=30)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow_socks.append(sock)
    for _ in range(silent):
        silent_socks.append(socket.create_connection(address, timeout=30))
    return slow_socks, silent_socks


def measure(bridge: BridgeServer, args: argparse.Namespace) -> list[Row]:
    url = urlsplit(bridge.url)
    address = (url.hostname, url.port)
    opened = time.monotonic()
    slow, silent = open_all(address, args.slow, args.silent)
    dribbler, probe = Dribbler(slow, args.dribble_s), HealthProbe(address)
    dribbler.start()
    probe.start()
    try:
        received, closed = closing_times(slow + silent, opened, BOUND_S)
        first_bytes = [answer[:12] for answer in received]
    finally:
        dribbler.done.set()
        probe.done.set()
        probe.join()
        for sock in slow + silent:
            sock.close()
    refused = sum(1 for answer in first_bytes if answer.startswith(b"HTTP/1.1 429"))
    timed_out = sum(1 for answer in first_bytes if answer.startswith(b"HTTP/1.1 408"))
    what = f"{args.slow} slow heads (a header every {args.dribble_s:g} s) and {args.silent} silent connections"
    note = f"{refused} refused 429 at once, {timed_out} answered 408; /health answered {sorted(set(probe.statuses))}"
    return [
        Row(f"{what}: the last closed after", max(closed), unit="s", goal=args.goal_s, note=note),
        Row(f"{what}: the first GET /health", probe.took[0] * 1000),
        Row(f"{what}: GET /health p50 meanwhile", p50(ms(probe.took)), goal=50),
        Row(f"{what}: GET /health slowest meanwhile", max(ms(probe.took))),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow", type=int, default=200)
    parser.add_argument("--silent", type=int, default=0)
    parser.add_argument("--dribble-s", type=float, default=5.0)
    parser.add_argument("--goal-s", type=float, default=40.0, help="when the last must be closed by")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        with BridgeServer(root, "http://127.0.0.1:9", fake_agent(root), extra_env=SHIPPED) as bridge:
            rows = measure(bridge, args)
    emit(rows)


if __name__ == "__main__":
    main()
