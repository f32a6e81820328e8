"""The logs of the Bridge servers the tests have running, so that a failing test's report ends with what they said
(tests/conftest.py): a failure seen once in CI is then explained by its own run, not by hoping to see it again."""

from pathlib import Path

RUNNING: set[Path] = set()  # added when a server starts, removed when it is stopped
TAIL_LINES = 80


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log, or why there are none."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"
