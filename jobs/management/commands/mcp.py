"""`manage.py mcp`: Bridge's MCP tools on stdio, for Claude Desktop and other MCP clients that spawn servers."""

import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand

from jobs.mcp import serve_stdio


class Command(BaseCommand):
    help = (
        "Serve Bridge's MCP tools on stdin/stdout (logs go to stderr). Jobs run in a supervisor, started detached "
        "if none is alive, so they outlive this process."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)  # stdout carries the protocol, nothing else
        serve_stdio()
