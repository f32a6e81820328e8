"""Run Hermes' own `hermes` script with the task read from stdin, so the task never appears in argv.

Hermes 0.19's `chat` takes the task only as `-q/--query TEXT` (no stdin or file option), but an argv string is
readable by every user in /proc/<pid>/cmdline and Linux refuses one over 128 KiB ("Argument list too long"). So the
one-shot runner starts this file, with the interpreter named on the script's first line:

    <hermes' python> hermes_launch.py <hermes script> chat -Q ...

and writes one JSON line `{"query": <task>}` to its stdin. This reads that line, gives Hermes /dev/null as stdin (as
it had before), adds `--query=<task>` to sys.argv and runs the script as `python <script>` would. It is never
imported by Bridge and uses only the standard library: it runs inside Hermes' interpreter.

It also keeps a resumed session in the task's cwd: Hermes 0.19 moves a resumed session back into the directory the
session recorded (`cli.py` `_restore_session_cwd`, with no option to stay; `--no-restore-cwd` skips only an earlier
move), which may lie outside the roots Bridge confined the task to. Such a resume is refused before Hermes starts.
"""

import json
import os
import runpy
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

USAGE = 'usage: hermes_launch.py HERMES_SCRIPT ARG... (the task as one JSON line {"query": ...} on stdin)'


def read_line(fd: int = 0) -> bytes:
    """The first line on `fd`, read unbuffered so nothing after it is taken from Hermes."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        if b"\n" in chunk:
            break
    return b"".join(chunks)


def stdin_to_devnull() -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def hermes_home() -> Path:
    """Where Hermes keeps its store: $HERMES_HOME, else its platform default (hermes_constants.py)."""
    if os.environ.get("HERMES_HOME"):
        return Path(os.environ["HERMES_HOME"]).expanduser()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "hermes"
    return Path.home() / ".hermes"


def recorded_elsewhere(args: list[str]) -> str:
    """The directory Hermes would move the resumed session (`--resume ID`) into, when it is another one than this
    process's; "" when it would stay (no resume, no store, no directory recorded, or it is gone, or it is here)."""
    if "--resume" not in args[:-1]:
        return ""
    store = (hermes_home() / "state.db").resolve()
    try:
        with closing(sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True, timeout=5)) as db:
            row = db.execute("SELECT cwd FROM sessions WHERE id = ?", (args[args.index("--resume") + 1],)).fetchone()
    except sqlite3.Error:
        return ""
    recorded = os.path.expanduser(str(row[0] or "")) if row else ""
    if not recorded or not os.path.isdir(recorded) or os.path.realpath(recorded) == os.path.realpath(os.getcwd()):
        return ""
    return recorded


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(USAGE)
    script, args = sys.argv[1], sys.argv[2:]
    line = read_line()
    stdin_to_devnull()
    try:
        query = json.loads(line)["query"]
    except (ValueError, KeyError, TypeError):
        sys.exit(f"hermes_launch.py: no task on stdin ({USAGE})")
    try:
        with open(script, "rb") as source:
            compile(source.read(), script, "exec")
    except (OSError, SyntaxError, ValueError) as exc:
        sys.exit(
            f"hermes_launch.py: {script} is not a Python script ({exc.__class__.__name__}): one-shot mode runs "
            "Hermes' own `hermes` console script; point BRIDGE_HERMES_BIN at it (not at a wrapper), "
            "or use BRIDGE_HERMES_MODE=acp"
        )
    elsewhere = recorded_elsewhere(args)
    if elsewhere:
        sys.exit(
            f"hermes_launch.py: session {args[args.index('--resume') + 1]} was started in {elsewhere}, and Hermes "
            f"continues a session only there, not in this task's cwd {os.getcwd()}: resume it with that cwd (if it "
            "is inside Bridge's allowed roots), or start a new session here"
        )
    sys.argv = [script, *args, f"--query={query}"]  # `--query=`: a task starting with "-" is not a flag
    sys.path[0] = os.path.dirname(os.path.realpath(script))  # as `python <script>` sets it (not this file's folder)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
