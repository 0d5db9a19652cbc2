"""A gang (one job on several nodes) is confirmed, acknowledged and reported by each of
its nodes' agents: the first report moves the job, the others get the row that moved it
back and write nothing; the leader follows without rebuilding."""

from __future__ import annotations

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Job, Node, Transition
from scheduler_app.services.agents import (
    agent_ack_preempt,
    agent_confirm_start,
    agent_report_checkpoint,
    agent_report_exit,
    is_replayed,
)
from scheduler_app.services.cluster import node_mark_down
from scheduler_app.services.errors import Conflict, Forbidden
from tests.foundation.test_replay import replay_verify

from .conftest import at, leader, state_of, submit

pytestmark = pytest.mark.django_db

S = JobState


def nodes_of(job: Job) -> list[Node]:
    return [a.node for a in Allocation.objects.filter(job=job, end__isnull=True)
            .select_related("node").order_by("node__name")]


def ok_step(loop, now_s: int):
    report = loop.step(now=at(now_s))
    assert report.leader and not report.error, report
    return report


def rows() -> int:
    return Transition.objects.count()


@pytest.fixture
def gang(cluster):
    """A 16-GPU gang placed on two nodes by the leader (and the leader)."""
    loop = leader()
    job = submit(cluster["vision"], gpus=16, gpus_per_node=8, checkpointable=True,
                 checkpoint_time_s=60)
    ok_step(loop, 5)
    assert state_of(job) == S.PLACING and len(nodes_of(job)) == 2
    return loop, job


def test_each_node_of_a_gang_confirms_and_only_the_first_writes(gang):
    loop, job = gang
    first, second = nodes_of(job)
    started = agent_confirm_start(node=first, job=job, at=at(6))
    assert not is_replayed(started) and state_of(job) == S.RUNNING
    count = rows()
    for node, when in ((second, 7), (first, 8)):  # the other node, then a retry
        again = agent_confirm_start(node=node, job=job, at=at(when))
        assert is_replayed(again) and again.pk == started.pk
        assert (again.reason, again.actor_name) == (Reason.STARTED, first.name)
        assert job.state == S.RUNNING
    assert rows() == count
    report = ok_step(loop, 10)
    assert not report.rebuilt and report.caught_up == 1  # the one Started row
    ok, output = replay_verify()
    assert ok, output


def test_a_node_outside_the_gang_is_still_forbidden(gang, cluster):
    _loop, job = gang
    agent_confirm_start(node=nodes_of(job)[0], job=job, at=at(6))
    outside = Node.objects.exclude(pk__in=[n.pk for n in nodes_of(job)]).first()
    with pytest.raises(Forbidden):
        agent_confirm_start(node=outside, job=job, at=at(7))


@pytest.fixture
def preempted_gang(cluster):
    """vision holds 32 GPUs (16 past its guarantee): a non-preemptible 16-GPU job and a
    checkpointable 16-GPU gang; nlp asks for its guaranteed 16: the gang is asked to stop
    (vision keeps its guaranteed 16, at the share nlp has once its job runs)."""
    loop = leader()
    solo = submit(cluster["vision"], gpus=16)
    job = submit(cluster["vision"], gpus=16, gpus_per_node=8, checkpointable=True,
                 checkpoint_time_s=60)
    ok_step(loop, 5)
    for node in nodes_of(solo):
        agent_confirm_start(node=node, job=solo, at=at(6))
    for node in nodes_of(job):
        agent_confirm_start(node=node, job=job, at=at(6))
    head = submit(cluster["nlp"], gpus=16, at_s=8)
    ok_step(loop, 10)
    assert state_of(job) == S.PREEMPT_REQUESTED
    return loop, job, head


def test_a_gang_being_preempted_still_answers_a_late_start_confirmation(preempted_gang):
    _loop, job, _head = preempted_gang
    count = rows()
    late = agent_confirm_start(node=nodes_of(job)[1], job=job, at=at(11))
    assert is_replayed(late) and late.reason == Reason.STARTED
    assert job.state == S.PREEMPT_REQUESTED and rows() == count


def test_each_node_acknowledges_the_preemption_and_only_the_first_writes(preempted_gang):
    loop, job, _head = preempted_gang
    first, second = nodes_of(job)
    acked = agent_ack_preempt(node=second, job=job, at=at(11))
    assert not is_replayed(acked) and state_of(job) == S.CHECKPOINTING
    count = rows()
    again = agent_ack_preempt(node=first, job=job, at=at(12))
    assert is_replayed(again) and again.pk == acked.pk
    assert again.reason == Reason.CHECKPOINT_STARTED and rows() == count
    # a start confirmation arriving now is answered too (it is further along)
    assert agent_confirm_start(node=first, job=job, at=at(12)).reason == Reason.STARTED
    assert rows() == count
    assert not ok_step(loop, 13).rebuilt


def test_the_first_exit_of_a_gang_ends_the_run_and_the_others_get_its_row(preempted_gang):
    loop, job, head = preempted_gang
    first, second = nodes_of(job)
    agent_ack_preempt(node=first, job=job, at=at(11))
    agent_report_checkpoint(node=first, job=job, resume_pointer="s3://g/1", checkpoint_at=at(12))
    ended = agent_report_exit(node=first, job=job, outcome="preempted", at=at(13))
    assert (ended.from_state, ended.to_state, ended.reason) == (S.CHECKPOINTING, S.PREEMPTED,
                                                                Reason.PREEMPTED)
    assert nodes_of(job) == []  # the whole gang's GPUs are back
    count = rows()
    late = agent_report_exit(node=second, job=job, outcome="preempted", at=at(14))
    assert is_replayed(late) and late.pk == ended.pk and rows() == count
    report = ok_step(loop, 15)  # requeues the gang, places the head
    assert not report.rebuilt
    assert (state_of(job), state_of(head)) == (S.QUEUED, S.PLACING)
    # after the requeue the late report still gets the row that ended its run
    count = rows()
    again = agent_report_exit(node=second, job=job, outcome="failed", exit_code=137, at=at(16))
    assert is_replayed(again) and again.pk == ended.pk and rows() == count
    assert job.state == S.QUEUED
    ok, output = replay_verify()
    assert ok, output


def test_the_outcome_of_a_gang_is_the_first_report(gang):
    loop, job = gang
    first, second = nodes_of(job)
    agent_confirm_start(node=first, job=job, at=at(6))
    done = agent_report_exit(node=second, job=job, outcome="completed", exit_code=0, at=at(20))
    count = rows()
    crashed = agent_report_exit(node=first, job=job, outcome="failed", exit_code=1, at=at(21))
    assert is_replayed(crashed) and crashed.pk == done.pk and rows() == count
    assert state_of(job) == S.COMPLETED
    assert all(n.free_gpus == 8 for n in Node.objects.filter(pk__in=[first.pk, second.pk]))
    assert not ok_step(loop, 25).rebuilt


def test_a_run_the_scheduler_ended_is_still_a_conflict_for_an_exit(gang):
    loop, job = gang
    first, second = nodes_of(job)
    agent_confirm_start(node=first, job=job, at=at(6))
    node_mark_down(node=second, actor_name="ops", why="PSU", at=at(7))
    report = loop.follow(now=at(8))  # the node failure requeues the gang (no tick: no new run)
    assert report.leader and not report.error, report
    moved = Transition.objects.filter(job=job, reason=Reason.NODE_FAILED).get()
    assert moved.actor == Actor.SCHEDULER and state_of(job) == S.QUEUED
    count = rows()
    with pytest.raises(Conflict) as refused:
        agent_report_exit(node=second, job=job, outcome="failed", exit_code=1, at=at(9))
    assert refused.value.code == "job_queued" and rows() == count


def test_a_start_confirmation_for_a_requeued_run_is_still_a_conflict(gang):
    _loop, job = gang
    first, _second = nodes_of(job)
    agent_confirm_start(node=first, job=job, at=at(6))
    agent_report_exit(node=first, job=job, outcome="completed", at=at(7))
    with pytest.raises(Conflict):
        agent_confirm_start(node=first, job=job, at=at(8))
