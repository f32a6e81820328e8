"""The text of every MCP reply, each shape in one function and each sentence written once.

Replies keep the older Hermes MCP bridge's `KEY: value` header lines (`STATUS: … / JOB_ID: …`) and its output
marker (`--- HERMES OUTPUT ---`), so planners that learnt them keep working. Whatever an outsider wrote (the agent's
output and errors, session ids, paths, file contents, skill names) is data, never structure: every reply is joined
by `reply`, which makes each of Bridge's own lines one line (`one_line` escapes line breaks, control and bidi
characters visibly), and text that is not Bridge's own sits last, in a block opened by a `--- … ---` marker where
each of its lines starts with `| ` (`framed`). So no agent text can add a header line, a marker, or end a block.
Nothing here reads the database beyond the objects given.
"""

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from jobs.actions import SystemState, suggested_rules
from jobs.agents.executors import ExecutorStatus
from jobs.agents.hermes_skills import Skill, SkillLibrary
from jobs.core.errors import ErrorCode
from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.core.vocabulary import TERMINAL_STATUSES, ChangesState, Status, WorktreeState
from jobs.models import PermissionRequest, PermissionRule, Task, Worker, Worktree

STATUS_WORDS = {
    Status.QUEUED: "queued",
    Status.RUNNING: "running",
    Status.DONE: "ok",
    Status.FAILED: "error",
    Status.CANCELLED: "cancelled",
    Status.TIMEOUT: "timeout",
    Status.ORPHANED: "orphaned",
}
RUNNING_TAIL_CHARS = 2000
RUNNING_MARKER = "--- OUTPUT SO FAR (tail) ---"  # the older bridge's words, over the last RUNNING_TAIL_CHARS
SHOWN_ID_CHARS = 36  # a UUID as text: a longer job id is shown shortened
MAX_LISTED_ENTRIES = 500
MAX_INPUT_CHARS = 2000
CHANGED_FILES_SHOWN = 20  # the files a finished job's reply names; task_changes lists them all
CANCEL_REQUESTED = "NOTE: cancel requested; the supervisor is stopping the agent."
BLOCK_LINE = "| "  # what starts every line inside a block
LINE_BREAK = re.compile(r"\r?\n")


def one_line(text: str) -> str:
    """The text as one line that shows what it holds: `\\n`, `\\x1b`, `\\u202e` for what a terminal or a
    reader would act on (jobs.core.terminal, the one rule for which characters those are)."""
    return printable(text)


def framed(marker: str, lines: Iterable[str], empty: str) -> list[str]:
    """A block: its marker, then each line of outsider text behind `| ` (escaped as in one_line, tabs kept), or
    `empty` when there is none. Only Bridge writes the marker and nothing inside can pass for one."""
    body = [BLOCK_LINE + printable(line, keep="\t") for line in lines]
    return [marker, *(body or [empty])]


def text_lines(text: str) -> list[str]:
    """A text's lines for a block (a CRLF ends a line too); none for an empty text."""
    return LINE_BREAK.split(text) if text else []


def reply(lines: Iterable[str], block: Sequence[str] = ()) -> str:
    """Every reply's one join: Bridge's own lines, each made one line, then the block (from `framed`) last."""
    return "\n".join([*(one_line(line) for line in lines), *block])


def status_word(status: str) -> str:
    """The older bridge's word for a status (`ok`, `error`, …): planners' prompts test for these."""
    return STATUS_WORDS[Status(status)]


def elapsed_s(task: Task) -> float:
    """Seconds since the task started (or was queued), up to its end or now."""
    start = task.started_at or task.created_at
    end = task.finished_at or timezone.now()
    return max(0.0, (end - start).total_seconds())


def jobs_line(counts: dict[str, int]) -> str:
    return "JOBS: " + ", ".join(f"{status_word(s)}={n}" for s, n in counts.items())


def pending_line(count: int) -> str:
    return f"PENDING_PERMISSIONS: {count}"


# --- a task ----------------------------------------------------------------------------------------------


def full_log_line(path: Path | None, problem: str = "") -> str:
    """Where the job's whole transcript can be read (with hermes_read), or why it cannot."""
    return f"FULL_LOG: {path}" if path is not None else f"FULL_LOG: unavailable ({problem})"


def _task_header(task: Task, notes: Sequence[str]) -> list[str]:
    lines = [
        f"STATUS: {status_word(task.status)}",
        f"JOB_ID: {task.public_id}",
        *legacy_id_lines(task),
        f"AGENT: {task.agent}",
        f"CWD: {task.cwd}",
        f"ELAPSED_S: {elapsed_s(task):.1f}",
        f"TIMEOUT_S: {task.timeout_s if task.timeout_s is not None else 'none'}",
    ]
    if task.target:
        lines.append(f"TARGET: {task.target}")
    if task.worker is not None:
        lines.append(f"WORKER: {task.worker.name}")
    if task.status == Status.QUEUED and task.wait_reason:
        lines.append(f"WAITING: {task.wait_reason}")
    if task.session is not None:
        lines.append(f"SESSION_ID: {task.session.session_id}")
    if task.worktree is not None:
        lines.append(worktree_line(task.worktree))
    return lines + usage_lines(task) + list(notes)


def worktree_line(worktree: Worktree) -> str:
    """`WORKTREE:` an isolated job's worktree: its state, branch and where its files are (hermes_read reads them)."""
    if worktree.state == WorktreeState.PLANNED:
        return "WORKTREE: planned (made when the job starts)"
    where = worktree.path if worktree.removed_at is None else "removed"
    line = f"WORKTREE: {worktree.state} {worktree.branch} (base {worktree.base_branch or 'detached'}) {where}"
    if worktree.request:
        line += f"; a {worktree.request} asked by {worktree.requested_by or 'someone'} waits on its host"
    elif worktree.refusal:
        line += (
            f"; the last {worktree.refusal.get('action', 'request')} was refused: {worktree.refusal.get('error', '')}"
        )
    return line


def worktree_done(task: Task, worktree: dict[str, Any], *, done: bool = True) -> str:
    """task_merge's and task_discard's reply: what was done, or (not `done`) what the worktree's host has yet to do."""
    status = worktree["state"] if done else "pending"
    lines = [f"STATUS: {status}", f"JOB_ID: {task.public_id}", f"BRANCH: {worktree['branch']}"]
    if worktree["merged_commit"]:
        lines.append(f"MERGED_INTO: {worktree['base_branch']} at {worktree['merged_commit']}")
    asked = worktree.get("requested")
    if not done and asked:
        lines += [
            f"REQUESTED: {asked['action']} by {asked['by']} at {asked['at']}",
            "NOTE: the worktree is on another host, whose supervisor has not finished this within 30 s; it goes on. "
            "hermes_status shows the job's WORKTREE line: merged or discarded once done. Asking again answers CODE: "
            "worktree_request_pending while this is pending; after a refusal it is tried again and says why.",
        ]
    return reply(lines)


def legacy_id_lines(task: Task) -> list[str]:
    """`LEGACY_ID:`, the id an imported job had in the older tool it came from (`manage.py import_legacy`), by which
    every tool that takes a job_id finds it too."""
    return [f"LEGACY_ID: {task.legacy_id}"] if task.legacy_id else []


def usage_lines(task: Task) -> list[str]:
    """What the run cost, when the agent reported it: `COST_USD:` and `TOKENS:` (input, output, cache)."""
    lines = [f"COST_USD: {task.cost_usd:.4f}"] if task.cost_usd is not None else []
    counts = [
        ("input", task.input_tokens),
        ("output", task.output_tokens),
        ("cache_creation", task.cache_creation_input_tokens),
        ("cache_read", task.cache_read_input_tokens),
    ]
    known = [f"{name}={count}" for name, count in counts if count is not None]
    if known:
        lines.append("TOKENS: " + " ".join(known))
    if task.num_turns is not None:
        lines.append(f"NUM_TURNS: {task.num_turns}")
    return lines


def unfinished_task(task: Task, notes: Sequence[str], *, ahead: int | None, pending: int, tail: str) -> str:
    """A queued or running task: a progress notice (it is NOT a failure) and the newest output."""
    lines = _task_header(task, notes)
    if ahead is not None:
        lines.append(f"Queued behind {ahead} other job(s), waiting for a free worker.")
    if pending:
        lines.append(
            f"{pending_line(pending)} — the agent is waiting: answer with permissions_pending / permission_decide."
        )
    lines.append(
        f"Still {task.status}. This is NOT a failure and NOT a timeout. Collect the result with "
        f'hermes_status(job_id="{task.public_id}"). Do not re-run the task.'
    )
    return reply(lines, framed(RUNNING_MARKER, text_lines(tail), "(no output yet)"))


def finished_task(task: Task, notes: Sequence[str], output: str, changes: dict[str, Any] | None = None) -> str:
    """A task that ended: exit code, error, what it changed (`actions.changes_data`), and its output up to
    BRIDGE_MCP_OUTPUT_CHARS."""
    lines = _task_header(task, notes)
    lines.append(f"EXIT_CODE: {task.exit_code if task.exit_code is not None else 'none'}")
    if task.error:
        lines.append(f"ERROR: {task.error}")
    if changes is not None:
        lines += changed_lines(changes)
    cap = settings.BRIDGE_MCP_OUTPUT_CHARS
    if len(output) > cap:
        lines.append(
            f"NOTE: output truncated at {cap} of {len(output)} characters (BRIDGE_MCP_OUTPUT_CHARS); "
            "FULL_LOG has all of it."
        )
        output = output[:cap]
    return reply(lines, framed(f"--- {task.agent.upper()} OUTPUT ---", text_lines(output), "(no output)"))


def changed_lines(changes: dict[str, Any]) -> list[str]:
    """`CHANGED:` (how many files and lines), then one `CHANGED_FILE:` line per file, at most CHANGED_FILES_SHOWN;
    task_changes has them all and the patch. A file's name is the agent's text: reply() shows it on one line."""
    job_id = changes["task_id"]
    if changes["state"] != ChangesState.RECORDED:
        return [f"CHANGED: unknown ({changes['reason'] or changes['state']})"]
    lines = [f"CHANGED: {changes['files_changed']} file(s), +{changes['lines_added']} -{changes['lines_removed']}"]
    for change in changes["files"][:CHANGED_FILES_SHOWN]:
        counts = "binary" if change["binary"] else f"+{change['added']} -{change['removed']}"
        moved = f" (from {change['old_path']})" if change.get("old_path") else ""
        lines.append(f"CHANGED_FILE: {change['status']} {change['path']}{moved} {counts}")
    more = changes["files_changed"] - min(len(changes["files"]), CHANGED_FILES_SHOWN)
    if more > 0:
        lines.append(f'CHANGED_MORE: {more} more file(s): task_changes(job_id="{job_id}") lists them all')
    if changes["files_changed"]:
        lines.append(f'CHANGED_PATCH: task_changes(job_id="{job_id}") returns the patch')
    return lines


def changes(changes: dict[str, Any], offset: int, limit: int) -> str:
    """task_changes' reply: the header lines, every file, then a page of the patch as a block."""
    patch = changes["patch"]
    page = patch[offset : offset + limit]
    lines = [f"JOB_ID: {changes['task_id']}", f"CHANGES: {changes['state']}", *changed_lines(changes)]
    if changes["truncated"]:
        lines.append(f"TRUNCATED: {changes['left_out']}")
    lines.append(f"PATCH_CHARS: {len(patch)}")
    lines.append(f"PATCH_RANGE: {offset}-{offset + len(page)}")
    if offset + len(page) < len(patch):
        lines.append(
            f'PATCH_NEXT: task_changes(job_id="{changes["task_id"]}", offset={offset + len(page)}) for the rest'
        )
    return reply(lines, framed("--- PATCH ---", text_lines(page), "(no patch)"))


def joined_existing(task: Task) -> str:
    return (
        f"NOTE: an identical task was already {task.status} in this cwd; this is that job (no second worker "
        "was started)."
    )


def job_list(counts: dict[str, int], tasks: Iterable[Task]) -> str:
    """The counts by status, then one line per task: JOB_ID, status, agent, elapsed, an imported job's old id, cwd,
    first prompt line."""
    lines = [jobs_line(counts)]
    for task in tasks:
        first_line = (task.prompt.strip().splitlines() or [""])[0][:80]
        old_id = f"(old id: {task.legacy_id})  " if task.legacy_id else ""
        lines.append(
            f"{task.public_id}  {status_word(task.status):9}  {task.agent:6}  {elapsed_s(task):7.1f}s  "
            f"{old_id}{task.cwd}  {first_line}"
        )
    return reply(lines)


# --- permissions ----------------------------------------------------------------------------------------


def pending_permissions(pending: Sequence[PermissionRequest]) -> str:
    """Each waiting request with what the agent wants to run (input cut at MAX_INPUT_CHARS)."""
    lines = [pending_line(len(pending))]
    for perm in pending:
        tool_input = json.dumps(perm.input, ensure_ascii=False)
        if len(tool_input) > MAX_INPUT_CHARS:
            tool_input = tool_input[:MAX_INPUT_CHARS] + "…"
        lines += [
            "",
            f"JOB_ID: {perm.task.public_id}",
            f"REQUEST_ID: {perm.request_id}",
            f"TOOL: {perm.tool_name}",
            f"INPUT: {tool_input}",
            *matched_rule(perm),
            *(
                f"SUGGESTED_RULE: {offer['decision']} {offer['rule']} remember={offer['remember']}"
                for offer in suggested_rules(perm)
            ),
        ]
    return reply(lines)


def decision(job_id: str, perm: PermissionRequest, remembered: Sequence[PermissionRule] = ()) -> str:
    """The answer given, and the rules it was remembered as (`REMEMBERED: <id> <decision> <rule> <scope>`)."""
    return reply(
        [
            f"DECISION: {perm.status}",
            f"JOB_ID: {job_id}",
            f"REQUEST_ID: {perm.request_id}",
            f"TOOL: {perm.tool_name}",
            *matched_rule(perm),
            *(f"REMEMBERED: {rule.pk} {rule.decision} {rule.pattern} ({scope_of(rule)})" for rule in remembered),
        ]
    )


def scope_of(rule: PermissionRule) -> str:
    """Where a rule applies, in words: its root, agent, task or agent session, creator."""
    where = [f"root {rule.root}" if rule.root else "everywhere"]
    if rule.task is not None:
        where.append(f"job {rule.task.public_id}")
    if rule.session is not None:
        where.append(f"session {rule.session.session_id}")
    if rule.agent:
        where.append(f"agent {rule.agent}")
    if rule.created_for:
        where.append(f"jobs of {rule.created_for}")
    return ", ".join(where)


# --- questions put to the MCP client's user (jobs/mcp/asking.py) and progress while a tool waits ---------------

QUESTION_INPUT_CHARS = 1000  # of a tool's input, in the question put to the user
PROGRESS_LINE_CHARS = 120  # of the newest output line, or a tool's input, in a progress message
UNANSWERED = {"decline": "declined", "cancel": "dismissed"}  # what the user did with a question, in words


def _shown(text: str, chars: int) -> str:
    """Outsider text as one line (one_line), cut to `chars` characters."""
    text = one_line(text)
    return text if len(text) <= chars else text[:chars] + "…"


def _input_summary(tool_input: dict[str, Any]) -> str:
    """A tool's input in a few words: its first text value (a command, a path), else its JSON."""
    first = next((value for value in tool_input.values() if isinstance(value, str)), None)
    return first if first is not None else json.dumps(tool_input, ensure_ascii=False)


def question(task: Task, perm: PermissionRequest) -> str:
    """What the user is asked: the job, the tool and its input, each line escaped as one_line does and cut."""
    first_line = (task.prompt.strip().splitlines() or [""])[0]
    where = f"Bridge job {task.public_id} ({task.agent} in {task.cwd}) asks to use {perm.tool_name}:"
    lines = [
        _shown(where, QUESTION_INPUT_CHARS),
        _shown(json.dumps(perm.input, ensure_ascii=False), QUESTION_INPUT_CHARS),
        f"Its task: {_shown(first_line, PROGRESS_LINE_CHARS)}",
        "Allow or deny? A denial can carry a message for the agent.",
    ]
    return "\n".join(lines)


def _request(perm: PermissionRequest) -> str:
    return f"permission request {perm.request_id} ({perm.tool_name})"


def answered(perm: PermissionRequest) -> str:
    return f"NOTE: {_request(perm)} was put to the user (elicitation): {perm.status} by {perm.decided_by}."


def question_unanswered(perm: PermissionRequest, outcome: str) -> str:
    """A question the user declined, dismissed or left: the request still waits, for permission_decide."""
    return (
        f"NOTE: {_request(perm)} was put to the user (elicitation) and {UNANSWERED.get(outcome, outcome)}: it is "
        "still pending; answer it with permission_decide."
    )


def answered_meanwhile(perm: PermissionRequest) -> str:
    return (
        f"NOTE: {_request(perm)} was answered elsewhere ({perm.status} by {perm.decided_by or 'Bridge'} via "
        f"{perm.decided_via or 'none'}) while it was put to the user, whose answer does not count."
    )


def answer_refused(perm: PermissionRequest, why: str) -> str:
    return f"NOTE: the user's answer to {_request(perm)} could not be recorded ({why}): it is still pending."


def questions_for_the_next_call(asked: int) -> str:
    return (
        f"NOTE: this call put {asked} questions to the user, as many as one call asks (a client gives up after 10 "
        "rounds): call hermes_status again to be asked the next one."
    )


def progress_message(status: str, since: datetime, pending: Sequence[PermissionRequest], last_line: str) -> str:
    """A progress notification's message: what the job does now, one line."""
    if pending:
        tool, summary = pending[0].tool_name, _input_summary(pending[0].input)
        return f"waiting for a decision: {_shown(tool, PROGRESS_LINE_CHARS)} {_shown(summary, PROGRESS_LINE_CHARS)}"
    if status in TERMINAL_STATUSES:
        return f"ended: {status_word(status)}"
    elapsed = max(0.0, (timezone.now() - since).total_seconds())
    said = f": {_shown(last_line, PROGRESS_LINE_CHARS)}" if last_line else ""
    return f"{status_word(status)} {elapsed:.0f} s{said}"


# --- files ----------------------------------------------------------------------------------------------


def directory(target: Path, entries: Sequence[Path], notes: Sequence[str] = ()) -> str:
    """A directory's entries (sub-directories end in /), files with their size, at most MAX_LISTED_ENTRIES."""
    lines = [f"DIRECTORY: {target}", f"ENTRIES: {len(entries)}", *notes]
    if len(entries) > MAX_LISTED_ENTRIES:
        lines.append(
            f"NOTE: listing the first {MAX_LISTED_ENTRIES}; {len(entries) - MAX_LISTED_ENTRIES} more not listed."
        )
    listed = [_entry(entry) for entry in entries[:MAX_LISTED_ENTRIES]]
    return reply(lines, framed("--- ENTRIES ---", listed, "(empty directory)"))


def _entry(entry: Path) -> str:
    if entry.is_dir():
        return f"{entry.name}/"
    return f"{entry.name}  {entry.stat().st_size if entry.exists() else '?'} bytes"


def not_a_file(target: Path, notes: Sequence[str] = ()) -> str:
    return reply([f"PATH: {target}", *notes, "Not a regular file or directory (a device, socket or pipe); not read."])


def file(target: Path, size: int, head: bytes, kind: str, notes: Sequence[str] = ()) -> str:
    """A file's first bytes as text, or a short description when they look binary (a NUL early on)."""
    lines = [f"FILE: {target}", f"SIZE: {size} bytes", *notes]
    if b"\0" in head[:8192]:
        return reply([*lines, f"BINARY: yes ({kind}); not shown. First bytes: {head[:32].hex()}"])
    if size > len(head):
        lines.append(f"NOTE: truncated: showed {len(head)} of {size} bytes; raise max_bytes to see more.")
    content = text_lines(head.decode("utf-8", errors="replace"))
    return reply(lines, framed("--- CONTENT ---", content, "(empty file)"))


# --- Hermes' library and health -------------------------------------------------------------------------


def categories(library: SkillLibrary, limit: int) -> str:
    """The overview a planner starts from: each category with its skill count and description."""
    counts: dict[str, int] = {}
    for skill in library.skills:
        counts[skill.category] = counts.get(skill.category, 0) + 1
    lines = [f"# problem: {p}" for p in library.problems]
    lines.append(f"CATEGORIES: {len(library.categories)}  SKILLS: {len(library.skills)}")
    lines.append("Narrow down with hermes_capabilities(query=…, category=…).")
    listed = [
        f"{name} ({counts.get(name, 0)} skills): {' '.join(library.categories[name].split())}"
        for name in sorted(library.categories)[:limit]
    ]
    return reply(lines, framed("--- CATEGORIES ---", listed, "(none)"))


def skill_matches(library: SkillLibrary, found: Sequence[Skill], limit: int) -> str:
    """The skills found, in a block: their names, descriptions and tags are whatever the skill files say."""
    lines = [f"# problem: {p}" for p in library.problems]
    lines.append(f"MATCHES: {len(found)}" + (f" (showing {limit})" if len(found) > limit else ""))
    listed = [
        f"{skill.name} ({skill.category}): {skill.description}"
        + (f" [tags: {', '.join(skill.tags)}]" if skill.tags else "")
        for skill in found[:limit]
    ]
    return reply(lines, framed("--- SKILLS ---", listed, "(none)"))


def hermes_missing() -> str:
    """Why Hermes cannot run and how to fix it; follows "Hermes is" or "HERMES:"."""
    return (
        f"not installed: BRIDGE_HERMES_BIN={settings.BRIDGE_HERMES_BIN!r} was not found "
        "(install hermes-agent, or set BRIDGE_HERMES_BIN to its executable)"
    )


def health(ok: bool, hermes_lines: Sequence[str], state: SystemState) -> str:
    workers = ", ".join(f"alive ({_worker(w)})" for w in state.workers) or "none alive"
    lines = ["STATUS: " + ("ok" if ok else "error"), *hermes_lines]
    lines += [f"DATABASE: {state.database}", f"SUPERVISOR: {workers}", jobs_line(state.counts)]
    return reply(lines)


def _worker(worker: Worker) -> str:
    """A supervisor as a planner targets it: its name, host and labels (each one a valid `target`)."""
    labels = f", labels {' '.join(worker.labels)}" if worker.labels else ""
    return f"{worker.name}, host {worker.host}, pid {worker.pid}{labels}"


def hermes_found(executable: Path, version: str | None, acp: bool) -> list[str]:
    return [
        f"HERMES: {executable}",
        f"HERMES_VERSION: {version or 'unknown (no hermes-agent package metadata found)'}",
        f"HERMES_MODE: {settings.BRIDGE_HERMES_MODE} "
        + ("(ACP extra installed)" if acp else "(no ACP extra: one-shot only)"),
    ]


def executor_readiness(status: ExecutorStatus) -> list[str]:
    """Whether an executor can run, and each problem with its fix (jobs/agents/executors.py)."""
    name = status.agent.upper().replace("-", "_")
    lines = (
        []
        if status.agent == "hermes"
        else [f"{name}: {status.path or 'not found'} ({status.version or 'version unknown'})"]
    )
    lines.append(f"{name}_READY: {status.ready}" + (f" ({status.detail})" if status.detail else ""))
    lines += [f"{name}_PROBLEM: {p.what}. Fix: {p.fix}" for p in status.problems]
    return lines + [f"{name}_NOTE: {note}" for note in status.notes]


def agents_line(names: list[str]) -> str:
    return f"AGENTS: {', '.join(names)} (agent_run and agent_resume take any of them by name)"


# --- the supervisor -------------------------------------------------------------------------------------


def supervisor_starting(pid: int) -> str:
    return f"NOTE: the supervisor this MCP server started (pid {pid}) is starting up."


def no_supervisor() -> str:
    return (
        "NOTE: no supervisor is running, so the job stays queued until one starts "
        f"(`{manage_command('supervise')}`, or `{manage_command('runbridge')}`)."
    )


def supervisor_started(pid: int, log_path: Path) -> str:
    return (
        f"NOTE: no supervisor was running, so this MCP server started one (pid {pid}, "
        f"log {log_path}); it keeps running after this server exits."
    )


# --- errors and notes -----------------------------------------------------------------------------------


def error(message: str, code: ErrorCode, *, refused: bool = False, files: Sequence[str] = ()) -> str:
    """Every failed tool's reply: the status word, the message for people, the stable code for programs, and the
    files it concerns (a merge's conflicts), one `FILE:` line each."""
    lines = [f"STATUS: {'refused' if refused else 'error'}", f"ERROR: {message}", f"CODE: {code}"]
    return reply([*lines, *(f"FILE: {name}" for name in files)])


def unknown_job(job_id: str) -> str:
    """A job id no job has, and where MCP lists the real ones (not REST's list, which a planner here cannot reach)."""
    shown = job_id if len(job_id) <= SHOWN_ID_CHARS else f"{job_id[:SHOWN_ID_CHARS]}… ({len(job_id)} characters)"
    return (
        f"unknown job_id {shown!r}: hermes_jobs lists the jobs (a job id is the JOB_ID line of a hermes_run, "
        "hermes_resume, claude_run or claude_resume reply)"
    )


def hermes_latest_session(session_id: str, cwd: str) -> str:
    return (
        f"NOTE: Bridge has run no hermes session in {cwd}, so 'latest' is Hermes' own newest session recorded "
        f"there: {session_id}."
    )


def unexpected(tool_name: str, exc: Exception) -> str:
    return f"{tool_name} failed unexpectedly ({type(exc).__name__}: {exc}); the traceback is in Bridge's log."


def at_least_one(name: str, value: int) -> str:
    return f"{name} must be at least 1, not {value}"


def clamped(name: str, given: str, cap: str, setting: str, why: str = "") -> str:
    return f"NOTE: {name}={given} was clamped to {cap} ({setting}){why}."


# --- permission rules ----------------------------------------------------------------------------------------------


def matched_rule(perm: PermissionRequest) -> list[str]:
    """The `RULE:` line of a request a user's rule matched (it decided it, or sent it to a person); none otherwise."""
    rule = perm.rule if perm.rule_id is not None else None
    return [] if rule is None else [f"RULE: {rule.pk} {rule.decision} {rule.pattern}"]


def rule_lines(rule: PermissionRule) -> list[str]:
    """One rule: its id, pattern, decision and scope, who made it, and its end when it has one."""
    lines = [
        f"RULE_ID: {rule.pk}",
        f"RULE: {rule.pattern}",
        f"DECISION: {rule.decision}",
        f"ROOT: {rule.root or '(everywhere)'}",
        f"AGENT: {rule.agent or '(any)'}",
        f"CREATED: {rule.created_at:%Y-%m-%d %H:%M:%S} by {rule.created_by or '(unknown)'}",
    ]
    if rule.message:
        lines.append(f"MESSAGE: {rule.message}")
    if rule.created_for:
        lines.append(f"FOR_JOBS_OF: {rule.created_for}")
    if rule.task is not None:
        lines.append(f"JOB_ID: {rule.task.public_id}")
    if rule.session is not None:
        lines.append(f"SESSION_ID: {rule.session.session_id}")
    if rule.preset:
        lines.append(f"PRESET: {rule.preset}")
    if rule.expires_at is not None:
        lines.append(f"EXPIRES: {rule.expires_at.isoformat()}")
    if rule.removed_at is not None:
        lines.append(f"REMOVED: {rule.removed_at:%Y-%m-%d %H:%M:%S} by {rule.removed_by or '(unknown)'}")
    return lines


def rules(listed: Sequence[PermissionRule]) -> str:
    """The rules that decide now, oldest first, a blank line before each."""
    lines = [f"RULES: {len(listed)}"]
    for rule in listed:
        lines += ["", *rule_lines(rule)]
    return reply(lines)


def rule_added(rule: PermissionRule) -> str:
    return reply(["STATUS: added", *rule_lines(rule)])


def rule_removed(rule: PermissionRule) -> str:
    return reply(["STATUS: removed", *rule_lines(rule)])


def preset_switched(preset: str, root: str, on: bool, changed: Sequence[PermissionRule]) -> str:
    """A preset switched on (the rules made) or off (the rules removed) for a root."""
    lines = [f"PRESET: {preset}", f"ROOT: {root or '(everywhere)'}", f"STATUS: {'on' if on else 'off'}"]
    verb = "RULE_ADDED" if on else "RULE_REMOVED"
    return reply(lines + [f"{verb}: {rule.pk} {rule.decision} {rule.pattern}" for rule in changed])
