"""A stream-json agent that writes its output as fast as a pipe takes it, for the ingest benchmark.

tests/fakes/fake_claude.py builds each line as it goes and manages ~25,000 lines/s on a busy 2-core machine, below
what Bridge should ingest; this one builds all its lines first and writes them in large chunks, so the reader, Bridge,
sets the pace. Its prompt is `flood LINES BYTES`; like the real CLI it then waits for stdin to close.
"""

import json
import sys
import uuid

SESSION = str(uuid.uuid4())
CHUNK_LINES = 1000


def line(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def main() -> None:
    if "--version" in sys.argv:  # as the real CLI answers it (jobs/agents/executors.py asks)
        print("0.0.0 (Flood Agent)")
        return
    first = json.loads(sys.stdin.readline())
    _, count, size = first["message"]["content"][0]["text"].split()
    text = "x" * int(size)
    body = [
        line(
            {
                "type": "assistant",
                "message": {"id": f"msg_{i}", "role": "assistant", "content": [{"type": "text", "text": text}]},
                "session_id": SESSION,
            }
        )
        for i in range(int(count))
    ]
    out = sys.stdout.buffer
    out.write(line({"type": "system", "subtype": "init", "session_id": SESSION, "model": "flood"}))
    for start in range(0, len(body), CHUNK_LINES):
        out.write(b"".join(body[start : start + CHUNK_LINES]))
    result = {"type": "result", "subtype": "success", "is_error": False, "result": text, "session_id": SESSION}
    out.write(line({**result, "num_turns": 1, "total_cost_usd": 0.0, "usage": {}}))
    out.flush()
    for _ in sys.stdin:  # like the real CLI: wait for stdin to close
        pass


if __name__ == "__main__":
    main()
