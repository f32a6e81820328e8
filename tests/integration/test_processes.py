"""Process control: whole trees die, interrupts arrive, escalation works, agents die with their supervisor.

The POSIX and portable backends run real process trees; the Windows backend runs with its Win32 calls recorded.
Every wait is on something the processes say or on their exit, never a sleep.
"""

import ctypes
import functools
import itertools
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil
import pytest

from jobs import processes
from jobs.processes import PortableBackend, PosixBackend, Watchdog, WindowsBackend, process_identity, same_process, tree
from jobs.processes.exits import ExitWatcher
from jobs.processes.tree import BORN_AFTER_SLACK_S, freeze, snapshot
from jobs.processes.windows import (
    CREATE_BREAKAWAY_FROM_JOB,
    CREATE_NEW_PROCESS_GROUP,
    CTRL_BREAK_EVENT,
    DETACHED_PROCESS,
    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    ExtendedLimitInformation,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="the process trees here use POSIX signals")

REPO = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")
WAIT_S = 10

# root starts a leaf and a leaf that calls setsid; each reports SIGTERM and SIGINT instead of dying.
TREE = r"""
import os, signal, subprocess, sys

def say(line):
    os.write(1, f"{line} {os.getpid()}\n".encode())  # one write, so lines from the three never interleave

def report(sig, frame):
    say(signal.Signals(sig).name)

signal.signal(signal.SIGTERM, report)
signal.signal(signal.SIGINT, report)
if sys.argv[1] == "setsid-leaf":
    os.setsid()
if sys.argv[1] == "root":
    for role in ("leaf", "setsid-leaf"):
        subprocess.Popen([sys.executable, __file__, role])
say("ready")
while True:
    signal.pause()
"""

# Starts the tree with a backend, passes its three "ready" lines on, then waits to be killed.
INTERMEDIATE = """
import sys
from jobs.processes import PortableBackend, PosixBackend, Watchdog

kind, script = sys.argv[1], sys.argv[2]
backend = {
    "posix-setpriv": lambda: PosixBackend(pdeathsig="setpriv"),
    "posix-prctl": lambda: PosixBackend(pdeathsig="prctl"),
    "posix-watchdog": lambda: PosixBackend(watchdog=Watchdog()),
    "portable-watchdog": lambda: PortableBackend(watchdog=Watchdog()),
}[kind]()
proc = backend.spawn([sys.executable, script, "root"], cwd=None, env=None, stdin_pipe=False)
for _ in range(3):
    sys.stdout.write(proc.stdout.readline().decode())
sys.stdout.flush()
sys.stdin.read()
"""


class Lines:
    """Reads a child's output line by line with a deadline, so a missing line fails the test instead of hanging."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.fd = stream.fileno()
        self.buffer = b""

    def next(self) -> str:
        deadline = time.monotonic() + WAIT_S
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                pytest.fail(f"no line within {WAIT_S} s (so far: {self.buffer!r})")
            chunk = os.read(self.fd, 4096)
            if not chunk:
                pytest.fail(f"output ended without a line (so far: {self.buffer!r})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def wait_for(self, expected: set[str]) -> None:
        missing = set(expected)
        while missing:
            missing.discard(self.next())


@dataclass
class Tree:
    proc: subprocess.Popen
    lines: Lines
    root: psutil.Process
    leaf: psutil.Process
    setsid_leaf: psutil.Process

    @property
    def members(self) -> list[psutil.Process]:
        return [self.root, self.leaf, self.setsid_leaf]

    @property
    def create_time(self) -> float:
        return process_identity(self.root.pid)


def read_tree(proc: subprocess.Popen, lines: Lines) -> Tree:
    """Wait for the three "ready" lines; the root is the one whose parent is not in the tree."""
    procs = [psutil.Process(int(lines.next().split()[1])) for _ in range(3)]
    pids = {p.pid for p in procs}
    (root,) = [p for p in procs if p.ppid() not in pids]
    (setsid_leaf,) = [p for p in procs if p is not root and os.getsid(p.pid) == p.pid]
    (leaf,) = [p for p in procs if p not in (root, setsid_leaf)]
    return Tree(proc, lines, root, leaf, setsid_leaf)


@pytest.fixture
def leftovers():
    """Kills whatever a test left alive, so a failure does not leak processes into the next test."""
    procs: list[psutil.Process] = []
    yield procs
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=WAIT_S)


@pytest.fixture
def tree_script(tmp_path) -> Path:
    path = tmp_path / "tree.py"
    path.write_text(TREE)
    return path


@pytest.fixture
def start_tree(tree_script, leftovers):
    def start(backend: PortableBackend) -> Tree:
        proc = backend.spawn(
            [sys.executable, str(tree_script), "root"], cwd=tree_script.parent, env=None, stdin_pipe=False
        )
        lines = Lines(proc.stdout)
        leftovers.append(psutil.Process(proc.pid))
        tree = read_tree(proc, lines)
        assert tree.root.pid == proc.pid
        leftovers.extend([tree.leaf, tree.setsid_leaf])
        return tree

    return start


@pytest.fixture(params=["posix", "portable"])
def backend(request) -> PortableBackend:
    return PosixBackend() if request.param == "posix" else PortableBackend()


def assert_all_dead(procs: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(procs, timeout=WAIT_S)
    assert alive == [], f"still alive: {alive}"


def test_kill_tree_kills_children_and_grandchildren_that_called_setsid(backend, start_tree):
    tree = start_tree(backend)
    backend.kill_tree(tree.root.pid, tree.create_time)
    assert_all_dead(tree.members)


def test_interrupt_delivers_sigint_to_the_agent(backend, start_tree):
    tree = start_tree(backend)
    backend.interrupt(tree.root.pid)
    expected = {f"SIGINT {tree.root.pid}"}
    if backend.kills_groups:
        expected.add(f"SIGINT {tree.leaf.pid}")  # a terminal's Ctrl-C reaches the whole foreground group
    tree.lines.wait_for(expected)


def test_terminate_reaches_the_whole_tree_then_kill_ends_what_ignored_it(backend, start_tree):
    tree = start_tree(backend)
    backend.terminate_tree(tree.root.pid, tree.create_time)
    tree.lines.wait_for({f"SIGTERM {proc.pid}" for proc in tree.members})
    assert all(proc.status() != psutil.STATUS_ZOMBIE for proc in tree.members), "SIGTERM is trapped: none may end"
    backend.kill_tree(tree.root.pid, tree.create_time)
    assert_all_dead(tree.members)


def test_kill_tree_after_the_agent_exited_still_reaches_its_group(start_tree):
    """The supervisor's clean-up after an agent's exit: its pid is reaped, its group is not."""
    backend = PosixBackend()
    tree = start_tree(backend)
    create_time = tree.create_time
    tree.root.kill()
    tree.proc.wait()
    backend.kill_tree(tree.root.pid, create_time)
    assert_all_dead([tree.leaf])


def test_kill_tagged_reaches_what_left_the_tree_and_spares_processes_older_than_the_agent(
    backend, tree_script, leftovers
):
    """After the agent is gone its setsid grandchild is found by its inherited tag alone; a process older than the
    agent (by more than the slack for clock ticks and steps) cannot carry the tag, so it is not even looked at
    (here: the same tree, told the agent is younger)."""
    proc = backend.spawn(
        [sys.executable, str(tree_script), "root"], cwd=tree_script.parent, env=None, stdin_pipe=False, tag="t-42"
    )
    tree = read_tree(proc, Lines(proc.stdout))
    leftovers.extend(tree.members)
    create_time = tree.create_time
    tree.root.kill()
    proc.wait()
    backend.kill_tagged("t-42", born_after=create_time + BORN_AFTER_SLACK_S + 60)
    assert tree.setsid_leaf.is_running() and tree.setsid_leaf.status() != psutil.STATUS_ZOMBIE
    backend.kill_tagged("t-42", born_after=create_time)
    assert_all_dead([tree.leaf, tree.setsid_leaf])


def test_a_reused_pid_is_not_walked(backend, start_tree):
    tree = start_tree(backend)
    assert [p.pid for p in snapshot(tree.root.pid, tree.create_time)][-1] == tree.root.pid
    assert snapshot(tree.root.pid, tree.create_time + 1) == []
    assert freeze(tree.root.pid, tree.create_time + 1) == []
    assert tree.root.status() != psutil.STATUS_STOPPED


@pytest.mark.parametrize("program", ["no-such-program-for-bridge", "./tree.py"])
def test_a_program_that_cannot_start_raises_as_popen_would(backend, tree_script, program):
    tree_script.chmod(0o644)
    error = FileNotFoundError if program.startswith("no-such") else PermissionError
    with pytest.raises(error) as raised:
        backend.spawn([program], cwd=tree_script.parent, env=None, stdin_pipe=False)
    assert raised.value.strerror


def test_same_process_compares_pid_and_create_time():
    me = os.getpid()
    create_time = process_identity(me)
    assert create_time is not None
    assert same_process(me, create_time)
    assert same_process(me, create_time + 0.005)
    assert not same_process(me, create_time + 1), "same pid, later create time: a reused pid"
    assert not same_process(None, create_time)
    assert not same_process(me, None)


LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux counts starts from boot")


@LINUX_ONLY
@pytest.mark.parametrize("step_s", [-3600.0, -1.0, 0.4, 1.0, 86400.0])
def test_a_clock_step_leaves_every_identity_as_it_was(monkeypatch, step_s):
    """A stepped clock (NTP, a resumed virtual machine) moves the boot time psutil derives from it, so a create
    time read after the step would tell a live supervisor from its own record; the identity must not move."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        recorded = {pid: process_identity(pid) for pid in (os.getpid(), child.pid)}
        stepped = psutil.boot_time() + step_s
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: stepped)  # what /proc/stat says after the step
        monkeypatch.setattr("jobs.processes.tree._own_identity", functools.cache(tree._identity))
        for pid, identity in recorded.items():
            assert same_process(pid, identity), f"pid {pid} looks like another process after a {step_s} s step"
    finally:
        child.stdin.close()
        child.wait()


@LINUX_ONLY
def test_after_a_reboot_the_same_pid_and_start_tick_name_another_process(monkeypatch):
    """A process started at boot gets the same pid at the same tick after the next boot (a service manager starts
    things in the same order): the boot id tells the two apart."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        before_reboot = process_identity(child.pid)
        next_boot = tree._boot_number() + 12345
        monkeypatch.setattr("jobs.processes.tree._boot_number", lambda: next_boot)
        assert not same_process(child.pid, before_reboot)
    finally:
        child.stdin.close()
        child.wait()


def test_same_process_is_false_once_the_process_is_gone():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    create_time = process_identity(proc.pid)
    assert same_process(proc.pid, create_time)
    proc.stdin.close()
    proc.wait()
    assert process_identity(proc.pid) is None
    assert not same_process(proc.pid, create_time)


@pytest.mark.parametrize(
    "kind, must_die",
    [
        pytest.param("posix-setpriv", ["root"], marks=pytest.mark.skipif(not LINUX, reason="Linux pdeathsig")),
        pytest.param("posix-prctl", ["root"], marks=pytest.mark.skipif(not LINUX, reason="Linux pdeathsig")),
        ("posix-watchdog", ["root", "leaf"]),
        ("portable-watchdog", ["root", "leaf", "setsid_leaf"]),
    ],
)
def test_agents_die_when_their_supervisor_is_killed(tree_script, leftovers, kind, must_die):
    intermediate = subprocess.Popen(
        [sys.executable, "-c", INTERMEDIATE, kind, str(tree_script)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    leftovers.append(psutil.Process(intermediate.pid))
    lines = Lines(intermediate.stdout)
    tree = read_tree(intermediate, lines)
    assert tree.root.ppid() == intermediate.pid
    leftovers.extend(tree.members)
    intermediate.kill()
    intermediate.wait()
    assert_all_dead([getattr(tree, name) for name in must_die])


def test_watchdog_kills_what_it_watches_when_our_end_closes_even_after_a_restart(leftovers):
    watchdog = Watchdog()
    sleepers = [psutil.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)]
    leftovers.extend(sleepers)
    watchdog.watch(sleepers[0].pid, process_identity(sleepers[0].pid), group=False)
    first = psutil.Process(watchdog.pid)
    first.kill()
    first.wait(WAIT_S)
    sleepers.append(psutil.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE))
    leftovers.append(sleepers[1])
    watchdog.watch(sleepers[1].pid, process_identity(sleepers[1].pid), group=False)
    assert watchdog.pid not in (None, first.pid)
    watchdog.close()
    assert_all_dead(sleepers)


@pytest.mark.parametrize("name, expected", [("posix", PosixBackend), ("portable", PortableBackend)])
def test_the_setting_selects_the_backend(settings, name, expected):
    settings.BRIDGE_PROCESS_BACKEND = name
    assert type(processes.get_backend()) is expected
    assert processes.get_backend() is processes.get_backend(name)


def test_auto_picks_the_platform_backend(settings):
    settings.BRIDGE_PROCESS_BACKEND = "auto"
    assert type(processes.get_backend()) is (WindowsBackend if sys.platform == "win32" else PosixBackend)


def test_an_unknown_backend_is_refused(settings):
    settings.BRIDGE_PROCESS_BACKEND = "threads"
    with pytest.raises(ValueError, match="BRIDGE_PROCESS_BACKEND='threads'"):
        processes.get_backend()


def test_module_functions_use_the_selected_backend(settings, tree_script, leftovers):
    settings.BRIDGE_PROCESS_BACKEND = "portable"
    proc = processes.spawn([sys.executable, str(tree_script), "root"], cwd=None, env=None, stdin_pipe=False)
    leftovers.append(psutil.Process(proc.pid))
    tree = read_tree(proc, Lines(proc.stdout))
    leftovers.extend(tree.members)
    processes.kill_tree(tree.root.pid, tree.create_time)
    assert_all_dead(tree.members)


# --- Windows, with the Win32 boundary recorded ---------------------------------------------------------------------


class RecordingWin32:
    """Stands in for `Win32`: records each call in a shared log and hands out made-up handles."""

    def __init__(self, log: list[tuple]) -> None:
        self.log = log
        self.handles = itertools.count(1000)
        self.fail_assign = False

    def CreateJobObjectW(self) -> int:
        job = next(self.handles)
        self.log.append(("CreateJobObjectW", job))
        return job

    def SetInformationJobObject(self, job: int, info_class: int, info: ExtendedLimitInformation) -> None:
        self.log.append(("SetInformationJobObject", job, info_class, info.BasicLimitInformation.LimitFlags))

    def OpenProcess(self, access: int, pid: int) -> int:
        handle = next(self.handles)
        self.log.append(("OpenProcess", access, pid, handle))
        return handle

    def AssignProcessToJobObject(self, job: int, process: int) -> None:
        self.log.append(("AssignProcessToJobObject", job, process))
        if self.fail_assign:
            raise OSError(5, "Access is denied")

    def TerminateJobObject(self, job: int, exit_code: int) -> None:
        self.log.append(("TerminateJobObject", job))

    def CloseHandle(self, handle: int) -> None:
        self.log.append(("CloseHandle", handle))

    def GenerateConsoleCtrlEvent(self, event: int, process_group: int) -> None:
        self.log.append(("GenerateConsoleCtrlEvent", event, process_group))


class RecordingPopen:
    """Records Popen's arguments, then starts the process for real without creationflags (POSIX refuses them)."""

    def __init__(self) -> None:
        self.kwargs: list[dict] = []
        self.refuse_flag = 0  # a creation flag Windows would refuse with "Access is denied"

    def __call__(self, argv: list[str], **kwargs) -> subprocess.Popen:
        self.kwargs.append(dict(kwargs))
        if kwargs.pop("creationflags") & self.refuse_flag:
            raise PermissionError(13, "Access is denied")
        return subprocess.Popen(argv, **kwargs)


@pytest.fixture
def windows():
    log: list[tuple] = []
    popen = RecordingPopen()
    return WindowsBackend(win32=RecordingWin32(log), popen=popen), log, popen


def test_windows_spawn_starts_a_process_group_in_a_kill_on_close_job(windows, leftovers):
    backend, log, popen = windows
    proc = backend.spawn([sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=None, env=None, stdin_pipe=True)
    leftovers.append(psutil.Process(proc.pid))
    assert popen.kwargs[0]["creationflags"] & CREATE_NEW_PROCESS_GROUP
    assert "start_new_session" not in popen.kwargs[0] and "preexec_fn" not in popen.kwargs[0]
    assert [call[0] for call in log] == [
        "CreateJobObjectW",
        "SetInformationJobObject",
        "OpenProcess",
        "AssignProcessToJobObject",
        "CloseHandle",
    ]
    job, (_, _, info_class, flags), (_, _, pid, process) = log[0][1], log[1], log[2]
    assert log[1][1] == job and info_class == JOB_OBJECT_EXTENDED_LIMIT_INFORMATION
    assert flags & JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    assert pid == proc.pid
    assert log[3] == ("AssignProcessToJobObject", job, process)
    assert log[4] == ("CloseHandle", process), "the process handle is closed; the job handle is kept"


@pytest.mark.parametrize("job_allows_breakaway", [True, False])
def test_windows_detached_service_leaves_the_starters_console_group_and_job(
    windows, leftovers, tmp_path, job_allows_breakaway
):
    """The stdio MCP server's supervisor must outlive the server, which Claude Desktop may hold in a kill-on-close
    job: it breaks away when the job allows it, and still starts (inside the job) when it does not."""
    backend, log, popen = windows
    if not job_allows_breakaway:
        popen.refuse_flag = CREATE_BREAKAWAY_FROM_JOB
    with open(tmp_path / "service.log", "wb") as output:
        proc = backend.spawn_detached([sys.executable, "-c", "print('up')"], cwd=None, env=None, output=output)
    leftovers.append(psutil.Process(proc.pid))
    assert proc.wait(timeout=WAIT_S) == 0 and (tmp_path / "service.log").read_text() == "up\n"
    flags = popen.kwargs[-1]["creationflags"]
    assert flags & CREATE_NEW_PROCESS_GROUP and flags & DETACHED_PROCESS
    assert bool(flags & CREATE_BREAKAWAY_FROM_JOB) == job_allows_breakaway
    assert len(popen.kwargs) == (1 if job_allows_breakaway else 2), "one start, or one refused and one without"
    assert log == [], "a service gets no Job Object of Bridge's: nothing kills it with the starter"


def test_a_detached_service_leaves_the_starters_session(tmp_path, leftovers):
    """POSIX: a new session, so the starter's terminal or group signals (Claude Desktop ending the server's group)
    do not reach it; it writes where it was told."""
    with open(tmp_path / "service.log", "wb") as output:
        proc = processes.spawn_detached(
            [sys.executable, "-c", "import os; print(os.getsid(0))"], cwd=tmp_path, env=None, output=output
        )
    assert proc.wait(timeout=WAIT_S) == 0
    assert int((tmp_path / "service.log").read_text()) == proc.pid != os.getsid(0)


def test_windows_spawn_without_a_job_still_runs_and_closes_the_job(windows, leftovers):
    backend, log, _ = windows
    backend.win32.fail_assign = True
    proc = backend.spawn([sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=None, env=None, stdin_pipe=True)
    leftovers.append(psutil.Process(proc.pid))
    job = log[0][1]
    assert ("CloseHandle", job) in log
    assert proc.poll() is None


def test_windows_escalation_interrupts_then_terminates_then_kills_children_first(
    windows, tree_script, leftovers, monkeypatch
):
    backend, log, _ = windows
    proc = backend.spawn([sys.executable, str(tree_script), "root"], cwd=None, env=None, stdin_pipe=False)
    leftovers.append(psutil.Process(proc.pid))
    tree = read_tree(proc, Lines(proc.stdout))
    leftovers.extend(tree.members)
    job = log[0][1]
    for action in ("terminate", "kill"):
        real = getattr(psutil.Process, action)
        monkeypatch.setattr(
            psutil.Process, action, lambda self, real=real, action=action: (log.append((action, self.pid)), real(self))
        )
    del log[:]

    backend.interrupt(tree.root.pid)
    backend.terminate_tree(tree.root.pid, tree.create_time)
    backend.kill_tree(tree.root.pid, tree.create_time)

    leaves = {tree.leaf.pid, tree.setsid_leaf.pid}
    assert log[0] == ("GenerateConsoleCtrlEvent", CTRL_BREAK_EVENT, tree.root.pid)
    for action, calls in (("terminate", log[1:4]), ("kill", log[4:7])):
        assert [name for name, _ in calls] == [action] * 3
        assert {pid for _, pid in calls[:2]} == leaves and calls[2][1] == tree.root.pid, "children before the parent"
    assert log[7:] == [("TerminateJobObject", job), ("CloseHandle", job)]
    assert_all_dead(tree.members)


def test_windows_job_information_has_the_win32_layout():
    expected = 144 if sys.maxsize > 2**32 else 112
    assert ctypes.sizeof(ExtendedLimitInformation) == expected


# The entry points' rule, in a process of its own: its last step ends that process. With "elsewhere", the main
# thread blocks the stop signals, so the OS must hand them to another thread, as macOS often does anyway.
STOPPER = r"""
import signal, sys, threading
from jobs import processes

def step(name):
    return lambda signal_name: print(name, signal_name, flush=True)

if sys.argv[2] == "elsewhere":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, processes.stop_signals())
with processes.on_stop_signals(step("drain"), step("now") if sys.argv[1] == "with-now" else None):
    print("ready", flush=True)
    threading.Event().wait(600)  # as a drain waits: the signals must not need this thread
"""


@pytest.mark.parametrize("with_now", [True, False])
@pytest.mark.parametrize("received_by", ["main", "elsewhere"])
def test_stop_signals_drain_then_stop_now_then_end_the_process(with_now, received_by):
    """The first stop signal asks for a drain, the second to stop at once (when the entry point has such a step),
    and one more ends the process. Each acts at once while the main thread is blocked in a long wait, whichever
    thread the OS gives the signal: Python runs handlers on the main thread only, once it runs Python again."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPER, "with-now" if with_now else "without", received_by],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        lines = Lines(proc.stdout)
        assert lines.next() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert lines.next() == "drain SIGTERM"
        if with_now:
            proc.send_signal(signal.SIGINT)
            assert lines.next() == "now SIGINT"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT_S) == 128 + signal.SIGINT
    finally:
        proc.kill()
    assert "SIGINT again: exiting now" in proc.stderr.read().decode()


def test_stop_signal_handlers_and_the_wakeup_socket_are_restored_after():
    def wakeup_fd() -> int:
        current = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(current)
        return current

    before, wakeup_before = {sig: signal.getsignal(sig) for sig in processes.stop_signals()}, wakeup_fd()
    with processes.on_stop_signals(lambda name: None):
        assert all(signal.getsignal(sig) is not handler for sig, handler in before.items())
        assert wakeup_fd() not in (-1, wakeup_before)
    assert {sig: signal.getsignal(sig) for sig in processes.stop_signals()} == before
    assert wakeup_fd() == wakeup_before
    assert {s.name for s in processes.stop_signals()} >= {"SIGINT", "SIGTERM"}


# --- being told when a child exits ----------------------------------------------------------------------------


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "thread"])
def test_the_exit_watcher_tells_of_each_exit_and_leaves_the_reaping_to_the_owner(monkeypatch, pidfd):
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfds on this OS")
    watcher = ExitWatcher()
    exits = {code: threading.Event() for code in (0, 3, 5)}
    lingering = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(5)"], stdin=subprocess.PIPE
    )
    quick = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    done = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE)
    assert done.stdout.read() == b""  # its end of the pipe closed: it has exited, or all but
    done.stdout.close()
    for code, proc in ((0, done), (3, quick), (5, lingering)):
        watcher.watch(proc, exits[code].set)
    assert exits[0].wait(WAIT_S) and exits[3].wait(WAIT_S)
    assert not exits[5].is_set(), "a child still running is not reported"
    lingering.stdin.close()
    assert exits[5].wait(WAIT_S)
    assert (done.poll(), quick.poll(), lingering.poll()) == (0, 3, 5), "the owner reaps, with the real exit codes"
