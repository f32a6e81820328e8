"""What the client of one waiting tool call takes besides its reply: progress notifications, when it gave a progress
token, and a job's permission requests put to its user (elicitation), when it declared that capability and may decide.

A question travels as the protocol version the client speaks allows. Up to 2025-11-25 (what Claude Code speaks) it is
an elicitation/create request sent during the call. 2026-07-28 forbids requests from the server: the call's round ends
with an InputRequiredResult holding the question, and the client's retry of the same call carries the answer
(`input_responses`) and what the earlier rounds knew (`request_state`, sealed by the SDK: jobs/mcp/server.py).
"""

import dataclasses
import json
from enum import StrEnum
from typing import Any

from mcp.server.mcpserver import Context
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.types import (
    ClientCapabilities,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ProgressToken,
)
from mcp.types.version import is_version_at_least

from jobs.core.access import Caller, Scope
from jobs.core.terminal import printable

ROUNDS_VERSION = "2026-07-28"  # the first protocol version whose questions end a round instead of riding the call
ANSWER_KEY = "decision"  # the one question a round asks, by its key in input_requests and input_responses
MAX_CLIENT_NAME_CHARS = 60


class Asking(StrEnum):
    NOT = "not"  # no elicitation capability, no channel for a question, or a caller who may not decide
    DURING_THE_CALL = "during the call"
    BETWEEN_ROUNDS = "between rounds"


@dataclasses.dataclass
class Rounds:
    """What the earlier rounds of one call knew: the job they followed, the requests already put to the user (none is
    asked twice in one call), the one whose answer this round brings, and the reply's notes so far."""

    job_id: str = ""
    asked: list[int] = dataclasses.field(default_factory=list)
    open: int | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def start(self, job_id: str, notes: list[str]) -> None:
        """The first round: the job it follows and the notes its reply begins with."""
        self.job_id, self.notes = job_id, notes

    def sealed(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def unsealed(cls, state: str | None) -> "Rounds":
        """The state the SDK unsealed (it refuses one it did not seal itself); none on a call's first round."""
        return cls(**json.loads(state)) if state else cls()


def caller_of(request: Any) -> Caller | None:
    """Who made an HTTP request to /mcp: jobs/web/mcp_http.py puts the caller where Starlette keeps who is calling,
    the ASGI scope's `user`. None on stdio, whose user may do everything."""
    user = getattr(request, "scope", {}).get("user")
    return user if isinstance(user, Caller) else None


def _asks_forms(capabilities: ClientCapabilities | None) -> bool:
    """Form elicitation declared (before 2025-11-25 an empty `elicitation` object meant forms)."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


class Call:
    """One tool call's client: what it takes besides the reply, and the rounds of the call so far."""

    def __init__(self, ctx: Context | None) -> None:
        self.ctx = ctx
        self.progress_token: ProgressToken | None = None
        self.asking = Asking.NOT
        self.by = "mcp:user"
        self.rounds = Rounds()
        self.answer: ElicitResult | None = None  # this round's answer to `rounds.open`
        if ctx is not None:
            self._read(ctx)

    def _read(self, ctx: Context) -> None:
        request = ctx.request_context
        self.progress_token = progress_token_from_params(request.params)
        self.asking = self._asking(ctx)
        client = ctx.session.client_params.client_info.name if ctx.session.client_params else ""
        caller = caller_of(request.request)
        # Over HTTP the token decides, whatever the client calls itself; on stdio the client's name is all there is.
        self.by = caller.name if caller is not None else f"mcp:{printable(client)[:MAX_CLIENT_NAME_CHARS] or 'user'}"
        if self.asking == Asking.BETWEEN_ROUNDS:
            self.rounds = Rounds.unsealed(ctx.request_state)
            answer = (ctx.input_responses or {}).get(ANSWER_KEY)
            self.answer = answer if isinstance(answer, ElicitResult) else None

    @staticmethod
    def _asking(ctx: Context) -> Asking:
        request = ctx.request_context.request
        caller = caller_of(request)
        may_decide = request is None or (caller is not None and caller.has(Scope.DECIDE))
        if not may_decide or not _asks_forms(ctx.session.client_capabilities):
            return Asking.NOT
        if is_version_at_least(ctx.request_context.protocol_version, ROUNDS_VERSION):
            return Asking.BETWEEN_ROUNDS
        return Asking.DURING_THE_CALL if ctx.session.can_send_request else Asking.NOT

    async def report(self, progress: float, total: float, message: str) -> None:
        if self.ctx is not None and self.progress_token is not None:
            await self.ctx.report_progress(progress, total, message)

    async def ask(self, question: str, schema: dict[str, Any]) -> ElicitResult:
        """Put a question to the user during the call (elicitation/create) and wait for the answer."""
        assert self.ctx is not None, "only a call with a client asks"
        session, request_id = self.ctx.session, self.ctx.request_context.request_id
        return await session.elicit_form(question, schema, related_request_id=request_id)

    def next_round(self, perm_pk: int, question: str, schema: dict[str, Any], notes: list[str]) -> InputRequiredResult:
        """End this round with the question; the client's retry brings the answer to it."""
        rounds = dataclasses.replace(
            self.rounds, asked=[*self.rounds.asked, perm_pk], open=perm_pk, notes=[*self.rounds.notes, *notes]
        )
        ask = ElicitRequest(params=ElicitRequestFormParams(message=question, requested_schema=schema))
        return InputRequiredResult(input_requests={ANSWER_KEY: ask}, request_state=rounds.sealed())
