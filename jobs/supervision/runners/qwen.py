"""Qwen Code over ACP (`qwen --acp`): where it departs from the protocol, as observed on the wire with 0.24
(tests/fakes/QWEN_NOTES.md).

- Its turns carry no `usage`: each model call reports its tokens in an empty agent message whose `_meta.usage` holds
  them; a load's replay repeats old ones, marked `_meta.qwenTranscript`, which are not counted again.
- Its default mode is `auto`, which asks a classifier model before each tool (tokens it does not report): a run
  is always started with `--approval-mode default` (Bridge is asked), or `yolo` (the preset's skip mode) for `skip`.
  On the command line, as recorded: it takes effect before the session exists, and costs no round trip.
"""

from jobs.core.vocabulary import PermissionMode
from jobs.supervision.runners.acp import content_text
from jobs.supervision.runners.base import RunSpec, Step
from jobs.supervision.runners.declared import DeclaredAcpRunner

ASKING_MODE = "default"
USAGE_FIELDS = {  # Qwen's `_meta.usage` names -> Bridge's token fields
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cachedReadTokens": "cache_read_input_tokens",
}


class QwenRunner(DeclaredAcpRunner):
    def __init__(self, spec: RunSpec, *args, **kwargs) -> None:
        super().__init__(spec, *args, **kwargs)
        self.tokens: dict[str, int] = {}

    def command(self) -> list[str]:
        skip = self.spec.permission_mode == PermissionMode.SKIP
        return [*super().command(), "--approval-mode", self.definition.skip_mode if skip else ASKING_MODE]

    def session_setup(self) -> list[tuple[str, dict]]:
        """The model, if the task names one; the mode is set on the command line already."""
        return [call for call in super().session_setup() if call[0] != "session/set_mode"]

    def _on_notification(self, message: dict) -> Step:
        update = (message.get("params") or {}).get("update") or {}
        meta = update.get("_meta") or {}
        if update.get("sessionUpdate") == "agent_message_chunk" and isinstance(meta.get("usage"), dict):
            if not self.loading and "qwenTranscript" not in meta:
                for theirs, ours in USAGE_FIELDS.items():
                    count = meta["usage"].get(theirs)
                    if isinstance(count, int):
                        self.tokens[ours] = self.tokens.get(ours, 0) + count
            if not content_text(update.get("content")):
                return Step()  # a report of tokens, not something the agent said
        return super()._on_notification(message)

    def usage(self) -> dict:
        return {name: self.tokens.get(name) for name in ("input_tokens", "output_tokens", "cache_read_input_tokens")}
