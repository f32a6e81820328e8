"""`manage.py register_claude [--print]`: add Bridge's MCP server to every Claude Desktop config found, Bridge's status
line to Claude Code's settings, and print the line that adds the MCP server to Claude Code."""

import json
import os
from collections.abc import Mapping
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from jobs import processes
from jobs.core.terminal import printable
from jobs.integrations import tool_configs


class Command(BaseCommand):
    help = (
        "Add (or update) Bridge's MCP server 'bridge' in every Claude Desktop config found and Bridge's statusLine in "
        "Claude Code's settings.json, keeping everything else and backing up the old file; print the command that "
        "adds the MCP server to Claude Code."
    )
    # Tests pass a temporary home, environment and platform through call_command; the command line cannot.
    stealth_options = ("home", "environ", "platform")

    def add_arguments(self, parser):
        parser.add_argument(
            "--print", action="store_true", dest="dry_run", help="show the change for each file; write nothing"
        )
        parser.add_argument(
            "--url",
            default=None,
            help="where the status line asks Bridge (GET <url>/health; default: where runbridge listens, else "
            f"{tool_configs.DEFAULT_BRIDGE_URL})",
        )
        parser.add_argument(
            "--replace-status-line",
            action="store_true",
            help="replace a statusLine in Claude Code's settings that is not Bridge's (by default it is kept)",
        )
        parser.add_argument("--no-status-line", action="store_true", help="leave Claude Code's settings.json alone")

    def handle(self, *args, dry_run: bool, url: str | None, replace_status_line: bool, no_status_line: bool, **options):
        if url is None and not no_status_line:
            url, source = tool_configs.server_url()
            self.stdout.write(
                f"Bridge's address for the status line: {printable(url)} ({printable(source)}; --url sets another)"
            )
        url = url or tool_configs.DEFAULT_BRIDGE_URL
        if not url.startswith("http://"):
            raise CommandError(
                f"--url must start with http:// (the status line speaks plain HTTP), not '{printable(url)}'"
            )
        home = Path(options.get("home", Path.home()))
        environ = options.get("environ", os.environ)
        platform = options.get("platform", processes.PLATFORM)
        entry = tool_configs.mcp_server_entry(environ)

        paths = tool_configs.claude_desktop_configs(home, environ, platform)
        changes, problems = self.desktop_changes(paths, entry)
        settings_path = tool_configs.claude_code_settings(home, environ)
        status_line = tool_configs.status_line_entry(url.rstrip("/"), platform)
        status_change, kept = None, None
        if not no_status_line and settings_path.parent.is_dir():
            try:
                status_change, kept = self.status_line_change(settings_path, status_line, replace_status_line)
            except tool_configs.ConfigError as exc:
                problems.append(str(exc))
        if problems:
            listed = "\n  ".join(printable(problem) for problem in problems)
            raise CommandError(f"nothing was written:\n  {listed}\nFix the file (or move it away) and run this again.")

        if not paths:
            self.report_nothing_found(home, environ, platform, entry)
        for change in changes:
            self.stdout.write(tool_configs.show_or_apply(change, dry_run))
        if not no_status_line:
            self.report_status_line(settings_path, status_line, status_change, kept, dry_run)
        for warning in tool_configs.credential_warnings(entry):
            self.stderr.write(f"note: {printable(warning)}")
        for warning in tool_configs.executor_warnings(environ, entry, platform):
            self.stderr.write(f"warning: {printable(warning)}")
        if any(change.changed for change in changes) and not dry_run:
            self.stdout.write("Quit Claude Desktop completely and start it again to load Bridge's tools.")
        self.stdout.write("\nTo add Bridge to Claude Code as well (every project), run:")
        self.stdout.write(printable(tool_configs.claude_code_command(entry, platform)))

    @staticmethod
    def desktop_changes(paths: list[Path], entry: dict) -> tuple[list[tool_configs.FileChange], list[str]]:
        changes, problems = [], []
        for path in paths:
            current = tool_configs.read_text_if_exists(path)
            try:
                new = tool_configs.merged_claude_desktop_config(path, current, entry)
            except tool_configs.ConfigError as exc:
                problems.append(str(exc))
                continue
            changes.append(tool_configs.FileChange(path, current, new))
        return changes, problems

    @staticmethod
    def status_line_change(path: Path, status_line: dict, replace: bool) -> tuple[tool_configs.FileChange, object]:
        current = tool_configs.read_text_if_exists(path)
        new, kept = tool_configs.merged_claude_code_settings(path, current, status_line, replace_other=replace)
        return tool_configs.FileChange(path, current, new), kept

    def report_status_line(
        self, path: Path, status_line: dict, change: tool_configs.FileChange | None, kept: object, dry_run: bool
    ) -> None:
        if change is None:
            self.stdout.write(
                f"No Claude Code settings directory at {printable(path.parent)}: start Claude Code once and run this "
                f"again for Bridge's status line, or add this to {printable(path)} by hand:\n"
                f"{json.dumps({'statusLine': status_line})}"
            )
        elif kept is not None:
            shown = kept.get("command", kept) if isinstance(kept, dict) else kept
            self.stdout.write(
                f"{printable(path)}: kept its statusLine, which is not Bridge's ({json.dumps(shown)}); "
                "run this again with --replace-status-line to show Bridge's instead"
            )
        else:
            self.stdout.write(tool_configs.show_or_apply(change, dry_run))
            if change.changed and not dry_run:
                self.stdout.write("Start a new Claude Code session to see Bridge's status line.")

    def report_nothing_found(self, home: Path, environ: Mapping[str, str], platform: str, entry: dict) -> None:
        self.stdout.write("No Claude Desktop config found. Looked for:")
        for place in tool_configs.claude_desktop_places(home, environ, platform):
            self.stdout.write(f"  {printable(place)}")
        self.stdout.write(
            "Install Claude Desktop and start it once (it makes that directory), then run this again; "
            'or add this under "mcpServers" in its config by hand:'
        )
        self.stdout.write(json.dumps({tool_configs.SERVER_NAME: entry}, indent=2))
