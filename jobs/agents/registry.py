"""The executors Bridge can run, by name: Claude Code and Hermes (each with a runner of its own), the built-in presets
for ACP agents, and the ACP agents a user declares in BRIDGE_AGENTS_FILE (default `$BRIDGE_DATA_DIR/agents.toml`):

    [agents.my-agent]
    protocol = "acp"
    command = ["/path/to/agent", "--acp"]
    pass_env = ["MY_AGENT_API_KEY"]            # optional: more variables the agent inherits
    version = ["/path/to/agent", "--version"]  # optional: how to ask its version
    skip_mode = "yolo"                         # optional: the ACP session mode that asks nothing
    label = "My agent"                         # optional: its name for people

A declared name that is a preset's changes only what it gives (a command elsewhere, more variables); the preset's
knowledge stays. The file is read once per process: a wrong one stops start-up with the reason (`check_agents_file`),
and Bridge is restarted after an edit. See docs/architecture.md, "Executors: any ACP agent".
"""

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from jobs.core.vocabulary import Agent

CLAUDE_PROTOCOL, HERMES_PROTOCOL, ACP_PROTOCOL = "claude", "hermes", "acp"
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,19}$")  # fits the agent columns (20 characters) and reads as a word
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DECLARED_KEYS = frozenset({"protocol", "command", "pass_env", "version", "skip_mode", "label"})
MAX_ARGV_ENTRIES = 50
MAX_LABEL_CHARS = 60


class AgentsFileError(Exception):
    """BRIDGE_AGENTS_FILE cannot be used; the message says where and why."""


@dataclass(frozen=True)
class AgentDefinition:
    """One executor: how to start it and what it offers, in words a task page and a planner can show."""

    name: str
    label: str
    protocol: str  # CLAUDE_PROTOCOL, HERMES_PROTOCOL or ACP_PROTOCOL
    command: tuple[str, ...] = ()  # an ACP agent's argv; Claude's and Hermes' come from their own settings
    version: tuple[str, ...] = ()  # argv that prints its version; () = not asked
    pass_env: tuple[str, ...] = ()  # variables it inherits besides the common ones (executors.child_env)
    env: Mapping[str, str] = field(default_factory=dict)  # variables Bridge sets for it
    login_env: tuple[str, ...] = ()  # any of these set means it has an account (readiness)
    skip_mode: str = ""  # the ACP session mode for `skip`; "" = the agent offers none
    resumes_from_next_minute: bool = False  # a session loaded within the minute it started is lost (Gemini CLI)
    options: frozenset[str] = frozenset({"model"})  # the task options it takes
    install: str = ""  # how to get it, for the fix of "not found"
    limits: tuple[str, ...] = ()  # what it cannot do, said before a task finds out
    source: str = "built-in"  # "built-in", "preset", or the file that declared it

    @property
    def is_acp(self) -> bool:
        return self.protocol == ACP_PROTOCOL

    def describe(self) -> dict:
        """What /v1/agents, hermes_health and the form show of it."""
        modes = ["approve", "bypass"] + (["skip"] if self.skip_mode or not self.is_acp else [])
        return {
            "name": self.name,
            "label": self.label,
            "protocol": self.protocol,
            "source": self.source,
            "options": sorted(self.options),
            "modes": modes,
            "limits": list(self.limits),
        }


_GEMINI_ENV = (
    *("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL", "GEMINI_CLI_HOME"),
    *("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"),
    *("GOOGLE_VERTEX_BASE_URL", "GOOGLE_APPLICATION_CREDENTIALS", "GEMINI_API_KEY_AUTH_MECHANISM"),
    "GEMINI_CLI_CUSTOM_HEADERS",
)
_OPENAI_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL")

BUILT_IN: dict[str, AgentDefinition] = {
    Agent.CLAUDE: AgentDefinition(
        name=Agent.CLAUDE,
        label="Claude Code",
        protocol=CLAUDE_PROTOCOL,
        options=frozenset(
            {"model", "max_turns", "allowed_tools", "disallowed_tools", "append_system_prompt", "add_dirs"}
        ),
    ),
    Agent.HERMES: AgentDefinition(
        name=Agent.HERMES,
        label="Hermes Agent",
        protocol=HERMES_PROTOCOL,
        options=frozenset({"model", "max_turns", "skills", "toolsets"}),
    ),
}

# Presets: ACP agents whose command, variables and ways Bridge knows. Gemini CLI was studied on the wire
# (tests/fakes/GEMINI_NOTES.md); the others follow their own documentation until they are.
PRESETS: dict[str, AgentDefinition] = {
    "gemini": AgentDefinition(
        name="gemini",
        label="Gemini CLI",
        protocol=ACP_PROTOCOL,
        command=("gemini", "--acp"),
        version=("gemini", "--version"),
        pass_env=_GEMINI_ENV,
        env={"GEMINI_CLI_NO_RELAUNCH": "true"},  # one process, which SIGTERM ends (it ignores it when relaunching)
        login_env=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"),
        skip_mode="yolo",
        resumes_from_next_minute=True,
        install="npm install -g @google/gemini-cli (Node.js 20 or newer)",
        limits=(
            "reports tokens but no cost",
            "a shell command's output is not shown, only given to the model",
            "resumes a session only from the minute after it started (Gemini CLI 0.61 erases a session loaded "
            "within the minute of its start)",
            "skip trusts the task's folder for that run (Gemini CLI then reads the folder's .gemini settings)",
            "a task whose text starts with / or $ and one of its commands (/help, /init, /memory...) runs that "
            "command instead of asking the model",
        ),
        source="preset",
    ),
    "qwen": AgentDefinition(
        name="qwen",
        label="Qwen Code",
        protocol=ACP_PROTOCOL,
        command=("qwen", "--acp"),
        version=("qwen", "--version"),
        pass_env=(
            *_OPENAI_ENV,
            "DASHSCOPE_API_KEY",
            "QWEN_HOME",
            "QWEN_USAGE_STATISTICS_ENABLED",
            "QWEN_CODE_SYSTEM_DEFAULTS_PATH",
        ),
        env={"QWEN_CODE_NO_RELAUNCH": "true"},  # one process instead of a launcher and two children
        login_env=("OPENAI_API_KEY", "DASHSCOPE_API_KEY"),
        skip_mode="yolo",
        install="npm install -g @qwen-code/qwen-code (Node.js 22 or newer)",
        limits=(
            "reports tokens but no cost",
            "a denied request ends its turn: the model is not told and does not go on",
            "its own 'always allow' would write into the repository's or the user's settings, so Bridge answers "
            "'allow once' and remembers rules itself",
            "a task whose text starts with / and one of its commands (/status, /clear...) runs that command instead "
            "of asking the model",
        ),
        source="preset",
    ),
    "opencode": AgentDefinition(
        name="opencode",
        label="opencode",
        protocol=ACP_PROTOCOL,
        command=("opencode", "acp"),
        version=("opencode", "--version"),
        pass_env=(
            *("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"),
            *("GOOGLE_GENERATIVE_AI_API_KEY", "DEEPSEEK_API_KEY", "OPENCODE_API_KEY"),
            *("OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR", "OPENCODE_DISABLE_MODELS_FETCH"),
        ),
        install="npm install -g opencode-ai (tested with 1.18)",
        limits=(
            "offers no skip mode yet: use bypass, where Bridge allows every request",
            "without a usable model in its own config it falls back to opencode.ai's free models, without a word: "
            "configure a provider first",
            "a denied request ends its turn: the model is not told and does not go on",
            "its token counts cover a turn's last model call only",
            "a task whose text starts with / runs one of its commands, or ends at once for an unknown one",
        ),
        source="preset",
    ),
    "codex": AgentDefinition(
        name="codex",
        label="Codex (codex-acp)",
        protocol=ACP_PROTOCOL,
        command=("codex-acp",),
        pass_env=(*_OPENAI_ENV, "CODEX_HOME"),
        login_env=("OPENAI_API_KEY",),
        install="npm install -g @zed-industries/codex-acp",
        limits=("offers no skip mode: use bypass, where Bridge allows every request",),
        source="preset",
    ),
    "claude-acp": AgentDefinition(
        name="claude-acp",
        label="Claude Code (ACP)",
        protocol=ACP_PROTOCOL,
        command=("claude-agent-acp",),
        version=("claude-agent-acp", "--version"),  # the adapter's; it runs a Claude Code of its own
        env={"CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION": "false"},  # else each turn ends with an uncounted model call
        login_env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
        skip_mode="bypassPermissions",
        install="npm install -g @agentclientprotocol/claude-agent-acp (Node.js 22 or newer)",
        limits=(
            "runs the Claude Code it brings, unless CLAUDE_CODE_EXECUTABLE names another",
            "skip needs Bridge to run as a user other than root, or IS_SANDBOX=1 passed on, as Claude Code's own "
            "bypass mode does",
            "its cost is not recorded yet (it reports a running total per session): the claude executor records it",
            "a task whose text starts with / and one of its commands runs that command instead of asking the model",
        ),
        source="preset",
    ),
}


def agents_file() -> Path:
    return Path(settings.BRIDGE_AGENTS_FILE).expanduser()


def _argv(where: str, key: str, value: object) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or len(value) > MAX_ARGV_ENTRIES
        or not all(isinstance(word, str) and word and "\0" not in word for word in value)
    ):
        raise AgentsFileError(
            f"{where}: {key} must be a list of 1 to {MAX_ARGV_ENTRIES} non-empty strings, "
            f'like ["/path/to/agent", "--acp"], not {value!r:.80}'
        )
    return tuple(value)


def _env_names(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(name, str) and ENV_NAME_RE.match(name) for name in value):
        raise AgentsFileError(
            f'{where}: pass_env must be a list of variable names, like ["MY_API_KEY"], not {value!r:.80}'
        )
    return tuple(value)


def _declared(name: str, entry: object, source: str) -> AgentDefinition:
    """One `[agents.NAME]` table as a definition, or AgentsFileError saying what is wrong with it."""
    where = f"{source}: [agents.{name}]"
    if not NAME_RE.match(name):
        raise AgentsFileError(f"{where}: a name is 1-20 lower-case letters, digits or '-', starting with a letter")
    if name in BUILT_IN:
        raise AgentsFileError(f"{where}: {name!r} is built in (its executable is set with BRIDGE_{name.upper()}_BIN)")
    if not isinstance(entry, dict):
        raise AgentsFileError(f"{where} must be a table")
    unknown = sorted(set(entry) - DECLARED_KEYS)
    if unknown:
        raise AgentsFileError(f"{where}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(DECLARED_KEYS))}")
    if entry.get("protocol") != ACP_PROTOCOL:
        raise AgentsFileError(f'{where}: protocol = "acp" is required (the only protocol a declared agent can speak)')
    preset = PRESETS.get(name)
    if "command" not in entry and preset is None:
        raise AgentsFileError(f'{where}: command is required, like command = ["/path/to/agent", "--acp"]')
    skip_mode = entry.get("skip_mode", preset.skip_mode if preset else "")
    label = entry.get("label", preset.label if preset else name)
    for key, value in (("skip_mode", skip_mode), ("label", label)):
        if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
            raise AgentsFileError(f"{where}: {key} must be a string of at most {MAX_LABEL_CHARS} characters")
    base = preset or AgentDefinition(name=name, label=name, protocol=ACP_PROTOCOL)
    return replace(
        base,
        label=label,
        command=_argv(where, "command", entry["command"]) if "command" in entry else base.command,
        version=_argv(where, "version", entry["version"]) if "version" in entry else base.version,
        pass_env=base.pass_env + _env_names(where, entry.get("pass_env", [])),
        skip_mode=skip_mode,
        source=source,
    )


def load_agents_file(path: Path) -> dict[str, AgentDefinition]:
    """The agents `path` declares ({} when there is no such file), or AgentsFileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentsFileError(f"{path} cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AgentsFileError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"agents"})
    if unknown:
        raise AgentsFileError(f"{path}: unknown tables {', '.join(unknown)}; agents are declared as [agents.NAME]")
    declared = data.get("agents", {})
    if not isinstance(declared, dict):
        raise AgentsFileError(f"{path}: agents must be tables, [agents.NAME]")
    return {name: _declared(name, entry, str(path)) for name, entry in declared.items()}


_loaded: dict[str, dict[str, AgentDefinition]] = {}


def all_agents() -> dict[str, AgentDefinition]:
    """Every executor by name: built-in, presets, then the file's (read once per file name and process)."""
    path = agents_file()
    key = str(path)
    if key not in _loaded:
        _loaded[key] = {**BUILT_IN, **PRESETS, **load_agents_file(path)}
    return _loaded[key]


def check_agents_file() -> None:
    """Start-up: read BRIDGE_AGENTS_FILE again, so that a wrong one stops Bridge with the reason (AgentsFileError)."""
    _loaded.pop(str(agents_file()), None)
    all_agents()


def agent_names() -> list[str]:
    return list(all_agents())


def get_agent(name: str) -> AgentDefinition | None:
    return all_agents().get(name)


def label(name: str) -> str:
    """A person's word for the agent; a name no longer declared (a task from before an edit) is shown as is."""
    definition = get_agent(name)
    return definition.label if definition else name


def choices() -> list[tuple[str, str]]:
    """(name, label) of every executor, for a form's picker."""
    return [(name, definition.label) for name, definition in all_agents().items()]
