"""A job's permission request put to the MCP client's user (elicitation): which request is asked next, the form, and
the answer recorded as every other decision is (actions.decide_permission, decided_via mcp, by `mcp:<client>`).

One question at a time per request in this process: a request another call is asking about is left to that call
(another process's question meets the first answer's Conflict instead, which the reply reports).
"""

import time
from collections.abc import Iterable
from typing import Literal

from mcp.server.elicitation import render_elicitation_schema
from mcp.types import ElicitResult
from pydantic import BaseModel, Field, ValidationError

from jobs import actions
from jobs.core.errors import BridgeError, Conflict
from jobs.core.vocabulary import DecidedVia
from jobs.mcp import reads, replies
from jobs.models import PermissionRequest, Task


class Answer(BaseModel):
    """The form the user fills in."""

    decision: Literal["allow", "deny"] = Field(title="Decision", description="allow runs the tool; deny refuses it")
    message: str = Field(
        "",
        title="Message",
        description="what the agent is told when denied (optional)",
        max_length=actions.MAX_MESSAGE_CHARS,
    )


FORM = render_elicitation_schema(Answer)
_open_until: dict[int, float] = {}  # request pk -> when (time.monotonic) the question about it closes at the latest


def next_to_ask(pending: Iterable[PermissionRequest], asked: Iterable[int]) -> PermissionRequest | None:
    """The oldest pending request not yet asked in this call, nor being asked by another call."""
    now, done = time.monotonic(), set(asked)
    return next((p for p in pending if p.pk not in done and _open_until.get(p.pk, 0) <= now), None)


def hold(perm: PermissionRequest, until: float) -> None:
    _open_until[perm.pk] = until


def release(perm_pk: int) -> None:
    _open_until.pop(perm_pk, None)


def record(task: Task, perm_pk: int, answer: ElicitResult | None, by: str) -> str:
    """The user's answer, decided as they chose (a refusal or no answer leaves the request pending); the NOTE line
    that says what came of it."""
    perm = reads.permission(perm_pk)
    if answer is None or answer.action != "accept":
        return replies.question_unanswered(perm, answer.action if answer is not None else "got no answer")
    try:
        chosen = Answer.model_validate(answer.content or {})
    except ValidationError:
        return replies.question_unanswered(perm, "got an answer that was neither allow nor deny")
    try:
        decided = actions.decide_permission(
            task,
            behavior=chosen.decision,
            request_id=perm.request_id,
            message=chosen.message,
            by=by,
            via=DecidedVia.MCP,
        )
    except Conflict:
        return replies.answered_meanwhile(reads.permission(perm_pk))
    except BridgeError as refused:
        return replies.answer_refused(perm, refused.message)
    return replies.answered(decided)


def settled(perm_pk: int) -> str:
    """The NOTE line for a question withdrawn because the request was answered (or withdrawn) elsewhere meanwhile."""
    return replies.answered_meanwhile(reads.permission(perm_pk))
