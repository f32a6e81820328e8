"""The MCP tools: each parses its arguments, calls jobs.actions, and shapes the reply with jobs.mcp.replies.

They keep the older Hermes MCP bridge's names and arguments, and add Claude Code tasks and permission decisions.
Failures are raised (jobs.core.errors) and turned into replies in one place, `jobs.mcp.server.tool`.
"""

import dataclasses
import logging
import mimetypes
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from mcp.server.mcpserver import Context
from pydantic import StrictInt

from jobs import actions
from jobs.actions.tasks import PERMISSION_MODES
from jobs.agents import executors, hermes_skills
from jobs.core import paths
from jobs.core.errors import ErrorCode, InvalidInput, NotFound
from jobs.core.vocabulary import Agent, DecidedVia, Source, Status
from jobs.mcp import calls, full_log, reads, replies, waiting
from jobs.mcp.reads import in_db
from jobs.mcp.registry import ErrorReport, tool
from jobs.mcp.starter import supervisor_starter
from jobs.models import Task, TaskCount

log = logging.getLogger(__name__)
DEFAULT_READ_BYTES = 64 * 1024
MAX_CAPABILITIES = 500
MAX_JOBS = 200
DEFAULT_PATCH_CHARS = 20_000  # a page of a job's patch (task_changes), small enough for a planner's context
MAX_PATCH_CHARS = 200_000


def describe(task: Task, notes: Sequence[str] = ()) -> str:
    """A task's reply as it is now: progress and the newest output while it runs, else its result; with the
    FULL_LOG line naming its whole transcript, brought up to date."""
    task.refresh_from_db()
    task = actions.settle_if_orphaned(task)
    notes = [_full_log(task), *notes]
    if task.is_terminal:
        output = task.result or reads.output_tail(task, settings.BRIDGE_MCP_OUTPUT_CHARS + 1)
        return replies.finished_task(task, notes, output, actions.changes_data(task))
    return replies.unfinished_task(
        task,
        notes,
        ahead=reads.queued_ahead(task) if task.status == Status.QUEUED else None,
        pending=len(actions.pending_permissions(task)),
        tail=reads.output_tail(task, replies.RUNNING_TAIL_CHARS),
    )


def _full_log(task: Task) -> str:
    try:
        return replies.full_log_line(full_log.refresh(task))
    except OSError as exc:
        log.warning("could not write the full log of task %s: %s", task.public_id, exc)
        return replies.full_log_line(None, f"{exc.strerror or exc}")


def _listify(value: list[str] | str | None) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    return [item.strip() for item in items if item.strip()] or None


# --- starting jobs --------------------------------------------------------------------------------------


def _spec(
    agent: str, task: str, cwd: str | None, timeout_s: int | None, options: dict[str, Any], **more: Any
) -> actions.TaskSpec:
    """The task an MCP tool asks for: the arguments every run and resume tool takes, and what only some do."""
    return actions.TaskSpec(
        prompt=task, cwd=cwd, agent=agent, timeout_s=timeout_s, options=options, source=Source.MCP, **more
    )


def _start(spec: actions.TaskSpec) -> tuple[Task, list[str]]:
    """Queue the task (or join its identical twin) and see that a supervisor runs: one that cannot run its agent
    makes it wait, saying why and the fix (`WAITING:`, from the one rule in actions)."""
    actions.settle_running_tasks()  # never join an identical task whose supervisor is dead
    task, created = actions.create_or_join_task(spec)
    notes = [] if created else [replies.joined_existing(task)]
    left_out = actions.left_out_note(task) if created else ""
    if left_out:
        notes.append(f"NOTE: {left_out}")
    supervisor_note = supervisor_starter.ensure()
    if supervisor_note:
        notes.append(supervisor_note)
    return task, notes


async def _run(spec: actions.TaskSpec, wait_s: float, call: calls.Call, more_notes: Sequence[str] = ()) -> str:
    """Start (or join) the job and wait for it; a later round of the same call follows the job its first started."""
    wait, notes = waiting.bounded(wait_s)
    if call.rounds.job_id:  # a later round of this call (2026-07-28): its first round started the job
        task = await in_db(_job)(call.rounds.job_id)
    else:
        task, start_notes = await in_db(_start)(spec)
        call.rounds.start(str(task.public_id), [*more_notes, *notes, *start_notes])
    asked = await waiting.until_attention(task, wait, call)
    return await in_db(describe)(task, [*call.rounds.notes, *asked])


def _session_id(agent: str, session_id: str, cwd: str | None) -> tuple[str, list[str]]:
    """The session a resume continues (actions.known_session_id), and a note when it is Hermes' own."""
    known = actions.known_session_id(agent, session_id, cwd)
    if not known.hermes_own:
        return known.session_id, []
    return known.session_id, [replies.hermes_latest_session(known.session_id, str(paths.resolve_cwd(cwd)))]


async def _resume(session_id: str, spec: actions.TaskSpec, wait_s: float, ctx: Context | None) -> str:
    """Both agents' resume: `session_id` is "latest" (the newest session Bridge ran in spec.cwd; for Hermes, else
    Hermes' own newest there) or a session id Bridge recorded (which fixes the cwd) or, for Hermes, any id in
    Hermes' own session store."""
    call = calls.Call(ctx)
    if call.rounds.job_id:  # a later round: the first resolved the session and started the job
        return await _run(spec, wait_s, call)
    resume_id, notes = await in_db(_session_id)(spec.agent, session_id, spec.cwd)
    return await _run(dataclasses.replace(spec, resume_session_id=resume_id), wait_s, call, notes)


@tool
async def hermes_run(
    task: str,
    cwd: str | None = None,
    max_turns: StrictInt | None = None,
    timeout_s: StrictInt | None = None,
    wait_s: float = 5,
    skills: list[str] | str | None = None,
    toolsets: list[str] | str | None = None,
    target: str | None = None,
    isolation: Literal["worktree", "none"] | None = None,
    base: str | None = None,
    permission_timeout_s: StrictInt | None = None,
    ctx: Context | None = None,
) -> str:
    """Start a Hermes Agent job in cwd (absolute, inside the allowed roots) and wait up to wait_s seconds
    (default 5, at most 150). Returns STATUS/JOB_ID; if still running, collect it later with hermes_status.
    Read STATUS and JOB_ID from the header lines at the top; the agent's output comes last, each line behind `| `.
    target: run only on the supervisor with this name, host or label (hermes_health lists them); default any.
    isolation "worktree": the job works in a git worktree of its own (WORKTREE: in the reply), to land with
    task_merge or drop with task_discard; base: the branch, tag or commit it starts from (default HEAD).
    permission_timeout_s: how long each of its permission requests waits for permission_decide before it is denied
    (default the server's BRIDGE_PERMISSION_TIMEOUT_S, 600)."""
    options = dict(max_turns=max_turns, skills=_listify(skills), toolsets=_listify(toolsets))
    more: dict[str, Any] = dict(target=target or "", isolation=isolation or "", base=base or "")
    more |= dict(permission_timeout_s=permission_timeout_s)
    return await _run(_spec(Agent.HERMES, task, cwd, timeout_s, options, **more), wait_s, calls.Call(ctx))


@tool
async def hermes_resume(
    session_id: str,
    task: str,
    cwd: str | None = None,
    max_turns: StrictInt | None = None,
    timeout_s: StrictInt | None = None,
    wait_s: float = 5,
    ctx: Context | None = None,
) -> str:
    """Continue a Hermes session with a new task. session_id is an earlier reply's SESSION_ID, any Hermes session
    id (also one started by hand or by another tool, e.g. from `hermes sessions list`), or "latest" for the newest
    Hermes session Bridge ran in cwd (if none, Hermes' own newest session started in cwd). A session Bridge ran
    continues in its own cwd; another one in cwd (or the default)."""
    spec = _spec(Agent.HERMES, task, cwd, timeout_s, dict(max_turns=max_turns))
    return await _resume(session_id, spec, wait_s, ctx)


@tool
async def claude_run(
    task: str,
    cwd: str | None = None,
    permission_mode: Literal[PERMISSION_MODES] = "approve",  # type: ignore[valid-type]
    model: str | None = None,
    max_turns: StrictInt | None = None,
    allowed_tools: list[str] | None = None,
    disallowed_tools: list[str] | None = None,
    append_system_prompt: str | None = None,
    add_dirs: list[str] | None = None,
    timeout_s: StrictInt | None = None,
    wait_s: float = 5,
    target: str | None = None,
    isolation: Literal["worktree", "none"] | None = None,
    base: str | None = None,
    permission_timeout_s: StrictInt | None = None,
    ctx: Context | None = None,
) -> str:
    """Start a Claude Code job in cwd and wait up to wait_s seconds (default 5, at most 150). With
    permission_mode "approve" its tool requests wait for permission_decide; "bypass" allows them all; Claude Code's
    "acceptEdits" (it accepts file edits itself) and "plan" (it plans, changing nothing unasked) send the rest to
    permission_decide as approve does. disallowed_tools: tools Claude may not use (e.g. "Bash(git push:*)").
    append_system_prompt: text added to Claude's system prompt. add_dirs: more absolute directories it may work in,
    each inside the allowed roots like cwd.
    The reply has the same shape as hermes_status's: header lines first, the output last behind `| `.
    target: run only on the supervisor with this name, host or label (hermes_health lists them); default any.
    isolation, base and permission_timeout_s as for hermes_run."""
    options = dict(
        model=model,
        max_turns=max_turns,
        allowed_tools=allowed_tools,
        disallowed_tools=disallowed_tools,
        append_system_prompt=append_system_prompt,
        add_dirs=add_dirs,
    )
    more: dict[str, Any] = dict(permission_mode=permission_mode, target=target or "", isolation=isolation or "")
    more |= dict(base=base or "", permission_timeout_s=permission_timeout_s)
    spec = _spec(Agent.CLAUDE, task, cwd, timeout_s, options, **more)
    return await _run(spec, wait_s, calls.Call(ctx))


@tool
async def claude_resume(
    session_id: str,
    task: str,
    cwd: str | None = None,
    permission_mode: Literal[PERMISSION_MODES] = "approve",  # type: ignore[valid-type]
    max_turns: StrictInt | None = None,
    disallowed_tools: list[str] | None = None,
    append_system_prompt: str | None = None,
    add_dirs: list[str] | None = None,
    timeout_s: StrictInt | None = None,
    wait_s: float = 5,
    ctx: Context | None = None,
) -> str:
    """Continue a Claude Code session (SESSION_ID from an earlier reply, or "latest" for cwd) with a new task.
    permission_mode, disallowed_tools, append_system_prompt and add_dirs as for claude_run."""
    options = dict(
        max_turns=max_turns,
        disallowed_tools=disallowed_tools,
        append_system_prompt=append_system_prompt,
        add_dirs=add_dirs,
    )
    spec = _spec(Agent.CLAUDE, task, cwd, timeout_s, options, permission_mode=permission_mode)
    return await _resume(session_id, spec, wait_s, ctx)


@tool
async def agent_run(
    agent: str,
    task: str,
    cwd: str | None = None,
    permission_mode: Literal[PERMISSION_MODES] = "approve",  # type: ignore[valid-type]
    skip_permissions: bool = False,
    model: str | None = None,
    max_turns: StrictInt | None = None,
    timeout_s: StrictInt | None = None,
    wait_s: float = 5,
    target: str | None = None,
    isolation: Literal["worktree", "none"] | None = None,
    base: str | None = None,
    permission_timeout_s: StrictInt | None = None,
    ctx: Context | None = None,
) -> str:
    """Start a job on any agent Bridge runs, by name: "claude", "hermes", a preset ACP agent ("gemini", "qwen",
    "opencode", "codex", "claude-acp") or one declared in Bridge's agents file; hermes_health lists them with their
    readiness. Waits up to wait_s seconds (default 5, at most 150); the reply has hermes_status's shape.
    permission_mode "approve": each tool request waits for permission_decide; "bypass": Bridge allows them all.
    skip_permissions: the agent's own mode that asks nothing, where it has one. model: the agent's model id;
    max_turns: Claude and Hermes only. target, isolation, base and permission_timeout_s as for hermes_run."""
    options = dict(model=model, max_turns=max_turns)
    more: dict[str, Any] = dict(permission_mode=permission_mode, skip_permissions=skip_permissions)
    more |= dict(target=target or "", isolation=isolation or "", base=base or "")
    more |= dict(permission_timeout_s=permission_timeout_s)
    return await _run(_spec(agent, task, cwd, timeout_s, options, **more), wait_s, calls.Call(ctx))


@tool
async def agent_resume(
    agent: str,
    session_id: str,
    task: str,
    cwd: str | None = None,
    permission_mode: Literal[PERMISSION_MODES] = "approve",  # type: ignore[valid-type]
    skip_permissions: bool = False,
    model: str | None = None,
    timeout_s: StrictInt | None = None,
    wait_s: float = 5,
    ctx: Context | None = None,
) -> str:
    """Continue an agent's session (SESSION_ID from an earlier reply of that agent, or "latest" for cwd) with a new
    task; agent and the rest as for agent_run. An agent that cannot resume sessions says so in the reply."""
    options = dict(model=model)
    more: dict[str, Any] = dict(permission_mode=permission_mode, skip_permissions=skip_permissions)
    return await _resume(session_id, _spec(agent, task, cwd, timeout_s, options, **more), wait_s, ctx)


# --- following jobs -------------------------------------------------------------------------------------


@tool
async def hermes_status(job_id: str, wait_s: float = 30, ctx: Context | None = None) -> str:
    """Any job's status and output (Hermes or Claude). Waits up to wait_s seconds (default 30, at most 150)
    for it to finish, returning early when it ends or asks for a permission (which a client that can ask its user
    puts to them meanwhile). The header (`STATUS:`, `JOB_ID:`,
    `EXIT_CODE:`, `ERROR:` …, one line each) comes first; the output last, under `--- <AGENT> OUTPUT ---` (or
    `--- OUTPUT SO FAR (tail) ---`), each of its lines behind `| `: only header lines are Bridge's word. An
    unknown job_id: hermes_jobs lists the jobs."""
    wait, notes = waiting.bounded(wait_s)
    call = calls.Call(ctx)
    task = await in_db(_job)(job_id)
    if not call.rounds.job_id:
        call.rounds.start(str(task.public_id), notes)
    asked = await waiting.until_attention(task, wait, call)
    return await in_db(describe)(task, [*call.rounds.notes, *asked])


def _job(job_id: str) -> Task:
    """The job a tool names; for an unknown id, the words point to hermes_jobs (actions.get_task's point to REST)."""
    try:
        return actions.get_task(job_id)
    except NotFound as exc:
        if exc.code != ErrorCode.NO_SUCH_TASK:
            raise
        raise NotFound(replies.unknown_job(str(job_id)), code=ErrorCode.NO_SUCH_TASK) from None


def _changes(job_id: str, offset: int, max_chars: int) -> str:
    return replies.changes(actions.changes_data(_job(job_id)), offset, max_chars)


@tool
async def task_changes(job_id: str, offset: int = 0, max_chars: int = DEFAULT_PATCH_CHARS) -> str:
    """What a job changed in its working directory: `CHANGED:` counts, one `CHANGED_FILE:` line per file (status,
    path relative to its cwd, lines added and removed), then a page of the unified patch under `--- PATCH ---`, each
    line behind `| `, from `offset` (characters), at most max_chars; `PATCH_NEXT:` names the call for the rest."""
    if offset < 0:
        raise InvalidInput(f"offset must be 0 or more, not {offset}")
    if max_chars < 1:
        raise InvalidInput(replies.at_least_one("max_chars", max_chars))
    return await in_db(_changes)(job_id, offset, min(max_chars, MAX_PATCH_CHARS))


def _reviewed(review: Callable[[], actions.Review]) -> Callable[[], Awaitable[actions.Review]]:
    """Run a merge or discard, which may wait up to 30 s for the worktree's host, on a thread of its own: not on the
    one thread the other tools' database calls share (`in_db`), which it would hold up meanwhile."""

    def run() -> actions.Review:
        try:
            return review()
        finally:
            connection.close()  # a pool thread, not Django's: its connection would never be handed back

    return sync_to_async(run, thread_sensitive=False)


@tool
async def task_merge(job_id: str, strategy: Literal["merge", "squash"] = "merge", message: str = "") -> str:
    """Land an isolated job's work (isolation "worktree") on the branch it started from: its worktree is committed
    on its branch, then merged ("merge": a merge commit) or squashed ("squash": one commit) into the base branch;
    the worktree and branch are then removed. A conflict, or changes in your checkout that the merge would overwrite,
    is refused (CODE: merge_conflict / checkout_not_clean, a FILE: line each) and nothing anywhere is changed. A
    worktree on another host is merged by the supervisor there (STATUS: pending if it takes over 30 s)."""
    task = await in_db(_job)(job_id)
    review = await _reviewed(lambda: actions.merge_worktree(task, strategy, message, by="mcp"))()
    return replies.worktree_done(task, review.worktree, done=review.done)


@tool
async def task_discard(job_id: str) -> str:
    """Throw away an isolated job's work: its worktree and its branch are removed (on another host, by the supervisor
    there)."""
    task = await in_db(_job)(job_id)
    review = await _reviewed(lambda: actions.discard_worktree(task, by="mcp"))()
    return replies.worktree_done(task, review.worktree, done=review.done)


def _jobs(limit: int) -> str:
    actions.settle_running_tasks()
    return replies.job_list(TaskCount.by_status(), reads.newest_tasks(limit))


@tool
async def hermes_jobs(limit: int = 20) -> str:
    """The newest jobs (all agents), one line each: JOB_ID, STATUS, agent, elapsed seconds, cwd, task."""
    return await in_db(_jobs)(max(1, min(limit, MAX_JOBS)))


def _cancel(job_id: str, reason: str) -> str:
    task = actions.request_cancel(_job(job_id), reason=reason or "cancelled by the planner", by="mcp")
    return describe(task, [] if task.is_terminal else [replies.CANCEL_REQUESTED])


@tool
async def task_cancel(job_id: str, reason: str = "") -> str:
    """Cancel a queued or running job. Its output so far is kept."""
    return await in_db(_cancel)(job_id, reason)


# --- permissions ----------------------------------------------------------------------------------------


def _pending(job_id: str | None) -> str:
    task = _job(job_id) if job_id else None
    return replies.pending_permissions(actions.pending_permissions(task))


@tool
async def permissions_pending(job_id: str | None = None) -> str:
    """Tool-use requests waiting for an answer (of one job, or all), oldest first."""
    return await in_db(_pending)(job_id)


@dataclasses.dataclass(frozen=True)
class _Decision:
    behavior: str
    request_id: str | None
    message: str
    updated_input: dict | None
    remember: str | None
    rule: str | None


def _decide(job_id: str, decision: _Decision) -> str:
    perm = actions.decide_permission(
        _job(job_id),
        behavior=decision.behavior,
        request_id=decision.request_id,
        updated_input=decision.updated_input,
        message=decision.message,
        by="mcp",
        via=DecidedVia.MCP,
        remember=decision.remember,
        rule=decision.rule,
    )
    return replies.decision(job_id, perm, list(perm.remembered_as.all()))


@tool
async def permission_decide(
    job_id: str,
    behavior: Literal["allow", "deny"],
    request_id: str | None = None,
    message: str = "",
    updated_input: dict[str, Any] | None = None,
    remember: Literal["task", "session", "project", "always"] | None = None,
    rule: str | None = None,
) -> str:
    """Answer a job's permission request (the oldest pending one unless request_id is given). "allow" may
    replace the tool's input with updated_input; "deny" tells the agent message. remember: also make the rule that
    answers the next identical request the same way, for this job, its agent session, its project (the job's cwd
    and below) or everywhere ("always"); rule: the rule to make instead of the exact one, e.g. a SUGGESTED_RULE."""
    decision = _Decision(behavior, request_id, message, updated_input, remember, rule)
    return await in_db(_decide)(job_id, decision)


# --- reading without an agent ---------------------------------------------------------------------------


def _read(path: str, max_bytes: int, notes: list[str]) -> str:
    target = full_log.readable(path) or paths.resolve_readable(path, actions.live_worktree_paths())
    if target.is_dir():
        return replies.directory(target, sorted(target.iterdir(), key=lambda p: p.name), notes)
    if not target.is_file():
        return replies.not_a_file(target, notes)
    size = target.stat().st_size
    with open(target, "rb") as f:
        head = f.read(max_bytes)
    return replies.file(target, size, head, mimetypes.guess_type(target.name)[0] or "unknown type", notes)


@tool
async def hermes_read(path: str, max_bytes: int = DEFAULT_READ_BYTES) -> str:
    """Read a file (text up to max_bytes; binary files are described) or list a directory, without waking an
    agent. path must be absolute and inside the allowed roots (or BRIDGE_READ_ROOTS), or a job's FULL_LOG.
    The content (or the listing) comes last, under `--- CONTENT ---` (`--- ENTRIES ---`), each line behind `| `."""
    if max_bytes < 1:
        raise InvalidInput(replies.at_least_one("max_bytes", max_bytes))
    cap, notes = settings.BRIDGE_READ_MAX_BYTES, []
    if max_bytes > cap:
        notes.append(replies.clamped("max_bytes", str(max_bytes), str(cap), "BRIDGE_READ_MAX_BYTES"))
        max_bytes = cap
    try:
        return await in_db(_read)(path, max_bytes, notes)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path!r}: {exc.strerror or exc}", code=ErrorCode.UNREADABLE) from None


# --- Hermes' library and health -------------------------------------------------------------------------


def _capabilities(query: str, category: str, limit: int) -> str:
    library = hermes_skills.read_library()
    if not query and not category:
        return replies.categories(library, limit)
    return replies.skill_matches(library, hermes_skills.search(library, query, category), limit)


@tool
async def hermes_capabilities(query: str = "", category: str = "", limit: int = 50) -> str:
    """Hermes' skills, read from disk: no arguments gives the categories; query (words that must all appear)
    and category narrow it down to skills; limit bounds the list. Pass skill names to hermes_run(skills=…)."""
    if limit < 1:
        raise InvalidInput(replies.at_least_one("limit", limit))
    return await sync_to_async(_capabilities)(query, category, min(limit, MAX_CAPABILITIES))


def _health() -> tuple[bool, str]:
    executable = hermes_skills.hermes_executable()
    state = actions.system_state()
    if executable is None:
        hermes = [f"HERMES: {replies.hermes_missing()}"]
    else:
        version = hermes_skills.hermes_version(executable)
        hermes = replies.hermes_found(executable, version, hermes_skills.acp_installed(str(executable)))
    # what the live supervisors can run (it is they that run the jobs), or this server's view while none lives
    statuses = actions.executor_statuses(state.workers)
    readiness = {status.agent: status for status in statuses}
    hermes += replies.executor_readiness(readiness["hermes"]) + replies.executor_readiness(readiness["claude"])
    for status in executors.worth_telling(statuses):
        if status.agent not in (Agent.HERMES, Agent.CLAUDE):
            hermes += replies.executor_readiness(status)
    hermes.append(replies.agents_line(list(readiness)))
    ok = readiness["hermes"].ready != executors.NO and state.database == "ok"
    return ok, replies.health(ok, hermes, state)


@tool
async def hermes_health() -> str:
    """Instant check: Hermes executable and version, database, live supervisors, jobs by status."""
    ok, text = await in_db(_health)()
    if not ok:
        raise ErrorReport(text)
    return text


# --- permission rules ----------------------------------------------------------------------------------------------


def _rules() -> str:
    return replies.rules(actions.list_rules())


@tool
async def rules_list() -> str:
    """The permission rules that decide now, oldest first: RULE_ID, RULE (the pattern), DECISION, ROOT, AGENT,
    CREATED, and MESSAGE or EXPIRES when set."""
    return await in_db(_rules)()


def _add_rule(rule: str, decision: str, message: str, root: str, agent: str, created_for: str) -> str:
    made = actions.add_rule(rule, decision, message=message, root=root, agent=agent, created_for=created_for, by="mcp")
    return replies.rule_added(made)


@tool
async def rule_add(
    rule: str,
    decision: Literal["allow", "deny", "ask"],
    message: str = "",
    root: str = "",
    agent: str = "",
    created_for: str = "",
) -> str:
    """Answer routine permission requests yourself, before they wait for permission_decide. rule: Claude Code's
    syntax, e.g. "Bash(git status)", "Bash(npm run test:*)", "Read(src/**)", "Edit(docs/*.md)",
    "WebFetch(domain:example.com)", "mcp__server__tool". decision: "allow" or "deny" (answered at once, the reply and
    transcript name the rule; message: what a denied agent is told) or "ask" (always left to you). Deny beats ask
    beats allow; a compound command is allowed only when rules allow each of its parts. root: only jobs whose cwd is
    this directory or under it (default: everywhere); agent: only this agent's jobs (default: any); created_for: only
    jobs made by this token or user ("token:ci", "user:alice"; default: anyone's)."""
    return await in_db(_add_rule)(rule, decision, message, root, agent, created_for)


def _remove_rule(rule_id: int) -> str:
    return replies.rule_removed(actions.remove_rule(rule_id, by="mcp"))


@tool
async def rule_remove(rule_id: StrictInt) -> str:
    """Stop a permission rule (RULE_ID from rules_list or rule_add) from deciding; it stays on record."""
    return await in_db(_remove_rule)(rule_id)


def _switch_preset(preset: str, root: str, on: bool) -> str:
    return replies.preset_switched(preset, root, on, actions.switch_preset(preset, root, on=on, by="mcp"))


@tool
async def rule_preset(preset: Literal["read-only"], root: str = "", on: bool = True) -> str:
    """Switch a set of rules on for jobs under root (default: everywhere), or off (on=false). read-only: reading
    and searching the job's directory, git status, diff and log (git's options that write a file, read outside the
    repository or run a program still ask)."""
    return await in_db(_switch_preset)(preset, root, on)
