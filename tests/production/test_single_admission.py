"""A single submit is a transaction of its own (``transitions.admit_new_job``): on
PostgreSQL one query string (the log's append lock, the job, its two rows), elsewhere a
durable block. It writes what a batch of one writes, after whoever holds the append lock,
all of it or nothing.

These run in autocommit (``transaction=True``), as a web process does: inside a test
case's transaction the query string would run inside that transaction instead.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Transition
from scheduler_app.services import job_submit
from scheduler_app.services.jobs import ClusterShape, _new_jobs, jobs_submit_batch
from scheduler_app.services.signals import transition_committed
from scheduler_app.services.transitions import admit_new_jobs, append_lock
from tests.foundation.factories import T0, NodeFactory, TenantFactory, UserFactory
from tests.foundation.test_replay import replay_verify
from tests.production.test_bulk_admission import SPECS, job_shape, row_shape
from tests.production.test_lock_order_postgres import waiting_for_the_append_lock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tenant():
    NodeFactory(name="n0")
    NodeFactory(name="n1")
    return TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)


def test_a_single_submit_writes_what_a_batch_of_one_writes(tenant):
    owner = UserFactory(username="pipeline")
    for spec in SPECS:  # admitted, never fits (FAILED with the arithmetic), elastic
        single = job_submit(tenant=tenant, owner=owner, at=T0, idempotency_key="k", **spec)
        (batched,) = jobs_submit_batch(tenant=tenant, owner=owner, specs=[spec], at=T0)
        stored = Job.objects.get(pk=single.pk)
        assert job_shape(stored) == job_shape(Job.objects.get(pk=batched.pk))
        assert row_shape(stored) == row_shape(batched)
        assert job_shape(single) == job_shape(stored)  # the returned object is the row
        assert stored.idempotency_key == "k"
        Job.objects.filter(pk=single.pk).update(idempotency_key="")  # the next spec's turn
    ok, output = replay_verify()
    assert ok, output


@pytest.mark.postgres
def test_it_is_one_round_trip_with_the_rows_consecutive_after_the_lock(tenant):
    shape = ClusterShape()  # the cluster's shape, read once (the API keeps it a while)
    job_submit(tenant=tenant, name="warm", gpus=1, capacity=shape)
    with CaptureQueriesContext(connection) as captured:
        job = job_submit(tenant=tenant, name="one", gpus=1, capacity=shape)
    assert len(captured.captured_queries) == 1
    sql = captured.captured_queries[0]["sql"]
    assert sql.index("pg_advisory_xact_lock") < sql.index("INSERT")
    rows = list(Transition.objects.filter(job=job).order_by("pk").values_list("pk", "to_state"))
    assert [state for _pk, state in rows] == ["SUBMITTED", "QUEUED"]
    assert rows[1][0] == rows[0][0] + 1


def test_a_taken_key_writes_nothing_and_answers_with_the_first_job(tenant):
    first = job_submit(tenant=tenant, name="s", gpus=1, idempotency_key="once")
    jobs, rows = Job.objects.count(), Transition.objects.count()
    retry = job_submit(tenant=tenant, name="s", gpus=1, idempotency_key="once")
    assert retry.pk == first.pk and getattr(retry, "replayed", False)
    assert (Job.objects.count(), Transition.objects.count()) == (jobs, rows)
    other = TenantFactory(name="audio", guaranteed_gpus=8, borrow_limit_gpus=0)
    elsewhere = job_submit(tenant=other, name="s", gpus=1, idempotency_key="once")
    assert elsewhere.pk != first.pk  # keys are per tenant


def test_the_committed_signal_comes_after_the_commit_once_per_row(tenant):
    seen: list[tuple[int, bool]] = []

    def listener(sender, transition, **kwargs):
        # another connection sees the row only once it is committed
        def committed() -> None:
            seen.append((transition.pk, Transition.objects.filter(pk=transition.pk).exists()))
            connection.close()

        other = threading.Thread(target=committed)
        other.start()
        other.join(10)

    transition_committed.connect(listener)
    try:
        job = job_submit(tenant=tenant, name="announced", gpus=1)
    finally:
        transition_committed.disconnect(listener)
    rows = list(Transition.objects.filter(job=job).order_by("pk").values_list("pk", flat=True))
    assert seen == [(pk, True) for pk in rows]


def test_it_refuses_to_run_inside_a_callers_transaction(tenant):
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        job_submit(tenant=tenant, name="nested", gpus=1)
    assert not Job.objects.exists()


@pytest.mark.postgres
def test_a_submit_waits_for_the_lock_holder_and_its_rows_come_after_the_holders(tenant):
    holder_rows: list[int] = []
    submitted: dict[str, object] = {}
    holding = threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic(durable=True), append_lock():
                holding.set()
                deadline = time.monotonic() + 20
                while not waiting_for_the_append_lock():  # the submit is queued behind us
                    assert time.monotonic() < deadline, "the submit never waited"
                    time.sleep(0.02)
                jobs, refusals = _new_jobs(tenant, None, [{"name": "first", "gpus": 1}],
                                           at=T0, fits=ClusterShape())
                admit_new_jobs(jobs, refusals=refusals, actor=Actor.USER, at=T0)
                holder_rows.extend(Transition.objects.filter(job=jobs[0])
                                   .values_list("pk", flat=True))
        finally:
            connection.close()

    def submitter() -> None:
        try:
            submitted["job"] = job_submit(tenant=tenant, name="second", gpus=1)
        except Exception as error:  # noqa: BLE001 - the test inspects it
            submitted["job"] = error
        finally:
            connection.close()

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(20)
    second = threading.Thread(target=submitter)
    second.start()
    first.join(60)
    second.join(60)
    job = submitted["job"]
    assert isinstance(job, Job), job
    mine = list(Transition.objects.filter(job=job).values_list("pk", flat=True))
    assert len(holder_rows) == 2 and len(mine) == 2
    assert min(mine) > max(holder_rows)  # seq order is commit order
    ok, output = replay_verify()
    assert ok, output
