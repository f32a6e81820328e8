"""Record real Claude Code CLI transcripts against the scripted fake Anthropic API (offline, loopback only).

    .venv/bin/python tests/fakes/record_claude.py OUTDIR [scenario ...]

For each scenario writes OUTDIR/<scenario>.jsonl (stdout lines exactly as printed), <scenario>.stdin.jsonl (what we
wrote to stdin) and <scenario>.meta.json (argv, exit code, stderr, per-line times, files left in cwd, a summary of
the requests the fake API received). `resume` also writes resume.first.*. The CLI binary is $CLAUDE_BIN or
/tmp/cc/node_modules/.bin/claude. Each run gets a fresh temp HOME and cwd (resume reuses the first run's).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import contextlib

from tests.fakes.anthropic_server import FakeAnthropic, error, slow_text, text, tool_use  # noqa: E402
from tests.fakes.claude_env import offline_env  # noqa: E402

CLAUDE = os.environ.get("CLAUDE_BIN", "/tmp/cc/node_modules/.bin/claude")
BASE_ARGS = [
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
]


def user_line(prompt: str) -> dict:
    return {
        "type": "user",
        "session_id": "",
        "parent_tool_use_id": None,
        "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
    }


def allow(req: dict, updated_input: dict | None = None) -> dict:
    inner = {
        "behavior": "allow",
        "updatedInput": updated_input if updated_input is not None else req["request"]["input"],
    }
    return {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": req["request_id"], "response": inner},
    }


def deny(req: dict, message: str, interrupt: bool = False) -> dict:
    return {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": req["request_id"],
            "response": {"behavior": "deny", "message": message, "interrupt": interrupt},
        },
    }


class Run:
    """One claude subprocess: raw stdout lines with times, stdin log, helpers to wait for lines."""

    def __init__(
        self, fake: FakeAnthropic, home: str, cwd: str, extra_args: list[str] = (), env_extra: dict | None = None
    ):
        self.argv = [CLAUDE, *BASE_ARGS, *extra_args]
        self.env = {**offline_env(fake.url, home), **(env_extra or {})}
        self.cwd, self.home = cwd, home
        self.lines: list[str] = []  # raw stdout lines, without the trailing newline
        self.times: list[float] = []  # seconds since spawn
        self.stdin_lines: list[str] = []
        self.q: queue.Queue = queue.Queue()
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        for raw in self.p.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            self.times.append(round(time.monotonic() - self.t0, 3))
            try:
                obj = json.loads(line)
            except ValueError:
                obj = {"type": "_unparsed", "raw": line}
            self.q.put(obj)
        self.q.put(None)  # EOF

    def _read_err(self) -> None:
        self.stderr = self.p.stderr.read()

    def send(self, obj: dict) -> None:
        line = json.dumps(obj)
        self.stdin_lines.append(line)
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()

    def close_stdin(self) -> None:
        if not self.p.stdin.closed:
            self.p.stdin.close()

    def next(self, timeout: float = 30.0) -> dict | None:
        """Next parsed stdout object; None at EOF; raises queue.Empty on timeout."""
        return self.q.get(timeout=timeout)

    def until(self, pred, timeout: float = 30.0) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            obj = self.next(max(0.01, deadline - time.monotonic()))
            if obj is None or pred(obj):
                return obj

    def drain(self, seconds: float) -> list[dict]:
        """Collect whatever arrives within `seconds`."""
        out, deadline = [], time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                obj = self.q.get(timeout=left)
            except queue.Empty:
                break
            if obj is None:
                break
            out.append(obj)
        return out

    def finish(self, grace: float = 0.5, timeout: float = 20.0) -> int:
        """After the result line: wait `grace` for trailing lines, close stdin, wait for exit."""
        time.sleep(grace)
        self.close_stdin()
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            rc = self.p.wait()
        self.exit_time = round(time.monotonic() - self.t0, 3)
        time.sleep(0.1)
        return rc


def is_type(t: str, subtype: str | None = None):
    return lambda o: (
        o.get("type") == t
        and (subtype is None or o.get("subtype") == subtype or (o.get("request") or {}).get("subtype") == subtype)
    )


def summarize_requests(fake: FakeAnthropic) -> list[dict]:
    out = []
    for r in fake.log:
        b = r["body"] if isinstance(r["body"], dict) else {}
        msgs = b.get("messages") or []
        out.append(
            {
                "method": r["method"],
                "path": r["path"],
                "class": r["class"],
                "model": b.get("model"),
                "stream": b.get("stream"),
                "n_tools": len(b.get("tools") or []),
                "n_messages": len(msgs),
                # full messages minus the long system-reminder texts, to check history on resume
                "messages": [{"role": m.get("role"), "content": _short_content(m.get("content"))} for m in msgs],
            }
        )
    return out


def _short_content(c):
    if isinstance(c, str):
        return c[:200]
    res = []
    for blk in c or []:
        blk = dict(blk)
        if isinstance(blk.get("text"), str) and len(blk["text"]) > 200:
            blk["text"] = blk["text"][:200] + "..."
        res.append(blk)
    return res


def save(outdir: Path, name: str, run: Run, rc: int, fake: FakeAnthropic, notes: dict | None = None) -> None:
    (outdir / f"{name}.jsonl").write_text("".join(line + "\n" for line in run.lines))
    (outdir / f"{name}.stdin.jsonl").write_text("".join(line + "\n" for line in run.stdin_lines))
    meta = {
        "argv": ["claude", *run.argv[1:]],
        "exit_code": rc,
        "exit_time_s": getattr(run, "exit_time", None),
        "stderr": run.stderr.decode("utf-8", "replace"),
        "line_times_s": run.times,
        "cwd_files": sorted(os.listdir(run.cwd)),
        "requests": summarize_requests(fake),
        **(notes or {}),
    }
    (outdir / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"{name:24s} rc={rc:<4} lines={len(run.lines):<3} requests={len(fake.log)} "
        f"types={[json.loads(x).get('type') for x in run.lines if x.startswith('{')]}",
        flush=True,
    )


_TMP: list[str] = []


def dirs() -> tuple[str, str]:
    home, cwd = tempfile.mkdtemp(prefix="cc-home-"), tempfile.mkdtemp(prefix="cc-cwd-")
    _TMP.extend([home, cwd])
    return home, cwd


# scenarios ---------------------------------------------------------------------------------------------------------


def sc_plain(outdir, name="plain", extra=()):
    with FakeAnthropic([text("Hello from the fake model. This is a plain answer.")]) as fake:
        run = Run(fake, *dirs(), extra_args=list(extra))
        run.send(user_line("Say hello."))
        run.until(is_type("result"))
        save(outdir, name, run, run.finish(), fake)


def sc_partial(outdir):
    sc_plain(outdir, "partial", ["--include-partial-messages"])


def _bash(outdir, name, decide, cmd="touch marker.txt", after="Done."):
    with FakeAnthropic(
        [tool_use("Bash", {"command": cmd, "description": "Create a marker file"}), text(after)]
    ) as fake:
        run = Run(fake, *dirs(), extra_args=["--permission-mode", "default"])
        run.send(user_line("Create marker.txt using Bash."))
        req = run.until(is_type("control_request", "can_use_tool"))
        run.send(decide(req))
        run.until(is_type("result"))
        save(outdir, name, run, run.finish(), fake)


def sc_bash_allowed(outdir):
    _bash(outdir, "bash_allowed", lambda r: allow(r))


def sc_bash_denied(outdir):
    _bash(
        outdir,
        "bash_denied",
        lambda r: deny(r, "Denied by the test: no markers today."),
        after="Understood, I will not.",
    )


def sc_bash_edited(outdir):
    _bash(outdir, "bash_edited", lambda r: allow(r, {"command": "touch edited.txt", "description": "edited by parent"}))


def sc_bash_deny_interrupt(outdir):
    _bash(
        outdir,
        "bash_deny_interrupt",
        lambda r: deny(r, "Stop everything.", interrupt=True),
        after="Should not be asked.",
    )


def sc_two_tools(outdir):
    script = [
        tool_use(
            "Bash",
            {"command": "touch a.txt", "description": "a"},
            ("Bash", {"command": "touch b.txt", "description": "b"}),
        ),
        text("Both done."),
    ]
    with FakeAnthropic(script) as fake:
        run = Run(fake, *dirs(), extra_args=["--permission-mode", "default"])
        run.send(user_line("Create a.txt and b.txt."))
        first = run.until(is_type("control_request", "can_use_tool"))
        seen = run.drain(2.0)  # does a second can_use_tool arrive before we answer the first?
        pending = [first] + [o for o in seen if is_type("control_request", "can_use_tool")(o)]
        concurrent = len(pending)
        for req in pending:
            run.send(allow(req))
        while True:  # answer any that come later (serial case)
            o = run.until(lambda o: is_type("control_request", "can_use_tool")(o) or is_type("result")(o))
            if o is None or o["type"] == "result":
                break
            run.send(allow(o))
        save(outdir, "two_tools", run, run.finish(), fake, {"pending_at_once": concurrent})


def sc_interrupt(outdir):
    with FakeAnthropic(
        [tool_use("Bash", {"command": "touch never.txt", "description": "never"}), text("Should not be asked.")]
    ) as fake:
        run = Run(fake, *dirs(), extra_args=["--permission-mode", "default"])
        run.send(user_line("Create never.txt."))
        run.until(is_type("control_request", "can_use_tool"))
        run.send({"type": "control_request", "request_id": "bridge-interrupt-1", "request": {"subtype": "interrupt"}})
        res = run.until(is_type("result"), timeout=30)
        rc = run.finish(grace=1.0)
        save(outdir, "interrupt", run, rc, fake, {"got_result": res is not None})


def sc_interrupt_streaming(outdir):
    with FakeAnthropic([slow_text("one two three four five six seven eight nine ten " * 3, 0.3)]) as fake:
        run = Run(fake, *dirs(), extra_args=["--include-partial-messages"])
        run.send(user_line("Count slowly."))
        run.until(lambda o: o.get("type") == "stream_event" and o["event"].get("type") == "content_block_delta")
        run.send({"type": "control_request", "request_id": "bridge-interrupt-2", "request": {"subtype": "interrupt"}})
        res = run.until(is_type("result"), timeout=30)
        rc = run.finish(grace=1.0)
        save(outdir, "interrupt_streaming", run, rc, fake, {"got_result": res is not None})


def sc_api_500(outdir):
    with FakeAnthropic([error(500, "Fake internal error")]) as fake:
        run = Run(fake, *dirs())
        run.send(user_line("Say hello."))
        run.until(is_type("result"), timeout=60)
        save(outdir, "api_500", run, run.finish(), fake)


def sc_resume(outdir):
    home, cwd = dirs()
    with FakeAnthropic([text("First answer: the secret word is PAPAYA.")]) as fake:
        run = Run(fake, home, cwd)
        run.send(user_line("Remember a secret word."))
        res = run.until(is_type("result"))
        sid = res["session_id"]
        save(outdir, "resume.first", run, run.finish(), fake)
    with FakeAnthropic([text("Second answer: it was PAPAYA.")]) as fake:
        run = Run(fake, home, cwd, extra_args=["--resume", sid])
        run.send(user_line("What was the secret word?"))
        res2 = run.until(is_type("result"))
        rc = run.finish()
        msgs = fake.main_requests[0]["messages"] if fake.main_requests else []
        has_history = "PAPAYA" in json.dumps(msgs) and "Remember a secret word." in json.dumps(msgs)
        save(
            outdir,
            "resume",
            run,
            rc,
            fake,
            {
                "resumed_session_id": sid,
                "result_session_id": (res2 or {}).get("session_id"),
                "history_in_request": has_history,
            },
        )


def sc_skip_permissions_root(outdir, name="skip_permissions_root", env_extra=None):
    with FakeAnthropic([tool_use("Bash", {"command": "touch marker.txt", "description": "m"}), text("Done.")]) as fake:
        run = Run(fake, *dirs(), extra_args=["--dangerously-skip-permissions"], env_extra=env_extra)
        run.send(user_line("Create marker.txt."))
        with contextlib.suppress(queue.Empty):
            run.until(is_type("result"), timeout=30)
        save(outdir, name, run, run.finish(), fake, {"uid": os.getuid()})


def sc_skip_permissions_sandbox(outdir):
    sc_skip_permissions_root(outdir, "skip_permissions_sandbox", {"IS_SANDBOX": "1"})


def sc_stdin_closed(outdir):
    """DESIGN.md claim: closing stdin before the result makes permission requests fail."""
    with FakeAnthropic([tool_use("Bash", {"command": "touch marker.txt", "description": "m"}), text("Done.")]) as fake:
        run = Run(fake, *dirs(), extra_args=["--permission-mode", "default"])
        run.send(user_line("Create marker.txt."))
        run.close_stdin()
        with contextlib.suppress(queue.Empty):
            run.until(is_type("result"), timeout=30)
        save(outdir, "stdin_closed", run, run.finish(), fake)


def sc_sigterm(outdir):
    with FakeAnthropic([slow_text("one two three four five six seven eight nine ten " * 3, 0.3)]) as fake:
        run = Run(fake, *dirs(), extra_args=["--include-partial-messages"])
        run.send(user_line("Count slowly."))
        run.until(lambda o: o.get("type") == "stream_event" and o["event"].get("type") == "content_block_delta")
        t = time.monotonic()
        run.p.send_signal(signal.SIGTERM)
        rc = run.p.wait(timeout=10)
        dt = round(time.monotonic() - t, 3)
        time.sleep(0.2)
        save(outdir, "sigterm", run, rc, fake, {"sigterm_to_exit_s": dt})


def sc_two_reads(outdir, name="two_reads", interrupt=False):
    """Two concurrency-safe tools (Read outside cwd) in one response: both permission requests are pending at once."""
    other = tempfile.mkdtemp(prefix="cc-other-")
    _TMP.append(other)
    for n in "xy":
        Path(other, f"{n}.txt").write_text(n + "\n")
    script = [
        tool_use("Read", {"file_path": f"{other}/x.txt"}, ("Read", {"file_path": f"{other}/y.txt"})),
        text("Read both."),
    ]
    with FakeAnthropic(script) as fake:
        run = Run(fake, *dirs(), extra_args=["--permission-mode", "default"])
        run.send(user_line("Read x.txt and y.txt."))
        first = run.until(is_type("control_request", "can_use_tool"))
        pending = [first] + [o for o in run.drain(1.5) if is_type("control_request", "can_use_tool")(o)]
        if interrupt:
            run.send(
                {"type": "control_request", "request_id": "bridge-interrupt-3", "request": {"subtype": "interrupt"}}
            )
        else:
            for req in pending:
                run.send(allow(req))
        run.until(is_type("result"))
        save(outdir, name, run, run.finish(), fake, {"pending_at_once": len(pending)})


def sc_interrupt_two_pending(outdir):
    sc_two_reads(outdir, "interrupt_two_pending", interrupt=True)


def sc_invalid_json_stdin(outdir):
    """A stdin line that is not JSON kills the CLI (exit 1, message on stderr, no result line)."""
    with FakeAnthropic([slow_text("a b c d e f g h i j k l m n o p", 0.3)]) as fake:
        run = Run(fake, *dirs(), extra_args=["--include-partial-messages"])
        run.send(user_line("Count slowly."))
        run.until(lambda o: o.get("type") == "stream_event")
        run.stdin_lines.append("this is not json")
        run.p.stdin.write(b"this is not json\n")
        run.p.stdin.flush()
        rc = run.p.wait(timeout=10)
        time.sleep(0.2)
        save(outdir, "invalid_json_stdin", run, rc, fake)


def sc_second_turn(outdir):
    """After a result the CLI waits for the next user line on stdin (multi-turn); exits only when stdin closes."""
    with FakeAnthropic([text("First turn answer."), text("Second turn answer.")]) as fake:
        run = Run(fake, *dirs())
        run.send(user_line("Turn one."))
        run.until(is_type("result"))
        run.send(user_line("Turn two."))
        run.until(is_type("result"))
        save(outdir, "second_turn", run, run.finish(), fake)


def sc_max_turns(outdir):
    with FakeAnthropic([tool_use("Bash", {"command": "touch marker.txt", "description": "m"}), text("Done.")]) as fake:
        run = Run(fake, *dirs(), extra_args=["--permission-mode", "default", "--max-turns", "1"])
        run.send(user_line("Create marker.txt."))
        o = run.until(lambda o: is_type("control_request", "can_use_tool")(o) or is_type("result")(o))
        if o and o["type"] == "control_request":
            run.send(allow(o))
            run.until(is_type("result"))
        save(outdir, "max_turns", run, run.finish(), fake)


def sc_api_retry(outdir):
    """CLAUDE_CODE_MAX_RETRIES=1: one system/api_retry line, then the retried request succeeds."""
    with FakeAnthropic([error(529, "Overloaded (fake)"), text("Recovered after retry.")]) as fake:
        run = Run(fake, *dirs(), env_extra={"CLAUDE_CODE_MAX_RETRIES": "1"})
        run.send(user_line("Say hello."))
        run.until(is_type("result"), timeout=60)
        save(outdir, "api_retry", run, run.finish(), fake)


SCENARIOS = {n[3:]: f for n, f in globals().copy().items() if n.startswith("sc_")}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    outdir = Path(argv[0])
    outdir.mkdir(parents=True, exist_ok=True)
    names = argv[1:] or list(SCENARIOS)
    try:
        for n in names:
            try:
                SCENARIOS[n](outdir)
            except Exception as e:  # keep recording the others
                print(f"{n}: FAILED {type(e).__name__}: {e}", flush=True)
    finally:
        if not os.environ.get("KEEP_TMP"):
            for d in _TMP:
                shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
