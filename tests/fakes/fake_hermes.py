"""A fake one-shot Hermes Agent CLI (`hermes chat -q TASK -Q ...`), for the MCP tests with BRIDGE_HERMES_MODE=oneshot.

Like the real 0.19 CLI: the answer goes to stdout, `session_id: <id>` ends stderr, the exit code is the only
reliable signal of success. `--resume ID` keeps the id. The task text is a small script, one command per line:

    say TEXT        a line of the answer
    sleep SECONDS   wait
    write PATH TEXT write TEXT to PATH (relative to the cwd)
    fail TEXT       print TEXT on stdout and exit 1 (as an API error does)

Anything else is echoed as part of the answer. `--version` prints a version without going online.
"""

import random
import sys
import time
from datetime import datetime
from pathlib import Path


def session_id(argv: list[str]) -> str:
    if "--resume" in argv:
        return argv[argv.index("--resume") + 1]
    return datetime.now().strftime("%Y%m%d_%H%M%S_") + f"{random.randrange(16**6):06x}"


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
        elif line.strip():
            answer.append(line.strip())
    print("\n".join(answer) or "done")
    sys.stdout.flush()
    print(f"session_id: {session_id(argv)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
