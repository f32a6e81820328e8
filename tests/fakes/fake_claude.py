"""A fake agent that speaks Claude Code's stream-json protocol, for supervisor tests and benchmarks.

It never replaces the real CLI in end-to-end tests; it makes the cheap, broad cases (queue order, caps, crashes,
floods, signals) fast and deterministic. The prompt is a small script, one command per line:

    say TEXT                 an assistant text block
    ask TOOL JSON            a can_use_tool request; waits for the answer; "Bash" with {"command"} runs it if allowed
    ask2 TOOL JSON JSON      two requests pending at once
    suggest JSON             the next ask's (or ask2's) permission_suggestions, a JSON list in the CLI's shape
                             ([{"type": "addRules", "rules": [{"toolName", "ruleContent"}], "behavior", "destination"}])
    sleep SECONDS            (interruptible by an interrupt control request)
    write PATH TEXT          the file PATH (relative to the cwd) holds TEXT (`\\n` for a newline) and a newline
    delete PATH              remove the file PATH
    cat PATH                 an assistant text block with the file's text (the result, unless more is said)
    flood LINES BYTES        LINES assistant text lines of BYTES characters each
    bigline BYTES            one stdout line of BYTES characters
    nonjson TEXT             a line that is not JSON
    stderr TEXT              a line on stderr
    crash CODE               exit at once with CODE, no result line
    ignore-sigterm           SIGTERM does nothing from now on
    deaf                     interrupt requests are ignored from now on
    env NAME                 an assistant text block with the value of environment variable NAME (or <unset>)
    argv                     an assistant text block with its command line after the executable, as a JSON list
    stamp COUNT INTERVAL     COUNT text blocks "stamp <time.time()>", INTERVAL seconds apart (for benchmarks)
    spawn-child              start a grandchild `sleep 300` in the same process group, print its pid
    spawn-escapee            start a grandchild `sleep 300` that leaves the process group (setsid), print its pid
    error TEXT               end with an is_error result (like an API failure)

After the script: a success `result` line, then (like the real CLI) it waits for stdin to close and exits 0.
"""

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

inbox: queue.Queue = queue.Queue()
SESSION = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else str(uuid.uuid4())
MESSAGE_USAGE = {"input_tokens": 10, "output_tokens": 5}


def emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read_stdin() -> None:
    for line in sys.stdin:
        inbox.put(json.loads(line))
    inbox.put(None)


class Interrupted(Exception):
    pass


pending: list[str] = []
deaf = False
suggestions: list = []  # the next ask's permission_suggestions (`suggest`)


def handle_control(message: dict | None) -> dict | None:
    """Returns the message unless it is an interrupt, which ends the turn like the real CLI does."""
    if message is None:
        sys.exit(0)
    if message.get("type") == "control_request" and message["request"].get("subtype") == "interrupt" and not deaf:
        for request_id in pending:
            emit({"type": "control_cancel_request", "request_id": request_id})
        pending.clear()
        emit(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": message["request_id"], "response": {}},
            }
        )
        raise Interrupted
    return message


def wait_answers(request_ids: list[str]) -> dict[str, dict]:
    answers = {}
    while len(answers) < len(request_ids):
        message = handle_control(inbox.get())
        if message.get("type") == "control_response":
            response = message["response"]
            answers[response["request_id"]] = response["response"]
            pending.remove(response["request_id"])
    return answers


def assistant_text(text: str) -> None:
    emit(
        {
            "type": "assistant",
            "message": {
                "id": "msg_" + uuid.uuid4().hex[:8],
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "usage": MESSAGE_USAGE,
            },
            "session_id": SESSION,
        }
    )


def ask(tools: list[tuple[str, dict]]) -> None:
    global suggestions
    offered, suggestions = suggestions, []
    ids = []
    for name, tool_input in tools:
        request_id = str(uuid.uuid4())
        tool_use_id = "toolu_" + uuid.uuid4().hex[:8]
        emit(
            {
                "type": "assistant",
                "message": {
                    "id": "msg_" + uuid.uuid4().hex[:8],
                    "content": [{"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}],
                },
                "session_id": SESSION,
            }
        )
        emit(
            {
                "type": "control_request",
                "request_id": request_id,
                "request": {
                    "subtype": "can_use_tool",
                    "tool_name": name,
                    "input": tool_input,
                    "tool_use_id": tool_use_id,
                    "permission_suggestions": offered,
                },
            }
        )
        pending.append(request_id)
        ids.append((request_id, tool_use_id, name))
    answers = wait_answers([request_id for request_id, _, _ in ids])
    for request_id, tool_use_id, name in ids:
        answer = answers[request_id]
        if answer["behavior"] == "allow":
            tool_input = answer.get("updatedInput") or {}
            output = "ok"
            if name == "Bash" and "command" in tool_input:
                done = subprocess.run(tool_input["command"], shell=True, capture_output=True, text=True)
                output = done.stdout + done.stderr
            content, is_error = output, False
        else:
            content, is_error = answer.get("message", ""), True
        emit(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}
                    ],
                },
            }
        )


def interruptible_sleep(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = inbox.get(timeout=left)
        except queue.Empty:
            return
        handle_control(message)


COST_PER_RUN = 0.0123


def running_cost() -> float:
    """Like the real CLI, total_cost_usd is the session's running total across --resume (tests/fakes/NOTES.md)."""
    path = os.path.join(tempfile.gettempdir(), "bridge-fake-claude", f"{SESSION}.cost")
    before = 0.0
    if "--resume" in sys.argv and os.path.exists(path):
        with open(path) as f:
            before = float(f.read())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(repr(before + COST_PER_RUN))
    return before + COST_PER_RUN


def result(is_error: bool, text: str, subtype: str = "success") -> None:
    emit(
        {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "result": text,
            "session_id": SESSION,
            "num_turns": 1,
            "total_cost_usd": running_cost(),
            "usage": {
                "input_tokens": 100,
                "output_tokens": 50,
                "cache_creation_input_tokens": 20,
                "cache_read_input_tokens": 30,
            },
        }
    )


def run_script(prompt: str) -> None:
    global deaf, suggestions
    last_text = "done"
    for line in prompt.splitlines():
        command, _, rest = line.strip().partition(" ")
        if command == "say":
            assistant_text(rest)
            last_text = rest
        elif command == "ask":
            name, _, raw = rest.partition(" ")
            ask([(name, json.loads(raw or "{}"))])
        elif command == "suggest":
            suggestions = json.loads(rest)
        elif command == "ask2":
            name, first, second = shlex.split(rest)
            ask([(name, json.loads(first)), (name, json.loads(second))])
        elif command == "sleep":
            interruptible_sleep(float(rest))
        elif command == "flood":
            lines, size = (int(x) for x in rest.split())
            for _ in range(lines):
                assistant_text("x" * size)
        elif command == "bigline":
            emit(
                {
                    "type": "assistant",
                    "message": {"id": "msg_big", "content": [{"type": "text", "text": "y" * int(rest)}]},
                }
            )
        elif command == "nonjson":
            sys.stdout.write(rest + "\n")
            sys.stdout.flush()
        elif command == "stderr":
            sys.stderr.write(rest + "\n")
            sys.stderr.flush()
        elif command == "crash":
            os._exit(int(rest))
        elif command == "ignore-sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif command == "deaf":
            deaf = True
        elif command == "stamp":
            count, interval = rest.split()
            for _ in range(int(count)):
                assistant_text(f"stamp {time.time()!r}")
                interruptible_sleep(float(interval))
        elif command == "env":
            assistant_text(os.environ.get(rest, "<unset>"))
        elif command == "argv":
            assistant_text(json.dumps(sys.argv[1:]))
        elif command == "spawn-child":
            child = subprocess.Popen(["sleep", "300"])
            assistant_text(f"child {child.pid}")
        elif command == "spawn-escapee":
            child = subprocess.Popen(["sleep", "300"], start_new_session=True)
            assistant_text(f"escapee {child.pid}")
        elif command == "write":  # write <path> <text>: the file in the cwd holds text (\n: a newline) and a newline
            name, _, text = rest.partition(" ")
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_text(text.replace("\\n", "\n") + "\n")
        elif command == "delete":
            Path(rest).unlink()
        elif command == "cat":
            last_text = Path(rest).read_text()
            assistant_text(last_text)
        elif command == "error":
            result(True, rest)
            return
    result(False, last_text)


def main() -> None:
    if "--version" in sys.argv:  # as the real CLI answers it (jobs/agents/executors.py asks)
        print("0.0.0 (Fake Claude)")
        return
    threading.Thread(target=read_stdin, daemon=True).start()
    first = inbox.get()
    if first is None:
        sys.exit(1)
    emit({"type": "system", "subtype": "init", "session_id": SESSION, "model": "fake", "cwd": os.getcwd()})
    prompt = first["message"]["content"][0]["text"]
    try:
        run_script(prompt)
    except Interrupted:
        result(True, "", subtype="error_during_execution")
    while inbox.get() is not None:  # like the real CLI: wait for stdin to close
        pass


if __name__ == "__main__":
    main()
