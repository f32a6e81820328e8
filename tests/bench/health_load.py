"""Benchmark (`make bench`): `GET /health` through Bridge, next to what Daphne answers for a trivial app (issue 28).

A load balancer and Claude Code's status line poll `/health`. Through Django it ran the health view for every request
(five queries and the executor checks) and served 0.04–0.09× what Daphne serves a trivial app at; Bridge's web server
now answers it from a snapshot of the view's answer at most a second old (jobs/web/health.py). The goal is half the
trivial app's rate or more.

The load and the alternation are tests/bench/http_load.py's: --connections keep-alive connections from --clients
processes, for --seconds, --rounds times each, Bridge (its default two web processes) and the trivial app in turn with
both up, since this machine's speed drifts by half within minutes. The rate and the trivial app's are the medians of
the rounds; the ratio is the median of each round's Bridge ÷ the trivial app's rate just before it, with the range.
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.http_load import alternating, load, trivial_server  # noqa: E402
from tests.bench.run import SHIPPED, fake_agent  # noqa: E402
from tests.bench.table import Row, emit  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402

GOAL_RATIO = 0.5  # of the trivial app's rate


def measure(root: Path, trivial_url: str, args: argparse.Namespace) -> list[Row]:
    env = {**SHIPPED, "BRIDGE_WEB_PROCESSES": "2"}
    with BridgeServer(root / "bridge", "http://127.0.0.1:9", fake_agent(root), extra_env=env) as bridge:
        load(bridge.url, "/health", {}, argparse.Namespace(**{**vars(args), "seconds": 3}))  # every process up
        rates, limits = alternating(bridge.url, "/health", {}, trivial_url, args)
    ratios = sorted(bridge_rate / limit for bridge_rate, limit in zip(rates, limits, strict=True))
    load_note = (
        f"{args.connections} keep-alive connections from {args.clients} client processes; medians of {args.rounds} "
        f"rounds of {args.seconds:g} s, each after the trivial app's"
    )
    return [
        Row(
            "GET /health, req/s, 2 web processes (the default)",
            statistics.median(rates),
            unit="req/s",
            limit=statistics.median(limits),
            higher_is_better=True,
            note=f"{load_note}; Bridge's rounds {min(rates):,.0f}–{max(rates):,.0f}",
        ),
        Row(
            "GET /health ÷ a trivial app on Daphne",
            statistics.median(ratios),
            unit="×",
            goal=GOAL_RATIO,
            higher_is_better=True,
            note=f"per round {ratios[0]:.3f}–{ratios[-1]:.3f}; the trivial app's rounds "
            f"{min(limits):,.0f}–{max(limits):,.0f} req/s",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=4, help="turns of Bridge and the trivial app")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        with trivial_server(root) as trivial_url:
            rows = measure(root, trivial_url, args)
    emit(rows)


if __name__ == "__main__":
    main()
