"""Make and insert many new rows fast: ``COPY ... FROM STDIN`` on PostgreSQL, one
prepared ``INSERT`` run for every row (``executemany``) on SQLite, ``bulk_create`` for a
few rows (where COPY's extra round trip costs more than it saves) and on other
databases; instances built through the positional constructor.

Django's ``bulk_create`` prepares every value of every row through its field (a few
microseconds each): for a batch of 1,000 jobs and their 2,000 log rows that is most of
the batch's time. COPY takes Python values as they are (psycopg adapts them), so the
values are the model's attributes, JSON as its text. Primary keys are taken from
the table's sequence first, in list order, and set on the objects, as ``bulk_create``
does. (For the log, whose appends hold the append lock, the keys are also consecutive.)

On SQLite ``bulk_create`` was worse still: its statements take at most 999 values, so a
10,000-task array was about 600 INSERTs, each compiled by Django with every value
prepared (about 4 s here, 8.7 s on a busy demo machine, all of it holding SQLite's one
write lock: the agents' heartbeats failed with "database is locked"). Inside a
transaction (``BEGIN IMMEDIATE``: the write lock is this connection's, no other writer
takes a key meanwhile) the keys are taken first, after the table's largest key and its
AUTOINCREMENT counter, and every row goes through one prepared statement; only the
values SQLite cannot take as they are (times, JSON, ...) are prepared through their
field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, models

#: Fewer rows than this go through bulk_create.
COPY_FROM_ROWS = 50


def insert_new(model: type[models.Model], objs: Sequence[models.Model]) -> None:
    """Insert ``objs`` (new instances of ``model``, in order) and set their primary keys.
    Objects whose keys :func:`take_keys` set already keep them."""
    if connection.vendor == "sqlite" and len(objs) >= COPY_FROM_ROWS and (
            objs[0].pk is not None or take_keys(model, objs)):
        _sqlite_insert(model, objs)
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs)
        return
    if not objs:
        return
    from psycopg.types.json import Jsonb

    opts = model._meta
    qn = connection.ops.quote_name
    keyed = objs[0].pk is not None
    if len(objs) < COPY_FROM_ROWS and not keyed:
        _insert_returning(model, objs, Jsonb)
        return
    fields = list(opts.concrete_fields)
    json_at = {i for i, f in enumerate(fields) if isinstance(f, models.JSONField)}
    if not keyed:
        take_keys(model, objs)
    with connection.cursor() as cursor:
        columns = ", ".join(qn(f.column) for f in fields)
        attnames = [f.attname for f in fields]
        raw: Any = cursor.cursor  # psycopg's own cursor, under Django's wrapper
        # Django's exceptions (IntegrityError for a key taken), as its cursor raises them
        with connection.wrap_database_errors, \
                raw.copy(f"COPY {qn(opts.db_table)} ({columns}) FROM STDIN") as copy:
            for obj in objs:
                values = [getattr(obj, name) for name in attnames]
                for i in json_at:
                    # COPY's text format takes JSON as text (the column parses it): the
                    # same document as a Jsonb adapter writes, without one per value
                    values[i] = _json_text(values[i])
                copy.write_row(values)
    alias = connection.alias
    for obj in objs:
        obj._state.adding = False
        obj._state.db = alias


def take_keys(model: type[models.Model], objs: Sequence[models.Model]) -> bool:
    """Give new ``objs`` their primary keys from the table's sequence, in list order,
    before they are inserted (PostgreSQL; one statement), so that rows may name each
    other's keys (a job array's task 0, a batch's dependencies by index) in the INSERT
    itself. On SQLite, inside a transaction only (its ``BEGIN IMMEDIATE`` holds the one
    write lock, so no other writer takes a key before these rows are in): the keys after
    the table's largest and its AUTOINCREMENT counter. False elsewhere (the keys then
    come from the INSERT): nothing is set."""
    if not objs:
        return connection.vendor in ("postgresql", "sqlite")
    opts = model._meta
    if connection.vendor == "sqlite":
        if not connection.in_atomic_block:
            return False
        qn = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = %s), 0), "
                f"COALESCE((SELECT MAX({qn(opts.pk.column)}) FROM {qn(opts.db_table)}), 0))",
                [opts.db_table])
            last = cursor.fetchone()[0]
        keys = list(range(last + 1, last + 1 + len(objs)))
    elif connection.vendor != "postgresql":
        return False
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [opts.db_table, opts.pk.column, len(objs)],
            )
            keys = [row[0] for row in cursor.fetchall()]
    for obj, key in zip(objs, keys, strict=True):
        obj.pk = key
    return True


def _json_text(value: Any) -> str | None:
    """``value`` as JSON text for COPY (None stays NULL); the empty document most rows
    carry is written once."""
    if value is None:
        return None
    if not value and isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value)


def _sqlite_insert(model: type[models.Model], objs: Sequence[models.Model]) -> None:
    """``objs``, their keys set, through one prepared INSERT (``executemany``): the values
    as they are, but those a field must prepare for SQLite (a time as ISO text, JSON as
    its text, ...), prepared by their field as ``bulk_create`` would."""
    opts = model._meta
    qn = connection.ops.quote_name
    fields = list(opts.concrete_fields)
    attnames = [f.attname for f in fields]
    prepared = [(i, _sqlite_value(f)) for i, f in enumerate(fields)
                if not isinstance(f, _AS_IS)]
    sql = (f"INSERT INTO {qn(opts.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))})")
    rows = []
    for obj in objs:
        values = [getattr(obj, name) for name in attnames]
        for i, prepare in prepared:
            if values[i] is not None:  # NULL as it is
                values[i] = prepare(values[i])
        rows.append(values)
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
    alias = connection.alias
    for obj in objs:
        obj._state.adding = False
        obj._state.db = alias


def _sqlite_value(field: models.Field) -> Any:
    """How ``field`` prepares a value (not None) for SQLite, as ``get_db_prep_save`` does:
    a time once per distinct value (a batch's rows share one), JSON without an encoder
    as ``json.dumps`` (Django's ``adapt_json_value``), anything else through the field."""
    if isinstance(field, models.DateTimeField):
        seen: dict[Any, Any] = {}

        def time_value(value: Any) -> Any:
            if value not in seen:
                seen[value] = field.get_db_prep_save(value, connection)
            return seen[value]

        return time_value
    if isinstance(field, models.JSONField) and field.encoder is None:
        return _json_text
    return lambda value: field.get_db_prep_save(value, connection)


#: Fields whose Python values SQLite takes as they are (text, numbers, booleans, a
#: foreign key's id): anything else is prepared through its field.
_AS_IS = (models.CharField, models.TextField, models.IntegerField, models.BooleanField,
          models.FloatField, models.AutoField, models.BigAutoField, models.ForeignKey)


def _insert_returning(model: type[models.Model], objs: Sequence[models.Model],
                      jsonb: Any) -> None:
    """One ``INSERT ... VALUES (...), ... RETURNING id`` with the attributes as they are:
    what bulk_create sends, without preparing each value through its field."""
    opts = model._meta
    qn = connection.ops.quote_name
    fields = [f for f in opts.concrete_fields if f is not opts.pk]
    json_at = {i for i, f in enumerate(fields) if isinstance(f, models.JSONField)}
    attnames = [f.attname for f in fields]
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params: list[Any] = []
    for obj in objs:
        values = [getattr(obj, name) for name in attnames]
        for i in json_at:
            values[i] = jsonb(values[i])
        params.extend(values)
    sql = (f"INSERT INTO {qn(opts.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
           f"VALUES {', '.join([row] * len(objs))} RETURNING {qn(opts.pk.column)}")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        keys = [r[0] for r in cursor.fetchall()]  # in VALUES order, as bulk_create relies on
    alias = connection.alias
    for obj, key in zip(objs, keys, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = alias


def new_instances(model: type[models.Model], rows: Iterable[Mapping[str, Any]]) -> list[Any]:
    """``model(**row)`` for each row, through the positional constructor (the one Django
    uses to load rows from the database: several times faster than keywords, which look
    up a default and a descriptor per field). Rows name fields by attname
    (``tenant_id``); a field a row leaves out gets its default (a callable default is
    called per row, so no two rows share a list)."""
    plan, known = _instance_plan(model)
    out = []
    for row in rows:
        if not row.keys() <= known:
            unknown = row.keys() - known
            raise TypeError(f"{model.__name__} has no field(s) {sorted(unknown)}")
        out.append(model(*[
            row[name] if name in row else (make() if make is not None else default)
            for name, default, make in plan
        ]))
    return out


#: model -> its concrete fields' (attname, default, default factory), and their attnames.
_INSTANCE_PLANS: dict[type[models.Model], tuple[list[tuple[str, Any, Any]], frozenset[str]]] = {}


def _instance_plan(
    model: type[models.Model],
) -> tuple[list[tuple[str, Any, Any]], frozenset[str]]:
    """What new_instances needs of ``model``, built once per process (models do not change
    while it runs): a constant default is one object whatever the row, as Django's
    ``get_default`` returns it; a callable one is called per row."""
    cached = _INSTANCE_PLANS.get(model)
    if cached is None:
        plan: list[tuple[str, Any, Any]] = []
        for field in model._meta.concrete_fields:
            if field.has_default() and callable(field.default):
                plan.append((field.attname, None, field.get_default))
            else:
                plan.append((field.attname, field.get_default(), None))
        cached = (plan, frozenset(name for name, _default, _make in plan))
        _INSTANCE_PLANS[model] = cached
    return cached


__all__ = ["COPY_FROM_ROWS", "insert_new", "new_instances", "take_keys"]
