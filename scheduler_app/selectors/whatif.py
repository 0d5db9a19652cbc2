"""The live state a what-if starts from (``sim.whatif.Snapshot``), read in ONE read-only
transaction: on PostgreSQL ``REPEATABLE READ, READ ONLY`` (one consistent view, and the
server refuses any write); on SQLite a deferred read transaction with ``query_only`` on
(WAL gives the reader one view while the leader writes; a plain ``atomic()`` would take
the write lock at BEGIN, ``transaction_mode`` IMMEDIATE, and stall the leader).

The jobs and allocations are read with the leader's own selects (``selectors.leader``),
the fast binary ones on PostgreSQL: a what-if of 100,000 live jobs reads what a leader's
rebuild reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from scheduler_app.core.fairshare import accrue
from scheduler_app.core.states import HOLDING_STATES, JobState
from scheduler_app.core.types import SETTINGS, SchedulerConfig
from scheduler_app.models import Job, Lease, Node, Reservation, Tenant
from scheduler_app.scheduler_config import from_published, scheduler_config
from scheduler_app.services.lease import LEADER_LEASE
from scheduler_app.sim.whatif import (
    ClaimSnap,
    JobSnap,
    NodeSnap,
    ReservationSnap,
    Snapshot,
    TenantSnap,
    settings_of,
)

from .leader import (
    SPEC_COLUMNS,
    last_move_at,
    last_preempt_requests,
    live_job_rows,
    open_allocations,
)

S = JobState
#: these hold GPUs on their way out: carried holding them, with their preemption request
_LEAVING = frozenset({S.PREEMPT_REQUESTED.value, S.CHECKPOINTING.value})
_HOLDING = frozenset(s.value for s in HOLDING_STATES)


@contextmanager
def read_only() -> Iterator[None]:
    """One read-only transaction on the default database (see the module docstring)."""
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
        return
    if connection.vendor != "sqlite":
        with transaction.atomic():
            yield
        return
    if connection.in_atomic_block:
        raise RuntimeError("the what-if snapshot must not be read inside a transaction")
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA query_only = ON")
        cursor.execute("BEGIN DEFERRED")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK")
            cursor.execute("PRAGMA query_only = OFF")


def live_snapshot(now: datetime | None = None, *, about: Iterable[str] = ()) -> Snapshot:
    """The live state as of ``now`` (default: the clock), every instant made relative to
    it (seconds, <= 0). ``about``: job references (``--cancel``'s values: a job's id, a
    task's ``<array>_<index>``) to look up among the jobs that have ended
    (``Snapshot.ended``), so that a what-if can say so."""
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    now_s = int(now.timestamp())
    with read_only():
        config, settings_from, settings_notes = _scheduler_settings()
        nodes = list(Node.objects.order_by("name").values_list(
            "name", "pod__name", "gpu_count", "gpu_type", "rail", "health"))
        tenants = list(Tenant.objects.order_by("name").values_list(
            "name", "guaranteed_gpus", "borrow_limit_gpus", "usage_gpu_s", "usage_at",
            "held_gpus", "max_gpus_per_user", "default_runtime_s", "max_runtime_s"))
        rows = live_job_rows()
        allocations = open_allocations()
        state_at = len(SPEC_COLUMNS)
        ended = _ended(about, {r[0] for r in rows})
        # the run's start as the core counts it: its placement (QUEUED -> PLACING), which
        # its time limit runs from, not the agent's confirmation (started_at) that comes
        # seconds later (a job confirmed 30 s after its placement was planned to end, and
        # its dependents to start, 30 s after the leader failed it at its limit)
        holding = [r[0] for r in rows if r[state_at] in _HOLDING]
        placed = last_move_at(S.PLACING, holding) if holding else {}
        # what the leader's rebuild restores besides the jobs (services/leader.py): the
        # preemption requests under way (when, for whom, the claim) and its reservations
        asked = last_preempt_requests([r[0] for r in rows if r[state_at] in _LEAVING])
        plans = list(Reservation.objects.filter(kind=Reservation.Kind.RESERVATION)
                     .order_by("position")
                     .values_list("job_id", "start_at", "nodes", "basis", "plan"))
    allocs: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for job_id, node, indices in allocations:
        allocs.setdefault(job_id, []).append((node, tuple(sorted(indices))))

    def rel(at: datetime | None) -> int | None:
        return None if at is None else min(0, int(at.timestamp()) - now_s)

    jobs: list[JobSnap] = []
    live_ids = {row[0] for row in rows}
    live_names = {str(pk) for pk in live_ids}
    for row in rows:
        (pk, tenant, gpus, submitted_at, gpus_per_node, gpu_type, priority, max_runtime_s,
         checkpointable, checkpoint_interval_s, checkpoint_time_s, restart_s, preemptible,
         interactive, min_gpus, owner, depends_on, array_id, array_index, array_count,
         array_max_running) = row[:state_at]
        state, started_at, last_checkpoint_at, _pointer, preemption_times, _retries = (
            row[state_at:])
        running = state in _HOLDING and pk in allocs
        request = asked.get(pk) if running and state in _LEAVING else None
        head = None if request is None else request.detail.get("for")
        start = None
        if running:
            at = placed.get(pk, started_at)
            start = rel(at) if at is not None else 0
        jobs.append(JobSnap(
            id=str(pk), tenant=tenant, running=running, submit_s=rel(submitted_at) or 0,
            gpus=gpus, gpus_per_node=gpus_per_node, gpu_type=gpu_type or None,
            priority=priority, max_runtime_s=max_runtime_s, checkpointable=checkpointable,
            checkpoint_interval_s=checkpoint_interval_s, checkpoint_time_s=checkpoint_time_s,
            restart_s=restart_s, preemptible=preemptible, interactive=interactive,
            min_gpus=min_gpus,
            preemption_times_s=tuple(sorted(min(0, int(t) - now_s)
                                            for t in preemption_times or ())),
            started_s=start, alloc=tuple(allocs.get(pk, ())) if running else (),
            last_checkpoint_s=rel(last_checkpoint_at) if running else None,
            # a scenario's owner is a name: the user's id makes one per user
            owner=None if owner is None else f"user-{owner}",
            depends_on=tuple((str(a), when) for a, when in depends_on or ()
                             if a in live_ids),
            array=None if array_id is None else (str(array_id), array_index, array_count,
                                                 array_max_running),
            preempt_requested_s=(None if not running or state not in _LEAVING
                                 else rel(request.at) if request is not None else 0),
            preempted_for=None if head is None or str(head) not in live_names else str(head),
            checkpointing=running and state == S.CHECKPOINTING.value,
        ))
    half_life = config.usage_half_life_s
    return Snapshot(
        taken_at=now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        nodes=tuple(NodeSnap(name, pod, gpus, gpu_type or None, rail, health)
                    for name, pod, gpus, gpu_type, rail, health in nodes if gpus > 0),
        tenants=tuple(
            # the usage as of usage_at, decayed (and accrued with the GPUs held since) to
            # the snapshot, as the core's fair share would see it now
            TenantSnap(name, guaranteed, borrow,
                       accrue(usage, held, now_s - int(usage_at.timestamp()), half_life)
                       if usage_at is not None else usage, *limits)
            for name, guaranteed, borrow, usage, usage_at, held, *limits in tenants),
        jobs=tuple(jobs),
        settings=settings_of(config),
        settings_from=settings_from,
        settings_notes=settings_notes,
        read_s=time.perf_counter() - started,
        reservations=tuple(_reservations(plans, now_s, jobs)),
        claims=tuple(_claims(asked, now_s, jobs)),
        ended=ended,
    )


def _scheduler_settings() -> tuple[SchedulerConfig, str, tuple[str, ...]]:
    """The settings the live scheduler runs with, as its leader published them with its
    lease (``services.lease``), where it did; else this process's (its ``SCHEDULER_*``
    environment). With the sentence that says which, and a warning for each setting this
    process would have read otherwise: a what-if run from an operator's shell, the web
    process or a worker used that process's settings, which need not be the scheduler's,
    and did not say so (an operator's session, 2026-12-07)."""
    here = scheduler_config()
    row = Lease.objects.filter(name=LEADER_LEASE).values_list(
        "holder", "settings", "expires_at").first()
    if row is None or not row[1]:
        return here, ("this process's SCHEDULER_* environment (no scheduler has published "
                      "its settings)"), ()
    holder, published, expires_at = row
    try:
        config = from_published(published)
    except (TypeError, ValueError, AttributeError) as exc:  # (not a mapping, a bad value)
        return here, (f"this process's SCHEDULER_* environment (the scheduler's published "
                      f"settings could not be read: {exc})"), ()
    live = holder and expires_at is not None and expires_at > datetime.now(UTC)
    whose = (f"the scheduler's, as its leader {holder} published them" if live else
             "the scheduler's, as its last leader published them (no leader holds the "
             "lease now)")
    notes = tuple(
        f"this process reads {s.name}={_value(getattr(here, s.name))} from its "
        f"SCHEDULER_* environment; the scheduler runs with "
        f"{_value(getattr(config, s.name))}, which the runs use"
        for s in SETTINGS if getattr(here, s.name) != getattr(config, s.name))
    if not live:
        # (the settings line alone said so, and the table read as a forecast of a
        # cluster whose queue was not moving at all: an operator's session, 2026-12-07)
        notes = ("no scheduler is running (no leader holds the lease): the live queue "
                 "does not move until one starts; both runs play the cluster forward as "
                 "a running scheduler would", *notes)
    return config, whose, notes


def _value(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _ended(about: Iterable[str], live: set[int]) -> dict[str, tuple[str, str]]:
    """Of the references ``about`` (a job's id, a task's ``<array>_<index>``), those that
    name a job that is not live: reference -> (job id, its final state)."""
    ids: dict[str, int] = {}
    tasks: dict[str, tuple[int, int]] = {}
    for ref in about:
        if ref.isascii() and ref.isdigit():
            ids[ref] = int(ref)
        elif ref.isascii() and ref.count("_") == 1:
            array, index = ref.split("_")
            if array.isdigit() and index.isdigit():  # not "8_" nor "_3": no job's name
                tasks[ref] = (int(array), int(index))
    out: dict[str, tuple[str, str]] = {}
    if ids:
        states = dict(Job.objects.filter(pk__in=ids.values()).values_list("pk", "state"))
        out.update({ref: (str(pk), states[pk]) for ref, pk in ids.items()
                    if pk in states and pk not in live})
    for ref, (array, index) in tasks.items():
        row = (Job.objects.filter(array_id=array, array_index=index)
               .values_list("pk", "state").first())
        if row is not None and row[0] not in live:
            out[ref] = (str(row[0]), row[1])
    return out


def _reservations(rows: list[tuple], now_s: int,
                  jobs: list[JobSnap]) -> list[ReservationSnap]:
    """The published reservations (as ``services.leader.published_plans`` reads them for
    a rebuild), their instants relative to the snapshot. Its digest of the plan's inputs
    (``looked_sig``) is of the live clock's instants: not carried, the run looks again.

    Only those of jobs queued in the snapshot; the job whose release a reservation waits
    for (``after_job``, a view) is dropped once it has ended. The scheduler keeps a
    reservation that still holds, with the words it was planned with, after that job ends
    early: every what-if failed for minutes with "reservations[1].after_job: unknown job
    6" while one such reservation was published (an operator's session, 2026-12-07)."""
    queued = {j.id for j in jobs if not j.running}
    live = {j.id for j in jobs}
    out = []
    for job_id, start_at, _nodes, basis, plan in rows:
        if not plan or start_at is None or "alloc" not in plan or str(job_id) not in queued:
            continue
        after = plan.get("after_job")
        out.append(ReservationSnap(
            job=str(job_id), start_s=int(start_at.timestamp()) - now_s,
            alloc=tuple(sorted((n, tuple(sorted(ix))) for n, ix in plan["alloc"].items())),
            basis=basis or "", after_job=(str(after) if after is not None
                                          and str(after) in live else None),
            planned_at_s=_rel_s(plan.get("planned_at_s"), now_s),
            checked_at_s=_rel_s(plan.get("checked_at_s"), now_s)))
    return out


def _rel_s(at: int | None, now_s: int) -> int | None:
    return None if at is None else min(0, int(at) - now_s)


def _claims(asked: dict[int, Any], now_s: int, jobs: list[JobSnap]) -> list[ClaimSnap]:
    """The reclaim claims under way, from their victims' request rows (the first row of a
    head gives its claim, as ``services.leader.restore_claims`` restores them): those of
    heads queued in the snapshot, with the victims still being preempted in it."""
    queued = {j.id for j in jobs if not j.running}
    leaving = {j.id for j in jobs if j.preempt_requested_s is not None}
    out: dict[str, ClaimSnap] = {}
    for row in asked.values():
        head, saved = row.detail.get("for"), row.detail.get("claim")
        if not saved or head is None or str(head) in out or str(head) not in queued:
            continue
        try:
            victims = tuple(str(v) for v in saved["victims"] if str(v) in leaving)
            if not victims:
                continue
            out[str(head)] = ClaimSnap(
                job=str(head), gpus=int(saved["gpus"]), nodes=tuple(sorted(saved["nodes"])),
                victims=victims, at_s=min(0, int(saved["at_s"]) - now_s))
        except (KeyError, TypeError, ValueError):  # unreadable: the head searches again
            continue
    return list(out.values())
