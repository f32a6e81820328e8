"""Windows: a console process group per agent for CTRL_BREAK, and a Job Object so its tree dies with the supervisor.

Each agent is assigned to its own Job Object marked JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE. The supervisor holds the only
handle; when it exits for any reason Windows closes the handle and ends every process in the job, the agent's
children included. Every Win32 call goes through `Win32`, so tests can swap it for a recorder.
"""

import contextlib
import ctypes
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO

from jobs.processes.portable import Cwd, Env, PortableBackend

log = logging.getLogger(__name__)

CREATE_NEW_PROCESS_GROUP = 0x00000200
DETACHED_PROCESS = 0x00000008
CREATE_BREAKAWAY_FROM_JOB = 0x01000000
CTRL_BREAK_EVENT = 1
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9  # the JOBOBJECTINFOCLASS value
PROCESS_SET_QUOTA = 0x0100
PROCESS_TERMINATE = 0x0001
KILLED_EXIT_CODE = 1


class IoCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("Read", "Write", "Other")] + [
        (f"{name}TransferCount", ctypes.c_uint64) for name in ("Read", "Write", "Other")
    ]


class BasicLimitInformation(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class ExtendedLimitInformation(ctypes.Structure):
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION."""

    _fields_ = [
        ("BasicLimitInformation", BasicLimitInformation),
        ("IoInfo", IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class Win32:
    """The Win32 calls the backend makes, one method each, raising OSError on failure."""

    def __init__(self) -> None:
        win_dll = getattr(ctypes, "WinDLL", None)
        if win_dll is None:
            raise RuntimeError("the Windows process backend needs Windows")
        self._k = win_dll("kernel32", use_last_error=True)
        handle, dword, bool_ = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
        self._declare("CreateJobObjectW", handle, [ctypes.c_void_p, ctypes.c_wchar_p])
        self._declare("SetInformationJobObject", bool_, [handle, ctypes.c_int, ctypes.c_void_p, dword])
        self._declare("OpenProcess", handle, [dword, bool_, dword])
        self._declare("AssignProcessToJobObject", bool_, [handle, handle])
        self._declare("TerminateJobObject", bool_, [handle, ctypes.c_uint])
        self._declare("CloseHandle", bool_, [handle])
        self._declare("GenerateConsoleCtrlEvent", bool_, [dword, dword])

    def _declare(self, name: str, restype: type, argtypes: list[type]) -> None:
        function = getattr(self._k, name)
        function.restype, function.argtypes = restype, argtypes

    def _call(self, name: str, *args: object) -> int:
        result = getattr(self._k, name)(*args)
        if not result:
            if sys.platform == "win32":  # WinError and get_last_error exist only there (and mypy checks per platform)
                raise ctypes.WinError(ctypes.get_last_error())
            raise OSError(f"{name} failed")  # not reached: Win32() refuses to start off Windows
        return result

    def CreateJobObjectW(self) -> int:
        return self._call("CreateJobObjectW", None, None)

    def SetInformationJobObject(self, job: int, info_class: int, info: ctypes.Structure) -> None:
        self._call("SetInformationJobObject", job, info_class, ctypes.byref(info), ctypes.sizeof(info))

    def OpenProcess(self, access: int, pid: int) -> int:
        return self._call("OpenProcess", access, False, pid)

    def AssignProcessToJobObject(self, job: int, process: int) -> None:
        self._call("AssignProcessToJobObject", job, process)

    def TerminateJobObject(self, job: int, exit_code: int) -> None:
        self._call("TerminateJobObject", job, exit_code)

    def CloseHandle(self, handle: int) -> None:
        self._call("CloseHandle", handle)

    def GenerateConsoleCtrlEvent(self, event: int, process_group: int) -> None:
        self._call("GenerateConsoleCtrlEvent", event, process_group)


class WindowsBackend(PortableBackend):
    """Interrupt is CTRL_BREAK_EVENT to the agent's group; terminate and kill walk the tree with psutil (children
    before parents), and kill also ends the agent's Job Object, which holds descendants no walk can find."""

    name = "windows"

    def __init__(self, win32: Win32 | None = None, popen: Callable[..., subprocess.Popen] = subprocess.Popen):
        super().__init__(watchdog=None, popen=popen)
        self.win32 = win32 if win32 is not None else Win32()
        self._jobs: dict[int, int] = {}
        self._lock = threading.Lock()

    def options(self) -> dict[str, object]:
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}

    def spawn_detached(
        self, argv: Sequence[str], *, cwd: Cwd, env: Env, output: IO[bytes], pass_fds: Sequence[int] = ()
    ) -> subprocess.Popen:
        """Out of the starter's console and group, and out of its Job Object: an app that puts its children in a
        kill-on-close job (as Electron apps may) would otherwise end the service with the starter. A job that
        forbids breaking away refuses the start; then the service starts inside it, and says so in the log."""
        options = {"cwd": cwd, "env": env, "stdin": subprocess.DEVNULL, "stdout": output, "stderr": output}
        flags = CREATE_NEW_PROCESS_GROUP | DETACHED_PROCESS
        try:
            return self.popen(list(argv), creationflags=flags | CREATE_BREAKAWAY_FROM_JOB, **options)
        except PermissionError as exc:
            log.warning("%s: the starter's job does not let it break away (%s); it may end with the starter", argv, exc)
            return self.popen(list(argv), creationflags=flags, **options)

    def adopt(self, proc: subprocess.Popen, tag: str | None) -> None:
        """Put the agent in a kill-on-close job, which holds what it starts too (so the tag is not needed here).
        Without one it still runs, and kill_tree still finds its tree."""
        try:
            job = self._job_for(proc.pid)
        except OSError as exc:
            log.warning("pid %s: no Job Object (%s); it may outlive the supervisor", proc.pid, exc)
            return
        with self._lock:
            stale = self._jobs.pop(proc.pid, None)
            self._jobs[proc.pid] = job
        if stale is not None:
            self._close(stale)

    def _job_for(self, pid: int) -> int:
        win32 = self.win32
        job = win32.CreateJobObjectW()
        try:
            info = ExtendedLimitInformation()
            info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
            win32.SetInformationJobObject(job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, info)
            process = win32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, pid)
            try:
                win32.AssignProcessToJobObject(job, process)
            finally:
                win32.CloseHandle(process)
        except OSError:
            self._close(job)
            raise
        return job

    def interrupt(self, pid: int) -> None:
        """CTRL_BREAK_EVENT to the agent's process group (its pid); CTRL_C cannot target a group."""
        try:
            self.win32.GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pid)
        except OSError as exc:
            log.warning("pid %s: could not send CTRL_BREAK_EVENT: %s", pid, exc)

    def kill_tree(self, pid: int, create_time: float | None) -> None:
        """psutil kills the walked tree, then the job ends the rest and is closed: call it once the agent is done."""
        super().kill_tree(pid, create_time)
        with self._lock:
            job = self._jobs.pop(pid, None)
        if job is not None:
            with contextlib.suppress(OSError):
                self.win32.TerminateJobObject(job, KILLED_EXIT_CODE)
            self._close(job)

    def _close(self, handle: int) -> None:
        with contextlib.suppress(OSError):
            self.win32.CloseHandle(handle)
