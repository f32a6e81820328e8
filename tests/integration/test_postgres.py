"""The same actions and supervisor tests on PostgreSQL, where claims use SELECT … FOR UPDATE SKIP LOCKED."""

from tests.support import postgres_or_skip, rerun_on_postgres

SUPERVISOR = "tests/integration/test_supervisor.py::"
# Tests whose checks are all about the operating system, not the database: the signals an agent is stopped with, its
# process group and the grandchildren that outlive it, its environment and time zone (these write only the rows and
# events test_cancel_…, test_timeout and test_killed_supervisor_… write here too), and two that use no database at
# all (a pure function; a supervisor started without DATABASE_URL, which is SQLite's run again). The default run
# keeps them, on both process backends; here they took about a fifth of the run.
NOT_ABOUT_THE_DATABASE = (
    "test_agent_that_ignores_interrupt_and_sigterm_is_killed",
    "test_a_stopped_agent_takes_every_grandchild_with_it",
    "test_a_killed_supervisor_leaves_no_grandchild_behind",
    "test_child_environment_is_allow_listed",
    "test_the_agent_keeps_the_time_zone_bridge_was_started_with",
    "test_started_environ_gives_back_the_tz_this_process_was_started_with",
    "test_a_supervisor_without_a_database_says_why_and_exits",
)


def test_supervisor_and_api_suites_pass_on_postgres():
    # The process backends do not depend on the database: SQLite's run covers both, this one the posix one.
    run = rerun_on_postgres(
        postgres_or_skip(),
        "tests/integration/test_supervisor.py",
        "tests/integration/test_api.py",
        "tests/integration/test_rows.py",
        "tests/integration/test_task_counts.py",
        "tests/integration/test_readiness.py",
        "tests/integration/test_import_legacy.py",
        "tests/integration/test_task_changes.py",
        "-k",
        "not portable",
        *(f"--deselect={SUPERVISOR}{name}" for name in NOT_ABOUT_THE_DATABASE),
        timeout=600,
    )
    assert " passed" in run.stdout.splitlines()[-1]
