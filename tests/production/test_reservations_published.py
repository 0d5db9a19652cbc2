"""The leader publishes the core's current reservations (``Scheduler.reservations()``) in
the Reservation table, in the fenced transaction of the tick, and only when they change."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.core.states import JobState
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Pod, Reservation
from scheduler_app.services.agents import agent_confirm_start, agent_report_exit
from scheduler_app.services.jobs import job_cancel
from scheduler_app.services.leader import epoch, from_epoch
from scheduler_app.services.lease import LEADER_LEASE, LeaseLost, lease_acquire
from tests.foundation.factories import NodeFactory, TenantFactory

from .conftest import at, leader, state_of, submit

pytestmark = pytest.mark.django_db

S = JobState


def ok_step(loop, now_s: int):
    report = loop.step(now=at(now_s))
    assert report.leader and not report.error, report
    return report


def published() -> list[tuple]:
    return list(Reservation.objects.order_by("position").values_list(
        "position", "job_id", "kind", "start_at", "gpus", "nodes", "victims", "basis"))


def cores(loop) -> list[tuple]:
    """The core's reservations in the table's terms."""
    sched = loop.scheduler
    out = []
    for i, view in enumerate(sched.reservations()):
        gpus = (next(r.gpus for r in sched.reserved if r.job_id == view.job_id)
                if view.kind == "reservation" else sched.claims[view.job_id].gpus)
        out.append((i, int(view.job_id), view.kind,
                    None if view.start_s is None else from_epoch(view.start_s), gpus,
                    list(view.nodes), [int(v) for v in view.victims], view.basis))
    return out


def table_writes(queries) -> list[str]:
    return [q["sql"] for q in queries
            if '"scheduler_app_reservation"' in q["sql"]
            and q["sql"].startswith(("INSERT", "DELETE", "UPDATE"))]


@pytest.fixture
def reserved():
    """big (24 GPUs, limit 1000 s) runs on 4 nodes of 8; head (32 GPUs) waits for it with
    the backfill reservation."""
    pod = Pod.objects.create(name="p")
    for i in range(4):
        NodeFactory(name=f"m{i}", pod=pod)
    # a limit past the cluster: the head waits for GPUs (a reservation), not for quota
    team = TenantFactory(name="solo", guaranteed_gpus=32, borrow_limit_gpus=32)
    loop = leader()
    big = submit(team, gpus=24, gpus_per_node=8, max_runtime_s=1000)
    ok_step(loop, 5)
    head = submit(team, gpus=32, gpus_per_node=8, max_runtime_s=600, priority=10, at_s=6)
    ok_step(loop, 10)
    return loop, big, head


def test_the_backfill_reservation_is_published_as_the_core_has_it(reserved):
    loop, big, head = reserved
    rows = published()
    assert rows == cores(loop) and len(rows) == 1
    _pos, job_id, kind, start_at, gpus, nodes, victims, basis = rows[0]
    assert (job_id, kind, gpus, victims) == (head.pk, "reservation", 32, [])
    assert start_at == at(5 + 1000)  # when big's declared limit runs out
    assert nodes == ["m0", "m1", "m2", "m3"] and basis
    row = Reservation.objects.get()
    assert (row.tick_id, row.published_at) == ("1.2", at(10))


def test_an_unchanged_reservation_is_not_written_again(reserved):
    loop, *_ = reserved
    with CaptureQueriesContext(connection) as queries:
        ok_step(loop, 15)
    assert table_writes(queries) == []
    assert Reservation.objects.get().tick_id == "1.2"


def test_the_reservation_goes_when_its_holder_starts(reserved):
    loop, big, head = reserved
    node = Allocation.objects.filter(job=big, end__isnull=True).first().node
    agent_confirm_start(node=node, job=big, at=at(11))
    agent_report_exit(node=node, job=big, outcome="completed", at=at(12))
    ok_step(loop, 15)
    assert state_of(head) == S.PLACING
    assert published() == cores(loop) == []


def test_a_rebuilt_leader_publishes_the_same_reservations(reserved):
    loop, *_ = reserved
    before = published()
    loop.drop()
    ok_step(loop, 15)
    assert published() == before == cores(loop)
    assert Reservation.objects.get().tick_id == "1.3"  # written again after the rebuild


def test_a_stale_leader_publishes_no_reservation(reserved):
    loop, *_ = reserved
    Reservation.objects.all().delete()
    loop.published_reservations = None  # it would write them at its next persist
    decisions, _, _ = loop.sync(at(40))
    decisions += loop.scheduler.tick(epoch(at(40))).decisions
    assert lease_acquire(name=LEADER_LEASE, holder="leader-b", ttl_s=15, now=at(30)) == 2
    with pytest.raises(LeaseLost):
        loop.persist(decisions, tick_id="1.9", now=at(40))
    assert not Reservation.objects.exists()


def reclaiming(cluster, **head_spec):
    """vision borrows 16 GPUs with a checkpointable gang; nlp's head (16 GPUs) asks for
    its guarantee at 8 s: the leader's tick at 10 s asks the gang to stop."""
    loop = leader()
    solo = submit(cluster["vision"], gpus=16)
    gang = submit(cluster["vision"], gpus=16, gpus_per_node=8, checkpointable=True,
                  checkpoint_time_s=60)
    ok_step(loop, 5)
    for job in (solo, gang):
        for alloc in Allocation.objects.filter(job=job, end__isnull=True).select_related("node"):
            agent_confirm_start(node=alloc.node, job=job, at=at(6))
    head = submit(cluster["nlp"], gpus=16, at_s=8, **head_spec)
    ok_step(loop, 10)
    assert state_of(gang) == S.PREEMPT_REQUESTED
    return loop, gang, head


def test_a_reclaim_claim_is_published_with_its_victims(cluster):
    """vision borrows 16 GPUs with a checkpointable gang; nlp asks for its guarantee: the
    gang is asked to stop and its nodes are promised to nlp's job."""
    loop, gang, head = reclaiming(cluster)
    rows = published()
    assert rows == cores(loop) and len(rows) == 1
    _pos, job_id, kind, start_at, gpus, nodes, victims, _basis = rows[0]
    assert (job_id, kind, gpus, victims) == (head.pk, "reclaim", 16, [gang.pk])
    assert start_at == at(10 + 60)  # the end of the gang's grace window
    gang_nodes = sorted(Allocation.objects.filter(job=gang, end__isnull=True)
                        .values_list("node__name", flat=True))
    assert nodes == gang_nodes


def test_a_leader_that_rebuilds_keeps_the_published_plans(reserved):
    """The plan (its GPUs, when it was planned, what it waits for) is published with the
    reservation, and a new leader's build restores it: the promise outlives the leader."""
    loop, big, head = reserved
    plan = Reservation.objects.get().plan
    assert plan["alloc"] == {f"m{i}": list(range(8)) for i in range(4)}
    assert plan["planned_at_s"] == epoch(at(10)) and plan["after_job"] == big.pk
    # when it is due for another look: planned at 10, the cluster as the plan saw it
    assert plan["checked_at_s"] is None
    assert plan["looked_sig"] == loop.scheduler.plan_inputs()
    fresh = leader("leader-b")
    fresh.sync(at(11))
    assert [(r.job_id, r.start_s, r.alloc, r.after_job) for r in fresh.scheduler.reserved] \
        == [(r.job_id, r.start_s, r.alloc, r.after_job) for r in loop.scheduler.reserved]
    assert fresh.scheduler.planned_at == {str(head.pk): epoch(at(10))}
    # the digest is the state's, not the leader's: the rebuilt one agrees with it
    assert fresh.scheduler.plan_inputs() == loop.scheduler.plan_inputs()
    assert fresh.scheduler.looked_sig == {str(head.pk): plan["looked_sig"]}



@pytest.fixture
def stopped(cluster):
    """vision's gang borrowed 16 GPUs past its guarantee; it was asked to stop for nlp's
    head (16 GPUs) at 10 s and has stopped at 12 s; leader-a has not ticked since."""
    loop, gang, head = reclaiming(cluster, gpus_per_node=8)
    gang_nodes = sorted(Allocation.objects.filter(job=gang, end__isnull=True)
                        .values_list("node__name", flat=True))
    assert sorted(loop.scheduler.claims[str(head.pk)].nodes) == gang_nodes
    assert Reservation.objects.get().plan == {"at_s": epoch(at(10))}
    node = Allocation.objects.filter(job=gang, end__isnull=True).select_related("node")[0].node
    agent_report_exit(node=node, job=gang, outcome="preempted", at=at(12))
    assert state_of(gang) in (S.PREEMPTED, S.QUEUED)
    return head, gang_nodes


def test_a_rebuilt_leader_keeps_a_claim_whose_victims_have_all_stopped(cluster, stopped):
    """The claim is in no holding job's row any more: the new leader takes it from the
    published row, and the head starts on the nodes reclaimed for it. Without the claim,
    nlp's later job of higher priority would take half of them first and the head would
    wait again for its team's quota, its reclaim lost."""
    head, gang_nodes = stopped
    eager = submit(cluster["nlp"], gpus=8, gpus_per_node=8, priority=100, at_s=13)
    fresh = leader("leader-b")
    report = fresh.step(now=at(30))  # leader-a's lease (15 s from 10) has run out
    assert report.leader and not report.error, report
    assert state_of(head) == S.PLACING
    assert sorted(Allocation.objects.filter(job=head, end__isnull=True)
                  .values_list("node__name", flat=True)) == gang_nodes
    assert state_of(eager) == S.QUEUED


def test_a_published_claim_of_a_head_that_no_longer_waits_is_not_restored(stopped):
    """A head cancelled after the last tick: its published claim is dropped, and its nodes
    are anyone's."""
    head, _nodes = stopped
    fresh = leader("leader-b")
    fresh.sync(at(13))
    assert set(fresh.scheduler.claims) == {str(head.pk)}  # the claim, restored
    job_cancel(job_id=head.pk, actor=Actor.USER, at=at(14))
    again = leader("leader-c")
    again.sync(at(15))
    assert again.scheduler.claims == {}
