"""One runner module per agent; `runner_for` picks the one a task needs."""

from jobs.models import Task
from jobs.runners.base import Runner
from jobs.vocabulary import Agent


def runner_for(task: Task) -> Runner:
    if task.agent == Agent.CLAUDE:
        from jobs.runners.claude import ClaudeRunner

        return ClaudeRunner(task)
    if task.agent == Agent.HERMES:
        from jobs.runners.hermes import hermes_runner

        return hermes_runner(task)
    raise ValueError(f"no runner for agent {task.agent!r}")
