"""The older tools' records as `manage.py import_legacy` reads them (jobs/actions/imports.py), before anything is
written: status words, times, exit codes, ids, logs that are huge or not UTF-8, and the settings a config becomes.
Generated records where a rule covers a class of them; writing them is tests/integration/test_import_legacy.py's."""

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.actions import imports
from jobs.core.errors import InvalidInput
from jobs.core.vocabulary import TERMINAL_STATUSES, Status

FILE_TIME = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
WORDS = sorted(imports.STATUS_WORDS)
UNFINISHED = ["running", "queued", "pending", "started", "created"]
# JSON values of every kind, for fields that must hold one kind only
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)


def hbridge(**fields) -> imports.LegacyJob:
    return imports.hbridge_job(json.dumps({"id": "task_1", **fields}).encode(), "tasks.jsonl line 1", FILE_TIME)


@given(word=st.sampled_from(WORDS), case=st.sampled_from([str.lower, str.upper, str.title]))
def test_every_word_of_the_older_tools_becomes_an_ended_status(word, case):
    """Whatever the case: `OK` is `ok`. An imported task is history, so it is never queued or running."""
    job = hbridge(status=f" {case(word)} ", exitCode=0)
    assert job.status == imports.STATUS_WORDS[word] and job.status in TERMINAL_STATUSES


@given(word=st.text(min_size=1, max_size=30).filter(lambda w: w.strip().lower() not in imports.STATUS_WORDS))
def test_an_unknown_status_word_is_imported_as_failed_keeping_the_word(word):
    job = hbridge(status=word, exitCode=0)
    shown = repr(imports._clean(word.strip()))
    assert job.status == Status.FAILED
    assert f"recorded it as {shown}, which Bridge does not know" in job.error
    assert any(shown in note and "imported as failed" in note for note in job.notes)


@pytest.mark.parametrize("word", UNFINISHED)
def test_a_job_the_older_tool_last_saw_unfinished_is_imported_orphaned(word):
    job = hbridge(status=word)
    assert job.status == Status.ORPHANED
    assert job.error == f"hbridge recorded it as {word!r}"


@pytest.mark.parametrize(("exit_code", "status"), [(0, Status.DONE), (1, Status.FAILED), (None, Status.FAILED)])
def test_with_no_status_word_the_exit_code_decides(exit_code, status):
    job = hbridge(exitCode=exit_code, result="the end")
    assert job.status == status and "missing: status" in job.notes[0]
    if status == Status.FAILED:
        assert job.error.startswith("hbridge recorded no state for it") and job.error.endswith(": the end")


@given(code=st.integers(min_value=2**31, max_value=2**32 - 1))
def test_a_windows_exit_code_is_kept_in_its_signed_form(code):
    """Windows reports NTSTATUS codes unsigned (0xC000013A = 3221225786): the column holds 32 signed bits."""
    job = hbridge(status="error", exitCode=code)
    assert job.exit_code == code - 2**32 and f"exit code {code} is kept as {code - 2**32}" in " ".join(job.notes)


@given(
    # from March 1973 on, as milliseconds, the number is too large to be seconds before the year 5138
    when=st.datetimes(min_value=datetime(1973, 3, 4), max_value=datetime(5000, 1, 1), timezones=st.just(UTC)),
    form=st.sampled_from(["iso", "naive_iso", "seconds", "milliseconds"]),
)
def test_times_are_read_as_iso_8601_or_seconds_or_milliseconds_since_1970(when, form):
    value = {
        "iso": when.isoformat(),
        "naive_iso": when.replace(tzinfo=None).isoformat(),  # a time without a zone is read as UTC
        "seconds": when.timestamp(),
        "milliseconds": when.timestamp() * 1000,
    }[form]
    job = hbridge(status="done", completedAt=value)
    assert abs(job.finished_at - when) < timedelta(milliseconds=1)
    assert job.created_at == job.finished_at  # hbridge kept one time: the task's end


def test_without_times_the_files_modification_time_is_the_end():
    job = hbridge(status="done")
    assert job.finished_at == job.created_at == FILE_TIME and job.started_at is None
    assert any("modification time" in note for note in job.notes)


@given(
    field=st.sampled_from(["status", "result", "exitCode", "usage", "prompt", "completedAt", "cwd", "error"]),
    value=JSON_VALUES,
)
def test_a_field_holding_the_wrong_kind_of_value_makes_the_record_malformed(field, value):
    """Each field takes one kind of value (null: absent); anything else refuses the whole record, naming why."""
    takes = {
        "status": str,
        "result": str,
        "prompt": str,
        "cwd": str,
        "error": str,
        "exitCode": int,
        "usage": dict,
        "completedAt": (str, int, float),
    }[field]
    fits = value is None or (isinstance(value, takes) and not isinstance(value, bool))
    if field == "completedAt" and fits and value is not None:
        fits = not isinstance(value, str) or _iso(value)
        fits = fits and (isinstance(value, str) or abs(value) < 2e14)  # a time Python can hold
    if field == "exitCode" and fits and value is not None:
        fits = -(2**31) <= value < 2**32
    if field == "usage" and fits and value:
        fits = all(v is None or k not in imports.USAGE_NAMES for k, v in value.items())  # figures are checked apart
    if fits:
        hbridge(**{field: value})
    else:
        with pytest.raises(InvalidInput, match="^malformed: "):
            hbridge(**{field: value})


def _iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text.strip())
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("usage", "kept"),
    [
        ({"total_cost_usd": 0.25, "input_tokens": 10, "output_tokens": 3}, None),
        ({"input_tokens": -1}, "not a count"),
        ({"output_tokens": 1.5}, "not a count"),
        ({"total_cost_usd": "free"}, "not a cost"),
        ({"num_turns": 2**31}, "not a count"),
    ],
)
def test_usage_figures_are_counts_and_a_cost(usage, kept):
    if kept is None:
        assert hbridge(usage=usage).usage == {"cost_usd": 0.25, "input_tokens": 10, "output_tokens": 3}
    else:
        with pytest.raises(InvalidInput, match=kept):
            hbridge(usage=usage)


@pytest.mark.parametrize(
    "line",
    [b"{bad json", b"[1, 2]", b'"a string"', b'{"id": 7}', b'{"prompt": "no id"}', b'{"id": "caf\xe9"}', b""],
)
def test_a_line_that_is_not_a_record_is_malformed(line):
    with pytest.raises(InvalidInput, match="^malformed: "):
        imports.hbridge_job(line, "tasks.jsonl line 1", FILE_TIME)


@pytest.mark.parametrize(
    "old_id", ["", "  ", " padded", "a\x1b[2Jb", "bidi\u202e", "nul\x00", "x" * (imports.MAX_LEGACY_ID_CHARS + 1)]
)
def test_an_old_id_bridge_could_not_keep_or_show_is_refused(old_id):
    with pytest.raises(InvalidInput, match="^malformed: its id"):
        imports.hbridge_job(json.dumps({"id": old_id}).encode(), "tasks.jsonl line 1", FILE_TIME)


@given(text=st.text(max_size=20))
def test_text_no_database_stores_is_shown_as_replacement_characters_and_noted(text):
    """NUL (PostgreSQL refuses it) and lone surrogates (UTF-8 has none) can arrive in JSON; the rest is kept as is."""
    job = hbridge(status="done", prompt=f"say {text}\x00 \ud800")
    assert job.prompt == f"say {imports._clean(text)}\ufffd \ufffd"
    assert any("its prompt held" in note and "U+FFFD" in note for note in job.notes)


def test_a_log_over_the_output_limit_is_read_up_to_the_limit_and_says_so(tmp_path, settings):
    settings.BRIDGE_MAX_OUTPUT_BYTES = 4096
    log = tmp_path / "job.log"
    log.write_bytes(b"line of output\n" * 1000)
    notes: list[str] = []
    text, size = imports.read_log(log, notes)
    assert len(text.encode()) <= 4096 and text.startswith("line of output\n")
    assert size == 15_000 and "over BRIDGE_MAX_OUTPUT_BYTES (4096)" in notes[0]


@pytest.mark.parametrize("cut_at", [1, 2, 3])
def test_a_log_cut_inside_a_character_is_not_taken_for_bad_bytes(cut_at, tmp_path, settings):
    settings.BRIDGE_MAX_OUTPUT_BYTES = 1024 - cut_at
    log = tmp_path / "job.log"
    log.write_text("€" * 400)  # 3 bytes each: a cut at 1021, 1022 or 1023 falls inside one
    notes: list[str] = []
    text, _ = imports.read_log(log, notes)
    assert set(text) == {"€"} and not any("UTF-8" in note for note in notes)


@given(data=st.binary(max_size=200))
def test_log_bytes_that_are_not_utf8_are_shown_as_replacement_characters_and_noted(data, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "job.log"
    log.write_bytes(data)
    notes: list[str] = []
    text, _ = imports.read_log(log, notes)
    try:
        expected = data.decode()
    except UnicodeDecodeError:
        expected = data.decode(errors="replace")
        assert "the log is not all UTF-8: bytes that are not are shown as U+FFFD" in notes
    assert text == imports._clean(expected)


def test_a_job_with_a_log_and_no_json_is_kept_saying_what_is_unknown(tmp_path):
    log = tmp_path / "j1.log"
    log.write_text("answer\n")
    job = imports.mcp_job("j1", None, log, str(log))
    assert (job.status, job.result, job.prompt, job.cwd) == (Status.FAILED, "answer", "", "")
    assert job.error == "claude-hermes-bridge recorded no state for it: answer"
    assert "no j1.json: its state, exit code, task text and cwd are unknown" in job.notes


def test_a_job_with_a_json_and_no_log_is_kept_with_no_output(tmp_path):
    record = tmp_path / "j2.json"
    record.write_text(json.dumps({"status": "ok", "exit_code": 0, "task": "hi"}))
    job = imports.mcp_job("j2", record, None, str(record))
    assert (job.status, job.output, job.result) == (Status.DONE, "", "")
    assert "no j2.log: no output" in job.notes and "missing: cwd" in job.notes


def test_a_cwd_outside_the_allowed_roots_is_kept_as_text(tmp_path, settings):
    settings.BRIDGE_ALLOWED_ROOTS = [tmp_path]
    record = tmp_path / "j3.json"
    record.write_text(json.dumps({"status": "ok", "cwd": "C:\\Users\\me\\project", "task": "hi"}))
    assert imports.mcp_job("j3", record, None, str(record)).cwd == "C:\\Users\\me\\project"


def test_a_config_becomes_bridge_settings_and_names_what_it_cannot_carry_over(tmp_path):
    config = tmp_path / "config.json"
    roots = ["/srv/one", "/srv/two words"]
    hermes = {"hermes_path": "/opt/hermes/bin/hermes", "hermes_home": ["/a", "/b"]}
    config.write_text(json.dumps({"allowed_roots": roots, "defaultCwd": "/srv/one", **hermes, "port": 8123}))
    report = imports.ImportReport()
    imports.read_mcp_config(config, report)
    assert report.settings == [
        f"BRIDGE_ALLOWED_ROOTS='{os.pathsep.join(roots)}'",
        "BRIDGE_DEFAULT_CWD=/srv/one",
        "BRIDGE_HERMES_BIN=/opt/hermes/bin/hermes",
    ]
    assert report.settings_notes == [
        "hermes_home names more than one path: not carried over",
        "not carried over (Bridge has no such setting): port",
    ]


def test_a_config_that_is_not_json_gives_no_settings_and_says_why(tmp_path):
    config = Path(tmp_path / "config.json")
    config.write_text("{'single': 'quotes'}")
    report = imports.ImportReport()
    imports.read_mcp_config(config, report)
    assert report.settings == [] and "is not valid JSON" in report.settings_notes[0]
