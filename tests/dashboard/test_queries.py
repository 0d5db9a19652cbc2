"""Each page's queries stay bounded with 10,000 jobs in the table (and their log rows,
allocations, preemptions, reservations): no query per job, per row or per node.

The jobs are bulk-created in the states the pages show (the projection and the log
written side by side as the services would have); the bound per page is what it needs
with a few queries to spare, so an N+1 fails here and not in front of a user.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Allocation, Job, Node, Pod, Tenant, Transition
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import NodeFactory, TenantFactory

from .conftest import make_users

pytestmark = pytest.mark.django_db

S = JobState
JOBS = 10_000

#: page -> the most queries it may make (session, user and memberships included)
BOUNDS = {
    # the lead's home shows usage over time too (three queries); every page reads the
    # leader's lease (one: the banner when no scheduler runs)
    "/": 26,
    "/jobs/": 14,
    "/jobs/?state=all": 14,
    "/jobs/?state=all&sort=position": 16,
    "/live/operator-quotas/": 8,
    "/live/operator-nodes/": 8,
    "/jobs/new/": 10,
    "/teams/": 16,
    # the reservations read the GPUs each plan holds now and their backfills' (two)
    "/cluster/": 20,
    "/operator/": 16,
    "/live/map/": 8,
    "/live/feed/": 8,
    "/live/reservations/": 10,
    "/live/fairshare/": 10,
    "/live/usage/": 8,
}


@pytest.fixture
def big(db):
    """6 teams on 3 pods x 16 nodes x 8 GPUs; 10,000 jobs: 6,000 queued (100 with a
    planned start), 384 GPUs held by 48 running jobs (8 backfilled around the first
    planned job), 600 preempted and requeued, the rest finished; 2,000 allocations
    closed during the last day."""
    now = now_s()
    pods = [Pod.objects.create(name=f"pod-{c}") for c in "abc"]
    nodes = [NodeFactory(name=f"{p.name}-n{i:02d}", pod=p, free_gpus=0)
             for p in pods for i in range(16)]
    tenants = [TenantFactory(name=f"team{i}", guaranteed_gpus=48, borrow_limit_gpus=48,
                             share_rank=i + 1, held_gpus=64, usage_at=now)
               for i in range(6)]
    vision, nlp = tenants[0], tenants[1]
    Tenant.objects.filter(pk=vision.pk).update(name="vision")
    Tenant.objects.filter(pk=nlp.pk).update(name="nlp")
    vision.refresh_from_db()
    nlp.refresh_from_db()
    users = make_users(vision, nlp)
    owners = [users["researcher"], users["teammate"], users["other_team"], None]
    jobs = []
    for i in range(JOBS):
        if i < 6000:
            state = S.QUEUED
        elif i < 6048:
            state = S.RUNNING
        elif i < 6648:
            state = S.QUEUED
        else:
            state = (S.COMPLETED, S.FAILED, S.CANCELLED)[i % 3]
        tenant = tenants[i % 6]
        owner = owners[i % 4] if tenant in (vision, nlp) else None
        jobs.append(Job(
            tenant=tenant, owner=owner, name=f"job-{i}", gpus=8, gpus_per_node=8,
            state=state, submitted_at=now - timedelta(seconds=JOBS - i),
            priority=i % 3, max_runtime_s=3600, checkpointable=True,
            pending_reason="Resources" if state == S.QUEUED else "None",
            estimate_start_at=now + timedelta(minutes=i) if i < 100 else None,
            estimate_basis=f"reserved 1 node (8 GPUs) in pod-a from t={int(now.timestamp())},"
                           " when 6000 reaches its declared limit" if i < 100 else "",
            estimate_kind="reserved" if i < 16 else ("projected" if i < 100 else ""),
            started_at=now - timedelta(minutes=30) if state == S.RUNNING else None,
            preemption_times=[int(now.timestamp())] if 6048 <= i < 6648 else [],
        ))
    jobs = Job.objects.bulk_create(jobs, batch_size=2000)
    rows, allocs = [], []
    for i, job in enumerate(jobs):
        rows.append(Transition(kind="job", job=job, from_state=None, to_state=S.SUBMITTED,
                               at=job.submitted_at, reason=Reason.SUBMITTED, actor="user"))
        if job.state == S.RUNNING:
            node = nodes[i - 6000]
            reason = Reason.BACKFILLED if i < 6008 else Reason.PLACED
            rows.append(Transition(kind="job", job=job, from_state=S.QUEUED,
                                   to_state=S.PLACING, at=now - timedelta(minutes=31),
                                   reason=reason, actor="scheduler",
                                   detail={"alloc": {node.name: list(range(8))},
                                           "around": [str(jobs[0].pk)]}))
            allocs.append(Allocation(job=job, node=node, gpu_indices=list(range(8)),
                                     start=now - timedelta(minutes=31)))
        if job.preemption_times:
            if job.state == S.QUEUED:  # its run, before it was asked to stop
                rows.append(Transition(kind="job", job=job, from_state=S.QUEUED,
                                       to_state=S.PLACING, at=now - timedelta(minutes=31),
                                       reason=Reason.PLACED, actor="scheduler",
                                       detail={"alloc": {nodes[i % 48].name: list(range(8))}}))
            rows.append(Transition(
                kind="job", job=job, from_state=S.RUNNING, to_state=S.PREEMPT_REQUESTED,
                at=now - timedelta(minutes=5), reason=Reason.PREEMPT_REQUESTED,
                actor="scheduler", detail={
                    "for": str(jobs[i % 6000].pk), "cost_s": 300, "est_gpu_s_lost": 2400,
                    "words": "evicted 1: last checkpoint 5 min ago", "why": "to start 2",
                    "weighed": ["evicted 1", "kept 3"]}))
            if job.state == S.QUEUED:  # it stopped, losing its run (no checkpoint)
                rows.append(Transition(
                    kind="job", job=job, from_state=S.PREEMPT_REQUESTED, to_state=S.PREEMPTED,
                    at=now - timedelta(minutes=4), reason=Reason.NO_CHECKPOINT,
                    actor="agent"))
    for i in range(2000):
        job = jobs[6648 + i]
        allocs.append(Allocation(job=job, node=nodes[i % 48], gpu_indices=list(range(8)),
                                 start=now - timedelta(hours=20, minutes=i % 600),
                                 end=now - timedelta(hours=1)))
    Transition.objects.bulk_create(rows, batch_size=2000)
    Allocation.objects.bulk_create(allocs, batch_size=2000)
    assert Job.objects.count() == JOBS
    return {"users": users, "nodes": nodes, "jobs": jobs, "vision": vision}


def test_every_page_for_every_role_makes_a_bounded_number_of_queries_at_10000_jobs(
    big, client, django_assert_max_num_queries
):
    # one data set for every role: building 10,000 jobs is the slow part
    for role in ("operator", "lead", "researcher", "outsider"):
        client.force_login(big["users"][role])
        for url, bound in BOUNDS.items():
            if "operator" in url and role != "operator":
                continue
            if url == "/jobs/new/" and role == "outsider":
                continue
            with django_assert_max_num_queries(bound):
                response = client.get(url)
            assert response.status_code == 200, (role, url)
    client.force_login(big["users"]["operator"])
    preempted = big["jobs"][6100]  # preempted and queued again
    running = big["jobs"][6001]
    for job in (preempted, running):
        with django_assert_max_num_queries(13):  # (one of them the leader's lease)
            page = client.get(f"/jobs/{job.pk}/")
        assert page.status_code == 200
        with django_assert_max_num_queries(10):
            assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 200
    assert "What it lost:" in client.get(f"/jobs/{preempted.pk}/").content.decode()
    # and the pages did show what 10,000 jobs hold (so the bounds are not of empty pages)
    listing = client.get("/jobs/").content.decode()
    assert listing.count('class="job-row') == 50 and "6648 jobs" in listing
    assert "to make room for job #" in listing or "in the cluster" in listing
    cluster = client.get("/cluster/").content.decode()
    assert "GPUs reserved" in cluster and "Started around it" in cluster
    assert cluster.count('class="node ') == len(big["nodes"])
    assert Node.objects.count() == 48
