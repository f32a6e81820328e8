"""Permission rules: the user's own answers to routine permission requests, given before a request becomes pending.

A rule is a pattern in Claude Code's syntax (jobs/core/permission_rules.py, which alone says whether one matches), a
decision and a scope: a root (tasks whose cwd is it or under it; "" everywhere), an agent, the token or user who made
the task, an expiry. When a request arrives (`decide_by_rules`, from `record_permission_request`), deny beats ask
beats allow, as in Claude Code; within a decision the most specific scope names the rule (a deeper root, then a
more specific pattern, then the newer rule). `ask` leaves the request to a person, so no allow rule lets it through.

Each process keeps the live rules parsed and indexed (`RuleBook`) and reads one row per request to learn whether they
are still current: `PermissionRulesVersion.stamp`, a new random value written in the same transaction as every rule
added or removed. A random stamp rather than a counter: a counter restarts at 0 in a new or emptied database, where
a process's book could then pass for current. Rows are never deleted; a removed rule keeps who removed it and when.
"""

import itertools
import re
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import PurePath

from django.db import transaction
from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from jobs.actions import rows
from jobs.agents import registry
from jobs.core import paths
from jobs.core.access import Caller
from jobs.core.errors import ErrorCode, InvalidInput, NotFound
from jobs.core.inputs import check_text
from jobs.core.permission_rules import (
    Call,
    Decision,
    Pattern,
    RuleError,
    approving,
    matches,
    parse,
    rules_for,
    specificity,
    url_host,
)
from jobs.core.vocabulary import Remember, RuleDecision
from jobs.models import AgentSession, PermissionRequest, PermissionRule, PermissionRulesVersion, Task, Worktree

MAX_RULE_CHARS = 4000
MAX_RULE_MESSAGE_CHARS = 10_000
MAX_CACHED_TASKS = 1024  # the tasks whose rules a book keeps indexed together, before it forgets them all
STAMP_ROW = 1
BEFORE_ALLOW: tuple[Decision, ...] = ("deny", "ask")  # the decisions that win over allow, the first first


# --- making and removing rules -------------------------------------------------------------------------------------


def add_rule(
    rule: str,
    decision: str,
    *,
    message: str = "",
    root: str = "",
    agent: str = "",
    created_for: str = "",
    expires_at: datetime | None = None,
    by: str = "",
    caller: Caller | None = None,
    task: Task | None = None,
    session: AgentSession | None = None,
    from_request: PermissionRequest | None = None,
    preset: str = "",
) -> PermissionRule:
    """Store a rule, checked first: a pattern that does not parse is refused with the reason, a root outside the
    allowed roots as a cwd would be, and a caller limited to roots may only make rules under them. A remembered
    decision (`remember`) may narrow the scope to one task or one agent session, and names the request it came from;
    a preset's rules name it."""
    fields = checked_rule(rule, decision, message, root, agent, expires_at)
    check_rule_root(caller, fields.root)
    created_for = check_text("created_for", created_for, 200).strip()
    with transaction.atomic():
        made = PermissionRule.objects.create(
            **asdict(fields),
            created_for=created_for,
            created_by=by,
            task=task,
            session=session,
            from_request=from_request,
            preset=preset,
        )
        _rules_changed()
    return made


@dataclass(frozen=True)
class CheckedRule:
    """A rule's columns, checked."""

    pattern: str
    decision: RuleDecision
    message: str
    root: str
    agent: str
    expires_at: datetime | None


def checked_rule(
    rule: str, decision: str, message: str, root: str, agent: str, expires_at: datetime | None
) -> CheckedRule:
    """A rule's columns from what a caller sent, or the refusal that names what to change."""
    text = check_text("rule", rule, MAX_RULE_CHARS)
    try:
        pattern = parse(text)
    except RuleError as error:
        raise InvalidInput(f"the rule {text.strip()[:200]!r} cannot be used: {error}", field="rule") from None
    try:
        decided = RuleDecision(decision)
    except ValueError:
        raise InvalidInput(
            f"decision must be one of {', '.join(RuleDecision)}, not {str(decision)[:50]!r}", field="decision"
        ) from None
    message = check_text("message", message or "", MAX_RULE_MESSAGE_CHARS).strip()
    if message and decided != RuleDecision.DENY:
        raise InvalidInput("message is what a deny rule tells the agent; leave it out for an allow or ask rule")
    if agent and registry.get_agent(agent) is None:
        names = ", ".join(registry.agent_names())
        raise InvalidInput(f"agent must be one of {names}, or empty for any, not {agent[:50]!r}", field="agent")
    if expires_at is not None and expires_at.tzinfo is None:
        raise InvalidInput("expires_at needs a time zone, such as 2030-01-31T18:00:00Z", field="expires_at")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput(f"expires_at {expires_at.isoformat()} has passed: give a time to come", field="expires_at")
    resolved_root = str(paths.resolve_dir(root, "root")) if (root or "").strip() else ""
    return CheckedRule(pattern.text, decided, message, resolved_root, agent or "", expires_at)


def check_rule_root(caller: Caller | None, root: str) -> None:
    """A token limited to roots makes and removes only rules under them: never one for everywhere."""
    if caller is not None:
        caller.check_made_under_roots("a rule", root)


def remove_rule(rule_id: int, by: str = "", caller: Caller | None = None) -> PermissionRule:
    """Stop a rule from deciding; its row stays, with who removed it and when. Removing a removed rule changes
    nothing and answers it as it is."""
    rule = get_rule(rule_id)
    check_rule_root(caller, rule.root)
    with transaction.atomic():
        if PermissionRule.objects.filter(pk=rule.pk, removed_at=None).update(removed_at=timezone.now(), removed_by=by):
            _rules_changed()
    rule.refresh_from_db()
    return rule


def get_rule(rule_id: object) -> PermissionRule:
    rule = PermissionRule.objects.filter(pk=rule_id).first() if isinstance(rule_id, int) else None
    if rule is None:
        raise NotFound(
            f"no permission rule {str(rule_id)[:50]!r}: GET /v1/rules?all=1 (MCP: rules_list) lists them",
            code=ErrorCode.NO_SUCH_RULE,
        )
    return rule


def list_rules(include_ended: bool = False, caller: Caller | None = None) -> list[PermissionRule]:
    """The rules that decide now (or every rule ever made, removed and expired ones too), oldest first; for a
    caller limited to roots, those that can apply under them."""
    rules = PermissionRule.objects.all() if include_ended else PermissionRule.objects.live()
    listed = list(rules.select_related("task", "session", "from_request__task").order_by("id"))
    if caller is None or not caller.roots:
        return listed
    return [rule for rule in listed if not rule.root or caller.covers(rule.root)]


def rule_data(rule: PermissionRule) -> dict:
    """A rule as every interface shows it."""
    return {
        "id": rule.pk,
        "rule": rule.pattern,
        "decision": rule.decision,
        "message": rule.message,
        "root": rule.root,
        "agent": rule.agent,
        "created_for": rule.created_for,
        "task_id": str(rule.task.public_id) if rule.task is not None else None,
        "session_id": rule.session.session_id if rule.session is not None else None,
        "from_request": _request_named(rule.from_request) if rule.from_request is not None else None,
        "preset": rule.preset,
        "expires_at": rule.expires_at,
        "created_by": rule.created_by,
        "created_at": rule.created_at,
        "removed_at": rule.removed_at,
        "removed_by": rule.removed_by,
        "live": rule.removed_at is None and (rule.expires_at is None or rule.expires_at > timezone.now()),
    }


def requests_met(rules: list[PermissionRule], newest: int = 5) -> dict[int, "RuleUse"]:
    """For each rule, how many requests it decided (or sent to a person) and the newest of them, with their tasks:
    one query for the counts and one for the newest `newest` of every rule."""
    ids = [rule.pk for rule in rules]
    counts = dict(
        PermissionRequest.objects.filter(rule_id__in=ids).values_list("rule_id").annotate(n=Count("id")).order_by()
    )
    ranked = (
        PermissionRequest.objects.filter(rule_id__in=ids)
        .annotate(
            place=Window(RowNumber(), partition_by=F("rule_id"), order_by=[F("created_at").desc(), F("id").desc()])
        )
        .filter(place__lte=newest)
        .order_by("rule_id", "place")
        .select_related("task")
    )
    uses = {rule_id: RuleUse(count, []) for rule_id, count in counts.items()}
    for perm in ranked:
        uses[perm.rule_id].newest.append(perm)
    return uses


@dataclass
class RuleUse:
    """How often a rule met a request, and the newest such requests, newest first."""

    count: int
    newest: list[PermissionRequest]


def _request_named(perm: PermissionRequest) -> dict:
    return {"task_id": str(perm.task.public_id), "request_id": perm.request_id}


def _rules_changed() -> None:
    """Tell every process its parsed rules are out of date: in the caller's transaction, with the change."""
    PermissionRulesVersion.objects.update_or_create(pk=STAMP_ROW, defaults={"stamp": uuid.uuid4()})


# --- presets --------------------------------------------------------------------------------------------------------

# Rules a user switches on together, per root. read-only: reading and searching the task's own directory, and looking
# at git's state. `ask` keeps with a person, since ask beats allow, the options of git that write a file (--output),
# read one outside the repository (--no-index) or run a program (--ext-diff).
PRESETS: dict[str, tuple[tuple[str, RuleDecision], ...]] = {
    "read-only": (
        ("Read(/**)", RuleDecision.ALLOW),
        *((f"Bash(git {command})", RuleDecision.ALLOW) for command in ("status", "diff", "log")),
        *((f"Bash(git {command} *)", RuleDecision.ALLOW) for command in ("status", "diff", "log")),
        *(
            (f"Bash(git {command} *{option}*)", RuleDecision.ASK)
            for command in ("diff", "log")
            for option in ("--output", "--no-index", "--ext-diff")
        ),
    ),
}


def switch_preset(
    name: str, root: str = "", *, on: bool = True, by: str = "", caller: Caller | None = None
) -> list[PermissionRule]:
    """Switch a preset's rules on for a root ("" everywhere), answering the rules made (none when it is on already),
    or off, answering the rules removed."""
    if name not in PRESETS:
        raise InvalidInput(f"no preset {str(name)[:50]!r}: the presets are {', '.join(PRESETS)}", field="preset")
    resolved = str(paths.resolve_dir(root, "root")) if (root or "").strip() else ""
    check_rule_root(caller, resolved)
    with transaction.atomic():
        live = list(PermissionRule.objects.live().filter(preset=name, root=resolved))
        if not on:
            return [remove_rule(rule.pk, by=by, caller=caller) for rule in live]
        present = {(rule.pattern, rule.decision) for rule in live}
        return [
            add_rule(pattern, decision, root=resolved, by=by, caller=caller, preset=name)
            for pattern, decision in PRESETS[name]
            if (pattern, decision.value) not in present
        ]


def presets_data(caller: Caller | None = None) -> list[dict]:
    """Each preset, its rules, and the roots it is switched on for ("" everywhere)."""
    on = PermissionRule.objects.live().exclude(preset="").values_list("preset", "root").distinct()
    roots: dict[str, set[str]] = {}
    for name, root in on:
        if caller is None or not caller.roots or (root and caller.covers(root)):
            roots.setdefault(name, set()).add(root)
    return [
        {
            "preset": name,
            "rules": [{"rule": pattern, "decision": decision.value} for pattern, decision in rules],
            "roots": sorted(roots.get(name, ())),
        }
        for name, rules in PRESETS.items()
    ]


# --- remembering a decision ----------------------------------------------------------------------------------------

# Claude's suggestion destinations, as the scope a remembered rule gets (its CLI writes localSettings and
# projectSettings into the project, userSettings into the home directory, session and cliArg only in memory).
_DESTINATIONS = {
    "session": Remember.SESSION,
    "cliArg": Remember.SESSION,
    "localSettings": Remember.PROJECT,
    "projectSettings": Remember.PROJECT,
    "userSettings": Remember.ALWAYS,
}
_ACP_ALWAYS = {"allow_always": RuleDecision.ALLOW, "reject_always": RuleDecision.DENY}


def check_remember(remember: str | None, rule: str | None) -> Remember | None:
    """The scope a decision asks to be remembered in, checked before anything is looked up."""
    if rule is not None and not remember:
        raise InvalidInput("rule names the rule to remember: give remember too (task, session, project or always)")
    if not remember:
        return None
    try:
        return Remember(remember)
    except ValueError:
        raise InvalidInput(
            f"remember must be one of {', '.join(Remember)}, not {str(remember)[:50]!r}", field="remember"
        ) from None


def remember(
    perm: PermissionRequest,
    scope: Remember,
    *,
    allowed: bool,
    rule: str | None = None,
    message: str = "",
    by: str = "",
    caller: Caller | None = None,
) -> list[PermissionRule]:
    """Make the rules that decide the next identical request the way `perm` was just decided, in `scope`: the named
    `rule` (which must decide this request the same way), or the narrowest rules Bridge can write for it
    (`permission_rules.rules_for`). Called in the decision's transaction, so a rule that cannot be made leaves the
    request undecided, with the reason."""
    task = perm.task
    decision = RuleDecision.ALLOW if allowed else RuleDecision.DENY
    cwd = working_dir(task)
    if rule is None:
        relative = task.worktree_id is not None and scope != Remember.ALWAYS
        try:
            patterns = rules_for(perm.tool_name, perm.input, cwd, decision.value, relative)
        except RuleError as error:
            raise InvalidInput(
                f"this request cannot be remembered as it is: {error} (give rule)", field="rule"
            ) from None
    else:
        patterns = [_named_rule(rule, perm, decision, cwd)]
    where = _remembered_scope(task, scope)
    deny_message = message if decision == RuleDecision.DENY else ""
    return [
        add_rule(pattern.text, decision, message=deny_message, by=by, caller=caller, from_request=perm, **where)
        for pattern in patterns
    ]


def _named_rule(rule: str, perm: PermissionRequest, decision: RuleDecision, cwd: str) -> Pattern:
    """The rule a decider named to remember, refused unless it decides this very request as it was decided."""
    text = check_text("rule", rule, MAX_RULE_CHARS)
    try:
        pattern = parse(text)
    except RuleError as error:
        raise InvalidInput(f"the rule {text.strip()[:200]!r} cannot be used: {error}", field="rule") from None
    if not _decides(pattern, perm, decision, cwd):
        raise InvalidInput(
            f"the rule {pattern.text!r} would not {decision} this request ({perm.tool_name}), so remembering it "
            "would not decide the next one: name a rule that covers it, or leave rule out",
            field="rule",
        )
    return pattern


def _decides(pattern: Pattern, perm: PermissionRequest, decision: RuleDecision, cwd: str) -> bool:
    """Whether a rule alone would decide `perm` as `decision`: only then does remembering it decide the next one."""
    if decision == RuleDecision.ALLOW:
        return bool(approving([pattern], perm.tool_name, perm.input, cwd))
    return matches(pattern, perm.tool_name, perm.input, cwd, "deny")


def _remembered_scope(task: Task, scope: Remember) -> dict:
    """The scope columns of a rule remembered from one of `task`'s requests."""
    if scope == Remember.ALWAYS:
        return {}
    if scope == Remember.PROJECT:
        return {"root": task.cwd}
    if scope == Remember.TASK:
        return {"root": task.cwd, "task": task}
    session = session_of(task)
    if session is None:
        raise InvalidInput(
            f"task {task.public_id}'s agent has not named its session yet: remember task or project instead",
            field="remember",
        )
    return {"root": task.cwd, "agent": task.agent, "session": session}


def session_of(task: Task) -> AgentSession | None:
    """The agent session a task runs in: the one it resumes, or the one its agent named as it started."""
    current = Task.objects.filter(pk=task.pk).values_list("session_id", "resume_session_id").first()
    if current is None:
        return None
    session_pk, resumed = current
    if session_pk is not None:
        return AgentSession.objects.filter(pk=session_pk).first()
    return AgentSession.objects.filter(agent=task.agent, session_id=resumed).first() if resumed else None


def suggested_rules(perm: PermissionRequest) -> list[dict]:
    """The rules an agent offered with its request, each one click to make: Claude's `permission_suggestions`
    (`addRules`, with the scope its destination names) and an ACP agent's `allow_always` / `reject_always` options
    (the exact rule for the request, everywhere). Suggestions Bridge cannot use are left out."""
    offered: list[dict] = []
    for suggestion in perm.suggestions if isinstance(perm.suggestions, list) else []:
        if not isinstance(suggestion, dict):
            continue
        if suggestion.get("kind") in _ACP_ALWAYS:
            offered += _acp_suggestion(perm, suggestion)
        elif suggestion.get("type") in ("addRules", "replaceRules"):
            offered += _claude_suggestion(suggestion)
    cwd = working_dir(perm.task) if offered else ""
    unique = {(item["rule"], item["decision"], item["remember"]): item for item in offered}
    return [item for item in unique.values() if _decides(parse(item["rule"]), perm, item["decision"], cwd)]


def _claude_suggestion(suggestion: dict) -> list[dict]:
    decision = suggestion.get("behavior", "allow")
    scope = _DESTINATIONS.get(str(suggestion.get("destination")), Remember.PROJECT)
    if decision not in (RuleDecision.ALLOW, RuleDecision.DENY):
        return []
    found = []
    for entry in suggestion.get("rules") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("toolName"), str):
            continue
        content = entry.get("ruleContent")
        text = entry["toolName"] + (f"({content})" if isinstance(content, str) and content else "")
        try:
            found.append({"rule": parse(text).text, "decision": decision, "remember": scope.value})
        except RuleError:
            continue
    return found


def _acp_suggestion(perm: PermissionRequest, option: dict) -> list[dict]:
    """An ACP always-option as the exact rule; Hermes names its "for this session" option allow_session."""
    decision = _ACP_ALWAYS[option["kind"]]
    named = f"{option.get('optionId', '')} {option.get('name', '')}".lower()
    scope = Remember.SESSION if "session" in named else Remember.ALWAYS
    try:
        patterns = rules_for(perm.tool_name, perm.input, working_dir(perm.task), decision.value, relative=False)
    except RuleError:
        return []
    return [{"rule": pattern.text, "decision": decision.value, "remember": scope.value} for pattern in patterns]


# --- deciding a request --------------------------------------------------------------------------------------------


def decide_by_rules(task: Task, tool_name: str, tool_input: dict) -> tuple[RuleDecision, PermissionRule] | None:
    """What the user's rules say about a request of `task`'s agent, and the rule that says it; None when no rule
    speaks about it. Deny beats ask beats allow; a compound command is allowed only when allow rules cover each of
    its parts (`approving`)."""
    candidates = current_book().candidates(task, tool_name, tool_input, timezone.now())
    if not candidates:
        return None
    found = decide(candidates, tool_name, tool_input, working_dir(task))
    if found is None:
        return None
    decision, chosen = found
    return decision, chosen.row


def decide(
    rules: list["LiveRule"], tool_name: str, tool_input: dict, cwd: str
) -> tuple[RuleDecision, "LiveRule"] | None:
    """The decision among rules already in scope: the first of deny and ask any rule matches, else allow when allow
    rules approve the request; the rule named is the one with the most specific scope."""
    call = Call(tool_name, tool_input, cwd)
    for first in BEFORE_ALLOW:
        found = [rule for rule in rules if rule.decision == first and call.matched_by(rule.pattern, first)]
        if found:
            return RuleDecision(first), max(found, key=LiveRule.rank)
    allows = [rule for rule in rules if rule.decision == RuleDecision.ALLOW]
    alone = [rule for rule in allows if call.matched_by(rule.pattern, "allow")]
    if alone:
        return RuleDecision.ALLOW, max(alone, key=LiveRule.rank)
    together = set(call.approved_by([rule.pattern for rule in allows]))
    if not together:
        return None
    return RuleDecision.ALLOW, max((rule for rule in allows if rule.pattern in together), key=LiveRule.rank)


def working_dir(task: Task) -> str:
    """Where the task's agent works, which relative paths in its requests are read against: its worktree's place
    for an isolated task, else its cwd."""
    if task.worktree_id is None:
        return task.cwd
    found = rows.select(Worktree, id=task.worktree_id, limit=1)
    if not found or not found[0].path:
        return task.cwd
    row = found[0]
    return str(PurePath(row.path) / row.relative_cwd) if row.relative_cwd else row.path


@dataclass(frozen=True)
class LiveRule:
    """A live rule as a book holds it: its row, and its pattern parsed once."""

    row: PermissionRule
    pattern: Pattern
    decision: RuleDecision
    depth: int  # the root's components: a deeper root is a more specific scope; 0 for everywhere
    specificity: int

    @classmethod
    def of(cls, row: PermissionRule) -> "LiveRule":
        pattern = parse(row.pattern)
        depth = len(PurePath(row.root).parts) if row.root else 0
        return cls(row, pattern, RuleDecision(row.decision), depth, specificity(pattern))

    def rank(self) -> tuple[int, int, int]:
        """Higher is the more specific scope: a deeper root, then a more specific pattern, then the newer rule."""
        return self.depth, self.specificity, self.row.pk


# --- the book: live rules, parsed and indexed ---------------------------------------------------------------------

# Which rules a request can meet, by the tool it names (jobs/core/permission_rules.py, `_request` and `_covers`): Edit
# rules cover every file-editing tool, Read rules the reading and searching ones, and a deny or ask Read rule Edit too.
# A tool not named here (MCP tools, Hermes' titles, tools Bridge does not know) meets every rule in scope, but MCP
# tools only their server's.
_TOOL_KEYS = {
    "Bash": {"Bash"},
    "WebFetch": {"WebFetch"},
    "Agent": {"Agent"},
    "Task": {"Agent"},
    **{name: {"Edit", "Read", name} for name in ("Edit", "Write", "MultiEdit", "NotebookEdit")},
    **{name: {"Read", name} for name in ("Read", "NotebookRead", "Grep", "Glob")},
}
_QUOTES = re.compile(r"['\"\\]")
_WORD = re.compile(r"[A-Za-z0-9_-]+")


def rule_key(pattern: Pattern) -> str:
    """The bucket of a rule: the tool it names, an MCP rule's server, and Agent for Agent and Task rules."""
    if pattern.tool.startswith("mcp__"):
        return "mcp__" + pattern.tool[len("mcp__") :].partition("__")[0]
    return "Agent" if pattern.tool == "Task" else pattern.tool


def request_keys(tool_name: str, tool_input: dict) -> set[str] | None:
    """The buckets whose rules can match a request; None for every bucket."""
    if tool_name in _TOOL_KEYS:
        return _TOOL_KEYS[tool_name]
    command = tool_input.get("command")
    hermes_like = isinstance(command, str) and bool(command) and tool_name.endswith(command)
    if tool_name.startswith("mcp__") and not hermes_like:
        return {"mcp__" + tool_name[len("mcp__") :].partition("__")[0], tool_name}
    return None


def command_word(pattern: Pattern) -> str | None:
    """The word every command a Bash rule can match holds (`git` for `Bash(git status:*)`): the letters, digits,
    `_` and `-` its first word starts with, quotes and backslashes left out; None when the rule can match any command
    (a bare Bash, a leading `*`, or a first word whose letters run into a `*`)."""
    if pattern.tool != "Bash" or pattern.specifier is None:
        return None
    unquoted = _QUOTES.sub("", pattern.specifier)
    found = _WORD.match(unquoted)
    if found is None or unquoted[found.end() : found.end() + 1] == "*":
        return None
    return found.group()


def rule_domain(pattern: Pattern) -> str | None:
    """The domain every host a WebFetch rule can match is or lies under (`python.org` for `domain:python.org` and for
    `domain:*.python.org`); None when the rule can match any host (a `*` elsewhere, `domain:*`, a bare WebFetch)."""
    if pattern.tool != "WebFetch" or pattern.specifier is None:
        return None
    domain = pattern.specifier.removeprefix("domain:").removeprefix("*.")
    return None if "*" in domain else domain


def url_domains(url: object) -> set[str] | None:
    """A URL's host and every domain above it (`docs.python.org`, `python.org`, `org`): a WebFetch rule with a
    `rule_domain` matches the URL only if this holds it; None when Bridge reads no host in it (a deny rule matches
    it whatever its domain)."""
    host = url_host(url)
    if host is None:
        return None
    labels = host.split(".")
    return {".".join(labels[start:]) for start in range(len(labels))}


def command_words(command: str) -> set[str]:
    """Every run of letters, digits, `_` and `-` in a command with its quotes and backslashes left out: a Bash rule
    with a `command_word` matches a command only if this holds it (tests/integration/test_permission_rules.py)."""
    return set(_WORD.findall(_QUOTES.sub("", command)))


@dataclass
class _Scope:
    """The rules of the scopes that hold one task, by bucket; Bash rules by their command word instead, WebFetch
    rules by their domain."""

    by_key: dict[str, list[LiveRule]] = field(default_factory=dict)
    commands: dict[str, list[LiveRule]] = field(default_factory=dict)
    domains: dict[str, list[LiveRule]] = field(default_factory=dict)

    def add(self, rule: LiveRule) -> None:
        word, domain = command_word(rule.pattern), rule_domain(rule.pattern)
        if word is not None:
            self.commands.setdefault(word, []).append(rule)
        elif domain is not None:
            self.domains.setdefault(domain, []).append(rule)
        else:
            self.by_key.setdefault(rule_key(rule.pattern), []).append(rule)

    def meeting(self, keys: set[str] | None, words: set[str] | None, domains: set[str] | None) -> list[LiveRule]:
        """The rules that can match a request in these buckets whose command holds `words` (`command_words`) and
        whose URL `domains` (`url_domains`); None: the request names no command, or no URL Bridge reads a host in."""
        found = [rule for key, rules in self.by_key.items() if keys is None or key in keys for rule in rules]
        if self.commands and (keys is None or "Bash" in keys):
            found += _under(self.commands, words)
        if self.domains and (keys is None or "WebFetch" in keys):
            found += _under(self.domains, domains)
        return found


def _under(index: dict[str, list[LiveRule]], held: set[str] | None) -> list[LiveRule]:
    """The rules of `index` under the keys a request holds; all of them when none can be read from it (a deny rule
    for any command or host matches a request whose command or host is missing)."""
    if held is None:
        return [rule for rules in index.values() for rule in rules]
    if len(held) > len(index):
        return [rule for key, rules in index.items() if key in held for rule in rules]
    return [rule for key in held for rule in index.get(key, ())]


ScopeKey = tuple[str, str, str, int | None, int | None]  # root, agent, created_for, task, agent session
TaskKey = tuple[str, str, str, int, int | None]  # a task's cwd, agent, created_by, id and agent session


class RuleBook:
    """The live rules as one process keeps them, parsed once, by scope; current while the stamp read is its stamp.
    The rules of all the scopes that hold a task are indexed together when it first asks, so that each request
    looks in one index however many scopes the rules are spread over."""

    def __init__(self, stamp: object, rules: list[PermissionRule]) -> None:
        self.stamp = stamp
        self.scopes: dict[ScopeKey, list[LiveRule]] = {}
        for rule in rules:
            key = (rule.root, rule.agent, rule.created_for, rule.task_id, rule.session_id)
            self.scopes.setdefault(key, []).append(LiveRule.of(rule))
        self.roots = sorted({key[0] for key in self.scopes if key[0]})
        self.per_session = any(key[4] is not None for key in self.scopes)
        self._of_task: dict[TaskKey, _Scope] = {}

    def candidates(self, task: Task, tool_name: str, tool_input: dict, now: datetime) -> list[LiveRule]:
        """The live rules in the task's scope that can match this request (a superset of those that do)."""
        if not self.scopes:
            return []
        command = tool_input.get("command")
        words = command_words(command) if isinstance(command, str) else None
        domains = url_domains(tool_input.get("url"))
        found = self._scope_of(task).meeting(request_keys(tool_name, tool_input), words, domains)
        return [rule for rule in found if rule.row.expires_at is None or rule.row.expires_at > now]

    def _scope_of(self, task: Task) -> _Scope:
        """The rules of every scope that holds the task, indexed together, remembered per task: its roots (by
        `paths.within`, the one rule for "under"), its agent, its creator, the task itself and its agent session."""
        session = session_key(task) if self.per_session else None
        key = (task.cwd, task.agent, task.created_by, task.pk, session)
        known = self._of_task.get(key)
        if known is None:
            if len(self._of_task) >= MAX_CACHED_TASKS:
                self._of_task.clear()
            known = self._of_task[key] = _Scope()
            roots = ["", *(root for root in self.roots if paths.within(task.cwd, root))]
            agents, creators = {"", task.agent}, {"", task.created_by}
            for scope in itertools.product(roots, agents, creators, {None, task.pk}, {None, session}):
                for rule in self.scopes.get(scope, ()):
                    known.add(rule)
        return known


def session_key(task: Task) -> int | None:
    """The id of the agent session a task runs in: the one the recorder linked to this very task, so a request reads
    no row for it; else as `session_of` reads it (a task not linked yet, or linked by another process)."""
    if task.session_id is not None:
        return task.session_id
    session = session_of(task)
    return session.pk if session is not None else None


_book: RuleBook | None = None


def current_book() -> RuleBook:
    """This process's book of live rules, read again only when the stamp says they changed. The stamp is read before
    the rules, so a change committed in between makes the next request read them again, never the reverse."""
    global _book
    stamps = rows.select(PermissionRulesVersion, id=STAMP_ROW, limit=1)
    stamp = stamps[0].stamp if stamps else None
    book = _book
    if book is None or book.stamp != stamp:
        book = _book = RuleBook(stamp, list(PermissionRule.objects.live()))
    return book
