"""The leader loop: builds the core from the database, follows the log, persists fenced."""

from __future__ import annotations

import logging

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Job, Node, Transition
from scheduler_app.observability import LogContextFilter
from scheduler_app.services import job_cancel
from scheduler_app.services.agents import agent_register
from scheduler_app.services.leader import epoch
from scheduler_app.services.lease import LEADER_LEASE, LeaseLost, lease_acquire
from tests.foundation.test_replay import replay_verify

from .conftest import agent, at, leader, state_of, submit

pytestmark = pytest.mark.django_db

S = JobState


def test_the_leader_places_a_submitted_job_and_persists_the_allocation(cluster):
    job = submit(cluster["vision"], gpus=4)
    report = leader().step(now=at(5))
    assert report.leader and not report.error, report
    assert report.rebuilt and report.decisions == 1
    assert state_of(job) == S.PLACING
    row = Transition.objects.filter(job=job).last()
    assert (row.from_state, row.to_state, row.actor) == (S.QUEUED, S.PLACING, Actor.SCHEDULER)
    assert row.tick_id == report.tick_id and row.actor_name == "leader-a"
    allocs = list(Allocation.objects.filter(job=job, end__isnull=True))
    assert sum(a.gpus for a in allocs) == 4
    free = {n.name: n.free_gpus for n in Node.objects.all()}
    assert sum(free.values()) == 32 - 4
    assert free[allocs[0].node.name] == 8 - 4


def test_an_agent_confirmation_in_the_log_reaches_the_in_memory_state(cluster):
    loop = leader()
    job = submit(cluster["vision"], gpus=4)
    loop.step(now=at(5))
    agent(job, S.RUNNING, Reason.STARTED, at_s=10)
    report = loop.step(now=at(15))
    assert not report.rebuilt and report.caught_up == 1
    assert loop.scheduler.job(str(job.pk)).state == S.RUNNING
    # had the confirmation been missed, the placing timeout (300 s) would requeue the job
    loop.step(now=at(400))
    assert state_of(job) == S.RUNNING


def test_a_job_submitted_while_leading_is_followed_from_the_log_and_placed(cluster):
    loop = leader()
    loop.step(now=at(1))
    job = submit(cluster["nlp"], gpus=8, at_s=2)
    report = loop.step(now=at(6))
    assert not report.rebuilt and report.caught_up == 2  # SUBMITTED, then QUEUED
    assert state_of(job) == S.PLACING


def test_a_cancel_and_an_exit_in_the_log_free_gpus_for_the_next_placement(cluster):
    loop = leader()
    big = [submit(cluster["vision"], gpus=16, at_s=i, max_runtime_s=7200)
           for i in range(2)]  # borrows: a limit lets a job nothing may preempt
    loop.step(now=at(5))
    assert [state_of(j) for j in big] == [S.PLACING, S.PLACING]
    waiting = submit(cluster["nlp"], gpus=16, at_s=6)
    loop.step(now=at(10))
    assert state_of(waiting) == S.QUEUED
    agent(big[0], S.RUNNING, Reason.STARTED, at_s=11)
    agent(big[0], S.COMPLETED, Reason.COMPLETED, at_s=12)
    report = loop.step(now=at(15))
    assert not report.rebuilt and not report.error, report
    assert state_of(waiting) == S.PLACING
    job_cancel(job_id=big[1].pk, at=at(16))
    report = loop.step(now=at(20))
    assert not report.rebuilt and report.caught_up == 1
    assert loop.scheduler.job(str(big[1].pk)).state == S.CANCELLED


def test_a_stale_token_writes_nothing(cluster):
    old = leader("leader-a")
    old.step(now=at(0))
    job = submit(cluster["vision"], gpus=4, at_s=1)
    decisions, _, _ = old.sync(at(20))
    decisions += old.scheduler.tick(epoch(at(20))).decisions
    assert decisions, "the stale leader decided something"
    # meanwhile the lease expired and a standby took over
    assert lease_acquire(name=LEADER_LEASE, holder="leader-b", ttl_s=15, now=at(16)) == 2
    rows_before = Transition.objects.count()
    with pytest.raises(LeaseLost):
        old.persist(decisions, tick_id="1.9", now=at(20))
    assert Transition.objects.count() == rows_before
    assert state_of(job) == S.QUEUED
    assert not Allocation.objects.exists()
    assert sum(Node.objects.values_list("free_gpus", flat=True)) == 32
    # and its next step notices it is not the leader
    report = old.step(now=at(21))
    assert not report.leader and old.scheduler is None


def test_a_conflicting_write_aborts_the_whole_tick_and_drops_the_state(cluster):
    loop = leader()
    loop.step(now=at(0))
    first = submit(cluster["vision"], gpus=4, at_s=1)
    second = submit(cluster["vision"], gpus=4, at_s=1)
    decisions, _, _ = loop.sync(at(5))
    decisions += loop.scheduler.tick(epoch(at(5))).decisions
    job_cancel(job_id=second.pk, at=at(5))  # lands between the tick and its writes
    report_rows = Transition.objects.count()
    with pytest.raises(Exception, match="is CANCELLED"):
        loop.persist(decisions, tick_id="1.2", now=at(5))
    assert Transition.objects.count() == report_rows  # the first job's placement too
    assert state_of(first) == S.QUEUED
    loop.drop()
    report = loop.step(now=at(6))
    assert report.rebuilt and not report.error
    assert (state_of(first), state_of(second)) == (S.PLACING, S.CANCELLED)


def decision_keys(decisions):
    return [
        (d.job_id, d.from_state, d.to_state, d.reason, d.at_s, d.alloc, d.detail)
        for d in decisions
    ]


def busy_history(cluster) -> tuple:
    """A few ticks with confirmations, an exit and waiting jobs of both teams: vision
    borrows 8 GPUs with a checkpointable job (jobs[1]), which nlp, coming back for its
    guarantee with jobs[3], reclaims; the borrower never acknowledges (its grace expires)."""
    loop = leader()
    vision, nlp = cluster["vision"], cluster["nlp"]
    jobs = [
        submit(vision, gpus=16, at_s=0, max_runtime_s=3600),
        submit(vision, gpus=8, at_s=1, max_runtime_s=600, checkpointable=True),
        submit(nlp, gpus=4, at_s=2),
    ]
    loop.step(now=at(5))
    for job in jobs:
        if state_of(job) == S.PLACING:
            agent(job, S.RUNNING, Reason.STARTED, at_s=8)
    jobs.append(submit(nlp, gpus=8, at_s=9, max_runtime_s=1200))
    jobs.append(submit(vision, gpus=16, at_s=9, max_runtime_s=900))
    jobs.append(submit(nlp, gpus=2, at_s=9))
    loop.step(now=at(10))
    agent(jobs[2], S.COMPLETED, Reason.COMPLETED, at_s=12)
    loop.step(now=at(15))
    return loop, jobs


def test_a_rebuild_from_the_database_makes_the_same_decisions(cluster):
    loop, _ = busy_history(cluster)
    reasons = set()
    # later instants fire the grace and time-limit timers armed before the rebuild
    for now_s in (20, 700, 2000, 4000):
        now = at(now_s)
        kept, _, _ = loop.sync(now)
        kept += loop.scheduler.tick(epoch(now)).decisions
        fresh_loop = leader("leader-b")
        rebuilt, _, _ = fresh_loop.sync(now)
        rebuilt += fresh_loop.scheduler.tick(epoch(now)).decisions
        assert decision_keys(rebuilt) == decision_keys(kept)
        lease_acquire(name=LEADER_LEASE, holder=loop.holder, ttl_s=15, now=now)  # renew
        loop.persist(kept, tick_id=f"1.{now_s}", now=now)
        reasons |= {d.reason for d in kept}
    assert {Reason.GRACE_EXPIRED, Reason.TIME_LIMIT, Reason.PLACED} <= reasons, reasons


def test_replay_verify_stays_clean_after_several_ticks(cluster):
    busy_history(cluster)
    ok, output = replay_verify()
    assert ok, output


def test_a_leader_resumes_after_its_state_is_dropped(cluster):
    loop, jobs = busy_history(cluster)
    held = Allocation.objects.filter(end__isnull=True).count()
    loop.drop()
    report = loop.step(now=at(16))
    assert report.rebuilt and not report.error and report.decisions == 0
    assert Allocation.objects.filter(end__isnull=True).count() == held
    assert Job.objects.filter(state=S.QUEUED).count() == sum(
        1 for j in jobs if state_of(j) == S.QUEUED
    )


def test_a_standby_takes_over_after_the_lease_expires_and_carries_on(cluster):
    first, standby = leader("leader-a"), leader("leader-b")
    submit(cluster["vision"], gpus=4)
    assert first.step(now=at(5)).leader
    submit(cluster["nlp"], gpus=4, at_s=6)
    assert not standby.step(now=at(19)).leader  # a's lease runs to 20
    report = standby.step(now=at(20))
    assert report.leader and report.token == 2 and report.rebuilt and report.decisions == 1
    assert not first.step(now=at(21)).leader
    ok, output = replay_verify()
    assert ok, output


def run_the_grace_protocol(victim, at_s: int) -> None:
    """The agent's side of a graceful preemption: ack, checkpoint, exit."""
    agent(victim, S.CHECKPOINTING, Reason.CHECKPOINT_STARTED, at_s=at_s)
    agent(victim, S.CHECKPOINTING, Reason.CHECKPOINTED, at_s=at_s + 1,
          detail={"resume_pointer": "s3://ckpt/step-900"})
    agent(victim, S.PREEMPTED, Reason.PREEMPTED, at_s=at_s + 2)


def test_a_graceful_preemption_from_the_log_requeues_the_victim_and_starts_the_head(cluster):
    loop, jobs = busy_history(cluster)
    victim, head = jobs[1], jobs[3]
    assert (state_of(victim), state_of(head)) == (S.PREEMPT_REQUESTED, S.QUEUED)
    run_the_grace_protocol(victim, at_s=16)
    report = loop.step(now=at(20))
    assert not report.rebuilt and not report.error and report.caught_up == 3, report
    requeue = Transition.objects.filter(job=victim).last()
    assert (requeue.from_state, requeue.to_state, requeue.reason) == (
        S.PREEMPTED, S.QUEUED, Reason.REQUEUED
    )
    assert requeue.actor == Actor.SCHEDULER and requeue.tick_id == report.tick_id
    assert state_of(head) == S.PLACING
    victim.refresh_from_db()
    assert victim.resume_pointer == "s3://ckpt/step-900"
    assert loop.scheduler.job(str(victim.pk)).resume_pointer == "s3://ckpt/step-900"
    ok, output = replay_verify()
    assert ok, output


def test_a_rebuild_finishes_a_preemption_the_dead_leader_left_half_done(cluster):
    loop, jobs = busy_history(cluster)
    victim = jobs[1]
    run_the_grace_protocol(victim, at_s=16)  # the leader dies before it sees the exit
    successor = leader("leader-b")
    report = successor.step(now=at(31))
    assert report.leader and report.rebuilt and not report.error, report
    assert state_of(victim) == S.QUEUED
    assert Transition.objects.filter(job=victim).last().actor_name == "leader-b"
    ok, output = replay_verify()
    assert ok, output


class _Records(logging.Handler):
    """Keeps the records it sees, with the bound log context copied onto them."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.addFilter(LogContextFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_leaders_own_log_lines_carry_the_tick_id(cluster, caplog, monkeypatch):
    loop = leader()
    loop.step(now=at(1))
    agent_register(name="n9", pod="pod9", gpus=8, at=at(2))  # a new node: rebuild
    handler = _Records()
    logger = logging.getLogger("scheduler_app.leader")
    caplog.set_level(logging.INFO, logger="scheduler_app.leader")
    logger.addHandler(handler)
    try:
        report = loop.step(now=at(3))
        submit(cluster["vision"], gpus=4, at_s=4)

        def connection_lost(*args: object, **kwargs: object) -> None:
            raise RuntimeError("server closed the connection unexpectedly")

        monkeypatch.setattr(loop, "persist", connection_lost)
        failed = loop.step(now=at(5))
    finally:
        logger.removeHandler(handler)
    assert report.rebuilt and not report.error, report
    rebuilding = [r for r in handler.records if r.getMessage().startswith("rebuilding")]
    assert [r.tick_id for r in rebuilding] == [report.tick_id]
    failing = [r for r in handler.records if r.getMessage().startswith("tick failed")]
    assert failed.error and [r.tick_id for r in failing] == [failed.tick_id]
    assert failed.tick_id != report.tick_id


def test_a_job_whose_dependency_already_failed_is_cancelled_without_a_rebuild(
        cluster, monkeypatch):
    """Found live (2026-12-07): a job submitted with afterok on a job already cancelled
    was admitted by the services; the core's admission cancels it at once
    (DependencyNeverSatisfied), and the leader took that third move for a divergence and
    rebuilt its whole state: a cost at 100,000 jobs, and a rebuild does not restore a
    reclaim claim whose victims have stopped, so a victim was placed again on the node
    reclaimed for its head and preempted a second time. The services refuse such a
    submit now; the core still meets it when the awaited job ends between the submit's
    check and the next tick, which the check's rule switched off stands for here."""
    import scheduler_app.services.jobs as services_jobs

    monkeypatch.setattr(services_jobs, "_NEVER_MET", {})
    loop = leader()
    first = submit(cluster["vision"], gpus=4, at_s=0)
    loop.step(now=at(5))
    job_cancel(job_id=first.pk, actor_name="ada", at=at(6))
    loop.step(now=at(10))
    after = submit(cluster["vision"], gpus=4, at_s=11,
                   depends_on=[{"job": first.pk, "when": "ok"}])
    report = loop.step(now=at(15))
    assert not report.error and not report.rebuilt, report
    assert state_of(after) == S.CANCELLED
    last = Transition.objects.filter(job=after).order_by("-id").first()
    assert (last.from_state, last.reason) == (S.QUEUED, Reason.DEPENDENCY_NEVER_SATISFIED)
    ok, text = replay_verify()
    assert ok, text
