"""Django's SQLite backend, with each transaction's BEGIN run on a cursor that is closed however the BEGIN ends.

Django starts a transaction with `self.cursor().execute("BEGIN IMMEDIATE")` and leaves that cursor to be freed.
When the BEGIN fails (the write lock stayed taken past the busy timeout: a burst of creates, a held lock), the
cursor's statement is still in use, and the error's traceback keeps the cursor in a reference cycle. Python's cycle
collector then frees it later, on whichever thread it runs: resetting the statement there takes the cursor's
connection's mutex. If that thread holds the write lock while the connection's own thread is in SQLite's busy wait
for it (which holds that mutex), each waits for the other: every other write times out (503 database_busy) until the
busy wait gives up, and a thread that begins again at once starts it over. A burst of 200 creates on one web process
stalled for 30 s this way in about one run in ten (integration/test_concurrency.py). Closing the cursor here resets the
statement on its own thread, so nothing is left for the collector (docs/architecture.md, "Database").
"""

from django.db.backends.sqlite3 import base


class DatabaseWrapper(base.DatabaseWrapper):
    def _start_transaction_under_autocommit(self) -> None:
        mode = self.transaction_mode  # type: ignore[attr-defined]  # Django 5.1+ sets it; the stubs lack it
        begin = "BEGIN" if mode is None else f"BEGIN {mode}"
        with self.cursor() as cursor:
            cursor.execute(begin)
