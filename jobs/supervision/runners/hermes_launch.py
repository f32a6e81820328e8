"""Run Hermes' own `hermes` script with the task read from stdin, so the task never appears in argv.

Hermes 0.19's `chat` takes the task only as `-q/--query TEXT` (no stdin or file option), but an argv string is
readable by every user in /proc/<pid>/cmdline and Linux refuses one over 128 KiB ("Argument list too long"). So the
one-shot runner starts this file, with the interpreter named on the script's first line:

    <hermes' python> hermes_launch.py <hermes script> chat -Q ...

and writes one JSON line `{"query": <task>}` to its stdin. This reads that line, gives Hermes /dev/null as stdin (as
it had before), adds `--query=<task>` to sys.argv and runs the script as `python <script>` would. It is never
imported by Bridge and uses only the standard library: it runs inside Hermes' interpreter.
"""

import json
import os
import runpy
import sys

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
    sys.argv = [script, *args, f"--query={query}"]  # `--query=`: a task starting with "-" is not a flag
    sys.path[0] = os.path.dirname(os.path.realpath(script))  # as `python <script>` sets it (not this file's folder)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
