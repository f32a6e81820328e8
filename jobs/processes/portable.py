"""The backend that needs nothing but psutil: the base the POSIX and Windows backends refine, selectable anywhere."""

import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import IO

import psutil

from jobs.processes.tree import TAG_VAR, freeze, kill, process_identity, snapshot, tagged, terminate
from jobs.processes.watchdog import Watchdog

log = logging.getLogger(__name__)

Cwd = str | os.PathLike[str] | None
Env = Mapping[str, str] | None


class PortableBackend:
    """psutil only: no process groups, no prctl, no signals beyond psutil's. A tree is whatever a walk of
    children finds; the agent dies with the supervisor through the watchdog sidecar (if one is given)."""

    name = "portable"
    kills_groups = False

    def __init__(self, watchdog: Watchdog | None = None, popen: Callable[..., subprocess.Popen] = subprocess.Popen):
        self.watchdog = watchdog
        self.popen = popen

    def spawn(
        self, argv: Sequence[str], *, cwd: Cwd, env: Env, stdin_pipe: bool, tag: str | None = None
    ) -> subprocess.Popen:
        """Start argv with stdout and stderr piped, in its own group or session, set up to die with us; `tag` goes
        into its environment, where everything it starts inherits it."""
        if tag is not None:
            env = {**(os.environ if env is None else env), TAG_VAR: tag}
        proc = self.popen(
            self.command(list(argv), cwd, env),
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **self.options(),
        )
        self.adopt(proc, tag)
        return proc

    def spawn_detached(
        self, argv: Sequence[str], *, cwd: Cwd, env: Env, output: IO[bytes], pass_fds: Sequence[int] = ()
    ) -> subprocess.Popen:
        """Start a service that must outlive its starter (and the app that started that), writing to `output`: out
        of the starter's session, so a signal to the starter's group or terminal does not reach it."""
        return self.popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )

    def command(self, argv: list[str], cwd: Cwd, env: Env) -> list[str]:
        """The argv actually started; a backend may put a launcher in front."""
        return argv

    def options(self) -> dict[str, object]:
        """Extra Popen arguments. A new session keeps a terminal's Ctrl-C off the agent (Windows Popen ignores it)."""
        return {"start_new_session": True}

    def adopt(self, proc: subprocess.Popen, tag: str | None) -> None:
        """After the start: arrange for the agent to die with the supervisor. Failing that, it still runs."""
        if self.watchdog is None:
            return
        try:
            self.watchdog.watch(proc.pid, process_identity(proc.pid), group=self.kills_groups, tag=tag)
        except OSError as exc:
            log.warning("pid %s: no process watchdog (%s); it may outlive the supervisor", proc.pid, exc)

    def interrupt(self, pid: int) -> None:
        """The agent's own interrupt, as Ctrl-C would deliver it; psutil reaches only the agent itself."""
        try:
            psutil.Process(pid).send_signal(signal.SIGINT)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass

    def terminate_tree(self, pid: int, create_time: float | None) -> None:
        """Ask the agent and everything below it to end: descendants first, then the agent."""
        terminate(snapshot(pid, create_time))

    def kill_tree(self, pid: int, create_time: float | None) -> None:
        """Kill the agent and everything below it, including descendants that left its group with setsid."""
        kill(freeze(pid, create_time))

    def kill_tagged(self, tag: str, born_after: float | None = None) -> None:
        """Kill every process that carries this spawn tag, with its own tree: what an agent left behind after it
        (or its supervisor) died, wherever it was re-parented."""
        for proc in tagged({tag}, born_after):
            kill(freeze(proc.pid, process_identity(proc.pid)))
