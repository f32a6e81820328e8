"""Benchmark (`make bench`): events ingested per second, one task and ten at once, with zero loss.

An agent that writes as fast as the pipe takes it (flood_agent.py) floods stdout with assistant text lines; the rate
is the recorded events over the time between the first and the last one's commit (read from the database afterwards,
where every seq is checked: no gap, no loss; and every stdout line is in the task's transcript, numbered without a
gap). Beside it, the machine's own limit: the same lines parsed and inserted by
plain `sqlite3` into a table of the same shape (WAL, synchronous=NORMAL, BATCH rows a transaction), in this process.
"""

import argparse
import json
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.run import SHIPPED  # noqa: E402
from tests.bench.table import Row, emit  # noqa: E402
from tests.bridge_server import BridgeServer  # noqa: E402

BATCH = 500
LINE_BYTES = 100


def flood_agent(directory: Path) -> str:
    script = directory / "flood-agent"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).parent / "flood_agent.py"}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def recorded(db: Path, task_ids: list[str]) -> tuple[int, int, float, float]:
    """Text events of these tasks, their transcripts' lines, and the first and last commit time; fails on any gap in
    any task's seqs or line numbers."""
    with sqlite3.connect(db) as conn:
        total, lines, first, last = 0, 0, float("inf"), 0.0
        for public_id in task_ids:
            pk = conn.execute("SELECT id FROM jobs_task WHERE public_id = ?", (public_id.replace("-", ""),)).fetchone()[
                0
            ]
            count, top = conn.execute(
                "SELECT count(*), max(seq) FROM jobs_taskevent WHERE task_id = ?", (pk,)
            ).fetchone()
            if count != top:
                raise SystemExit(f"task {public_id}: {count} events but last seq {top}: a gap")
            kept, last_n = conn.execute(
                "SELECT sum(last - n + 1), max(last) FROM jobs_taskline WHERE task_id = ?", (pk,)
            ).fetchone()
            if kept != last_n:
                raise SystemExit(f"task {public_id}: {kept} transcript lines but the last is {last_n}: a gap")
            lines += kept
            texts, low, high = conn.execute(
                "SELECT count(*), min(created_at), max(created_at) FROM jobs_taskevent"
                " WHERE task_id = ? AND kind = 'text'",
                (pk,),
            ).fetchone()
            total += texts
            first, last = min(first, stamp(low)), max(last, stamp(high))
    return total, lines, first, last


def flood(bridge: BridgeServer, tasks: int, lines: int) -> float:
    ids = [bridge.create_task(f"flood {lines} {LINE_BYTES}", bridge.work) for _ in range(tasks)]
    for task_id in ids:
        for _event in bridge.stream(task_id, since=10**9, deadline_s=600):
            pass
        if (status := bridge.task(task_id)["status"]) != "done":
            raise SystemExit(f"task {task_id} ended {status}")
    total, kept, first, last = recorded(bridge.data_dir / "bridge.sqlite3", ids)
    if total != tasks * lines:
        raise SystemExit(f"recorded {total} of {tasks * lines} lines: output was lost")
    if kept != tasks * (lines + 2):  # with the init and result lines
        raise SystemExit(f"kept {kept} of {tasks * (lines + 2)} stdout lines in the transcripts")
    return (total - tasks) / (last - first)


def plain_sqlite(root: Path, lines: int) -> float:
    """The same lines parsed and inserted without Bridge: the machine's limit for this work."""
    message = {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "x" * 100}]}}
    raw = [json.dumps({**message, "id": uuid.uuid4().hex}).encode() for _ in range(lines)]
    conn = sqlite3.connect(root / "plain.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE ev (id INTEGER PRIMARY KEY, task_id INTEGER, seq INTEGER, kind TEXT, data TEXT, created_at TEXT,"
        " UNIQUE (task_id, seq))"
    )
    started = time.perf_counter()
    for offset in range(0, lines, BATCH):
        rows = []
        for seq, line in enumerate(raw[offset : offset + BATCH], start=offset + 1):
            block = json.loads(line)["message"]["content"][0]
            rows.append((1, seq, block["type"], json.dumps({"text": block["text"]}), datetime.now().isoformat()))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO ev (task_id, seq, kind, data, created_at) VALUES (?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    conn.close()
    return lines / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=100_000, help="lines of the one task")
    parser.add_argument("--each", type=int, default=20_000, help="lines of each of the ten tasks")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        root = Path(tmp)
        env = {**SHIPPED, "BRIDGE_MAX_CONCURRENT": "10"}
        with BridgeServer(root, "http://127.0.0.1:9", flood_agent(root), extra_env=env) as bridge:
            one = flood(bridge, 1, args.lines)
            ten = flood(bridge, 10, args.each)
        limit = plain_sqlite(root, args.lines)
    emit(
        [
            Row(
                "events ingested/s, one task, zero loss",
                one,
                unit="/s",
                goal=40_000,
                higher_is_better=True,
                limit=limit,
            ),
            Row(
                "events ingested/s, ten tasks, zero loss",
                ten,
                unit="/s",
                goal=40_000,
                higher_is_better=True,
                limit=limit,
            ),
        ]
    )


if __name__ == "__main__":
    main()
