"""`manage.py supervise`: the supervisor alone, for more workers or workers on other hosts."""

import argparse
import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobs import actions, processes
from jobs.core.errors import BridgeError
from jobs.core.hints import manage_command
from jobs.core.terminal import printable
from jobs.management.startup import check_agents, check_database
from jobs.supervision.supervisor import Supervisor

log = logging.getLogger("jobs")


class Command(BaseCommand):
    help = (
        "Run queued tasks whose cwd lies in this host's BRIDGE_ALLOWED_ROOTS and whose target is empty, this"
        " supervisor's name, its host or one of its labels. SIGTERM, Ctrl-C or Ctrl-Break: stop claiming, let running"
        " tasks drain, then cancel them; a second one stops at once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None, help="default: BRIDGE_MAX_CONCURRENT")
        parser.add_argument(
            "--name",
            default=None,
            help="what planners may target it by, unique among live supervisors (default: BRIDGE_SUPERVISOR_NAME,"
            " else host:pid:random)",
        )
        parser.add_argument(
            "--label",
            action="append",
            dest="labels",
            default=None,
            help="a label planners may target it by; repeatable (default: BRIDGE_SUPERVISOR_LABELS, comma-separated)",
        )
        # Who started it: the MCP server says so, and a later runbridge takes over from such a supervisor.
        parser.add_argument(
            "--started-by",
            choices=[actions.STARTED_BY_SUPERVISE, actions.STARTED_BY_MCP],
            default=actions.STARTED_BY_SUPERVISE,
            help=argparse.SUPPRESS,
        )

    def handle(self, *args, concurrency=None, name=None, labels=None, started_by="", **options):
        check_database()
        check_agents()
        try:
            name, labels = actions.check_identity(
                settings.BRIDGE_SUPERVISOR_NAME if name is None else name,
                settings.BRIDGE_SUPERVISOR_LABELS if labels is None else labels,
            )
        except BridgeError as exc:
            raise CommandError(printable(exc)) from None
        supervisor = Supervisor(capacity=concurrency, name=name, labels=labels, started_by=started_by)

        def drain(name: str) -> None:
            log.warning("%s received: draining running tasks (send it again to cancel them at once)", name)
            supervisor.request_stop()

        def now(name: str) -> None:
            log.warning("%s received again: cancelling the running tasks now", name)
            supervisor.stop_now()

        with processes.on_stop_signals(drain, now):
            supervisor.run()
        if supervisor.startup_error:
            taken = "Conflict: a supervisor named" in supervisor.startup_error  # nothing to do with migrations
            hint = "" if taken else f" Did you run `{manage_command('migrate')}`?"
            raise CommandError(f"{printable(supervisor.startup_error)}.{hint}")
