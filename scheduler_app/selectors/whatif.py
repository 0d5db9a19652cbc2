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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.db import connection, transaction

from scheduler_app.core.fairshare import accrue
from scheduler_app.core.states import HOLDING_STATES, JobState
from scheduler_app.models import Node, Tenant
from scheduler_app.scheduler_config import scheduler_config
from scheduler_app.sim.whatif import JobSnap, NodeSnap, Snapshot, TenantSnap, settings_of

from .leader import SPEC_COLUMNS, last_move_at, live_job_rows, open_allocations

S = JobState
#: these hold GPUs but are on their way out: the plan puts them back in their queue
_LEAVING = frozenset({S.PREEMPT_REQUESTED.value, S.CHECKPOINTING.value})
_RUNNING = frozenset(s.value for s in HOLDING_STATES) - _LEAVING


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


def live_snapshot(now: datetime | None = None) -> Snapshot:
    """The live state as of ``now`` (default: the clock), every instant made relative to
    it (seconds, <= 0)."""
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    now_s = int(now.timestamp())
    config = scheduler_config()
    with read_only():
        nodes = list(Node.objects.order_by("name").values_list(
            "name", "pod__name", "gpu_count", "gpu_type", "rail", "health"))
        tenants = list(Tenant.objects.order_by("name").values_list(
            "name", "guaranteed_gpus", "borrow_limit_gpus", "usage_gpu_s", "usage_at",
            "held_gpus", "max_gpus_per_user", "default_runtime_s", "max_runtime_s"))
        rows = live_job_rows()
        allocations = open_allocations()
        state_at = len(SPEC_COLUMNS)
        placing = [r[0] for r in rows if r[state_at] == S.PLACING.value]
        placed = last_move_at(S.PLACING, placing) if placing else {}
    allocs: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for job_id, node, indices in allocations:
        allocs.setdefault(job_id, []).append((node, tuple(sorted(indices))))

    def rel(at: datetime | None) -> int | None:
        return None if at is None else min(0, int(at.timestamp()) - now_s)

    jobs: list[JobSnap] = []
    live_ids = {row[0] for row in rows}
    for row in rows:
        (pk, tenant, gpus, submitted_at, gpus_per_node, gpu_type, priority, max_runtime_s,
         checkpointable, checkpoint_interval_s, checkpoint_time_s, restart_s, preemptible,
         interactive, min_gpus, owner, depends_on, array_id, array_index, array_count,
         array_max_running) = row[:state_at]
        state, started_at, last_checkpoint_at, _pointer, preemption_times, _retries = (
            row[state_at:])
        running = state in _RUNNING and pk in allocs
        start = None
        if running:
            # RUNNING: since the agent confirmed; PLACING: since it was placed
            at = started_at if state == S.RUNNING.value else placed.get(pk, started_at)
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
        read_s=time.perf_counter() - started,
    )
