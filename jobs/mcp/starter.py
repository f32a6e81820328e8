"""The detached supervisor that `manage.py mcp` starts when none is alive, so the jobs it queues run and outlive it
(Claude Desktop ends the server whenever it likes). The tools ask it before they queue a task."""

import subprocess
import sys
from pathlib import Path

from django.conf import settings

from jobs import actions, processes
from jobs.agents import executors
from jobs.mcp import replies


class SupervisorStarter:
    """Starts `manage.py supervise` as a detached process, once, and only for the stdio server."""

    def __init__(self) -> None:
        self.enabled = False
        self.process: subprocess.Popen | None = None

    def ensure(self) -> str:
        """Returns a note for the reply when no supervisor was alive, else ''."""
        if actions.live_supervisors():  # a supervisor killed a moment ago does not count
            return ""
        if self.process is not None and self.process.poll() is None:
            return replies.supervisor_starting(self.process.pid)
        if not self.enabled:
            return replies.no_supervisor()
        log_path = settings.DATA_DIR / "supervisor.log"
        self.process = self._spawn(log_path)
        return replies.supervisor_started(self.process.pid, log_path)

    @staticmethod
    def _spawn(log_path: Path) -> subprocess.Popen:
        manage = str(settings.BASE_DIR / "manage.py")
        argv = [sys.executable, manage, "supervise", "--started-by", actions.STARTED_BY_MCP]
        with open(log_path, "ab") as log_file:
            return processes.spawn_detached(
                argv,
                cwd=settings.BASE_DIR,
                env=executors.started_environ(),
                output=log_file,
            )


supervisor_starter = SupervisorStarter()
