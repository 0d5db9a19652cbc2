"""One UPDATE for many rows with different values: ``UPDATE t ... FROM (VALUES ...)``.

Django's ``bulk_update`` writes a ``CASE WHEN pk = ... THEN ...`` per field and row: its
SQL grows with rows x fields and costs milliseconds to compile for a few hundred rows.
A VALUES list joined on the key is one linear statement on PostgreSQL and SQLite (3.33+:
UPDATE ... FROM); both name a VALUES list's columns ``column1``, ``column2``, ...
PostgreSQL cannot infer a column's type from bare parameters (NULLs, text for a
timestamp), so there every value is cast to its field's column type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models

#: Rows per statement: SQLite allows 32,766 parameters, PostgreSQL 65,535.
ROWS_PER_STATEMENT = 1000


def update_from_values(
    model: type[models.Model],
    fields: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    key: str = "pk",
    add: Sequence[str] = (),
    where: Mapping[str, Any] | None = None,
) -> int:
    """Set ``fields`` of each row ``(key, value, ...)`` of ``model`` (``key``: the primary
    key or another unique field); a field in ``add`` is incremented by its value instead.
    ``where`` (field name -> value) touches only the rows with those values. Returns the
    number of rows updated (a statement per :data:`ROWS_PER_STATEMENT` rows)."""
    if not rows:
        return 0
    opts = model._meta
    qn = connection.ops.quote_name
    key_field = opts.pk if key == "pk" else opts.get_field(key)
    targets = [opts.get_field(name) for name in fields]
    postgres = connection.vendor == "postgresql"

    def slot(field: models.Field) -> str:
        return f"CAST(%s AS {field.db_type(connection)})" if postgres else "%s"

    row_sql = "(" + ", ".join(slot(f) for f in [key_field, *targets]) + ")"
    sets = []
    for i, field in enumerate(targets, start=2):
        column = qn(field.column)
        value = f"v.column{i}"
        sets.append(f"{column} = t.{column} + {value}" if field.name in add else
                    f"{column} = {value}")
    condition = f"t.{qn(key_field.column)} = v.column1"
    where_params = []
    for name, value in (where or {}).items():
        field = opts.get_field(name)
        condition += f" AND t.{qn(field.column)} = %s"
        where_params.append(field.get_db_prep_value(value, connection, prepared=False))
    updated = 0
    with connection.cursor() as cursor:
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start:start + ROWS_PER_STATEMENT]
            params: list[Any] = []
            for row in chunk:
                params.append(key_field.get_db_prep_value(row[0], connection, prepared=False))
                for field, value in zip(targets, row[1:], strict=True):
                    params.append(field.get_db_prep_value(value, connection, prepared=False))
            params.extend(where_params)
            cursor.execute(
                f"UPDATE {qn(opts.db_table)} AS t SET {', '.join(sets)} "
                f"FROM (VALUES {', '.join([row_sql] * len(chunk))}) AS v WHERE {condition}",
                params,
            )
            updated += cursor.rowcount
    return updated
