"""Hermes Agent: ACP mode when it is installed, one-shot `hermes chat -q` otherwise.

BRIDGE_HERMES_MODE picks: `acp`, `oneshot`, or `auto` — ACP when the `acp` package is installed next to the
executable, unless the task asks for skills, toolsets or max_turns, which only one-shot mode can pass (Hermes 0.19's
ACP server takes no such settings). See docs/architecture.md, "Hermes Agent".
"""

import re

from django.conf import settings

from jobs.hermes_skills import acp_installed
from jobs.runners.acp import AcpRunner
from jobs.runners.base import Decision, Outcome, Runner, RunSpec, Step
from jobs.vocabulary import PermissionMode, Status

SESSION_ID_RE = re.compile(r"^session_id:\s*(\S+)\s*$", re.MULTILINE)
DEFAULT_MAX_TURNS = 90  # Hermes' own default
ONESHOT_ONLY_OPTIONS = ("skills", "toolsets", "max_turns")


def hermes_mode(spec: RunSpec) -> str:
    """`acp` or `oneshot` for this task, from BRIDGE_HERMES_MODE and what is installed."""
    mode = settings.BRIDGE_HERMES_MODE
    if mode in ("acp", "oneshot"):
        return mode
    if any(spec.options.get(name) for name in ONESHOT_ONLY_OPTIONS):
        return "oneshot"
    return "acp" if acp_installed(settings.BRIDGE_HERMES_BIN) else "oneshot"


class HermesAcpRunner(AcpRunner):
    """`hermes acp`: streams, relays every permission question and cancels (default mode asks for each edit)."""

    agent_label = "Hermes"
    executable_setting = "BRIDGE_HERMES_BIN"

    def command(self) -> list[str]:
        return [settings.BRIDGE_HERMES_BIN, "acp"]

    def session_setup(self) -> list[tuple[str, dict]]:
        """skip_permissions: Hermes' `dont_ask` mode applies edits without asking (dangerous commands still ask)."""
        calls = super().session_setup()
        if self.spec.permission_mode == PermissionMode.SKIP:
            calls.append(("session/set_mode", {"sessionId": self.session_id, "modeId": "dont_ask"}))
        return calls

    def _on_initialized(self, result: dict) -> Step:
        """BRIDGE_HERMES_MODE=acp with options only one-shot can pass: run anyway, and say what was left out."""
        step = super()._on_initialized(result)
        options = self.spec.options
        ignored = {name: options[name] for name in ONESHOT_ONLY_OPTIONS if options.get(name)}
        if ignored:
            reason = "Hermes' ACP mode cannot pass these; BRIDGE_HERMES_MODE=auto runs such tasks in one-shot mode"
            step.events.append(("ignored_options", {"options": ignored, "reason": reason}))
        return step


class HermesOneShotRunner(Runner):
    """`hermes chat -q <task> -Q`: the answer arrives at exit; the exit code is the only reliable verdict."""

    executable_setting = "BRIDGE_HERMES_BIN"
    uses_stdin = False

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.lines: list[str] = []

    def argv(self) -> list[str]:
        options = self.spec.options
        max_turns = int(options.get("max_turns") or DEFAULT_MAX_TURNS)
        # --query=TEXT, not -q TEXT: a task that starts with "-" must not read as a flag.
        argv = [settings.BRIDGE_HERMES_BIN, "chat", f"--query={self.spec.prompt}", "-Q", "--max-turns", str(max_turns)]
        if self.spec.resume_session_id:
            argv += ["--resume", self.spec.resume_session_id]
        if options.get("model"):
            argv += ["--model", str(options["model"])]
        for skill in options.get("skills") or []:
            argv += ["-s", str(skill)]
        if options.get("toolsets"):
            argv += ["-t", ",".join(str(t) for t in options["toolsets"])]
        if self.spec.permission_mode in (PermissionMode.BYPASS, PermissionMode.SKIP):
            argv.append("--yolo")  # no TTY to ask on: without it, dangerous commands are denied after 60 s
        argv += ["--source", "tool"]
        return argv

    def on_line(self, line: bytes) -> Step:
        text = line.decode(errors="replace").rstrip("\n")
        self.lines.append(text)
        return Step(events=[("output", {"text": text})])

    def on_exit(self, stderr_tail: str) -> Step:
        match = SESSION_ID_RE.findall(stderr_tail)
        return Step(session_id=match[-1] if match else None)

    def answer(self, decision: Decision) -> bytes:
        raise NotImplementedError("one-shot Hermes never asks: it has no channel for permission questions")

    def outcome(self, exit_code: int, stderr_tail: str) -> Outcome:
        text = "\n".join(self.lines).strip()
        if exit_code == 0:
            return Outcome(Status.DONE, exit_code=exit_code, result=text)
        words = text or SESSION_ID_RE.sub("", stderr_tail).strip()[-2000:]
        error = f"hermes exited with code {exit_code}" + (f": {words}" if words else "")
        return Outcome(Status.FAILED, exit_code=exit_code, result=text, error=error)


def hermes_runner(spec: RunSpec) -> Runner:
    return HermesAcpRunner(spec) if hermes_mode(spec) == "acp" else HermesOneShotRunner(spec)
