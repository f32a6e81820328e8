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
    """Who decides a tool call. Bridge's own words: `approve` (every ask the agent sends goes to the planner),
    `bypass` (Bridge allows every ask, recorded as policy), `skip` (the CLI's own skip-permissions flag: nothing is
    asked). Claude Code's words, for Claude tasks only, passed on as `--permission-mode`: `acceptEdits` (Claude
    accepts file edits and plain file-system commands such as mkdir or touch in the cwd and add_dirs itself, and
    asks for the rest, which Bridge relays as in approve) and `plan` (Claude reads and plans without changing
    anything; what it asks to run, such as an edit, Bridge relays as in approve, so the planner can keep the tree
    untouched by denying it)."""

    APPROVE = "approve"
    BYPASS = "bypass"
    SKIP = "skip"
    ACCEPT_EDITS = "acceptEdits"
    PLAN = "plan"

    @property
    def label(self) -> str:
        return {
            PermissionMode.APPROVE: "ask for every tool",
            PermissionMode.BYPASS: "allow every tool (recorded as policy)",
            PermissionMode.SKIP: "the CLI's own skip-permissions flag",
            PermissionMode.ACCEPT_EDITS: "Claude accepts file edits; ask for the rest",
            PermissionMode.PLAN: "Claude plans; ask for anything it would change",
        }[self]


# The modes Claude Code itself implements (`claude --permission-mode`); Bridge relays what it still asks, as in approve.
CLAUDE_PERMISSION_MODES = frozenset({PermissionMode.ACCEPT_EDITS, PermissionMode.PLAN})


class Source(StrEnum):
    API = "api"
    MCP = "mcp"
    WEB = "web"
    IMPORTED = "imported"  # history brought over from an older tool by `manage.py import_legacy`; never run here


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
    LINK = "link"  # a signed one-tap link, from a notification
    POLICY = "policy"
    TIMEOUT = "timeout"
    AGENT = "agent"
    SUPERVISOR = "supervisor"


class RuleDecision(StrEnum):
    """What a permission rule decides (jobs/actions/rules.py): `allow` and `deny` answer a request at once, recorded as
    policy; `ask` leaves it for a person even where an allow rule would let it through. Deny beats ask beats allow."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"

    @property
    def rank(self) -> int:
        """Which decision wins when rules of several match: the highest."""
        return list(RuleDecision).index(self)


class Remember(StrEnum):
    """How far a decision is remembered as a rule (jobs/actions/rules.py, `remember`): this task, its agent session
    (the tasks that resume it too), its project (the task's cwd and everything under it), or everywhere."""

    TASK = "task"
    SESSION = "session"
    PROJECT = "project"
    ALWAYS = "always"


class Isolation(StrEnum):
    """Where a task's agent works: in the directory asked for, or in a git worktree of its own on a branch
    `bridge/<id>`, to merge or discard afterwards (docs/architecture.md, "Changes and worktrees")."""

    NONE = "none"
    WORKTREE = "worktree"


class ChangesState(StrEnum):
    """How far a task's record of what it changed has got: its start snapshot is taken (`pending` until the end is
    compared with it), the changes are `recorded`, or they could not be (`unavailable`, with the reason)."""

    PENDING = "pending"
    RECORDED = "recorded"
    UNAVAILABLE = "unavailable"


class WorktreeState(StrEnum):
    """A task's worktree: `planned` until the supervisor that runs its task makes it, then `live` until it is merged,
    discarded, or pruned BRIDGE_WORKTREE_KEEP_DAYS after its task ended."""

    PLANNED = "planned"
    LIVE = "live"
    MERGED = "merged"
    DISCARDED = "discarded"
    PRUNED = "pruned"


def choices(words: type[StrEnum]) -> list[tuple[str, str]]:
    """(value, label) pairs for a Django field or form; the label is the value where a word has none of its own."""
    return [(word.value, getattr(word, "label", word.value.capitalize())) for word in words]
