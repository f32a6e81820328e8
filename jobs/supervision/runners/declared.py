"""Any ACP agent Bridge knows by name: a preset (jobs/agents/registry.py) or one declared in BRIDGE_AGENTS_FILE.

The protocol is AcpRunner's; this adds what a definition says: the command, the variables the agent inherits and
those Bridge sets, and the session mode that asks nothing (`skip`). An agent with departures from the protocol gets
a module of its own that subclasses this (gemini.py).
"""

from jobs.agents.executors import child_env
from jobs.agents.registry import AgentDefinition
from jobs.core.vocabulary import PermissionMode
from jobs.supervision.runners.acp import AcpRunner
from jobs.supervision.runners.base import RunSpec


class DeclaredAcpRunner(AcpRunner):
    """One prompt in one session of the ACP agent `definition` describes."""

    executable_setting = "BRIDGE_AGENTS_FILE"

    def __init__(self, spec: RunSpec, definition: AgentDefinition) -> None:
        super().__init__(spec)
        self.definition = definition
        self.agent_label = definition.label

    def command(self) -> list[str]:
        return list(self.definition.command)

    def env(self) -> dict[str, str]:
        return child_env(dict(self.definition.env), names=self.definition.pass_env)

    def session_setup(self) -> list[tuple[str, dict]]:
        """`skip`: the agent's own mode that asks nothing (create_task refuses `skip` for an agent without one)."""
        calls = super().session_setup()
        if self.spec.permission_mode == PermissionMode.SKIP and self.definition.skip_mode:
            calls.append(("session/set_mode", {"sessionId": self.session_id, "modeId": self.definition.skip_mode}))
        return calls
