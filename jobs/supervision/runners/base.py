"""What the supervisor needs from an executor's protocol: one Runner subclass per agent.

A runner only translates: it builds the argv, turns each stdout line into events and permission questions,
and turns decisions back into lines. Processes, limits, the database and the clock belong to the supervisor, so a
runner sees plain data only (RunSpec in, Step and Outcome out, Decision in) and never imports the models.
"""

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from jobs.agents.executors import child_env
from jobs.core.vocabulary import Agent, PermissionMode, PermissionStatus


def dumps_line(message: dict) -> bytes:
    """One JSON line: agents die on (or drop) anything that is not valid JSON, so this is the only way we write."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def json_object(line: bytes) -> dict | None:
    """A stdout line as a JSON object, or None when it is anything else (kept then as plain output)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def plain_output(line: bytes) -> "Step":
    return Step(events=[("stdout", {"text": line.decode(errors="replace").rstrip("\n")})])


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What a runner needs to know about its task, copied from the task row before the run starts."""

    prompt: str
    cwd: str
    agent: str = Agent.CLAUDE  # an Agent value
    permission_mode: str = PermissionMode.APPROVE  # a PermissionMode value
    options: dict[str, Any] = field(default_factory=dict)
    resume_session_id: str = ""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The answer to one PermissionAsk, to pass back to the agent."""

    request_id: str
    status: str  # a PermissionStatus value: allowed, or denied / expired (both a deny to the agent)
    tool_input: dict = field(default_factory=dict)  # what the agent asked to run
    updated_input: dict | None = None  # the decider's edit of tool_input, if any
    message: str = ""  # why, for a deny

    @property
    def allowed(self) -> bool:
        return self.status == PermissionStatus.ALLOWED


@dataclass
class Outcome:
    """How a run ended, as the runner and supervisor saw it."""

    status: str
    exit_code: int | None = None
    result: str = ""
    error: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass
class PermissionAsk:
    request_id: str
    tool_name: str
    tool_input: dict
    tool_use_id: str = ""
    suggestions: list = field(default_factory=list)


@dataclass
class Step:
    """What one stdout line meant."""

    events: list[tuple[str, dict]] = field(default_factory=list)
    asks: list[PermissionAsk] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    replies: list[bytes] = field(default_factory=list)
    session_id: str | None = None
    finished: bool = False


class Runner(ABC):
    """One run of one task. Instances are used from a single thread."""

    executable_setting = ""  # the setting that names the executable, for messages when it cannot be started
    uses_stdin = True  # False: the child gets /dev/null (nothing to say after argv)

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    @abstractmethod
    def argv(self) -> list[str]: ...

    def env(self) -> dict[str, str]:
        return child_env()

    def stdin_lines(self) -> list[bytes]:
        """Lines written right after the child starts."""
        return []

    @abstractmethod
    def on_line(self, line: bytes) -> Step: ...

    def on_oversized_line(self, head: bytes, size: int) -> Step:
        """A line longer than BRIDGE_MAX_LINE_BYTES was cut; `head` is its start."""
        return Step()

    @abstractmethod
    def answer(self, decision: Decision) -> bytes:
        """The line that tells the child this decision."""

    def stop_lines(self) -> list[bytes]:
        """What to write to stop the child politely; none means the supervisor signals it at once."""
        return []

    def on_exit(self, stderr_tail: str) -> Step:
        """What the child said only at its end (e.g. a session id printed on stderr); called once, before outcome."""
        return Step()

    @abstractmethod
    def outcome(self, exit_code: int, stderr_tail: str) -> Outcome:
        """How the run ended, judged from what the child said, its exit code and its last stderr lines."""


class JsonLinesRunner(Runner):
    """A runner for an agent that speaks one JSON object a line; any other line is kept as plain output."""

    def on_line(self, line: bytes) -> Step:
        message = json_object(line)
        if message is None:
            return plain_output(line)
        return self.on_message(message)

    @abstractmethod
    def on_message(self, message: dict) -> Step:
        """What one JSON object from the agent meant."""
