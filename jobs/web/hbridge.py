"""hbridge's words and shapes, so a client written from hbridge's README and DESIGN works against Bridge unchanged.

Pure translation with no models and no Django: Bridge statuses to hbridge's status words, hbridge's
`taskTimeoutMs` to Bridge's `timeout_s`, and Bridge's transcript events to the SSE events hbridge sent (`connected`,
`chunk`, `tool_progress`, `permission_request`, `status`, `error`, `done`). The REST adapter and the SSE view both
use it; neither holds a rule of its own.

The stream carries both vocabularies. Each Bridge event keeps its name, `id:` (= seq) and `{seq, kind, data, time}`,
and also gets `type` (= its kind) and `task_id`. Where hbridge used the same name (`status`, `permission_request`,
`error`), that one event also carries hbridge's flat fields, so no client sees the same thing twice. hbridge's other
events (`connected`, `chunk`, `tool_progress`, the `error` of a failed task, `done`) come as their own events without
`id:`, each with `type` and `task_id`, so a client that reads only `data:` lines can tell every event apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs.core.errors import ErrorCode, InvalidInput
from jobs.core.vocabulary import TERMINAL_STATUSES, Status

CREATED = "created"
RUNNING = "running"
DONE = "done"
FAILED = "failed"
# The words hbridge's documented replies use for a task's status ("created" only in create's reply).
WORDS = (CREATED, RUNNING, DONE, FAILED)
TASK_WORDS = (RUNNING, DONE, FAILED)  # what `status_word` gives: a task's status once created

Frame = tuple[str, dict, int | None]  # (SSE event name, data payload, SSE id or None)


def status_word(status: str) -> str:
    """The hbridge word for a Bridge status.

    hbridge clients poll "until status is done or failed", and its Task Result Format lists exactly
    `done | failed | running`. So every end other than `done` (failed, cancelled, timeout, orphaned, and any end
    added later) reads `failed`, and every other status reads `running`: a queued task is one the client must keep
    waiting on, and `running` is the only waiting word hbridge documented (a client that checks the documented
    words, or treats an unknown one as an error, keeps polling on it; `pending` is hbridge's `retrieval_status`,
    not a task status). Bridge's exact status is always alongside, as `bridge_status`."""
    if status == Status.DONE:
        return DONE
    if status in TERMINAL_STATUSES:
        return FAILED
    return RUNNING


def status_fields(status: str, reason: str = "") -> dict[str, Any]:
    """`status` in hbridge's words and `bridge_status` in Bridge's; `reason` too when the task ended other than done."""
    fields: dict[str, Any] = {"status": status_word(status), "bridge_status": str(status)}
    if reason and status in TERMINAL_STATUSES and status != Status.DONE:
        fields["reason"] = reason
    return fields


def created_reply(task_id: str, status: str) -> dict[str, Any]:
    """Create's reply as hbridge gave it (`"status": "created"`), with Bridge's real status as `bridge_status`."""
    return {"task_id": task_id, "status": CREATED, "bridge_status": str(status)}


def timeout_seconds(timeout_s: int | None, task_timeout_ms: int | None) -> int | None:
    """The task's `timeout_s` from Bridge's `timeout_s` and hbridge's `taskTimeoutMs` (None: the server's default).

    Milliseconds round up to whole seconds. `taskTimeoutMs: 0` was hbridge's "no timeout of my own", its default,
    so it is the same as leaving it out: the server's BRIDGE_TASK_TIMEOUT_S applies (no limit when that is 0).
    Both given must agree."""
    if not task_timeout_ms:
        return timeout_s
    from_ms = -(-task_timeout_ms // 1000)
    if timeout_s is not None and timeout_s != from_ms:
        raise InvalidInput(
            f"timeout_s={timeout_s} and taskTimeoutMs={task_timeout_ms} (= {from_ms} s) disagree: give one of them",
            code=ErrorCode.CONFLICTING_TIMEOUTS,
        )
    return from_ms


def reason_of(data: dict) -> str:
    """Why a status event's task ended as it did (finish and orphaning record `error`, a dequeue `reason`)."""
    return str(data.get("error") or data.get("reason") or "")


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if start is None or end is None:
        return None
    try:
        return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)
    except (TypeError, ValueError):
        return None


@dataclass
class StreamTranslator:
    """One SSE stream's translation, fed Bridge events ({seq, kind, data, time}) in seq order.

    It remembers which messages streamed their text as deltas (their whole `text` block is then not sent again as a
    chunk) and when each tool started (for tool_progress's elapsed time). A stream resumed after seq N knows nothing
    before N unless `prime` is given the events just before it."""

    task_id: str
    streamed: set[str] = field(default_factory=set)  # message ids (or "" for id-less ACP messages) with deltas
    tools: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # tool use id -> (name, start time)

    def opened(self, status: str, reason: str = "") -> Frame:
        """hbridge's first event; `taskId` as its DESIGN spelled it, `task_id` as everywhere else."""
        payload = {"type": "connected", "task_id": self.task_id, "taskId": self.task_id}
        return "connected", {**payload, **status_fields(status, reason)}, None

    def prime(self, events: list[dict]) -> None:
        """Learn from events a resumed stream has already sent, without sending anything."""
        for event in events:
            self.translate(event)

    def translate(self, event: dict) -> list[Frame]:
        """Bridge's own event (with hbridge's flat fields where the name is shared), then hbridge's extra events."""
        kind = str(event.get("kind", ""))
        raw = event.get("data")
        data: dict = raw if isinstance(raw, dict) else {}
        own = {"type": kind, "task_id": self.task_id, **event, **self._flat(kind, data)}
        return [(kind, own, event.get("seq")), *self._extra(kind, data, event.get("time"))]

    def ending(self, status: str, exit_code: int | None, reason: str, last_seq: int) -> list[Frame]:
        """Bridge's `end`, then hbridge's last event, `done`."""
        end = {"type": "end", "task_id": self.task_id, "status": str(status), "last_seq": last_seq}
        done = {"type": "done", "task_id": self.task_id, **status_fields(status, reason), "exitCode": exit_code}
        return [("end", end, None), ("done", done, None)]

    # --- the parts ------------------------------------------------------------------------------------------------
    def _flat(self, kind: str, data: dict) -> dict:
        """hbridge's fields for the Bridge events whose name hbridge also used."""
        if kind == "status":
            return status_fields(str(data.get("status", "")), reason_of(data))
        if kind == "permission_request":
            keep = {k: data.get(k) for k in ("request_id", "tool_name", "input", "tool_use_id")}
            return {**keep, "permission_status": data.get("status")}  # not "pending" in bypass mode: decided
        if kind == "error":
            return {"error": str(data.get("message") or data.get("error") or data)}
        return {}

    def _extra(self, kind: str, data: dict, time: str | None) -> list[Frame]:
        if kind in ("text_delta", "text", "output", "stdout"):
            text = self._chunk_text(kind, data)
            return [self._frame("chunk", chunk=text, text=text)] if text else []
        if kind in ("tool_use", "tool_update", "tool_result", "raw"):
            progress = self._tool_progress(kind, data, time)
            return [self._frame("tool_progress", **progress)] if progress else []
        if kind == "status" and status_word(str(data.get("status", ""))) == FAILED:
            error = reason_of(data) or f"the task ended {data.get('status')}"
            return [self._frame("error", error=error, bridge_status=str(data.get("status")))]
        return []

    def _frame(self, name: str, **fields: Any) -> Frame:
        return name, {"type": name, "task_id": self.task_id, **fields}, None

    def _chunk_text(self, kind: str, data: dict) -> str:
        """The agent's new text: deltas as they come; a whole block only when no deltas came for its message."""
        text = str(data.get("text") or "")
        key = str(data.get("message_id") or "")
        if kind == "text_delta":
            self.streamed.add(key)
            return text
        if kind == "text":
            if key in self.streamed:
                if not key:  # ACP: the whole message follows its deltas; the next message starts afresh
                    self.streamed.discard(key)
                return ""
            return text
        return text + "\n" if text else ""  # output / stdout: one plain line each

    def _tool_progress(self, kind: str, data: dict, time: str | None) -> dict | None:
        """tool name and elapsed time: at the start (0), on ACP updates, at the result, and Claude's own messages."""
        if kind == "raw":
            if data.get("type") != "tool_progress":
                return None
            keep = ("tool_name", "tool_use_id", "elapsed_time_seconds")
            return {**{k: data.get(k) for k in keep}, "phase": "running"}
        if kind == "tool_use":
            tool_id = str(data.get("id") or "")
            self.tools[tool_id] = (str(data.get("name") or ""), time)
            return {
                "tool_name": data.get("name"),
                "tool_use_id": tool_id,
                "elapsed_time_seconds": 0,
                "phase": "started",
            }
        tool_id = str(data.get("tool_use_id") or "")
        name, started = self.tools.get(tool_id, ("", None))
        if kind == "tool_result":
            self.tools.pop(tool_id, None)
            phase = "failed" if data.get("is_error") else "completed"
        else:
            phase = "running"
        elapsed = _seconds_between(started, time)
        return {"tool_name": name or None, "tool_use_id": tool_id, "elapsed_time_seconds": elapsed, "phase": phase}
