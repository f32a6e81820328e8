"""The cross-platform setup entry point (bridge/bootstrap.py) that `make` and Windows both call."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import bootstrap


def fake_python(path: Path, prints: str, exit_code: int = 0) -> Path:
    """An 'interpreter' that answers the version question the way an old or broken one would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{prints}'\nexit {exit_code}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("layout", [("bin", "python"), ("Scripts", "python.exe")])
def test_both_venv_layouts_are_found(tmp_path, layout):
    python = fake_python(tmp_path.joinpath(*layout), "3 12")
    assert bootstrap.venv_python(tmp_path) == python
    assert bootstrap.venv_python(tmp_path / "elsewhere") is None


@pytest.mark.parametrize(
    "prints, exit_code, version",
    [("3 12", 0, (3, 12)), ("3 10", 0, (3, 10)), ("boom", 1, None)],
)
def test_the_version_of_an_interpreter_is_asked_not_guessed(tmp_path, prints, exit_code, version):
    assert bootstrap.python_version(fake_python(tmp_path / "python", prints, exit_code)) == version


@pytest.mark.parametrize("stale", [("3 10", 0), ("", 1)])
def test_a_venv_made_by_an_old_or_broken_python_is_rebuilt(tmp_path, monkeypatch, capsys, stale):
    venv = tmp_path / ".venv"
    fake_python(venv / "bin" / "python", *stale)
    monkeypatch.setattr(bootstrap, "VENV", venv)
    python = bootstrap.ensure_venv()
    assert bootstrap.python_version(python) == sys.version_info[:2]
    assert "rebuilding it" in capsys.readouterr().err


def test_a_too_old_interpreter_is_told_what_to_run_instead(tmp_path, monkeypatch):
    monkeypatch.setattr(bootstrap, "MIN_PYTHON", (sys.version_info[0], sys.version_info[1] + 1))
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / ".venv")
    assert bootstrap.main(["run"]) == 1
    assert not (tmp_path / ".venv").exists(), "nothing is left behind for the next run to trip over"


def test_the_entry_point_runs_without_django_and_explains_itself():
    """`python -m bridge.bootstrap` must work before anything is installed: only the standard library."""
    result = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, '.'); import bridge.bootstrap"],
        cwd=bootstrap.REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "bridge.bootstrap", "--help"], cwd=bootstrap.REPO, capture_output=True, text=True
    )
    assert helped.returncode == 0 and all(word in helped.stdout for word in ("run", "test", "lint", "tools"))


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGBREAK"])
def test_where_there_is_no_exec_run_waits_for_the_server_through_the_consoles_signals(
    monkeypatch, tmp_path, signal_name
):
    """Windows has no exec that keeps the process: `run` starts the server and waits for it. The console sends
    Ctrl-C (SIGINT) and Ctrl-Break to both; the server decides what they mean, and `run` keeps waiting for its exit
    code instead of dying with a traceback. Here the 'server' sends the signal to `run` itself, then exits 3."""
    number = getattr(signal, signal_name, signal.SIGTERM)  # SIGBREAK is Windows' own; SIGTERM stands in elsewhere
    server = f"import os; os.kill(os.getppid(), {int(number)}); raise SystemExit(3)"
    monkeypatch.setattr(bootstrap, "CAN_EXEC", False)
    monkeypatch.setattr(bootstrap, "run", lambda *args, **kwargs: None)
    if not hasattr(signal, signal_name):
        monkeypatch.setattr(bootstrap.signal, signal_name, number, raising=False)
    real_popen = subprocess.Popen
    monkeypatch.setattr(bootstrap.subprocess, "Popen", lambda argv, **kw: real_popen([sys.executable, "-c", server]))
    saved = {n: signal.getsignal(n) for n in (signal.SIGINT, number)}
    try:
        assert bootstrap.serve(Path(sys.executable), "127.0.0.1", 0) == 3
    finally:
        for n, handler in saved.items():
            signal.signal(n, handler)


@pytest.mark.parametrize("installed", [(), ("run",), ("test",), ("run", "test")])
def test_make_run_after_make_test_installs_nothing(monkeypatch, tmp_path, installed):
    """The test extras hold the run extras: a current test install serves `run` too, so a `make run` after
    `make test` neither waits for pip nor needs the network."""
    monkeypatch.setattr(bootstrap, "VENV", tmp_path)
    extras = {"run": bootstrap.RUN_EXTRAS, "test": bootstrap.TEST_EXTRAS}
    for name in installed:
        bootstrap._stamp(extras[name]).write_text(bootstrap._digest(extras[name]) + "\n")
    calls: list[tuple] = []
    monkeypatch.setattr(bootstrap, "run", lambda *args, **kwargs: calls.append(args))
    bootstrap.ensure_installed(Path(sys.executable), bootstrap.RUN_EXTRAS)
    assert bool(calls) is (not installed), calls
