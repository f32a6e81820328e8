"""Claude Code through Zed's ACP adapter (`claude-agent-acp`, 0.101): where it departs from the protocol, as observed
on the wire (tests/fakes/CLAUDE_ACP_NOTES.md).

- Every session starts in its `auto` mode, where Claude Code decides alone, and a loaded one keeps the mode it was
  recorded with: a run always sets `default` (Bridge is asked), or the preset's skip mode for `skip`.
- It has no `session/set_model`: a task's model goes in ANTHROPIC_MODEL.
- A cancel alone ends its turn, and it withdraws its own pending requests: answering them `cancelled` as well let
  Claude Code call the model once more in 2 of 10 recorded runs, so only the cancel is sent.
"""

from jobs.core.vocabulary import PermissionMode
from jobs.supervision.runners.declared import DeclaredAcpRunner

ASKING_MODE = "default"


class ClaudeAcpRunner(DeclaredAcpRunner):
    def env(self) -> dict[str, str]:
        env = super().env()
        model = self.spec.options.get("model")
        if model:
            env["ANTHROPIC_MODEL"] = str(model)
        return env

    def session_setup(self) -> list[tuple[str, dict]]:
        """The mode, always; the model went in the environment."""
        skip = self.spec.permission_mode == PermissionMode.SKIP
        mode = self.definition.skip_mode if skip else ASKING_MODE
        return [("session/set_mode", {"sessionId": self.session_id, "modeId": mode})]

    def stop_lines(self) -> list[bytes]:
        if not self.session_id or self.prompt_result is not None:
            return []
        return [self._cancel_line()]
