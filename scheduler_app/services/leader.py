"""The production leader: the core ``Scheduler`` in memory, fed from and written to the log.

One :meth:`LeaderLoop.step` is one tick of the production path:

1. acquire or renew the leader lease (a standby returns at once);
2. mark down the nodes silent past ``SCHEDULER_HEARTBEAT_TIMEOUT_S`` (node rows in the log;
   nodes that never sent a heartbeat are exempt);
3. build the core's state from the database if it has none (first step, new token, or
   after any failure), else advance it from Transition rows committed since its watermark
   that it did not write itself, each mapped to the Scheduler's event method: job rows
   (submits, cancels, agent confirmations, exits, checkpoints), node rows
   (``node_down/up/drain/undrain``) and tenant rows (``set_quota``);
4. run ``Scheduler.tick(now, clock=...)``;
5. persist every Decision in ONE transaction that first checks the lease token
   (``lease_check``): a stale leader writes nothing. Then the log's append lock, then
   all the decisions at once through ``transitions.apply_moves_locked`` (the bulk form of
   ``apply_locked``, the composing form of ``job_transition``: the same rows and
   projection in a constant number of statements), which locks every touched job row
   and checks it still is in the state the core moved it from. The same transaction publishes
   what the tick learnt: the pending reasons and start estimates that changed
   (``Job.pending_reason``, ``estimate_start_at``, ``estimate_basis``), the tenants'
   fair-share order (``Tenant.share``, ``share_rank``) and, when the list changed, the
   core's current reservations (``Scheduler.reservations()``, the ``Reservation`` table).

:meth:`LeaderLoop.follow` is steps 1-3 and 5 without the tick: it folds new rows into the
core and persists the follow-on decisions at once (the db simulator calls it after every
event, as the memory engine applies every event at once).

Any failure (lost lease, a conflict with a concurrent write, a database error) rolls the
transaction back and drops the in-memory state: the next step rebuilds it from the
database, which is the truth.

The SQL it reads with (the log above the watermark, the new jobs' specs, the live rows of
the build) is in ``selectors/leader.py``; this module decides and writes.

Seq order vs commit order (DESIGN.md's trap): tailing the log by ``id > watermark`` is
safe only because every append takes ``pg_advisory_xact_lock(LOG_APPEND_LOCK_KEY)`` on
PostgreSQL until its transaction commits (SQLite has one writer), so a row with a lower
seq can never commit after a reader has seen a higher one. The build takes the same lock
so its snapshot and its watermark agree.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from scheduler_app.collector import FreezeAsItGrows, collector_paused
from scheduler_app.core.scheduler import (
    ReclaimClaim,
    ReservationView,
    Scheduler,
    StartEstimate,
    TickResult,
)
from scheduler_app.core.states import HOLDING_STATES, JobState, PendingReason, Reason
from scheduler_app.core.types import (
    TENANT_LIMITS,
    Actor,
    Decision,
    JobSpec,
    NodeHealth,
    NodeSpec,
    SchedulerConfig,
    TenantSpec,
)
from scheduler_app.models import Job, Node, Reservation, Tenant, Transition
from scheduler_app.observability import log_context
from scheduler_app.scheduler_config import published_settings, scheduler_config

# the reads, by module: a test swaps the fast reads for the ORM's there
from scheduler_app.selectors import leader as reads
from scheduler_app.selectors.leader import DEPENDS_AT, SPEC_COLUMNS, LogRow

from .bulk import update_from_values
from .cluster import node_move, nodes_mark_silent_down
from .errors import ServiceError
from .lease import LEADER_LEASE, LeaseLost, lease_acquire, lease_check, lease_release
from .transitions import (
    Move,
    StaleMove,
    append_lock,
    apply_locked,
    apply_moves_locked,
    now_s,
)

log = logging.getLogger("scheduler_app.leader")

S = JobState


class NeedRebuild(RuntimeError):
    """The log holds something the in-memory state cannot follow incrementally."""


#: A decision no longer matches the database (a concurrent write got there first).
Conflict = StaleMove


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
    #: nodes and jobs the state was built without (LeaderLoop.quarantined)
    quarantined: int = 0

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
        if self.quarantined:
            parts.append(f"quarantined={self.quarantined}")
        if self.error:
            parts.append(f"error={self.error!r}")
        return " ".join(parts)


def epoch(at: datetime) -> int:
    return int(at.timestamp())


def from_epoch(at_s: int) -> datetime:
    return datetime.fromtimestamp(at_s, tz=UTC)


class JobKeys:
    """How the leader names jobs in the core: the primary key as text, and the primary key
    as the total-order tie-break (``JobSpec.seq``). The db simulator names them by the
    scenario's ids and file order instead, so its core decides exactly as the memory
    engine's (the core breaks some ties by id)."""

    def core_id(self, pk: int) -> str:
        return str(pk)

    def pk(self, core_id: str) -> int:
        return int(core_id)

    def seq(self, pk: int) -> int:
        return pk


PK_KEYS = JobKeys()


def spec_of(values: tuple, keys: JobKeys = PK_KEYS) -> JobSpec:
    """The core's JobSpec from the values of ``selectors.leader.SPEC_COLUMNS``."""
    (pk, tenant, gpus, submitted_at, gpus_per_node, gpu_type, priority, max_runtime_s,
     checkpointable, checkpoint_interval_s, checkpoint_time_s, restart_s, preemptible,
     interactive, min_gpus, owner_id, depends_on, array_id, array_index, array_count,
     array_max_running) = values
    return JobSpec(
        id=keys.core_id(pk),
        seq=keys.seq(pk),
        tenant=tenant,
        gpus=gpus,
        submit_s=epoch(submitted_at),
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type or None,
        priority=priority,
        max_runtime_s=max_runtime_s,
        checkpointable=checkpointable,
        checkpoint_interval_s=checkpoint_interval_s,
        checkpoint_time_s=checkpoint_time_s,
        restart_s=restart_s,
        preemptible=preemptible,
        interactive=interactive,
        min_gpus=min_gpus,
        # the user's id: the per-user cap counts by identity, and names may change
        owner=None if owner_id is None else str(owner_id),
        # the awaited jobs by their core ids, in the order given at submit
        depends_on=tuple((keys.core_id(job), when) for job, when in depends_on)
        if depends_on else (),
        array_id=None if array_id is None else keys.core_id(array_id),
        array_index=array_index,
        array_count=array_count,
        array_max_running=array_max_running,
    )


def restore_awaited(sched: Scheduler, rows: Iterable[tuple], keys: JobKeys,
                    coming: Collection[int] = ()) -> None:
    """Make the core know every final job that the spec rows ``rows`` wait for: a job
    that ended before this leader's build (the build reads only the live jobs), or
    between a dependent's submit and its admission here. The core waits for a job it
    has never seen (it may be about to be submitted) and decides when it appears, so
    without this a dependent of a job that ended unseen would wait for ever. ``coming``:
    jobs about to join the core (the rest of the batch being followed), not asked for.
    One query, and only when some awaited job is unknown to the core."""
    missing = {job for row in rows for job, _when in (row[DEPENDS_AT] or ())
               if keys.core_id(job) not in sched.jobs} - set(coming)
    for row in reads.awaited_final_jobs(missing):
        # as it ended: what it waited for itself is over, and must not park it
        spec = dataclasses.replace(spec_of(row[:-1], keys), depends_on=())
        sched.restore_job(spec, JobState(row[-1]))


def published_plans(rows: list[tuple[Any, ...]], keys: JobKeys) -> list[ReservationView]:
    """The Reservation rows a leader published (position order) as the core's views, for
    ``Scheduler.restore_reservations``: a rebuilt leader keeps the promises made."""
    out = []
    for job_id, kind, start_at, gpus, nodes, basis, plan, _victims in rows:
        if kind != Reservation.Kind.RESERVATION or not plan or start_at is None:
            continue
        after = plan.get("after_job")
        out.append(ReservationView(
            keys.core_id(job_id), kind, epoch(start_at), tuple(nodes), basis, gpus=gpus,
            alloc={n: tuple(ix) for n, ix in plan["alloc"].items()},
            planned_at_s=plan.get("planned_at_s"),
            checked_at_s=plan.get("checked_at_s"),
            looked_sig=plan.get("looked_sig"),
            after_job=None if after is None else keys.core_id(after)))
    return out


#: A published value not known to this leader (after a rebuild every value is written).
_UNKNOWN: Any = object()

# the build's look-ups, by the state's text as it comes from the database
_STATE = len(SPEC_COLUMNS)  # index of the state in a build row
_STATES = {state.value: state for state in JobState}


def heartbeat_timeout_s() -> int:
    return int(getattr(settings, "SCHEDULER_HEARTBEAT_TIMEOUT_S", 30))


class LeaderLoop:
    """The leader's state and its tick. Not thread-safe: one step at a time.

    ``clock``: the tick's wall-time budget (``config.tick_budget_s``) reads it; None bounds
    the tick by work only (``config.tick_work_budget``), as the simulator needs.
    ``heartbeat_timeout_s``: None reads settings.SCHEDULER_HEARTBEAT_TIMEOUT_S; 0 disables.
    ``bulk_writes``: False writes the decisions one ``apply_locked`` at a time (about 14
    statements each), the reference for the tests of the bulk path.
    """

    def __init__(
        self,
        *,
        holder: str,
        lease_name: str = LEADER_LEASE,
        ttl_s: int = 15,
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] | None = time.perf_counter,
        keys: JobKeys = PK_KEYS,
        heartbeat_timeout_s: int | None = None,
        bulk_writes: bool = True,
    ) -> None:
        self.holder = holder
        self.lease_name = lease_name
        self.ttl_s = ttl_s
        self.config = config or scheduler_config()
        self.clock = clock
        self.keys = keys
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.bulk_writes = bulk_writes
        self.scheduler: Scheduler | None = None
        self.token: int | None = None
        self.watermark = 0  # highest Transition seq folded into self.scheduler
        self.own_seqs: set[int] = set()  # rows above the watermark this leader wrote
        # the state frozen at the build, and again each 10,000 jobs it gains (see step)
        self.freezer = FreezeAsItGrows(factor=1, slack=10_000)
        self.ticks = 0
        self.last_result: TickResult | None = None
        # what this leader last wrote to Job/Tenant rows: only changes are written again
        #: core id -> ((reason, the job in its way), estimate)
        self.published: dict[str, tuple[Any, Any]] = {}
        self.published_shares: dict[str, tuple[float | None, int]] = {}
        # the Reservation rows last written (None: unknown, write them at the next persist)
        self.published_reservations: list[dict[str, Any]] | None = None
        #: what the last build left out of the core ("node <name>" / "job <id>" -> why)
        self.quarantined: dict[str, str] = {}

    # ------------------------------------------------------------------ the step
    def step(self, now: datetime | None = None, *, tick: bool = True) -> StepReport:
        """One tick (``tick=False``: only follow the log and persist what that decided)."""
        now = now or now_s()
        started = time.perf_counter()
        report = StepReport(holder=self.holder, leader=False)
        self.last_result = None
        try:
            token = lease_acquire(
                name=self.lease_name, holder=self.holder, ttl_s=self.ttl_s, now=now,
                new_term=self.token is None, settings=published_settings(self.config),
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
            # every log line of the tick (rebuilding, conflicts, the core's) names it
            with log_context(tick_id=report.tick_id):
                self.mark_silent_nodes(now)
                pending, report.rebuilt, report.caught_up = self.sync(now)
                report.quarantined = len(self.quarantined)
                sched = self.scheduler
                assert sched is not None
                # a burst of submits grows the state by thousands of jobs a tick
                self.freezer.grown(len(sched.jobs))
                result = None
                if tick:
                    result = sched.tick(epoch(now), clock=self.clock)
                    report.stats = dict(result.stats)
                decisions = pending + (result.decisions if result else [])
                self.persist(decisions, tick_id=report.tick_id, now=now, result=result)
                self.last_result = result
                report.decisions = len(decisions)
        except Exception as error:  # noqa: BLE001 - any failure: drop state, rebuild next step
            self.drop()
            report.error = f"{type(error).__name__}: {error}"
            with log_context(tick_id=report.tick_id):
                log.warning("tick failed, state dropped: %s", report.error, exc_info=True)
        finally:
            report.duration_ms = (time.perf_counter() - started) * 1000
        return report

    def follow(self, now: datetime | None = None) -> StepReport:
        """Fold new log rows into the core and persist the follow-on decisions, no tick."""
        return self.step(now, tick=False)

    def release(self) -> None:
        """Give the lease up (clean shutdown) so a standby takes over at once."""
        if self.token is not None:
            lease_release(name=self.lease_name, holder=self.holder, token=self.token)
        self.drop()
        self.token = None

    def drop(self) -> None:
        if self.scheduler is not None:
            gc.unfreeze()  # the build froze it (see there): let the collector have it back
        self.scheduler = None
        self.watermark = 0
        self.own_seqs.clear()
        self.published.clear()
        self.published_shares.clear()
        self.published_reservations = None

    def mark_silent_nodes(self, now: datetime) -> list[Node]:
        """Node rows for the nodes whose agents went quiet; the sync below follows them.
        Not fenced by the token: any leader would mark the same silent nodes, and the
        move is refused for a node already down."""
        timeout = self.heartbeat_timeout_s
        if timeout is None:
            timeout = heartbeat_timeout_s()
        if timeout <= 0:
            return []
        return nodes_mark_silent_down(now=now, timeout_s=timeout, actor_name=self.holder)

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
        """Build the Scheduler from the database; returns decisions the build itself made:
        a job left PREEMPTED by a leader that died before requeueing it, and the jobs
        still holding GPUs on a node that is down (a leader died between the node row and
        its node-failure decisions)."""
        # the previous state's objects may be collected again (see the freeze in _build)
        gc.unfreeze()
        with collector_paused():  # half the build's time with 100,000 live jobs
            return self._build(now)

    def _build(self, now: datetime) -> list[Decision]:
        now_i = epoch(now)
        keys = self.keys
        snap = reads.build_snapshot()
        jobs, asked, watermark = snap.jobs, snap.asked, snap.watermark
        # open allocations belong to holding jobs only (replay --verify checks it)
        allocs: dict[int, dict[str, tuple[int, ...]]] = {}
        for job_id, node, indices in snap.allocations:
            allocs.setdefault(job_id, {})[node] = tuple(sorted(indices))
        # One bad row never stops the cluster: a node or a job the core cannot hold (a
        # node edited to fewer GPUs than its jobs hold, a GPU given twice) would make
        # every build, so every tick, fail. They are left out of the core, and their
        # nodes taken out of scheduling (drained, with the reason, in the log).
        bad_nodes, bad_jobs = screen_build(snap.nodes, jobs, allocs)
        nodes = [
            NodeSpec(name=name, pod=pod, gpus=gpus, gpu_type=gpu_type or None, rail=rail,
                     health=_core_health(health, quarantined=name in bad_nodes))
            for name, pod, gpus, gpu_type, rail, health, _free in snap.nodes
            if gpus > 0  # the core cannot hold a node without GPUs (screen_build says why)
        ]
        to_drain = sorted(node[0] for node in snap.nodes
                          if node[0] in bad_nodes and node[5] == NodeHealth.HEALTHY)
        tenants = [
            # usage as of usage_at: the core accrues it with the GPUs held since then, up
            # to each timer that fires before now, then to now (a timer due in between,
            # like a placing timeout, stops the accrual at its own instant)
            TenantSpec(t.name, t.guaranteed_gpus, t.borrow_limit_gpus, t.usage_gpu_s,
                       min(epoch(t.usage_at), now_i) if t.usage_at else now_i,
                       t.max_gpus_per_user, t.default_runtime_s, t.max_runtime_s)
            for t in snap.tenants
        ]
        sched = Scheduler(nodes, tenants, self.config, now=now_i)
        placed = {pk: epoch(at) for pk, at in snap.placed.items()}
        snap_plans = snap.reservations
        del snap
        restore = sched.restore_job
        live = {row[0] for row in jobs}
        restore_awaited(sched, (row for row in jobs if row[DEPENDS_AT]), keys, coming=live)
        for row in jobs:
            pk = row[0]
            if pk in bad_jobs:
                continue
            state = _STATES[row[_STATE]]
            started_at, last_checkpoint_at, resume_pointer, preemption_times, retries = (
                row[_STATE + 1:]
            )
            held = state in HOLDING_STATES
            alloc = allocs.get(pk)
            request = asked.get(pk)
            restore(
                spec_of(row[:_STATE], keys),
                state,
                alloc=alloc if held else None,
                run_start_s=placed.get(pk),
                confirmed_s=epoch(started_at) if started_at else None,
                last_checkpoint_s=epoch(last_checkpoint_at) if last_checkpoint_at else None,
                resume_pointer=resume_pointer or None,
                preemption_times=[int(t) for t in preemption_times],
                retries=retries,
                preempt_requested_s=epoch(request.at) if request else None,
                preempted_for=request.detail.get("for") if request else None,
            )
        restore_claims(sched, asked, snap_plans, keys)
        sched.restore_reservations(published_plans(snap_plans, keys))
        made: list[Decision] = []
        for row in jobs:
            if row[_STATE] == S.PREEMPTED and row[0] not in bad_jobs:
                # the core always requeues a preempted job at once; finish what was cut off
                made += sched.requeue_preempted(keys.core_id(row[0]), now_i)
        for name in sorted(sched.unhealthy):
            if sched.cap.nodes[name].health == NodeHealth.DOWN and sched.node_jobs[name]:
                made += sched.node_down(name, now_i)
        del jobs, allocs
        # The core's state lives as long as this leader: out of the collector's sight, a
        # full collection in a later tick does not walk its hundreds of thousands of
        # objects (the next build unfreezes them, so a dropped state can be collected).
        self.freezer.freeze(len(sched.jobs))
        self.scheduler = sched
        self.watermark = watermark
        self.own_seqs.clear()
        self._quarantine(bad_nodes, bad_jobs, to_drain, now)
        return made + sched.flush()

    def _quarantine(self, bad_nodes: dict[str, str], bad_jobs: dict[int, str],
                    to_drain: list[str], now: datetime) -> None:
        """Log what the build left out, and drain the healthy nodes among them through
        the service (a node row, actor ``scheduler``, the reason in its ``why``: the API's
        node events, the dashboard's feed). The core has them draining already; the row
        is this leader's own, so the catch-up does not apply it again. Not fenced by the
        token, as the silent nodes are not: any leader would drain the same nodes."""
        self.quarantined = {**{f"node {n}": why for n, why in bad_nodes.items()},
                            **{f"job {pk}": why for pk, why in bad_jobs.items()}}
        for what, why in sorted(self.quarantined.items()):
            log.warning("left out of scheduling: %s: %s", what, why,
                        extra={"quarantined": what, "why": why})
        named = reads.nodes_named(to_drain)
        for name in to_drain:
            try:
                row = node_move(
                    node=named[name], action="drain", actor=Actor.SCHEDULER,
                    actor_name=self.holder, at=now,
                    why=f"taken out of scheduling by the scheduler: {bad_nodes[name]}; fix "
                        "it (re-register the node's agent), then undrain it",
                )
            except (ServiceError, KeyError):  # changed meanwhile: the catch-up follows it
                log.info("node %s: not drained, its health changed since the build", name)
                continue
            self.own_seqs.add(row.pk)

    # ------------------------------------------------------------------ catch up
    def catch_up(self, now: datetime) -> tuple[list[Decision], int]:
        """Fold the rows committed since the watermark that this leader did not write.
        Returns the follow-on decisions the core made (e.g. Requeued after an exit, the
        node-failure moves after a node row)."""
        sched = self.scheduler
        assert sched is not None
        # tuples, not model instances: a burst of submits is thousands of rows a tick
        rows = reads.log_rows_since(self.watermark)
        own = self.own_seqs
        foreign = [r for r in rows if r.pk not in own]
        new_jobs = reads.job_specs({r.job_id for r in foreign if r.kind == Transition.Kind.JOB
                                    and r.from_state == S.SUBMITTED})
        names = {
            Transition.Kind.NODE: reads.node_names({r.node_id for r in foreign if r.node_id}),
            Transition.Kind.TENANT: reads.tenant_names(
                {r.tenant_id for r in foreign if r.tenant_id}),
        }
        pending: list[Decision] = []
        now_i = epoch(now)
        restore_awaited(sched, (v for v in new_jobs.values() if v[DEPENDS_AT]), self.keys,
                        coming=new_jobs.keys())
        for row in foreign:
            if row.kind == Transition.Kind.NODE:
                pending.extend(self._follow_node(sched, row, names[row.kind][row.node_id], now_i))
            elif row.kind == Transition.Kind.TENANT:
                name = names[row.kind][row.tenant_id]
                pending.extend(self._follow_tenant(sched, row, name, now_i))
            else:
                self.published.pop(self.keys.core_id(row.job_id), None)
                pending.extend(self._follow(sched, row, new_jobs, now_i))
        if rows:
            self.watermark = rows[-1].pk
        self.own_seqs = {seq for seq in self.own_seqs if seq > self.watermark}
        return pending, len(foreign)

    @staticmethod
    def _at(sched: Scheduler, row: LogRow, now: int) -> int:
        # the core's clock only moves forward, and never past the tick about to run: a row
        # stamped earlier (or by a skewed clock, later) is applied at the nearest instant
        return max(sched.now, min(epoch(row.at), now))

    def _follow(
        self, sched: Scheduler, row: LogRow, new_jobs: dict[int, tuple], now: int
    ) -> list[Decision]:
        job_id = self.keys.core_id(row.job_id)
        at = self._at(sched, row, now)
        frm, to, reason = row.from_state, JobState(row.to_state), Reason(row.reason)
        if frm is None:
            return []  # the SUBMITTED row: the job joins the core when admitted
        if frm == S.SUBMITTED:
            if to == S.QUEUED:
                return self._follow_admission(sched, new_jobs[row.job_id], at)
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

    def _follow_admission(self, sched: Scheduler, values: tuple, at: int) -> list[Decision]:
        """A job the services admitted (``values``: its :data:`SPEC_COLUMNS`) enters the
        core through ``submit``, as the memory engine's jobs do (same counters, same
        admission check)."""
        spec = spec_of(values, self.keys)
        pk = values[0]
        if spec.tenant not in sched.tenants:
            raise NeedRebuild(f"job {pk}: tenant {spec.tenant} is new")
        made = sched.submit(spec, at)
        states = [d.to_state for d in made]
        if states == [S.SUBMITTED, S.QUEUED]:
            return []  # both rows are in the log already
        if (states == [S.SUBMITTED, S.QUEUED, S.CANCELLED]
                and made[-1].reason == Reason.DEPENDENCY_NEVER_SATISFIED):
            # a dependency that had already ended as it never may (afterok on a cancelled
            # job): the core cancels it at admission, and that move is the leader's to
            # write. It was taken for a divergence: a rebuild of the whole state, which
            # loses the reclaim claims whose victims have stopped (found live, 2026-12-07)
            return made[2:]
        if states == [S.SUBMITTED, S.FAILED]:
            # the core refuses what the services admitted (it also counts the interactive
            # slice): the job leaves the queue it is in, with the core's reason
            refused = made[-1]
            return [Decision(spec.id, S.QUEUED, S.FAILED, refused.reason, at,
                             detail=refused.detail)]
        raise NeedRebuild(f"job {pk}: the core admitted it as {states}")

    def _follow_node(self, sched: Scheduler, row: LogRow, name: str, now: int
                     ) -> list[Decision]:
        if row.detail.get("action") == "register" or name not in sched.cap.nodes:
            raise NeedRebuild(f"log row #{row.pk}: node {name} registered or changed shape")
        if f"node {name}" in self.quarantined and row.to_state != NodeHealth.DOWN:
            # back in scheduling: the build checks again what made the node unusable
            raise NeedRebuild(f"log row #{row.pk}: node {name} was left out of scheduling")
        at = self._at(sched, row, now)
        to = NodeHealth(row.to_state)
        if to == NodeHealth.DOWN:
            return sched.node_down(name, at)
        if to == NodeHealth.DRAINING:
            return sched.node_drain(name, at)
        if row.from_state == NodeHealth.DRAINING:
            return sched.node_undrain(name, at)
        return sched.node_up(name, at)

    def _follow_tenant(self, sched: Scheduler, row: LogRow, name: str, now: int
                       ) -> list[Decision]:
        after = row.detail.get("after") or {}
        if name not in sched.tenants or "guaranteed_gpus" not in after:
            raise NeedRebuild(f"log row #{row.pk}: tenant {name} is new or the row is unreadable")
        # a limit not in the row is not set (services.cluster logs only the set ones)
        return sched.set_quota(name, int(after["guaranteed_gpus"]),
                               int(after.get("borrow_limit_gpus", 0)), self._at(sched, row, now),
                               limits={key: after.get(key) for key in TENANT_LIMITS})

    # ------------------------------------------------------------------ persist
    def persist(
        self,
        decisions: list[Decision],
        *,
        tick_id: str,
        now: datetime,
        result: TickResult | None = None,
    ) -> None:
        """Write the decisions (and what ``result`` learnt), fenced by the lease, all or
        nothing."""
        for d in decisions:
            # a move resets the row's pending reason and estimate: write them again
            self.published.pop(d.job_id, None)
        published = self._publishable(result)
        reservations = self._reservations()
        if reservations == self.published_reservations:
            reservations = None  # unchanged: leave the table as it is
        if not decisions and not any(published) and reservations is None:
            # still fence an empty tick: a stale leader must notice it lost the lease
            with transaction.atomic():
                lease_check(name=self.lease_name, holder=self.holder, token=self.token or 0,
                            now=now)
            return
        written: list[int] = []
        with transaction.atomic(durable=True):
            lease_check(name=self.lease_name, holder=self.holder, token=self.token or 0, now=now)
            # the log's append lock right after the lease's row lock and before any job,
            # node or tenant row lock, as every writer takes them (services, agents,
            # cluster): one order everywhere, so no deadlock
            with append_lock():
                self._write_decisions(decisions, tick_id=tick_id, written=written)
                self._publish(published[1], published[2], now=now)
                if reservations is not None:
                    self._publish_reservations(reservations, tick_id=tick_id, now=now)
        self.own_seqs.update(written)
        if reservations is not None:
            self.published_reservations = reservations
        jobs, shares = published[0], published[2]
        self.published.update(jobs)
        self.published_shares.update(shares)

    def _publishable(self, result: TickResult | None) -> tuple[
        dict[str, tuple[Any, Any]], dict[str, dict[str, Any]], dict[str, tuple[float | None, int]]
    ]:
        """What changed since this leader last wrote it: (new job values by core id,
        the Job fields to write by core id, the tenants' (share, rank) by name)."""
        sched = self.scheduler
        if result is None or sched is None:
            return {}, {}, {}
        values: dict[str, tuple[Any, Any]] = {}
        fields: dict[str, dict[str, Any]] = {}
        for job_id in {*result.pending_reasons, *result.start_estimates}:
            rec = sched.jobs.get(job_id)
            if rec is None or rec.state != S.QUEUED:
                continue  # it started (or left) in this tick: the decision says so
            old_reason, old_est = self.published.get(job_id, (_UNKNOWN, _UNKNOWN))
            reason = old_reason
            if job_id in result.pending_reasons:  # (the reason, the job in its way)
                said = result.pending_reasons[job_id]
                reason = (said, result.blockers.get(job_id)
                          if said == PendingReason.RESERVATION else None)
            est = result.start_estimates.get(job_id, old_est)
            changed: dict[str, Any] = {}
            if reason is not _UNKNOWN and reason != old_reason:
                changed["pending_reason"] = reason
            if est is not _UNKNOWN and est != old_est:
                changed["estimate"] = est
            if changed:
                values[job_id] = (reason, est)
                fields[job_id] = changed
        shares: dict[str, tuple[float | None, int]] = {}
        keys = sched.share_keys
        if keys:
            ranks = {key: i + 1 for i, key in enumerate(sorted(set(keys.values())))}
            for name, key in keys.items():
                share = key[1] if key[0] == 0 else None  # None: infinite (no guarantee)
                value = (share, ranks[key])
                if self.published_shares.get(name) != value:
                    shares[name] = value
        return values, fields, shares

    def _write_decisions(self, decisions: list[Decision], *, tick_id: str,
                         written: list[int]) -> None:
        """The decisions' rows and projection in a constant number of statements
        (``apply_moves_locked``), or one ``apply_locked`` each (``bulk_writes`` False: the
        reference the bulk path is tested against)."""
        if not self.bulk_writes:
            self._write_decisions_one_by_one(decisions, tick_id=tick_id, written=written)
            return
        sched, keys = self.scheduler, self.keys
        moves = [
            Move(
                job_id=keys.pk(d.job_id),
                from_state=d.from_state,
                to_state=d.to_state,
                reason=d.reason,
                at=from_epoch(d.at_s),
                detail=with_claim(sched, d),
                alloc={n: list(ix) for n, ix in d.alloc.items()} if d.alloc else None,
            )
            for d in decisions
        ]
        rows = apply_moves_locked(moves, actor=Actor.SCHEDULER, actor_name=self.holder,
                                  tick_id=tick_id)
        written.extend(row.pk for row in rows)

    def _write_decisions_one_by_one(self, decisions: list[Decision], *, tick_id: str,
                                    written: list[int]) -> None:
        for d in decisions:
            job = Job.objects.select_for_update().get(pk=self.keys.pk(d.job_id))
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

    def _reservations(self) -> list[dict[str, Any]] | None:
        """The core's reservations as Reservation rows (without the tick's stamp), in its
        order; None without a core."""
        sched = self.scheduler
        if sched is None:
            return None
        rows = []
        for position, view in enumerate(sched.reservations()):
            gpus = view.gpus
            rows.append({
                "position": position,
                "job_id": self.keys.pk(view.job_id),
                "kind": view.kind,
                "start_at": None if view.start_s is None else from_epoch(view.start_s),
                "gpus": gpus,
                "nodes": list(view.nodes),
                "victims": [self.keys.pk(v) for v in view.victims],
                "basis": view.basis,
                # a claim's plan is when it was made: a rebuilt leader restores the claim
                # from this row (restore_claims) once its victims have all stopped
                "plan": {"at_s": view.at_s} if view.kind == "reclaim" else
                {} if view.alloc is None else {
                    "alloc": {n: list(ix) for n, ix in sorted(view.alloc.items())},
                    "planned_at_s": view.planned_at_s,
                    "checked_at_s": view.checked_at_s,
                    "looked_sig": view.looked_sig,
                    "after_job": (None if view.after_job is None
                                  else self.keys.pk(view.after_job)),
                },
            })
        return rows

    @staticmethod
    def _publish_reservations(rows: list[dict[str, Any]], *, tick_id: str,
                              now: datetime) -> None:
        """Replace the Reservation table by ``rows`` (inside the fenced transaction)."""
        Reservation.objects.all().delete()
        Reservation.objects.bulk_create(
            Reservation(**row, tick_id=tick_id, published_at=now) for row in rows
        )

    def _publish(
        self,
        fields: dict[str, dict[str, Any]],
        shares: dict[str, tuple[float | None, int]],
        *,
        now: datetime,
    ) -> None:
        """Write the changed values, in three UPDATEs whatever their number; only jobs
        still QUEUED are touched (a cancel may have landed since the tick)."""
        reasons: list[tuple[int, str, int | None]] = []
        estimates: list[tuple[int, datetime | None, str, str]] = []
        for job_id, changed in fields.items():
            pk = self.keys.pk(job_id)
            if "pending_reason" in changed:
                said, blocker = changed["pending_reason"]
                reasons.append((pk, str(said),
                                None if blocker is None else self.keys.pk(blocker)))
            if "estimate" in changed:
                est: StartEstimate | None = changed["estimate"]
                estimates.append((pk, None, "", "") if est is None else
                                 (pk, from_epoch(est.start_s), est.basis, est.kind))
        queued = {"state": S.QUEUED.value}
        update_from_values(Job, ["pending_reason", "pending_blocker"], sorted(reasons),
                           where=queued)
        update_from_values(Job, ["estimate_start_at", "estimate_basis", "estimate_kind"],
                           sorted(estimates), where=queued)
        update_from_values(Tenant, ["share", "share_rank", "share_at"], [
            (name, share, rank, now) for name, (share, rank) in sorted(shares.items())
        ], key="name")



def screen_build(
    nodes: list[tuple[str, str, int, str, int, str, int]],
    jobs: list[tuple],
    allocs: dict[int, dict[str, tuple[int, ...]]],
) -> tuple[dict[str, str], dict[int, str]]:
    """What the core cannot be built with, and why: (node name -> why, job id -> why).

    A node the core cannot hold (no GPUs; a health it does not know). A holding job whose
    open allocation is missing, names a node left out, a GPU index the node does not
    have, the same GPU twice, or a GPU an earlier job (by id) holds already: the core's
    ``restore_job`` would refuse it half way, so it is left out, and every node it holds
    GPUs on is taken out of scheduling (its GPUs are not known to be free). Last, a node
    whose free GPUs (``Node.free_gpus``, what the writes check) are not its GPUs less
    those its jobs hold: the core would place on GPUs the tables say are taken, and every
    tick's writes would be refused. ``nodes`` and ``jobs`` are the build snapshot's rows.
    """
    bad_nodes: dict[str, str] = {}
    size: dict[str, int] = {}
    for name, _pod, gpus, _type, _rail, health, _free in nodes:
        if gpus <= 0:
            bad_nodes[name] = f"it has {gpus} GPUs"
        elif health not in _HEALTHS:
            bad_nodes[name] = f"its health {health!r} is none of {', '.join(sorted(_HEALTHS))}"
        if gpus > 0:
            size[name] = gpus
    bad_jobs: dict[int, str] = {}
    used: dict[str, int] = {}
    for row in jobs:
        pk, state = row[0], row[_STATE]
        if state not in _HOLDING:
            continue
        alloc = allocs.get(pk)
        if not alloc:
            bad_jobs[pk] = f"it is {state} without an open allocation"
            continue
        why = _allocation_problem(pk, alloc, size, used)
        if why is None:
            for node, indices in alloc.items():
                used[node] = used.get(node, 0) | sum(1 << i for i in indices)
            continue
        bad_jobs[pk] = why
        for node in alloc:
            bad_nodes.setdefault(node, why)
    for name, _pod, gpus, _type, _rail, _health, free in nodes:
        held = used.get(name, 0).bit_count()
        if name not in bad_nodes and gpus - held != free:
            bad_nodes[name] = (f"the tables give it {free} free GPUs, but of its {gpus} GPUs "
                               f"its jobs hold {held}")
    return bad_nodes, bad_jobs


def _allocation_problem(pk: int, alloc: dict[str, tuple[int, ...]], size: dict[str, int],
                        used: dict[str, int]) -> str | None:
    for node, indices in sorted(alloc.items()):
        gpus = size.get(node)
        if gpus is None:
            return f"job {pk} holds GPUs on node {node}, which the scheduler cannot use"
        wrong = [i for i in indices if not 0 <= i < gpus]
        if wrong:
            return (f"job {pk} holds GPU {', '.join(map(str, wrong))} on node {node}, but the "
                    f"node has {gpus} GPUs (0-{gpus - 1})")
        if len(set(indices)) != len(indices):
            return f"job {pk} holds the same GPU twice on node {node}: {list(indices)}"
        taken = [i for i in indices if used.get(node, 0) >> i & 1]
        if taken:
            return (f"job {pk} holds GPU {', '.join(map(str, taken))} on node {node}, which "
                    "another job holds already")
    return None


_HEALTHS = frozenset(h.value for h in NodeHealth)
_HOLDING = frozenset(state.value for state in HOLDING_STATES)


def _core_health(health: str, *, quarantined: bool) -> NodeHealth:
    """The health the core builds a node with: a node left out of scheduling is draining
    (keeps what runs there, takes nothing new) unless it is down."""
    if health == NodeHealth.DOWN:
        return NodeHealth.DOWN
    if quarantined or health not in _HEALTHS:
        return NodeHealth.DRAINING
    return NodeHealth(health)


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


def restore_claims(sched: Scheduler, asked: dict[int, Transition],
                   published: list[tuple[Any, ...]], keys: JobKeys) -> None:
    """Re-make the reclaim claims of waiting heads: from their victims' request rows (each
    victim already knows its head: ``restore_job(preempted_for=...)``), then from the
    claims the last tick published (``Reservation`` rows of kind reclaim), for a head
    whose victims have all stopped while it still waits: no row of a holding job names
    that claim, and without it the GPUs its victims freed would be anyone's, the victims'
    own included, and the head would preempt again for them."""
    claims: dict[str, ReclaimClaim] = {}
    for row in asked.values():
        head, saved = row.detail.get("for"), row.detail.get("claim")
        if not saved or head in claims or not _waits(sched, head):
            continue
        try:
            claims[head] = ReclaimClaim(
                head_id=head,
                tenant=sched.jobs[head].spec.tenant,
                gpus=int(saved["gpus"]),
                nodes=frozenset(saved["nodes"]),
                victims=set(saved["victims"]),
                at_s=int(saved["at_s"]),
                why=str(row.detail.get("why", "")),
            )
        except (KeyError, TypeError, ValueError):  # an unreadable claim: it searches again
            log.warning("log row #%s: unreadable reclaim claim, not restored", row.pk)
    for job_id, kind, _start_at, gpus, nodes, basis, plan, victims in published:
        head = keys.core_id(job_id)
        if kind != Reservation.Kind.RECLAIM or head in claims or not _waits(sched, head):
            continue
        try:
            claims[head] = ReclaimClaim(
                head_id=head,
                tenant=sched.jobs[head].spec.tenant,
                gpus=int(gpus),
                nodes=frozenset(nodes),
                victims={keys.core_id(v) for v in victims},
                # (a row published before claims carried their instant: now)
                at_s=int(plan.get("at_s") or sched.now),
                why=basis,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("job %s: unreadable published reclaim claim, not restored", head)
    for head in sorted(claims, key=lambda h: sched.jobs[h].spec.seq):
        try:
            sched.add_claim(claims[head])
        except (KeyError, ValueError):  # (a node left out, say): the head searches again
            log.warning("job %s: reclaim claim not restored", head, exc_info=True)


def _waits(sched: Scheduler, head: object) -> bool:
    rec = sched.jobs.get(str(head))
    return rec is not None and rec.state == S.QUEUED


__all__ = [
    "PK_KEYS",
    "Conflict",
    "JobKeys",
    "LeaderLoop",
    "LeaseLost",
    "NeedRebuild",
    "StepReport",
]
