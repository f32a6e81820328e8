"""`manage.py register_claude [--print]`: add Bridge's MCP server to every Claude Desktop config found, Bridge's status
line to Claude Code's settings, and print the line that adds the MCP server to Claude Code. The older MCP server Bridge
replaces is pointed out where a config still starts it, and removed with `--replace-old`."""

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from jobs import processes
from jobs.core.terminal import printable
from jobs.integrations import tool_configs

OLDER_SERVER_TWICE = (
    "it offers the same tools (hermes_run, hermes_status, hermes_resume, hermes_jobs, …), so Claude Desktop would show "
    "each twice and Claude could call the old one. Run this again with --replace-old to remove it (the file is backed "
    "up first), or remove it by hand."
)


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
        parser.add_argument(
            "--replace-old",
            action="store_true",
            help="remove the older MCP server Bridge replaces (claude-hermes-bridge, usually named 'hermes') from "
            "Claude Desktop's configs; by default it is only pointed out",
        )

    def handle(
        self,
        *args,
        dry_run: bool,
        url: str | None,
        replace_status_line: bool,
        no_status_line: bool,
        replace_old: bool,
        **options,
    ):
        url = self.status_line_url(url, no_status_line)
        home = Path(options.get("home", Path.home()))
        environ = options.get("environ", os.environ)
        platform = options.get("platform", processes.PLATFORM)
        entry = tool_configs.mcp_server_entry(environ)

        paths = tool_configs.claude_desktop_configs(home, environ, platform)
        changes, problems, older = self.desktop_changes(paths, entry, replace_old)
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
        self.report_older_servers(older, replace_old, dry_run)
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

    def status_line_url(self, url: str | None, no_status_line: bool) -> str:
        """Where the status line asks Bridge: --url, else where runbridge listens (said), else the default."""
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
        return url

    @staticmethod
    def desktop_changes(
        paths: list[Path], entry: dict, replace_old: bool
    ) -> tuple[list[tool_configs.FileChange], list[str], dict[Path, dict[str, dict]]]:
        """Each config with Bridge's entry (and, with `replace_old`, without the older server's), what stops a config
        from being written, and the older server's entries found in each."""
        changes, problems, older = [], [], {}
        for path in paths:
            current = tool_configs.read_text_if_exists(path)
            try:
                found = tool_configs.older_servers(path, current)
                drop = found if replace_old else {}
                new = tool_configs.merged_claude_desktop_config(path, current, entry, drop=drop)
            except tool_configs.ConfigError as exc:
                problems.append(str(exc))
                continue
            changes.append(tool_configs.FileChange(path, current, new))
            if found:
                older[path] = found
        return changes, problems, older

    def report_older_servers(self, older: dict[Path, dict[str, dict]], replace_old: bool, dry_run: bool) -> None:
        """Where a config still starts the older MCP server: removed (with --replace-old), or how to remove it."""
        for path, servers in older.items():
            for name, entry in servers.items():
                command = printable(shlex.join(tool_configs.command_line(entry)))
                server = f"{printable(path)}: {json.dumps(name)} ({command}) is the older MCP server Bridge replaces"
                if not replace_old:
                    self.stderr.write(f"warning: {server}: {OLDER_SERVER_TWICE}")
                elif dry_run:
                    self.stdout.write(f"{server}: would remove it (--print: nothing written)")
                else:
                    self.stdout.write(f"{server}: removed it; the backup above keeps it")

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
