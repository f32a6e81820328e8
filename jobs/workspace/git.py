"""Git as Bridge runs it on the user's repositories: one way to call it, with an environment that cannot be steered by
the caller's own `GIT_*` variables, never prompts, and never runs the repository's hooks."""

import os
import shutil
import subprocess
from pathlib import Path

# Variables that would point git somewhere else than the repository asked for, or change what it prints.
_STEERING = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR", "GIT_PREFIX")
# Each run: no hooks (a repository's hook is the agent's code, not Bridge's), no pager, no colour, paths as bytes.
_OPTIONS = ("-c", "core.hooksPath=" + os.devnull, "-c", "color.ui=false", "-c", "core.quotePath=false")


class GitError(Exception):
    """Git failed, or is not installed; the message says which, with git's own words."""


def executable() -> str | None:
    return shutil.which("git")


def environment(**extra: str) -> dict[str, str]:
    """The caller's environment without the variables that steer git, plus `extra` (e.g. GIT_INDEX_FILE)."""
    env = {name: value for name, value in os.environ.items() if name not in _STEERING}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C", **extra)
    return env


def run(
    cwd: Path | str, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """`git <args>` in `cwd`, its output as text (undecodable bytes replaced); GitError when it fails and `check`."""
    git = executable()
    if git is None:
        raise GitError("git is not installed (or not on PATH)")
    try:
        done = subprocess.run(
            [git, *_OPTIONS, *args],
            cwd=cwd,
            env=env or environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise GitError(f"could not run git in {cwd}: {exc.strerror or exc}") from exc
    if check and done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise GitError(f"git {args[0]} failed in {cwd}: {said[-1] if said else f'exit code {done.returncode}'}")
    return done


def toplevel(path: Path | str) -> Path | None:
    """The top of the git working tree that holds `path`, or None when it is in none (or git is not installed)."""
    if executable() is None:
        return None
    done = run(path, "rev-parse", "--show-toplevel", check=False)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None
