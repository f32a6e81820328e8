"""What the entry points that use the database check first (runbridge, supervise, token, mcp): that it answers and
is migrated. Each problem is one message naming the database, the setting that says where it is, the cause and the
fix, never a traceback. bridge/data_dir.py has already refused a data dir or a SQLite file Bridge cannot use."""

import io
import os
import sys
import traceback
from datetime import UTC, datetime

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from jobs.agents import registry
from jobs.core.hints import manage_command
from jobs.core.terminal import printable

# In the data dir: the traceback of a start-up failure whose message cannot say everything (a migration that failed).
STARTUP_LOG = "startup.log"


def unapplied_migrations() -> int:
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


def cannot_use(exc: DatabaseError) -> str:
    """The database did not answer, or answered with an error: its own words, and where to look."""
    if connections[DEFAULT_DB_ALIAS].vendor == "sqlite":
        fix = (
            "If the file is damaged, rename it to keep it (`make run` then makes a new, empty database there), or "
            f"{settings.DATABASE_ELSEWHERE}"
        )
    else:
        fix = "Check that its server is running, and that DATABASE_URL names it and a user that may use it"
    cause = printable(str(exc).strip())
    return f"Bridge cannot use {settings.DATABASE_PLACE}: {cause}{'' if cause.endswith(('.', '?')) else '.'} {fix}"


def not_migrated(count: int) -> str:
    return (
        f"Bridge cannot use {settings.DATABASE_PLACE}: it has {count} migration(s) to apply (it is new, or Bridge was "
        f"updated). Run {manage_command('migrate')} (`make run` does it for you), then start again"
    )


def database_problem() -> str:
    """'' when the database answers and is migrated; else the one message that says why not and what to do."""
    try:
        unapplied = unapplied_migrations()
    except DatabaseError as exc:
        return cannot_use(exc)
    return not_migrated(unapplied) if unapplied else ""


def check_database() -> None:
    """A command stops with the one message (Django prints a CommandError alone) when the database cannot be used."""
    problem = database_problem()
    if problem:
        raise CommandError(problem)


def check_agents() -> None:
    """A command stops with the reason when BRIDGE_AGENTS_FILE declares an agent Bridge cannot run."""
    try:
        registry.check_agents_file()
    except registry.AgentsFileError as exc:
        raise CommandError(
            f"Bridge cannot use its agents file: {printable(str(exc))}. Fix it (or move it away) and start again; the "
            'format is in docs/architecture.md, "Executors"'
        ) from None


def migrate_database() -> str:
    """Apply the migrations the database lacks (quietly: `manage.py mcp`'s stdout is the protocol). '' once it is
    migrated (by this process or, at the same moment, by another); else the one message, with the traceback of a
    migration that failed kept in the data dir's STARTUP_LOG."""
    try:
        unapplied = unapplied_migrations()
        if unapplied:
            _migrate(unapplied)
    except DatabaseError as exc:
        return cannot_use(exc)
    except MigrationFailed as failed:
        return str(failed)
    finally:
        connections.close_all()
    return ""


class MigrationFailed(Exception):
    """Applying the migrations failed, and the database is still not migrated: the message says why."""


def _migrate(count: int) -> None:
    try:
        call_command("migrate", interactive=False, verbosity=0, stdout=io.StringIO(), stderr=io.StringIO())
    except Exception as exc:  # whatever failed (the database, a migration): its traceback goes to the log
        if not database_problem():
            return  # another process (runbridge, a second MCP server) migrated it meanwhile: its tables now clash
        raise MigrationFailed(
            f"Bridge cannot use {settings.DATABASE_PLACE}: applying its {count} migration(s) failed: {printable(exc)} "
            f"({kept_traceback(exc)}). Run {manage_command('migrate')} to apply them and see why"
        ) from None


def kept_traceback(exc: Exception) -> str:
    """Append `exc`'s traceback to the data dir's STARTUP_LOG; say where it is, or why it is kept nowhere."""
    path = settings.DATA_DIR / STARTUP_LOG
    entry = (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {' '.join(sys.argv[1:])}\n{''.join(traceback.format_exception(exc))}"
    )
    try:
        with open(path, "a", opener=lambda name, flags: os.open(name, flags, 0o600)) as log:
            log.write(entry + "\n")
    except OSError as error:
        return f"its traceback is kept nowhere: cannot write {printable(path)}: {error.strerror}"
    return f"its traceback is in {printable(path)}"
