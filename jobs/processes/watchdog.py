"""A sidecar process that kills the agents when their supervisor dies, however it dies.

A thread inside the supervisor dies with it on SIGKILL, so the watchdog is a separate small Python process, one per
supervisor, started on the first spawn. The supervisor holds the write end of a pipe to the watchdog's stdin and sends
one line per agent it starts ("pid create_time group"). When the supervisor exits for any reason the kernel closes
that pipe; the watchdog reads end-of-file, then freezes and kills every recorded agent that is still the same process,
with its whole tree (setsid or not), and, for POSIX agents, its process group, which still holds the agent's children
after Linux's parent-death signal has killed the agent itself. The watchdog runs in its own session so a Ctrl-C in
the supervisor's terminal does not end it before the supervisor has drained.
"""

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from jobs.processes.private_env import visible
from jobs.processes.tree import freeze, kill, process_identity, same_process, signal_group, tagged

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SIDECAR_CODE = "from jobs.processes.watchdog import main; main()"


class Watchdog:
    """The supervisor's end of the pipe: starts the sidecar when first needed and tells it about every agent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._watched: dict[int, tuple[float, bool, str]] = {}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def watch(self, pid: int, create_time: float | None, *, group: bool, tag: str | None = None) -> None:
        """Record an agent; group=True also kills its POSIX process group; a tag also kills every process that
        inherited it. A sidecar that died is replaced."""
        if create_time is None:
            return  # it has already exited: there is nothing to kill later
        with self._lock:
            self._watched = {p: w for p, w in self._watched.items() if same_process(p, w[0])}
            self._watched[pid] = (create_time, group, tag or "-")
            if self._proc is not None and self._proc.poll() is None:
                try:
                    self._write({pid: self._watched[pid]})
                    return
                except OSError:
                    pass
            if self._proc is not None:
                log.warning("the process watchdog %s is gone; starting another", self._proc.pid)
            self._proc = self._start()
            self._write(self._watched)

    def close(self) -> None:
        """Close our end of the pipe, as the supervisor's exit would: the sidecar kills what it watches."""
        with self._lock:
            if self._proc is not None:
                self._stdin().close()
                self._proc.wait()
                self._proc = None

    def _write(self, entries: dict[int, tuple[float, bool, str]]) -> None:
        lines = "".join(f"{pid} {created!r} {int(group)} {tag}\n" for pid, (created, group, tag) in entries.items())
        stdin = self._stdin()
        stdin.write(lines.encode())
        stdin.flush()

    def _stdin(self) -> IO[bytes]:
        """The write end of the pipe to the sidecar (asked for only once `_start` has made it, with stdin=PIPE)."""
        if self._proc is None or self._proc.stdin is None:
            raise RuntimeError("the process watchdog has not been started")
        return self._proc.stdin

    @staticmethod
    def _start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-c", SIDECAR_CODE],
            cwd=PROJECT_ROOT,
            env=visible(os.environ),  # it needs none of Bridge's settings or secrets
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
        )


def main() -> None:
    """The sidecar: record agents until the supervisor's end of the pipe closes, then kill what is left of them:
    their trees, their process groups, and every process that inherited one of their tags (on Linux the
    parent-death signal kills an agent the instant its supervisor dies, and a descendant that had left its process
    group is re-parented out of any tree walk; its inherited tag still names it)."""
    watched: dict[int, tuple[float, bool]] = {}
    tags: set[str] = set()
    for line in sys.stdin.buffer:
        pid, create_time, group, tag = line.decode().split()
        watched = {p: w for p, w in watched.items() if same_process(p, w[0])}
        watched[int(pid)] = (float(create_time), group == "1")
        if tag != "-":
            tags.add(tag)
    trees = [freeze(pid, create_time) for pid, (create_time, _) in watched.items()]
    trees += [freeze(proc.pid, process_identity(proc.pid)) for proc in tagged(tags)] if tags else []
    for pid, (_, group) in watched.items():
        if group:
            signal_group(pid, "SIGKILL")
    for tree in trees:
        kill(tree)
