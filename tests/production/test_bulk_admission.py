"""New jobs enter in bulk (``transitions.admit_new_jobs``: COPY for a batch on PostgreSQL,
one prepared INSERT for every row on SQLite, one INSERT or bulk_create for a few rows)
with exactly the rows and projection the one-move-at-a-time path writes, their log rows
consecutive and in order."""

from __future__ import annotations

import pytest
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Transition
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.copy_insert import COPY_FROM_ROWS
from scheduler_app.services.jobs import array_submit, jobs_submit_batch, submit_replayed
from scheduler_app.services.transitions import append_first
from tests.foundation.factories import T0, NodeFactory, TenantFactory, UserFactory
from tests.foundation.test_replay import replay_verify

pytestmark = pytest.mark.django_db

S = JobState
SPECS = [
    {"name": "ok", "gpus": 2, "max_runtime_s": 600, "checkpointable": True,
     "command": "python train.py --lr 3e-4"},
    {"name": "huge", "gpus": 4096},  # never fits: FAILED with the arithmetic
    {"name": "elastic", "gpus": 8, "min_gpus": 2, "gpus_per_node": 2, "priority": 5},
]


@pytest.fixture
def tenant():
    NodeFactory(name="n0")
    NodeFactory(name="n1")
    return TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)


def row_shape(job: Job) -> list[tuple]:
    return list(Transition.objects.filter(job=job).order_by("pk").values_list(
        "kind", "from_state", "to_state", "reason", "actor", "actor_name", "at", "detail",
        "tick_id"))


def job_shape(job: Job) -> dict:
    return {k: v for k, v in model_to_dict(job).items()
            if k not in ("id", "idempotency_key")}


def one_at_a_time(tenant, owner, spec: dict) -> Job:
    """The rows the services wrote before bulk admission: a create, the first row, then
    one move through the transition service."""
    from scheduler_app.services.jobs import never_fits

    job = Job.objects.create(tenant=tenant, owner=owner, submitted_at=T0, **spec)
    append_first(job, actor=Actor.USER, at=T0, actor_name=owner.username)
    why = never_fits(job, tenant)
    job_transition(job_id=job.pk, to_state=S.FAILED if why else S.QUEUED,
                   reason=Reason.NEVER_FITS if why else Reason.ADMITTED, actor=Actor.USER,
                   at=T0, detail={"why": why} if why else None, actor_name=owner.username)
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("copies", [1, COPY_FROM_ROWS])  # one INSERT, and COPY on PostgreSQL
def test_a_batch_writes_what_one_move_at_a_time_writes(tenant, copies):
    owner = UserFactory(username="pipeline")
    specs = [dict(s, name=f"{s['name']}-{i}") for i in range(copies) for s in SPECS]
    jobs = jobs_submit_batch(tenant=tenant, owner=owner, specs=specs, at=T0,
                             idempotency_key="sweep")
    assert [j.name for j in jobs] == [s["name"] for s in specs]
    assert [j.idempotency_key for j in jobs] == [f"sweep#{i}" for i in range(len(specs))]
    for job, spec in zip(jobs, specs, strict=True):
        stored = Job.objects.get(pk=job.pk)
        reference = one_at_a_time(tenant, owner, spec)
        assert job_shape(stored) == job_shape(reference)
        assert row_shape(stored) == row_shape(reference)
        assert job_shape(job) == job_shape(stored)  # the returned objects are the rows
    ok, output = replay_verify()
    assert ok, output


def test_a_batchs_rows_are_consecutive_and_in_order(tenant):
    specs = [{"name": f"j{i}", "gpus": 1} for i in range(COPY_FROM_ROWS + 5)]
    jobs = jobs_submit_batch(tenant=tenant, owner=None, specs=specs)
    rows = list(Transition.objects.order_by("pk").values_list("pk", "job_id", "to_state"))
    assert [r[0] for r in rows] == list(range(rows[0][0], rows[0][0] + len(rows)))
    expected = [(job.pk, state) for job in jobs for state in (S.SUBMITTED, S.QUEUED)]
    assert [(job_id, state) for _pk, job_id, state in rows] == expected
    assert [j.pk for j in jobs] == sorted(j.pk for j in jobs)


def test_a_retried_batch_or_submit_is_answered_by_its_key(tenant):
    specs = [{"name": f"j{i}", "gpus": 1} for i in range(COPY_FROM_ROWS)]
    first = jobs_submit_batch(tenant=tenant, owner=None, specs=specs, idempotency_key="k")
    rows = Transition.objects.count()
    again = jobs_submit_batch(tenant=tenant, owner=None, specs=specs, idempotency_key="k")
    assert [j.pk for j in again] == [j.pk for j in first] and submit_replayed(again[0])
    assert not submit_replayed(first[0]) and Transition.objects.count() == rows
    single = job_submit(tenant=tenant, name="s", gpus=1, idempotency_key="one")
    retry = job_submit(tenant=tenant, name="s", gpus=1, idempotency_key="one")
    assert retry.pk == single.pk and submit_replayed(retry) and not submit_replayed(single)
    assert Transition.objects.count() == rows + 2


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own path")
def test_an_array_on_sqlite_is_a_few_statements_whatever_its_size(tenant):
    """bulk_create made a 10,000-task array about 600 INSERTs, each compiled with every
    value prepared: 8.7 s holding SQLite's one write lock on the demo, whose agents'
    heartbeats failed meanwhile (2026-12-07). Now the keys are taken first and each table
    is one prepared INSERT run for every row."""
    owner = UserFactory(username="sweeper")
    job_submit(tenant=tenant, owner=owner, name="before", gpus=1, at=T0)
    with CaptureQueriesContext(connection) as queries:
        tasks = array_submit(tenant=tenant, owner=owner, name="sweep", gpus=1, count=2000,
                             max_running=4, max_runtime_s=600, at=T0,
                             idempotency_key="sweep")
    # (Django logs an executemany as "<n> times: <sql>")
    sql = [q["sql"].split(" times: ", 1)[-1] for q in queries.captured_queries]
    writes = [text.split()[0] for text in sql if text.split()[0] in ("INSERT", "UPDATE")]
    assert writes == ["INSERT", "INSERT"], writes  # the tasks, their log rows
    assert [t.pk for t in tasks] == list(range(tasks[0].pk, tasks[0].pk + 2000))
    stored = list(Job.objects.filter(array_id=tasks[0].pk).order_by("pk")
                  .values_list("pk", "array_index", "idempotency_key", "state"))
    assert stored == [(t.pk, i, f"sweep#{i}", S.QUEUED) for i, t in enumerate(tasks)]
    assert Transition.objects.filter(job__array_id=tasks[0].pk).count() == 4000
    again = array_submit(tenant=tenant, owner=owner, name="sweep", gpus=1, count=2000,
                         max_running=4, max_runtime_s=600, at=T0, idempotency_key="sweep")
    assert submit_replayed(again[0]) and Job.objects.count() == 2001
    after = job_submit(tenant=tenant, owner=owner, name="after", gpus=1, at=T0)
    assert after.pk == tasks[-1].pk + 1
    ok, output = replay_verify()
    assert ok, output
