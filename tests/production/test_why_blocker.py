"""A job waiting for a reservation is told which one is in its way: the leader publishes
the job the core found in its first fit's way (``Job.pending_blocker``), and the why
names it, not the cluster's earliest reservation."""

from __future__ import annotations

import pytest

from scheduler_app.core.states import JobState, PendingReason
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Pod
from scheduler_app.selectors.why import why_pending
from scheduler_app.services.agents import agent_confirm_start
from scheduler_app.services.jobs import job_cancel
from tests.foundation.factories import NodeFactory, TenantFactory

from .conftest import at, leader, submit

pytestmark = pytest.mark.django_db


def step(loop, now_s: int) -> None:
    report = loop.step(now=at(now_s))
    assert report.leader and not report.error, report


@pytest.fixture
def waiting():
    """headA is reserved on n0 from hold0's end (t=1005), headB on n1 from hold1's end
    (t=2005); x's first fit is n1's 4 free GPUs, which it would hold past headB's start."""
    pod = Pod.objects.create(name="p")
    for i in range(3):
        NodeFactory(name=f"n{i}", pod=pod)
    a = TenantFactory(name="team-a", guaranteed_gpus=24, borrow_limit_gpus=0)
    b = TenantFactory(name="team-b", guaranteed_gpus=24, borrow_limit_gpus=0)
    loop = leader()
    holds = [submit(b, 8, gpus_per_node=8, max_runtime_s=1000),
             submit(b, 4, max_runtime_s=2000),
             submit(b, 8, gpus_per_node=8, max_runtime_s=9000)]
    step(loop, 5)
    for job, node in zip(holds, ("n0", "n1", "n2"), strict=True):
        alloc = Allocation.objects.select_related("node").get(job=job, end__isnull=True)
        assert alloc.node.name == node
        agent_confirm_start(node=alloc.node, job=job, at=at(6))
    head_a = submit(a, 8, at_s=8, gpus_per_node=8, priority=10, max_runtime_s=5000)
    head_b = submit(a, 8, at_s=8, gpus_per_node=8, priority=9, max_runtime_s=100)
    step(loop, 10)
    x = submit(a, 4, at_s=12, priority=1, max_runtime_s=5000)
    step(loop, 15)
    for job in (head_a, head_b, x):
        job.refresh_from_db()
    assert head_a.estimate_start_at == at(1005) and head_b.estimate_start_at == at(2005)
    return x, head_a, head_b


def test_the_why_names_the_reservation_in_the_jobs_way(waiting):
    x, head_a, head_b = waiting
    assert x.pending_reason == PendingReason.RESERVATION
    assert x.pending_blocker == head_b.pk
    answer = why_pending(job=x, now=at(15))
    assert answer is not None
    assert f"GPUs are reserved for job {head_b.pk}, which starts at the latest" in answer.headline
    assert f"job {head_a.pk}" not in answer.headline  # the earliest, not in its way


def test_the_job_in_the_way_goes_with_the_reason(waiting):
    x, _head_a, _head_b = waiting
    job_cancel(job_id=x.pk, actor=Actor.USER, at=at(16))
    x.refresh_from_db()
    assert x.state == JobState.CANCELLED and x.pending_blocker is None
