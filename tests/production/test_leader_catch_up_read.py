"""The leader's catch-up reads the log and the new jobs' specs the same way on every path.

On PostgreSQL the catch-up reads with psycopg's binary protocol (an empty detail sent as
NULL, the specs of the new jobs by one array parameter); elsewhere, and as the reference,
through the ORM. Both must give the same rows, value for value and type for type, for
every kind of row the leader follows, and a leader following the log must decide the
same whichever path it reads through.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import ProgrammingError, connection
from django.db.models import JSONField, Value

from scheduler_app.core.states import FINAL_STATES, JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Job, Node, Transition
from scheduler_app.selectors import leader as reads
from scheduler_app.selectors.leader import LogRow
from scheduler_app.services import array_submit, job_cancel
from scheduler_app.services.agents import (
    agent_confirm_start,
    agent_report_checkpoint,
    agent_report_exit,
)
from scheduler_app.services.cluster import (
    node_drain,
    node_mark_down,
    node_undrain,
    tenant_set_quota,
)
from scheduler_app.services.leader import LeaderLoop, StepReport, epoch

from .conftest import at, submit
from .test_leader_loop import decision_keys

pytestmark = pytest.mark.django_db

S, R = JobState, Reason


def holding_node(job: Job) -> Node:
    return (Allocation.objects.filter(job=job, end__isnull=True).select_related("node")
            .order_by("node__name").first().node)


def play(cluster, step: Callable[[int], StepReport]) -> dict[str, Job]:
    """A history with every kind of row the leader follows, ``step(now_s)`` between its
    events: submits of every spec shape (a dependent, an array's tasks) and one that
    never fits, placements, agent
    confirmations, a checkpoint with a pointer, a cancel, a quota change, a drain and an
    undrain, a node going down under a job, an exit."""
    vision, nlp = cluster["vision"], cluster["nlp"]
    step(0)  # the build
    jobs = {
        "ckpt": submit(vision, gpus=8, at_s=1, checkpointable=True, checkpoint_interval_s=600,
                       checkpoint_time_s=30, restart_s=20, max_runtime_s=7200, priority=5),
        "gang": submit(nlp, gpus=8, at_s=1, gpus_per_node=4, gpu_type="H100",
                       preemptible=True, max_runtime_s=3600),
        "elastic": submit(vision, gpus=8, at_s=2, min_gpus=2, priority=-3),
        "never": submit(nlp, gpus=1000, at_s=2),
        # its GPU-seconds (1 x 36,000) put its deadline after gang's (8 x 3,600), so it is
        # placed after gang, beside it, and one node stays spare for the drain below
        "small": submit(nlp, gpus=1, at_s=2, interactive=True, max_runtime_s=36_000),
    }
    step(5)  # follows the submits, places
    for name in ("ckpt", "gang", "elastic"):
        agent_confirm_start(node=holding_node(jobs[name]), job=jobs[name], at=at(6))
    agent_report_checkpoint(node=holding_node(jobs["ckpt"]), job=jobs["ckpt"],
                            resume_pointer="s3://ckpt/1 \"é\"", checkpoint_at=at(7))
    job_cancel(job_id=jobs["elastic"].pk, at=at(8), why="not needed")
    tenant_set_quota(tenant=nlp, guaranteed_gpus=8, borrow_limit_gpus=8, actor_name="admin",
                     at=at(8))
    spare = Node.objects.exclude(allocations__end__isnull=True).order_by("name").first()
    node_drain(node=spare, actor_name="admin", at=at(8))
    jobs["late"] = submit(vision, gpus=16, at_s=9)
    # a dependent and a job array: the spec reads carry their JSON and array columns
    jobs["after"] = submit(vision, gpus=1, at_s=9,
                           depends_on=[{"job": jobs["gang"].pk, "when": "any"}])
    jobs["task"] = array_submit(tenant=vision, owner=None, name="sweep", gpus=1, count=2,
                                max_running=1, at=at(9))[1]
    step(10)
    node_mark_down(node=holding_node(jobs["ckpt"]), actor_name="ops", why="PSU", at=at(11))
    node_undrain(node=spare, actor_name="admin", at=at(11))
    step(15)
    agent_report_exit(node=holding_node(jobs["gang"]), job=jobs["gang"], outcome="completed",
                      at=at(16))
    step(20)
    return jobs


def stepping(loop: LeaderLoop) -> Callable[[int], StepReport]:
    def step(now_s: int) -> StepReport:
        report = loop.step(now=at(now_s))
        assert report.leader and not report.error, report
        return report

    return step


def assert_every_kind_of_row() -> None:
    """The history holds every shape of row the test is about."""
    rows = list(Transition.objects.values_list("kind", "from_state", "to_state", "reason",
                                               "detail"))
    assert {kind for kind, *_ in rows} == set(Transition.Kind)
    shapes = {(frm, to, reason) for _, frm, to, reason, _ in rows}
    assert {(S.SUBMITTED, S.FAILED, R.NEVER_FITS), (S.QUEUED, S.PLACING, R.PLACED),
            (S.RUNNING, S.CANCELLED, R.CANCELLED), (S.RUNNING, S.QUEUED, R.NODE_FAILED),
            (S.RUNNING, S.COMPLETED, R.COMPLETED)} <= shapes
    details = [detail for *_, detail in rows]
    assert {"resume_pointer": "s3://ckpt/1 \"é\""} in details
    assert any("alloc" in detail for detail in details)
    assert sum(detail == {} for detail in details) > 10  # and most are empty


def with_types(rows) -> list:
    """Each row with its values' types (True == 1, a datetime's zone may differ)."""
    return [(tuple(row), tuple(map(type, row)),
             [v.tzinfo for v in row if hasattr(v, "tzinfo")]) for row in rows]


@pytest.mark.postgres
def test_the_binary_read_of_the_log_is_the_orms(cluster):
    loop = LeaderLoop(holder="leader-a", clock=None)
    jobs = play(cluster, stepping(loop))
    assert_every_kind_of_row()
    # odd details no service writes, read all the same: JSON null, not an object, nested
    odd = [Value(None, JSONField()), [], "text", 0, {"a": {"b": [1, None, "é"]}, "": {}}]
    for detail in odd:
        Transition.objects.create(job=jobs["small"], from_state=S.RUNNING, to_state=S.RUNNING,
                                  reason=R.CHECKPOINTED, at=at(30), detail=detail,
                                  actor=Actor.AGENT)
    assert [d for (d,) in Transition.objects.order_by("-id").values_list("detail")[:5]] == [
        {"a": {"b": [1, None, "é"]}, "": {}}, 0, "text", [], None]
    last = Transition.objects.order_by("-id").values_list("id", flat=True)[0]
    first = Transition.objects.order_by("id").values_list("id", flat=True)[0]
    for watermark in [0, *range(first, last + 1)]:
        fast = reads._pg_log_rows(watermark)
        assert all(type(row) is LogRow for row in fast)
        assert with_types(fast) == with_types(reads._orm_log_rows(watermark))
    assert reads._pg_log_rows(last) == []
    # the dispatch takes the fast path here: its empty details are the one shared dict
    assert any(row.detail is reads._NO_DETAIL for row in reads.log_rows_since(0))

    ids = {job.pk for job in jobs.values()}
    fast = reads._pg_job_specs(ids | {-1})
    assert set(fast) == ids
    assert with_types(fast.values()) == with_types(
        reads._orm_job_specs(ids | {-1})[pk] for pk in fast
    )
    assert reads._pg_job_specs(set()) == reads._orm_job_specs(set()) == {}
    assert reads.job_specs(ids) == fast


@pytest.mark.postgres
def test_the_binary_read_of_the_live_jobs_and_allocations_is_the_orms(cluster):
    loop = LeaderLoop(holder="leader-a", clock=None)
    jobs = play(cluster, stepping(loop))
    live = Job.objects.exclude(state__in=[s.value for s in FINAL_STATES])
    assert {S.QUEUED, S.PLACING} <= set(live.values_list("state", flat=True))
    # preemption times as the services write them, and odd ones read all the same
    Job.objects.filter(pk=jobs["late"].pk).update(preemption_times=[5, 9])
    Job.objects.filter(pk=jobs["small"].pk).update(preemption_times=[])
    fast = reads._pg_live_job_rows()
    assert [row[0] for row in fast] == sorted(live.values_list("pk", flat=True))
    assert with_types(fast) == with_types(reads._orm_live_job_rows())
    assert [5, 9] in [row[-2] for row in fast]
    allocations = reads._pg_open_allocations()
    assert len(allocations) == Allocation.objects.filter(end__isnull=True).count() > 0
    assert with_types(allocations) == with_types(reads._orm_open_allocations())
    # and the dispatch takes the fast path here
    assert reads.live_job_rows() == fast


@pytest.mark.postgres
def test_the_binary_reads_pass_through_the_connections_execute_wrappers(cluster):
    submit(cluster["vision"], gpus=8, at_s=1)
    seen: list[tuple[str, object]] = []

    def record(execute, sql, params, many, context):
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        rows = reads._pg_log_rows(0)
        reads._pg_live_job_rows()
    assert rows and seen == [
        (reads._pg_log_select(), [0]),
        (reads._pg_live_select(), [[s.value for s in FINAL_STATES]]),
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # autocommit, as the leader runs
def test_a_failing_fast_read_raises_djangos_error_and_the_next_step_rebuilds(
    cluster, monkeypatch
):
    loop = LeaderLoop(holder="leader-a", clock=None)
    stepping(loop)(0)
    job = submit(cluster["vision"], gpus=8, at_s=1)
    with monkeypatch.context() as patch:
        patch.setattr(reads, "_pg_log_select", lambda: "SELECT nonsense(%s)")
        with pytest.raises(ProgrammingError):  # Django's, not psycopg's UndefinedFunction
            reads.log_rows_since(0)
        report = loop.step(now=at(2))
    assert report.error.startswith("ProgrammingError:") and loop.scheduler is None
    assert stepping(loop)(3).rebuilt
    job.refresh_from_db()
    assert job.state == S.PLACING


def test_a_leader_decides_the_same_through_either_read(cluster, monkeypatch):
    """A twin core follows the same log through the ORM (never writing, its own rows
    mirrored from the leader's) while the leader reads through the fast path (on
    PostgreSQL) and writes: at every step, the same rows followed, the same decisions,
    the same state of every job and tenant."""
    loop = LeaderLoop(holder="leader-a", clock=None, heartbeat_timeout_s=0)
    twin = LeaderLoop(holder="twin", clock=None, heartbeat_timeout_s=0)
    reports: list[StepReport] = []

    def step(now_s: int) -> StepReport:
        now = at(now_s)
        with monkeypatch.context() as patch:
            patch.setattr(reads, "log_rows_since", reads._orm_log_rows)
            patch.setattr(reads, "job_specs", reads._orm_job_specs)
            patch.setattr(reads, "live_job_rows", reads._orm_live_job_rows)
            patch.setattr(reads, "open_allocations",
                          reads._orm_open_allocations)
            pending, rebuilt, followed = twin.sync(now)
        by_orm = decision_keys(pending + twin.scheduler.tick(epoch(now), clock=None).decisions)
        made: list = []
        persist = loop.persist

        def recording(decisions, **kwargs):
            made.extend(decision_keys(decisions))
            persist(decisions, **kwargs)

        monkeypatch.setattr(loop, "persist", recording)
        report = stepping(loop)(now_s)
        monkeypatch.delattr(loop, "persist")
        assert (report.rebuilt, report.caught_up) == (rebuilt, followed)
        assert made == by_orm
        assert loop.scheduler.jobs == twin.scheduler.jobs  # every field of every record
        assert loop.scheduler.tenants == twin.scheduler.tenants
        twin.own_seqs = set(loop.own_seqs)  # what the leader wrote, the twin decided too
        reports.append(report)
        return report

    jobs = play(cluster, step)
    assert_every_kind_of_row()
    # followed, not rebuilt: every row after the build went through the catch-up
    assert reports[0].rebuilt and not any(r.rebuilt for r in reports[1:])
    assert [r.caught_up for r in reports[1:]] == [10, 15, 2, 1], reports
    assert sum(r.decisions for r in reports[1:]) >= 5
    assert loop.scheduler.job(str(jobs["ckpt"].pk)).state == S.PLACING  # requeued, placed
    assert loop.scheduler.job(str(jobs["ckpt"].pk)).resume_pointer == "s3://ckpt/1 \"é\""
    assert str(jobs["never"].pk) not in loop.scheduler.jobs
    assert reads._NO_DETAIL == {}  # no follower wrote into the shared empty detail
    assert loop.scheduler.tenants["nlp"].guaranteed_gpus == 8
