"""`manage.py supervise`: the supervisor alone, for more workers or workers on other hosts."""

import logging

from django.core.management.base import BaseCommand, CommandError

from jobs import processes
from jobs.supervisor import Supervisor

log = logging.getLogger("jobs")


class Command(BaseCommand):
    help = (
        "Run queued tasks. SIGTERM, Ctrl-C or Ctrl-Break: stop claiming, let running tasks drain, then cancel them;"
        " a second one stops at once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None, help="default: BRIDGE_MAX_CONCURRENT")

    def handle(self, *args, concurrency=None, **options):
        supervisor = Supervisor(capacity=concurrency)

        def stop(name: str) -> None:
            log.warning("%s received: draining running tasks (send it again to stop at once)", name)
            supervisor.request_stop()

        with processes.on_stop_signals(stop):
            supervisor.run()
        if supervisor.startup_error:
            raise CommandError(f"{supervisor.startup_error}. Did you run 'python manage.py migrate'?")
