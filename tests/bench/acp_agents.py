"""Benchmark (`make bench`; not collected by pytest): a real ACP agent's task with one tool, through Bridge against
the same CLI driven directly by a minimal ACP client (issue 33's row).

The agent is Gemini CLI, Bridge's `gemini` preset: the pinned CLI (.tools, record_gemini.py `DEFAULT_GEMINI_BIN`, or
$BRIDGE_TEST_GEMINI_BIN) talks only to the scripted Gemini API of tests/fakes/gemini_server.py on 127.0.0.1, with its
settings (no usage statistics, no update checks); every other HTTP(S) attempt goes to a recording proxy, and the run
fails if that proxy saw anything. Each run the model asks for one `run_shell_command` (`touch made.txt`), then
answers. Runs are interleaved: direct, Bridge (approve), direct, Bridge (bypass), …, after one untimed round of each.

- direct: `gemini --acp` started with the very environment Bridge gave the CLI in its warm-up task (read from the
  process while it waited for its permission, without Bridge's process tag), driven by record_gemini.py's
  `AcpClient`: initialize, session/new, session/prompt, its one permission request allowed at once with
  `proceed_once`, stdin closed after the prompt's answer; from just before the spawn to its exit.
- Bridge: a real `manage.py runbridge` (bridge_server.py BridgeServer, shipped poll settings) with the CLI as its
  `gemini` agent; from just before the create POST to the SSE `end` (the task is done). In approve mode the client
  allows the request by POST as soon as the SSE stream shows it; in bypass mode Bridge allows it itself. Bridge runs
  the CLI in its sandbox where it has one (the notes say which); the direct run has none.

The notes break Bridge's time down by the commit times of its events (create → spawned; spawned → the session made
and → the prompt's answer, of which the permission request → the tool's result; the answer → the task done;
done → the client's `end`) beside the direct run's start → session/new answered and → the prompt's answer, request
read → tool result and answer → exit; and give the server process's CPU time per task (psutil: on 2 cores it competes
with the CLI's node process), and the Bridge runs that finished LATE_S or more over their mode's median. As in
real_cli.py, each mode divides by the median of all the direct runs, the ratio's 90 % interval is a bootstrap over
the rounds (`ratio_interval`), and a last row divides the direct runs by themselves (an A/A test): how far it lands
from 1 is how finely this run can tell Bridge's part from the CLI's own variation. Here, beside a test suite on
the same 2 cores, two runs of 12 rounds read 1.08 (0.72–1.28) and 1.04 (0.98–1.18), while Bridge's own part, its
events' commit times say, is some 40 ms of a 2.3 s task (create → spawned, the allow's round trip, the CLI's exit
→ done → `end`): the ratios there are the machine's noise, not Bridge's. The default runs fit in 3 minutes.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs.processes.tree import TAG_VAR  # noqa: E402
from tests.bench.real_cli import Runs, ratio_interval  # noqa: E402
from tests.bench.run import SHIPPED, event_time  # noqa: E402
from tests.bench.table import Row, emit, p50  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402
from tests.fakes.gemini_server import API_KEY, MODEL, FakeGemini, function_call, text, write_settings  # noqa: E402
from tests.fakes.hermes_env import PROXY_VARS, RecordingProxy  # noqa: E402
from tests.fakes.record_gemini import DEFAULT_GEMINI_BIN, AcpClient, is_permission, select  # noqa: E402

AGENT = "gemini"
LATE_S = 0.5
MODES = ("approve", "bypass")
PROMPT = "Make the file, then say done."
COMMAND = "touch made.txt"
ANSWER = "Done: the file is there."
TIMEOUT_S = 60


def gemini_bin() -> tuple[Path, str]:
    """The real CLI, and "" or why it cannot be used."""
    configured = os.environ.get("BRIDGE_TEST_GEMINI_BIN")
    path = Path(configured) if configured else DEFAULT_GEMINI_BIN
    if path.is_file() and os.access(path, os.X_OK):
        return path, ""
    return path, f"Gemini CLI is not installed at {path} (run `make tools`, or set BRIDGE_TEST_GEMINI_BIN)"


def gemini_bridge(root: Path, gemini: Path, fake: FakeGemini, proxy: RecordingProxy) -> BridgeServer:
    """A Bridge (not started yet) whose `gemini` agent is the pinned CLI, set up as tests/e2e/test_gemini.py sets it
    up: the fake as the Gemini API, everything but loopback to the proxy; the shipped poll settings."""
    agents_file = root / "agents.toml"
    agents_file.write_text(f'[agents.{AGENT}]\nprotocol = "acp"\ncommand = ["{gemini}", "--acp"]\n')
    env = {
        **SHIPPED,
        "BRIDGE_AGENTS_FILE": str(agents_file),
        "GEMINI_API_KEY": API_KEY,
        "GOOGLE_GEMINI_BASE_URL": fake.url,
        "GEMINI_MODEL": MODEL,
        "BRIDGE_PASS_ENV": ",".join(PROXY_VARS),
        **{name: proxy.url for name in PROXY_VARS if not name.lower().startswith("no_")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    bridge = BridgeServer(root, fake.url, extra_env=env)
    write_settings(bridge.home)
    return bridge


def script_one_tool(fake: FakeGemini, made: Path) -> None:
    """The model asks for one shell command that makes `made` (removed first), then answers."""
    made.unlink(missing_ok=True)
    fake.clear()
    fake.push(function_call("run_shell_command", {"command": COMMAND, "description": "bench"}), text(ANSWER))


def is_tool_done(message: dict) -> bool:
    update = (message.get("params") or {}).get("update") or {}
    return update.get("sessionUpdate") == "tool_call_update" and update.get("status") in ("completed", "failed")


def run_directly(gemini: Path, env: dict[str, str], cwd: Path, runs: Runs) -> None:
    """The CLI without Bridge, driven by a minimal ACP client, its one permission allowed at once."""
    started = time.time()
    client = AcpClient(gemini, cwd, env)
    try:
        client.initialize()
        session_id = client.new_session()
        session = time.time()
        prompt_id = client.prompt(session_id, PROMPT)
        client.respond(client.until(is_permission, TIMEOUT_S)["id"], select("proceed_once"))
        asked = time.time()
        client.until(is_tool_done, TIMEOUT_S)
        tool = time.time()
        answer = client.answer(prompt_id, TIMEOUT_S)
        result = time.time()
        client.finish()
        ended = time.time()
    finally:
        client.stop()
    if (answer.get("result") or {}).get("stopReason") != "end_turn" or not (cwd / "made.txt").exists():
        raise SystemExit(f"direct run: the prompt answered {answer} and made.txt is {(cwd / 'made.txt').exists()}")
    runs.add(
        ended - started,
        session=session - started,
        cli=result - started,
        tool=tool - asked,
        tail=ended - result,
    )


def run_through_bridge(bridge: BridgeServer, cwd: Path, mode: str, runs: Runs) -> None:
    """One task over REST: create, follow its SSE stream, allow its one permission as soon as it shows."""
    server = bridge.processes()
    cpu = sum(sum(process.cpu_times()[:2]) for process in server)
    sent = time.time()
    task_id = bridge.create_task(PROMPT, cwd, agent=AGENT, permission_mode=mode, timeout_s=TIMEOUT_S)
    times: dict[str, float] = {}
    for event in bridge.stream(task_id, deadline_s=TIMEOUT_S):
        kind = event["event"]
        if kind == "permission_request" and mode == "approve":
            bridge.ok(bridge.decide(task_id, "allow"))
        if kind in ("spawned", "init", "permission_request", "tool_result", "result"):
            times[kind] = event_time(event)
        elif kind == "status" and event["data"]["data"]["status"] == "done":
            times["done"] = event_time(event)
        elif kind == "end":
            times["end"] = time.time()  # the client has the outcome; the stream's close that follows is transport
    cpu = sum(sum(process.cpu_times()[:2]) for process in server) - cpu
    if not {"init", "permission_request", "tool_result", "done", "end"} <= times.keys():
        raise SystemExit(f"task {task_id}: no session, permission request, tool result or end: {bridge.task(task_id)}")
    if not (cwd / "made.txt").exists():
        raise SystemExit(f"task {task_id} ended done without making made.txt")
    runs.add(
        times["end"] - sent,
        spawn=times["spawned"] - sent,
        session=times["init"] - times["spawned"],
        cli=times["result"] - times["spawned"],
        tool=times["tool_result"] - times["permission_request"],
        tail=times["done"] - times["result"],
        end=times["end"] - times["done"],
        cpu=cpu,
    )


def bridge_agent_env(bridge: BridgeServer, cwd: Path) -> dict[str, str]:
    """Bridge's warm-up task: the environment Bridge gave the CLI (or the sandbox that starts it), read while the CLI
    waits for its permission, less the tag Bridge marks the task's processes with."""
    task_id = bridge.create_task(PROMPT, cwd, agent=AGENT, permission_mode="approve", timeout_s=TIMEOUT_S)
    pid, env = 0, {}
    for event in bridge.stream(task_id, deadline_s=TIMEOUT_S):
        if event["event"] == "spawned":
            pid = event["data"]["data"]["pid"]
        elif event["event"] == "permission_request":
            env = psutil.Process(pid).environ()
            bridge.ok(bridge.decide(task_id, "allow"))
    if bridge.task(task_id)["status"] != "done" or TAG_VAR not in env:
        raise SystemExit(f"the warm-up task {task_id} did not end done with the CLI's environment read")
    env.pop(TAG_VAR)
    return env


def one_round(
    gemini: Path, env: dict[str, str], bridge: BridgeServer, fake: FakeGemini, through: dict[str, Runs], direct: Runs
) -> None:
    """Per mode a direct run, then a Bridge run."""
    for mode in MODES:
        script_one_tool(fake, bridge.work / "made.txt")
        run_directly(gemini, env, bridge.work, direct)
        script_one_tool(fake, bridge.work / "made.txt")
        run_through_bridge(bridge, bridge.work, mode, through[mode])


def measure(gemini: Path, runs: int) -> tuple[dict[str, Runs], Runs, str]:
    """Per mode, the Bridge runs; all direct runs, interleaved, so each round holds one direct run per mode; and the
    sandbox Bridge ran the CLI in."""
    through = {mode: Runs() for mode in MODES}
    direct = Runs()
    with (
        tempfile.TemporaryDirectory(prefix="bridge-bench-acp-") as tmp,
        FakeGemini() as fake,
        RecordingProxy() as proxy,
        gemini_bridge(Path(tmp), gemini, fake, proxy) as bridge,
    ):
        script_one_tool(fake, bridge.work / "made.txt")
        env = bridge_agent_env(bridge, bridge.work)
        one_round(gemini, env, bridge, fake, {mode: Runs() for mode in MODES}, Runs())  # warm, untimed
        for n in range(runs):
            one_round(gemini, env, bridge, fake, through, direct)
            print(
                f"run {n + 1}/{runs}: direct {direct.total[-2] * 1000:.0f}, {direct.total[-1] * 1000:.0f} ms; "
                + ", ".join(f"Bridge ({mode}) {through[mode].total[-1] * 1000:.0f} ms" for mode in MODES),
                file=sys.stderr,
                flush=True,
            )
        sandbox = bridge.get("/health").json()["sandbox"]["kind"] or "none"
        if proxy.requests:
            raise SystemExit(f"Gemini CLI tried to leave loopback: {proxy.requests}")
    return through, direct, sandbox


def row(mode: str, through: Runs, direct: Runs, sandbox: str) -> Row:
    median = p50(through.total)
    late = sum(1 for seconds in through.total if seconds >= median + LATE_S)
    b, d = through.phase_ms, direct.phase_ms
    low, high = ratio_interval(through.total, direct.total)
    note = (
        f"90 % interval of the ratio {low:.3f}–{high:.3f} (bootstrap over the {len(through.total)} rounds). "
        f"Bridge p50 {median * 1000:.0f} ms, direct p50 {p50(direct.total) * 1000:.0f} ms over all "
        f"{len(direct.total)} direct runs; Bridge's sandbox: {sandbox}. "
        f"Bridge [direct]: create → spawned {b('spawn')} ms; spawned → session {b('session')} "
        f"[start → session {d('session')}] ms; spawned → prompt answered {b('cli')} [start → answered {d('cli')}] "
        f"ms, of which permission asked → tool result {b('tool')} [{d('tool')}] ms; answered → done {b('tail')} "
        f"[answered → exit {d('tail')}] ms; done → client's end {b('end')} ms; the server's CPU per task "
        f"{b('cpu')} ms; {late} Bridge runs ≥ {LATE_S * 1000:.0f} ms over the median (max "
        f"{max(through.total) * 1000:.0f} ms)"
    )
    return Row(
        f"real Gemini CLI task (ACP, one tool, {mode}), Bridge ÷ the same CLI driven directly, p50",
        median / p50(direct.total),
        unit="×",
        goal=1.05,
        limit=1.0,
        note=note,
    )


def noise_row(direct: Runs) -> Row:
    """The direct runs against themselves: those before an approve run ÷ those before a bypass run (an A/A test)."""
    first, second = direct.total[0::2], direct.total[1::2]
    low, high = ratio_interval(first, second)
    return Row(
        "real Gemini CLI task, the same CLI driven directly: one half of the runs ÷ the other, p50",
        p50(first) / p50(second),
        unit="×",
        limit=1.0,
        note=f"the measure's own noise: 90 % interval {low:.3f}–{high:.3f} over {len(first)} pairs",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs per mode, each of Bridge and direct")
    args = parser.parse_args()
    gemini, missing = gemini_bin()
    if missing:
        emit([Row("real Gemini CLI task, Bridge ÷ the same CLI driven directly", None, note=missing)])
        return
    through, direct, sandbox = measure(gemini, args.runs)
    emit([*(row(mode, through[mode], direct, sandbox) for mode in MODES), noise_row(direct)])


if __name__ == "__main__":
    main()
