"""hermes_resume's "latest" where Bridge ran no Hermes session: Hermes' own newest session in that cwd, read from its
store in the order `hermes chat --continue` takes (last message, then start). Through MCP, with the fake Hermes:
tests/integration/test_mcp.py; with the real one: tests/e2e/test_hermes_mcp.py."""

import contextlib
import sqlite3
import tempfile
from pathlib import Path

from django.test import override_settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.agents import hermes_skills

HERE, ELSEWHERE = "/work/project", "/work/other"
session_rows = st.lists(
    st.tuples(
        st.text("0123456789_abc", min_size=1, max_size=8),  # id
        st.sampled_from([HERE, ELSEWHERE, None]),  # the cwd it recorded (none: not started at a terminal)
        st.integers(0, 20),  # started_at
        st.lists(st.integers(0, 40), max_size=3),  # its messages' times
    ),
    unique_by=lambda row: row[0],
    max_size=8,
)


def write_store(home: Path, rows: list) -> None:
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, cwd TEXT, started_at REAL)")
        db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, timestamp REAL)")
        for session_id, cwd, started_at, times in rows:
            db.execute("INSERT INTO sessions VALUES (?, 'cli', ?, ?)", (session_id, cwd, started_at))
            db.executemany(
                "INSERT INTO messages (session_id, timestamp) VALUES (?, ?)", [(session_id, t) for t in times]
            )
        db.commit()


@hypothesis_settings(max_examples=200, deadline=None)
@given(rows=session_rows)
def test_hermes_newest_session_in_a_cwd_is_the_one_last_talked_to_then_last_started(rows):
    here = [
        (max(times, default=started), started, session_id) for session_id, cwd, started, times in rows if cwd == HERE
    ]
    with tempfile.TemporaryDirectory() as home, override_settings(BRIDGE_HERMES_HOME=Path(home)):
        write_store(Path(home), rows)
        assert hermes_skills.hermes_newest_session(HERE) == (max(here)[2] if here else "")


def test_a_missing_or_unreadable_store_is_unknown_rather_than_empty():
    with tempfile.TemporaryDirectory() as home, override_settings(BRIDGE_HERMES_HOME=Path(home)):
        assert hermes_skills.hermes_newest_session(HERE) is None, "no state.db"
        (Path(home) / "state.db").write_text("not a database")
        assert hermes_skills.hermes_newest_session(HERE) is None
