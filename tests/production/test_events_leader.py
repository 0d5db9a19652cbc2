"""The leader follows node and tenant rows, marks silent nodes down, and publishes what a
tick learnt (pending reasons, start estimates, fair-share ranks); the read side (queue
positions, history, agent assignments) agrees with the core."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.core.types import Actor, NodeHealth
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition
from scheduler_app.selectors.agents import agent_assignments
from scheduler_app.selectors.jobs import job_history, job_queue_position
from scheduler_app.services import job_transition
from scheduler_app.services.agents import (
    agent_ack_preempt,
    agent_confirm_start,
    agent_heartbeat,
    agent_report_checkpoint,
    agent_report_exit,
)
from scheduler_app.services.cluster import (
    node_drain,
    node_mark_down,
    node_undrain,
    tenant_set_quota,
)
from scheduler_app.services.leader import epoch, from_epoch
from scheduler_app.services.lease import LEADER_LEASE, lease_acquire
from tests.foundation.factories import TenantFactory
from tests.foundation.test_replay import replay_verify

from .conftest import at, leader, state_of, submit
from .test_leader_loop import busy_history, decision_keys

pytestmark = pytest.mark.django_db

S = JobState


def nodes_of(job: Job) -> list[Node]:
    return [a.node for a in Allocation.objects.filter(job=job, end__isnull=True)
            .select_related("node").order_by("node__name")]


def confirm(job: Job, at_s: int) -> None:
    agent_confirm_start(node=nodes_of(job)[0], job=job, at=at(at_s))


def node(name: str) -> Node:
    return Node.objects.get(name=name)


def ok_step(loop, now_s: int):
    report = loop.step(now=at(now_s))
    assert report.leader and not report.error, report
    return report


# --------------------------------------------------------------------------- node rows
def test_a_node_marked_down_requeues_its_job_and_the_tick_places_it_elsewhere(cluster):
    loop = leader()
    job = submit(cluster["vision"], gpus=8, checkpointable=True)
    ok_step(loop, 5)
    confirm(job, 6)
    agent_report_checkpoint(node=nodes_of(job)[0], job=job, resume_pointer="s3://ck/1",
                            checkpoint_at=at(7))
    dead = nodes_of(job)[0]
    node_mark_down(node=dead, actor_name="ops", why="PSU", at=at(8))
    report = ok_step(loop, 10)
    assert not report.rebuilt and report.caught_up == 3  # start, checkpoint, node row
    moves = list(Transition.objects.filter(job=job).values_list(
        "from_state", "to_state", "reason", "actor", "at"))[-2:]
    assert moves == [
        (S.RUNNING, S.QUEUED, Reason.NODE_FAILED, Actor.SCHEDULER, at(8)),
        (S.QUEUED, S.PLACING, Reason.PLACED, Actor.SCHEDULER, at(10)),
    ]
    assert Transition.objects.filter(job=job, reason=Reason.NODE_FAILED).get().detail == {
        "node": dead.name, "resume_pointer": "s3://ck/1"
    }
    assert dead not in nodes_of(job)
    dead.refresh_from_db()
    assert dead.free_gpus == 8 and dead.health == NodeHealth.DOWN
    ok, output = replay_verify()
    assert ok, output


def test_draining_nodes_take_no_new_jobs_until_undrained(cluster):
    loop = leader()
    for name in ("n0", "n1", "n2"):
        node_drain(node=node(name), actor_name="ops", at=at(0))
    first, second = (submit(cluster["vision"], gpus=8, at_s=1) for _ in range(2))
    ok_step(loop, 5)
    assert [n.name for n in nodes_of(first)] == ["n3"]
    second.refresh_from_db()
    assert second.state == S.QUEUED and second.pending_reason == PendingReason.NODE_DOWN
    node_undrain(node=node("n1"), actor_name="ops", at=at(6))
    ok_step(loop, 10)
    assert [n.name for n in nodes_of(second)] == ["n1"]
    second.refresh_from_db()
    assert second.pending_reason == PendingReason.NONE  # cleared when it left the queue


def test_a_draining_node_keeps_its_running_job(cluster):
    loop = leader()
    job = submit(cluster["vision"], gpus=8)
    ok_step(loop, 5)
    confirm(job, 6)
    node_drain(node=nodes_of(job)[0], actor_name="ops", at=at(7))
    ok_step(loop, 10)
    ok_step(loop, 400)
    assert state_of(job) == S.RUNNING


def test_a_quota_row_reaches_the_core_and_lets_the_waiting_job_start(cluster):
    loop = leader()
    nlp = cluster["nlp"]
    submit(nlp, gpus=16)
    waiting = submit(nlp, gpus=8, at_s=1)
    ok_step(loop, 5)
    waiting.refresh_from_db()
    assert waiting.state == S.QUEUED and waiting.pending_reason == PendingReason.QUOTA_LIMIT
    tenant_set_quota(tenant=cluster["vision"], guaranteed_gpus=8, borrow_limit_gpus=24,
                     actor_name="ops", at=at(6))  # a cut first: the guarantees fit the cluster
    tenant_set_quota(tenant=nlp, guaranteed_gpus=24, borrow_limit_gpus=0, actor_name="ops",
                     at=at(6))
    report = ok_step(loop, 10)
    assert not report.rebuilt and report.caught_up == 2
    assert loop.scheduler.tenants["nlp"].guaranteed_gpus == 24
    assert state_of(waiting) == S.PLACING


# --------------------------------------------------------------------------- heartbeats
def test_a_silent_node_is_marked_down_before_the_tick(cluster, settings):
    settings.SCHEDULER_HEARTBEAT_TIMEOUT_S = 30
    loop = leader()
    for n in cluster["nodes"]:
        agent_heartbeat(node=n, at=at(0))
    job = submit(cluster["vision"], gpus=8)
    ok_step(loop, 5)
    confirm(job, 6)
    quiet = nodes_of(job)[0]
    for n in cluster["nodes"]:
        if n != quiet:
            agent_heartbeat(node=n, at=at(20))
    ok_step(loop, 30)  # 30 s of silence is not past the timeout
    assert state_of(job) == S.RUNNING
    ok_step(loop, 31)
    quiet.refresh_from_db()
    assert quiet.health == NodeHealth.DOWN
    row = Transition.objects.filter(node=quiet).get()
    assert (row.actor, row.actor_name, row.detail["action"]) == (
        Actor.SCHEDULER, "leader-a", "heartbeat_timeout"
    )
    assert Transition.objects.filter(job=job, reason=Reason.NODE_FAILED).exists()
    assert {n.health for n in Node.objects.exclude(pk=quiet.pk)} == {"healthy"}
    ok, output = replay_verify()
    assert ok, output


def test_nodes_that_never_sent_a_heartbeat_are_exempt(cluster, settings):
    settings.SCHEDULER_HEARTBEAT_TIMEOUT_S = 30
    loop = leader()
    ok_step(loop, 0)
    ok_step(loop, 3600)
    assert not Transition.objects.exists()
    assert set(Node.objects.values_list("health", flat=True)) == {"healthy"}


def test_a_zero_timeout_disables_the_check(cluster, settings):
    settings.SCHEDULER_HEARTBEAT_TIMEOUT_S = 0
    agent_heartbeat(node=cluster["nodes"][0], at=at(0))
    ok_step(leader(), 3600)
    assert not Transition.objects.exists()


# --------------------------------------------------------------------------- rebuilds
def test_a_rebuild_fails_over_the_jobs_a_dead_leader_left_on_a_down_node(cluster):
    loop = leader()
    job = submit(cluster["vision"], gpus=8, checkpointable=True)
    ok_step(loop, 5)
    confirm(job, 6)
    node_mark_down(node=nodes_of(job)[0], actor_name="ops", why="gone", at=at(7))
    successor = leader("leader-b")  # the first leader dies before it reads the node row
    report = successor.step(now=at(21))
    assert report.leader and report.rebuilt and not report.error, report
    requeue = Transition.objects.filter(job=job, reason=Reason.NODE_FAILED).get()
    assert (requeue.from_state, requeue.actor_name) == (S.RUNNING, "leader-b")
    assert state_of(job) == S.PLACING  # and placed again on a live node
    ok, output = replay_verify()
    assert ok, output


def test_a_rebuild_after_node_and_quota_rows_makes_the_same_decisions(cluster):
    loop, jobs = busy_history(cluster)
    node_drain(node=node("n3"), actor_name="ops", at=at(16))
    tenant_set_quota(tenant=cluster["nlp"], guaranteed_gpus=8, borrow_limit_gpus=8,
                     actor_name="ops", at=at(17))
    node_mark_down(node=nodes_of(jobs[0])[0], actor_name="ops", why="gone", at=at(18))
    ok_step(loop, 19)  # followed at their instants (a rebuild would apply them at its own)
    for now_s in (20, 700, 2000):
        now = at(now_s)
        kept, _, _ = loop.sync(now)
        kept += loop.scheduler.tick(epoch(now)).decisions
        fresh = leader("leader-b")
        rebuilt, _, _ = fresh.sync(now)
        rebuilt += fresh.scheduler.tick(epoch(now)).decisions
        assert decision_keys(rebuilt) == decision_keys(kept)
        lease_acquire(name=LEADER_LEASE, holder=loop.holder, ttl_s=15, now=now)
        loop.persist(kept, tick_id=f"1.{now_s}", now=now)
    ok, output = replay_verify()
    assert ok, output


# --------------------------------------------------------------------------- follow
def test_follow_persists_the_requeue_after_an_exit_without_ticking(cluster):
    loop, jobs = busy_history(cluster)
    victim, head = jobs[1], jobs[3]
    here = nodes_of(victim)[0]
    agent_ack_preempt(node=here, job=victim, at=at(16))
    agent_report_checkpoint(node=here, job=victim, resume_pointer="s3://v/9",
                            checkpoint_at=at(17))
    agent_report_exit(node=here, job=victim, outcome="preempted", at=at(18))
    report = loop.follow(now=at(19))
    assert report.leader and not report.error and report.decisions == 1, report
    last = Transition.objects.filter(job=victim).last()
    assert (last.from_state, last.to_state, last.reason, last.at) == (
        S.PREEMPTED, S.QUEUED, Reason.REQUEUED, at(18)
    )
    assert state_of(head) == S.QUEUED  # no tick ran
    ok_step(loop, 20)
    assert state_of(head) == S.PLACING


# --------------------------------------------------------------------------- publishing
@pytest.fixture
def reserved():
    """big (24 GPUs, limit 1000 s) runs; head (32 GPUs) waits with a reservation."""
    from scheduler_app.models import Pod
    from tests.foundation.factories import NodeFactory

    pod = Pod.objects.create(name="p")
    for i in range(4):
        NodeFactory(name=f"m{i}", pod=pod)
    # a limit past the cluster: the head waits for GPUs (a reservation), not for quota
    team = TenantFactory(name="solo", guaranteed_gpus=32, borrow_limit_gpus=32)
    loop = leader()
    big = submit(team, gpus=24, gpus_per_node=8, max_runtime_s=1000)
    ok_step(loop, 5)
    head = submit(team, gpus=32, gpus_per_node=8, max_runtime_s=600, priority=10, at_s=6)
    tail = submit(team, gpus=16, gpus_per_node=8, max_runtime_s=5000, at_s=7)
    ok_step(loop, 10)
    return loop, big, head, tail


def test_pending_reasons_and_start_estimates_are_the_cores(reserved):
    loop, big, head, tail = reserved
    for job in (head, tail):
        job.refresh_from_db()
        view = loop.scheduler.job(str(job.pk))
        assert job.pending_reason == view.pending_reason != PendingReason.NONE
        assert job.estimate_start_at == from_epoch(view.start_estimate_s)
        assert job.estimate_basis == view.estimate_basis != ""
    assert head.estimate_start_at == at(5 + 1000)  # when big's declared limit runs out


def test_a_tick_that_changes_nothing_writes_no_job_row(reserved):
    loop, *_ = reserved
    with CaptureQueriesContext(connection) as queries:
        ok_step(loop, 15)
    writes = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert writes and not [w for w in writes if '"scheduler_app_job"' in w], writes


def test_a_rebuilt_leader_publishes_again_and_a_started_job_loses_its_estimate(reserved):
    loop, big, head, tail = reserved
    agent_confirm_start(node=nodes_of(big)[0], job=big, at=at(11))
    agent_report_exit(node=nodes_of(big)[0], job=big, outcome="completed", at=at(12))
    ok_step(loop, 15)
    head.refresh_from_db()
    assert head.state == S.PLACING and head.estimate_start_at is None
    assert head.estimate_basis == "" and head.pending_reason == PendingReason.NONE


def test_the_tenants_fair_share_order_is_published(cluster):
    loop = leader()
    submit(cluster["vision"], gpus=8)
    ok_step(loop, 5)
    ok_step(loop, 600)  # vision has used 8 GPUs for ~10 minutes, nlp nothing
    shares = {t.name: (t.share, t.share_rank, t.share_at) for t in Tenant.objects.all()}
    keys = loop.scheduler.share_keys
    assert shares["nlp"] == (0.0, 1, at(5))  # unchanged since the first tick
    assert shares["vision"][1] == 2 and shares["vision"][0] == keys["vision"][1] > 0


def test_a_borrower_without_a_guarantee_has_an_infinite_share(cluster):
    team = TenantFactory(name="free-rider", guaranteed_gpus=0, borrow_limit_gpus=8)
    loop = leader()
    submit(team, gpus=8, max_runtime_s=3600)  # borrows: a limit lets a job nothing may preempt
    ok_step(loop, 5)
    ok_step(loop, 100)
    team.refresh_from_db()
    assert team.share is None and team.share_rank == 2  # after nlp and vision (both 0.0)


# --------------------------------------------------------------------------- reads
@pytest.mark.parametrize("stretch", [1.0, 0.0])
def test_queue_positions_computed_on_read_match_the_core(cluster, settings, stretch):
    settings.SCHEDULER_CONFIG = {**settings.SCHEDULER_CONFIG, "queue_stretch": stretch}
    loop = leader()
    vision, nlp = cluster["vision"], cluster["nlp"]
    # the whole cluster (two borrow: a limit lets a job nothing may preempt)
    everything = [submit(vision, gpus=8, at_s=0, max_runtime_s=7200) for _ in range(4)]
    ok_step(loop, 5)
    assert loop.scheduler.config.queue_stretch == stretch
    for running in everything:
        confirm(running, 6)
    # the limits make the deadline order differ from the submit order: with stretch 1
    # the later 2-GPU job (deadline 7 + 2 x 20 = 47) passes the 1-GPU one (6 + 60 = 66),
    # the 16-GPU job with no limit (7 days) falls behind the later 1-GPU one of its
    # priority
    waiting = [
        submit(vision, gpus=8, at_s=6, max_runtime_s=7200),
        submit(vision, gpus=1, at_s=6, priority=5, max_runtime_s=60),
        submit(vision, gpus=2, at_s=7, priority=5, max_runtime_s=20),
        submit(nlp, gpus=4, at_s=7, priority=1, max_runtime_s=600),
        submit(nlp, gpus=16, at_s=6),
        submit(nlp, gpus=1, at_s=8, max_runtime_s=60),
    ]
    ok_step(loop, 600)
    seen = set()
    for job in waiting:
        job.refresh_from_db()
        view = loop.scheduler.job(str(job.pk))
        assert job_queue_position(job=job) == (view.queue_position, view.cluster_rank)
        seen.add(view.cluster_rank)
    assert seen == set(range(1, 7))
    in_vision = {job.max_runtime_s: loop.scheduler.job(str(job.pk)).queue_position
                 for job in waiting[:3]}
    assert in_vision == ({20: 1, 60: 2, 7200: 3} if stretch else {60: 1, 20: 2, 7200: 3})
    everything[0].refresh_from_db()
    assert job_queue_position(job=everything[0]) == (None, None)


def test_job_history_is_the_jobs_rows_in_log_order(cluster):
    loop = leader()
    job = submit(cluster["vision"], gpus=4)
    node_drain(node=node("n3"), actor_name="ops", at=at(1))
    ok_step(loop, 5)
    confirm(job, 6)
    rows = list(job_history(job=job))
    assert [(r.to_state, r.reason) for r in rows] == [
        (S.SUBMITTED, Reason.SUBMITTED), (S.QUEUED, Reason.ADMITTED),
        (S.PLACING, Reason.PLACED), (S.RUNNING, Reason.STARTED),
    ]
    assert [r.pk for r in rows] == sorted(r.pk for r in rows)


def test_agent_assignments_tell_each_node_what_to_start_stop_and_keep(cluster):
    loop = leader()
    gang = submit(cluster["vision"], gpus=16, gpus_per_node=8, checkpointable=True,
                  checkpoint_time_s=45)
    ok_step(loop, 5)
    on = nodes_of(gang)
    assert len(on) == 2
    names = [n.name for n in on]
    for n in on:
        got = agent_assignments(node=n)
        assert got["preempt"] == [] and got["running"] == []
        (start,) = got["start"]
        assert start["job_id"] == gang.pk and start["nodes"] == names
        assert start["gpus"] == {n.name: list(range(8))}
        assert start["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert start["env"]["SCHED_NODES"] == ",".join(names)
    idle = Node.objects.exclude(pk__in=[n.pk for n in on]).first()
    assert agent_assignments(node=idle) == {"start": [], "preempt": [], "running": []}
    runs = {agent_assignments(node=n)["start"][0]["run"] for n in on}
    assert len(runs) == 1  # one placement: the same run key on every node of the gang
    confirm(gang, 6)
    assert all(agent_assignments(node=n)["running"] == [gang.pk] for n in on)
    # the first node's confirmation made it RUNNING: the other node must still start its
    # part, so the start entry stays, with the same run key (an agent running it ignores it)
    for n in on:
        (start,) = agent_assignments(node=n)["start"]
        assert start["job_id"] == gang.pk and start["run"] in runs
    job_transition(job_id=gang.pk, to_state=S.PREEMPT_REQUESTED,
                   reason=Reason.PREEMPT_REQUESTED, actor=Actor.SCHEDULER, at=at(100))
    got = agent_assignments(node=on[1])
    assert got["start"] == [] and got["running"] == [gang.pk]
    assert got["preempt"] == [{"job_id": gang.pk, "state": S.PREEMPT_REQUESTED,
                               "grace_deadline": (at(100) + timedelta(seconds=45)).isoformat()}]
