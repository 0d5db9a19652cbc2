"""`manage.py replay --verify` rebuilds the projection from the log alone and reports
every difference with the tables."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.core.states import IllegalTransition, JobState, Reason
from scheduler_app.models import Job
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from scheduler_app.services import AllocationError, job_submit

from .factories import T0, NodeFactory, TenantFactory, job_in_state, move

pytestmark = pytest.mark.django_db


def replay_verify() -> tuple[bool, str]:
    out = StringIO()
    try:
        call_command("replay", "--verify", stdout=out)
    except CommandError as error:
        return False, out.getvalue() + str(error)
    return True, out.getvalue()


@pytest.fixture
def busy_cluster():
    """A few jobs in different states on two nodes."""
    node_a, node_b = NodeFactory(), NodeFactory()
    tenant = TenantFactory()
    running = job_in_state(JobState.RUNNING, tenant=tenant, node=node_a, gpus=4)
    preempted = job_in_state(JobState.PREEMPTED, tenant=tenant, node=node_b, gpus=2)
    done = job_in_state(JobState.COMPLETED, tenant=tenant, node=node_b, gpus=8)
    queued = job_in_state(JobState.QUEUED, tenant=tenant, node=node_a)
    return {"nodes": (node_a, node_b), "jobs": (running, preempted, done, queued)}


def test_replay_verify_passes_on_a_consistent_database(busy_cluster):
    ok, output = replay_verify()
    assert ok, output
    assert "projection matches the log" in output


def raw(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_replay_verify_reports_a_tampered_job_state(busy_cluster):
    running = busy_cluster["jobs"][0]
    raw("UPDATE scheduler_app_job SET state = 'COMPLETED' WHERE id = %s", [running.pk])
    ok, output = replay_verify()
    assert not ok
    assert f"job {running.pk} state: log says 'RUNNING', tables say 'COMPLETED'" in output


def test_replay_verify_reports_tampered_node_free_gpus(busy_cluster):
    node_a = busy_cluster["nodes"][0]
    raw("UPDATE scheduler_app_node SET free_gpus = 8 WHERE id = %s", [node_a.pk])
    ok, output = replay_verify()
    assert not ok
    assert f"node {node_a.name} free_gpus: log says 4, tables say 8" in output


def test_replay_verify_reports_a_tampered_allocation(busy_cluster):
    running = busy_cluster["jobs"][0]
    raw(
        "UPDATE scheduler_app_allocation SET gpu_indices = '[4, 5, 6, 7]' WHERE job_id = %s",
        [running.pk],
    )
    ok, output = replay_verify()
    assert not ok
    assert f"job {running.pk} allocation" in output


def test_replay_verify_reports_every_mismatch_not_just_the_first(busy_cluster):
    running, preempted, *_ = busy_cluster["jobs"]
    raw("UPDATE scheduler_app_job SET retry_count = 3 WHERE id = %s", [running.pk])
    raw("UPDATE scheduler_app_job SET state = 'QUEUED' WHERE id = %s", [preempted.pk])
    ok, output = replay_verify()
    assert not ok
    assert output.count("MISMATCH") == 2
    assert "2 mismatch(es)" in output


def test_replay_without_verify_summarises_the_rebuilt_states(busy_cluster):
    out = StringIO()
    call_command("replay", stdout=out)
    assert "COMPLETED 1, PREEMPTED 1, QUEUED 1, RUNNING 1" in out.getvalue()


# Random walks through the service keep the projection and the log in agreement.
MOVES = [
    (JobState.PLACING, Reason.PLACED),
    (JobState.RUNNING, Reason.STARTED),
    (JobState.RUNNING, Reason.CHECKPOINTED),
    (JobState.RUNNING, Reason.SHRUNK),
    (JobState.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED),
    (JobState.CHECKPOINTING, Reason.CHECKPOINT_STARTED),
    (JobState.PREEMPTED, Reason.PREEMPTED),
    (JobState.QUEUED, Reason.REQUEUED),
    (JobState.QUEUED, Reason.NODE_FAILED),
    (JobState.COMPLETED, Reason.COMPLETED),
    (JobState.FAILED, Reason.EXIT_FAILED),
    (JobState.CANCELLED, Reason.CANCELLED),
]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(MOVES), st.integers(1, 4)), max_size=25
    )
)
def test_any_sequence_of_service_calls_keeps_log_and_projection_in_agreement(steps):
    nodes = [NodeFactory(gpu_count=4), NodeFactory(gpu_count=4)]
    tenant = TenantFactory(guaranteed_gpus=8, borrow_limit_gpus=0)
    jobs = [
        job_submit(tenant=tenant, name=f"j{i}", gpus=2, min_gpus=1, checkpointable=i == 1, at=T0)
        for i in range(3)
    ]
    at = T0
    for which, (to_state, reason), first_gpu in steps:
        at += timedelta(seconds=37)
        alloc = None
        if reason == Reason.PLACED:
            alloc = {nodes[which % 2].name: [first_gpu % 4, (first_gpu + 1) % 4]}
        elif reason == Reason.SHRUNK:
            alloc = {nodes[which % 2].name: [first_gpu % 4]}
        # refused moves write nothing; the agreement below must hold either way
        with contextlib.suppress(IllegalTransition, AllocationError):
            move(jobs[which], to_state, reason, at=at, alloc=alloc)
    assert compare_with_tables(rebuild_from_log()) == []
    assert Job.objects.filter(pk__in=[j.pk for j in jobs]).count() == 3
