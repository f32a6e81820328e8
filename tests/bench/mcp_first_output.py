"""Benchmark (`make bench`): from `hermes_run` returning to the first Hermes output visible through `hermes_status`.

A real runbridge serves MCP over HTTP at /mcp; the real Hermes CLI (`make hermes-cli`, ACP mode) answers from the
scripted OpenAI-compatible server on 127.0.0.1. The planner side polls `hermes_status(wait_s=0)` every 50 ms, as a
planner polling for progress would, so figures have that resolution. Most of the time is Hermes' own cold start.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.table import Row, emit  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402
from tests.fakes.hermes_env import (  # noqa: E402
    DEFAULT_HERMES_BIN,
    PROXY_VARS,
    RecordingProxy,
    offline_env,
    write_hermes_home,
)
from tests.fakes.openai_server import FakeOpenAI, text  # noqa: E402

POLL_S = 0.05
WORDS = "Bridge benchmark answer"


async def one_run(url: str, token: str, cwd: Path) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60, trust_env=False) as http,
        Client(streamable_http_client(url + "/mcp", http_client=http)) as client,
    ):
        started = await client.call_tool("hermes_run", {"task": f"Say: {time.time()}", "cwd": str(cwd), "wait_s": 0})
        returned = time.monotonic()
        reply = started.content[0].text
        job_id = next(line.split(":", 1)[1].strip() for line in reply.splitlines() if line.startswith("JOB_ID:"))
        while time.monotonic() - returned < 120:
            status = (await client.call_tool("hermes_status", {"job_id": job_id, "wait_s": 0})).content[0].text
            if WORDS.split()[0] in status:
                latency = time.monotonic() - returned
                await client.call_tool("hermes_status", {"job_id": job_id, "wait_s": 60})
                return latency
            await asyncio.sleep(POLL_S)
    raise SystemExit(f"no output from job {job_id} within 120 s:\n{status}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not DEFAULT_HERMES_BIN.exists():
        raise SystemExit(f"the Hermes CLI is not at {DEFAULT_HERMES_BIN}: run `make hermes-cli`")
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp, FakeOpenAI() as fake, RecordingProxy() as proxy:
        root = Path(tmp)
        hermes_home = write_hermes_home(root / "hermes_home", fake.url, DEFAULT_HERMES_BIN)
        env = offline_env(hermes_home, root / "home", proxy.url)
        env.update({"BRIDGE_HERMES_BIN": str(DEFAULT_HERMES_BIN), "BRIDGE_PASS_ENV": ",".join(PROXY_VARS)})
        env.update({"BRIDGE_POLL_S": "0.5", "BRIDGE_SSE_HEARTBEAT_S": "15"})  # the shipped settings
        with BridgeServer(root, fake.url, extra_env=env) as bridge:
            latencies = []
            for _ in range(args.runs):
                fake.push(text(WORDS))
                latencies.append(asyncio.run(one_run(bridge.url, bridge.token, bridge.work)))
        if proxy.requests:
            raise SystemExit(f"Hermes tried to leave loopback: {proxy.requests}")
    emit(
        [
            Row(
                "hermes_run → first Hermes output in hermes_status (real Hermes, ACP), p50",
                statistics.median(latencies),
                unit="s",
                note=f"n={len(latencies)}, min {min(latencies):.2f} s, max {max(latencies):.2f} s, "
                f"polled every {POLL_S * 1000:.0f} ms; mostly Hermes' own cold start",
            )
        ]
    )


if __name__ == "__main__":
    main()
