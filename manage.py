#!/usr/bin/env python
"""Django's command-line entry point for Bridge."""

import os
import sys

if __name__ == "__main__":
    from jobs.processes.private_env import seal

    seal()  # first: no secret of Bridge's stays readable in /proc/<pid>/environ (jobs/processes/private_env.py)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bridge.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
