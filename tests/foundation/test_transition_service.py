"""The one service that moves jobs: every pair of states against the table, atomicity,
allocations, node free GPUs and tenant usage."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.forms.models import model_to_dict

from scheduler_app.core.fairshare import accrue
from scheduler_app.core.states import (
    IllegalTransition,
    JobState,
    PendingReason,
    Reason,
    all_pairs,
    is_allowed,
)
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from scheduler_app.services import AllocationError, job_cancel, job_submit, job_transition
from scheduler_app.services import transitions as transitions_module
from scheduler_app.services.signals import transition_committed

from .factories import T0, NodeFactory, TenantFactory, job_in_state, move

pytestmark = pytest.mark.django_db

#: A plausible reason for each target state (the service checks the pair, not the reason).
REASON_FOR = {
    JobState.SUBMITTED: Reason.SUBMITTED,
    JobState.QUEUED: Reason.NODE_FAILED,
    JobState.PLACING: Reason.PLACED,
    JobState.RUNNING: Reason.STARTED,
    JobState.PREEMPT_REQUESTED: Reason.PREEMPT_REQUESTED,
    JobState.CHECKPOINTING: Reason.CHECKPOINT_STARTED,
    JobState.PREEMPTED: Reason.PREEMPTED,
    JobState.COMPLETED: Reason.COMPLETED,
    JobState.FAILED: Reason.EXIT_FAILED,
    JobState.CANCELLED: Reason.CANCELLED,
}


def snapshot() -> dict[str, object]:
    """Everything a transition may write, to prove that a refused one wrote nothing."""
    return {
        "transitions": list(Transition.objects.values_list("pk", flat=True)),
        "jobs": [model_to_dict(j) for j in Job.objects.order_by("pk")],
        "allocations": list(Allocation.objects.order_by("pk").values()),
        "nodes": list(Node.objects.order_by("pk").values()),
        "tenants": list(Tenant.objects.order_by("pk").values()),
    }


@pytest.mark.parametrize(("from_state", "to_state"), all_pairs(), ids=lambda s: str(s))
def test_every_pair_of_states_follows_the_table(from_state: JobState, to_state: JobState):
    node = NodeFactory()
    tenant = TenantFactory()
    job = job_in_state(from_state, tenant=tenant, node=node)
    assert job.state == from_state
    # QUEUED -> PLACING needs GPUs; give the free half of the node.
    alloc = {node.name: [4, 5, 6, 7]} if to_state == JobState.PLACING else None
    if to_state == JobState.QUEUED and from_state == JobState.SUBMITTED:
        reason = Reason.ADMITTED
    elif to_state == from_state:
        reason = Reason.CHECKPOINTED
    else:
        reason = REASON_FOR[to_state]
    before = snapshot()
    at = T0 + timedelta(hours=1)

    if is_allowed(from_state, to_state):
        row = job_transition(
            job_id=job.pk,
            to_state=to_state,
            reason=reason,
            actor=Actor.SCHEDULER,
            at=at,
            alloc=alloc,
        )
        job.refresh_from_db()
        assert (row.from_state, row.to_state, job.state) == (from_state, to_state, to_state)
        assert Transition.objects.count() == len(before["transitions"]) + 1
        assert compare_with_tables(rebuild_from_log()) == []
    else:
        with pytest.raises(IllegalTransition) as refused:
            job_transition(
                job_id=job.pk,
                to_state=to_state,
                reason=reason,
                actor=Actor.SCHEDULER,
                at=at,
                alloc=alloc,
            )
        assert f"job {job.pk}: illegal transition {from_state} -> {to_state}" in str(refused.value)
        assert snapshot() == before


def test_a_failure_between_log_append_and_projection_leaves_neither(monkeypatch):
    node = NodeFactory()
    job = job_in_state(JobState.QUEUED, tenant=TenantFactory(), node=node)
    before = snapshot()

    def crash(*args, **kwargs):
        raise RuntimeError("injected after the log append")

    monkeypatch.setattr(transitions_module, "_update_projection", crash)
    with pytest.raises(RuntimeError, match="injected"):
        move(job, JobState.PLACING, Reason.PLACED, at=T0, alloc={node.name: [0, 1]})
    assert snapshot() == before


def test_a_failure_after_node_gpus_moved_leaves_nothing(monkeypatch):
    node = NodeFactory()
    job = job_in_state(JobState.QUEUED, tenant=TenantFactory(), node=node)
    before = snapshot()

    def crash(*args, **kwargs):
        raise RuntimeError("injected after the node update")

    monkeypatch.setattr(Allocation.objects, "bulk_create", crash)
    with pytest.raises(RuntimeError, match="injected"):
        move(job, JobState.PLACING, Reason.PLACED, at=T0, alloc={node.name: [0, 1]})
    assert snapshot() == before


def test_placing_takes_exact_gpus_and_leaving_gives_them_back():
    node = NodeFactory(gpu_count=8)
    tenant = TenantFactory()
    job = job_in_state(JobState.RUNNING, tenant=tenant, node=node, gpus=4)
    node.refresh_from_db()
    assert node.free_gpus == 4
    allocation = Allocation.objects.get(job=job, end__isnull=True)
    assert (allocation.node_id, allocation.gpu_indices) == (node.pk, [0, 1, 2, 3])

    move(job, JobState.COMPLETED, Reason.COMPLETED, at=T0 + timedelta(hours=2))
    node.refresh_from_db()
    allocation.refresh_from_db()
    assert node.free_gpus == 8
    assert allocation.end == T0 + timedelta(hours=2)


def test_placing_on_gpus_another_job_holds_is_refused_and_writes_nothing():
    node = NodeFactory(gpu_count=8)
    tenant = TenantFactory()
    job_in_state(JobState.RUNNING, tenant=tenant, node=node, gpus=4)  # holds GPUs 0-3
    second = job_submit(tenant=tenant, name="second", gpus=2, at=T0)
    before = snapshot()
    with pytest.raises(AllocationError, match=r"GPUs \[3\] on node\d+ are already allocated"):
        move(second, JobState.PLACING, Reason.PLACED, at=T0, alloc={node.name: [3, 4]})
    assert snapshot() == before


@pytest.mark.parametrize(
    ("alloc", "message"),
    [
        (None, "needs an allocation"),
        ({"nowhere": [0]}, "unknown node"),
        ({"__node__": [8]}, "has GPUs 0-7"),
        ({"__node__": [1, 1]}, "bad GPU indices"),
    ],
)
def test_placing_needs_a_valid_allocation(alloc, message):
    node = NodeFactory(gpu_count=8)
    job = job_in_state(JobState.QUEUED, tenant=TenantFactory(), node=node)
    if alloc and "__node__" in alloc:
        alloc = {node.name: alloc["__node__"]}
    before = snapshot()
    with pytest.raises(AllocationError, match=message):
        move(job, JobState.PLACING, Reason.PLACED, at=T0, alloc=alloc)
    assert snapshot() == before


def test_an_allocation_on_a_move_that_gives_none_is_refused():
    node = NodeFactory()
    job = job_in_state(JobState.PLACING, tenant=TenantFactory(), node=node)
    with pytest.raises(AllocationError, match="does not take an allocation"):
        move(job, JobState.RUNNING, Reason.STARTED, at=T0, alloc={node.name: [0]})


def test_shrunk_replaces_the_allocation_and_returns_the_lost_gpus():
    node_a, node_b = NodeFactory(), NodeFactory()
    job = job_submit(tenant=TenantFactory(), name="elastic", gpus=16, min_gpus=8, at=T0)
    alloc = {node_a.name: list(range(8)), node_b.name: list(range(8))}
    move(job, JobState.PLACING, Reason.PLACED, at=T0, alloc=alloc)
    move(job, JobState.RUNNING, Reason.STARTED, at=T0 + timedelta(seconds=30))

    move(
        job,
        JobState.RUNNING,
        Reason.SHRUNK,
        at=T0 + timedelta(hours=1),
        alloc={node_a.name: list(range(8))},
    )
    node_a.refresh_from_db()
    node_b.refresh_from_db()
    assert (node_a.free_gpus, node_b.free_gpus) == (0, 8)
    assert Transition.objects.filter(job=job).last().detail["alloc"] == {
        node_a.name: list(range(8))
    }
    assert compare_with_tables(rebuild_from_log()) == []


def test_checkpointed_records_the_time_and_resume_pointer():
    node = NodeFactory()
    job = job_in_state(JobState.RUNNING, tenant=TenantFactory(), node=node)
    at = T0 + timedelta(minutes=30)
    move(job, JobState.RUNNING, Reason.CHECKPOINTED, at=at, detail={"resume_pointer": "s3://ck/7"})
    job.refresh_from_db()
    assert (job.last_checkpoint_at, job.resume_pointer) == (at, "s3://ck/7")


def test_a_node_failure_costs_a_retry_only_to_a_job_that_cannot_checkpoint():
    node = NodeFactory()
    tenant = TenantFactory()
    plain = job_in_state(JobState.RUNNING, tenant=tenant, node=node, gpus=4)
    resumable = job_submit(tenant=tenant, name="ckpt", gpus=4, checkpointable=True, at=T0)
    move(resumable, JobState.PLACING, Reason.PLACED, at=T0, alloc={node.name: [4, 5, 6, 7]})
    for job in (plain, resumable):
        move(job, JobState.QUEUED, Reason.NODE_FAILED, at=T0 + timedelta(hours=1))
        job.refresh_from_db()
    assert (plain.retry_count, resumable.retry_count) == (1, 0)


def test_a_preemption_is_timestamped_for_the_daily_cap_when_the_job_stops():
    asked = job_in_state(JobState.PREEMPT_REQUESTED, tenant=TenantFactory(), node=NodeFactory())
    assert asked.preemption_times == []  # a request alone costs nothing (it may complete)
    stopped = job_in_state(JobState.PREEMPTED, tenant=TenantFactory(), node=NodeFactory())
    assert stopped.preemption_times == [int((T0 + timedelta(minutes=4)).timestamp())]


def test_tenant_usage_accrues_the_gpus_held_with_the_core_formula(settings):
    settings.SCHEDULER_USAGE_HALF_LIFE_S = 3600
    node = NodeFactory()
    tenant = TenantFactory()
    job = job_in_state(JobState.RUNNING, tenant=tenant, node=node, gpus=4)  # placed at T0+60
    tenant.refresh_from_db()
    assert tenant.held_gpus == 4
    move(job, JobState.COMPLETED, Reason.COMPLETED, at=T0 + timedelta(seconds=60 + 7200))
    tenant.refresh_from_db()
    assert tenant.held_gpus == 0
    assert tenant.usage_gpu_s == accrue(0.0, 4, 7200, 3600)
    assert tenant.usage_at == T0 + timedelta(seconds=7260)


def test_side_effects_are_sent_only_after_commit(django_capture_on_commit_callbacks):
    received: list[int] = []

    def listener(sender, transition, **kwargs):
        received.append(transition.pk)

    transition_committed.connect(listener)
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            job = job_submit(tenant=TenantFactory(), name="x", gpus=1, at=T0)
        assert received == []  # nothing before commit
        for callback in callbacks:
            callback()
    finally:
        transition_committed.disconnect(listener)
    assert received == list(Transition.objects.filter(job=job).values_list("pk", flat=True))
    assert len(received) == 2  # (none) -> SUBMITTED -> QUEUED


def test_job_transition_refuses_to_run_inside_a_longer_transaction():
    job = job_in_state(JobState.QUEUED, tenant=TenantFactory(), node=NodeFactory())
    # durable=True: a caller cannot fold a transition into its own transaction, where a
    # later failure would roll back a move that side effects already announced
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        job_cancel(job_id=job.pk, at=T0)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_a_state_change_clears_the_stale_pending_reason():
    node = NodeFactory()
    job = job_in_state(JobState.QUEUED, tenant=TenantFactory(), node=node)
    Job.objects.filter(pk=job.pk).update(pending_reason=PendingReason.RESOURCES)
    move(job, JobState.PLACING, Reason.PLACED, at=T0, alloc={node.name: [0]})
    job.refresh_from_db()
    assert job.pending_reason == PendingReason.NONE
