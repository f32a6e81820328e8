"""Benchmark (`make bench`; not collected by pytest): a real Claude Code task with one tool, through Bridge against
the same CLI run directly (issue 12's first row).

The pinned CLI (.tools, bridge_server.py `claude_bin()`) talks only to the scripted fake Anthropic server on 127.0.0.1,
in the offline environment of tests/fakes/claude_env.py: nothing leaves the machine. Each run the model asks for one
Bash call (`touch`), then answers. Runs are interleaved: direct, Bridge (approve), direct, Bridge (bypass), …

- direct: the CLI started with Bridge's argv (stream-json in and out, `--permission-prompt-tool stdio`, partial
  messages), the prompt written on stdin, its one `can_use_tool` control request allowed at once over the control
  protocol, stdin closed after its `result`; from just before the spawn to its exit.
- Bridge: a real `manage.py runbridge` (bridge_server.py BridgeServer, shipped poll settings); from just before the
  create POST to the SSE `end` (the task is done). In approve mode the client allows the request by POST as soon as
  the SSE stream shows it; in bypass mode Bridge allows it itself.

A Bridge run counts as a late finish when it took LATE_S or more beyond its mode's median. The notes break Bridge's
time down by the commit times of its events (create → spawned, spawned → the CLI's `result`, of which the permission
request → the tool's result, `result` → the task done, done → the client's `end`) beside the direct run's start →
`result`, request read → tool result and `result` → exit; and give the server process's CPU time per task (psutil:
on 2 cores it competes with the CLI's node process). They also give the ratio's 90 % interval (`ratio_interval`):
the CLI's own run varies by tens of milliseconds from one run to the next, as much as Bridge's whole part, so a
ratio a hair over or under the goal may be noise, and the interval says how much. A last row divides the direct runs
by themselves (an A/A test): in five such runs of 30 pairs here it read 0.964–1.030.

Each mode's ratio divides by the median of all the direct runs, both modes' twins: a direct run is the same whatever
the mode, and they interleave with both modes' Bridge runs through the same minutes. Dividing each mode by only its
own twins made the two modes differ by the twins' noise (one run: Bridge's p50 778 ms with approve and 777 ms with
bypass, against twins of 751 and 725 ms).
"""

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import SHIPPED, event_time  # noqa: E402
from tests.bench.table import Row, emit, p50  # noqa: E402
from tests.bridge_server import BridgeServer, claude_bin  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, text, tool_use  # noqa: E402
from tests.fakes.claude_env import offline_env  # noqa: E402

LATE_S = 0.5
MODES = ("approve", "bypass")
PROMPT = "Create the file, then say done."
ARGV = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--include-partial-messages",
)


@dataclass
class Runs:
    """Runs of one kind: total seconds per run, and named phases (seconds) per run for the notes."""

    total: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)

    def add(self, total: float, **phases: float) -> None:
        self.total.append(total)
        for name, seconds in phases.items():
            self.phases.setdefault(name, []).append(seconds)

    def phase_ms(self, name: str) -> str:
        return f"{p50(self.phases[name]) * 1000:.0f}"


def script_one_tool(fake: FakeAnthropic, made: Path) -> Path:
    """The model asks for one Bash call that makes `made`, then answers."""
    fake.clear()
    fake.push(tool_use("Bash", {"command": f"touch {made}", "description": "bench"}), text("Done: the file is there."))
    return made


def line(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def run_directly(claude: str, env: dict[str, str], cwd: Path, made: Path, runs: Runs) -> None:
    """The CLI without Bridge, driven as Bridge drives it, its one permission allowed at once."""
    user = {"type": "user", "session_id": "", "parent_tool_use_id": None}
    user["message"] = {"role": "user", "content": [{"type": "text", "text": PROMPT}]}
    started = time.time()
    proc = subprocess.Popen(
        [claude, *ARGV], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    proc.stdin.write(line(user))
    proc.stdin.flush()
    seen: dict[str, float] = {}
    for raw in proc.stdout:
        message = json.loads(raw)
        kind = message.get("type")
        if kind == "control_request" and message["request"].get("subtype") == "can_use_tool":
            seen["asked"] = time.time()
            allow = {"behavior": "allow", "updatedInput": message["request"].get("input") or {}}
            response = {"subtype": "success", "request_id": message["request_id"], "response": allow}
            proc.stdin.write(line({"type": "control_response", "response": response}))
            proc.stdin.flush()
        elif kind == "user" and "asked" in seen:
            seen.setdefault("tool_result", time.time())
        elif kind == "result":
            seen["result"] = time.time()
            if message.get("is_error"):
                raise SystemExit(f"direct run failed: {message}")
            proc.stdin.close()
    proc.wait()
    ended = time.time()
    if not {"asked", "tool_result", "result"} <= seen.keys() or not made.exists():
        raise SystemExit(f"direct run: no permission request, tool result, result or {made} (exit {proc.returncode})")
    runs.add(
        ended - started,
        cli=seen["result"] - started,
        tool=seen["tool_result"] - seen["asked"],
        tail=ended - seen["result"],
    )


def run_through_bridge(bridge: BridgeServer, cwd: Path, made: Path, mode: str, runs: Runs) -> None:
    """One task over REST: create, follow its SSE stream, allow its one permission as soon as it shows."""
    server = bridge.processes()
    cpu = sum(sum(process.cpu_times()[:2]) for process in server)
    sent = time.time()
    task_id = bridge.create_task(PROMPT, cwd, permission_mode=mode)
    times: dict[str, float] = {}
    for event in bridge.stream(task_id, deadline_s=60):
        kind = event["event"]
        if kind == "permission_request" and mode == "approve":
            bridge.ok(bridge.decide(task_id, "allow"))
        if kind in ("spawned", "permission_request", "tool_result", "result"):
            times[kind] = event_time(event)
        elif kind == "status" and event["data"]["data"]["status"] == "done":
            times["done"] = event_time(event)
        elif kind == "end":
            times["end"] = time.time()  # the client has the outcome; the stream's close that follows is transport
    cpu = sum(sum(process.cpu_times()[:2]) for process in server) - cpu
    if not {"permission_request", "tool_result", "done", "end"} <= times.keys() or not made.exists():
        raise SystemExit(f"task {task_id}: no permission request, tool result, {made} or end: {bridge.task(task_id)}")
    ended = times["end"]
    runs.add(
        ended - sent,
        spawn=times["spawned"] - sent,
        cli=times["result"] - times["spawned"],
        tool=times["tool_result"] - times["permission_request"],
        tail=times["done"] - times["result"],
        end=ended - times["done"],
        cpu=cpu,
    )


def ratio_interval(through: list[float], direct: list[float], share: float = 0.9) -> tuple[float, float]:
    """The p50 ratio's `share` interval by the bootstrap: rounds resampled with replacement, each round a Bridge run
    and the direct runs of its time (`direct` holds the same number per round), seeded, so the same runs always give
    the same interval."""
    per_round = len(direct) // len(through)
    rounds = [(bridge, direct[n * per_round : (n + 1) * per_round]) for n, bridge in enumerate(through)]
    draw = random.Random(0)
    ratios = []
    for _ in range(2000):
        sample = draw.choices(rounds, k=len(rounds))
        ratios.append(p50([bridge for bridge, _ in sample]) / p50([alone for _, twins in sample for alone in twins]))
    ratios.sort()
    cut = int(len(ratios) * (1 - share) / 2)
    return ratios[cut], ratios[-cut - 1]


def rows(mode: str, through: Runs, direct: Runs) -> list[Row]:
    median = p50(through.total)
    late = sum(1 for seconds in through.total if seconds >= median + LATE_S)
    what = "one approved tool" if mode == "approve" else "one tool, bypass"
    b, d = through.phase_ms, direct.phase_ms
    low, high = ratio_interval(through.total, direct.total)
    note = (
        f"90 % interval of the ratio {low:.3f}–{high:.3f} (bootstrap over the {len(through.total)} rounds). "
        f"Bridge p50 {median * 1000:.0f} ms, direct p50 {p50(direct.total) * 1000:.0f} ms over all "
        f"{len(direct.total)} direct runs (direct answers the control request itself). "
        f"Bridge [direct]: create → spawned {b('spawn')} ms; spawned → result {b('cli')} "
        f"[start → result {d('cli')}] ms, of which permission asked → tool result {b('tool')} [{d('tool')}] ms; "
        f"result → done {b('tail')} [result → exit {d('tail')}] ms; done → client's end {b('end')} ms; "
        f"the server's CPU per task {b('cpu')} ms"
    )
    return [
        Row(
            f"real Claude Code task ({what}), Bridge ÷ the same CLI run directly, p50",
            median / p50(direct.total),
            unit="×",
            goal=1.05,
            limit=1.0,
            note=note,
        ),
        Row(
            f"real Claude Code task ({mode}): Bridge runs finishing ≥ {LATE_S * 1000:.0f} ms over the median",
            late,
            unit=f"of {len(through.total)}",
            goal=0,
            note=f"max {max(through.total) * 1000:.0f} ms",
        ),
    ]


def noise_row(direct: Runs) -> Row:
    """The direct runs against themselves: those before an approve run ÷ those before a bypass run. The two halves
    are the same CLI run the same way, so how far this lands from 1 is how finely the rows above can tell Bridge's
    part from the CLI's own variation in this run (an A/A test)."""
    first, second = direct.total[0::2], direct.total[1::2]
    low, high = ratio_interval(first, second)
    return Row(
        "real Claude Code task, the same CLI run directly: one half of the runs ÷ the other, p50",
        p50(first) / p50(second),
        unit="×",
        limit=1.0,
        note=f"the measure's own noise: 90 % interval {low:.3f}–{high:.3f} over {len(first)} pairs",
    )


def measure(claude: str, runs: int) -> tuple[dict[str, Runs], Runs]:
    """Per mode, the Bridge runs; and all direct runs, interleaved: direct, Bridge (approve), direct, Bridge (bypass),
    …, so each round holds one direct run per mode."""
    through = {mode: Runs() for mode in MODES}
    direct = Runs()
    with (
        tempfile.TemporaryDirectory(prefix="bridge-bench-cli-") as tmp,
        FakeAnthropic() as fake,
        BridgeServer(Path(tmp), fake.url, claude, extra_env=SHIPPED) as bridge,
    ):
        env = offline_env(fake.url, str(bridge.home))  # the same HOME and variables the CLI gets under Bridge
        files = itertools.count()
        for n in range(runs):
            for mode in MODES:
                made = script_one_tool(fake, bridge.work / f"made-{next(files)}.txt")
                run_directly(claude, env, bridge.work, made, direct)
                made = script_one_tool(fake, bridge.work / f"made-{next(files)}.txt")
                run_through_bridge(bridge, bridge.work, made, mode, through[mode])
                print(
                    f"run {n + 1}/{runs} {mode}: direct {direct.total[-1] * 1000:.0f} ms, "
                    f"Bridge {through[mode].total[-1] * 1000:.0f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    return through, direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="runs per mode, each of Bridge and direct")
    args = parser.parse_args()
    try:
        claude = claude_bin()
    except (pytest.skip.Exception, pytest.fail.Exception) as missing:
        emit([Row("real Claude Code task, Bridge ÷ the same CLI run directly", None, note=str(missing))])
        return
    through, direct = measure(claude, args.runs)
    emit([*(row for mode in MODES for row in rows(mode, through[mode], direct)), noise_row(direct)])


if __name__ == "__main__":
    main()
