"""Registering Bridge with other programs: the MCP server entry it registers, Claude Code's status line, where they
keep their configs, and writing those configs safely (backup first, atomic replace, refuse what does not parse, keep
the file's line endings)."""

import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import cast
from urllib.parse import urlsplit

import yaml
from django.conf import settings

from jobs.agents import executors
from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.processes import PLATFORM, process_identity, same_process

SERVER_NAME = "bridge"
CLAUDE_DESKTOP_CONFIG = "claude_desktop_config.json"
CLAUDE_CODE_SETTINGS = "settings.json"
DEFAULT_BRIDGE_URL = "http://127.0.0.1:8800"
# How a statusLine command is recognised as Bridge's (from any checkout), so re-running updates it in place.
BRIDGE_STATUS_LINE = re.compile(r"(?:^|[\\/\s\"'])jobs[\\/]+statusline\.py(?:[\s\"']|$)")
# Names that carry credentials are never copied into another program's config, whatever their prefix.
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
# Besides every BRIDGE_* setting: the same database, channel layer and Hermes home as the server uses.
SHARED_SETTINGS = ("DATABASE_URL", "REDIS_URL", "HERMES_HOME")
# What the supervisor that `manage.py mcp` may start needs to run Claude Code as this shell would, when Claude Desktop
# starts it with its own bare environment: the home (where the CLI keeps its login), this PATH (the CLI is a Node
# script, `#!/usr/bin/env node`, and agents' tools are looked up on it) and Claude Code's own settings directory.
EXECUTOR_SETTINGS = ("HOME", "PATH", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")
# Claude Code's other settings (ANTHROPIC_BASE_URL, ANTHROPIC_MODEL, …) are recorded too, except credentials
# (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, and custom headers, which may carry an Authorization): see mcp_server_env.
EXECUTOR_PREFIXES = ("ANTHROPIC_",)
EXECUTOR_SECRETS = ("ANTHROPIC_CUSTOM_HEADERS",)
# Where runbridge records the address it listens on, in the data dir, for install_hermes_skill and register_claude.
SERVER_URL_FILE = "server.json"
# The older MCP server Bridge replaces (claude-hermes-bridge): a word of its entry's command line names it, as a
# folder, file, npm package or Python module (`-` or `_`, any case, a version or suffix after it), under any name.
OLDER_SERVER_WORD = re.compile(r"(?:claude-hermes-bridge|hermes-mcp)(?:$|[-.@])")
# Under the name its README gave it, running its entry point is enough: `node …/index.js`, `python …/server.py`.
OLDER_SERVER_NAME = "hermes"
OLDER_SERVER_SCRIPTS = ("index.js", "server.py")
# What a command line is cut into to find those words: path separators, spaces, quotes and `--option=` signs.
COMMAND_LINE_PARTS = re.compile(r"[\\/\s\"'=]+")
# Executables the MCP process (or the supervisor it starts) runs, with the program looked up on PATH when unset:
# Claude Desktop starts servers with a minimal PATH, so an absolute path is what makes them findable there.
AGENT_BINARIES = {"BRIDGE_CLAUDE_BIN": "claude", "BRIDGE_HERMES_BIN": "hermes"}


class ConfigError(Exception):
    """A config file Bridge will not touch, with the reason in words."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}; left it untouched")
        self.path = path
        self.reason = reason


# --- the server entry -------------------------------------------------------------------------------------


def manage_py() -> Path:
    return Path(settings.BASE_DIR) / "manage.py"


def is_secret_name(name: str) -> bool:
    return any(marker in name.upper() for marker in SECRET_MARKERS)


def is_executor_setting(name: str) -> bool:
    """One of Claude Code's own settings, recorded for the supervisor `manage.py mcp` may start; never a credential."""
    return name.startswith(EXECUTOR_PREFIXES) and not is_secret_name(name) and name not in EXECUTOR_SECRETS


def mcp_server_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings `manage.py mcp` needs to find this Bridge's data and to start a supervisor that runs the agents as
    this shell would: other programs start it in a bare environment.

    No credential is recorded (a name with TOKEN, SECRET, PASSWORD or KEY in it: ANTHROPIC_API_KEY,
    ANTHROPIC_AUTH_TOKEN, BRIDGE_TOKEN): Claude Desktop's config and the printed `claude mcp add` line are plain text
    that is shown, synced and pasted into bug reports. Claude Code keeps its own login (`claude` then /login) where
    every process of this user finds it; `executor_warnings` says when only a credential in this shell would do."""
    env = {
        "DJANGO_SETTINGS_MODULE": environ.get("DJANGO_SETTINGS_MODULE") or "bridge.settings",
        "BRIDGE_DATA_DIR": str(settings.DATA_DIR),
        "BRIDGE_ALLOWED_ROOTS": os.pathsep.join(str(Path(root).resolve()) for root in settings.BRIDGE_ALLOWED_ROOTS),
    }
    for name in sorted(environ):
        if name.startswith("BRIDGE_") and name not in env and not is_secret_name(name) and environ[name]:
            env[name] = environ[name]
    for name in SHARED_SETTINGS + EXECUTOR_SETTINGS:
        if environ.get(name):
            env[name] = environ[name]
    for name in sorted(environ):
        if is_executor_setting(name) and environ[name]:
            env[name] = environ[name]
    for name, program in AGENT_BINARIES.items():
        if name not in env:
            found = shutil.which(program, path=environ.get("PATH", ""))
            if found:
                env[name] = found
    return env


def mcp_server_entry(environ: Mapping[str, str]) -> dict:
    """The stdio entry other programs use to start Bridge's MCP server; the same shape for Claude Desktop and Hermes."""
    return {
        "command": sys.executable,
        "args": [str(manage_py()), "mcp"],
        "env": mcp_server_env(environ),
    }


def claude_code_command(entry: dict, platform: str = PLATFORM) -> str:
    """The `claude mcp add` line that registers the same server with Claude Code, for every project (user scope)."""
    argv = ["claude", "mcp", "add", SERVER_NAME, "--scope", "user"]
    for name, value in entry["env"].items():
        argv += ["-e", f"{name}={value}"]
    argv += ["--", entry["command"], *entry["args"]]
    return subprocess.list2cmdline(argv) if platform == "win32" else shlex.join(argv)


def executor_warnings(environ: Mapping[str, str], entry: dict, platform: str = PLATFORM) -> list[str]:
    """What a supervisor started by `manage.py mcp` with only the recorded settings could not do: run Claude Code when
    its only account is a credential in this shell (which is not recorded), or when it has none at all."""
    here, how_here = executors.claude_login(environ, platform)
    there, how_there = executors.claude_login(entry["env"], platform)
    login = "log the CLI in once as this user (run `claude`, then /login), so every process of yours finds its login"
    if there == executors.YES:
        return []
    if here == executors.YES:
        return [
            f"Claude Code runs from this shell ({how_here}), but a supervisor that `manage.py mcp` starts (for "
            f"Claude Desktop or Hermes, in their bare environment) would not: "
            f"{how_there}. Credentials are not written into other programs' configs. Either {login}, or keep "
            f"Bridge running from a shell that has them (`make run`, or {manage_command('supervise')}): the MCP "
            "server then uses that supervisor and starts none."
        ]
    if here == executors.NO:
        return [f"Claude Code is {how_here}: Claude tasks will fail until you {login}, or set ANTHROPIC_API_KEY."]
    return [
        f"whether Claude Code is logged in is unknown ({how_here}); if its tasks fail with 'Not logged in', {login}"
    ]


def credential_warnings(entry: dict) -> list[str]:
    """A connection URL may embed a password; say so, since it is written into another program's config."""
    return [
        f"{name} contains a password; it is written into the config so the MCP process can connect"
        for name, value in entry["env"].items()
        if name.endswith("_URL") and embeds_password(value)
    ]


def embeds_password(url: str) -> bool:
    """Whether `url` has a user:password@ part; one too malformed to parse is reported as if it had, to be safe."""
    try:
        return bool(urlsplit(url).password)
    except ValueError:
        return "@" in url


# --- where the running Bridge listens ---------------------------------------------------------------------


def record_server_url(url: str, data_dir: Path | None = None) -> None:
    """Runbridge says where it listens, so commands that write Bridge's address into other programs use that one."""
    pid = os.getpid()
    record = {"url": url, "pid": pid, "started": process_identity(pid)}
    atomic_write(Path(data_dir or settings.DATA_DIR) / SERVER_URL_FILE, json.dumps(record) + "\n")


def server_url(data_dir: Path | None = None) -> tuple[str, str]:
    """(Bridge's address, a note saying where it came from): the address runbridge last listened on with this data
    dir (running now or not), else the default."""
    path = Path(data_dir or settings.DATA_DIR) / SERVER_URL_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        url = str(record["url"])
    except (OSError, ValueError, TypeError, KeyError):
        return DEFAULT_BRIDGE_URL, f"no address recorded in {path} (Bridge has not run with this data dir): the default"
    if not url.startswith(("http://", "https://")):
        return DEFAULT_BRIDGE_URL, f"{path} holds no http(s) address: the default"
    if same_process(record.get("pid"), record.get("started")):
        return url, "where the running Bridge listens"
    return url, f"where Bridge last listened (recorded in {path}); it is not running now"


def client_url(host: str, port: int) -> str:
    """The URL a local client uses for a server bound to host:port (a wildcard address is reached on loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


# --- Claude Code's status line ----------------------------------------------------------------------------


def statusline_script() -> Path:
    """jobs/statusline.py: it stays where the Claude Code settings written by earlier installs expect it."""
    return Path(__file__).resolve().parents[1] / "statusline.py"


def shell_word(word: str, platform: str) -> str:
    """One word of a command line Claude Code runs through a shell: POSIX sh on macOS and Linux, Git Bash on Windows
    (which Claude Code requires there). A Windows path is written with forward slashes, in double quotes when it needs
    any: Git Bash keeps such a word as it is (unquoted backslashes would be eaten) and cmd.exe reads it the same way."""
    if platform != "win32":
        return shlex.quote(word)
    word = word.replace("\\", "/")
    if re.fullmatch(r"[\w@%+=:,./-]+", word, re.ASCII):
        return word
    if any(char in word for char in '$`"'):
        return shlex.quote(word)  # what bash would expand inside double quotes
    return f'"{word}"'


def statusline_command(url: str, platform: str = PLATFORM, python: str | None = None, script: str | None = None) -> str:
    """The command Claude Code runs for Bridge's status line: this venv's Python, without site-packages (-S) or the
    user's environment (-I), on the standalone script."""
    argv = [python or sys.executable, "-S", "-I", script or str(statusline_script()), "--url", url]
    return " ".join(shell_word(word, platform) for word in argv)


def status_line_entry(url: str, platform: str = PLATFORM) -> dict:
    """Bridge's `statusLine` in Claude Code's settings."""
    return {"type": "command", "command": statusline_command(url, platform), "padding": 0}


def is_bridge_status_line(value: object) -> bool:
    return isinstance(value, dict) and bool(BRIDGE_STATUS_LINE.search(str(value.get("command", ""))))


def claude_code_settings(home: Path, environ: Mapping[str, str]) -> Path:
    """Claude Code's user settings file: `$CLAUDE_CONFIG_DIR/settings.json`, by default `~/.claude/settings.json`."""
    return Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude") / CLAUDE_CODE_SETTINGS


# --- where Claude Desktop keeps its config ----------------------------------------------------------------


def claude_desktop_places(
    home: PurePath, environ: Mapping[str, str], platform: str, path_type: type[PurePath] | None = None
) -> list[PurePath]:
    """Where Claude Desktop keeps its config on `platform`; a `*` stands for a Microsoft Store package id. Paths are
    built with the platform's own rules (`PureWindowsPath` for win32, wherever this runs) unless `path_type` says
    otherwise: finding them on this disk uses this system's `Path`."""
    path = path_type or (PureWindowsPath if platform == "win32" else PurePosixPath)
    if platform == "win32":
        profile = path(environ.get("USERPROFILE") or home)
        roaming = path(environ.get("APPDATA") or profile / "AppData" / "Roaming")
        local = path(environ.get("LOCALAPPDATA") or profile / "AppData" / "Local")
        return [
            roaming / "Claude" / CLAUDE_DESKTOP_CONFIG,
            # The MSIX install, whose AppData is redirected into its package's LocalCache.
            local / "Packages" / "Claude_*" / "LocalCache" / "Roaming" / "Claude" / CLAUDE_DESKTOP_CONFIG,
            local / "Claude-Data" / "*" / CLAUDE_DESKTOP_CONFIG,
        ]
    if platform == "darwin":
        return [path(home) / "Library" / "Application Support" / "Claude" / CLAUDE_DESKTOP_CONFIG]
    config_home = path(environ.get("XDG_CONFIG_HOME") or path(home) / ".config")
    return [config_home / "Claude" / CLAUDE_DESKTOP_CONFIG]


def claude_desktop_configs(home: Path, environ: Mapping[str, str], platform: str) -> list[Path]:
    """The config file of every Claude Desktop install found: where its directory exists, file or not yet."""
    found: list[Path] = []
    for place in cast(list[Path], claude_desktop_places(home, environ, platform, path_type=Path)):  # Paths, so
        parts = place.parts
        if any("*" in part for part in parts):
            star = next(i for i, part in enumerate(parts) if "*" in part)
            base = Path(*parts[:star])
            directories = sorted(base.glob(str(Path(*parts[star:-1])))) if base.is_dir() else []
        else:
            directories = [place.parent]
        for directory in directories:
            config = directory / place.name
            if directory.is_dir() and all(not same_file(config, seen) for seen in found):
                found.append(config)
    return found


def same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


# --- merging Bridge into a config -------------------------------------------------------------------------


def json_object(path: Path, current: str | None) -> dict:
    """A JSON config's content (empty when there is none yet); anything but a JSON object is refused."""
    if current is None or not current.strip():
        return {}
    try:
        config = json.loads(current)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(path, "the top level is not a JSON object")
    return config


def dump_json(config: dict) -> str:
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def merged_claude_desktop_config(path: Path, current: str | None, entry: dict, drop: Iterable[str] = ()) -> str:
    """The config with Bridge under `mcpServers`, without the servers named in `drop`, every other key and server as
    it was."""
    config = json_object(path, current)
    servers = config.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(path, "'mcpServers' is not a JSON object")
    for name in drop:
        servers.pop(name, None)
    servers[SERVER_NAME] = entry
    return dump_json(config)


def command_line(entry: dict) -> list[str]:
    """A stdio server entry's command and its arguments (what is not text is left out)."""
    args = entry.get("args")
    words = [entry.get("command"), *(args if isinstance(args, list) else [])]
    return [word for word in words if isinstance(word, str)]


def runs_bridge(words: list[str]) -> bool:
    """Whether a command line runs Bridge's MCP server (`<python> <checkout>/manage.py mcp`), from any checkout."""
    return any(
        COMMAND_LINE_PARTS.split(word)[-1] == "manage.py" and after == "mcp"
        for word, after in zip(words, words[1:], strict=False)
    )


def is_older_server(name: str, entry: object) -> bool:
    """Whether an `mcpServers` entry starts the older MCP server Bridge replaces, which offers the same tools
    (`hermes_run`, …): a word of its command line names it, or it is called `hermes` and runs its `index.js` or
    `server.py`. Bridge's own entry, under any name and from any checkout, never is."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False  # not a stdio server: the older one was
    words = command_line(entry)
    if runs_bridge(words):
        return False
    parts = [part.lower() for word in words for part in COMMAND_LINE_PARTS.split(word) if part]
    if any(OLDER_SERVER_WORD.match(part.replace("_", "-")) for part in parts):
        return True
    return name.strip().lower() == OLDER_SERVER_NAME and any(part in OLDER_SERVER_SCRIPTS for part in parts)


def older_servers(path: Path, current: str | None) -> dict[str, dict]:
    """The entries of a Claude Desktop config that start the older MCP server (by name); Bridge's own name is
    Bridge's whatever it holds, as it is replaced anyway."""
    servers = json_object(path, current).get("mcpServers")
    if not isinstance(servers, dict):
        return {}
    return {name: entry for name, entry in servers.items() if name != SERVER_NAME and is_older_server(name, entry)}


def merged_claude_code_settings(
    path: Path, current: str | None, status_line: dict, replace_other: bool = False
) -> tuple[str, object]:
    """Claude Code's settings with Bridge's `statusLine`, every other key as it was: (the new text, or `current` when
    nothing changes; another program's statusLine, when it was kept). Another statusLine is kept unless
    `replace_other`, the way every other key and server is; Bridge's own (from any checkout) is updated."""
    config = json_object(path, current)
    existing = config.get("statusLine")
    if existing is not None and not is_bridge_status_line(existing) and not replace_other:
        return current or "", existing
    if existing == status_line:
        return current or "", None
    config["statusLine"] = status_line
    return dump_json(config), None


def has_yaml_comments(text: str | None) -> bool:
    """Rewriting YAML drops comments; callers say so, and point at the backup that keeps them."""
    return any(line.lstrip().startswith("#") for line in (text or "").splitlines())


def merged_hermes_config(path: Path, current: str | None, entry: dict) -> str:
    """The config with Bridge under `mcp_servers`. Comments are not kept (Hermes rewrites its config the same way);
    the backup has them."""
    config = {}
    if current is not None and current.strip():
        try:
            config = yaml.safe_load(current)
        except yaml.YAMLError as exc:
            raise ConfigError(path, f"not valid YAML ({exc})") from None
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise ConfigError(path, "the top level is not a YAML mapping")
    servers = config.get("mcp_servers")
    if servers is None:
        servers = config["mcp_servers"] = {}
    if not isinstance(servers, dict):
        raise ConfigError(path, "'mcp_servers' is not a YAML mapping")
    servers[SERVER_NAME] = entry
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True, default_flow_style=False)


# --- writing files safely ---------------------------------------------------------------------------------


def read_text_if_exists(path: Path) -> str | None:
    """The file's text with its line endings as they are (CRLF stays CRLF), or None when there is no file."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            return file.read()
    except FileNotFoundError:
        return None


def with_line_endings_of(text: str, existing: str | None) -> str:
    """`text` with the line endings of `existing` (its first line's): a CRLF file is written back as CRLF."""
    existing = existing or ""
    first = existing.find("\n")
    if first > 0 and existing[first - 1] == "\r":
        return text.replace("\r\n", "\n").replace("\n", "\r\n")
    return text


def atomic_write(path: Path, text: str) -> None:
    """Write a temp file beside `path`, fsync it, then rename it over `path`: a reader sees the old file or the new
    one, never half of one. A symlink is followed, so it keeps pointing at the new content."""
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as temp:
            temp.write(text)
            temp.flush()
            os.fsync(temp.fileno())
        if path.exists():
            shutil.copymode(path, temp_name)
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    try:  # make the rename durable; Windows cannot open a folder this way, and its rename is already durable
        directory = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def backup(path: Path, directory: Path | None = None, name: str = "") -> Path:
    """Copy `path` to `<name>.bak-<timestamp>` in `directory` (default: beside it); never over an earlier backup."""
    path = path.resolve()
    directory = directory or path.parent
    directory.mkdir(parents=True, exist_ok=True)
    name = name or path.name
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = directory / f"{name}.bak-{stamp}"
    counter = 1
    while target.exists():
        target = directory / f"{name}.bak-{stamp}-{counter}"
        counter += 1
    shutil.copy2(path, target)
    return target


@dataclass
class FileChange:
    """One file as it is and as it should be, so a command can show the change (`--print`) or make it."""

    path: Path
    current: str | None
    new: str
    # Where the old file is kept, and under which name; default beside it. A skill's folder is no place for it: Hermes
    # offers every file in a skill's folder to the model.
    backup_dir: Path | None = None
    backup_name: str = ""

    def __post_init__(self):
        self.new = with_line_endings_of(self.new, self.current)

    @property
    def changed(self) -> bool:
        return self.current != self.new

    def diff(self) -> str:
        old_lines = (self.current or "").splitlines(keepends=True)
        before = str(self.path) if self.current is not None else "/dev/null"
        lines = difflib.unified_diff(old_lines, self.new.splitlines(keepends=True), before, str(self.path))
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def apply(self) -> Path | None:
        """Back up an existing file, then replace it atomically; returns the backup's path, if one was made."""
        saved = backup(self.path, self.backup_dir, self.backup_name) if self.current is not None else None
        atomic_write(self.path, self.new)
        return saved


def show_or_apply(change: FileChange, dry_run: bool) -> str:
    """Make the change (or, with `dry_run`, show it) and say what happened, in the words both commands print: paths
    and the file's lines escaped where a terminal would act on them (`printable`)."""
    if not change.changed:
        return f"{printable(change.path)}: up to date; nothing to change"
    if dry_run:
        diff = printable(change.diff(), multiline=True)
        return f"{printable(change.path)}: would change as below (--print: nothing written)\n{diff}"
    saved = change.apply()
    return f"{printable(change.path)}: " + (f"updated (the old file is in {printable(saved)})" if saved else "created")
