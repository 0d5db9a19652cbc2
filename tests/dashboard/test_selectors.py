"""The dashboard's selectors: the bulk queue positions agree with the one-job selector,
usage over the day comes from the allocations, the words of the core are readable."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from dashboard import words
from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Job, Pod, Tenant, Transition
from scheduler_app.selectors import dashboard as sel
from scheduler_app.selectors.jobs import job_queue_position
from scheduler_app.services import job_submit, job_transition
from tests.foundation.factories import T0, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db


def test_bulk_queue_positions_equal_the_one_job_selector_for_every_queued_job():
    pod = Pod.objects.create(name="p")
    NodeFactory(name="n0", pod=pod, gpu_count=8, free_gpus=8)
    rng = random.Random(7)
    tenants = [TenantFactory(name=f"t{i}", guaranteed_gpus=8, borrow_limit_gpus=8)
               for i in range(4)]
    for i in range(60):
        job_submit(tenant=rng.choice(tenants), name=f"j{i}", gpus=rng.choice((1, 2, 4)),
                   priority=rng.choice((0, 0, 1, 5)),
                   at=T0 + timedelta(seconds=rng.randrange(20)))  # ties on submit time
    # ranks as a tick leaves them: shared ranks, and a tenant not ranked at all
    for tenant, rank in zip(tenants, (2, 1, 2, None), strict=True):
        Tenant.objects.filter(pk=tenant.pk).update(share_rank=rank)
    jobs = list(Job.objects.all())
    for job in rng.sample(jobs, 10):  # some leave the queue
        job_transition(job_id=job.pk, to_state=JobState.CANCELLED, reason=Reason.CANCELLED,
                       actor=Actor.USER, at=T0 + timedelta(seconds=30))
    # some wait off the queues (a dependency, an array's cap): no position, ahead of nobody
    parked = rng.sample([j for j in Job.objects.filter(state="QUEUED")], 12)
    for i, job in enumerate(parked):
        Job.objects.filter(pk=job.pk).update(
            pending_reason="Dependency" if i % 2 else "ArrayLimit")
    jobs = list(Job.objects.all())
    bulk = sel.queue_positions(jobs)
    for job in jobs:
        expected = job_queue_position(job=job)
        assert bulk.get(job.pk, (None, None)) == expected, job
    in_line = [j for j in jobs if j.state == "QUEUED" and j.pk not in {p.pk for p in parked}]
    assert sorted(rank for _t, rank in bulk.values()) == list(range(1, len(in_line) + 1))
    assert all(job_queue_position(job=j) == (None, None) for j in Job.objects.filter(
        pk__in=[p.pk for p in parked]))


def test_a_job_is_not_behind_thousands_of_array_tasks_that_wait_for_their_cap():
    # 3,000 tasks of an array capped at 2 put a 64-GPU job "2,996th in the cluster's
    # order" a minute before it started (found by trying the product, 2026-12-07)
    pod = Pod.objects.create(name="p")
    NodeFactory(name="n0", pod=pod, gpu_count=8, free_gpus=8)
    team = TenantFactory(name="evals", guaranteed_gpus=8, borrow_limit_gpus=0)
    tasks = [job_submit(tenant=team, name=f"task-{i}", gpus=1, priority=5) for i in range(30)]
    Job.objects.filter(pk__in=[t.pk for t in tasks[2:]]).update(pending_reason="ArrayLimit")
    big = job_submit(tenant=team, name="big", gpus=8)
    assert job_queue_position(job=big) == (3, 3)  # behind the two tasks let through only


def test_usage_over_the_day_follows_the_allocations_opening_and_closing():
    pod = Pod.objects.create(name="p")
    node = NodeFactory(name="n0", pod=pod)
    vision = TenantFactory(name="vision")
    now = datetime(2026, 1, 6, 12, 0, tzinfo=UTC)
    a = job_submit(tenant=vision, name="a", gpus=4, at=now - timedelta(hours=30))
    b = job_submit(tenant=vision, name="b", gpus=2, at=now - timedelta(hours=3))
    # a: placed 30 h ago (before the window), ends 2 h ago; b: placed 3 h ago, still holds
    job_transition(job_id=a.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=now - timedelta(hours=30),
                   alloc={node.name: [0, 1, 2, 3]})
    job_transition(job_id=b.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=now - timedelta(hours=3),
                   alloc={node.name: [4, 5]})
    job_transition(job_id=a.pk, to_state=JobState.CANCELLED, reason=Reason.CANCELLED,
                   actor=Actor.USER, at=now - timedelta(hours=2))
    series = sel.usage_series(now=now, hours=24, step_s=3600)
    held = dict(zip(series.times, series.held["vision"], strict=True))
    assert held[now - timedelta(hours=24)] == 4  # a, from before the window
    assert held[now - timedelta(hours=3)] == 6  # b placed at that instant
    assert held[now - timedelta(hours=2)] == 2  # a gone
    assert held[now] == 2 and series.guaranteed["vision"] == vision.guaranteed_gpus
    assert sum(1 for _ in Allocation.objects.all()) == 2


def test_the_feed_hides_other_peoples_job_rows_but_not_cluster_rows():
    pod = Pod.objects.create(name="p")
    node = NodeFactory(name="n0", pod=pod)
    vision = TenantFactory(name="vision")
    job_submit(tenant=vision, name="secret", gpus=1, at=T0)
    from scheduler_app.services.cluster import node_drain

    node_drain(node=node, actor_name="op")
    stranger = sel.Viewer(user_id=12345, operator=False, roles={})
    rows = sel.transitions_feed(viewer=stranger)
    assert [r.kind for r in rows] == ["node"]
    everyone = sel.transitions_feed(viewer=sel.Viewer(user_id=None, operator=True))
    assert {r.kind for r in everyone} == {"node", "job"}


def test_core_sentences_get_clock_times_and_job_numbers():
    at = int(datetime(2026, 1, 5, 14, 20, tzinfo=UTC).timestamp())
    html = words.core_sentence(
        f"reserved 2 nodes (16 GPUs) in pod-a from t={at}, when 42 and 7 reach their "
        "declared limits")
    assert '<time datetime="2026-01-05T14:20:00+00:00">' in html
    assert "when jobs #42 and #7 reach" in html and "(16 GPUs)" in html
    assert "&lt;b&gt;" in words.core_sentence("<b>")  # escaped
    # the redaction's counts are not job numbers ("next best: job #2 jobs of team X")
    counted = words.core_sentence("evicted 5; next best: 2 jobs of team pretrain (0.14 "
                                  "GPU-hours), when 3 jobs of team rl and 9 reach their limits")
    assert "evicted job #5" in counted and "next best: 2 jobs of team pretrain" in counted
    assert "when 3 jobs of team rl" in counted and "#2" not in counted and "#3" not in counted
    assert words.gpu_ranges([0, 1, 2, 3, 6]) == "GPUs 0-3,6"
    assert words.duration(5400) == "1 h 30 min" and words.duration(None) == "no limit"
    assert words.alloc_words({f"n{i}": [0, 1] for i in range(5)}) == "5 nodes, n0 to n4 (10 GPUs)"


def test_every_log_row_reads_as_a_sentence():
    pod = Pod.objects.create(name="p")
    node = NodeFactory(name="n0", pod=pod)
    vision = TenantFactory(name="vision")
    job = job_submit(tenant=vision, name="a", gpus=2, at=T0)
    t0 = int(T0.timestamp())
    job_transition(job_id=job.pk, to_state=JobState.PLACING, reason=Reason.BACKFILLED,
                   actor=Actor.SCHEDULER, at=T0, alloc={node.name: [0, 1]},
                   detail={"around": ["9", "12"], "ends_by_s": t0 + 600,
                           "ends_before": [{"job": "9", "start_s": t0 + 900}],
                           "uses_none_of": ["12"]})
    sentences = [words.describe(r) for r in Transition.objects.filter(job=job)]
    assert sentences == [
        "Submitted by user.",
        "Admitted: waiting in its team's queue.",
        f"Backfilled on n0 GPUs 0-1: it ends by its limit "
        f"({words.clock(T0 + timedelta(seconds=600))}) before job #9's reserved start "
        f"({words.clock(T0 + timedelta(seconds=900))}); it uses none of the GPUs reserved "
        "for job #12.",
    ]


@pytest.mark.parametrize("on, limit_s, on_reserved, ends_before", [
    # found by a user session (2026-12-07): the backfill's own record named the plan of
    # its placement; the plan had moved to other nodes and an earlier start since
    ("n0", 3000, False, False),  # on none of the GPUs the plan holds now
    ("n1", 3000, True, False),   # on them, ending after the new start: the start waits
    ("n1", 600, True, True),     # on them, ending before the start
])
def test_a_backfilled_job_is_read_against_the_plan_as_it_is_now(on, limit_s, on_reserved,
                                                                 ends_before):
    from scheduler_app.models import Reservation

    pod = Pod.objects.create(name="p")
    for i in range(2):
        NodeFactory(name=f"n{i}", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=16)
    head = job_submit(tenant=team, name="head", gpus=8, at=T0, max_runtime_s=600)
    start = T0 + timedelta(seconds=1200)
    Job.objects.filter(pk=head.pk).update(estimate_start_at=start, estimate_kind="reserved")
    Reservation.objects.create(position=0, job=head, kind="reservation", start_at=start,
                               gpus=8, nodes=["n1"], plan={"alloc": {"n1": list(range(8))}},
                               published_at=T0)
    small = job_submit(tenant=team, name="small", gpus=2, at=T0, max_runtime_s=limit_s)
    t0 = int(T0.timestamp())
    job_transition(job_id=small.pk, to_state=JobState.PLACING, reason=Reason.BACKFILLED,
                   actor=Actor.SCHEDULER, at=T0, alloc={on: [0, 1]},
                   detail={"around": [str(head.pk)], "ends_by_s": t0 + limit_s,
                           # the plan as it was then: before a start at 2 h
                           "ends_before": [{"job": str(head.pk), "start_s": t0 + 7200}]})
    [planned] = sel.reservations(viewer=sel.Viewer(user_id=None, operator=True))
    [around] = planned.backfilled
    assert around.job is not None and around.job.pk == small.pk
    assert (around.on_reserved, around.ends_before) == (on_reserved, ends_before)
