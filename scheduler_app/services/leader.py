"""The production leader: the core ``Scheduler`` in memory, fed from and written to the log.

One :meth:`LeaderLoop.step` is one tick of the production path:

1. acquire or renew the leader lease (a standby returns at once);
2. build the core's state from the database if it has none (first step, new token, or
   after any failure), else advance it from Transition rows committed since its watermark
   that it did not write itself (submits, cancels, agent confirmations, exits,
   checkpoints), each mapped to the Scheduler's event method;
3. run ``Scheduler.tick(now, clock=time.perf_counter)``;
4. persist every Decision in ONE transaction that first checks the lease token
   (``lease_check``): a stale leader writes nothing. Each decision goes through
   ``apply_locked`` (the composing form of ``job_transition``; ``job_transition`` itself
   opens a durable transaction and so cannot share the fenced one), after checking the
   job row still is in the state the core moved it from.

Any failure (lost lease, a conflict with a concurrent write, a database error) rolls the
transaction back and drops the in-memory state: the next step rebuilds it from the
database, which is the truth.

Seq order vs commit order (DESIGN.md's trap): tailing the log by ``id > watermark`` is
safe only because every append takes ``pg_advisory_xact_lock(LOG_APPEND_LOCK_KEY)`` on
PostgreSQL until its transaction commits (SQLite has one writer), so a row with a lower
seq can never commit after a reader has seen a higher one. The build takes the same lock
so its snapshot and its watermark agree.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max

from scheduler_app.core.scheduler import JobRecord, ReclaimClaim, Scheduler
from scheduler_app.core.states import FINAL_STATES, HOLDING_STATES, JobState, Reason
from scheduler_app.core.types import (
    Actor,
    Decision,
    JobSpec,
    NodeHealth,
    NodeSpec,
    SchedulerConfig,
    TenantSpec,
)
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition

from .lease import LEADER_LEASE, LeaseLost, lease_acquire, lease_check, lease_release
from .transitions import LOG_APPEND_LOCK_KEY, apply_locked, now_s
from .usage import half_life_s, usage_at

log = logging.getLogger("scheduler_app.leader")

S = JobState


class NeedRebuild(RuntimeError):
    """The log holds something the in-memory state cannot follow incrementally."""


class Conflict(RuntimeError):
    """A decision no longer matches the database (a concurrent write got there first)."""


@dataclass(slots=True)
class StepReport:
    """What one step did: the structured log line of the tick."""

    holder: str
    leader: bool
    token: int | None = None
    tick_id: str = ""
    rebuilt: bool = False
    caught_up: int = 0
    decisions: int = 0
    duration_ms: float = 0.0
    error: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        parts = [
            f"tick_id={self.tick_id or '-'}",
            f"holder={self.holder}",
            f"leader={int(self.leader)}",
            f"token={self.token}",
            f"rebuilt={int(self.rebuilt)}",
            f"caught_up={self.caught_up}",
            f"decisions={self.decisions}",
            f"duration_ms={self.duration_ms:.1f}",
        ]
        if self.error:
            parts.append(f"error={self.error!r}")
        return " ".join(parts)


def epoch(at: datetime) -> int:
    return int(at.timestamp())


def from_epoch(at_s: int) -> datetime:
    return datetime.fromtimestamp(at_s, tz=UTC)


def job_spec(job: Job) -> JobSpec:
    return JobSpec(
        id=str(job.pk),
        seq=job.pk,
        tenant=job.tenant.name,
        gpus=job.gpus,
        submit_s=epoch(job.submitted_at),
        gpus_per_node=job.gpus_per_node,
        gpu_type=job.gpu_type or None,
        priority=job.priority,
        max_runtime_s=job.max_runtime_s,
        checkpointable=job.checkpointable,
        checkpoint_interval_s=job.checkpoint_interval_s,
        checkpoint_time_s=job.checkpoint_time_s,
        restart_s=job.restart_s,
        preemptible=job.preemptible,
        interactive=job.interactive,
        min_gpus=job.min_gpus,
    )


class LeaderLoop:
    """The leader's state and its tick. Not thread-safe: one step at a time."""

    def __init__(
        self,
        *,
        holder: str,
        lease_name: str = LEADER_LEASE,
        ttl_s: int = 15,
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.holder = holder
        self.lease_name = lease_name
        self.ttl_s = ttl_s
        self.config = config or SchedulerConfig(usage_half_life_s=half_life_s())
        self.clock = clock
        self.scheduler: Scheduler | None = None
        self.token: int | None = None
        self.watermark = 0  # highest Transition seq folded into self.scheduler
        self.own_seqs: set[int] = set()  # rows above the watermark this leader wrote
        self.ticks = 0

    # ------------------------------------------------------------------ the step
    def step(self, now: datetime | None = None) -> StepReport:
        now = now or now_s()
        started = time.perf_counter()
        report = StepReport(holder=self.holder, leader=False)
        try:
            token = lease_acquire(
                name=self.lease_name, holder=self.holder, ttl_s=self.ttl_s, now=now,
                new_term=self.token is None,
            )
            if token is None:
                self.drop()
                return report
            report.leader, report.token = True, token
            if token != self.token:
                self.drop()  # someone else led in between: our state may be stale
                self.token = token
            self.ticks += 1
            report.tick_id = f"{token}.{self.ticks}"
            pending, report.rebuilt, report.caught_up = self.sync(now)
            sched = self.scheduler
            assert sched is not None
            result = sched.tick(epoch(now), clock=self.clock)
            decisions = pending + result.decisions
            report.stats = dict(result.stats)
            self.persist(decisions, tick_id=report.tick_id, now=now)
            report.decisions = len(decisions)
        except Exception as error:  # noqa: BLE001 - any failure: drop state, rebuild next step
            self.drop()
            report.error = f"{type(error).__name__}: {error}"
            log.warning("tick failed, state dropped: %s", report.error, exc_info=True)
        finally:
            report.duration_ms = (time.perf_counter() - started) * 1000
        return report

    def release(self) -> None:
        """Give the lease up (clean shutdown) so a standby takes over at once."""
        if self.token is not None:
            lease_release(name=self.lease_name, holder=self.holder, token=self.token)
        self.drop()
        self.token = None

    def drop(self) -> None:
        self.scheduler = None
        self.watermark = 0
        self.own_seqs.clear()

    def sync(self, now: datetime) -> tuple[list[Decision], bool, int]:
        """Bring the in-memory state up to the log: (decisions to persist, rebuilt, rows
        followed). Rebuilds when there is no state or the log cannot be followed."""
        if self.scheduler is not None:
            try:
                pending, followed = self.catch_up(now)
                return pending, False, followed
            except NeedRebuild as why:
                log.info("rebuilding: %s", why)
                self.drop()
        return self.build(now), True, 0

    # ------------------------------------------------------------------ build
    def build(self, now: datetime) -> list[Decision]:
        """Build the Scheduler from the database; returns decisions the build itself made
        (a job left PREEMPTED by a leader that died before requeueing it)."""
        now_i = epoch(now)
        with transaction.atomic():
            if connection.vendor == "postgresql":
                # no append commits while we read: the snapshot and the watermark agree
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOG_APPEND_LOCK_KEY])
            watermark = Transition.objects.aggregate(m=Max("id"))["m"] or 0
            nodes = [
                NodeSpec(
                    name=n.name,
                    pod=n.pod.name,
                    gpus=n.gpu_count,
                    gpu_type=n.gpu_type or None,
                    rail=n.rail,
                    health=NodeHealth(n.health),
                )
                for n in Node.objects.select_related("pod").order_by("name")
            ]
            tenants = [
                # usage accrued to now with the GPUs held since usage_at
                TenantSpec(t.name, t.guaranteed_gpus, t.borrow_limit_gpus, usage_at(t, now), now_i)
                for t in Tenant.objects.order_by("name")
            ]
            sched = Scheduler(nodes, tenants, self.config, now=now_i)
            jobs = list(
                Job.objects.exclude(state__in=[s.value for s in FINAL_STATES])
                .select_related("tenant")
                .order_by("id")
            )
            # open allocations belong to holding jobs only (replay --verify checks it)
            allocs: dict[int, dict[str, tuple[int, ...]]] = {}
            for job_id, node, indices in (
                Allocation.objects.filter(end__isnull=True)
                .order_by("job_id", "node__name")
                .values_list("job_id", "node__name", "gpu_indices")
            ):
                allocs.setdefault(job_id, {})[node] = tuple(sorted(indices))
            placed = last_move_at(S.PLACING)
            asked = last_preempt_requests()
        for job in jobs:
            request = asked.get(job.pk)
            self._restore(sched, job, allocs.get(job.pk), placed.get(job.pk),
                          epoch(request.at) if request else None)
        restore_claims(sched, asked)
        for job in jobs:
            if job.state == S.PREEMPTED:
                # the core always requeues a preempted job at once; finish what was cut off
                rec = sched.jobs[str(job.pk)]
                sched._move(rec, S.QUEUED, Reason.REQUEUED, now_i,
                            detail={"resume_pointer": rec.resume_pointer})
        self.scheduler = sched
        self.watermark = watermark
        self.own_seqs.clear()
        return sched.flush()

    def _restore(
        self,
        sched: Scheduler,
        job: Job,
        alloc: dict[str, tuple[int, ...]] | None,
        placed_at: int | None,
        asked_at: int | None,
    ) -> None:
        """Put one non-final job into the core as it stands in the database. Uses the
        core's record and index helpers directly: the core has no restore API, and going
        through the event methods would emit decisions that are already in the log."""
        spec = job_spec(job)
        state = JobState(job.state)
        rec = JobRecord(
            spec=spec,
            last_checkpoint_s=epoch(job.last_checkpoint_at) if job.last_checkpoint_at else None,
            resume_pointer=job.resume_pointer or None,
            preemption_times=[int(t) for t in job.preemption_times],
            retries=job.retry_count,
        )
        sched.jobs[spec.id] = rec
        if state == S.QUEUED:
            rec.state = state
            sched.queues.push(spec)
            return
        if state not in HOLDING_STATES:
            rec.state = state  # SUBMITTED or PREEMPTED: nothing held, not queued
            return
        if not alloc:
            raise NeedRebuild(f"job {job.pk} is {state} without an open allocation")
        now_i = sched.now
        sched._hold(rec, alloc, now_i)
        rec.state = state
        rec.run_id = 1
        rec.run_start_s = placed_at if placed_at is not None else now_i
        rec.confirmed_s = epoch(job.started_at) if job.started_at else None
        if state == S.PLACING:
            sched._arm(rec.run_start_s + sched.config.placing_timeout_s, "placing", spec.id, 1)
        if spec.max_runtime_s is not None:
            sched._arm(rec.run_start_s + spec.max_runtime_s, "limit", spec.id, 1)
        if state in (S.PREEMPT_REQUESTED, S.CHECKPOINTING):
            rec.preempt_id = 1
            rec.grace_deadline_s = (asked_at or now_i) + sched.grace_window(spec)
            sched._arm(rec.grace_deadline_s, "grace", spec.id, 1)
        sched._refresh_release(rec)

    # ------------------------------------------------------------------ catch up
    def catch_up(self, now: datetime) -> tuple[list[Decision], int]:
        """Fold the rows committed since the watermark that this leader did not write.
        Returns the follow-on decisions the core made (e.g. Requeued after an exit)."""
        sched = self.scheduler
        assert sched is not None
        rows = list(Transition.objects.filter(id__gt=self.watermark).order_by("id"))
        foreign = [r for r in rows if r.pk not in self.own_seqs]
        new_jobs = {
            j.pk: j
            for j in Job.objects.filter(
                pk__in={r.job_id for r in foreign if r.from_state == S.SUBMITTED}
            ).select_related("tenant")
        }
        pending: list[Decision] = []
        for row in foreign:
            pending.extend(self._follow(sched, row, new_jobs, epoch(now)))
        if rows:
            self.watermark = rows[-1].pk
        self.own_seqs = {seq for seq in self.own_seqs if seq > self.watermark}
        return pending, len(foreign)

    def _follow(
        self, sched: Scheduler, row: Transition, new_jobs: dict[int, Job], now: int
    ) -> list[Decision]:
        job_id = str(row.job_id)
        # the core's clock only moves forward, and never past the tick about to run: a row
        # stamped earlier (or by a skewed clock, later) is applied at the nearest instant
        at = max(sched.now, min(epoch(row.at), now))
        frm, to, reason = row.from_state, JobState(row.to_state), Reason(row.reason)
        if frm is None:
            return []  # the SUBMITTED row: the job joins the core when admitted
        if frm == S.SUBMITTED:
            if to == S.QUEUED:
                self._restore(sched, new_jobs[row.job_id], None, None, None)
            return []  # NeverFits: never entered the core
        rec = sched.jobs.get(job_id)
        if rec is None or rec.state != frm:
            raise NeedRebuild(f"log row #{row.pk}: job {job_id} is {rec and rec.state}, not {frm}")
        if to == S.CANCELLED:
            made = sched.cancel(job_id, at)
        elif reason == Reason.CHECKPOINTED:
            made = sched.report_checkpoint(job_id, at, row.detail.get("resume_pointer"))
        elif frm == S.PLACING and to == S.RUNNING:
            made = sched.confirm_start(job_id, at)
        elif frm == S.PREEMPT_REQUESTED and to == S.CHECKPOINTING:
            made = sched.ack_preempt(job_id, at)
        elif to == S.COMPLETED:
            made = sched.job_exited(job_id, at, "completed")
        elif to == S.FAILED and reason == Reason.EXIT_FAILED:
            made = sched.job_exited(job_id, at, "failed")
        elif to == S.PREEMPTED and frm in (S.PREEMPT_REQUESTED, S.CHECKPOINTING):
            made = sched.job_exited(job_id, at, "preempted")
        else:
            raise NeedRebuild(f"log row #{row.pk}: no event for {frm} -> {to} ({reason})")
        if not made or made[0].job_id != job_id or made[0].to_state != to:
            raise NeedRebuild(f"log row #{row.pk}: the core did not follow {frm} -> {to}")
        return made[1:]  # the first is the row itself, already in the log

    # ------------------------------------------------------------------ persist
    def persist(self, decisions: list[Decision], *, tick_id: str, now: datetime) -> None:
        """Write the decisions, fenced by the lease, all or nothing."""
        if not decisions:
            # still fence an empty tick: a stale leader must notice it lost the lease
            with transaction.atomic():
                lease_check(name=self.lease_name, holder=self.holder, token=self.token or 0,
                            now=now)
            return
        written: list[int] = []
        with transaction.atomic(durable=True):
            lease_check(name=self.lease_name, holder=self.holder, token=self.token or 0, now=now)
            for d in decisions:
                job = Job.objects.select_for_update().get(pk=int(d.job_id))
                if d.from_state is None or job.state != d.from_state:
                    raise Conflict(f"job {d.job_id} is {job.state}, the core moved it from "
                                   f"{d.from_state}")
                row = apply_locked(
                    job,
                    to_state=d.to_state,
                    reason=d.reason,
                    actor=Actor.SCHEDULER,
                    at=from_epoch(d.at_s),
                    detail=with_claim(self.scheduler, d),
                    alloc={n: list(ix) for n, ix in d.alloc.items()} if d.alloc else None,
                    tick_id=tick_id,
                    actor_name=self.holder,
                )
                written.append(row.pk)
        self.own_seqs.update(written)


def last_move_at(to_state: JobState) -> dict[int, int]:
    """Epoch seconds of each holding job's latest move into ``to_state`` (from another
    state): the run start (PLACING) and the preemption request of the current run."""
    holding = [s.value for s in HOLDING_STATES]
    rows = (
        Transition.objects.filter(job__state__in=holding, to_state=to_state.value)
        .exclude(from_state=to_state.value)
        .values("job_id")
        .annotate(at=Max("at"))
    )
    return {r["job_id"]: epoch(r["at"]) for r in rows}


def last_preempt_requests() -> dict[int, Transition]:
    """The PREEMPT_REQUESTED row of each job being preempted now (its latest)."""
    stopping = [S.PREEMPT_REQUESTED.value, S.CHECKPOINTING.value]
    rows = (
        Transition.objects.filter(job__state__in=stopping, to_state=S.PREEMPT_REQUESTED.value)
        .exclude(from_state=S.PREEMPT_REQUESTED.value)
        .order_by("job_id", "id")
    )
    return {row.job_id: row for row in rows}  # later rows overwrite earlier ones


def with_claim(sched: Scheduler | None, d: Decision) -> dict[str, Any]:
    """The row's detail. A preemption request also records the reclaim claim it serves
    (the nodes promised to the head, its GPUs, all its victims): the core keeps claims
    only in memory, and a rebuilt leader needs them to make the same decisions."""
    head = d.detail.get("for")
    if sched is None or d.reason != Reason.PREEMPT_REQUESTED or head not in sched.claims:
        return d.detail
    claim = sched.claims[head]
    return {
        **d.detail,
        "claim": {
            "nodes": sorted(claim.nodes),
            "gpus": claim.gpus,
            "victims": sorted(claim.victims),
            "at_s": claim.at_s,
        },
    }


def restore_claims(sched: Scheduler, asked: dict[int, Transition]) -> None:
    """Re-make the reclaim claims of waiting heads from their victims' request rows.

    Known gap: a claim whose victims have all stopped already, while its head still waits,
    is not restored (no row of a holding job names it); the head simply searches again.
    """
    claims: dict[str, ReclaimClaim] = {}
    for row in asked.values():
        head, saved = row.detail.get("for"), row.detail.get("claim")
        victim = sched.jobs[str(row.job_id)]
        victim.preempted_for = head
        head_rec = sched.jobs.get(str(head))
        if not saved or head_rec is None or head_rec.state != S.QUEUED or head in claims:
            continue
        claims[head] = ReclaimClaim(
            head_id=head,
            tenant=head_rec.spec.tenant,
            gpus=int(saved["gpus"]),
            nodes=frozenset(saved["nodes"]),
            victims=set(saved["victims"]),
            at_s=int(saved["at_s"]),
            why=str(row.detail.get("why", "")),
        )
    for head in sorted(claims, key=lambda h: sched.jobs[h].spec.seq):
        sched.add_claim(claims[head])


__all__ = ["Conflict", "LeaderLoop", "LeaseLost", "NeedRebuild", "StepReport"]
