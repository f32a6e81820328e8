"""Issue 29: a first `make run` shows progress. bridge/bootstrap.py says each set-up step as it starts and how long it
took, then the whole set-up's time, and lets pip show its own progress on `make run` (quiet on `make test`).

Nothing is installed here: the steps are fakes, the commands recorded instead of run, and the clock is moved by hand.
"""

import sys
from pathlib import Path

import pytest

from bridge import bootstrap


class Clock:
    """A clock the test moves: a step takes exactly as long as the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(bootstrap, "PROGRESS", bootstrap.Progress(clock))
    return clock


def said(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_step_is_said_as_it_starts_and_its_time_when_it_ends(clock, capsys):
    with bootstrap.PROGRESS.step("installing Python packages (pip's progress follows)"):
        assert said(capsys) == ["bridge: installing Python packages (pip's progress follows)…"]
        clock.now += 12.34
    assert said(capsys) == ["bridge: done in 12.3 s"]


def test_a_step_that_fails_says_after_how_long_and_lets_its_error_through(clock, capsys):
    with pytest.raises(bootstrap.SetupError, match="exit code 1"), bootstrap.PROGRESS.step("creating the venv"):
        clock.now += 2.06
        raise bootstrap.SetupError("`python -m venv .venv` failed with exit code 1")
    assert said(capsys) == ["bridge: creating the venv…", "bridge: stopped after 2.1 s"]


def test_the_total_counts_every_step_and_is_said_only_when_one_was_taken(clock, capsys):
    bootstrap.PROGRESS.total()
    assert said(capsys) == [], "a set-up with nothing to do says nothing"
    clock.now += 0.5  # before the first step: finding the venv, reading the stamps
    for seconds in (3.0, 40.2):
        with bootstrap.PROGRESS.step("a step"):
            clock.now += seconds
    bootstrap.PROGRESS.total()
    assert said(capsys)[-1] == "bridge: set up in 43.7 s"


@pytest.fixture
def fresh_checkout(monkeypatch, tmp_path, clock) -> list[list[str]]:
    """No .venv yet: every command the set-up runs is recorded (and `-m venv` leaves an interpreter behind)."""
    monkeypatch.setattr(bootstrap, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(bootstrap, "tools", lambda: None)
    commands: list[list[str]] = []

    def record(*argv, **kwargs) -> None:
        commands.append([str(arg) for arg in argv])
        clock.now += 5
        if argv[1:3] == ("-m", "venv"):
            python = Path(argv[3]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.symlink_to(sys.executable)

    monkeypatch.setattr(bootstrap, "run", record)
    return commands


def test_a_first_make_run_says_each_step_with_its_time_and_lets_pip_show_its_progress(fresh_checkout, capsys):
    bootstrap.set_up("run")
    venv = bootstrap.VENV
    assert said(capsys) == [
        f"bridge: creating the virtual environment {venv}…",
        "bridge: done in 5.0 s",
        "bridge: installing the Python packages pinned in requirements/run.txt (pip's progress follows)…",
        "bridge: done in 5.0 s",
        f"bridge: installing Bridge itself into {venv}…",
        "bridge: done in 5.0 s",
        "bridge: set up in 15.0 s",
    ]
    pip = [command for command in fresh_checkout if command[1:3] == ["-m", "pip"]]
    assert len(pip) == 2 and not any("-q" in command for command in pip), pip


def test_make_test_keeps_pip_quiet_for_ci_logs(fresh_checkout):
    bootstrap.set_up("test")
    pip = [command for command in fresh_checkout if command[1:3] == ["-m", "pip"]]
    assert len(pip) == 2 and all("-q" in command for command in pip), pip
