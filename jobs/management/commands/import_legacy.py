"""`manage.py import_legacy [--mcp-jobs DIR] [--mcp-config FILE] [--hbridge-tasks FILE]`: bring the older tools'
history into Bridge as ended tasks (jobs/actions/imports.py), and print the settings the older MCP server's config
becomes. Everything printed from the files passes through `jobs.core.terminal.printable`."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from jobs import actions
from jobs.core.errors import BridgeError
from jobs.core.terminal import printable
from jobs.management.startup import check_database


class Command(BaseCommand):
    help = (
        "Import the older tools' jobs as ended tasks, marked imported and findable by their old ids (REST, MCP, the "
        "dashboard); a second import adds nothing. With no option, both tools' default places: "
        f"{actions.DEFAULT_MCP_JOBS}, {actions.DEFAULT_MCP_CONFIG} and {actions.DEFAULT_HBRIDGE_TASKS}. "
        "A log is imported up to BRIDGE_MAX_OUTPUT_BYTES, a line up to BRIDGE_MAX_LINE_BYTES."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--mcp-jobs",
            type=Path,
            metavar="DIR",
            help="claude-hermes-bridge's jobs folder: <id>.json and <id>.log per job "
            f"(default {actions.DEFAULT_MCP_JOBS})",
        )
        parser.add_argument(
            "--mcp-config",
            type=Path,
            metavar="FILE",
            help="claude-hermes-bridge's config.json: its allowed roots, default cwd and Hermes path, printed as the "
            f"Bridge settings they become (default {actions.DEFAULT_MCP_CONFIG})",
        )
        parser.add_argument(
            "--hbridge-tasks",
            type=Path,
            metavar="FILE",
            help=f"hbridge's tasks file, one ended task a line (default {actions.DEFAULT_HBRIDGE_TASKS})",
        )

    def handle(self, *args, mcp_jobs, mcp_config, hbridge_tasks, verbosity, **options):
        check_database()
        try:
            report = actions.import_legacy(mcp_jobs=mcp_jobs, mcp_config=mcp_config, hbridge_tasks=hbridge_tasks)
        except BridgeError as exc:
            raise CommandError(exc.message) from None
        self.print_records(report, every=verbosity > 1)
        self.print_settings(report)

    def print_records(self, report: actions.ImportReport, every: bool) -> None:
        for source in report.sources:
            self.stdout.write(f"Read {printable(source)}")
        self.stdout.write(
            f"Imported {len(report.imported)}, already there {len(report.already_there)}, "
            f"skipped {len(report.skipped)}."
        )
        for outcome in report.imported:
            if outcome.notes or every:
                notes = "; ".join(outcome.notes) or "complete"
                self.stdout.write(
                    f"  imported {printable(outcome.legacy_id)} as {outcome.task_id} ({printable(outcome.where)}): "
                    f"{printable(notes)}"
                )
        for outcome in report.already_there if every else ():
            self.stdout.write(f"  already there {printable(outcome.legacy_id)} as {outcome.task_id}")
        for outcome in report.skipped:
            old_id = f" {printable(outcome.legacy_id)}" if outcome.legacy_id else ""
            self.stdout.write(f"  skipped{old_id} ({printable(outcome.where)}): {printable(outcome.reason)}")

    def print_settings(self, report: actions.ImportReport) -> None:
        if not report.settings and not report.settings_notes:
            return
        self.stdout.write("Settings from claude-hermes-bridge's config, for Bridge's environment (keep them):")
        for line in report.settings:
            self.stdout.write(f"  {printable(line)}")
        for note in report.settings_notes:
            self.stdout.write(f"  ({printable(note)})")
