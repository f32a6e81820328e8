"""MCP tools for planners (Claude Desktop and other MCP clients): a thin adapter over jobs.actions.

The tools keep the older Hermes MCP bridge's names, arguments and `STATUS: … / JOB_ID: …` replies, and add Claude
Code tasks and permission decisions. The same server answers on stdio (`manage.py mcp`) and over Streamable HTTP
at /mcp (`McpHttpApp`). No tool blocks past its `wait_s`: waiting re-reads the database whenever the doorbell
rings or BRIDGE_POLL_S passes (DESIGN.md principles 1 and 2).
"""

import asyncio
import functools
import json
import logging
import mimetypes
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent

from jobs import actions, auth, doorbell, hermes_skills, paths
from jobs.errors import BridgeError, Refused
from jobs.hermes_skills import acp_installed
from jobs.models import PermissionRequest, Task, TaskEvent
from jobs.vocabulary import Agent, DecidedVia, PermissionStatus, Source, Status

INSTRUCTIONS = """\
Bridge runs coding agents (Hermes Agent, Claude Code) as supervised background jobs and records everything.

How to work with it:
- Give each task everything it needs: a self-contained description, absolute paths, and a definition of done
  (which files must exist, which command must pass). The agent sees nothing of this conversation.
- hermes_run / claude_run start a job and wait a few seconds. "STATUS: running" is NOT a failure and NOT a timeout:
  collect the result with hermes_status(job_id=…, wait_s=…) — it works for every job — and never re-run the task.
  Sending the same task for the same cwd again while it runs returns the same job.
- Continue an agent's conversation with hermes_resume / claude_resume (session_id from an earlier reply, or
  "latest" for the newest session Bridge ran in that cwd).
- Claude jobs may ask permission for tools: permissions_pending lists the questions, permission_decide answers.
- Verify the artifacts yourself with hermes_read (files and directories, without waking an agent).
- Statuses: queued (waiting for a worker), running, ok (finished, exit 0), error (the agent failed; read the
  output and error), timeout (it hit its timeout_s), cancelled (by task_cancel or a shutdown), orphaned (its
  supervisor died; the output so far is kept; nothing is re-run), refused (cwd or path outside the allowed roots;
  nothing was started).
"""

STATUS_WORDS = {
    Status.QUEUED: "queued",
    Status.RUNNING: "running",
    Status.DONE: "ok",
    Status.FAILED: "error",
    Status.CANCELLED: "cancelled",
    Status.TIMEOUT: "timeout",
    Status.ORPHANED: "orphaned",
}
# What counts as the agent's output: Claude's whole text blocks; Hermes' one-shot lines or ACP message fragments.
OUTPUT_KINDS = {Agent.CLAUDE: ("text", "stdout"), Agent.HERMES: ("output", "text_delta", "stdout")}
RUNNING_TAIL_CHARS = 2000
DEFAULT_READ_BYTES = 64 * 1024
MAX_LISTED_ENTRIES = 500
MAX_CAPABILITIES = 500

_root_handlers, _root_level = list(logging.root.handlers), logging.root.level
server = MCPServer("bridge", instructions=INSTRUCTIONS, version="1")
# Building the server configures the root logger (a handler, level INFO); Bridge's logging is Django's LOGGING.
logging.root.handlers[:] = _root_handlers
logging.root.setLevel(_root_level)


class SupervisorStarter:
    """The stdio server starts a detached supervisor when none is alive, so its jobs run and outlive it."""

    def __init__(self) -> None:
        self.enabled = False
        self.process: subprocess.Popen | None = None

    def ensure(self) -> str:
        """Returns a note for the reply when no supervisor was alive, else ''."""
        if actions.live_workers():
            return ""
        if self.process is not None and self.process.poll() is None:
            return f"NOTE: the supervisor this MCP server started (pid {self.process.pid}) is starting up."
        if not self.enabled:
            return (
                "NOTE: no supervisor is running, so the job stays queued until one starts "
                "(`python manage.py supervise`, or `python manage.py runbridge`)."
            )
        log_path = settings.DATA_DIR / "supervisor.log"
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, str(settings.BASE_DIR / "manage.py"), "supervise"],
                cwd=settings.BASE_DIR,
                env=os.environ.copy(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,  # not in Claude Desktop's process group: it outlives this server
            )
        return (
            f"NOTE: no supervisor was running, so this MCP server started one (pid {self.process.pid}, "
            f"log {log_path}); it keeps running after this server exits."
        )


supervisor_starter = SupervisorStarter()


def _in_db(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Run a sync function that uses the ORM off the event loop, on a fresh-enough connection."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        return fn(*args, **kwargs)

    return sync_to_async(wrapped, thread_sensitive=True)


class Failed(Exception):
    """A reply that reports an error; its text is the whole reply."""


def failure(message: str) -> Failed:
    """A `STATUS: error` reply for what the adapter itself checks (ranges the schema cannot say, Hermes missing)."""
    return Failed(f"STATUS: error\nERROR: {message}")


def _error_reply(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def tool(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
    """Register a tool whose refusals and errors come back as `STATUS: refused|error` replies flagged is_error
    (the SDK's own error path would put "Error executing tool …" before the STATUS line)."""

    @functools.wraps(fn)
    async def replying(**arguments: Any) -> str | CallToolResult:
        try:
            return await fn(**arguments)
        except BridgeError as exc:
            return _error_reply(f"STATUS: {'refused' if isinstance(exc, Refused) else 'error'}\nERROR: {exc.message}")
        except Failed as exc:
            return _error_reply(str(exc))

    server.tool()(replying)
    return fn


# --- describing a task ----------------------------------------------------------------------------------


def _elapsed(task: Task) -> float:
    start = task.started_at or task.created_at
    end = task.finished_at or timezone.now()
    return max(0.0, (end - start).total_seconds())


def _output_tail(task: Task, chars: int) -> str:
    """The last `chars` characters the agent said, newest events read first; fragments join without a break."""
    pieces, size = [], 0
    events = TaskEvent.objects.filter(task=task, kind__in=OUTPUT_KINDS[task.agent]).order_by("-seq")
    for kind, data in events.values_list("kind", "data"):
        text = str(data.get("text", ""))
        pieces.append(text if kind == "text_delta" else text + "\n")
        size += len(pieces[-1])
        if size >= chars:
            break
    return "".join(reversed(pieces)).rstrip("\n")[-chars:]


def _capped(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n[output truncated at {cap} of {len(text)} characters (BRIDGE_MCP_OUTPUT_CHARS)]"


def describe(task: Task, notes: Sequence[str] = ()) -> str:
    """The older bridge's reply: header lines, then either a progress notice with a tail or the output."""
    task.refresh_from_db()
    lines = [
        f"STATUS: {STATUS_WORDS[task.status]}",
        f"JOB_ID: {task.public_id}",
        f"AGENT: {task.agent}",
        f"CWD: {task.cwd}",
        f"ELAPSED_S: {_elapsed(task):.1f}",
        f"TIMEOUT_S: {task.timeout_s}",
    ]
    if task.session is not None:
        lines.append(f"SESSION_ID: {task.session.session_id}")
    lines.extend(notes)
    if not task.is_terminal:
        if task.status == Status.QUEUED:
            ahead = Task.objects.filter(status=Status.QUEUED, created_at__lt=task.created_at).count()
            lines.append(f"Queued behind {ahead} other job(s), waiting for a free worker.")
        pending = actions.pending_permissions(task)
        if pending:
            lines.append(
                f"PENDING_PERMISSIONS: {len(pending)} — the agent is waiting: answer with permissions_pending / "
                "permission_decide."
            )
        lines.append(
            f"Still {task.status}. This is NOT a failure and NOT a timeout. Collect the result with "
            f'hermes_status(job_id="{task.public_id}"). Do not re-run the task.'
        )
        tail = _output_tail(task, RUNNING_TAIL_CHARS)
        lines.append(f"--- OUTPUT SO FAR (last {RUNNING_TAIL_CHARS} characters) ---")
        lines.append(tail or "(no output yet)")
        return "\n".join(lines)
    lines.append(f"EXIT_CODE: {task.exit_code if task.exit_code is not None else 'none'}")
    if task.error:
        lines.append(f"ERROR: {task.error}")
    output = task.result or _output_tail(task, settings.BRIDGE_MCP_OUTPUT_CHARS + 1)
    lines.append(f"--- {task.agent.upper()} OUTPUT ---")
    lines.append(_capped(output, settings.BRIDGE_MCP_OUTPUT_CHARS) or "(no output)")
    return "\n".join(lines)


def _wait_bound(wait_s: float) -> tuple[float, list[str]]:
    """wait_s within [0, BRIDGE_MCP_MAX_WAIT_S]: negative is an error, more than the cap is clamped (and said)."""
    if wait_s != wait_s or wait_s < 0:  # NaN or negative
        raise failure(f"wait_s must be a number of seconds >= 0, not {wait_s}")
    cap = settings.BRIDGE_MCP_MAX_WAIT_S
    if wait_s > cap:
        return float(cap), [
            f"NOTE: wait_s={wait_s:g} was clamped to {cap} s (BRIDGE_MCP_MAX_WAIT_S), below the client's 180 s limit."
        ]
    return float(wait_s), []


def _needs_attention(task_pk: int) -> bool:
    task = Task.objects.only("status").get(pk=task_pk)
    return (
        task.is_terminal or PermissionRequest.objects.filter(task_id=task_pk, status=PermissionStatus.PENDING).exists()
    )


async def _wait(task: Task, wait_s: float) -> None:
    """Until the task ends or asks a permission question, or wait_s passes: rings wake it, polls back it up."""
    deadline = time.monotonic() + wait_s
    waiter = doorbell.AsyncWaiter(str(task.public_id))
    try:
        while not await _in_db(_needs_attention)(task.pk):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await waiter.wait(min(settings.BRIDGE_POLL_S, left))
    finally:
        waiter.close()


# --- starting jobs --------------------------------------------------------------------------------------


def _start(spec: actions.TaskSpec) -> tuple[Task, list[str]]:
    task, created = actions.create_or_join_task(spec)
    notes = []
    if not created:
        notes.append(
            f"NOTE: an identical task was already {task.status} in this cwd; this is that job (no second worker "
            "was started)."
        )
    note = supervisor_starter.ensure()
    if note:
        notes.append(note)
    return task, notes


async def _run(spec: actions.TaskSpec, wait_s: float) -> str:
    wait, notes = _wait_bound(wait_s)
    task, start_notes = await _in_db(_start)(spec)
    await _wait(task, wait)
    return await _in_db(describe)(task, notes + start_notes)


def _listify(value: list[str] | str | None) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    return [item.strip() for item in items if item.strip()] or None


def _hermes_missing() -> str:
    return (
        f"Hermes is not installed: BRIDGE_HERMES_BIN={settings.BRIDGE_HERMES_BIN!r} "
        "was not found (install hermes-agent, or set BRIDGE_HERMES_BIN to its executable)."
    )


@tool
async def hermes_run(
    task: str,
    cwd: str | None = None,
    max_turns: int | None = None,
    timeout_s: int | None = None,
    wait_s: float = 5,
    skills: list[str] | str | None = None,
    toolsets: list[str] | str | None = None,
) -> str:
    """Start a Hermes Agent job in cwd (absolute, inside the allowed roots) and wait up to wait_s seconds
    (default 5, at most 150). Returns STATUS/JOB_ID; if still running, collect it later with hermes_status."""
    if hermes_skills.hermes_executable() is None:
        raise failure(_hermes_missing())
    options = dict(max_turns=max_turns, skills=_listify(skills), toolsets=_listify(toolsets))
    spec = actions.TaskSpec(
        prompt=task, cwd=cwd, agent=Agent.HERMES, timeout_s=timeout_s, options=options, source=Source.MCP
    )
    return await _run(spec, wait_s)


@tool
async def hermes_resume(
    session_id: str,
    task: str,
    cwd: str | None = None,
    max_turns: int | None = None,
    timeout_s: int | None = None,
    wait_s: float = 5,
) -> str:
    """Continue a Hermes session with a new task. session_id comes from an earlier reply's SESSION_ID, or is
    "latest" for the newest Hermes session Bridge ran in cwd. A session can only continue in its own cwd."""
    if hermes_skills.hermes_executable() is None:
        raise failure(_hermes_missing())
    return await _resume(Agent.HERMES, session_id, task, cwd, "approve", max_turns, timeout_s, wait_s)


@tool
async def claude_run(
    task: str,
    cwd: str | None = None,
    permission_mode: Literal["approve", "bypass"] = "approve",
    model: str | None = None,
    max_turns: int | None = None,
    allowed_tools: list[str] | None = None,
    timeout_s: int | None = None,
    wait_s: float = 5,
) -> str:
    """Start a Claude Code job in cwd and wait up to wait_s seconds (default 5, at most 150). With
    permission_mode "approve" its tool requests wait for permission_decide; "bypass" allows them all."""
    spec = actions.TaskSpec(
        prompt=task,
        cwd=cwd,
        agent=Agent.CLAUDE,
        permission_mode=permission_mode,
        timeout_s=timeout_s,
        options=dict(model=model, max_turns=max_turns, allowed_tools=allowed_tools),
        source=Source.MCP,
    )
    return await _run(spec, wait_s)


@tool
async def claude_resume(
    session_id: str,
    task: str,
    cwd: str | None = None,
    permission_mode: Literal["approve", "bypass"] = "approve",
    max_turns: int | None = None,
    timeout_s: int | None = None,
    wait_s: float = 5,
) -> str:
    """Continue a Claude Code session (SESSION_ID from an earlier reply, or "latest" for cwd) with a new task."""
    return await _resume(Agent.CLAUDE, session_id, task, cwd, permission_mode, max_turns, timeout_s, wait_s)


async def _resume(
    agent: str,
    session_id: str,
    task: str,
    cwd: str | None,
    permission_mode: str,
    max_turns: int | None,
    timeout_s: int | None,
    wait_s: float,
) -> str:
    resume_id = await _in_db(actions.known_session_id)(agent, session_id, cwd)
    spec = actions.TaskSpec(
        prompt=task,
        cwd=cwd,
        agent=agent,
        permission_mode=permission_mode,
        resume_session_id=resume_id,
        timeout_s=timeout_s,
        options=dict(max_turns=max_turns),
        source=Source.MCP,
    )
    return await _run(spec, wait_s)


# --- following jobs -------------------------------------------------------------------------------------


@tool
async def hermes_status(job_id: str, wait_s: float = 30) -> str:
    """Any job's status and output (Hermes or Claude). Waits up to wait_s seconds (default 30, at most 150)
    for it to finish, returning early when it ends or asks for a permission."""
    wait, notes = _wait_bound(wait_s)
    task = await _in_db(actions.get_task)(job_id)
    await _wait(task, wait)
    return await _in_db(describe)(task, notes)


def _jobs_text(limit: int) -> str:
    counts = actions.queue_counts()
    lines = ["JOBS: " + ", ".join(f"{STATUS_WORDS[Status(s)]}={n}" for s, n in counts.items())]
    for task in Task.objects.order_by("-created_at", "-id")[:limit]:
        first_line = (task.prompt.strip().splitlines() or [""])[0][:80]
        lines.append(
            f"{task.public_id}  {STATUS_WORDS[task.status]:9}  {task.agent:6}  {_elapsed(task):7.1f}s  "
            f"{task.cwd}  {first_line}"
        )
    return "\n".join(lines)


@tool
async def hermes_jobs(limit: int = 20) -> str:
    """The newest jobs (all agents), one line each: JOB_ID, STATUS, agent, elapsed seconds, cwd, task."""
    return await _in_db(_jobs_text)(max(1, min(limit, 200)))


def _cancel(job_id: str, reason: str) -> str:
    task = actions.request_cancel(actions.get_task(job_id), reason=reason or "cancelled by the planner", by="mcp")
    note = [] if task.is_terminal else ["NOTE: cancel requested; the supervisor is stopping the agent."]
    return describe(task, note)


@tool
async def task_cancel(job_id: str, reason: str = "") -> str:
    """Cancel a queued or running job. Its output so far is kept."""
    return await _in_db(_cancel)(job_id, reason)


# --- permissions ----------------------------------------------------------------------------------------


def _pending_text(job_id: str | None) -> str:
    task = actions.get_task(job_id) if job_id else None
    pending = actions.pending_permissions(task)
    if not pending:
        return "PENDING_PERMISSIONS: 0"
    lines = [f"PENDING_PERMISSIONS: {len(pending)}"]
    for perm in pending:
        tool_input = json.dumps(perm.input, ensure_ascii=False)
        if len(tool_input) > 2000:
            tool_input = tool_input[:2000] + "…"
        lines += [
            "",
            f"JOB_ID: {perm.task.public_id}",
            f"REQUEST_ID: {perm.request_id}",
            f"TOOL: {perm.tool_name}",
            f"INPUT: {tool_input}",
        ]
    return "\n".join(lines)


@tool
async def permissions_pending(job_id: str | None = None) -> str:
    """Tool-use requests waiting for an answer (of one job, or all), oldest first."""
    return await _in_db(_pending_text)(job_id)


def _decide(job_id: str, behavior: str, request_id: str | None, message: str, updated_input: dict | None) -> str:
    perm = actions.decide_permission(
        actions.get_task(job_id),
        behavior=behavior,
        request_id=request_id,
        updated_input=updated_input,
        message=message,
        by="mcp",
        via=DecidedVia.MCP,
    )
    return f"DECISION: {perm.status}\nJOB_ID: {job_id}\nREQUEST_ID: {perm.request_id}\nTOOL: {perm.tool_name}"


@tool
async def permission_decide(
    job_id: str,
    behavior: Literal["allow", "deny"],
    request_id: str | None = None,
    message: str = "",
    updated_input: dict[str, Any] | None = None,
) -> str:
    """Answer a job's permission request (the oldest pending one unless request_id is given). "allow" may
    replace the tool's input with updated_input; "deny" tells the agent message."""
    return await _in_db(_decide)(job_id, behavior, request_id, message, updated_input)


# --- reading without an agent ---------------------------------------------------------------------------


def _read_text(path: str, max_bytes: int) -> str:
    target = paths.resolve_readable(path)
    if target.is_dir():
        entries = sorted(target.iterdir(), key=lambda p: p.name)
        lines = [f"DIRECTORY: {target}", f"ENTRIES: {len(entries)}"]
        for entry in entries[:MAX_LISTED_ENTRIES]:
            if entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name}  {entry.stat().st_size if entry.exists() else '?'} bytes")
        if len(entries) > MAX_LISTED_ENTRIES:
            lines.append(f"[{len(entries) - MAX_LISTED_ENTRIES} more entries not listed]")
        return "\n".join(lines)
    if not target.is_file():
        return f"PATH: {target}\nNot a regular file or directory (a device, socket or pipe); not read."
    size = target.stat().st_size
    with open(target, "rb") as f:
        head = f.read(max_bytes)
    kind = mimetypes.guess_type(target.name)[0] or "unknown type"
    if b"\0" in head[:8192]:
        return f"FILE: {target}\nSIZE: {size} bytes\nBINARY: yes ({kind}); not shown. First bytes: {head[:32].hex()}"
    text = head.decode("utf-8", errors="replace")
    lines = [f"FILE: {target}", f"SIZE: {size} bytes", "--- CONTENT ---", text]
    if size > len(head):
        lines.append(f"[truncated: showed {len(head)} of {size} bytes; raise max_bytes to see more]")
    return "\n".join(lines)


@tool
async def hermes_read(path: str, max_bytes: int = DEFAULT_READ_BYTES) -> str:
    """Read a file (text up to max_bytes; binary files are described) or list a directory, without waking an
    agent. path must be absolute and inside the allowed roots (or BRIDGE_READ_ROOTS)."""
    if max_bytes < 1:
        raise failure(f"max_bytes must be at least 1, not {max_bytes}")
    note = ""
    if max_bytes > settings.BRIDGE_READ_MAX_BYTES:
        note = f"\nNOTE: max_bytes={max_bytes} was clamped to {settings.BRIDGE_READ_MAX_BYTES} (BRIDGE_READ_MAX_BYTES)."
        max_bytes = settings.BRIDGE_READ_MAX_BYTES
    try:
        return (await _in_db(_read_text)(path, max_bytes)) + note
    except OSError as exc:
        raise failure(f"cannot read {path!r}: {exc.strerror or exc}") from None


# --- Hermes' library and health -------------------------------------------------------------------------


def _capabilities_text(query: str, category: str, limit: int) -> str:
    library = hermes_skills.read_library()
    lines = [f"# problem: {p}" for p in library.problems]
    if not query and not category:
        counts: dict[str, int] = {}
        for skill in library.skills:
            counts[skill.category] = counts.get(skill.category, 0) + 1
        lines.append(f"CATEGORIES: {len(library.categories)}  SKILLS: {len(library.skills)}")
        for name in sorted(library.categories)[:limit]:
            lines.append(f"{name} ({counts.get(name, 0)} skills): {' '.join(library.categories[name].split())}")
        lines.append("Narrow down with hermes_capabilities(query=…, category=…).")
        return "\n".join(lines)
    found = hermes_skills.search(library, query, category)
    lines.append(f"MATCHES: {len(found)}" + (f" (showing {limit})" if len(found) > limit else ""))
    for skill in found[:limit]:
        tags = f" [tags: {', '.join(skill.tags)}]" if skill.tags else ""
        lines.append(f"{skill.name} ({skill.category}): {skill.description}{tags}")
    return "\n".join(lines)


@tool
async def hermes_capabilities(query: str = "", category: str = "", limit: int = 50) -> str:
    """Hermes' skills, read from disk: no arguments gives the categories; query (words that must all appear)
    and category narrow it down to skills; limit bounds the list. Pass skill names to hermes_run(skills=…)."""
    if limit < 1:
        raise failure(f"limit must be at least 1, not {limit}")
    return await sync_to_async(_capabilities_text)(query, category, min(limit, MAX_CAPABILITIES))


def _health_text() -> str:
    executable = hermes_skills.hermes_executable()
    state = actions.system_state()
    counts, workers, database = state.counts, state.workers, state.database
    lines = ["STATUS: " + ("ok" if executable and database == "ok" else "error")]
    if executable is None:
        lines.append(
            f"HERMES: not installed: BRIDGE_HERMES_BIN={settings.BRIDGE_HERMES_BIN!r} was not found "
            "(install hermes-agent, or set BRIDGE_HERMES_BIN to its executable)"
        )
    else:
        version = hermes_skills.hermes_version(executable) or "unknown (no hermes-agent package metadata found)"
        lines.append(f"HERMES: {executable}")
        lines.append(f"HERMES_VERSION: {version}")
        acp = "ACP extra installed" if acp_installed(str(executable)) else "no ACP extra: one-shot only"
        lines.append(f"HERMES_MODE: {settings.BRIDGE_HERMES_MODE} ({acp})")
    lines.append(f"DATABASE: {database}")
    lines.append(
        "SUPERVISOR: " + (", ".join(f"alive ({w.name}, pid {w.pid})" for w in workers) if workers else "none alive")
    )
    lines.append("JOBS: " + ", ".join(f"{STATUS_WORDS[Status(s)]}={n}" for s, n in counts.items()))
    return "\n".join(lines)


@tool
async def hermes_health() -> str:
    """Instant check: Hermes executable and version, database, live supervisors, jobs by status."""
    text = await _in_db(_health_text)()
    if text.startswith("STATUS: error"):
        raise Failed(text)
    return text


# --- transports -----------------------------------------------------------------------------------------


def serve_stdio() -> None:
    """`manage.py mcp`: stdout is the protocol; this server may start a supervisor, which outlives it."""
    supervisor_starter.enabled = True
    server.run("stdio")


def _transport_security() -> TransportSecuritySettings:
    """DNS-rebinding protection with Django's ALLOWED_HOSTS: /mcp bypasses Django's own Host check."""
    hosts = list(settings.ALLOWED_HOSTS)
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        allowed_hosts=hosts + [f"{host}:*" for host in hosts],
        allowed_origins=[
            f"{scheme}://{host}{port}" for scheme in ("http", "https") for host in hosts for port in ("", ":*")
        ]
        + list(settings.CSRF_TRUSTED_ORIGINS),
    )


def _has_valid_token(headers: list[tuple[bytes, bytes]]) -> bool:
    """A token, exactly as the REST API takes it (no browser sessions: MCP clients are programs)."""
    header = dict((name.lower(), value) for name, value in headers).get(b"authorization", b"").decode("latin-1")
    return (auth.identify(header) or "").startswith("token:")


class McpHttpApp:
    """ASGI: /mcp goes to the MCP server (Bearer token required), everything else to `fallback` (Django).

    Daphne runs no ASGI lifespan, so the SDK's session manager is started by the first request and then kept
    running in a task of its own.
    """

    path = "/mcp"

    def __init__(self, fallback: Callable) -> None:
        self.fallback = fallback
        self.mcp_app = server.streamable_http_app(
            streamable_http_path=self.path, transport_security=_transport_security()
        )
        self._runner: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == self.path or path.startswith(self.path + "/")):
            return await self.fallback(scope, receive, send)
        if not await _in_db(_has_valid_token)(scope.get("headers", [])):
            return await self._unauthorized(send)
        await self._start_session_manager()
        await self.mcp_app(scope, receive, send)

    async def _start_session_manager(self) -> None:
        async with self._lock:
            if self._runner is not None:
                if self._runner.done():
                    self._runner.result()  # raises why it stopped: the SDK cannot start it twice
                return
            started = asyncio.Event()

            async def run() -> None:
                async with server.session_manager.run():
                    started.set()
                    await asyncio.Event().wait()  # until the process ends

            self._runner = asyncio.get_running_loop().create_task(run())
            waiting = asyncio.ensure_future(started.wait())
            await asyncio.wait({self._runner, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if self._runner.done():
                waiting.cancel()
                self._runner.result()  # raises why it could not start

    async def _unauthorized(self, send: Callable) -> None:
        response = auth.unauthorized()
        headers = [(k.lower().encode(), v.encode()) for k, v in response.items()]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": response.content})
