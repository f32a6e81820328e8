"""One runner module per agent; `runner_for` picks the one a run needs.

Runners are pure protocol: they import settings, jobs.core, jobs.agents and each other, never the models,
jobs.actions or an adapter, so they can be tested (and reused) without a database.
"""

from jobs.agents import registry
from jobs.core.vocabulary import Agent
from jobs.supervision.runners.base import Runner, RunSpec
from jobs.supervision.runners.claude import ClaudeRunner
from jobs.supervision.runners.claude_acp import ClaudeAcpRunner
from jobs.supervision.runners.declared import DeclaredAcpRunner
from jobs.supervision.runners.gemini import GeminiRunner
from jobs.supervision.runners.hermes import hermes_runner
from jobs.supervision.runners.opencode import OpencodeRunner
from jobs.supervision.runners.qwen import QwenRunner

# The ACP agents with departures from the protocol of their own, by name; any other runs as DeclaredAcpRunner.
ACP_RUNNERS: dict[str, type[DeclaredAcpRunner]] = {
    "gemini": GeminiRunner,
    "qwen": QwenRunner,
    "claude-acp": ClaudeAcpRunner,
    "opencode": OpencodeRunner,
}


def runner_for(spec: RunSpec) -> Runner:
    if spec.agent == Agent.CLAUDE:
        return ClaudeRunner(spec)
    if spec.agent == Agent.HERMES:
        return hermes_runner(spec)
    definition = registry.get_agent(spec.agent)
    if definition is None or not definition.is_acp:
        raise ValueError(f"no runner for agent {spec.agent!r}")
    return ACP_RUNNERS.get(definition.name, DeclaredAcpRunner)(spec, definition)
