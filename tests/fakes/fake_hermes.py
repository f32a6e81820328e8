"""A fake one-shot Hermes Agent CLI (`hermes chat -q TASK -Q ...`), for the MCP tests with BRIDGE_HERMES_MODE=oneshot.

Like the real 0.19 CLI: the answer goes to stdout, `session_id: <id>` ends stderr, the exit code is the only
reliable signal of success. `--resume ID` keeps the id. The task text is a small script, one command per line:

    say TEXT        a line of the answer
    sleep SECONDS   wait
    write PATH TEXT write TEXT to PATH (relative to the cwd)
    fail TEXT       print TEXT on stdout and exit 1 (as an API error does)
    digest          a line `query: <bytes> bytes, sha256 <hex>` of the whole task as received
    cmdline         a line `cmdline: <JSON list>`: this process's argv as the kernel (and `ps`) shows it
    stdin           a line `stdin: devnull` when stdin is /dev/null (as the real CLI gets it), else `stdin: other`
    env NAME        a line `env NAME=<value>` (or `<unset>`)
    # ...           nothing (filler)

Anything else is echoed as part of the answer. `--version` prints a version without going online. Bridge runs it
like the real one: through runners/hermes_launch.py, which takes the task from stdin and adds `--query=`.
"""

import hashlib
import json
import os
import random
import stat
import sys
import time
from datetime import datetime
from pathlib import Path


def session_id(argv: list[str]) -> str:
    if "--resume" in argv:
        return argv[argv.index("--resume") + 1]
    return datetime.now().strftime("%Y%m%d_%H%M%S_") + f"{random.randrange(16**6):06x}"


def digest(task: str, _: str) -> str:
    data = task.encode()
    return f"query: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def cmdline(_: str, __: str) -> str:
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
        return "cmdline: " + json.dumps([arg.decode(errors="replace") for arg in f.read().split(b"\0")[:-1]])


def stdin_kind(_: str, __: str) -> str:
    mode = os.fstat(0)
    null = os.stat(os.devnull)
    is_null = stat.S_ISCHR(mode.st_mode) and mode.st_rdev == null.st_rdev
    return "stdin: devnull" if is_null else "stdin: other"


def env_value(_: str, name: str) -> str:
    return f"env {name}={os.environ.get(name, '<unset>')}"


REPORTS = {"digest": digest, "cmdline": cmdline, "stdin": stdin_kind, "env": env_value}


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print("Hermes Agent v0.0.0-fake")
        return 0
    queries = [arg.removeprefix("--query=") for arg in argv if arg.startswith("--query=")]
    if argv[:1] != ["chat"] or len(queries) != 1:
        print(f"fake hermes: unsupported arguments {argv}", file=sys.stderr)
        return 2
    task = queries[0]
    answer = []
    for line in task.splitlines():
        command, _, rest = line.strip().partition(" ")
        if command == "say":
            answer.append(rest)
        elif command == "sleep":
            time.sleep(float(rest))
        elif command == "write":
            path, _, text = rest.partition(" ")
            Path(path).write_text(text + "\n")
            answer.append(f"wrote {path}")
        elif command == "fail":
            print(rest)
            return 1
        elif command in REPORTS:
            answer.append(REPORTS[command](task, rest))
        elif command.startswith("#"):
            continue
        elif line.strip():
            answer.append(line.strip())
    print("\n".join(answer) or "done")
    sys.stdout.flush()
    print(f"session_id: {session_id(argv)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
