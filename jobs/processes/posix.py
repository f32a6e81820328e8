"""Linux and macOS: each agent leads its own process group, and on Linux gets a parent-death signal.

The parent-death signal is set by `setpriv --pdeathsig KILL` in front of the argv when setpriv knows that option:
a preexec_fn would make Python fork instead of vfork (several ms more per spawn). Without setpriv, the prctl
preexec_fn is the fallback; without either (macOS) only the watchdog sidecar covers a supervisor's death. The signal
fires when the *thread* that spawned the agent ends, so spawn from a thread that outlives the agent.
"""

import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable

import psutil

from jobs.processes.portable import Cwd, Env, PortableBackend
from jobs.processes.tree import freeze, kill, signal_group, snapshot, terminate
from jobs.processes.watchdog import Watchdog

PDEATHSIG_METHODS = ("setpriv", "prctl", "none")
PR_SET_PDEATHSIG = 1


def default_pdeathsig() -> str:
    if not sys.platform.startswith("linux"):
        return "none"
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        usage = subprocess.run([setpriv, "--help"], capture_output=True, text=True, check=False).stdout
        if "--pdeathsig" in usage:
            return "setpriv"
    return "prctl"


def check_executable(program: str, cwd: Cwd, env: Env) -> None:
    """Behind setpriv a missing program would only show as exit status 127: raise what Popen would have raised."""
    if os.sep in program:
        path = os.path.join(cwd or "", program)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    elif shutil.which(program, path=(os.environ if env is None else env).get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def prctl_preexec() -> Callable[[], None]:
    """The preexec_fn fallback; it also closes the race where the parent died before prctl took effect."""
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def die_with_parent() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent


class PosixBackend(PortableBackend):
    """Process groups and signals: interrupt is SIGINT to the group, terminate and kill reach the group and every
    descendant psutil finds (those that called setsid too)."""

    name = "posix"
    kills_groups = True

    def __init__(self, watchdog: Watchdog | None = None, pdeathsig: str | None = None):
        if not hasattr(os, "killpg"):
            raise RuntimeError("the posix process backend needs os.killpg; use the portable backend here")
        super().__init__(watchdog)
        self.pdeathsig = pdeathsig or default_pdeathsig()
        if self.pdeathsig not in PDEATHSIG_METHODS:
            raise ValueError(f"pdeathsig={self.pdeathsig!r} must be one of {', '.join(PDEATHSIG_METHODS)}")
        if self.pdeathsig != "none" and not sys.platform.startswith("linux"):
            raise ValueError(f"pdeathsig={self.pdeathsig!r} needs Linux")
        self.setpriv = shutil.which("setpriv") if self.pdeathsig == "setpriv" else None
        if self.pdeathsig == "setpriv" and self.setpriv is None:
            raise ValueError("pdeathsig='setpriv' but setpriv is not on PATH")

    def command(self, argv: list[str], cwd: Cwd, env: Env) -> list[str]:
        if self.setpriv is None:
            return argv
        check_executable(argv[0], cwd, env)
        return [self.setpriv, "--pdeathsig", "KILL", "--", *argv]

    def options(self) -> dict[str, object]:
        if self.pdeathsig == "prctl":
            return {"start_new_session": True, "preexec_fn": prctl_preexec()}
        return {"start_new_session": True}

    def interrupt(self, pid: int) -> None:
        """SIGINT to the agent's group, as Ctrl-C in a terminal would send it."""
        signal_group(pid, "SIGINT")

    def terminate_tree(self, pid: int, create_time: float | None) -> None:
        """SIGTERM once to each: the group in one call, then descendants outside it."""
        tree = snapshot(pid, create_time)
        signal_group(pid, "SIGTERM")
        terminate([proc for proc in tree if _group_of(proc) != pid])

    def kill_tree(self, pid: int, create_time: float | None) -> None:
        """Stop the group and freeze the tree, then SIGKILL both. The group reaches members whose parent has
        already exited (no walk finds them); the walk reaches descendants that left the group."""
        signal_group(pid, "SIGSTOP")
        tree = freeze(pid, create_time)
        signal_group(pid, "SIGKILL")
        kill(tree)


def _group_of(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, PermissionError):
        return None
