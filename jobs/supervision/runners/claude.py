"""Claude Code CLI over stream-json, with permission questions relayed on stdio.

See docs/architecture.md, "Claude Code".
"""

import json
import re
import uuid

from django.conf import settings

from jobs.core.vocabulary import CLAUDE_PERMISSION_MODES, TOKEN_FIELDS, PermissionMode, Status
from jobs.supervision.runners.base import (
    Decision,
    JsonLinesRunner,
    Outcome,
    PermissionAsk,
    RunSpec,
    Step,
    dumps_line,
)

REQUEST_ID_RE = re.compile(rb'"request_id"\s*:\s*"([^"]{1,200})"')
TOOL_RESULT_TEXT_LIMIT = 64 * 1024


def user_line(text: str) -> bytes:
    return dumps_line(
        {
            "type": "user",
            "session_id": "",
            "parent_tool_use_id": None,
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }
    )


def control_response(request_id: str, response: dict) -> bytes:
    return dumps_line(
        {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}}
    )


def _tool_result_text(content: object) -> str:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(block.get("text", "") if isinstance(block, dict) else str(block) for block in content)
    else:
        text = json.dumps(content)
    if len(text) > TOOL_RESULT_TEXT_LIMIT:
        text = text[:TOOL_RESULT_TEXT_LIMIT] + f"\n… [{len(text) - TOOL_RESULT_TEXT_LIMIT} more characters]"
    return text


class ClaudeRunner(JsonLinesRunner):
    executable_setting = "BRIDGE_CLAUDE_BIN"

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.result: dict | None = None
        self.counted_messages: set[str] = set()
        self.partial_message_id = ""

    def argv(self) -> list[str]:
        """The CLI's command line. Every mode but `skip` keeps Bridge's relay (`--permission-prompt-tool stdio`):
        with Claude Code's own `acceptEdits` or `plan` (`--permission-mode`), Claude decides some tool calls itself
        (acceptEdits: it accepts file edits in the cwd and add_dirs; plan: it runs reads, changes nothing unasked)
        and asks for the rest, which Bridge relays to the planner as in `approve`."""
        options = self.spec.options
        argv = [
            settings.BRIDGE_CLAUDE_BIN,
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ]
        if self.spec.permission_mode == PermissionMode.SKIP:
            argv.append("--dangerously-skip-permissions")
        else:
            argv += ["--permission-prompt-tool", "stdio"]
        if self.spec.permission_mode in CLAUDE_PERMISSION_MODES:  # Claude decides some asks; the rest are relayed
            argv += ["--permission-mode", str(self.spec.permission_mode)]
        if settings.BRIDGE_CLAUDE_PARTIAL:
            argv.append("--include-partial-messages")
        if options.get("model"):
            argv += ["--model", str(options["model"])]
        if options.get("max_turns"):
            argv += ["--max-turns", str(int(options["max_turns"]))]
        argv += self._tool_and_context_flags(options)
        if self.spec.resume_session_id:
            argv += ["--resume", self.spec.resume_session_id]
        return argv

    @staticmethod
    def _tool_and_context_flags(options: dict) -> list[str]:
        """Which tools Claude may use without asking or not at all, and what it gets besides the prompt and cwd. A
        text or path goes in the same argv string as its flag (`--flag=value`): the CLI's options that take several
        values would otherwise take the next argument too, and a text may begin with '-'."""
        flags = []
        if options.get("allowed_tools"):
            flags += ["--allowedTools", ",".join(options["allowed_tools"])]
        if options.get("disallowed_tools"):
            flags += ["--disallowedTools", ",".join(options["disallowed_tools"])]
        if options.get("append_system_prompt"):
            flags.append(f"--append-system-prompt={options['append_system_prompt']}")
        flags += [f"--add-dir={directory}" for directory in options.get("add_dirs") or ()]
        return flags

    def stdin_lines(self) -> list[bytes]:
        return [user_line(self.spec.prompt)]

    def on_message(self, message: dict) -> Step:
        handler = getattr(self, "_on_" + str(message.get("type", "")), None)
        if handler is None:
            return Step(events=[("raw", message)])
        return handler(message)

    def _on_system(self, message: dict) -> Step:
        subtype = message.get("subtype")
        if subtype == "init":
            keep = ("session_id", "model", "cwd", "tools", "permissionMode", "claude_code_version")
            data = {k: message.get(k) for k in keep if k in message}
            return Step(events=[("init", data)], session_id=message.get("session_id"))
        if subtype == "api_retry":
            return Step(events=[("api_retry", message)])
        return Step(events=[("system", message)])

    def _on_stream_event(self, message: dict) -> Step:
        event = message.get("event") or {}
        if event.get("type") == "message_start":
            self.partial_message_id = (event.get("message") or {}).get("id", "")
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            data = {"message_id": self.partial_message_id, "index": event.get("index"), "text": delta.get("text", "")}
            return Step(events=[("text_delta", data)])
        return Step()

    def _on_assistant(self, message: dict) -> Step:
        """The CLI prints one line per content block; blocks of one API message share message.id."""
        body = message.get("message") or {}
        message_id = body.get("id", "")
        events = []
        for block in body.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                events.append(("text", {"message_id": message_id, "text": block.get("text", "")}))
            elif kind == "tool_use":
                data = {"message_id": message_id, "id": block.get("id"), "name": block.get("name")}
                events.append(("tool_use", {**data, "input": block.get("input")}))
            elif kind in ("thinking", "redacted_thinking"):
                events.append(("thinking", {"message_id": message_id, "text": block.get("thinking", "")}))
            else:
                events.append(("assistant_block", {"message_id": message_id, "block": block}))
        if message_id and message_id not in self.counted_messages and body.get("usage"):
            self.counted_messages.add(message_id)
            events.append(("usage", {"message_id": message_id, **body["usage"]}))
        return Step(events=events)

    def _on_user(self, message: dict) -> Step:
        events = []
        content = (message.get("message") or {}).get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or []:
            if block.get("type") == "tool_result":
                data = {
                    "tool_use_id": block.get("tool_use_id"),
                    "is_error": bool(block.get("is_error")),
                    "content": _tool_result_text(block.get("content")),
                }
                events.append(("tool_result", data))
            elif block.get("type") == "text":
                events.append(("user", {"text": block.get("text", "")}))
        return Step(events=events)

    def _on_result(self, message: dict) -> Step:
        self.result = message
        keep = (
            "subtype",
            "is_error",
            "result",
            "num_turns",
            "total_cost_usd",
            "usage",
            "duration_ms",
            "permission_denials",
            "terminal_reason",
            "session_id",
        )
        data = {k: message.get(k) for k in keep if k in message}
        return Step(events=[("result", data)], finished=True, session_id=message.get("session_id"))

    def _on_control_request(self, message: dict) -> Step:
        request_id = str(message.get("request_id", ""))
        request = message.get("request") or {}
        if request.get("subtype") == "can_use_tool":
            ask = PermissionAsk(
                request_id=request_id,
                tool_name=str(request.get("tool_name", "")),
                tool_input=request.get("input") or {},
                tool_use_id=str(request.get("tool_use_id") or ""),
                suggestions=request.get("permission_suggestions") or [],
            )
            return Step(asks=[ask])
        error = dumps_line(
            {
                "type": "control_response",
                "response": {
                    "subtype": "error",
                    "request_id": request_id,
                    "error": f"Bridge does not handle {request.get('subtype')!r} requests",
                },
            }
        )
        return Step(events=[("control_request", message)], replies=[error])

    def _on_control_cancel_request(self, message: dict) -> Step:
        return Step(withdrawn=[str(message.get("request_id", ""))])

    def _on_control_response(self, message: dict) -> Step:
        return Step(events=[("control_response", message.get("response") or {})])

    def on_oversized_line(self, head: bytes, size: int) -> Step:
        """A permission question too large to read still gets an answer, or the CLI would wait forever."""
        match = REQUEST_ID_RE.search(head)
        if b'"control_request"' in head and match:
            message = (
                f"Bridge could not read this request: it is {size} bytes, over BRIDGE_MAX_LINE_BYTES "
                f"({settings.BRIDGE_MAX_LINE_BYTES}). Try a smaller input."
            )
            reply = control_response(
                match.group(1).decode(), {"behavior": "deny", "message": message, "interrupt": False}
            )
            return Step(replies=[reply])
        return Step()

    def answer(self, decision: Decision) -> bytes:
        if decision.allowed:
            updated = decision.updated_input if decision.updated_input is not None else decision.tool_input
            return control_response(decision.request_id, {"behavior": "allow", "updatedInput": updated})
        return control_response(
            decision.request_id, {"behavior": "deny", "message": decision.message, "interrupt": False}
        )

    def stop_lines(self) -> list[bytes]:
        """The CLI's interrupt: it withdraws pending permission requests and ends the turn with a result."""
        request = {"subtype": "interrupt"}
        return [
            dumps_line({"type": "control_request", "request_id": f"bridge-{uuid.uuid4().hex[:12]}", "request": request})
        ]

    def outcome(self, exit_code: int, stderr_tail: str) -> Outcome:
        result = self.result
        if result is None:
            error = f"claude exited with code {exit_code} without a result line"
            last_words = stderr_tail.strip()[-2000:]
            if last_words:
                error += f": {last_words}"
            return Outcome(status=Status.FAILED, exit_code=exit_code, error=error)
        usage = result.get("usage") or {}
        recorded = {
            "cost_usd": result.get("total_cost_usd"),
            "num_turns": result.get("num_turns"),
            **{key: usage.get(key) for key in TOKEN_FIELDS},
        }
        text = result.get("result") or ""
        if result.get("is_error") or result.get("subtype") != "success":
            reason = text
            if not reason:
                reason = str(result.get("subtype") or "error")
                if result.get("terminal_reason"):
                    reason += f" ({result['terminal_reason']})"
                if result.get("errors"):
                    reason += ": " + "; ".join(str(e) for e in result["errors"])
            return Outcome(status=Status.FAILED, exit_code=exit_code, result=text, error=reason, usage=recorded)
        return Outcome(status=Status.DONE, exit_code=exit_code, result=text, usage=recorded)
