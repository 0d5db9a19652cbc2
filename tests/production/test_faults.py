"""Faults with real processes on PostgreSQL: kill -9 mid-tick, two schedulers at once, the
leader dying, PostgreSQL dropping the tick's connection, Redis going away.

The embedded loop (``run_scheduler``) runs the same LeaderLoop step as the Celery task, so
it stands in for the worker wherever Celery itself is not what is tested (a process starts
in about a second instead of three); the Celery worker's own faults are at the end.
After every fault: ``replay --verify`` is clean, no node is over-allocated or gives a GPU
twice, every holding job has its allocation (``procs.assert_consistent``).
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time

import psycopg
import pytest
from django.db import connection

from scheduler_app.core.states import FINAL_STATES, JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Lease, Pod, Tenant, Transition
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.lease import LEADER_LEASE
from tests.foundation.factories import NodeFactory, TenantFactory

from .procs import (
    SHARED_REDIS_DB,
    Proc,
    assert_consistent,
    poll,
    shared_redis_base,
)

pytestmark = [
    pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_early_ticks_from_this_process"),
]

S = JobState


SIZES = (1, 1, 2, 4, 4, 8, 8, 16)


@pytest.fixture
def big_cluster() -> list[Tenant]:
    """2 pods x 8 nodes x 8 GPUs; three teams, two of which borrow (so preemptions come)."""
    pods = [Pod.objects.create(name=f"pod{i}") for i in range(2)]
    for i in range(16):
        NodeFactory(name=f"n{i:02d}", pod=pods[i // 8])
    return [
        TenantFactory(name="vision", guaranteed_gpus=48, borrow_limit_gpus=48),
        TenantFactory(name="nlp", guaranteed_gpus=48, borrow_limit_gpus=32),
        TenantFactory(name="audio", guaranteed_gpus=32, borrow_limit_gpus=0),
    ]


def agent(job_id: int, to: JobState, reason: Reason) -> None:
    """An agent's report. With a scheduler running at the same time the job may have moved
    on since we read it: the service refuses the stale move, as it would the agent's.
    Every writer takes the log's append lock before its row locks, so no report is ever a
    deadlock victim: any database error fails the test."""
    try:
        job_transition(job_id=job_id, to_state=to, reason=reason, actor=Actor.AGENT,
                       actor_name="agent")
    except ValueError:  # IllegalTransition / Conflict: a concurrent move got there first
        return


def make_work(rng: random.Random, tenants: list[Tenant], submits: int) -> None:
    """What happens between ticks: agents confirm, finish and stop jobs; users submit."""
    for job in Job.objects.exclude(state__in=[s.value for s in FINAL_STATES]).order_by("id"):
        roll = rng.random()
        if job.state == S.PLACING and roll < 0.8:
            agent(job.pk, S.RUNNING, Reason.STARTED)
        elif job.state == S.RUNNING and roll < 0.25:
            outcome = rng.choice([(S.COMPLETED, Reason.COMPLETED), (S.FAILED, Reason.EXIT_FAILED)])
            agent(job.pk, *outcome)
        elif job.state == S.PREEMPT_REQUESTED and roll < 0.7:
            agent(job.pk, S.CHECKPOINTING, Reason.CHECKPOINT_STARTED)
            agent(job.pk, S.PREEMPTED, Reason.PREEMPTED)
    for _ in range(submits):
        job_submit(
            tenant=rng.choice(tenants), name="trial", gpus=rng.choice(SIZES),
            checkpointable=rng.random() < 0.6, checkpoint_interval_s=600,
            max_runtime_s=rng.choice([None, 3600, 7200]),
        )


def leader_tick(proc: Proc, *, after: int = 0, timeout: float = 30) -> dict:
    """The first tick line (JSON) of ``proc`` in which it led without error."""
    _i, _at, line = proc.wait_for(
        lambda line: '"leader": true' in line and '"error"' not in line and '"tick"' in line,
        timeout, after=after,
    )
    return json.loads(line)


# ------------------------------------------------------------------ kill -9 mid-tick
TRIALS = 20


def test_kill_9_at_random_points_of_a_tick_then_restart_leaves_everything_consistent(
    big_cluster, procs
):
    """Each trial: work arrives, a scheduler starts and is killed (-9) at a random instant
    of its first step; a restarted one (same holder name: a new term at once) must rebuild
    and carry on, and everything must be consistent. Processes are started ahead of their
    turn (``warm_run_scheduler``) so a trial does not wait a second for Django to load."""
    rng = random.Random(20261129)
    args = ("--holder", "sched", "--interval", "60", "-v", "3")
    warm = [procs.warm_run_scheduler(ttl_s=5) for _ in range(2)]
    est_step_s = 0.3  # refined from the restarted scheduler's own ticks
    cut_mid_step = 0
    for _trial in range(TRIALS):
        make_work(rng, big_cluster, submits=rng.randint(15, 35))
        victim = warm.pop(0)
        victim.wait_for(lambda line: line == "warm", 60)
        victim.go(*args)
        warm.append(procs.warm_run_scheduler(ttl_s=5))
        start, _at, _ = victim.wait_for(lambda line: line == "step starts", 30)
        time.sleep(rng.uniform(0, est_step_s))
        victim.kill9()
        if not any('"tick"' in line for _t, _s, line in victim.lines[start:]):
            cut_mid_step += 1

        restarted = warm.pop(0)
        restarted.wait_for(lambda line: line == "warm", 60)
        restarted.go(*args)
        warm.append(procs.warm_run_scheduler(ttl_s=5))
        tick = leader_tick(restarted)
        assert tick["tick"]["rebuilt"], tick
        restarted.kill9()  # idle after its step: the next trial's scheduler takes over
        est_step_s = max(0.05, 0.9 * tick["tick"]["duration_ms"] / 1000)
        assert_consistent()
        connection.close()
    # the kills must have landed inside steps, not only between them
    assert cut_mid_step >= TRIALS // 2, cut_mid_step
    scheduled = Transition.objects.filter(actor=Actor.SCHEDULER)
    assert scheduled.filter(reason=Reason.PLACED).exists()
    assert scheduled.filter(reason=Reason.PREEMPT_REQUESTED).exists()


# ------------------------------------------------------------------ two schedulers at once
def token_of(tick_id: str) -> int:
    return int(tick_id.split(".")[0])


def test_two_schedulers_ticking_at_once_only_the_lease_holders_decisions_land(
    big_cluster, procs
):
    """Both tick every 0.1 s; the leader is then stalled (SIGSTOP) past its lease, the
    other takes over, and the stalled one wakes up with a stale token mid-whatever."""
    rng = random.Random(7)
    ttl_s = 2
    a = procs.run_scheduler("sched-a", interval=0.1, ttl_s=ttl_s, verbosity=2)
    b = procs.run_scheduler("sched-b", interval=0.1, ttl_s=ttl_s, verbosity=2)
    first = poll(current_holder, 30, what="a leader")
    stalled = a if first == "sched-a" else b
    for _ in range(2):
        make_work(rng, big_cluster, submits=8)
        time.sleep(0.5)
    took_over = False
    for _attempt in range(3):  # stalled inside a transaction, it blocks the takeover: retry
        stalled.signal(signal.SIGSTOP)
        # resumed by a timer: the work below may wait on a lock the stalled one holds
        wake = threading.Timer(ttl_s + 2.5, stalled.signal, args=(signal.SIGCONT,))
        wake.start()
        try:
            took_over = bool(poll(lambda: current_holder() not in ("", first), ttl_s + 2,
                                  what="the takeover"))
        except AssertionError:
            took_over = False
        make_work(rng, big_cluster, submits=8)
        wake.join()
        if took_over:
            break
        time.sleep(0.3)
    assert took_over, "the standby never took over from the stalled leader"
    for _ in range(2):
        make_work(rng, big_cluster, submits=8)
        time.sleep(0.5)
    a.stop()
    b.stop()

    holders: dict[int, str] = {}
    for proc in (a, b):
        for line in proc.lines:
            if "leader=1" in line[2]:
                fields = dict(f.split("=", 1) for f in line[2].split() if "=" in f)
                token = int(fields["token"])
                assert holders.setdefault(token, fields["holder"]) == fields["holder"]
    rows = list(Transition.objects.filter(actor=Actor.SCHEDULER).order_by("id")
                .values_list("tick_id", "actor_name"))
    assert {name for _t, name in rows} == {"sched-a", "sched-b"}
    tokens = [token_of(tick_id) for tick_id, _n in rows]
    assert tokens == sorted(tokens), "a stale leader wrote after its successor"
    for tick_id, name in rows:
        assert holders[token_of(tick_id)] == name, (tick_id, name)
    assert_consistent()


def current_holder() -> str:
    lease = Lease.objects.filter(name=LEADER_LEASE).first()
    return lease.holder if lease else ""


# ------------------------------------------------------------------ the leader dies
def test_when_the_leader_dies_a_standby_leads_within_the_lease_period(cluster, procs):
    ttl_s, interval = 3, 0.2
    a = procs.run_scheduler("sched-a", interval=interval, ttl_s=ttl_s, verbosity=2)
    b = procs.run_scheduler("sched-b", interval=interval, ttl_s=ttl_s, verbosity=2)
    holder = poll(current_holder, 30, what="a leader")
    leader, standby = (a, b) if holder == "sched-a" else (b, a)
    standby_lines = len(standby.lines)

    killed_at = time.time()
    leader.kill9()
    job = job_submit(tenant=cluster["vision"], name="after-the-crash", gpus=8)

    i, took_over_at, _line = standby.wait_for(lambda line: "leader=1" in line, 30,
                                              after=standby_lines)
    assert took_over_at - killed_at <= ttl_s + interval + 1.0, took_over_at - killed_at
    poll(lambda: Job.objects.get(pk=job.pk).state == S.PLACING, 10, what="the placement")
    row = Transition.objects.filter(job=job, to_state=S.PLACING).get()
    assert row.actor_name == standby_name(standby)
    assert_consistent()


def standby_name(proc: Proc) -> str:
    return proc.args[proc.args.index("--holder") + 1]


# ------------------------------------------------------------------ PostgreSQL drops us
def test_a_connection_lost_mid_tick_aborts_the_tick_and_the_next_one_succeeds(cluster, procs):
    """The test holds a tenant row lock, so the tick's persistence stops half way (log row
    appended, projection half updated) until its backend is terminated."""
    sched = procs.run_scheduler("sched", interval=0.3, ttl_s=5)
    leader_tick(sched)
    s = connection.settings_dict
    blocker = psycopg.connect(host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432,
                              user=s["USER"] or "postgres", dbname=s["NAME"])
    try:
        # NO KEY UPDATE: submits (foreign keys take KEY SHARE) pass, the tick's
        # select_for_update of the team's usage row waits
        blocker.execute(
            "SELECT 1 FROM scheduler_app_tenant WHERE name = 'vision' FOR NO KEY UPDATE"
        )
        jobs = [job_submit(tenant=cluster["vision"], name=f"j{i}", gpus=4) for i in range(3)]
        stuck = poll(lambda: waiting_on_a_lock(s["NAME"]), 30, what="the stuck tick")
        assert len(stuck) == 1, stuck
        lines_before = len(sched.lines)
        blocker.execute("SELECT pg_terminate_backend(%s)", [stuck[0][0]])
    finally:
        blocker.rollback()
        blocker.close()

    _i, _at, failed = sched.wait_for(lambda line: "error=" in line, 30, after=lines_before)
    recovered = leader_tick(sched, after=lines_before)
    assert recovered["tick"]["rebuilt"] and recovered["tick"]["decisions"] == 3, recovered
    failed_tick_id = failed.split("tick_id=")[1].split()[0]
    assert not Transition.objects.filter(tick_id=failed_tick_id).exists()  # nothing half done
    for job in jobs:
        job.refresh_from_db()
        assert job.state == S.PLACING
    sched.stop()
    assert_consistent()


def waiting_on_a_lock(dbname: str) -> list[tuple[int]]:
    # autocommit (not the blocker's transaction: it would see one frozen stats snapshot)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s"
                       " AND wait_event_type = 'Lock'", [dbname])
        return cursor.fetchall()


# ------------------------------------------------------------------ Celery worker faults
def test_redis_stopped_and_restarted_submissions_land_and_ticks_resume(cluster, procs):
    redis = procs.private_redis()
    worker = procs.worker(redis.url)
    procs.beat(redis.url, interval_s=1)
    leader_tick(worker, timeout=30)
    submitter = procs.python("submitter", SUBMIT_EVERY_QUARTER_SECOND,
                             procs.celery_env(redis.url))
    submitter.wait_for(lambda line: line.startswith("submitted"), 30)
    time.sleep(0.5)
    redis.stop()
    down_from = len(submitter.lines)
    time.sleep(2.5)
    redis.start()
    _i, _at, done = submitter.wait_for(lambda line: line.startswith("done"), 60)

    submitted = [int(line.split()[1]) for _t, _s, line in submitter.lines
                 if line.startswith("submitted")]
    assert len(submitted) == 16 and down_from < len(submitter.lines)
    _done, enqueued, failed = done.split()
    # some early-tick requests found the broker down: the submits landed all the same
    assert int(failed) >= 1 and int(enqueued) >= 1, done
    assert Job.objects.filter(pk__in=submitted).count() == 16  # every submission landed
    poll(lambda: Job.objects.filter(pk__in=submitted, state=S.PLACING).count() == 16, 60,
         every=0.2, what="every job placed once Redis is back")
    worker.stop()
    assert_consistent()


SUBMIT_EVERY_QUARTER_SECOND = """
import time
from prometheus_client import REGISTRY
from scheduler_app.models import Tenant
from scheduler_app.services import job_submit

def early_ticks(outcome):
    name = "scheduler_early_tick_requests_total"
    return int(REGISTRY.get_sample_value(name, {"outcome": outcome}) or 0)

vision = Tenant.objects.get(name="vision")
for i in range(16):
    job = job_submit(tenant=vision, name=f"s{i}", gpus=1)  # asks for an early tick
    print("submitted", job.pk, early_ticks("broker_error"), flush=True)
    time.sleep(0.25)
    if i % 4 == 3:
        time.sleep(1.0)  # past the debounce window: the next submit asks again
print("done", early_ticks("enqueued"), early_ticks("broker_error"), flush=True)
"""


def test_kill_9_the_celery_worker_mid_tick_and_restart_it(big_cluster, procs):
    """The worker runs the tick in its own process (--pool solo): kill -9 it just after it
    received a tick; a restarted worker (a new holder: it waits out the short lease)
    rebuilds and carries on."""
    rng = random.Random(5)
    broker = f"redis://{shared_redis_base()}/{SHARED_REDIS_DB}"
    procs.beat(broker, interval_s=1)
    for trial in range(2):  # the 20 seeded kills are above; this is Celery's part
        make_work(rng, big_cluster, submits=30)
        worker = procs.worker(broker, name=f"victim{trial}", SCHEDULER_LEASE_TTL_S="2")
        worker.wait_for(lambda line: "scheduler_app.scheduler_tick" in line
                        and "received" in line, 30)
        time.sleep(rng.uniform(0, 0.3))
        worker.kill9()
        restarted = procs.worker(broker, name=f"restarted{trial}", SCHEDULER_LEASE_TTL_S="2")
        tick = leader_tick(restarted, timeout=60)
        assert tick["tick"]["rebuilt"], tick
        restarted.stop()
        assert_consistent()
        connection.close()
