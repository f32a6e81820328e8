"""Set up and run Bridge the same way everywhere: `python -m bridge.bootstrap run | test | lint | tools | bench | lock`.

`make run` and `make test` call this; on Windows, where `make` is usually missing, PowerShell runs the same
commands with `py -m bridge.bootstrap run`. It needs only the standard library and runs on any Python 3, so that
an interpreter that is too old gets a clear message instead of a traceback.

What it does, each step only when needed:
- a virtual environment in .venv, made by the Python that runs this (rebuilt when it is broken or too old),
- every dependency installed from its lock file, requirements/run.txt or requirements/test.txt (pinned, with
  hashes, for every platform and Python from 3.11), then the project itself; again whenever either file changes,
- for the tests, the pinned agent CLIs, the MCP Inspector, Debian's chromium and bubblewrap, and a second environment
  on the newest Python found (3.12 or later), where the lock picks the newest Django the range admits, in .tools/
  (git-ignored).

Each step is said as it starts and how long it took when it ends, then the whole set-up's time: a first `make run`
installs for minutes, with pip's own progress shown (`make test` keeps pip quiet, for CI logs).

`lock` writes the lock files again from pyproject.toml (with uv, installed into .tools/ for it).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
TOOLS = REPO / ".tools"
MIN_PYTHON = (3, 11)
CLAUDE_CODE_VERSION = "2.1.332"
HERMES_VERSION = "0.19.0"
GEMINI_CLI_VERSION = "0.61.0"  # an ACP agent for issue 33's real-CLI tests (tests/fakes/GEMINI_NOTES.md)
QWEN_CODE_VERSION = "0.24.4"  # the second ACP agent of those tests (tests/fakes/QWEN_NOTES.md); needs Node >= 22
INSPECTOR_VERSION = "2.12.0"
NODE22_VERSION = "22.23.3"  # the Inspector needs Node >= 22.19; the npm package `node` brings one privately
# POSIX's exec keeps the process (its pid, its place under make and the terminal); Windows' starts another one.
CAN_EXEC = os.name == "posix"
RUN_EXTRAS = "postgres,redis"
TEST_EXTRAS = "postgres,redis,test"
LOCKS = {RUN_EXTRAS: REPO / "requirements" / "run.txt", TEST_EXTRAS: REPO / "requirements" / "test.txt"}
NEWEST_DJANGO = TOOLS / "newest-django"  # the test lock on Python 3.12+, where it resolves the newest Django
NEWER_PYTHONS = ("python3.14", "python3.13", "python3.12")
# The suite waits on subprocesses (servers, agent CLIs) as much as it computes: one pytest-xdist worker per core
# nearly halves its time on two. pytest's own arguments come later and win: `python -m bridge.bootstrap test -- -n 0`
# runs the suite in one process.
PYTEST_PARALLEL = ("-n", "auto", "--dist", "worksteal")


class SetupError(Exception):
    """A step that cannot go on; the message says what to do."""


class SaidWhy(SetupError):
    """A step that failed and has said why itself: `manage.py`'s start-up checks name the setting, the path and the
    fix (bridge/data_dir.py, jobs/management/startup.py), so nothing is added below their one message."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"exit code {exit_code}")
        self.exit_code = exit_code


def say(message: str) -> None:
    print(f"bridge: {message}", file=sys.stderr, flush=True)


class Progress:
    """What the set-up is doing, said as it goes: each step as it starts and how long it took, and the whole
    set-up's time, so that a first `make run`, which installs for minutes, is seen moving and where its time went."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.began = clock()
        self.steps = 0

    @contextmanager
    def step(self, doing: str) -> Iterator[None]:
        """Say `doing` as the step starts; when it ends, how long it took (or after how long it stopped: the error
        itself is said by whoever catches it)."""
        say(f"{doing}…")
        self.steps += 1
        started = self.clock()
        try:
            yield
        except BaseException:
            say(f"stopped after {self.clock() - started:.1f} s")
            raise
        say(f"done in {self.clock() - started:.1f} s")

    def total(self) -> None:
        """The whole set-up's time, when it had a step to take (a set-up with nothing to do says nothing)."""
        if self.steps:
            say(f"set up in {self.clock() - self.began:.1f} s")


PROGRESS = Progress()


def run(*argv: object, says_why: bool = False, **kwargs) -> None:
    """Run a command, failing with its name and exit code (or, for one that `says_why` it failed, its exit code)."""
    args = [str(a) for a in argv]
    result = subprocess.run(args, cwd=kwargs.pop("cwd", REPO), **kwargs)
    if says_why and result.returncode > 0:
        raise SaidWhy(result.returncode)
    if result.returncode != 0:
        raise SetupError(f"`{' '.join(args)}` failed with exit code {result.returncode}")


def venv_python(venv: Path) -> Path | None:
    """The interpreter of a virtual environment, in either layout (bin/ on POSIX, Scripts\\ on Windows)."""
    for candidate in (venv / "bin" / "python", venv / "Scripts" / "python.exe"):
        if candidate.exists():
            return candidate
    return None


def python_version(python: Path) -> tuple[int, int] | None:
    """The (major, minor) version of an interpreter, or None when it does not run."""
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def check_interpreter() -> None:
    if sys.version_info[:2] < MIN_PYTHON:
        want = ".".join(map(str, MIN_PYTHON))
        raise SetupError(
            f"Bridge needs Python {want} or newer; this is {sys.version.split()[0]} ({sys.executable}). "
            "Run it with a newer one: `make run PYTHON=python3.12`, or on Windows `py -3.12 -m bridge.bootstrap run`"
        )


def ensure_venv() -> Path:
    """.venv with a working, new enough Python: made when missing, rebuilt (saying so) when it is not usable."""
    check_interpreter()
    python = venv_python(VENV)
    if python is not None:
        version = python_version(python)
        if version is not None and version >= MIN_PYTHON:
            return python
        found = "does not run" if version is None else "is Python " + ".".join(map(str, version))
        say(f"{VENV} {found}; rebuilding it with {sys.executable}")
        shutil.rmtree(VENV)
    elif VENV.exists():
        say(f"{VENV} has no Python in it; rebuilding it")
        shutil.rmtree(VENV)
    with PROGRESS.step(f"creating the virtual environment {VENV}"):
        run(sys.executable, "-m", "venv", VENV)
    python = venv_python(VENV)
    if python is None:
        raise SetupError(f"`{sys.executable} -m venv` made no interpreter in {VENV}")
    return python


def ensure_installed(python: Path, extras: str, *, show_pip: bool = False) -> None:
    """The lock file's pinned dependencies (hashes checked), then the project itself, again only when pyproject.toml
    or the lock file has changed since the last install. The test extras hold the run extras: after `make test`,
    `make run` installs nothing. `show_pip`: pip's own progress (`make run`, where a person waits), else pip is
    quiet (`make test`, whose log CI keeps)."""
    if extras == RUN_EXTRAS and _installed(TEST_EXTRAS):
        return
    if _installed(extras):
        return
    lock = LOCKS[extras]
    quiet = () if show_pip else ("-q",)
    follows = " (pip's progress follows)" if show_pip else ""
    with PROGRESS.step(f"installing the Python packages pinned in {lock.relative_to(REPO)}{follows}"):
        run(python, "-m", "pip", "install", *quiet, "--require-hashes", "-r", lock)
    with PROGRESS.step(f"installing Bridge itself into {VENV}"):
        run(python, "-m", "pip", "install", *quiet, "--no-deps", "-e", ".")
    _stamp(extras).write_text(_digest(extras) + "\n")


def _digest(extras: str) -> str:
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes() + LOCKS[extras].read_bytes()).hexdigest()


def _stamp(extras: str) -> Path:
    return VENV / f".installed-{extras.replace(',', '-')}"


def _installed(extras: str) -> bool:
    """Whether .venv holds these extras as pyproject.toml and their lock file say now."""
    stamp = _stamp(extras)
    return stamp.exists() and stamp.read_text().strip() == _digest(extras)


def lock() -> None:
    """Resolve pyproject.toml's dependencies again into the two lock files, for every platform and Python >= 3.11."""
    uv_venv = TOOLS / "uv"
    if venv_python(uv_venv) is None:
        run(sys.executable, "-m", "venv", uv_venv)
        run(venv_python(uv_venv), "-m", "pip", "install", "-q", "uv")
    for extras, path in LOCKS.items():
        extra_args = [arg for extra in extras.split(",") for arg in ("--extra", extra)]
        run(
            venv_python(uv_venv),
            "-m",
            "uv",
            "pip",
            "compile",
            "pyproject.toml",
            "--universal",
            "--python-version",
            ".".join(map(str, MIN_PYTHON)),
            "--generate-hashes",
            "--no-header",
            "-q",
            *extra_args,
            "-o",
            path,
        )


def newer_python() -> Path | None:
    """A Python 3.12 or later on this machine (on PATH, or a pyenv version), or None."""
    on_path = [Path(found) for found in map(shutil.which, NEWER_PYTHONS) if found]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in on_path + sorted(pyenv_root.glob("versions/3.1[2-9]*/bin/python3"), reverse=True):
        version = python_version(candidate)
        if version is not None and version >= (3, 12):
            return candidate
    return None


def newest_django() -> None:
    """The test lock installed on Python 3.12+, where its markers choose the newest Django the range admits: the
    tests of the code that reaches into Django's internals (jobs/actions/rows.py, the claim) run there too."""
    python = venv_python(NEWEST_DJANGO)
    digest = hashlib.sha256(LOCKS[TEST_EXTRAS].read_bytes()).hexdigest()
    stamp = NEWEST_DJANGO / ".installed"
    if python is not None and stamp.exists() and stamp.read_text().strip() == digest:
        return
    interpreter = newer_python()
    if interpreter is None:
        say("no Python 3.12 or later found: the newest-Django tests skip (install one, e.g. python3.13)")
        return
    with PROGRESS.step(f"installing the test lock on {interpreter} into {NEWEST_DJANGO} (for the newest Django)"):
        if NEWEST_DJANGO.exists():
            shutil.rmtree(NEWEST_DJANGO)
        run(interpreter, "-m", "venv", NEWEST_DJANGO)
        run(venv_python(NEWEST_DJANGO), "-m", "pip", "install", "-q", "--require-hashes", "-r", LOCKS[TEST_EXTRAS])
    stamp.write_text(digest + "\n")


def npm_package(prefix: Path, binary: str, *packages: str) -> None:
    """Install npm packages into a private prefix (not the system's), unless its binary is there already."""
    bin_dir = prefix / "node_modules" / ".bin"
    if shutil.which(binary, path=str(bin_dir)) is not None:
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(f"npm is not installed; the tests need it for {', '.join(packages)} (install Node.js)")
    with PROGRESS.step(f"installing {', '.join(packages)} into {prefix}"):
        run(npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", prefix, *packages)


def hermes_cli() -> None:
    """The pinned Hermes Agent CLI, with ACP, in its own virtual environment."""
    venv = TOOLS / "hermes"
    python = venv_python(venv)
    if python is not None and shutil.which("hermes", path=str(python.parent)) is not None:
        return
    with PROGRESS.step(f"installing hermes-agent {HERMES_VERSION} into {venv}"):
        run(sys.executable, "-m", "venv", venv)
        run(venv_python(venv), "-m", "pip", "install", "-q", f"hermes-agent[acp]=={HERMES_VERSION}")


# Debian's packages the tests use, by the program each gives: chromium for the browser tests (Playwright drives it;
# it never downloads a browser of its own), bubblewrap for the agents' sandbox (jobs/processes/sandbox.py).
DEBIAN_PACKAGES = {"chromium": "chromium", "bwrap": "bubblewrap"}


def debian_packages() -> None:
    missing = [package for program, package in DEBIAN_PACKAGES.items() if not shutil.which(program)]
    if not missing:
        return
    is_root = getattr(os, "geteuid", lambda: -1)() == 0
    if is_root and shutil.which("apt-get"):
        with PROGRESS.step(f"installing {', '.join(missing)} with apt-get"):
            run("apt-get", "update", "-qq")
            run("apt-get", "install", "-y", "-qq", *missing, stdout=subprocess.DEVNULL)
    else:
        say(
            f"{', '.join(missing)} missing: install them (e.g. `sudo apt-get install {' '.join(missing)}`); the "
            "browser and sandbox tests skip without them"
        )


def tools() -> None:
    npm_package(TOOLS / "claude", "claude", f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}")
    npm_package(TOOLS / "gemini", "gemini", f"@google/gemini-cli@{GEMINI_CLI_VERSION}")
    npm_package(TOOLS / "qwen", "qwen", f"@qwen-code/qwen-code@{QWEN_CODE_VERSION}", f"node@{NODE22_VERSION}")
    hermes_cli()
    inspector = f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"
    npm_package(TOOLS / "inspector", "mcp-inspector", inspector, f"node@{NODE22_VERSION}")
    debian_packages()
    newest_django()


def lint(python: Path) -> None:
    """Style, the layers of docs/architecture.md, types, and functions that fit on a screen."""
    run(python, "-m", "ruff", "check", ".")
    run(python, "-m", "ruff", "format", "--check", ".")
    lint_imports = shutil.which("lint-imports", path=str(python.parent))
    if lint_imports is None:
        raise SetupError(
            f"lint-imports is missing from {python.parent}: reinstall with `{python} -m pip install -e .[test]`"
        )
    run(lint_imports, "--no-cache")
    run(python, "-m", "mypy")  # bridge/ and jobs/, as pyproject.toml's [tool.mypy] says
    run(python, REPO / "tests" / "lint" / "long_functions.py", "60")


def serve(python: Path, host: str, port: int) -> int:
    """Set up the database and the first token, then become the server. A step that fails has said why in one
    message (an unusable data dir or database, naming the setting), and nothing is added to it. On POSIX this
    process turns into the server (exec): Ctrl-C and every other signal reach `runbridge` alone, `make` waits for it
    to drain, and nothing of this process is left to print a traceback or keep Bridge's environment readable.
    Windows has no such exec: there this process waits for the server, through any number of Ctrl-C or Ctrl-Break,
    which the console sends to both."""
    run(python, "manage.py", "migrate", "--no-input", "-v0", says_why=True)
    run(python, "manage.py", "token", "ensure", says_why=True)
    argv = [str(python), "manage.py", "runbridge", "--host", host, "--port", str(port)]
    if CAN_EXEC:
        os.chdir(REPO)
        os.execv(python, argv)
    for name in ("SIGINT", "SIGBREAK"):  # the console sends them to the server as well: it decides, this one waits
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda *_: None)
    return subprocess.Popen(argv, cwd=REPO).wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge.bootstrap", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve_args = sub.add_parser("run", help="set up, then serve on http://HOST:PORT/ with the supervisor")
    serve_args.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve_args.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8800")))
    test_args = sub.add_parser("test", help="set up everything the tests need, lint, and run the whole suite")
    test_args.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest")
    sub.add_parser("lint", help="ruff, the import-linter contracts, mypy and the function-length check")
    sub.add_parser("tools", help="the pinned agent CLIs, the MCP Inspector and chromium for the tests")
    sub.add_parser("bench", help="the benchmarks (not part of the tests)")
    sub.add_parser("lock", help="resolve pyproject.toml's dependencies again into requirements/*.txt")
    args = parser.parse_args(argv)
    try:
        return dispatch(args)
    except SaidWhy as exc:
        return exc.exit_code
    except SetupError as exc:
        say(str(exc))
        return 1
    except KeyboardInterrupt:  # during the set-up: what was being installed is said above; nothing to trace
        say("interrupted")
        return 130


def set_up(command: str) -> Path:
    """Everything `command` needs installed, each step said with its time, then the set-up's; the venv's Python."""
    python = ensure_venv()
    if command == "run":
        ensure_installed(python, RUN_EXTRAS, show_pip=True)
    else:
        ensure_installed(python, TEST_EXTRAS)
    if command in ("tools", "test"):
        tools()
    elif command == "bench":
        hermes_cli()
    PROGRESS.total()
    return python


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "lock":
        lock()
        return 0
    python = set_up(args.command)
    if args.command == "run":
        return serve(python, args.host, args.port)
    if args.command == "lint":
        lint(python)
    elif args.command == "test":
        lint(python)
        return subprocess.call([str(python), "-m", "pytest", *PYTEST_PARALLEL, *args.pytest_args], cwd=REPO)
    elif args.command == "bench":
        run(python, REPO / "tests" / "bench" / "all.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
