"""Cluster events in the log: Transition.kind ("job" | "node" | "tenant"), nullable job, new
node and tenant foreign keys, a check constraint that the key matching the kind is set.

The append-only triggers are dropped first and installed again last: on SQLite, altering a
column rebuilds the table (create, copy, drop, rename) and dropping a table drops its
triggers, so without this the log would silently stop being append-only.
"""

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.db_triggers import install_sql, remove_sql


def install(apps, schema_editor):
    for statement in install_sql(schema_editor.connection.vendor):
        schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    for statement in remove_sql(schema_editor.connection.vendor):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler_app', '0002_transition_append_only'),
    ]

    operations = [
        migrations.RunPython(remove, install),
        migrations.AddField(
            model_name='transition',
            name='kind',
            field=models.CharField(choices=[('job', 'job'), ('node', 'node'), ('tenant', 'tenant')], default='job', max_length=8),
        ),
        migrations.AddField(
            model_name='transition',
            name='node',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='transitions', to='scheduler_app.node'),
        ),
        migrations.AddField(
            model_name='transition',
            name='tenant',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='transitions', to='scheduler_app.tenant'),
        ),
        migrations.AlterField(
            model_name='transition',
            name='from_state',
            field=models.CharField(blank=True, choices=[('SUBMITTED', 'SUBMITTED'), ('QUEUED', 'QUEUED'), ('PLACING', 'PLACING'), ('RUNNING', 'RUNNING'), ('PREEMPT_REQUESTED', 'PREEMPT_REQUESTED'), ('CHECKPOINTING', 'CHECKPOINTING'), ('PREEMPTED', 'PREEMPTED'), ('COMPLETED', 'COMPLETED'), ('FAILED', 'FAILED'), ('CANCELLED', 'CANCELLED'), ('healthy', 'healthy'), ('draining', 'draining'), ('down', 'down')], max_length=24, null=True),
        ),
        migrations.AlterField(
            model_name='transition',
            name='job',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='transitions', to='scheduler_app.job'),
        ),
        migrations.AlterField(
            model_name='transition',
            name='to_state',
            field=models.CharField(blank=True, choices=[('SUBMITTED', 'SUBMITTED'), ('QUEUED', 'QUEUED'), ('PLACING', 'PLACING'), ('RUNNING', 'RUNNING'), ('PREEMPT_REQUESTED', 'PREEMPT_REQUESTED'), ('CHECKPOINTING', 'CHECKPOINTING'), ('PREEMPTED', 'PREEMPTED'), ('COMPLETED', 'COMPLETED'), ('FAILED', 'FAILED'), ('CANCELLED', 'CANCELLED'), ('healthy', 'healthy'), ('draining', 'draining'), ('down', 'down')], max_length=24),
        ),
        migrations.AddIndex(
            model_name='transition',
            index=models.Index(condition=models.Q(('node__isnull', False)), fields=['node', 'id'], name='transition_node_seq'),
        ),
        migrations.AddIndex(
            model_name='transition',
            index=models.Index(condition=models.Q(('tenant__isnull', False)), fields=['tenant', 'id'], name='transition_tenant_seq'),
        ),
        migrations.AddConstraint(
            model_name='transition',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('job__isnull', False), ('kind', 'job'), ('node__isnull', True), ('tenant__isnull', True)), models.Q(('job__isnull', True), ('kind', 'node'), ('node__isnull', False), ('tenant__isnull', True)), models.Q(('job__isnull', True), ('kind', 'tenant'), ('node__isnull', True), ('tenant__isnull', False)), _connector='OR'), name='transition_kind_matches_fk'),
        ),
        migrations.RunPython(install, remove),
    ]
