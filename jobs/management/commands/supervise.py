"""`manage.py supervise`: the supervisor alone, for more workers or workers on other hosts."""

import signal

from django.core.management.base import BaseCommand, CommandError

from jobs.supervisor import Supervisor


class Command(BaseCommand):
    help = "Run queued tasks. SIGTERM or Ctrl-C: stop claiming, let running tasks drain, then cancel them."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None, help="default: BRIDGE_MAX_CONCURRENT")

    def handle(self, *args, concurrency=None, **options):
        supervisor = Supervisor(capacity=concurrency)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: supervisor.request_stop())
        supervisor.run()
        if supervisor.startup_error:
            raise CommandError(f"{supervisor.startup_error}. Did you run 'python manage.py migrate'?")
