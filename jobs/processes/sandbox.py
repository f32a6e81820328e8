"""The agent's sandbox: what an agent may not see of Bridge (docs/architecture.md, "The agent's sandbox").

An executor is an unattended shell running as Bridge's own user, so file modes do not keep it out of Bridge's data
directory, and on Linux a same-user process (any process, when that user is root) can read every other process's
environment under /proc. The sandbox changes what the agent sees, nothing else it needs (home, tools, network):

- Linux, bubblewrap: the whole filesystem as it is, except each hidden path (Bridge's data directory: database,
  secret key, logs, the doorbell), which is an empty tmpfs with only the allowed roots inside it put back; and a PID
  namespace with its own /proc, so no Bridge process (nor any other outside the task) is visible at all. bwrap itself
  ignores SIGTERM, SIGINT and SIGHUP (`env --ignore-signal`) and gives the agent back the default action
  (`env --default-signal`): a polite stop reaches the agent, which ends in its own time, and bwrap passes its exit
  status on; SIGKILL ends bwrap, and `--die-with-parent` then ends everything inside.
- macOS, sandbox-exec: a profile that allows everything but reading or writing the hidden paths.
- Elsewhere (Windows, or Linux without a working bwrap): none. Bridge says so at start-up, in /health and on the
  dashboard, and runs agents as before.
"""

import dataclasses
import errno
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROBE_TIMEOUT_S = 10
STOP_SIGNALS = "TERM,INT,HUP"
SANDBOX_EXEC = "/usr/bin/sandbox-exec"


@dataclass(frozen=True)
class Sandbox:
    """How this machine confines agents: `kind` is "bubblewrap", "sandbox-exec" or "" (none, `reason` says why)."""

    kind: str
    reason: str
    bwrap: str = ""
    env: str = ""
    required: bool = False  # BRIDGE_SANDBOX=on: without a sandbox, agents are not started at all

    @property
    def available(self) -> bool:
        return bool(self.kind)

    def describe(self) -> str:
        """One line for people: which sandbox, or none and why (and, with BRIDGE_SANDBOX=on, that nothing runs)."""
        if self.available:
            return f"{self.kind}: {self.reason}"
        refusal = "; BRIDGE_SANDBOX=on, so no agent will start" if self.required else "; agents run unconfined"
        return f"none: {self.reason}{refusal}"

    def as_dict(self, private: bool = True) -> dict[str, object]:
        """For /health (`private=False`: no detail, which may name paths) and the pages."""
        public: dict[str, object] = {"kind": self.kind or None, "available": self.available, "required": self.required}
        return {**public, "detail": self.describe()} if private else public

    def wrap(
        self, argv: Sequence[str], *, path: str | None, hidden: Sequence[Path], shown: Sequence[Path]
    ) -> list[str]:
        """`argv` run inside the sandbox, with each `hidden` path unreadable except the `shown` paths inside it.

        The program is looked up on `path` (the child's PATH) first, and a missing one raises FileNotFoundError, as
        starting it unwrapped would: inside, it would only be bwrap's exit code 1."""
        if not self.available:
            if self.required:
                raise PermissionError(errno.EPERM, f"BRIDGE_SANDBOX=on, but no sandbox can run here ({self.reason})")
            return list(argv)
        program = shutil.which(argv[0], path=path)
        if program is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
        argv = [program, *argv[1:]]
        if self.kind == "bubblewrap":
            return self._bubblewrap(argv, hidden, shown)
        return [SANDBOX_EXEC, "-p", sandbox_exec_profile(hidden, shown), *argv]

    def _bubblewrap(self, argv: Sequence[str], hidden: Sequence[Path], shown: Sequence[Path]) -> list[str]:
        mounts: list[str] = []
        for path in hidden:
            mounts += ["--tmpfs", str(path)]
            for inside in (p for p in shown if p != path and p.is_relative_to(path)):
                mounts += ["--bind", str(inside), str(inside)]
        return [
            self.env,
            f"--ignore-signal={STOP_SIGNALS}",
            self.bwrap,
            "--dev-bind",
            "/",
            "/",
            "--unshare-pid",
            "--proc",
            "/proc",
            *mounts,
            "--die-with-parent",
            "--",
            self.env,
            f"--default-signal={STOP_SIGNALS}",
            *argv,
        ]


def sandbox_exec_profile(hidden: Sequence[Path], shown: Sequence[Path]) -> str:
    """A Seatbelt profile: everything allowed but the hidden paths; the shown paths inside them allowed again
    (a later rule wins in Seatbelt)."""

    def subpaths(paths: Sequence[Path]) -> str:
        return " ".join(f'(subpath "{_seatbelt_string(p)}")' for p in paths)

    rules = ["(version 1)", "(allow default)", f"(deny file-read* file-write* {subpaths(hidden)})"]
    inside = [p for p in shown if any(p.is_relative_to(h) for h in hidden)]
    if inside:
        rules.append(f"(allow file-read* file-write* {subpaths(inside)})")
    return "\n".join(rules)


def _seatbelt_string(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace('"', '\\"')


@cache
def find(setting: str, platform: str) -> Sandbox:
    """The sandbox BRIDGE_SANDBOX asks for on this platform, probed once per process: "auto" uses one where it works,
    "off" none, "on" one or none at all (then no agent starts)."""
    found = _find(setting, platform)
    return dataclasses.replace(found, required=setting == "on")


def _find(setting: str, platform: str) -> Sandbox:
    if setting == "off":
        return Sandbox("", "turned off by BRIDGE_SANDBOX=off")
    if platform.startswith("linux"):
        return _find_bubblewrap()
    if platform == "darwin":
        if Path(SANDBOX_EXEC).exists():
            return Sandbox("sandbox-exec", "Bridge's data directory is denied to agents by a Seatbelt profile")
        return Sandbox("", f"{SANDBOX_EXEC} is missing")
    return Sandbox("", f"no sandbox is available on {platform}: agents run with Bridge's own rights")


def _find_bubblewrap() -> Sandbox:
    bwrap, env = shutil.which("bwrap"), shutil.which("env")
    if bwrap is None:
        return Sandbox("", "bubblewrap is not installed: install it (Debian/Ubuntu: apt install bubblewrap)")
    if env is None:
        return Sandbox("", "no `env` program on PATH")
    candidate = Sandbox("bubblewrap", "", bwrap=bwrap, env=env)
    try:
        probe = candidate.wrap(["true"], path=None, hidden=[], shown=[])
        done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Sandbox("", f"bubblewrap could not be tried ({exc})")
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:300] or f"exit code {done.returncode}"
        return Sandbox("", f"bubblewrap does not work here: `{shlex.join(probe)}` said: {said}{_userns_hint(said)}")
    return Sandbox(
        "bubblewrap",
        "agents run in their own PID namespace, with Bridge's data directory hidden",
        bwrap=bwrap,
        env=env,
    )


def _userns_hint(said: str) -> str:
    if "namespace" in said.lower() or "permission" in said.lower():
        return (
            " (unprivileged user namespaces are turned off or restricted: on Ubuntu 24.04 and later, AppArmor's "
            "kernel.apparmor_restrict_unprivileged_userns=1 does this; allow bwrap in an AppArmor profile, or set "
            "BRIDGE_SANDBOX=off to run agents unconfined)"
        )
    if "ignore-signal" in said or "default-signal" in said:
        return " (GNU coreutils 8.31 or later is needed for env --ignore-signal/--default-signal)"
    return ""
