"""`manage.py mcp`: Bridge's MCP tools on stdio, for Claude Desktop and other MCP clients that spawn servers."""

import logging
import sys
import threading
from typing import Any

from django.core.management.base import BaseCommand

from jobs.agents import executors
from jobs.core.terminal import printable
from jobs.management.startup import check_agents, migrate_database
from jobs.mcp.server import start_up
from jobs.mcp.stdio import serve_stdio

log = logging.getLogger("jobs")


def log_executor_problems() -> None:
    """Say in the client's MCP log (stderr) what would stop an executor, before a task fails on it."""
    for status in executors.worth_telling(executors.executor_report()):
        for problem in status.problems:
            log.warning("%s cannot run: %s. Fix: %s", status.agent, printable(problem.what), printable(problem.fix))


class Command(BaseCommand):
    help = (
        "Serve Bridge's MCP tools on stdin/stdout (logs go to stderr). Jobs run in a supervisor, started detached "
        "if none is alive, so they outlive this process. A database not yet migrated is migrated first."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)  # stdout carries the protocol, nothing else
        check_agents()
        log.propagate = False  # Bridge's own logger already writes to stderr (settings.LOGGING): each line once
        problem = start_up.hold_until(migrate_database)  # Claude Desktop may start this before `make run` ever ran
        if problem:  # every tool answers it too, and tries again (jobs/mcp/server.py, StartUpGate)
            log.error("%s", problem)
        # `claude --version` takes a moment: the protocol starts at once, the report follows in the log
        threading.Thread(target=log_executor_problems, name="executor-report", daemon=True).start()
        serve_stdio()
