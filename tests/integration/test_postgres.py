"""The same actions and supervisor tests on PostgreSQL, where claims use SELECT … FOR UPDATE SKIP LOCKED."""

from tests.support import postgres_or_skip, rerun_on_postgres


def test_supervisor_and_api_suites_pass_on_postgres():
    # The process backends do not depend on the database: SQLite's run covers both, this one the posix one.
    run = rerun_on_postgres(
        postgres_or_skip(),
        "tests/integration/test_supervisor.py",
        "tests/integration/test_api.py",
        "tests/integration/test_rows.py",
        "tests/integration/test_task_counts.py",
        "tests/integration/test_readiness.py",
        "tests/integration/test_import_legacy.py",
        "-k",
        "not portable",
        timeout=600,
    )
    assert " passed" in run.stdout.splitlines()[-1]
