"""Hermes Agent: ACP mode when it is installed, one-shot `hermes chat -q` otherwise.

BRIDGE_HERMES_MODE picks: `acp`, `oneshot`, or `auto` — ACP when the `acp` package is installed next to the
executable, unless the task asks for skills, toolsets or max_turns, which only one-shot mode can pass (Hermes 0.19's
ACP server takes no such settings). See docs/architecture.md, "Hermes Agent".

The task never travels in argv: ACP sends it in `session/prompt`, one-shot mode on stdin through hermes_launch.py.
"""

import json
import re
import sys
from pathlib import Path

from django.conf import settings

from jobs.agents.executors import child_env
from jobs.agents.hermes_skills import ONESHOT_ONLY_OPTIONS, hermes_executable, run_mode
from jobs.core.vocabulary import PermissionMode, Status
from jobs.supervision.runners.acp import AcpRunner
from jobs.supervision.runners.base import Decision, Outcome, Runner, RunSpec, Step

SESSION_ID_RE = re.compile(r"^session_id:\s*(\S+)\s*$", re.MULTILINE)
DEFAULT_MAX_TURNS = 90  # Hermes' own default
LAUNCHER = Path(__file__).with_name("hermes_launch.py")
# pip's second line when the interpreter's path is too long (or spaced) for a #! line: '''exec' "<python>" "$0" "$@"
PIP_TRAMPOLINE_RE = re.compile(r"""^'''exec' "?(.+?)"? "\$0" "\$@"$""")

# The LLM provider variables Hermes 0.19 reads (hermes_cli/auth.py PROVIDER_REGISTRY, its model-provider plugins,
# and the `provider` entries of hermes_cli/config.py OPTIONAL_ENV_VARS): Hermes children inherit them. ANTHROPIC_*,
# CLAUDE_* and HERMES_* pass anyway. Not here, being wider than one LLM provider: AWS access keys,
# GOOGLE_APPLICATION_CREDENTIALS, GH_TOKEN/GITHUB_TOKEN (Copilot) — name those in BRIDGE_PASS_ENV. Hermes also reads
# $HERMES_HOME/.env by itself.
HERMES_PROVIDER_ENV = (
    *("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL"),
    *("NOUS_API_KEY", "NOUS_BASE_URL", "NOUS_PORTAL_BASE_URL", "NOUS_INFERENCE_BASE_URL"),
    *("CUSTOM_API_KEY", "CUSTOM_BASE_URL", "GOOGLE_API_KEY", "GEMINI_API_KEY", "GEMINI_BASE_URL"),
    *("VERTEX_CREDENTIALS_PATH", "VERTEX_PROJECT_ID", "VERTEX_REGION"),
    *("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "BEDROCK_BASE_URL"),
    *("AZURE_FOUNDRY_API_KEY", "AZURE_FOUNDRY_BASE_URL", "AZURE_ANTHROPIC_KEY"),
    *("DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL", "XAI_API_KEY", "XAI_BASE_URL", "GROQ_API_KEY", "MISTRAL_API_KEY"),
    *("FIREWORKS_API_KEY", "DEEPINFRA_API_KEY", "DEEPINFRA_BASE_URL", "NOVITA_API_KEY", "NOVITA_BASE_URL"),
    *("NVIDIA_API_KEY", "NVIDIA_BASE_URL", "HF_TOKEN", "HF_BASE_URL", "OLLAMA_API_KEY", "OLLAMA_BASE_URL"),
    *("GLM_API_KEY", "ZAI_API_KEY", "Z_AI_API_KEY", "GLM_BASE_URL"),
    *("KIMI_API_KEY", "KIMI_CODING_API_KEY", "KIMI_CN_API_KEY", "KIMI_BASE_URL"),
    *("MINIMAX_API_KEY", "MINIMAX_BASE_URL", "MINIMAX_CN_API_KEY", "MINIMAX_CN_BASE_URL"),
    *("DASHSCOPE_API_KEY", "DASHSCOPE_BASE_URL", "ALIBABA_CODING_PLAN_API_KEY", "ALIBABA_CODING_PLAN_BASE_URL"),
    *("QWEN_API_KEY", "STEPFUN_API_KEY", "STEPFUN_BASE_URL", "ARCEEAI_API_KEY", "ARCEE_BASE_URL"),
    *("GMI_API_KEY", "GMI_BASE_URL", "UPSTAGE_API_KEY", "UPSTAGE_BASE_URL", "XIAOMI_API_KEY", "XIAOMI_BASE_URL"),
    *("TOKENHUB_API_KEY", "TOKENHUB_BASE_URL", "KILOCODE_API_KEY", "KILOCODE_BASE_URL"),
    *("OPENCODE_ZEN_API_KEY", "OPENCODE_ZEN_BASE_URL", "OPENCODE_GO_API_KEY", "OPENCODE_GO_BASE_URL"),
    *("LM_API_KEY", "LM_BASE_URL", "COPILOT_GITHUB_TOKEN", "COPILOT_API_BASE_URL", "COPILOT_ACP_BASE_URL"),
)


def hermes_env() -> dict[str, str]:
    return child_env(names=HERMES_PROVIDER_ENV)


def script_interpreter(script: Path) -> list[str] | None:
    """The Python a console script runs in, from its first lines (`#!<python>`, `#!/usr/bin/env python3`, or pip's
    /bin/sh trampoline); None when they name none (a shell wrapper, a binary)."""
    try:
        lines = script.read_bytes()[:2048].decode().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or not lines[0].startswith("#!"):
        return None
    words = lines[0][2:].split()
    command = words[1:] if words and Path(words[0]).name == "env" else words
    command = [word for word in command if not word.startswith("-")][:1]
    if command and Path(command[0]).name.startswith("python"):
        return words
    match = PIP_TRAMPOLINE_RE.match(lines[1]) if len(lines) > 1 else None
    return [match.group(1)] if match else None


def hermes_mode(spec: RunSpec) -> str:
    """`acp` or `oneshot` for this task (jobs/agents/hermes_skills.py decides; the task page shows the same)."""
    return run_mode(spec.options, spec.resume_session_id)


class HermesAcpRunner(AcpRunner):
    """`hermes acp`: streams, relays every permission question and cancels (default mode asks for each edit)."""

    agent_label = "Hermes"
    executable_setting = "BRIDGE_HERMES_BIN"

    def command(self) -> list[str]:
        return [settings.BRIDGE_HERMES_BIN, "acp"]

    def env(self) -> dict[str, str]:
        return hermes_env()

    def session_setup(self) -> list[tuple[str, dict]]:
        """skip_permissions: Hermes' `dont_ask` mode applies edits without asking (dangerous commands still ask)."""
        calls = super().session_setup()
        if self.spec.permission_mode == PermissionMode.SKIP:
            calls.append(("session/set_mode", {"sessionId": self.session_id, "modeId": "dont_ask"}))
        return calls

    def _on_notification(self, message: dict) -> Step:
        """The model is talking again, so Hermes stopped waiting for its open questions (it denies by itself after
        60 s, without telling the client): close them rather than let a late answer look effective."""
        step = super()._on_notification(message)
        if any(kind in ("text_delta", "thinking_delta") for kind, _ in step.events):
            step.withdrawn.extend(self.pending_asks)
            self.pending_asks.clear()
            for bridge_id in step.withdrawn:
                self.ask_options.pop(bridge_id, None)
        return step

    def stop_lines(self) -> list[bytes]:
        """Deny what is pending, then session/cancel: cancelling with a permission open wedges Hermes 0.19."""
        if not self.session_id or self.prompt_result is not None:
            return []
        lines = [self._outcome_line(bridge_id, allow=False) for bridge_id in list(self.pending_asks)]
        return [*lines, self._cancel_line()]

    def outcome(self, exit_code: int, stderr_tail: str) -> Outcome:
        """Hermes 0.19 reports a failed model call as ordinary text, ending its turn `end_turn` without `usage`
        (tests/fakes/HERMES_NOTES.md): that turn failed. An agent that follows the protocol may leave usage out."""
        result = self.prompt_result
        if result is not None and not self.failure and result.get("stopReason") == "end_turn" and "usage" not in result:
            text = self.final_text()
            error = text or "Hermes ended its turn without calling the model"
            return Outcome(Status.FAILED, exit_code=exit_code, result=text, error=error)
        return super().outcome(exit_code, stderr_tail)

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
    """`hermes chat --query=<task> -Q`: the answer arrives at exit; the exit code is the only reliable verdict.

    The task goes to hermes_launch.py on stdin (Hermes 0.19 has no stdin or file option for it), which adds the
    `--query=` inside Hermes' own interpreter: never in argv, where `ps` shows it and Linux caps it at 128 KiB.
    """

    executable_setting = "BRIDGE_HERMES_BIN"

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.lines: list[str] = []

    def argv(self) -> list[str]:
        script = hermes_executable()
        if script is None:  # not there: the spawn fails, and the message names BRIDGE_HERMES_BIN
            return [settings.BRIDGE_HERMES_BIN, *self.hermes_args()]
        # No Python named (a shell wrapper, say): Bridge's own runs the launcher, which says what is wrong.
        python = script_interpreter(script) or [sys.executable]
        return [*python, str(LAUNCHER), str(script), *self.hermes_args()]

    def stdin_lines(self) -> list[bytes]:
        return [json.dumps({"query": self.spec.prompt}).encode() + b"\n"]  # ASCII JSON: one line, any str encodes

    def env(self) -> dict[str, str]:
        return hermes_env()

    def hermes_args(self) -> list[str]:
        """Hermes' arguments after its executable, all but the task (hermes_launch.py adds that)."""
        options = self.spec.options
        max_turns = int(options.get("max_turns") or DEFAULT_MAX_TURNS)
        argv = ["chat", "-Q", "--max-turns", str(max_turns)]
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
