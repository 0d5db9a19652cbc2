"""The leader's bulk persistence writes exactly what one ``apply_locked`` per decision wrote.

Each comparison takes one list of decisions and writes it twice from the same database
state, inside a savepoint rolled back after a snapshot: once one by one (the reference,
``LeaderLoop(bulk_writes=False)``), once in bulk (``transitions.apply_moves_locked``).
The snapshots (the new log rows in seq order; every job, allocation, node and tenant
row) must be equal. Primary keys are left out where PostgreSQL's sequences move on
across the rollback; the order of the rows is kept.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Decision
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition
from scheduler_app.services import AllocationError
from scheduler_app.services.cluster import node_mark_down
from scheduler_app.services.leader import Conflict, LeaderLoop, epoch
from scheduler_app.services.lease import LEADER_LEASE, lease_acquire
from scheduler_app.services.transitions import append_lock
from tests.foundation.test_replay import replay_verify

from .conftest import agent, at, state_of, submit

pytestmark = pytest.mark.django_db

S = JobState


class _Undo(Exception):
    """Raised to roll a savepoint back after the snapshot."""


def snapshot(since: int) -> dict[str, list[tuple]]:
    return {
        "log": list(
            Transition.objects.filter(pk__gt=since).order_by("pk").values_list(
                "kind", "job_id", "node_id", "tenant_id", "from_state", "to_state", "at",
                "reason", "detail", "actor", "actor_name", "tick_id",
            )
        ),
        "jobs": [tuple(row.values()) for row in Job.objects.order_by("pk").values()],
        "allocations": list(
            Allocation.objects.order_by("pk").values_list(
                "job_id", "node_id", "gpu_indices", "start", "end", "preemptible"
            )
        ),
        "nodes": list(Node.objects.order_by("name").values_list("name", "free_gpus", "health")),
        "tenants": list(
            Tenant.objects.order_by("name").values_list(
                "name", "usage_gpu_s", "usage_at", "held_gpus"
            )
        ),
    }


def written(loop: LeaderLoop, decisions: list[Decision], *, bulk: bool) -> Any:
    """The snapshot after writing ``decisions`` (or the error raised), then undone."""
    since = Transition.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    loop.bulk_writes = bulk
    outcome: Any = None
    try:
        with transaction.atomic():
            try:
                with append_lock():
                    loop._write_decisions(decisions, tick_id="9.9", written=[])
            except Exception as error:  # noqa: BLE001 - compared between the two paths
                outcome = (type(error).__name__, str(error))
                raise _Undo from error
            outcome = snapshot(since)
            raise _Undo
    except _Undo:
        pass
    loop.bulk_writes = True
    return outcome


def same_both_ways(loop: LeaderLoop, decisions: list[Decision]) -> Any:
    one_by_one = written(loop, decisions, bulk=False)
    bulk = written(loop, decisions, bulk=True)
    assert bulk == one_by_one
    return bulk


def decide(loop: LeaderLoop, now_s: int) -> list[Decision]:
    """What the leader would persist at ``now_s``: the log followed, then a tick."""
    loop.token = lease_acquire(name=LEADER_LEASE, holder=loop.holder, ttl_s=15, now=at(now_s),
                               new_term=loop.token is None)
    assert loop.token is not None
    pending, _, _ = loop.sync(at(now_s))
    return pending + loop.scheduler.tick(epoch(at(now_s))).decisions


def persist(loop: LeaderLoop, decisions: list[Decision], now_s: int) -> None:
    loop.persist(decisions, tick_id=f"1.{now_s}", now=at(now_s))


@pytest.fixture
def loop() -> LeaderLoop:
    return LeaderLoop(holder="leader-a", ttl_s=15)


def test_a_busy_history_writes_the_same_rows_and_projection_both_ways(cluster, loop):
    vision, nlp = cluster["vision"], cluster["nlp"]
    jobs = [
        submit(vision, gpus=16, at_s=0, max_runtime_s=3600),
        submit(vision, gpus=8, at_s=1, max_runtime_s=600, checkpointable=True),
        submit(nlp, gpus=4, at_s=2),
    ]
    reasons: set[str] = set()
    first = decide(loop, 5)
    assert len(first) >= 3
    snap = same_both_ways(loop, first)
    assert len(snap["log"]) == len(first)
    persist(loop, first, 5)
    for job in jobs:
        if state_of(job) == S.PLACING:
            agent(job, S.RUNNING, Reason.STARTED, at_s=8)
    # nlp comes back for its guarantee and reclaims vision's borrowed 8 GPUs
    jobs.append(submit(nlp, gpus=8, at_s=9, max_runtime_s=1200))
    jobs.append(submit(vision, gpus=16, at_s=9, max_runtime_s=900))
    jobs.append(submit(nlp, gpus=2, at_s=9))
    agent(jobs[2], S.COMPLETED, Reason.COMPLETED, at_s=12)
    # later instants fire the grace and time-limit timers: kills, requeues, placements
    for now_s in (10, 15, 700, 2000, 4000):
        decisions = decide(loop, now_s)
        same_both_ways(loop, decisions)
        persist(loop, decisions, now_s)
        reasons |= {d.reason for d in decisions}
    assert {Reason.PREEMPT_REQUESTED, Reason.GRACE_EXPIRED, Reason.TIME_LIMIT,
            Reason.PLACED, Reason.REQUEUED} <= reasons, reasons
    ok, output = replay_verify()
    assert ok, output


def test_a_node_failure_requeues_and_replaces_jobs_in_one_write_both_ways(cluster, loop):
    """A job moves twice in one write (requeued off the dead node, then placed again) and
    another job is placed on GPUs a job gave back earlier in the same write."""
    vision, nlp = cluster["vision"], cluster["nlp"]
    jobs = [submit(vision, gpus=8, at_s=0, checkpointable=True, checkpoint_interval_s=600)
            for _ in range(2)]
    jobs.append(submit(nlp, gpus=8, at_s=1, checkpointable=True, checkpoint_interval_s=600))
    persist(loop, decide(loop, 5), 5)
    for job in jobs:
        agent(job, S.RUNNING, Reason.STARTED, at_s=6)
    dead = Allocation.objects.get(job=jobs[0], end__isnull=True).node
    node_mark_down(node=dead, actor_name="ops", why="PSU", at=at(10))
    decisions = decide(loop, 10)
    moved = [d.job_id for d in decisions]
    assert moved.count(str(jobs[0].pk)) == 2, decisions  # RUNNING -> QUEUED -> PLACING
    snap = same_both_ways(loop, decisions)
    assert [row[5] for row in snap["log"] if row[1] == jobs[0].pk] == [S.QUEUED, S.PLACING]
    persist(loop, decisions, 10)
    assert state_of(jobs[0]) == S.PLACING
    ok, output = replay_verify()
    assert ok, output


def test_a_rebuild_finishing_a_cut_off_preemption_writes_the_same_both_ways(cluster, loop):
    vision, nlp = cluster["vision"], cluster["nlp"]
    own = submit(vision, gpus=16, at_s=0)  # its guarantee; the checkpointable gang borrows
    big = submit(vision, gpus=16, at_s=0, checkpointable=True, checkpoint_interval_s=600)
    persist(loop, decide(loop, 5), 5)
    agent(own, S.RUNNING, Reason.STARTED, at_s=6)
    agent(big, S.RUNNING, Reason.STARTED, at_s=6)
    submit(nlp, gpus=16, at_s=7)
    persist(loop, decide(loop, 8), 8)
    assert state_of(big) == S.PREEMPT_REQUESTED
    agent(big, S.CHECKPOINTING, Reason.CHECKPOINT_STARTED, at_s=9)
    agent(big, S.PREEMPTED, Reason.PREEMPTED, at_s=10)  # then the leader dies
    successor = LeaderLoop(holder="leader-b", ttl_s=15)
    decisions = decide(successor, 30)
    assert [d.reason for d in decisions if d.job_id == str(big.pk)][0] == Reason.REQUEUED
    same_both_ways(successor, decisions)


def test_a_stale_decision_and_a_taken_gpu_fail_alike_and_write_nothing(cluster, loop):
    first = submit(cluster["vision"], gpus=4, at_s=1)
    second = submit(cluster["vision"], gpus=4, at_s=1)
    decisions = decide(loop, 5)
    stale = [d for d in decisions if d.job_id == str(second.pk)]
    rows = Transition.objects.count()
    # the job is not where the core moved it from (it is PLACING after its placement)
    wrong = Decision(stale[0].job_id, S.RUNNING, S.COMPLETED, Reason.COMPLETED, stale[0].at_s)
    error = same_both_ways(loop, [*decisions, wrong])
    assert error[0] == Conflict.__name__ and "is PLACING" in error[1], error
    # two placements on the same GPUs
    clash = Decision(str(second.pk), S.QUEUED, S.PLACING, Reason.PLACED,
                     stale[0].at_s, alloc=decisions[0].alloc)
    others = [d for d in decisions if d.job_id != str(second.pk)]
    error = same_both_ways(loop, [*others, clash])
    assert error[0] == AllocationError.__name__ and "already allocated" in error[1]
    assert Transition.objects.count() == rows
    assert (state_of(first), state_of(second)) == (S.QUEUED, S.QUEUED)


def test_a_bulk_write_takes_the_same_number_of_statements_for_any_number_of_decisions(
    cluster, loop
):
    vision, nlp = cluster["vision"], cluster["nlp"]
    for i in range(2):
        submit(vision if i % 2 else nlp, gpus=1, at_s=0)
    few = decide(loop, 5)
    for i in range(12):
        submit(vision if i % 2 else nlp, gpus=1, at_s=6)
    many = LeaderLoop(holder="leader-b", ttl_s=15)
    counts = []
    for chooser, decisions in ((loop, few), (many, None)):
        if decisions is None:
            chooser.sync(at(7))
            decisions = chooser.scheduler.tick(epoch(at(7))).decisions
        assert all(d.reason == Reason.PLACED for d in decisions)
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            with append_lock():
                chooser._write_decisions(decisions, tick_id="1.1", written=[])
            transaction.set_rollback(True)
        counts.append((len(decisions), len(queries)))
    (n_few, q_few), (n_many, q_many) = counts
    assert (n_few, n_many) == (2, 14)
    assert q_many == q_few, counts
