"""Hermes tasks run through the in-process supervisor (integration: the test database, the `supervisor` fixture) with
tests/fakes/fake_hermes.py as the CLI: a spawn failure names BRIDGE_HERMES_BIN, a task of any accepted size reaches
one-shot Hermes on stdin and never in argv, a shell wrapper is refused clearly, and provider variables reach Hermes
while Bridge's own secrets never do. The runners' parsing is in tests/unit/test_runner_hermes.py."""

import hashlib
import json
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from jobs import actions
from jobs.agents.executors import BRIDGE_ENV_NAMES, BRIDGE_ENV_PREFIXES
from jobs.core.vocabulary import Status
from jobs.supervision.runners.base import RunSpec
from jobs.supervision.runners.hermes import HERMES_PROVIDER_ENV, HermesAcpRunner, HermesOneShotRunner
from jobs.supervision.supervisor import run_spec
from tests.support import FAKES, make_task, python_script, sized_prompt, wait_for

# --- a spawn that fails ---------------------------------------------------------------------------------------


def test_spawn_error_names_the_hermes_setting(supervisor, settings):
    settings.BRIDGE_HERMES_BIN = "/nonexistent/hermes"
    task = wait_for(make_task("hi", agent="hermes"))
    assert task.status == Status.FAILED
    assert "/nonexistent/hermes" in task.error and "BRIDGE_HERMES_BIN" in task.error


# --- the task never travels in argv; the environment (through the supervisor, with the fake) ------------------


@pytest.fixture
def fake_oneshot(supervisor, settings, tmp_path) -> Path:
    """BRIDGE_HERMES_BIN as a Python console script running tests/fakes/fake_hermes.py, in one-shot mode."""
    script = python_script(
        tmp_path / "hermes-venv" / "bin" / "hermes",
        f"import runpy\nrunpy.run_path({str(FAKES / 'fake_hermes.py')!r}, run_name='__main__')\n",
    )
    settings.BRIDGE_HERMES_BIN = str(script)
    settings.BRIDGE_HERMES_MODE = "oneshot"
    return script


def prompt_sizes() -> list[int]:
    """From 1 byte to BRIDGE_MAX_PROMPT_BYTES, through the sizes that matter: a pipe's buffer (64 KiB), the largest
    argv string Linux takes (MAX_ARG_STRLEN, 128 KiB) and the 140,000-byte task that once failed."""
    limit = settings.BRIDGE_MAX_PROMPT_BYTES
    sizes = {100, 64 * 1024 + 1, 128 * 1024, 140_000, limit, *(limit * k // 5 for k in range(1, 5))}
    return sorted(size for size in sizes if 100 <= size <= limit)


@pytest.mark.parametrize("size", prompt_sizes())
def test_a_task_of_any_accepted_size_reaches_oneshot_hermes_on_stdin_not_in_argv(fake_oneshot, size):
    marker = f"MARK-{uuid.uuid4().hex}"
    prompt = sized_prompt(size, marker)
    assert len(prompt.encode()) == size
    task = wait_for(make_task(prompt, agent="hermes"))
    assert task.status == Status.DONE, task.error
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    assert f"query: {size} bytes, sha256 {digest}" in task.result, "the whole task, byte for byte"
    assert "stdin: devnull" in task.result, "Hermes itself still gets /dev/null as stdin"
    spawned = next(e.data for e in actions.events_since(task) if e.kind == "spawned")
    cmdline = json.loads(next(ln for ln in task.result.splitlines() if ln.startswith("cmdline: "))[9:])
    assert cmdline == spawned["argv"] == HermesOneShotRunner(run_spec(task, Path(task.cwd))).argv()
    assert marker not in json.dumps(cmdline) and len(json.dumps(cmdline)) < 1000


def test_a_task_starting_with_a_dash_is_the_task_not_a_flag(fake_oneshot):
    task = wait_for(make_task("--version\nsay still the task", agent="hermes"))
    assert task.status == Status.DONE and task.result == "--version\nstill the task"


def test_a_shell_wrapper_fails_clearly_in_oneshot_mode(supervisor, settings, tmp_path):
    wrapper = tmp_path / "hermes"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_hermes.py"}" "$@"\n')
    wrapper.chmod(0o755)
    settings.BRIDGE_HERMES_BIN, settings.BRIDGE_HERMES_MODE = str(wrapper), "oneshot"
    task = wait_for(make_task("say hi", agent="hermes"))
    assert task.status == Status.FAILED
    assert "not a Python script" in task.error and "BRIDGE_HERMES_BIN" in task.error


def bridge_own_names() -> list[str]:
    """Bridge's own secrets and settings: the names it reads from its environment."""
    return [*BRIDGE_ENV_NAMES, *(name for name in dir(settings) if name.startswith(BRIDGE_ENV_PREFIXES))]


def test_provider_variables_reach_hermes_and_bridge_secrets_never_do(fake_oneshot, settings, monkeypatch):
    for name in HERMES_PROVIDER_ENV:
        monkeypatch.setenv(name, f"value-of-{name}")
    own = bridge_own_names()
    for name in own:
        monkeypatch.setenv(name, f"secret-{name}")
    settings.BRIDGE_PASS_ENV = list(own)  # even named there, they stay home
    task = wait_for(make_task("\n".join(f"env {name}" for name in (*HERMES_PROVIDER_ENV, *own)), agent="hermes"))
    assert task.status == Status.DONE, task.error
    seen = dict(line.removeprefix("env ").split("=", 1) for line in task.result.splitlines())
    assert {name: seen[name] for name in HERMES_PROVIDER_ENV} == {n: f"value-of-{n}" for n in HERMES_PROVIDER_ENV}
    assert {name: seen[name] for name in own} == dict.fromkeys(own, "<unset>")
    spec = RunSpec(agent="hermes", prompt="p", cwd="/tmp/w")
    for env in (HermesAcpRunner(spec).env(), HermesOneShotRunner(spec).env()):
        assert set(HERMES_PROVIDER_ENV) <= set(env) and not set(own) & set(env)
