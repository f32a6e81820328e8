"""Bridge's environment, kept where an agent cannot read it (docs/architecture.md, "What an agent cannot read").

A process's environment as it started stays readable in /proc/<pid>/environ (Linux; `ps eww` on macOS) for as long
as the process lives, by any process of the same user, and changing os.environ later does not change it. An agent
runs as Bridge's own user. So every Bridge process starts with a *visible* environment that holds only what any
agent is given anyway (PATH, HOME, the locale… and Python's own start-up variables), and receives the rest (settings,
secret key, API keys, DATABASE_URL) through an unlinked temporary file whose descriptor it reads and closes at once:

- `seal()`, first thing in manage.py: a process started with anything more re-executes itself with the visible
  environment and the whole one behind the descriptor; once re-executed, it loads the whole one into os.environ
  (which changes nothing in /proc) and, on Linux, makes itself non-dumpable, so that a same-user process that is
  not root cannot read its memory or its environment at all.
- `handoff(env)`: how a Bridge process starts another (web processes, a detached supervisor) with no such window.
- `visible(env)`: what a helper that needs no secret (the watchdog sidecar) is started with.

Windows has no exec that keeps the process, and its environment blocks are readable only through debugging rights;
`seal()` leaves a process there as it is.
"""

import ctypes
import json
import os
import sys
import tempfile
from collections.abc import Mapping

FD_VARIABLE = "BRIDGE_PRIVATE_ENV_FD"
# What an agent receives anyway (jobs/agents/executors.py adds its own to these), and what Python reads at start-up.
VISIBLE_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "TZ", "SHELL", "TERM")
VISIBLE_PREFIXES = ("LC_", "PYTHON")
PR_SET_DUMPABLE = 4


def visible(env: Mapping[str, str]) -> dict[str, str]:
    """The part of `env` that may show in /proc: nothing an agent is not given anyway."""
    return {name: value for name, value in env.items() if name in VISIBLE_NAMES or name.startswith(VISIBLE_PREFIXES)}


def handoff(env: Mapping[str, str]) -> tuple[dict[str, str], int]:
    """The environment to start a Bridge process with, and the descriptor it must inherit (pass_fds) and the caller
    close once it has started: the child's `seal()` takes the whole `env` from it."""
    with tempfile.TemporaryFile() as carrier:  # unlinked at once on POSIX: only the descriptor names it
        carrier.write(json.dumps(dict(env)).encode())
        carrier.flush()
        fd = os.dup(carrier.fileno())
    os.lseek(fd, 0, os.SEEK_SET)
    return {**visible(env), FD_VARIABLE: str(fd)}, fd


def seal() -> None:
    """Make this process's readable environment the visible one, keeping the whole one in os.environ."""
    if sys.platform == "win32":
        return
    if FD_VARIABLE in os.environ:
        _take_over(int(os.environ[FD_VARIABLE]))
        return
    if os.environ.keys() - visible(os.environ).keys():
        env, fd = handoff(os.environ)
        os.set_inheritable(fd, True)
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    _undumpable()


def _take_over(fd: int) -> None:
    with os.fdopen(fd, "rb") as carrier:
        whole = json.loads(carrier.read())
    os.environ.clear()
    os.environ.update(whole)
    _undumpable()


def _undumpable() -> None:
    """Linux: no same-user process without CAP_SYS_PTRACE may read this one's memory or /proc/<pid>/environ."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
