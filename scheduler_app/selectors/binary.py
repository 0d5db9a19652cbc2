"""Reads on PostgreSQL through psycopg's binary protocol, for the bulk reads of the log.

Django's cursors bind on the client and read text: its timestamp loader is Python, about
a microsecond a value, which is most of the time of reading thousands of log rows. A
cursor of psycopg's own, on Django's connection, reads binary with psycopg's C loaders.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import connection


def fetch_binary(sql: str, params: list[Any]) -> list[tuple]:
    """All rows of ``sql`` as tuples, read binary from a psycopg cursor of its own on
    Django's connection (PostgreSQL only). Errors come as Django's, as the ORM's do (and
    a broken connection is noticed); the connection's ``execute_wrapper`` hooks see the
    statement, as they see the ORM's (the benchmarks count statements with one)."""
    import psycopg  # PostgreSQL only

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:

        def execute(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
            cursor.execute(sql, params, binary=True)

        executor = execute
        for wrapper in reversed(connection.execute_wrappers):  # the first is the outermost
            executor = partial(wrapper, executor)
        executor(sql, params, False, {"connection": connection, "cursor": cursor})
        return cursor.fetchall()
