"""Replaying a recorded ACP session (tests/fixtures/<agent>/acp_*.jsonl, `{"dir": "in"|"out"|"exit", "msg"|"code"}`
a line) through a runner, for the ACP runners' unit tests."""

import json
from pathlib import Path

from jobs.supervision.runners.acp import AcpRunner
from jobs.supervision.runners.base import Decision, Step

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def transcript(agent: str, name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / agent / f"acp_{name}.jsonl").read_text().splitlines()]


def sent(agent: str, name: str) -> list[dict]:
    """What the recording client wrote."""
    return [entry["msg"] for entry in transcript(agent, name) if entry["dir"] == "out"]


def replay(
    runner: AcpRunner, agent: str, name: str, decision: str = "", until_asked: bool = False
) -> tuple[list[Step], list[dict]]:
    """Feed what the agent printed to `runner` (`until_asked`: up to its first permission request); return its steps
    and what it wrote (its start lines, its replies, and its answer to each permission request when a `decision`
    status is given)."""
    written = [json.loads(line) for line in runner.stdin_lines()]
    steps = []
    for entry in transcript(agent, name):
        if entry["dir"] == "in":
            step = runner.on_line(json.dumps(entry["msg"]).encode() + b"\n")
            steps.append(step)
            written += [json.loads(line) for line in step.replies]
            for ask in step.asks if decision else []:
                written.append(json.loads(runner.answer(Decision(request_id=ask.request_id, status=decision))))
            if until_asked and step.asks:
                break
    return steps, written


def events(steps: list[Step], kind: str) -> list[dict]:
    return [data for step in steps for k, data in step.events if k == kind]
