"""The cross-platform setup entry point (bridge/bootstrap.py) that `make` and Windows both call."""

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
