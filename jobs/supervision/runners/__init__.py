"""One runner module per agent; `runner_for` picks the one a run needs.

Runners are pure protocol: they import settings, jobs.core, jobs.agents and each other, never the models,
jobs.actions or an adapter, so they can be tested (and reused) without a database.
"""

from jobs.core.vocabulary import Agent
from jobs.supervision.runners.base import Runner, RunSpec
from jobs.supervision.runners.claude import ClaudeRunner
from jobs.supervision.runners.hermes import hermes_runner


def runner_for(spec: RunSpec) -> Runner:
    if spec.agent == Agent.CLAUDE:
        return ClaudeRunner(spec)
    if spec.agent == Agent.HERMES:
        return hermes_runner(spec)
    raise ValueError(f"no runner for agent {spec.agent!r}")
