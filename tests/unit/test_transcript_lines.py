"""A task's raw transcript, line by line, before and after the database: what the stdout reader keeps of a line over
BRIDGE_MAX_LINE_BYTES, how a run holds lines while the disk is full (`Recorder.shed`), and how a row is shown
(`actions.line_data`). Generated lines and streams; an unsaved task, no database."""

import base64
import io
import itertools
import json
import queue
import zlib

import pytest
from django.db import OperationalError
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from jobs import actions
from jobs.actions.transcripts import RUN_BYTES, CutLine, Entry, Omitted, as_text, stored_rows
from jobs.core import resilience
from jobs.core.resilience import Outage
from jobs.models import Task, TaskLine
from jobs.supervision.recording import OUTPUT_ENDED, LineReader, Oversized, Recorder, cut_line
from jobs.web.watching import ndjson

FULL_BYTES = 4096
# a line of any bytes but a newline
LINES = st.binary(max_size=300).map(lambda line: line.replace(b"\n", b""))
TEXT_LINES = st.text(max_size=100).map(lambda text: text.replace("\n", "").encode())
BREAKS = [character.encode() for character in ("\u2028", "\u2029", "\x85", "\r", "\x0b")]  # lines, to some readers


def read_lines(data: bytes, max_bytes: int) -> list[bytes | Oversized]:
    inbox: queue.Queue = queue.Queue()
    LineReader(io.BytesIO(data), inbox, max_bytes).run()
    items = [inbox.get_nowait() for _ in range(inbox.qsize())]
    assert items[-1] is OUTPUT_ENDED
    return [line for item in items[:-1] for line in item.lines]


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=6), st.sampled_from([1024, 1999, 2000, 4096]))
def test_a_line_over_the_cap_keeps_its_first_cap_bytes_for_the_transcript(lengths, max_bytes):
    texts = [bytes(97 + (i + n) % 26 for i in range(n)) for n in lengths]
    lines = read_lines(b"\n".join(texts) + b"\n", max_bytes)
    assert [line.kept if isinstance(line, Oversized) else None for line in lines] == [
        text[:max_bytes] if len(text) > max_bytes else None for text in texts
    ]


def test_a_line_over_the_cap_is_kept_cut_saying_so_with_its_whole_size(settings):
    settings.BRIDGE_MAX_LINE_BYTES = 2048
    kept = cut_line(Oversized(b"x" * 10, 5001, b"x" * 2048))
    assert (kept.text, kept.size) == (b"x" * 2048, 5001)
    assert "BRIDGE_MAX_LINE_BYTES (2048)" in kept.note and "5001 bytes" in kept.note


def entry(text: bytes, kind: str) -> Entry:
    if kind == "cut":
        return CutLine(text, len(text) + 100, "cut")
    if kind == "omitted":
        return Omitted(3, 300, "not kept")
    return text + b"\n"


def shown(entry: Entry) -> dict:
    """What the API must show for `entry` (numbered later)."""
    if isinstance(entry, Omitted):
        return {"omitted": entry.note, "lines": entry.lines, "bytes": entry.size}
    if isinstance(entry, CutLine):  # its text as a cut line's (the next test): here, where it goes and what it says
        text, exact = as_text(entry.text, cut=True)
        raw = {} if exact else {"base64": base64.b64encode(entry.text).decode()}
        return {"line": text, **raw, "cut": entry.note, "bytes": entry.size}
    try:
        return {"line": entry[:-1].decode("utf-8")}
    except UnicodeDecodeError:
        return {"line": entry[:-1].decode("utf-8", errors="replace"), "base64": base64.b64encode(entry[:-1]).decode()}


ENTRIES = st.lists(st.tuples(LINES | TEXT_LINES, st.sampled_from(["whole"] * 6 + ["cut", "omitted"])), max_size=40)


@given(ENTRIES.map(lambda drawn: [entry(text, kind) for text, kind in drawn]), st.integers(1, 50), st.data())
def test_the_rows_a_run_stores_give_back_each_entry_numbered_without_a_gap(entries, first, data):
    stored = [
        TaskLine(n=n, last=last, data=raw, size=size, omitted=omitted, note=note)
        for n, last, raw, size, omitted, note in stored_rows(first, entries)
    ]
    after = data.draw(st.integers(first - 1, first + len(entries)), label="after")
    assert [row for stored_row in stored for row in actions.line_data(stored_row, after)] == [
        {"n": n} | shown(entry) for n, entry in enumerate(entries, start=first) if n > after
    ]


def test_whole_lines_share_a_row_up_to_its_size():
    lines = [b"x" * 1000 + b"\n"] * 600
    stored = stored_rows(1, lines)
    held = [zlib.decompress(data) for _, _, data, _, _, _ in stored]
    assert [(first, last) for first, last, *_ in stored] == [(1, 261), (262, 522), (523, 600)]
    assert all(len(raw) <= RUN_BYTES for raw in held)
    assert b"".join(held) == b"".join(lines), "the rows hold the lines as written"


@given(st.lists(LINES | TEXT_LINES | st.sampled_from(BREAKS), min_size=1))
def test_each_entry_is_one_line_of_ascii_json_whatever_the_agent_wrote(lines):
    entries = actions.line_data(
        TaskLine(n=1, last=len(lines), data=zlib.compress(b"".join(line + b"\n" for line in lines)))
    )
    body = ndjson(entries)
    assert body.isascii() and [json.loads(line) for line in body.decode().splitlines()] == entries


@given(st.text(max_size=50), st.integers(1, 2))
def test_a_cut_line_ending_inside_a_character_shows_the_whole_characters_before_it(text, cut_off):
    raw = (text + "€").encode()[:-cut_off]  # the euro sign is three bytes: one or two of them are left
    [shown_entry] = actions.line_data(TaskLine(n=1, last=1, data=zlib.compress(raw), size=9999, note="cut"))
    assert shown_entry == {"n": 1, "line": text, "cut": "cut", "bytes": 9999}


# --- while the disk is full (Recorder.shed) -------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _bounds(monkeypatch):
    monkeypatch.setattr(resilience, "_full_seen_at", None)
    with override_settings(BRIDGE_DB_FULL_BUFFER_BYTES=FULL_BYTES, BRIDGE_DB_BUFFER_BYTES=64 * 1024 * 1024):
        yield


def held_lines(rec: Recorder) -> list[Entry]:
    return [line for write in rec.writes if write.kind == "events" for line in write.lines]


@given(st.lists(st.integers(0, 900), min_size=1, max_size=60))
def test_lines_held_while_the_disk_is_full_are_cut_to_the_bound_oldest_first_and_every_one_dropped_counted(sizes):
    rec = Recorder(Task(prompt="flood", cwd="/nowhere"), on_recorded=lambda perm: None)
    rec.outage = Outage("unit", clock=itertools.count(0, 100).__next__)
    written = [bytes([65 + n % 26]) * size + b"\n" for n, size in enumerate(sizes)]
    for line in written:
        rec.add_line(line)
        rec.add_events([("output", {"text": "x"})], len(line))

    def full() -> None:
        raise OperationalError("database or disk is full")

    assert not rec.attempt(full)
    held = held_lines(rec)
    kept = [line for line in held if isinstance(line, bytes)]
    notes = [line for line in held if isinstance(line, Omitted)]
    assert kept == written[: len(kept)], "the oldest are kept, in order"
    assert sum(len(text) for text in kept) <= FULL_BYTES and rec.held_bytes <= FULL_BYTES
    assert sum(note.lines for note in notes) == len(written) - len(kept)
    assert all("BRIDGE_DB_FULL_BUFFER_BYTES" in note.note for note in notes)
    assert held[len(kept) :] == notes, "the note stands after the lines kept"
