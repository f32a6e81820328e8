"""The code that reaches into Django's internals (jobs/actions/rows.py, the claim's hand-written SQL) on the newest
Django the dependency range admits: the test lock on Python 3.12+ resolves it (`make tools` installs that
environment in .tools/newest-django); the main suite runs on the lock's Django for Python 3.11."""

import os
import re
import subprocess

import pytest

from tests.support import REPO

ENVIRONMENT = REPO / ".tools" / "newest-django"
SUITES = [
    "tests/integration/test_rows.py",
    "tests/integration/test_claim_paths.py",
    "tests/integration/test_task_counts.py",
    "tests/integration/test_concurrency.py",
    "tests/integration/test_supervisor.py",
]
SELECTED = (
    "test_rows.py or test_claim_paths.py or test_task_counts.py or (test_concurrency.py and claim)"
    " or (test_supervisor.py and claim and posix)"
)


def newest_python() -> str:
    for python in (ENVIRONMENT / "bin" / "python", ENVIRONMENT / "Scripts" / "python.exe"):
        if python.exists():
            return str(python)
    reason = f"no {ENVIRONMENT} (make tools makes it where a Python 3.12 or later is installed)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def locked_django_for_newer_pythons() -> str:
    """The Django version requirements/test.txt pins for Python 3.12 and later."""
    lock = (REPO / "requirements" / "test.txt").read_text()
    pins = re.findall(r"^django==(\S+)(?: ; (.*?))? \\$", lock, re.M)
    newer = [version for version, marker in pins if not marker or ">= '3.12'" in marker]
    assert len(newer) == 1, f"requirements/test.txt pins Django as {pins}"
    return newer[0]


def test_rows_and_the_claim_on_the_newest_django_the_range_admits(tmp_path):
    python = newest_python()
    version = subprocess.run(
        [python, "-c", "import django; print(django.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"\nnewest Django: {version} on {python}")
    assert version == locked_django_for_newer_pythons()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["BRIDGE_DATA_DIR"] = str(tmp_path)  # its own test database, apart from every other run's
    run = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *SUITES, "-k", SELECTED],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    print(f"on Django {version}: {last}")
    assert run.returncode == 0 and " passed" in last and "failed" not in last, run.stdout[-4000:] + run.stderr[-2000:]
