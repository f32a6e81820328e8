"""Whether each executor can run here, said before a task fails: found or not, its version, whether it looks able to
run (logged in, a model provider chosen), and what to do about each problem, in words.

Cheap enough for every health call: it reads the environment and a few small files, and runs `claude --version` at
most once per executable (its path and modification time); Hermes' version comes from its package metadata, since
`hermes --version` checks for updates online. It never starts an agent.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import yaml
from django.conf import settings

from jobs import processes
from jobs.agents import hermes_skills, registry
from jobs.agents.registry import AgentDefinition

ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "TZ", "SHELL", "TERM")
ENV_PREFIXES = ("LC_", "ANTHROPIC_", "CLAUDE_", "DISABLE_", "HERMES_")
# Bridge's own configuration and secrets: never passed on, not even when BRIDGE_PASS_ENV names them.
BRIDGE_ENV_NAMES = ("DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL")
BRIDGE_ENV_PREFIXES = ("BRIDGE_", "DJANGO_")

YES, NO, UNKNOWN = "yes", "no", "unknown"
VERSION_TIMEOUT_S = 15
# How Claude Code can be given an account besides its own login, in the order they are told: (name, in words).
CLAUDE_ENV_LOGINS = (
    ("ANTHROPIC_API_KEY", "an API key in the environment (ANTHROPIC_API_KEY)"),
    ("ANTHROPIC_AUTH_TOKEN", "a bearer token in the environment (ANTHROPIC_AUTH_TOKEN)"),
    ("CLAUDE_CODE_OAUTH_TOKEN", "a login token in the environment (CLAUDE_CODE_OAUTH_TOKEN)"),
    ("CLAUDE_CODE_USE_BEDROCK", "Amazon Bedrock (CLAUDE_CODE_USE_BEDROCK; its AWS credentials are not checked)"),
    ("CLAUDE_CODE_USE_VERTEX", "Google Vertex AI (CLAUDE_CODE_USE_VERTEX; its credentials are not checked)"),
)
# ANTHROPIC_BASE_URL alone is no account: the CLI then says "Not logged in · Please run /login" (tried with 2.1).
CLAUDE_LOGIN_FIX = (
    "run `{claude}` once in a terminal as the user Bridge runs as and type /login (or run `{claude} setup-token` and "
    "set CLAUDE_CODE_OAUTH_TOKEN), or set ANTHROPIC_API_KEY in the environment Bridge starts in; then restart Bridge"
)


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str


class _Named(TypedDict):
    """The fields of an ExecutorStatus that name the executor, known before it is looked for."""

    agent: str
    setting: str
    executable: str


@dataclass(frozen=True)
class ExecutorStatus:
    """One executor as a health check shows it. `ready` is "yes", "no" (see `problems`) or "unknown" (Bridge cannot
    tell, e.g. a login kept in the macOS keychain); `notes` are advice that does not stop it running."""

    agent: str
    setting: str  # the setting naming its executable
    executable: str  # the setting's value
    path: str | None  # where it was found; None when it was not
    version: str | None
    ready: str
    detail: str  # how it looks able to run, in words
    problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.path is not None

    def as_dict(self, private: bool = True) -> dict:
        """The JSON shape; without `private` (the open /health) problems are counted, not told: their words name paths
        and accounts."""
        body = {"agent": self.agent, "found": self.found, "version": self.version, "ready": self.ready}
        if not private:
            return body | {"problems": len(self.problems)}
        return body | {
            "setting": self.setting,
            "executable": self.executable,
            "path": self.path,
            "detail": self.detail,
            "problems": [{"what": p.what, "fix": p.fix} for p in self.problems],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "ExecutorStatus":
        """The status `as_dict()` wrote (a supervisor's record of it, jobs/actions/workers.py)."""
        problems = tuple(Problem(p["what"], p["fix"]) for p in data.get("problems") or ())
        return cls(
            agent=data["agent"],
            setting=data.get("setting", ""),
            executable=data.get("executable", ""),
            path=data.get("path"),
            version=data.get("version"),
            ready=data.get("ready", UNKNOWN),
            detail=data.get("detail", ""),
            problems=problems,
            notes=tuple(data.get("notes") or ()),
        )

    @classmethod
    def unrecorded(cls, agent: str) -> "ExecutorStatus":
        """An executor a supervisor recorded nothing about (it started before supervisors recorded them)."""
        detail = "this supervisor did not record whether it can run it"
        return cls(agent=agent, setting="", executable="", path=None, version=None, ready=UNKNOWN, detail=detail)

    def lines(self) -> list[str]:
        """What a person reads at start-up: one summary line, then each problem with its fix, then each note."""
        where = f"{self.version or 'version unknown'} at {self.path}" if self.found else "not found"
        state = {YES: "ready", NO: "NOT READY", UNKNOWN: "may not be ready"}[self.ready]
        told = self.detail and not self.problems  # a problem says it again, with its fix
        lines = [f"  {self.agent}: {state}: {where}" + (f"; {self.detail}" if told else "")]
        lines += [f"    problem: {p.what}\n    fix: {p.fix}" for p in self.problems]
        lines += [f"    note: {note}" for note in self.notes]
        return lines


def started_environ() -> dict[str, str]:
    """This process's environment as it was started. Django has since set TZ to its TIME_ZONE (UTC); an agent given
    that would show the user every time in UTC (`date`, file times), and so would the agents of a supervisor that
    this process starts."""
    env = {name: value for name, value in os.environ.items() if name != "TZ"}
    if settings.STARTED_WITH_TZ is not None:
        env["TZ"] = settings.STARTED_WITH_TZ
    return env


def child_env(extra: dict[str, str] | None = None, *, names: tuple[str, ...] = ()) -> dict[str, str]:
    """The allow-listed environment a child inherits (the common names, `names`, BRIDGE_PASS_ENV), never Bridge's own
    settings or secrets (docs/architecture.md principle 6); `extra` is added as given."""
    passed = (set(ENV_NAMES) | set(names) | set(settings.BRIDGE_PASS_ENV)) - set(BRIDGE_ENV_NAMES)
    env = {
        name: value
        for name, value in started_environ().items()
        if (name in passed or name.startswith(ENV_PREFIXES)) and not name.startswith(BRIDGE_ENV_PREFIXES)
    }
    env.update(extra or {})
    return env


@dataclass
class _Cache:
    """One answer per file, kept while its modification time and size stay the same (a changed file is read or asked
    again). Only the answer derived from a file is kept, never its contents (a credentials file's token)."""

    answers: dict[str, tuple[tuple[int, int], object]] = field(default_factory=dict)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, path: Path, compute):
        try:
            stat = path.stat()
        except OSError:
            return compute(path)
        version, key = (stat.st_mtime_ns, stat.st_size), str(path)
        with self.lock:
            path_lock = self.locks.setdefault(key, threading.Lock())
        with path_lock:  # one probe per file, even when health calls arrive together; other files do not wait
            cached = self.answers.get(key)
            if cached is None or cached[0] != version:
                cached = self.answers[key] = (version, compute(path))
            return cached[1]


_versions = _Cache()
_files = _Cache()


def _probe_version(path: Path, args: tuple[str, ...] = ("--version",)) -> tuple[str | None, str]:
    """(the first line `PATH --version` (or PATH ARGS) prints, "") or (None, why it failed)."""
    env = child_env({"DISABLE_AUTOUPDATER": "1"})
    try:
        run = subprocess.run(
            [str(path), *args],
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=VERSION_TIMEOUT_S,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    first = (run.stdout.strip().splitlines() or [""])[0].strip()
    if run.returncode != 0 or not first:
        said = " ".join((run.stderr or run.stdout).split())[-300:]
        return None, f"exit status {run.returncode}" + (f": {said}" if said else "")
    return first, ""


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _load_yaml(path: Path) -> dict | None:
    """The mapping in a YAML file; None when it cannot be read or is not a mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _find(executable: str, environ: Mapping[str, str]) -> Path | None:
    found = shutil.which(executable, path=environ.get("PATH", os.defpath)) if executable else None
    return Path(found) if found else None


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or environ.get("USERPROFILE") or Path.home())


# --- Claude Code ----------------------------------------------------------------------------------------------


def has_claude_login(credentials: dict) -> bool:
    """Whether Claude Code's credentials file holds a login it uses: an OAuth token allowed to call the model (the
    CLI says "Not logged in" for one without the `user:inference` scope)."""
    oauth = credentials.get("claudeAiOauth")
    if not isinstance(oauth, dict) or not oauth.get("accessToken"):
        return False
    scopes = oauth.get("scopes")
    return isinstance(scopes, list) and "user:inference" in scopes


def claude_login(environ: Mapping[str, str], platform: str = sys.platform) -> tuple[str, str]:
    """(ready, how in words): whether the Claude Code CLI has an account to use, judged from the environment and its
    files. On macOS its login may live in the keychain, which is not read: "unknown" there rather than a wrong "no"."""
    for name, words in CLAUDE_ENV_LOGINS:
        if environ.get(name, "").strip():
            return YES, f"uses {words}"
    config_dir = Path(environ.get("CLAUDE_CONFIG_DIR") or _home(environ) / ".claude").expanduser()
    credentials = config_dir / ".credentials.json"
    if _files.get(credentials, lambda path: has_claude_login(_load_json(path))):
        return YES, f"logged in (credentials in {credentials})"
    state = config_dir / ".claude.json" if environ.get("CLAUDE_CONFIG_DIR") else _home(environ) / ".claude.json"
    if _files.get(state, lambda path: bool(_load_json(path).get("primaryApiKey"))):
        return YES, f"uses the API key saved in {state}"
    if _files.get(config_dir / "settings.json", lambda path: bool(_load_json(path).get("apiKeyHelper"))):
        return YES, f"gets its key from the apiKeyHelper in {config_dir / 'settings.json'}"
    looked = f"no credentials in {config_dir}, no ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN"
    if platform == "darwin":
        return UNKNOWN, f"{looked}; on macOS its login may be in the keychain, which Bridge does not read"
    return NO, f"not logged in ({looked})"


def claude_status(environ: Mapping[str, str] | None = None, platform: str = sys.platform) -> ExecutorStatus:
    """The Claude Code CLI at BRIDGE_CLAUDE_BIN, as a supervisor with `environ` (default: this process's) would run
    it."""
    environ = os.environ if environ is None else environ
    executable = settings.BRIDGE_CLAUDE_BIN
    base: _Named = {"agent": "claude", "setting": "BRIDGE_CLAUDE_BIN", "executable": executable}
    path = _find(executable, environ)
    if path is None:
        fix = (
            "install it (https://docs.claude.com/en/docs/claude-code/setup) and set BRIDGE_CLAUDE_BIN to its absolute "
            "path if it is not on the PATH Bridge starts with; then restart Bridge"
        )
        what = f"the Claude Code CLI was not found: BRIDGE_CLAUDE_BIN={executable!r} is not on PATH or not executable"
        return ExecutorStatus(**base, path=None, version=None, ready=NO, detail="", problems=(Problem(what, fix),))
    version, failure = _versions.get(path, _probe_version)
    problems = []
    if version is None:
        fix = (
            "run it in a terminal to see why; the CLI needs Node.js on the PATH Bridge starts with "
            "(set BRIDGE_CLAUDE_BIN to a working executable)"
        )
        problems.append(Problem(f"`{path} --version` failed ({failure})", fix))
    ready, detail = claude_login(environ, platform)
    if ready == NO:
        problems.append(Problem(f"Claude Code is {detail}", CLAUDE_LOGIN_FIX.format(claude=path)))
    ready = NO if problems else ready
    return ExecutorStatus(**base, path=str(path), version=version, ready=ready, detail=detail, problems=tuple(problems))


# --- Hermes Agent ---------------------------------------------------------------------------------------------


def hermes_provider(config: dict) -> str:
    """The model provider Hermes' config names ("" when none): `model: NAME`, or `model: {provider, default}`."""
    model = config.get("model")
    if isinstance(model, dict):
        return str(model.get("provider") or model.get("default") or "").strip()
    return str(model or "").strip()


def _configured_provider(config_path: Path) -> str | None:
    """The provider a Hermes config file names ("" for none), or None when it cannot be read as a mapping."""
    config = _load_yaml(config_path)
    return None if config is None else hermes_provider(config)


def hermes_setup_problems(home: Path) -> tuple[list[Problem], str]:
    """What stops Hermes from answering (its config under `home`), and which provider it would use."""
    config_path = home / "config.yaml"
    setup = f"run `hermes setup` (or `hermes model`) once as the user Bridge runs as, with HERMES_HOME={home}"
    if not config_path.is_file():
        return [Problem(f"Hermes has no config at {config_path}: no model provider is chosen", setup)], ""
    provider = _files.get(config_path, _configured_provider)
    if provider is None:
        return [Problem(f"{config_path} is not a YAML mapping Hermes can read", f"fix the file, or {setup}")], ""
    if not provider:
        return [Problem(f"{config_path} names no model provider", setup)], ""
    return [], provider


def hermes_status(environ: Mapping[str, str] | None = None) -> ExecutorStatus:
    """The Hermes Agent CLI at BRIDGE_HERMES_BIN, with its config under HERMES_HOME (settings.BRIDGE_HERMES_HOME)."""
    environ = os.environ if environ is None else environ
    executable = settings.BRIDGE_HERMES_BIN
    base: _Named = {"agent": "hermes", "setting": "BRIDGE_HERMES_BIN", "executable": executable}
    path = _find(executable, environ)
    if path is None:
        what = f"the Hermes Agent CLI was not found: BRIDGE_HERMES_BIN={executable!r} is not on PATH"
        fix = (
            "only tasks with agent 'hermes' need it: install Hermes Agent with its ACP extra "
            "(pip install 'hermes-agent[acp]') and set BRIDGE_HERMES_BIN to its `hermes` executable; "
            "then restart Bridge"
        )
        return ExecutorStatus(**base, path=None, version=None, ready=NO, detail="", problems=(Problem(what, fix),))
    version = _versions.get(path, hermes_skills.hermes_version)
    home = Path(environ.get("HERMES_HOME") or settings.BRIDGE_HERMES_HOME).expanduser()
    problems, provider = hermes_setup_problems(home)
    acp = hermes_skills.acp_installed(str(path))
    mode = settings.BRIDGE_HERMES_MODE
    notes = []
    acp_fix = f"install the ACP extra into the Python environment that runs {path}: pip install 'hermes-agent[acp]'"
    if mode == "acp" and not acp:
        problems.append(Problem("BRIDGE_HERMES_MODE=acp, and Hermes' ACP extra is not installed", acp_fix))
    elif mode == "auto" and not acp:
        notes.append(f"without the ACP extra tasks run one-shot, where tool permissions cannot be relayed: {acp_fix}")
    runs = "acp" if mode == "acp" or (mode == "auto" and acp) else "one-shot"
    detail = f"model provider {provider!r}, runs {runs}" if provider else f"runs {runs}"
    ready = NO if problems else YES
    return ExecutorStatus(
        **base,
        path=str(path),
        version=version,
        ready=ready,
        detail=detail,
        problems=tuple(problems),
        notes=tuple(notes),
    )


# --- ACP agents: the presets and the declared ---------------------------------------------------------------


def _selected_auth(path: Path) -> str:
    """The auth type an interactive login leaves in a Gemini CLI (or Qwen Code) settings file: `security.auth.
    selectedType` (tests/fakes/GEMINI_NOTES.md and QWEN_NOTES.md, "Auth")."""
    auth = (_load_json(path).get("security") or {}).get("auth") or {}
    return str(auth.get("selectedType") or "") if isinstance(auth, dict) else ""


def _settings_login(settings_dir: Callable[[Mapping[str, str]], Path]) -> Callable[[Mapping[str, str]], str]:
    """How an agent that keeps its settings in `settings_dir(environ)` is logged in by its own files ("" when it is
    not)."""

    def login(environ: Mapping[str, str]) -> str:
        settings_path = settings_dir(environ).expanduser() / "settings.json"
        chosen = _files.get(settings_path, _selected_auth)
        return f"logged in ({chosen}, in {settings_path})" if chosen else ""

    return login


# The agents whose own files can say they are logged in, by name.
LOGIN_FILES: dict[str, Callable[[Mapping[str, str]], str]] = {
    "gemini": _settings_login(lambda environ: Path(environ.get("GEMINI_CLI_HOME") or _home(environ)) / ".gemini"),
    "qwen": _settings_login(lambda environ: Path(environ.get("QWEN_HOME") or _home(environ) / ".qwen")),
}


def acp_login(definition: AgentDefinition, environ: Mapping[str, str]) -> tuple[str, str]:
    """(ready, how in words): an account the agent can use, as far as Bridge knows how it logs in."""
    for name in definition.login_env:
        if environ.get(name, "").strip():
            return YES, f"uses {name} from the environment"
    by_file = LOGIN_FILES.get(definition.name, lambda environ: "")(environ)
    if by_file:
        return YES, by_file
    if not definition.login_env:
        return UNKNOWN, "Bridge does not know how this agent logs in: run it once by hand to check"
    return NO, f"no account: none of {', '.join(definition.login_env)} is set"


def acp_status(definition: AgentDefinition, environ: Mapping[str, str] | None = None) -> ExecutorStatus:
    """An ACP agent (a preset or one declared in BRIDGE_AGENTS_FILE), as a supervisor with `environ` would run it."""
    environ = os.environ if environ is None else environ
    executable = definition.command[0]
    declare = f"declare its path in {registry.agents_file()} as [agents.{definition.name}] command = [...]"
    base: _Named = {"agent": definition.name, "setting": "BRIDGE_AGENTS_FILE", "executable": executable}
    path = _find(executable, environ)
    if path is None:
        what = f"{definition.label} was not found: {executable!r} is not on PATH or not executable"
        how = f"install it ({definition.install}), or {declare}" if definition.install else declare
        fix = f"only tasks with agent {definition.name!r} need it: {how}; then restart Bridge"
        return ExecutorStatus(**base, path=None, version=None, ready=NO, detail="", problems=(Problem(what, fix),))
    version, problems = None, []
    if definition.version:
        version_path = _find(definition.version[0], environ) or path
        version, failure = _versions.get(version_path, lambda found: _probe_version(found, definition.version[1:]))
        if version is None:
            what = f"`{' '.join(definition.version)}` failed ({failure})"
            problems.append(Problem(what, f"run it in a terminal to see why, or {declare}"))
    ready, detail = acp_login(definition, environ)
    if ready == NO:
        fix = f"set one of {', '.join(definition.login_env)} in the environment Bridge starts in; then restart Bridge"
        problems.append(Problem(f"{definition.label} has {detail}", fix))
    ready = NO if problems else ready
    return ExecutorStatus(**base, path=str(path), version=version, ready=ready, detail=detail, problems=tuple(problems))


# --- the report -----------------------------------------------------------------------------------------------


def executor_status(agent: str, environ: Mapping[str, str] | None = None) -> ExecutorStatus:
    """One agent's executor, e.g. before starting a supervisor that would run it."""
    if agent == "claude":
        return claude_status(environ)
    if agent == "hermes":
        return hermes_status(environ)
    definition = registry.get_agent(agent)
    if definition is None:
        raise KeyError(f"no agent {agent!r}")
    return acp_status(definition, environ)


def executor_report(environ: Mapping[str, str] | None = None) -> list[ExecutorStatus]:
    """Every executor, as the supervisor in this process (or one started with `environ`) would run it."""
    return [executor_status(name, environ) for name in registry.agent_names()]


def _absent_preset(status: ExecutorStatus) -> bool:
    definition = registry.get_agent(status.agent)
    return not status.found and definition is not None and definition.source == "preset"


def worth_telling(report: list[ExecutorStatus]) -> list[ExecutorStatus]:
    """The executors whose problems a start-up tells: all but the presets not installed (nobody asked for them)."""
    return [status for status in report if not _absent_preset(status)]


def startup_lines(report: list[ExecutorStatus]) -> list[str]:
    """The start-up report of runbridge and supervise: each executor, its problems and their fixes; the presets that
    are not installed, in one line."""
    lines = ["Executors:"]
    for status in worth_telling(report):
        lines += status.lines()
    absent = [status.agent for status in report if _absent_preset(status)]
    if absent:
        lines.append(f"  not installed (each runs once it is on PATH): {', '.join(absent)}")
    return [*lines, f"Sandbox for agents: {processes.agent_sandbox().describe()}"]
