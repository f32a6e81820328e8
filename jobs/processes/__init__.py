"""Process control for the supervisor: start an agent, interrupt it, stop it with everything it started, on any OS.

Nothing outside this package touches os.killpg, signal.SIGKILL, prctl or Win32. The backend comes from the
BRIDGE_PROCESS_BACKEND setting: "auto" (Windows on Windows, POSIX elsewhere), "posix", "portable" (psutil only,
the logic Windows shares; selectable on Linux to exercise it) or "windows".

Agents are named by pid and start (`process_identity`, which a stepped clock does not move), because pids are
reused: terminate_tree and kill_tree walk a tree only if its root is still that process. Escalation is the
caller's: interrupt, then terminate_tree, then kill_tree; and kill_tree once more after the agent exits, for
whatever it left behind.
"""

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO

from jobs.processes import private_env, sandbox
from jobs.processes.exits import ExitWatcher
from jobs.processes.portable import Cwd, Env, PortableBackend
from jobs.processes.posix import PosixBackend
from jobs.processes.signals import on_stop_signals, stop_signals
from jobs.processes.tree import process_identity, same_process
from jobs.processes.watchdog import Watchdog
from jobs.processes.windows import Win32, WindowsBackend

__all__ = [
    "PLATFORM",
    "PortableBackend",
    "PosixBackend",
    "Watchdog",
    "Win32",
    "WindowsBackend",
    "agent_sandbox",
    "get_backend",
    "interrupt",
    "kill_tagged",
    "on_stop_signals",
    "stop_signals",
    "can_share_listening_socket",
    "spawn_sharing",
    "kill_tree",
    "on_exit",
    "process_identity",
    "same_process",
    "spawn",
    "spawn_detached",
    "terminate_tree",
]

BACKEND_NAMES = ("auto", "posix", "portable", "windows")
# The one place Bridge asks which OS it runs on ("win32", "darwin", "linux", …); other modules take it from here, or
# as a parameter, so each platform's rules can be tested on any of them.
PLATFORM = sys.platform
WATCHDOG = Watchdog()
EXITS = ExitWatcher()
_backends: dict[str, PortableBackend] = {}
_lock = threading.Lock()


def get_backend(name: str | None = None) -> PortableBackend:
    """The backend by name, or as BRIDGE_PROCESS_BACKEND says; one instance each (Windows keeps its job handles)."""
    if name is None:
        from django.conf import settings  # here, not at the top: the watchdog sidecar imports this package

        name = getattr(settings, "BRIDGE_PROCESS_BACKEND", "auto")
    if name not in BACKEND_NAMES:
        raise ValueError(f"BRIDGE_PROCESS_BACKEND={name!r} must be one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        name = "windows" if PLATFORM == "win32" else "posix"
    with _lock:
        if name not in _backends:
            _backends[name] = _make(name)
        return _backends[name]


def _make(name: str) -> PortableBackend:
    if name == "windows":
        return WindowsBackend()
    if name == "posix":
        return PosixBackend(watchdog=WATCHDOG)
    return PortableBackend(watchdog=WATCHDOG)


def agent_sandbox() -> sandbox.Sandbox:
    """The sandbox agents run in here, as BRIDGE_SANDBOX asks (probed once per process)."""
    from django.conf import settings  # here, not at the top: the watchdog sidecar imports this package

    return sandbox.find(settings.BRIDGE_SANDBOX, PLATFORM)


def spawn(argv: Sequence[str], *, cwd: Cwd, env: Env, stdin_pipe: bool, tag: str | None = None) -> subprocess.Popen:
    """Start an agent: stdout and stderr piped, stdin piped or /dev/null, its own group, dying with the supervisor.
    `tag` (e.g. the task's id) is inherited by everything the agent starts, so kill_tagged finds it all later.

    Raises OSError when it cannot start (FileNotFoundError for a missing program), as Popen does."""
    return get_backend().spawn(argv, cwd=cwd, env=env, stdin_pipe=stdin_pipe, tag=tag)


def on_exit(proc: subprocess.Popen, callback: Callable[[], None]) -> None:
    """Call `callback()` (from another thread: it must be quick and thread-safe) once `proc` has exited; `proc` is
    left for its owner to reap with poll() or wait()."""
    EXITS.watch(proc, callback)


def interrupt(pid: int) -> None:
    """The agent's own interrupt: SIGINT to its group on POSIX, CTRL_BREAK_EVENT on Windows."""
    get_backend().interrupt(pid)


def terminate_tree(pid: int, create_time: float | None) -> None:
    """Ask the agent and all its descendants to end (SIGTERM on POSIX; on Windows this already ends them)."""
    get_backend().terminate_tree(pid, create_time)


def kill_tree(pid: int, create_time: float | None) -> None:
    """Kill the agent and all its descendants, those that called setsid included."""
    get_backend().kill_tree(pid, create_time)


def spawn_detached(argv: Sequence[str], *, cwd: Cwd, env: Env, output: IO[bytes]) -> subprocess.Popen:
    """Start a Bridge service that outlives the process starting it (the stdio MCP server's supervisor: Claude
    Desktop ends that server whenever it likes); stdout and stderr go to `output`; `env` (None: this process's)
    reaches it privately."""
    if PLATFORM == "win32":
        return get_backend().spawn_detached(argv, cwd=cwd, env=env, output=output)
    visible_env, fd = private_env.handoff(os.environ if env is None else env)
    try:
        return get_backend().spawn_detached(argv, cwd=cwd, env=visible_env, output=output, pass_fds=[fd])
    finally:
        os.close(fd)


def kill_tagged(tag: str, born_after: float | None = None) -> None:
    """Kill whatever still carries a spawn tag: an agent's descendants after the agent itself is gone. `born_after`
    (the agent's identity, when known) spares reading every older process's environment."""
    get_backend().kill_tagged(tag, born_after)


# --- web processes that share runbridge's listening socket -------------------------------------------------------


def can_share_listening_socket() -> bool:
    """Whether more web processes can serve runbridge's listening socket: each inherits its descriptor, which Twisted
    adopts on POSIX only (on Windows runbridge serves from its own process)."""
    return PLATFORM != "win32"


def spawn_sharing(argv: Sequence[str], fd: int, *, env: dict[str, str], cwd: str) -> subprocess.Popen:
    """A web process that inherits the listening socket `fd`, in a session of its own (a terminal's Ctrl-C reaches
    only the parent, which stops it when it is done), reading its stdin: the pipe closes when the parent closes it or
    dies, however it dies, and the web process stops then. Its stdout is a pipe to the parent, for "serving". `env`
    reaches it privately (jobs/processes/private_env.py)."""
    visible_env, env_fd = private_env.handoff(env)
    try:
        return subprocess.Popen(
            list(argv),
            pass_fds=[fd, env_fd],
            start_new_session=True,
            env=visible_env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
    finally:
        os.close(env_fd)
