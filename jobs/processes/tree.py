"""Finding and signalling process trees: psutil for what every platform shares, plus the POSIX process group.

A process is named by its pid *and* its start (`process_identity`), because pids are reused; every walk starts by
checking both.
"""

import contextlib
import functools
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil

IDENTITY_TOLERANCE_S = 0.01
# Born-after filters compare psutil's create times, which a clock step since they were read may have moved: generous.
BORN_AFTER_SLACK_S = 60.0
# Set in every agent's environment and inherited by all it starts: finds descendants that no tree walk reaches.
TAG_VAR = "BRIDGE_PROCESS_TAG"
FREEZE_ROUNDS = 20
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def process_identity(pid: int) -> float | None:
    """What, with the pid, names one process for good (its start, in seconds); None if it is gone or not ours to see.

    Stored in the database and compared across Bridge's processes, so it must not move. macOS and Windows record a
    process's start as a fixed time. Linux counts it in clock ticks since boot, and psutil adds the boot time the
    clock gives *now*, which moves when the clock is stepped (NTP, a virtual machine resumed): a live supervisor
    would then look like a new process and its tasks be orphaned. There the ticks are added to a number fixed for
    the boot instead (`_boot_number`), which also tells a process from one with the same pid and ticks after a
    reboot."""
    if pid == os.getpid():  # asked on every read of a task this process supervises
        return _own_identity(pid)
    return _identity(pid)


def _identity(pid: int) -> float | None:
    if sys.platform.startswith("linux"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return None
        # after the command name, which may hold spaces and parentheses: field 3 (state) onwards; 22 is the start
        start_ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
        return _boot_number() + start_ticks / os.sysconf("SC_CLK_TCK")
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@functools.cache
def _own_identity(pid: int) -> float | None:
    """Keyed by pid, so a forked child asks again."""
    return _identity(pid)


@functools.cache
def _boot_number() -> float:
    """A number of seconds fixed for this boot of this Linux machine and different for the next: taken from the
    kernel's boot id (a random UUID per boot), not from the clock."""
    try:
        return float(int(BOOT_ID.read_text().strip().replace("-", "")[:8], 16))
    except (OSError, ValueError):  # no boot id to read (an unusual kernel): the clock's boot time, as psutil has it
        return psutil.boot_time()


def same_process(pid: int | None, create_time: float | None) -> bool:
    """Whether pid is still the process that was started at create_time (and not a later one with its pid)."""
    if pid is None or create_time is None:
        return False
    now = process_identity(pid)
    return now is not None and abs(now - create_time) < IDENTITY_TOLERANCE_S


def _root(pid: int, create_time: float | None) -> psutil.Process | None:
    if not same_process(pid, create_time):
        return None
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def snapshot(pid: int, create_time: float | None) -> list[psutil.Process]:
    """The tree as it is now, descendants first and the root last; [] if pid is no longer that process.

    Descendants are found by parentage, not by group or session, so those that called setsid are included."""
    root = _root(pid, create_time)
    return [] if root is None else [*_descendants(root), root]


def freeze(pid: int, create_time: float | None) -> list[psutil.Process]:
    """Suspend the whole tree and return it, descendants first and the root last.

    Suspending before killing means nothing can fork away between the walk and the kill, and no child of a killed
    parent is re-parented out of reach. Walks repeat until one finds nothing new (bounded, for a process we may not
    suspend that keeps forking)."""
    root = _root(pid, create_time)
    if root is None:
        return []
    frozen: dict[int, psutil.Process] = {}
    pending = [root]
    for _ in range(FREEZE_ROUNDS):
        for proc in pending:
            _quietly(proc.suspend)
            frozen[proc.pid] = proc
        pending = [proc for proc in _descendants(root) if proc.pid not in frozen]
        if not pending:
            break
    return list(reversed(frozen.values()))


def tagged(tags: set[str], born_after: float | None = None) -> list[psutil.Process]:
    """Every process of ours whose environment carries one of these tags: an agent's descendants even after the
    agent died and they were re-parented (unless they cleared their environment).

    `born_after` is the agent's identity, when known: an older process cannot carry its tag, so its environment is
    not read (psutil keeps each process's create time, so the walk then costs next to nothing)."""
    oldest = -math.inf if born_after is None else _as_create_time(born_after) - BORN_AFTER_SLACK_S
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.create_time() >= oldest and proc.environ().get(TAG_VAR) in tags:
                found.append(proc)
    return found


def _as_create_time(identity: float) -> float:
    """An identity as psutil's create time shows it now (on Linux the identity counts from the boot number)."""
    if sys.platform.startswith("linux"):
        return identity - _boot_number() + psutil.boot_time()
    return identity


def terminate(procs: list[psutil.Process]) -> None:
    """SIGTERM on POSIX; on Windows psutil's terminate is TerminateProcess, as final as a kill."""
    for proc in procs:
        _quietly(proc.terminate)


def kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        _quietly(proc.kill)


def signal_group(pgid: int, sig_name: str) -> None:
    """Signal a POSIX process group, by the signal's name so callers need not touch names Windows lacks.

    Safe with a pid that may have been reused: the kernel does not hand out a pid still in use as a group id."""
    killpg, sig = getattr(os, "killpg", None), getattr(signal, sig_name, None)
    if killpg is None or sig is None:
        raise RuntimeError(f"process groups need os.killpg and signal.{sig_name}, which this platform lacks")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        killpg(pgid, sig)


def _quietly(action: Callable[[], object]) -> None:
    """A process that ended meanwhile needs no signal; one we may not signal is not ours to stop."""
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        action()
