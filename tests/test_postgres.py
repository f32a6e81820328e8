"""The same actions and supervisor tests on PostgreSQL, where claims use SELECT … FOR UPDATE SKIP LOCKED."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get("BRIDGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/bridge")


@pytest.fixture
def postgres_url() -> str:
    try:
        import psycopg
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install -e '.[postgres]')")
    server = POSTGRES_URL.rsplit("/", 1)[0] + "/postgres"
    try:
        psycopg.connect(server, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        skip_or_fail(f"PostgreSQL is not reachable at {server} (set BRIDGE_TEST_POSTGRES_URL): {exc}")
    return POSTGRES_URL


def test_supervisor_and_api_suites_pass_on_postgres(postgres_url):
    env = {**os.environ, "DATABASE_URL": postgres_url}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_supervisor.py",
            "tests/test_api.py",
            "-k",
            "not portable",  # the process backends do not depend on the database: SQLite's run covers both
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"on PostgreSQL:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert " passed" in run.stdout.splitlines()[-1]
