"""While the disk that holds the database is full, a run holds at most BRIDGE_DB_FULL_BUFFER_BYTES of its output
(jobs/supervision/recording.py, `Recorder.shed`): what it held past that is dropped, the oldest kept, every event a
run must keep kept, and what went counted in a `truncated` note that says why; each try of the end that still finds
the disk full halves the bound (`narrow`). Generated runs of output, a fake clock, an unsaved task: no database."""

import itertools

import pytest
from django.db import OperationalError
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from jobs import actions
from jobs.core import resilience
from jobs.core.resilience import Outage
from jobs.models import Task
from jobs.supervision.recording import KEPT_WHILE_AWAY, Recorder

FULL_BYTES = 256 * 1024
BUFFER_BYTES = 64 * 1024 * 1024
DROPPABLE = ["text", "text_delta", "tool_use", "tool_result", "usage", "thinking"]
KEPT = sorted(KEPT_WHILE_AWAY - {"truncated"})
FULL = OperationalError("database or disk is full")

# (kind, bytes of output): mostly the agent's own output, now and then an event a run must keep
outputs = st.lists(st.tuples(st.sampled_from(DROPPABLE * 4 + KEPT), st.integers(1, 200_000)), min_size=1, max_size=120)


@pytest.fixture(autouse=True)
def _bounds(monkeypatch):
    """Small bounds, and what these tests make this process see of full disks forgotten after each."""
    monkeypatch.setattr(resilience, "_full_seen_at", None)
    with override_settings(BRIDGE_DB_FULL_BUFFER_BYTES=FULL_BYTES, BRIDGE_DB_BUFFER_BYTES=BUFFER_BYTES):
        yield


def recorder(output: list[tuple[str, int]]) -> Recorder:
    """A run's recorder holding `output` (event n is the n-th of it), with a clock past every backoff each time it is
    read."""
    rec = Recorder(Task(prompt="flood", cwd="/nowhere"), on_recorded=lambda perm: None)
    rec.outage = Outage("unit", clock=itertools.count(0, 100).__next__)
    for n, (kind, size) in enumerate(output):
        rec.add_events([(kind, {"n": n})], size)
    return rec


def disk_full(rec: Recorder) -> None:
    """A try to write finds the disk full."""

    def write() -> None:
        raise FULL

    assert not rec.attempt(write)
    assert rec.outage.full


def held(rec: Recorder) -> list[tuple[str, dict, int]]:
    """What the recorder holds now: each event with the bytes of output it stands for."""
    return [
        (kind, data, size)
        for write in rec.writes
        if write.kind == "events"
        for (kind, data), size in zip(write.payload, write.sizes, strict=True)
    ]


def droppable_bytes(rec: Recorder) -> int:
    return sum(size for kind, _, size in held(rec) if kind not in KEPT_WHILE_AWAY)


def notes(rec: Recorder) -> list[dict]:
    return [data for kind, data, _ in held(rec) if kind == "truncated"]


@given(outputs)
def test_output_held_while_the_disk_is_full_is_cut_to_the_bound(output):
    rec = recorder(output)
    disk_full(rec)
    assert droppable_bytes(rec) <= FULL_BYTES
    assert rec.held_bytes == sum(size for _, _, size in held(rec))


@given(outputs)
def test_the_oldest_output_is_what_is_kept(output):
    rec = recorder(output)
    disk_full(rec)
    kept = [data["n"] for kind, data, _ in held(rec) if kind in DROPPABLE]
    in_order = [n for n, (kind, _) in enumerate(output) if kind in DROPPABLE]
    assert kept == in_order[: len(kept)]


@given(outputs)
def test_every_event_a_run_must_keep_survives_the_cut(output):
    rec = recorder(output)
    disk_full(rec)
    assert [data["n"] for kind, data, _ in held(rec) if kind in KEPT] == [
        n for n, (kind, _) in enumerate(output) if kind in KEPT
    ]


@given(outputs)
def test_what_is_cut_is_counted_in_a_note_that_names_the_full_disk(output):
    rec = recorder(output)
    disk_full(rec)
    missing = len(output) - sum(1 for kind, _, _ in held(rec) if kind != "truncated")
    assert sum(note["events"] for note in notes(rec)) == missing == rec.dropped
    for note in notes(rec):
        assert "the disk that holds the database is full" in note["reason"]
        assert "BRIDGE_DB_FULL_BUFFER_BYTES" in note["reason"]


@given(outputs, st.lists(st.sampled_from(DROPPABLE), min_size=1, max_size=50))
def test_output_that_comes_while_the_disk_is_full_is_held_only_within_the_bound(output, more):
    rec = recorder(output)
    disk_full(rec)
    for kind in more:
        rec.add_events([(kind, {"n": -1})], 20_000)
    assert droppable_bytes(rec) <= FULL_BYTES


@given(outputs, st.integers(1, 24))
def test_each_narrowing_halves_the_bound_until_only_what_must_be_kept_is_left(output, times):
    rec = recorder(output)
    disk_full(rec)
    for _ in range(times):
        rec.narrow()
    assert droppable_bytes(rec) <= FULL_BYTES >> times
    assert [kind for kind, _, _ in held(rec) if kind in KEPT] == [kind for kind, _ in output if kind in KEPT]
    assert sum(note["events"] for note in notes(rec)) == rec.dropped


@given(outputs)
def test_a_write_a_try_may_have_committed_is_never_cut(monkeypatch_once, output):
    rec = recorder(output)
    monkeypatch_once.setattr(actions, "append_events", raises(OperationalError("server closed the connection")))
    assert not rec.flush()
    first = rec.writes[0]
    assert first.tried
    before = list(first.payload)
    disk_full(rec)
    assert first.payload == before


@given(outputs)
def test_a_write_the_full_disk_had_no_room_for_may_be_cut(monkeypatch_once, output):
    rec = recorder(output)
    monkeypatch_once.setattr(actions, "append_events", raises(FULL))
    assert not rec.flush()
    assert not rec.writes[0].tried, "it was not committed"
    assert droppable_bytes(rec) <= FULL_BYTES


def raises(exc: BaseException):
    def append(task, events) -> None:
        raise exc

    return append


@pytest.fixture(scope="module")
def monkeypatch_once():
    """A monkeypatch for generated examples (a function-scoped fixture would be shared by all of them anyway)."""
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()
