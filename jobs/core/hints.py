"""Commands named in messages, spelled so they work as printed: the interpreter that runs Bridge (the project's
virtual environment, not whatever `python` is on PATH) and the absolute path of manage.py."""

import shlex
import subprocess
import sys

from django.conf import settings


def manage_command(*args: str) -> str:
    """`/path/to/.venv/bin/python /path/to/manage.py ARGS…`, quoted for the shell it will be pasted into."""
    argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), *args]
    return subprocess.list2cmdline(argv) if sys.platform == "win32" else shlex.join(argv)
