"""The words Bridge's layers share: agents, task and permission states, modes. Plain enums, no ORM, so runners,
models and adapters can all use them (docs/architecture.md, "Layers").

Each enum is a `StrEnum`, so a member compares equal to the string stored in the database.
"""

from enum import StrEnum


class Agent(StrEnum):
    CLAUDE = "claude"
    HERMES = "hermes"

    @property
    def label(self) -> str:
        return {Agent.CLAUDE: "Claude Code", Agent.HERMES: "Hermes Agent"}[self]


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    ORPHANED = "orphaned"


TERMINAL_STATUSES = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED, Status.TIMEOUT, Status.ORPHANED})

# The token counts a run reports, by the names Claude Code's `usage` gives them and the task's fields keep.
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class PermissionMode(StrEnum):
    APPROVE = "approve"
    BYPASS = "bypass"
    SKIP = "skip"

    @property
    def label(self) -> str:
        return {
            PermissionMode.APPROVE: "ask for every tool",
            PermissionMode.BYPASS: "allow every tool (recorded as policy)",
            PermissionMode.SKIP: "the CLI's own skip-permissions flag",
        }[self]


class Source(StrEnum):
    API = "api"
    MCP = "mcp"
    WEB = "web"


class PermissionStatus(StrEnum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class DecidedVia(StrEnum):
    API = "api"
    WEB = "web"
    MCP = "mcp"
    POLICY = "policy"
    TIMEOUT = "timeout"
    AGENT = "agent"
    SUPERVISOR = "supervisor"


def choices(words: type[StrEnum]) -> list[tuple[str, str]]:
    """(value, label) pairs for a Django field or form; the label is the value where a word has none of its own."""
    return [(word.value, getattr(word, "label", word.value.capitalize())) for word in words]
