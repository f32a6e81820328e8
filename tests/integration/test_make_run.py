"""`make run` as a person at a terminal meets it: Ctrl-C (SIGINT to the terminal's foreground group: make and what
it runs) drains exactly as `manage.py runbridge` does, with no traceback, and make waits for the server to end."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import psutil
import pytest

from tests.bridge_server import LISTENING_RE, REPO, BridgeServer, new_token
from tests.support import wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or os.name != "posix", reason="needs make and a POSIX process group"
)


class MakeRun:
    """`make run PORT=0` in a process group of its own, as a terminal runs a foreground job; all it prints is kept."""

    def __init__(self, bridge: BridgeServer) -> None:
        command = ["make", "-s", "run", "PORT=0", f"PYTHON={sys.executable}"]
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=bridge.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def url(self) -> str:
        def announced() -> str:
            return next((m.group(1) for line in self.lines if (m := LISTENING_RE.search(line))), "")

        return str(wait_until(announced, timeout=300, what="make run to say where it listens"))

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)


def test_ctrl_c_under_make_run_drains_and_make_waits_for_the_server(tmp_path, fake_agent):
    bridge = BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), {"BRIDGE_DRAIN_S": "120"})
    make = MakeRun(bridge)
    try:
        bridge.attach(make.url(), new_token(bridge.env))
        [child] = psutil.Process(make.proc.pid).children()
        assert "runbridge" in child.cmdline(), "make's own child is the server: a signal reaches it and nothing else"
        prompt = "ask Bash " + json.dumps({"command": "touch allowed.txt"}) + "\nsay finished"
        task_id = bridge.create_task(prompt, bridge.work)
        wait_until(lambda: bridge.permissions(task_id), what="the agent's permission request")

        make.ctrl_c()
        wait_until(lambda: "Ctrl-C again cancels them now" in make.output, what="the drain message")
        assert make.proc.poll() is None, "make waits while the server drains"
        assert bridge.decide(task_id, "allow").status_code == 200, "the server still takes the answer after Ctrl-C"
        make.proc.wait(timeout=60)
    finally:
        if make.proc.poll() is None:
            os.killpg(make.proc.pid, signal.SIGKILL)
    assert "Traceback" not in make.output and "KeyboardInterrupt" not in make.output, make.output
    assert "every task has ended; stopped serving" in make.output, make.output
    assert (bridge.work / "allowed.txt").exists()
