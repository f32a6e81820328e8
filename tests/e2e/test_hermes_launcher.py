"""End to end: the real Hermes CLI (under .tools), offline against tests/fakes/openai_server.py, takes a 140,000-byte
task starting with "-" through Bridge's one-shot launcher: the whole task arrives as the user message, argv never holds
it, and Hermes never leaves loopback. The launcher's argv is unit-tested in tests/unit/test_runner_hermes.py."""

import subprocess
import uuid
from pathlib import Path

import pytest

from jobs.supervision.runners.base import RunSpec
from jobs.supervision.runners.hermes import HermesOneShotRunner
from tests.fakes.hermes_env import DEFAULT_HERMES_BIN, RecordingProxy, offline_env, write_hermes_home
from tests.fakes.openai_server import FakeOpenAI, text
from tests.support import sized_prompt, skip_or_fail


@pytest.mark.e2e
def test_real_hermes_takes_a_140000_byte_task_through_the_launcher(settings, tmp_path):
    """The real CLI, offline against the fake OpenAI server: the whole task is the user message; argv lacks it."""
    if not DEFAULT_HERMES_BIN.is_file():
        skip_or_fail(f"the Hermes CLI is not installed at {DEFAULT_HERMES_BIN}")
    settings.BRIDGE_HERMES_BIN = str(DEFAULT_HERMES_BIN)
    prompt = "-" + sized_prompt(140_000 - 1, marker := f"MARK-{uuid.uuid4().hex}")  # a leading "-" too
    runner = HermesOneShotRunner(RunSpec(agent="hermes", prompt=prompt, cwd=str(tmp_path)))
    with FakeOpenAI([text("Big task read.")]) as fake, RecordingProxy() as proxy:
        home = write_hermes_home(tmp_path / "hermes-home", fake.url)
        env = offline_env(home, tmp_path, proxy.url)
        child = subprocess.Popen(
            runner.argv(), cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes()
        for line in runner.stdin_lines():
            child.stdin.write(line)
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.decode()[-2000:]
    assert out.decode().strip() == "Big task read." and "session_id:" in err.decode()
    (request,) = fake.main_requests
    content = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    assert content == prompt, "the whole task, as the user message"
    assert marker.encode() not in cmdline and len(cmdline) < 1000
    assert proxy.requests == [], f"Hermes tried to leave loopback: {proxy.requests}"
