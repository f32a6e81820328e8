"""`manage.py register_claude [--print]`: add Bridge's MCP server to every Claude Desktop config found, and print the
line that adds it to Claude Code."""

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from jobs import integrations


class Command(BaseCommand):
    help = (
        "Add (or update) Bridge's MCP server 'bridge' in every Claude Desktop config found, keeping everything else "
        "and backing up the old file; print the command that adds it to Claude Code."
    )
    # Tests pass a temporary home, environment and platform through call_command; the command line cannot.
    stealth_options = ("home", "environ", "platform")

    def add_arguments(self, parser):
        parser.add_argument(
            "--print", action="store_true", dest="dry_run", help="show the change for each config; write nothing"
        )

    def handle(self, *args, dry_run: bool, **options):
        home = Path(options.get("home", Path.home()))
        environ = options.get("environ", os.environ)
        platform = options.get("platform", sys.platform)
        entry = integrations.mcp_server_entry(environ)

        paths = integrations.claude_desktop_configs(home, environ, platform)
        changes, problems = [], []
        for path in paths:
            current = integrations.read_text_if_exists(path)
            try:
                new = integrations.merged_claude_desktop_config(path, current, entry)
            except integrations.ConfigError as exc:
                problems.append(str(exc))
                continue
            changes.append(integrations.FileChange(path, current, new))
        if problems:
            listed = "\n  ".join(problems)
            raise CommandError(f"nothing was written:\n  {listed}\nFix the file (or move it away) and run this again.")

        if not paths:
            self.report_nothing_found(home, environ, platform, entry)
        for change in changes:
            self.stdout.write(integrations.show_or_apply(change, dry_run))
        for warning in integrations.credential_warnings(entry):
            self.stderr.write(f"note: {warning}")
        if any(change.changed for change in changes) and not dry_run:
            self.stdout.write("Quit Claude Desktop completely and start it again to load Bridge's tools.")
        self.stdout.write("\nTo add Bridge to Claude Code as well (every project), run:")
        self.stdout.write(integrations.claude_code_command(entry, platform))

    def report_nothing_found(self, home: Path, environ: Mapping[str, str], platform: str, entry: dict) -> None:
        self.stdout.write("No Claude Desktop config found. Looked for:")
        for place in integrations.claude_desktop_places(home, environ, platform):
            self.stdout.write(f"  {place}")
        self.stdout.write(
            "Install Claude Desktop and start it once (it makes that directory), then run this again; "
            'or add this under "mcpServers" in its config by hand:'
        )
        self.stdout.write(json.dumps({integrations.SERVER_NAME: entry}, indent=2))
