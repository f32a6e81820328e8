"""Benchmark (not collected by pytest): the dashboard's cost as the task table grows (issue 12: "flat").

    .venv/bin/python tests/bench/dashboard.py [--sizes 10,10000,100000] [--runs 15] [--database-url URL]

Builds a fresh database (SQLite in a temporary BRIDGE_DATA_DIR, or the PostgreSQL database named by --database-url,
which is emptied first), fills it with SIZE tasks in mixed states (1 in 50 waiting for a permission), then times
GET / through Django's test client, logged in, RUNS times per size: a row of the bench table per size (median, and the
95th percentile in its note, beside the list query the dashboard used before: pending permissions counted over every
task before the newest 200 were taken), and the goal's row, 100,000 tasks against 10,000.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.table import Row, emit, ms, p50, percentile  # noqa: E402

STATUSES = ("done", "done", "done", "failed", "cancelled", "timeout", "queued")


def setup_django(database_url: str | None) -> None:
    os.environ["BRIDGE_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-dashboard-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "bridge.settings"
    os.environ.pop("REDIS_URL", None)
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    else:
        os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def fill(total: int) -> None:
    """Add tasks until there are `total`, oldest first; every 50th has a pending permission request."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Task

    have = Task.objects.count()
    start = timezone.now() - timedelta(days=30)
    batch = 5000
    created_at = Task._meta.get_field("created_at")
    created_at.auto_now_add = False  # the rows carry their own times, a second apart (an UPDATE took half the fill)
    try:
        for first in range(have, total, batch):
            created = Task.objects.bulk_create(
                Task(
                    prompt=f"Task {i}: tidy the imports in module {i % 97}",
                    cwd=f"/srv/work/project-{i % 13}",
                    status=STATUSES[i % len(STATUSES)],
                    cost_usd=0.01 * (i % 7),
                    created_at=start + timedelta(seconds=i),
                )
                for i in range(first, min(total, first + batch))
            )
            ask_for_permissions(created)
    finally:
        created_at.auto_now_add = True
    settle_statistics()


def ask_for_permissions(tasks: list) -> None:
    """Every 50th task waits for a decision."""
    from jobs.models import PermissionRequest

    asks = [
        PermissionRequest(task=task, request_id="r1", tool_name="Bash", input={"command": "ls"})
        for task in tasks
        if task.pk % 50 == 0
    ]
    PermissionRequest.objects.bulk_create(asks)


def settle_statistics() -> None:
    """What autovacuum and a running server would have done by then: planner statistics and, on PostgreSQL, the
    visibility map that lets the per-status count read the index alone."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobs_task" if connection.vendor == "postgresql" else "ANALYZE")


def time_dashboard(client, runs: int) -> list[float]:
    client.get("/")  # warm: templates, connection
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get("/")
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    return seconds


def time_old_query(runs: int) -> list[float]:
    from jobs.models import Task

    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        list(Task.objects.select_related("session").newest_first().with_pending_count()[:200])
        seconds.append(time.perf_counter() - started)
    return seconds


def time_counts(runs: int) -> list[float]:
    """The one read that still looks at every task: the tiles' count per status (an index-only scan)."""
    from jobs.models import Task

    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        Task.objects.counts_by_status()
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,10000,100000")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    setup_django(args.database_url)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from jobs.models import Task

    Task.objects.all().delete()
    get_user_model().objects.filter(username="bench").delete()
    user = get_user_model().objects.create_superuser("bench", password="bench-password-1")
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    print(f"database: {connection.vendor}; GET / logged in, {args.runs} runs per size")
    rows, medians = [], {}
    for size in (int(s) for s in args.sizes.split(",")):
        fill(size)
        dashboard = ms(time_dashboard(client, args.runs))
        counts, old = ms(time_counts(args.runs)), ms(time_old_query(args.runs))
        medians[size] = p50(dashboard)
        rows.append(
            Row(
                f"dashboard GET / at {size:,} tasks ({min(size, 200)} shown), p50",
                medians[size],
                note=f"p95 {percentile(dashboard, 0.95):.1f} ms; of which the status counts {p50(counts):.1f} ms; "
                f"before: the list query alone {p50(old):.1f} ms ({connection.vendor}, {args.runs} runs)",
            )
        )
    if {10_000, 100_000} <= medians.keys():
        rows.append(
            Row(
                "dashboard at 100,000 tasks ÷ at 10,000 (200 shown at both), p50",
                medians[100_000] / medians[10_000],
                unit="×",
                goal=1.25,
                note="flat: ten times the tasks may cost at most a quarter more",
            )
        )
    emit(rows)


if __name__ == "__main__":
    main()
