"""Who is calling and what they may do: a token's scope and the roots it is limited to.

Scopes are ordered, each holding the ones before it: `read` (status, lists, transcripts, streams) < `run` (also create,
resume and cancel tasks) < `decide` (also answer permission requests). A token limited to roots sees and creates only
tasks whose cwd lies under one of them, by the one rule for "under" (`paths.within`). A logged-in user, and the MCP
server on stdio (which has no token), may do everything. The rows store these (jobs.models.ApiToken); the refusals are
raised in jobs.actions.tokens; each interface asks there once per request.
"""

from dataclasses import dataclass
from enum import StrEnum

from jobs.core import paths
from jobs.core.errors import ErrorCode, Refused


class Scope(StrEnum):
    """What a token may do, from least to most; each scope holds the ones before it."""

    READ = "read"
    RUN = "run"
    DECIDE = "decide"

    @property
    def rank(self) -> int:
        return list(Scope).index(self)

    @property
    def meaning(self) -> str:
        return SCOPE_MEANINGS[self]


SCOPE_MEANINGS = {
    Scope.READ: "see tasks: status, lists, transcripts, streams",
    Scope.RUN: "read, and create, resume and cancel tasks",
    Scope.DECIDE: "run, and answer permission requests",
}
DEFAULT_SCOPE = Scope.DECIDE  # what every token could do before scopes existed: existing tokens keep working


@dataclass(frozen=True)
class Caller:
    """Who made a request (`name`: 'token:<name>' or 'user:<name>', recorded as who created, cancelled or decided)
    and what they may do."""

    name: str
    scope: Scope = DEFAULT_SCOPE
    roots: tuple[str, ...] = ()  # empty: not limited (the allowed roots still apply to everyone)

    @property
    def token_name(self) -> str | None:
        return self.name.removeprefix("token:") if self.name.startswith("token:") else None

    def has(self, needed: Scope) -> bool:
        return self.scope.rank >= needed.rank

    def check_made_under_roots(self, what: str, root: str) -> None:
        """A caller limited to roots makes and removes `what` (a rule, a webhook) only for tasks under them: never one
        for every task. Refused, naming the roots, otherwise."""
        if not self.roots or (root and self.covers(root)):
            return
        where = f"the root {root!r}" if root else "every task (no root)"
        raise Refused(
            f"{what} for {where} lies outside the roots {self.name} is limited to ({', '.join(self.roots)}): give a "
            "root under them, or use a token that is not limited to roots",
            code=ErrorCode.OUTSIDE_TOKEN_ROOTS,
            roots=list(self.roots),
        )

    def covers(self, cwd: str) -> bool:
        """Whether a task in `cwd` (as stored: resolved) is one this caller may see and create."""
        return not self.roots or any(paths.within(cwd, root) for root in self.roots)
