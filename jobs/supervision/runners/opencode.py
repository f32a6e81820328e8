"""opencode over ACP (`opencode acp`, 1.18): where it departs from the protocol, as observed on the wire
(tests/fakes/OPENCODE_NOTES.md).

- It asks about nothing unless told to: with no permission settings every command and edit runs unasked, whatever
  mode Bridge is in. Each run is told to ask about commands, edits, fetches, searches and subagents, in
  OPENCODE_PERMISSION and again in OPENCODE_CONFIG_CONTENT for its agents, which wins over a repository's own
  `opencode.json` (which could otherwise switch asking off).
- It serves its session on 127.0.0.1:4096 to any local process unless a password is set: each run gets a random one.
"""

import json
import secrets

from jobs.supervision.runners.declared import DeclaredAcpRunner

ASKING = {"bash": "ask", "edit": "ask", "webfetch": "ask", "websearch": "ask", "task": "ask"}
AGENTS = ("build", "plan", "general")  # its agents a task may run under


class OpencodeRunner(DeclaredAcpRunner):
    def env(self) -> dict[str, str]:
        env = super().env()
        env["OPENCODE_PERMISSION"] = json.dumps(ASKING)
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps({"agent": {name: {"permission": ASKING} for name in AGENTS}})
        env["OPENCODE_SERVER_PASSWORD"] = secrets.token_urlsafe(24)
        return env
