"""The Transition table is append-only at the database: triggers refuse UPDATE and DELETE
(on PostgreSQL in CI, and on SQLite), whoever issues them."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from scheduler_app.core.states import JobState
from scheduler_app.models import Transition
from scheduler_app.services import job_submit

from .factories import T0, NodeFactory, TenantFactory, job_in_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def logged_job():
    return job_in_state(JobState.RUNNING, tenant=TenantFactory(), node=NodeFactory())


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE scheduler_app_transition SET to_state = 'COMPLETED' WHERE id = %s",
        "UPDATE scheduler_app_transition SET detail = '{}' WHERE id = %s",
        "DELETE FROM scheduler_app_transition WHERE id = %s",
        "DELETE FROM scheduler_app_transition WHERE id >= %s",
    ],
)
def test_raw_update_and_delete_on_the_log_fail_at_the_database(logged_job, sql):
    first = Transition.objects.filter(job=logged_job).first()
    before = list(Transition.objects.order_by("pk").values())
    with (
        pytest.raises(IntegrityError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [first.pk])
    assert list(Transition.objects.order_by("pk").values()) == before


def test_orm_update_and_delete_on_the_log_fail_too(logged_job):
    rows = Transition.objects.filter(job=logged_job)
    count = rows.count()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        rows.update(reason="Completed")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        rows.first().delete()
    assert rows.count() == count


@pytest.mark.postgres
def test_postgres_has_the_append_only_trigger():
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'scheduler_app_transition'::regclass"
            " AND NOT tgisinternal"
        )
        assert [name for (name,) in cursor.fetchall()] == ["transition_append_only"]


@pytest.mark.django_db(transaction=True)
def test_flush_still_wipes_the_log_and_keeps_the_triggers():
    # flush (what transactional tests and `manage.py flush` use) is the one sanctioned wipe
    job_submit(tenant=TenantFactory(), name="x", gpus=1, at=T0)
    call_command("flush", "--no-input", verbosity=0)
    assert Transition.objects.count() == 0
    job_submit(tenant=TenantFactory(), name="y", gpus=1, at=T0)
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        Transition.objects.all().delete()
