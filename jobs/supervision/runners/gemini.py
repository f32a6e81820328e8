"""Gemini CLI over ACP (`gemini --acp`): where it departs from the protocol, as observed on the wire with 0.61
(tests/fakes/GEMINI_NOTES.md).

- Its turns carry no `usage`: the tokens are in the answer's `_meta.quota.token_count`.
- A mode change is announced as an agent message, `[MODE_UPDATE] <mode>`, as if the model had said it.
- `yolo` (Bridge's `skip`) is refused in a folder it does not trust: the run trusts its folder for that process.
- session/load answers before it replays the history, with no end marker; the replay ends with the
  `available_commands_update` it sends next, so the prompt waits for that.
- A permission request carries no `rawInput`; a shell command's title is the command itself, given as the request's
  `command`, and a file write names its file in `locations`, given as `file_path` (Qwen Code's shapes), so that
  `Bash(...)` and `Edit(...)` rules match them (jobs/core/permission_rules.py).
"""

from jobs.core.vocabulary import PermissionMode
from jobs.supervision.runners.acp import HISTORY_KIND, clip, content_text
from jobs.supervision.runners.base import Step
from jobs.supervision.runners.declared import DeclaredAcpRunner

MODE_UPDATE_PREFIX = "[MODE_UPDATE]"
REPLAY_END = "available_commands_update"


class GeminiRunner(DeclaredAcpRunner):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.replaying = False  # after session/load's answer, until the replay's end
        self.held: list[bytes] = []  # what waits for the replay to end: the setup calls and the prompt

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.spec.permission_mode == PermissionMode.SKIP:
            env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"  # else `yolo` fails: "Cannot enable privileged approval modes"
        return env

    def _on_session(self, method: str, result: dict) -> Step:
        step = super()._on_session(method, result)
        if method == "session/load" and not self.failure:
            self.replaying, self.held, step.replies = True, step.replies, []
        return step

    def _on_notification(self, message: dict) -> Step:
        update = (message.get("params") or {}).get("update") or {}
        kind = update.get("sessionUpdate", "")
        if self.replaying:
            if kind == REPLAY_END:
                self.replaying = False
                return Step(replies=self.held)
            return Step(events=[(HISTORY_KIND, {"update": kind, "text": content_text(update.get("content"))})])
        if kind == "agent_message_chunk" and content_text(update.get("content")).startswith(MODE_UPDATE_PREFIX):
            return Step(events=[("mode", {"text": content_text(update.get("content"))})])
        return super()._on_notification(message)

    def permission_input(self, tool_call: dict) -> dict:
        """A shell command as `{command, description}` (its title, and what the model said of it), a file write as
        `{file_path, content}` (where, and the diff); the rest as any agent's."""
        title, kind = tool_call.get("title"), tool_call.get("kind")
        if kind == "execute" and isinstance(title, str) and title:
            return {"command": title, "description": clip(content_text(tool_call.get("content")))}
        locations = tool_call.get("locations") or []
        path = locations[0].get("path") if locations and isinstance(locations[0], dict) else None
        if kind == "edit" and isinstance(path, str) and path:
            return {"file_path": path, "content": clip(content_text(tool_call.get("content")))}
        return super().permission_input(tool_call)

    def usage(self) -> dict:
        meta = (self.prompt_result or {}).get("_meta") or {}
        tokens = (meta.get("quota") or {}).get("token_count") or {}
        return {"input_tokens": tokens.get("input_tokens"), "output_tokens": tokens.get("output_tokens")}
