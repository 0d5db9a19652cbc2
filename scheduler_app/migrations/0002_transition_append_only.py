"""Make the Transition table append-only: database triggers refuse UPDATE and DELETE.

The SQL depends on the vendor (a plpgsql function on PostgreSQL, RAISE(ABORT) triggers on
SQLite); it lives in scheduler_app/db_triggers.py, shared with the SQLite flush.
"""

from django.db import migrations

from scheduler_app.db_triggers import install_sql, remove_sql


def install(apps, schema_editor):
    for statement in install_sql(schema_editor.connection.vendor):
        schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    for statement in remove_sql(schema_editor.connection.vendor):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("scheduler_app", "0001_initial")]

    operations = [migrations.RunPython(install, remove)]
