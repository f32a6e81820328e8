"""One runner module per agent; `runner_for` picks the one a run needs.

Runners are pure protocol: they import settings, jobs.vocabulary, jobs.hermes_skills and each other, never the
models, jobs.actions or an adapter, so they can be tested (and reused) without a database.
"""

from jobs.runners.base import Runner, RunSpec
from jobs.runners.claude import ClaudeRunner
from jobs.runners.hermes import hermes_runner
from jobs.vocabulary import Agent


def runner_for(spec: RunSpec) -> Runner:
    if spec.agent == Agent.CLAUDE:
        return ClaudeRunner(spec)
    if spec.agent == Agent.HERMES:
        return hermes_runner(spec)
    raise ValueError(f"no runner for agent {spec.agent!r}")
