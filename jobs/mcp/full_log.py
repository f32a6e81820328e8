"""A job's whole transcript as a text file the planner can open with hermes_read: the `FULL_LOG:` line.

`DATA_DIR/logs/<job_id>.log` (the folder 0700, the files 0600) is refreshed whenever a task reply is built. Only
events after the last rendered seq are appended, so a refresh costs what is new, not the whole transcript. The first
line is a fixed-width header saying how far the file has been rendered; it is rewritten in place after each append,
and a refresh that was cut short is truncated back to the size the header recorded, so nothing is written twice.
hermes_read may read this folder and nothing else of Bridge's data directory.
"""

import json
import os
import re
import uuid
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from jobs import actions
from jobs.core.errors import NotFound
from jobs.models import Task, TaskEvent

try:
    import fcntl
except ImportError:  # Windows: refreshes of one log by two processes at once are not serialised
    fcntl = None  # type: ignore[assignment]  # the module, or None where the platform has none

BATCH = 500
HEADER = "# BRIDGE FULL LOG {job} through_seq={seq:010d} bytes={size:012d} run={run:<14}\n"
HEADER_RE = re.compile(r"^# BRIDGE FULL LOG (\S+) through_seq=(\d{10}) bytes=(\d{12}) run=(\S+) *\n$")
LOG_NAME = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.log$")
NO_RUN = "-"
# Pieces of one stream, written one after another under a single heading: what the agent thinks or says as it
# streams, and one-shot Hermes' output lines.
RUNS = {"text_delta": "", "thinking_delta": "", "output": "\n", "stdout": "\n"}
# Streamed text was shown and its message has not ended: the whole `text` that ends it repeats it, so is skipped.
TEXT_SHOWN = "text_shown"


def logs_dir() -> Path:
    return (Path(settings.DATA_DIR) / "logs").resolve()


def log_path(task: Task) -> Path:
    return logs_dir() / f"{task.public_id}.log"


def refresh(task: Task) -> Path:
    """Bring the task's log up to its newest event and return its path."""
    directory = logs_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    path = log_path(task)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o600)  # also when it was made by an older Bridge, or copied in
    with os.fdopen(fd, "r+b") as f:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        seq, size, run = _state(f, task)
        f.truncate(size)
        f.seek(size - 1)
        at_line_start = f.read(1) == b"\n"
        while events := actions.events_since(task, seq, BATCH):
            text, run, at_line_start = render(events, run, at_line_start)
            f.write(text.encode())
            seq = events[-1].seq
        size = f.tell()
        f.seek(0)
        f.write(HEADER.format(job=task.public_id, seq=seq, size=size, run=run).encode())
    return path


def _state(f, task: Task) -> tuple[int, int, str]:
    """(last rendered seq, bytes rendered, open run) from the header; a new or unrecognised file starts over."""
    match = HEADER_RE.match(f.readline().decode(errors="replace"))
    if match and match.group(1) == str(task.public_id) and int(match.group(3)) <= os.fstat(f.fileno()).st_size:
        return int(match.group(2)), int(match.group(3)), match.group(4)
    f.seek(0)
    f.truncate()
    f.write(HEADER.format(job=task.public_id, seq=0, size=0, run=NO_RUN).encode())
    f.write(_preamble(task).encode())
    return 0, f.tell(), NO_RUN


def _preamble(task: Task) -> str:
    created = timezone.localtime(task.created_at).isoformat(timespec="seconds")
    return f"JOB_ID: {task.public_id}\nAGENT: {task.agent}\nCWD: {task.cwd}\nCREATED: {created}\nTASK:\n{task.prompt}\n"


# --- rendering -------------------------------------------------------------------------------------------------


def render(events: list[TaskEvent], run: str, at_line_start: bool) -> tuple[str, str, bool]:
    """The text for these events, given the run left open before them and whether the file ends a line; returns
    the text, the run left open after them and whether the text ends a line."""
    out: list[str] = []
    for event in events:
        if event.kind == run:  # the stream goes on under the same heading
            piece = str(event.data.get("text", "")) + RUNS[run]
        elif event.kind == "text" and run in ("text_delta", TEXT_SHOWN):  # already shown as it streamed
            run = NO_RUN
            continue
        else:
            piece = ("" if at_line_start else "\n") + _heading(event) + _body(event)
            text_shown = run in ("text_delta", TEXT_SHOWN)
            run = event.kind if event.kind in RUNS else TEXT_SHOWN if text_shown else NO_RUN
        if piece:
            out.append(piece)
            at_line_start = piece.endswith("\n")
    return "".join(out), run, at_line_start


def _heading(event: TaskEvent) -> str:
    when = timezone.localtime(event.created_at).strftime("%H:%M:%S")
    summary = _summary(event.kind, event.data)
    return f"\n[{when} #{event.seq}] {event.kind}" + (f": {summary}" if summary else "") + "\n"


def _summary(kind: str, data: dict) -> str:
    """The one line after an event's heading."""
    if kind == "status":
        extra = {k: v for k, v in data.items() if k != "status" and v not in (None, "", {}, [])}
        return str(data.get("status", "")) + (" " + _json(extra) if extra else "")
    if kind == "spawned":
        return f"pid {data.get('pid')}: {' '.join(str(a) for a in data.get('argv') or [])}"
    if kind == "tool_use":
        return f"{data.get('name', '')} {_json(data.get('input'))}"
    if kind in ("permission_request", "permission_decision"):
        who = f" by {data.get('decided_by')} via {data.get('decided_via')}" if data.get("decided_by") else ""
        message = f": {data['message']}" if data.get("message") else ""
        tool = f"{data.get('tool_name', '')} {_json(data.get('input'))}"
        head = tool if kind == "permission_request" else str(data.get("status", ""))
        return f"request {data.get('request_id')}: {head}{who}{message}"
    if kind in ("tool_result", "tool_update"):
        return f"{data.get('tool_use_id', '')}" + (" (error)" if data.get("is_error") else "")
    if kind == "history":
        return str(data.get("update", ""))
    if kind in ("text", "thinking", "result", *RUNS):
        return ""
    if kind == "error":
        return str(data.get("message", ""))
    return _json(data)


def _body(event: TaskEvent) -> str:
    """What follows the heading: the event's text, if it has any."""
    data = event.data
    if event.kind in RUNS:
        return str(data.get("text", "")) + RUNS[event.kind]
    if event.kind in ("text", "thinking", "history"):
        text = str(data.get("text", ""))
    elif event.kind in ("tool_result", "tool_update"):
        content = data.get("content")
        text = content if isinstance(content, str) else _json(content)
    elif event.kind == "tool_use":
        text = str(data.get("text") or "")
    elif event.kind == "result":
        text = str(data.get("result") or "")
        rest = {k: v for k, v in data.items() if k != "result"}
        text = (text + "\n" if text else "") + (_json(rest) if rest else "")
    else:
        return ""
    return text + ("" if not text or text.endswith("\n") else "\n")


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


# --- reading ---------------------------------------------------------------------------------------------------


def readable(raw: str) -> Path | None:
    """The logs folder or one job's log, if `raw` names one (hermes_read reads these); else None, and the usual
    rules apply (which keep the rest of Bridge's data directory unreadable)."""
    candidate = Path(str(raw or "").strip()).expanduser()
    if not candidate.is_absolute():
        return None
    resolved, directory = candidate.resolve(), logs_dir()
    if resolved == directory and directory.is_dir():
        return resolved
    if resolved.parent != directory or not LOG_NAME.match(resolved.name):
        return None
    if not resolved.is_file():
        job = resolved.name.removesuffix(".log")
        raise NotFound(f"no full log for job {uuid.UUID(job)} yet: hermes_status(job_id=…) writes it")
    return resolved
