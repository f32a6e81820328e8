"""History from the older tools, imported as ended tasks (`manage.py import_legacy`; README, "Switching from the older
tools"): claude-hermes-bridge's jobs folder (`<id>.json` + `<id>.log`) and its `config.json`, and hbridge's
`~/.hbridge_tasks.jsonl` (one task a line).

Each record is read and checked whole first, then written in one transaction: the task, already ended, with source
`imported` and its old id in `legacy_id` (so `get_task` finds it by either id), and its events (where it came from,
its output, its terminal status event last), so a record is imported whole or not at all. The database holds one task
per old id: a second import adds nothing, whoever runs it at the same time. A record that cannot be read is reported
with the reason and skipped. Nothing imported ever runs: its cwd is kept as text, even outside today's allowed roots.
"""

import codecs
import json
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from jobs.actions.events import append_events, status_event
from jobs.actions.tasks import MAX_LEGACY_ID_CHARS
from jobs.core.errors import BridgeError, InvalidInput, NotFound
from jobs.core.inputs import MAX_INT, MAX_PATH_BYTES
from jobs.core.terminal import first_unsafe
from jobs.core.vocabulary import TOKEN_FIELDS, Agent, Source, Status
from jobs.models import Task, TaskEvent

MCP_ORIGIN = "claude-hermes-bridge"
HBRIDGE_ORIGIN = "hbridge"
# Where the older tools kept their files. hbridge documented its file; claude-hermes-bridge documented none, so these
# are its obvious places (said in the command's help and the README).
DEFAULT_MCP_JOBS = Path("~/.claude-hermes-bridge/jobs")
DEFAULT_MCP_CONFIG = Path("~/.claude-hermes-bridge/config.json")
DEFAULT_HBRIDGE_TASKS = Path("~/.hbridge_tasks.jsonl")

# The older tools' status words, Bridge's for each. A job they last saw queued or running never ended in their
# records: their server stopped first, which is what Bridge calls orphaned.
STATUS_WORDS: dict[str, Status] = {
    **dict.fromkeys(("done", "ok", "success", "succeeded", "completed", "complete", "finished"), Status.DONE),
    **dict.fromkeys(("failed", "error", "errored", "failure"), Status.FAILED),
    **dict.fromkeys(("cancelled", "canceled", "killed", "stopped", "aborted"), Status.CANCELLED),
    **dict.fromkeys(("timeout", "timed_out", "timedout"), Status.TIMEOUT),
    **dict.fromkeys(("orphaned", "running", "queued", "pending", "started", "created"), Status.ORPHANED),
}
# The names a record's fields go by (claude-hermes-bridge's first, then hbridge's and other spellings).
FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "status": ("status", "state"),
    "exit_code": ("exit_code", "exitCode", "returncode"),
    "prompt": ("task", "prompt"),
    "cwd": ("cwd",),
    "result": ("result",),
    "error": ("error",),
    "usage": ("usage",),
    "session_id": ("session_id", "sessionId"),
    "created": ("created_at", "createdAt"),
    "started": ("started_at", "startedAt"),
    "finished": ("finished_at", "finishedAt", "completed_at", "completedAt", "ended_at"),
}
# What each tool's records hold, named in the report (in the tool's own words) when a record lacks it.
EXPECTED = {
    MCP_ORIGIN: {"status": "state", "exit_code": "exit code", "prompt": "task text", "cwd": "cwd"},
    HBRIDGE_ORIGIN: {
        "status": "status",
        "result": "result",
        "exit_code": "exitCode",
        "usage": "usage",
        "prompt": "prompt",
        "finished": "completedAt",
    },
}
# The usage figures a record may carry, by the names Claude Code's result gives them (hbridge passed them on).
USAGE_NAMES = {"total_cost_usd": "cost_usd", "cost_usd": "cost_usd", "num_turns": "num_turns"} | {
    name: name for name in TOKEN_FIELDS
}
USAGE_MAX = dict.fromkeys(TOKEN_FIELDS, 2**63 - 1) | {"num_turns": MAX_INT}  # what each column holds
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL (PostgreSQL refuses it) and lone surrogates (UTF-8 has none)
TIME_WORDS = {"created": "creation time", "started": "start time", "finished": "end time"}
MILLISECONDS_FROM = 10**11  # an epoch number this large counts milliseconds (as seconds it would be the year 5138)
REASON_TAIL_CHARS = 2000  # of a failed job's output, kept in its error (as Bridge's own Hermes runs keep)
EVENT_BATCH = 1000  # events appended at a time (a long log's lines are not all held as events at once)
RECORD_SLACK_BYTES = 1024 * 1024  # in a record besides its result and prompt


@dataclass
class Outcome:
    """What became of one record: where it was, its old id, the task that holds it, and the notes or the reason."""

    where: str
    legacy_id: str = ""
    task_id: str = ""
    notes: list[str] = field(default_factory=list)
    reason: str = ""  # why it was skipped


@dataclass
class ImportReport:
    sources: list[str] = field(default_factory=list)  # what was read, or that nothing was there
    imported: list[Outcome] = field(default_factory=list)
    already_there: list[Outcome] = field(default_factory=list)
    skipped: list[Outcome] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)  # NAME=value lines for Bridge's environment
    settings_notes: list[str] = field(default_factory=list)


@dataclass
class LegacyJob:
    """One record, checked whole and ready to be written."""

    origin: str
    legacy_id: str
    where: str
    agent: str
    prompt: str
    cwd: str
    status: str
    status_word: str | None  # the older tool's own word, None when it recorded none
    exit_code: int | None
    result: str
    error: str
    usage: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime
    output: str  # the transcript's text: claude-hermes-bridge's log, hbridge's result
    session_id: str = ""
    log_bytes: int | None = None  # the whole log's size, when only its start was imported
    notes: list[str] = field(default_factory=list)


# --- the entry point -------------------------------------------------------------------------------------------------


def import_legacy(
    mcp_jobs: Path | None = None, mcp_config: Path | None = None, hbridge_tasks: Path | None = None
) -> ImportReport:
    """Import what the older tools left. With no path given, each tool's default place, where there is one; with
    some, those only, each of which must exist (NotFound, before anything is imported)."""
    given = any(path is not None for path in (mcp_jobs, mcp_config, hbridge_tasks))
    places = [
        (mcp_jobs, DEFAULT_MCP_JOBS, _import_mcp_jobs),
        (hbridge_tasks, DEFAULT_HBRIDGE_TASKS, _import_hbridge_tasks),
        (mcp_config, DEFAULT_MCP_CONFIG, read_mcp_config),
    ]
    chosen = [(path.expanduser(), read) for path, _, read in places if path is not None]
    if not given:
        chosen = [(default.expanduser(), read) for _, default, read in places]
    for path, _ in chosen:
        if given and not path.exists():
            raise NotFound(f"{path} does not exist: name the file or folder the older tool left, or leave it out")
    report = ImportReport()
    for path, read in chosen:
        if not path.exists():
            report.sources.append(f"nothing at {path}")
            continue
        try:
            read(path, report)
        except OSError as exc:
            report.sources.append(f"{path} {_reason(exc)}")
    return report


def _import_mcp_jobs(folder: Path, report: ImportReport) -> None:
    jobs = _job_files(folder)
    report.sources.append(f"{MCP_ORIGIN} jobs: {folder} ({len(jobs)} jobs)")
    for stem, (json_path, log_path) in sorted(jobs.items()):
        where = str(json_path or log_path)
        try:
            job = mcp_job(stem, json_path, log_path, where)
        except (BridgeError, OSError) as exc:
            report.skipped.append(Outcome(where, _shown_id(stem), reason=_reason(exc)))
            continue
        _save(job, report)


def _import_hbridge_tasks(path: Path, report: ImportReport) -> None:
    """hbridge appended a line per ended task and answered with the last one of an id (it loaded the file into a map
    at start), so of valid lines with the same id the last is imported and the earlier ones are reported."""
    jobs: dict[str, LegacyJob] = {}
    lines, file_time = 0, _file_time([path])
    for number, line in _lines(path):
        lines += 1
        where = f"{path} line {number}"
        try:
            job = hbridge_job(line, where, file_time)
        except BridgeError as exc:
            report.skipped.append(Outcome(where, reason=_reason(exc)))
            continue
        earlier = jobs.pop(job.legacy_id, None)
        if earlier is not None:
            reason = f"its id appears again at {job.where}: the last line of an id is imported, as hbridge answered"
            report.skipped.append(Outcome(earlier.where, earlier.legacy_id, reason=reason))
        jobs[job.legacy_id] = job
    report.sources.append(f"{HBRIDGE_ORIGIN} tasks: {path} ({lines} records)")
    for job in jobs.values():
        _save(job, report)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BridgeError):
        return exc.message
    if isinstance(exc, OSError):
        return f"could not be read: {exc.strerror or exc}"
    return str(exc)


# --- writing: one record, one transaction ----------------------------------------------------------------------------


def _save(job: LegacyJob, report: ImportReport) -> None:
    """Write the job unless a task already holds its old id: the same job (already there) or another one (skipped)."""
    outcome = Outcome(job.where, job.legacy_id, notes=job.notes)
    if _sort_existing(job, outcome, report):
        return
    try:
        task = _write(job)
    except DatabaseError as exc:
        if isinstance(exc, IntegrityError) and _sort_existing(job, outcome, report):
            return  # another import wrote it since the look above
        outcome.reason = f"could not be written, and nothing of it was: {exc}"
        report.skipped.append(outcome)
        return
    outcome.task_id = str(task.public_id)
    report.imported.append(outcome)


def _sort_existing(job: LegacyJob, outcome: Outcome, report: ImportReport) -> bool:
    """Put the job in the report if a task already holds its old id; False when none does."""
    found = Task.objects.filter(legacy_id=job.legacy_id).values_list("public_id", "created_by", "prompt").first()
    if found is None:
        return False
    public_id, created_by, prompt = found
    outcome.task_id = str(public_id)
    if created_by == _created_by(job.origin) and prompt == job.prompt:
        report.already_there.append(outcome)
    else:
        came_from = created_by.removeprefix("import:") if created_by.startswith("import:") else "elsewhere"
        outcome.reason = (
            f"task {public_id} (imported from {came_from}) already has the old id {job.legacy_id!r}, and it is "
            "another job: this one was not imported"
        )
        report.skipped.append(outcome)
    return True


def _created_by(origin: str) -> str:
    return f"import:{origin}"


def _write(job: LegacyJob) -> Task:
    """The task, ended, and its events, in one transaction; the events dated when the job ended."""
    with transaction.atomic():
        task = Task.objects.create(
            agent=job.agent,
            prompt=job.prompt,
            cwd=job.cwd,
            status=job.status,
            timeout_s=None,
            started_at=job.started_at,
            finished_at=job.finished_at,
            exit_code=job.exit_code,
            result=job.result,
            error=job.error,
            source=Source.IMPORTED,
            created_by=_created_by(job.origin),
            legacy_id=job.legacy_id,
            **job.usage,
        )
        Task.objects.filter(pk=task.pk).update(created_at=job.created_at)  # auto_now_add set it to now
        batch: list[tuple[str, dict]] = []
        for event in _events(job, task):
            batch.append(event)
            if len(batch) == EVENT_BATCH:
                append_events(task, batch)
                batch = []
        append_events(task, batch)
        TaskEvent.objects.filter(task=task).update(created_at=job.finished_at)
    return task


def _events(job: LegacyJob, task: Task) -> Iterator[tuple[str, dict]]:
    """Where the job came from, its output as the agent's text, and its terminal status event, last."""
    note: dict[str, Any] = {"from": job.origin, "legacy_id": job.legacy_id, "file": _clean(job.where)}
    note["imported_at"] = timezone.now().isoformat()
    if job.session_id:
        note["session_id"] = job.session_id  # the agent's own: `hermes_resume` can continue it
    if job.notes:
        note["notes"] = job.notes
    yield ("imported", note)
    if job.agent == Agent.HERMES:
        yield from _output_lines(job.output)
    elif job.output:
        yield ("text", {"text": job.output})
    if job.log_bytes is not None:
        limit = settings.BRIDGE_MAX_OUTPUT_BYTES
        reason = f"the log is {job.log_bytes} bytes, over BRIDGE_MAX_OUTPUT_BYTES ({limit}): the rest is not imported"
        yield ("truncated", {"reason": reason, "bytes": job.log_bytes})
    yield status_event(task, exit_code=job.exit_code, error=job.error, usage=job.usage, imported=True)


def _output_lines(text: str) -> Iterator[tuple[str, dict]]:
    """One `output` event a line, as Bridge records one-shot Hermes; a line over BRIDGE_MAX_LINE_BYTES is kept cut to
    that, followed by a `truncated` event saying so."""
    limit = settings.BRIDGE_MAX_LINE_BYTES
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        kept, size = _cut(line, limit)
        yield ("output", {"text": kept})
        if size is not None:
            reason = f"an output line of {size} bytes is over BRIDGE_MAX_LINE_BYTES ({limit}): only its start is kept"
            yield ("truncated", {"reason": reason, "bytes": size})


# --- reading claude-hermes-bridge's jobs folder ---------------------------------------------------------------------


def _job_files(folder: Path) -> dict[str, tuple[Path | None, Path | None]]:
    """Each job's `<id>.json` and `<id>.log` (either may be missing), by id; other files are not jobs."""
    found: dict[str, dict[str, Path]] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            stem, dot, suffix = entry.name.rpartition(".")
            if dot and stem and suffix in ("json", "log") and entry.is_file():
                found.setdefault(stem, {})[suffix] = Path(entry.path)
    return {stem: (files.get("json"), files.get("log")) for stem, files in found.items()}


def mcp_job(stem: str, json_path: Path | None, log_path: Path | None, where: str) -> LegacyJob:
    """A claude-hermes-bridge job from its files: the job id is their name, the `.log` its output (and its answer,
    when the `.json` records no result)."""
    legacy_id = _checked_id(stem, "the file name")
    notes: list[str] = []
    raw = _json_object(_read_record(json_path), f"{stem}.json") if json_path else {}
    if json_path is None:
        notes.append(f"no {stem}.json: its state, exit code, task text and cwd are unknown")
    output, log_bytes = read_log(log_path, notes) if log_path else ("", None)
    if log_path is None:
        notes.append(f"no {stem}.log: no output")
    files = [path for path in (json_path, log_path) if path is not None]
    job = _job(MCP_ORIGIN, Agent.HERMES, legacy_id, where, raw, _file_time(files), notes, expected=bool(json_path))
    job.output, job.log_bytes = output, log_bytes
    if not job.result:
        job.result = output.strip()  # as Bridge's one-shot Hermes runs: the answer is what it printed
    job.error = job.error or _default_error(job)
    return job


def read_log(path: Path, notes: list[str]) -> tuple[str, int | None]:
    """The log's text, at most its first BRIDGE_MAX_OUTPUT_BYTES, and its whole size when that is more. Bytes that are
    not UTF-8 are shown as U+FFFD, and so are NULs (no database Bridge runs on stores them), saying so."""
    limit = settings.BRIDGE_MAX_OUTPUT_BYTES
    with path.open("rb") as log:
        size = os.fstat(log.fileno()).st_size
        data = log.read(limit)
    cut = size > len(data)
    try:  # a cut can end inside a character: its start is dropped, not taken for a wrong byte
        text = codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=not cut)
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        notes.append("the log is not all UTF-8: bytes that are not are shown as U+FFFD")
    text = _storable(text, "the log", notes)
    if cut:
        notes.append(f"the log is {size} bytes, over BRIDGE_MAX_OUTPUT_BYTES ({limit}): only its first {limit} bytes")
    return text, size if cut else None


# --- reading hbridge's tasks file ------------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The file's non-blank lines with their numbers; a line over the record limit is given as b"" (nothing of it is
    held), which `hbridge_job` refuses as too large."""
    limit = _record_limit()
    with path.open("rb") as tasks:
        number = 0
        while line := tasks.readline(limit + 1):
            number += 1
            if len(line) > limit:
                while line and not line.endswith(b"\n"):  # the rest of the line, read and dropped
                    line = tasks.readline(limit)
                yield number, b""
            elif line.strip():
                yield number, line


def hbridge_job(line: bytes, where: str, file_time: datetime) -> LegacyJob:
    """An hbridge task from its line: its result is its output."""
    if not line:
        raise _too_large("the line")
    raw = _json_object(line, "the line")
    legacy_id = _checked_id(raw.get("id"), "its id")
    job = _job(HBRIDGE_ORIGIN, Agent.CLAUDE, legacy_id, where, raw, file_time, [], expected=True)
    job.output = job.result
    job.error = job.error or _default_error(job)
    return job


# --- checking a record ----------------------------------------------------------------------------------------------


def _job(
    origin: str,
    agent: str,
    legacy_id: str,
    where: str,
    raw: dict,
    file_time: datetime,
    notes: list[str],
    *,
    expected: bool,
) -> LegacyJob:
    """The job a record describes, every field checked: a field present with a value of the wrong kind makes the whole
    record malformed (InvalidInput); a missing one is noted."""
    if expected:
        missing = [word for name, word in EXPECTED[origin].items() if _value(raw, name) is None]
        if missing:
            notes.append("missing: " + ", ".join(missing))
    exit_code = _exit_code(raw, notes)
    status, word = _status(raw, exit_code, origin, notes)
    created, started, finished = _times(raw, file_time, notes)
    return LegacyJob(
        origin=origin,
        legacy_id=legacy_id,
        where=where,
        agent=agent,
        prompt=_text(raw, "prompt", settings.BRIDGE_MAX_PROMPT_BYTES, notes),
        cwd=_text(raw, "cwd", MAX_PATH_BYTES, notes),  # history: kept as text, never resolved
        status=status,
        status_word=word,
        exit_code=exit_code,
        result=_text(raw, "result", settings.BRIDGE_MAX_OUTPUT_BYTES, notes),
        error=_text(raw, "error", settings.BRIDGE_MAX_OUTPUT_BYTES, notes),
        usage=_usage(raw),
        created_at=created,
        started_at=started,
        finished_at=finished,
        output="",
        session_id=_text(raw, "session_id", MAX_LEGACY_ID_CHARS, notes),
        notes=notes,
    )


def _value(raw: dict, name: str) -> Any:
    """The field's value under the first of its names the record uses; None when it has none (or null)."""
    for key in FIELD_NAMES[name]:
        if raw.get(key) is not None:
            return raw[key]
    return None


def _text(raw: dict, name: str, max_bytes: int, notes: list[str]) -> str:
    value = _value(raw, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _malformed(f"its {name} is a {type(value).__name__}, not text")
    kept, size = _cut(_storable(value, f"its {name}", notes), max_bytes)
    if size is not None:
        notes.append(f"its {name} is {size} bytes: only its first {max_bytes} are kept")
    return kept


def _exit_code(raw: dict, notes: list[str]) -> int | None:
    """A whole number; Windows' unsigned codes (0xC000013A…) become their signed form, as the column holds them."""
    code = _value(raw, "exit_code")
    if code is None:
        return None
    if isinstance(code, bool) or not isinstance(code, int) or not -(2**31) <= code < 2**32:
        raise _malformed(f"its exit code {str(code)[:40]!r} is not a 32-bit whole number")
    if code > MAX_INT:
        notes.append(f"exit code {code} is kept as {code - 2**32}, its signed form")
        code -= 2**32
    return code


def _status(raw: dict, exit_code: int | None, origin: str, notes: list[str]) -> tuple[Status, str | None]:
    """Bridge's status for the record, and the word the older tool used (None when it recorded none). An unknown word
    is kept as failed, never skipped: its output and times are history all the same, and failed claims no success
    that did not happen; the word stays in the task's error and the report."""
    word = _value(raw, "status")
    if word is None:
        return (Status.DONE if exit_code == 0 else Status.FAILED), None
    if not isinstance(word, str):
        raise _malformed(f"its status is a {type(word).__name__}, not a word")
    word = _storable(word.strip(), "its status", notes)[:MAX_LEGACY_ID_CHARS]
    status = STATUS_WORDS.get(word.lower())
    if status is None:
        notes.append(f"status {word!r} is not a word {origin} used: imported as failed")
        return Status.FAILED, word
    if status == Status.ORPHANED and word.lower() != Status.ORPHANED:
        notes.append(f"{origin} last saw it {word!r}: imported as orphaned (its server stopped before the job ended)")
    return status, word


def _default_error(job: LegacyJob) -> str:
    """Why a job that did not end done ended so, in words, when its record says nothing: what the older tool
    recorded, its exit code, and the end of its output."""
    if job.status == Status.DONE:
        return ""
    word = job.status_word
    said = "recorded no state for it" if word is None else f"recorded it as {word!r}"
    if word is not None and word.lower() not in STATUS_WORDS:
        said += ", which Bridge does not know"
    code = f"; exit code {job.exit_code}" if job.exit_code is not None else ""
    tail = job.result.strip()[-REASON_TAIL_CHARS:]
    return f"{job.origin} {said}{code}" + (f": {tail}" if tail else "")


def _usage(raw: dict) -> dict[str, Any]:
    """Cost and token counts by the task's field names; other figures are not Bridge's to keep."""
    usage = _value(raw, "usage")
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise _malformed(f"its usage is a {type(usage).__name__}, not an object")
    kept: dict[str, Any] = {}
    for name, value in usage.items():
        target = USAGE_NAMES.get(name)
        if target is None or value is None:
            continue
        if target == "cost_usd":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise _malformed(f"its usage's {name} {str(value)[:40]!r} is not a cost")
            kept[target] = float(value)
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= USAGE_MAX[target]:
            raise _malformed(f"its usage's {name} {str(value)[:40]!r} is not a count")
        else:
            kept[target] = value
    return kept


def _times(raw: dict, file_time: datetime, notes: list[str]) -> tuple[datetime, datetime | None, datetime]:
    """(created, started, finished): the record's own, else the files' modification time for the end, and the start
    (else the end) for the creation."""
    created, started, finished = (_time(raw, name) for name in ("created", "started", "finished"))
    if finished is None:
        notes.append("no end time: the file's modification time is used")
        finished = file_time
    return created or started or finished, started, finished


def _time(raw: dict, name: str) -> datetime | None:
    """An ISO 8601 time (UTC when it names no zone), or seconds or milliseconds since 1970."""
    value = _value(raw, name)
    if value is None:
        return None
    try:
        if isinstance(value, str):
            when = datetime.fromisoformat(value.strip())
            return when if when.tzinfo else when.replace(tzinfo=UTC)
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = value / 1000 if abs(value) >= MILLISECONDS_FROM else value
            return datetime.fromtimestamp(seconds, tz=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    raise _malformed(f"its {TIME_WORDS[name]} {str(value)[:40]!r} is neither ISO 8601 nor seconds since 1970")


def _checked_id(value: object, what: str) -> str:
    """An old id the task can be found by: text, at most MAX_LEGACY_ID_CHARS, and nothing a terminal acts on."""
    if not isinstance(value, str) or not value.strip():
        raise _malformed(f"{what} is missing or empty")
    if UNSTORABLE.search(value) or value != value.strip() or len(value) > MAX_LEGACY_ID_CHARS:
        raise _malformed(
            f"{what} {_shown_id(value)!r} is not an id Bridge can keep (at most {MAX_LEGACY_ID_CHARS} "
            "characters of text, no spaces at its ends)"
        )
    unsafe = first_unsafe(value)
    if unsafe is not None:
        raise _malformed(f"{what} {_shown_id(value)!r} holds a character a terminal acts on, at {unsafe[0]}")
    return value


def _shown_id(value: object) -> str:
    text = _clean(str(value))
    return text if len(text) <= 60 else text[:60] + "…"


def _json_object(data: bytes, what: str) -> dict:
    try:
        raw = json.loads(data)
    except UnicodeDecodeError:
        raise _malformed(f"{what} is not UTF-8 text") from None
    except ValueError as exc:
        raise _malformed(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise _malformed(f"{what} holds a JSON {type(raw).__name__}, not an object")
    return raw


def _read_record(path: Path) -> bytes:
    limit = _record_limit()
    with path.open("rb") as record:
        data = record.read(limit + 1)
    if len(data) > limit:
        raise _too_large(path.name)
    return data


def _record_limit() -> int:
    """The most one record may take: room for a result of the most output a task keeps (twice: JSON may escape it),
    and a prompt of the longest Bridge takes."""
    return 2 * settings.BRIDGE_MAX_OUTPUT_BYTES + settings.BRIDGE_MAX_PROMPT_BYTES + RECORD_SLACK_BYTES


def _too_large(what: str) -> InvalidInput:
    return _malformed(
        f"{what} is over {_record_limit()} bytes, more than a task keeps (BRIDGE_MAX_OUTPUT_BYTES, "
        "BRIDGE_MAX_PROMPT_BYTES): raise them for the import to take it"
    )


def _malformed(why: str) -> InvalidInput:
    return InvalidInput(f"malformed: {why}")


def _clean(text: str) -> str:
    """`text` with what no database Bridge runs on can store (NUL, lone surrogates) shown as U+FFFD."""
    return UNSTORABLE.sub("\ufffd", text)


def _storable(text: str, what: str, notes: list[str]) -> str:
    """`_clean(text)`, saying so in the notes when it changed anything."""
    kept, count = UNSTORABLE.subn("\ufffd", text)
    if count:
        notes.append(f"{what} held {count} characters no database stores (NUL, lone surrogates): shown as U+FFFD")
    return kept


def _cut(text: str, max_bytes: int) -> tuple[str, int | None]:
    """`text` cut to at most `max_bytes` of UTF-8 (at a character's start), and its whole size when it was cut."""
    if len(text) * 4 <= max_bytes:
        return text, None
    data = text.encode()
    if len(data) <= max_bytes:
        return text, None
    return data[:max_bytes].decode(errors="ignore"), len(data)


def _file_time(paths: list[Path]) -> datetime:
    """When the newest of a record's files was last written."""
    return datetime.fromtimestamp(max(path.stat().st_mtime for path in paths), tz=UTC)


# --- claude-hermes-bridge's config.json: the settings it becomes ---------------------------------------------------

# The older server's settings, the Bridge setting each becomes.
CONFIG_SETTINGS = {
    ("allowed_roots", "allowedRoots"): "BRIDGE_ALLOWED_ROOTS",
    ("default_cwd", "defaultCwd"): "BRIDGE_DEFAULT_CWD",
    ("hermes_path", "hermesPath", "hermes_bin"): "BRIDGE_HERMES_BIN",
    ("hermes_home", "hermesHome"): "HERMES_HOME",
}


def read_mcp_config(path: Path, report: ImportReport) -> None:
    """The settings the older server's config becomes, as NAME=value lines for Bridge's environment (the user keeps
    them: Bridge reads its settings from the environment, never from this file)."""
    report.sources.append(f"{MCP_ORIGIN} config: {path}")
    try:
        config = _json_object(_read_record(path), path.name)
    except (BridgeError, OSError) as exc:
        report.settings_notes.append(f"{path}: {_reason(exc)}; no settings taken from it")
        return
    known = {key for keys in CONFIG_SETTINGS for key in keys}
    for keys, name in CONFIG_SETTINGS.items():
        value = next((config[key] for key in keys if config.get(key) is not None), None)
        if value is None:
            continue
        paths = [value] if isinstance(value, str) else value
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p.strip() for p in paths):
            report.settings_notes.append(f"{keys[0]} is not a path or a list of paths: not carried over")
        elif len(paths) > 1 and name != "BRIDGE_ALLOWED_ROOTS":
            report.settings_notes.append(f"{keys[0]} names more than one path: not carried over")
        else:
            report.settings.append(f"{name}={shlex.quote(os.pathsep.join(p.strip() for p in paths))}")
    others = sorted(str(key) for key in config if key not in known)
    if others:
        report.settings_notes.append("not carried over (Bridge has no such setting): " + ", ".join(others))
