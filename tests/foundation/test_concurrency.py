"""Two writers moving the same job at once (real PostgreSQL row locks): the row lock
serialises them, the loser sees the winner's state, and the log stays one legal history."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

from scheduler_app.core.states import IllegalTransition, JobState, Reason, is_allowed
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Transition
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from scheduler_app.services import job_cancel, job_submit, job_transition

from .factories import T0, NodeFactory, TenantFactory, job_in_state

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def race(*calls: Callable[[], object]) -> list[object]:
    """Run ``calls`` in threads released together; each result is a value or an exception."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(i: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait()
            results[i] = call()
        except Exception as error:  # the outcome is what the test inspects
            results[i] = error
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def assert_one_legal_history(job_id: int) -> None:
    rows = list(Transition.objects.filter(job_id=job_id).order_by("pk"))
    assert rows[0].from_state is None
    for previous, row in zip(rows, rows[1:], strict=False):
        assert row.from_state == previous.to_state
        assert is_allowed(row.from_state, row.to_state)
    assert compare_with_tables(rebuild_from_log()) == []


def test_two_placements_of_one_job_at_once_leave_exactly_one():
    node = NodeFactory(gpu_count=8)
    job = job_in_state(JobState.QUEUED, tenant=TenantFactory(), node=node)

    def place(indices: list[int]) -> Callable[[], object]:
        return lambda: job_transition(
            job_id=job.pk,
            to_state=JobState.PLACING,
            reason=Reason.PLACED,
            actor=Actor.SCHEDULER,
            at=T0,
            alloc={node.name: indices},
        )

    results = race(place([0, 1, 2, 3]), place([4, 5, 6, 7]))
    won = [r for r in results if isinstance(r, Transition)]
    lost = [r for r in results if isinstance(r, IllegalTransition)]
    assert (len(won), len(lost)) == (1, 1), results
    assert "PLACING -> PLACING" in str(lost[0])
    node.refresh_from_db()
    assert node.free_gpus == 4
    assert_one_legal_history(job.pk)


def test_a_cancel_racing_a_completion_leaves_one_final_state():
    node = NodeFactory(gpu_count=8)
    job = job_in_state(JobState.RUNNING, tenant=TenantFactory(), node=node)

    def complete() -> Transition:
        return job_transition(
            job_id=job.pk,
            to_state=JobState.COMPLETED,
            reason=Reason.COMPLETED,
            actor=Actor.AGENT,
            at=T0,
        )

    def cancel() -> Transition:
        return job_cancel(job_id=job.pk, at=T0)

    results = race(complete, cancel)
    assert sum(isinstance(r, Transition) for r in results) == 1, results
    assert sum(isinstance(r, IllegalTransition) for r in results) == 1, results
    job.refresh_from_db()
    assert job.state in (JobState.COMPLETED, JobState.CANCELLED)
    node.refresh_from_db()
    assert node.free_gpus == 8
    assert_one_legal_history(job.pk)


def test_many_writers_on_many_jobs_keep_seq_order_equal_to_each_jobs_order():
    node = NodeFactory(gpu_count=8)
    tenant = TenantFactory(guaranteed_gpus=64)
    jobs = [job_in_state(JobState.QUEUED, tenant=tenant, node=node, gpus=1) for _ in range(6)]

    def walk(job_id: int, gpu: int) -> Callable[[], object]:
        def run() -> object:
            for to_state, reason, alloc in (
                (JobState.PLACING, Reason.PLACED, {node.name: [gpu]}),
                (JobState.RUNNING, Reason.STARTED, None),
                (JobState.COMPLETED, Reason.COMPLETED, None),
            ):
                job_transition(
                    job_id=job_id,
                    to_state=to_state,
                    reason=reason,
                    actor=Actor.SCHEDULER,
                    at=T0,
                    alloc=alloc,
                )
            return "done"

        return run

    results = race(*(walk(job.pk, i) for i, job in enumerate(jobs)))
    assert results == ["done"] * len(jobs)
    for job in jobs:
        assert_one_legal_history(job.pk)


def test_two_submissions_racing_with_one_idempotency_key_make_one_job():
    tenant = TenantFactory()

    def submit() -> Job:
        return job_submit(tenant=tenant, name="once", gpus=1, idempotency_key="k", at=T0)

    results = race(submit, submit, submit)
    assert all(isinstance(r, Job) for r in results), results
    assert len({r.pk for r in results}) == 1
    assert Job.objects.filter(tenant=tenant).count() == 1
    assert_one_legal_history(results[0].pk)
