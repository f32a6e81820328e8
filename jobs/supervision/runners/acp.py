"""A generic Agent Client Protocol (v1) client: JSON-RPC 2.0, one JSON object per line on the child's stdio.

The run is initialize → session/new (or session/load to resume) → [session/set_model] → one session/prompt; its
answer (`stopReason`) ends the task. session/update notifications become events; session/request_permission
requests go through Bridge's PermissionRequest pipeline. A subclass names the command: hermes.py for Hermes, and
declared.py for every other ACP agent (the presets and those declared in BRIDGE_AGENTS_FILE). The protocol's rules
live here; an agent's departures from them live in its own module.
"""

import json
from typing import Any

from jobs.core.vocabulary import Status
from jobs.supervision.runners.base import (
    Decision,
    JsonLinesRunner,
    Outcome,
    PermissionAsk,
    RunSpec,
    Step,
    dumps_line,
)

PROTOCOL_VERSION = 1
TOOL_TEXT_LIMIT = 64 * 1024
HISTORY_KIND = "history"
# Notifications not worth a transcript line (Hermes sends its whole slash-command list on every prompt).
IGNORED_UPDATES = frozenset({"available_commands_update"})
METHOD_NOT_FOUND = -32601


def request_line(request_id: int, method: str, params: dict) -> bytes:
    return dumps_line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def content_text(content: Any) -> str:
    """The text inside an ACP content block, a tool-call content list, or a diff."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(filter(None, (content_text(item) for item in content)))
    if not isinstance(content, dict):
        return ""
    if content.get("type") == "text":
        return str(content.get("text", ""))
    if content.get("type") == "content":
        return content_text(content.get("content"))
    if content.get("type") == "diff":
        return f"--- {content.get('path', '')}\n{content.get('newText', '')}"
    return ""


def clip(text: str) -> str:
    if len(text) > TOOL_TEXT_LIMIT:
        return text[:TOOL_TEXT_LIMIT] + f"\n… [{len(text) - TOOL_TEXT_LIMIT} more characters]"
    return text


def pick_option(options: list[dict], allow: bool) -> str | None:
    """The optionId for a one-time allow or deny; ACP option kinds are allow_once/allow_always/reject_*."""
    wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    for kind in wanted:
        for option in options:
            if option.get("kind") == kind:
                return str(option.get("optionId"))
    return None


class AcpRunner(JsonLinesRunner):
    """One prompt in one ACP session. A subclass gives `command()`, `agent_label` and `executable_setting`, and may
    add to `session_setup()`."""

    agent_label = "the ACP agent"

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.next_id = 1
        self.calls: dict[int, str] = {}  # our request id -> method
        self.session_id = ""
        self.loading = False
        self.message_parts: list[str] = []  # the agent message being streamed, until a tool call or the end
        self.last_message = ""  # the result, as Claude's and one-shot Hermes' are: the final message
        self.prompt_result: dict | None = None
        self.failure = ""
        self.pending_asks: dict[str, Any] = {}  # Bridge request id -> the agent's JSON-RPC id (may be 0)
        self.ask_options: dict[str, list[dict]] = {}

    # --- what subclasses give -----------------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def argv(self) -> list[str]:
        return self.command()

    def session_setup(self) -> list[tuple[str, dict]]:
        """Calls made once the session exists, before the prompt: the task's model, if it names one."""
        model = self.spec.options.get("model")
        if model:
            return [("session/set_model", {"sessionId": self.session_id, "modelId": str(model)})]
        return []

    # --- writing --------------------------------------------------------------------------------------------
    def _call(self, method: str, params: dict) -> bytes:
        request_id = self.next_id
        self.next_id += 1
        self.calls[request_id] = method
        return request_line(request_id, method, params)

    def stdin_lines(self) -> list[bytes]:
        capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        return [self._call("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": capabilities})]

    def _prompt(self) -> bytes:
        return self._call(
            "session/prompt", {"sessionId": self.session_id, "prompt": [{"type": "text", "text": self.spec.prompt}]}
        )

    # --- reading --------------------------------------------------------------------------------------------
    def on_message(self, message: dict) -> Step:
        if "method" in message and "id" in message:
            return self._on_request(message)
        if "method" in message:
            return self._on_notification(message)
        if "id" in message:
            return self._on_response(message)
        return Step(events=[("raw", message)])

    def _on_response(self, message: dict) -> Step:
        method = self.calls.pop(message["id"], "")  # "id" in message: on_message sent it here
        error = message.get("error")
        if error is not None:
            what = method or "a request"
            return self._fail(f"{self.agent_label} answered {what} with an error: {self._error(error)}")
        result = message.get("result")
        result = result if isinstance(result, dict) else {}
        if method == "initialize":
            return self._on_initialized(result)
        if method in ("session/new", "session/load"):
            return self._on_session(method, result)
        if method == "session/prompt":
            return self._on_prompt_result(result)
        return Step(events=[("acp_response", {"method": method, "result": result})])

    def _on_initialized(self, result: dict) -> Step:
        capabilities = result.get("agentCapabilities") or {}
        data = {"agent": result.get("agentInfo"), "protocolVersion": result.get("protocolVersion")}
        resume_id = self.spec.resume_session_id
        cwd = self.spec.cwd
        if resume_id:
            if not capabilities.get("loadSession"):
                return self._fail(
                    f"{self.agent_label} cannot resume sessions (its initialize answer offers no loadSession): start "
                    "a new task instead"
                )
            self.loading = True
            line = self._call("session/load", {"sessionId": resume_id, "cwd": cwd, "mcpServers": []})
        else:
            line = self._call("session/new", {"cwd": cwd, "mcpServers": []})
        return Step(events=[("agent_info", data)], replies=[line])

    def _on_session(self, method: str, result: dict) -> Step:
        self.loading = False
        if method == "session/load":
            if not result:  # Hermes 0.19 answers an unknown session id with {} instead of an error
                return self._fail(
                    f"{self.agent_label} has no session {self.spec.resume_session_id!r} to resume "
                    "(session/load answered with nothing): check the id and that it is the same agent home"
                )
            self.session_id = self.spec.resume_session_id
        else:
            self.session_id = str(result.get("sessionId") or "")
            if not self.session_id:
                return self._fail(f"{self.agent_label} answered session/new without a sessionId")
        modes = result.get("modes") or {}
        data = {"session_id": self.session_id, "resumed": method == "session/load", "mode": modes.get("currentModeId")}
        replies = [self._call(method, params) for method, params in self.session_setup()]
        replies.append(self._prompt())
        return Step(events=[("init", data)], replies=replies, session_id=self.session_id)

    def _on_prompt_result(self, result: dict) -> Step:
        self.prompt_result = result
        events = self._end_message()
        data = {"stopReason": result.get("stopReason"), "usage": result.get("usage"), "result": self.final_text()}
        return Step(events=[*events, ("result", data)], finished=True)

    def _end_message(self) -> list[tuple[str, dict]]:
        """The whole text of the message just streamed, as one `text` event (the deltas were shown already)."""
        text = "".join(self.message_parts).strip()
        self.message_parts = []
        if not text:
            return []
        self.last_message = text
        return [("text", {"text": text})]

    def _fail(self, reason: str) -> Step:
        """Something that makes the run pointless: say why, and end it (closing stdin ends an ACP agent)."""
        self.failure = self.failure or reason
        return Step(events=[("error", {"message": reason})], finished=True)

    @staticmethod
    def _error(error: Any) -> str:
        if not isinstance(error, dict):
            return str(error)
        text = f"{error.get('message', 'error')} ({error.get('code')})"
        data = error.get("data")
        if data:
            text += f": {json.dumps(data) if not isinstance(data, str) else data}"
        return text

    def _on_notification(self, message: dict) -> Step:
        if message.get("method") != "session/update":
            return Step(events=[("acp_notification", message)])
        update = (message.get("params") or {}).get("update") or {}
        kind = update.get("sessionUpdate", "")
        if kind in IGNORED_UPDATES:
            return Step()
        if self.loading:
            return Step(events=[(HISTORY_KIND, {"update": kind, "text": content_text(update.get("content"))})])
        if kind == "agent_message_chunk":
            text = content_text(update.get("content"))
            self.message_parts.append(text)
            return Step(events=[("text_delta", {"text": text})])
        if kind == "agent_thought_chunk":
            return Step(events=[("thinking_delta", {"text": content_text(update.get("content"))})])
        if kind == "tool_call":
            return Step(events=self._end_message() + self._on_tool_call(update))
        if kind == "tool_call_update":
            return Step(events=self._on_tool_call_update(update))
        if kind == "plan":
            return Step(events=[("plan", {"entries": update.get("entries") or []})])
        if kind == "usage_update":
            return Step(events=[("context_usage", {"size": update.get("size"), "used": update.get("used")})])
        return Step(events=[("acp_update", update)])

    def _on_tool_call(self, update: dict) -> list[tuple[str, dict]]:
        data = {
            "id": str(update.get("toolCallId", "")),
            "name": update.get("title", ""),
            "kind": update.get("kind"),
            "input": update.get("rawInput"),
            "text": clip(content_text(update.get("content"))),
            "locations": update.get("locations") or [],
        }
        return [("tool_use", data)]

    def _on_tool_call_update(self, update: dict) -> list[tuple[str, dict]]:
        tool_call_id = str(update.get("toolCallId", ""))
        status = update.get("status")
        text = clip(content_text(update.get("content")))
        if status in ("completed", "failed"):
            return [("tool_result", {"tool_use_id": tool_call_id, "is_error": status == "failed", "content": text})]
        return [("tool_update", {"tool_use_id": tool_call_id, "status": status, "content": text})]

    def _on_request(self, message: dict) -> Step:
        request_id, method = message.get("id"), message.get("method")
        if method != "session/request_permission":
            reply = dumps_line(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": METHOD_NOT_FOUND, "message": f"Bridge does not offer {method!r}"},
                }
            )
            return Step(events=[("acp_request", {"method": method})], replies=[reply])
        params = message.get("params") or {}
        tool_call = params.get("toolCall") or {}
        bridge_id = json.dumps(request_id)  # 0 and "0" are different JSON-RPC ids; keep them apart
        self.pending_asks[bridge_id] = request_id
        self.ask_options[bridge_id] = params.get("options") or []
        ask = PermissionAsk(
            request_id=bridge_id,
            tool_name=str(tool_call.get("title") or tool_call.get("kind") or "tool"),
            tool_input=self.permission_input(tool_call),
            tool_use_id=str(tool_call.get("toolCallId") or ""),
            suggestions=self.ask_options[bridge_id],
        )
        return Step(asks=[ask])

    def permission_input(self, tool_call: dict) -> dict:
        """What a permission request shows and rules match as the tool's input: its `rawInput`, or, for an agent that
        sends none (the protocol makes it optional), its kind, where it acts and what it says about itself."""
        raw = tool_call.get("rawInput")
        if isinstance(raw, dict):
            return raw
        if raw is not None:
            return {"input": raw}
        return {
            "kind": tool_call.get("kind"),
            "title": tool_call.get("title"),
            "content": clip(content_text(tool_call.get("content"))),
            "locations": tool_call.get("locations") or [],
        }

    def answer(self, decision: Decision) -> bytes:
        """allow → the offered allow_once option, anything else → its deny option (ACP cannot change the input)."""
        return self._outcome_line(decision.request_id, decision.allowed)

    def _outcome_line(self, bridge_id: str, allow: bool | None) -> bytes:
        """The answer to one permission request: its allow or deny option, or `cancelled` (allow None, or no such
        option offered)."""
        agent_id = self.pending_asks.pop(bridge_id, json.loads(bridge_id))
        options = self.ask_options.pop(bridge_id, [])
        option_id = None if allow is None else pick_option(options, allow)
        outcome = {"outcome": "selected", "optionId": option_id} if option_id else {"outcome": "cancelled"}
        return dumps_line({"jsonrpc": "2.0", "id": agent_id, "result": {"outcome": outcome}})

    def _cancel_line(self) -> bytes:
        return dumps_line({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.session_id}})

    def stop_lines(self) -> list[bytes]:
        """session/cancel, then every pending permission request answered `cancelled`, as the protocol asks (an agent
        waiting on one may not see the cancel otherwise: Gemini CLI does not).

        Before a session exists there is nothing to cancel: an empty list makes the supervisor signal at once.
        """
        if not self.session_id or self.prompt_result is not None:
            return []
        return [self._cancel_line(), *(self._outcome_line(bridge_id, None) for bridge_id in list(self.pending_asks))]

    # --- the end --------------------------------------------------------------------------------------------
    def final_text(self) -> str:
        return "".join(self.message_parts).strip() or self.last_message

    def usage(self) -> dict:
        usage = (self.prompt_result or {}).get("usage") or {}
        return {
            "input_tokens": usage.get("inputTokens"),
            "output_tokens": usage.get("outputTokens"),
            "cache_read_input_tokens": usage.get("cachedReadTokens"),
            "cache_creation_input_tokens": usage.get("cachedWriteTokens"),
        }

    def outcome(self, exit_code: int, stderr_tail: str) -> Outcome:
        text = self.final_text()
        if self.failure:
            return Outcome(Status.FAILED, exit_code=exit_code, result=text, error=self.failure)
        result = self.prompt_result
        if result is None:
            error = f"{self.agent_label} exited with code {exit_code} before its turn ended"
            last_words = stderr_tail.strip()[-2000:]
            if last_words:
                error += f": {last_words}"
            return Outcome(Status.FAILED, exit_code=exit_code, result=text, error=error)
        stop_reason = result.get("stopReason")
        if stop_reason != "end_turn":
            error = f"{self.agent_label} stopped its turn: {stop_reason}"
            return Outcome(Status.FAILED, exit_code=exit_code, result=text, error=error, usage=self.usage())
        return Outcome(Status.DONE, exit_code=exit_code, result=text, usage=self.usage())
