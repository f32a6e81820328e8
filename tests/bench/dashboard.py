"""Benchmark (not collected by pytest): the dashboard's cost as the task table grows (issue 12: "flat").

    .venv/bin/python tests/bench/dashboard.py [--sizes 10,10000,100000] [--runs 15] [--database-url URL]

Builds a fresh database per size (SQLite files in a temporary BRIDGE_DATA_DIR, or PostgreSQL databases named after the
one --database-url names, which must exist, each dropped first) and fills it with SIZE tasks in mixed states (1 in 50
waiting for a permission). It then times GET / through Django's test client, logged in, RUNS times per size, the sizes
taking turns request by request: this machine's speed drifts within a minute, so sizes timed a minute apart compared the
drift as much as the page. A row of the bench table per size (median, and the 95th percentile in its note, beside what
the dashboard read before: pending permissions counted over every task before the newest 200 were taken, and the tasks
counted per status), and the goal's row, 100,000 tasks against 10,000.
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


def fresh_database(size: int, base: str) -> str:
    """A new, migrated database for one size (`base`: the NAME configured), the connection pointed at it; its NAME."""
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        name = f"{base}_dashboard_{size}"
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}"')
    else:
        name = str(Path(os.environ["BRIDGE_DATA_DIR"]) / f"dashboard-{size}.sqlite3")
    use_database(name)
    call_command("migrate", verbosity=0, interactive=False)
    return name


def use_database(name: str) -> None:
    """Point Django's one connection at another of the bench's databases (a pool serves one database: closed too)."""
    from django.db import connection

    connection.close()
    if connection.vendor == "postgresql":
        connection.close_pool()
    connection.settings_dict["NAME"] = name


def drop_databases(base: str, names: list[str]) -> None:
    """Leave PostgreSQL as the bench found it (a run that failed leaves them to the next, which drops them first);
    SQLite's files go with their temporary folder."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    use_database(base)
    with connection.cursor() as cursor:
        for name in names:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def logged_in_client():
    """A test client logged in as a new superuser of the database in use."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.create_superuser("bench", password="bench-password-1"))
    return client


def fill(total: int) -> None:
    """Add `total` tasks to an empty table, oldest first; every 50th has a pending permission request."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Task

    start = timezone.now() - timedelta(days=30)
    batch = 5000
    created_at = Task._meta.get_field("created_at")
    created_at.auto_now_add = False  # the rows carry their own times, a second apart (an UPDATE took half the fill)
    try:
        for first in range(0, total, batch):
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


def time_dashboards(sizes: dict[int, tuple[str, object]], runs: int) -> dict[int, list[float]]:
    """GET / `runs` times per size ({size: (database, client)}), the sizes taking turns; a turn's first request,
    which opens the connection, is not timed."""
    seconds: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(runs):
        for size, (database, client) in sizes.items():
            use_database(database)
            client.get("/")
            started = time.perf_counter()
            response = client.get("/")
            seconds[size].append(time.perf_counter() - started)
            assert response.status_code == 200, response.status_code
    return seconds


def time_old_reads(runs: int) -> tuple[list[float], list[float]]:
    """What the dashboard read before: the list query with pending permissions counted over every task before the
    newest 200 were taken, and the count per status counted over every task (now kept by triggers: `TaskCount`)."""
    from django.db import models

    from jobs.models import Task

    listing, counting = [], []
    for _ in range(runs):
        started = time.perf_counter()
        list(Task.objects.select_related("session").newest_first().with_pending_count()[:200])
        listing.append(time.perf_counter() - started)
        started = time.perf_counter()
        list(Task.objects.order_by().values("status").annotate(n=models.Count("id")))
        counting.append(time.perf_counter() - started)
    return listing, counting


def time_counts(runs: int) -> list[float]:
    """The tiles' count per status, as the dashboard reads it."""
    from jobs.models import TaskCount

    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        TaskCount.by_status()
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,10000,100000")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    setup_django(args.database_url)
    from django.db import connection

    print(f"database: {connection.vendor}; GET / logged in, {args.runs} runs per size, the sizes taking turns")
    base, sizes = connection.settings_dict["NAME"], {}
    for size in (int(s) for s in args.sizes.split(",")):
        database = fresh_database(size, base)
        fill(size)
        sizes[size] = (database, logged_in_client())
    rows, medians = [], {}
    for size, seconds in time_dashboards(sizes, args.runs).items():
        use_database(sizes[size][0])
        dashboard = ms(seconds)
        counts = ms(time_counts(args.runs))
        old_list, old_counts = (ms(timings) for timings in time_old_reads(args.runs))
        medians[size] = p50(dashboard)
        rows.append(
            Row(
                f"dashboard GET / at {size:,} tasks ({min(size, 200)} shown), p50",
                medians[size],
                note=f"p95 {percentile(dashboard, 0.95):.1f} ms; of which the status counts {p50(counts):.2f} ms; "
                f"before: the list query alone {p50(old_list):.1f} ms, the counts {p50(old_counts):.1f} ms "
                f"({connection.vendor}, {args.runs} runs)",
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
    drop_databases(base, [database for database, _ in sizes.values()])
    emit(rows)


if __name__ == "__main__":
    main()
