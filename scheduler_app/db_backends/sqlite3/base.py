"""Django's SQLite backend, with a ``flush`` that knows the Transition table is append-only.

``manage.py flush`` and transactional tests empty tables with DELETE on SQLite; the
append-only triggers would refuse that. Flushing is the one sanctioned way to wipe the log
(PostgreSQL's flush uses TRUNCATE, which the row triggers do not see either), so the flush
drops the triggers, deletes, and puts them back, all in the flush's transaction.
"""

from __future__ import annotations

from django.db.backends.sqlite3 import base, operations

from scheduler_app.db_triggers import SQLITE_INSTALL, SQLITE_REMOVE, TRANSITION_TABLE


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        sql = super().sql_flush(
            style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
        if TRANSITION_TABLE not in tables:
            return sql
        return [*SQLITE_REMOVE, *sql, *SQLITE_INSTALL]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
