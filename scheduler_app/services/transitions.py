"""The one service that changes a job's state.

``job_transition`` validates a move against the core's table, locks the job row, appends
the Transition row and updates the projection (Job fields, Allocation rows, Node.free_gpus,
tenant held GPUs and usage) in one durable transaction. An illegal move raises the core's
``IllegalTransition`` and writes nothing. Side effects (signals) run only after commit.
Nothing else in the code base writes Job.state.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduler_app.core.states import JobState, PendingReason, Reason, check_transition
from scheduler_app.core.types import Actor, alloc_gpus
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition

from .projection import (
    JOB_COLUMNS,
    AllocMap,
    JobProjection,
    apply_transition,
    gives_alloc,
    normalise_alloc,
)
from .signals import transition_committed
from .usage import accrued, half_life_s

#: Key of the PostgreSQL advisory lock that serialises appends to the log, so that seq
#: order is commit order (a reader tailing by seq never skips a late-committing row).
LOG_APPEND_LOCK_KEY = 0x5C4ED


class AllocationError(ValueError):
    """The allocation a transition carries is missing, malformed or not free."""


def now_s() -> datetime:
    """The current time, in whole seconds (the project's time unit)."""
    return timezone.now().replace(microsecond=0)


def job_transition(
    *,
    job_id: int,
    to_state: JobState | str,
    reason: Reason | str,
    actor: Actor | str,
    at: datetime | None = None,
    detail: dict[str, Any] | None = None,
    alloc: dict[str, Any] | None = None,
    tick_id: str | int | None = None,
    actor_name: str = "",
) -> Transition:
    """Apply one transition to job ``job_id`` and return its Transition row.

    ``alloc`` (node name -> GPU indices) is required on QUEUED -> PLACING and on a Shrunk
    self-transition (the new, whole allocation), and refused elsewhere.
    """
    with transaction.atomic(durable=True):
        job = Job.objects.select_for_update().get(pk=job_id)
        return apply_locked(
            job,
            to_state=JobState(to_state),
            reason=Reason(reason),
            actor=Actor(actor),
            at=at or now_s(),
            detail=detail,
            alloc=alloc,
            tick_id=tick_id,
            actor_name=actor_name,
        )


def apply_locked(
    job: Job,
    *,
    to_state: JobState,
    reason: Reason,
    actor: Actor,
    at: datetime,
    detail: dict[str, Any] | None = None,
    alloc: dict[str, Any] | None = None,
    tick_id: str | int | None = None,
    actor_name: str = "",
) -> Transition:
    """Apply a transition to ``job``, already locked inside the caller's transaction.

    For services composing several moves in one transaction (``job_submit``); everything
    else calls :func:`job_transition`.
    """
    from_state = JobState(job.state)
    check_transition(job.pk, from_state, to_state)
    detail = dict(detail or {})
    if gives_alloc(from_state, to_state, reason):
        if not alloc:
            raise AllocationError(
                f"job {job.pk}: {from_state} -> {to_state} ({reason}) needs an allocation"
            )
        detail["alloc"] = normalise_alloc(alloc)
    elif alloc:
        raise AllocationError(
            f"job {job.pk}: {from_state} -> {to_state} ({reason}) does not take an allocation"
        )
    _serialise_log_appends()
    row = _append_log(
        job,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        actor=actor,
        at=at,
        detail=detail,
        tick_id=tick_id,
        actor_name=actor_name,
    )
    _update_projection(job, row)
    _announce_after_commit(row)
    return row


def append_first(job: Job, *, actor: Actor, at: datetime, actor_name: str = "") -> Transition:
    """The first row of every job: (none) -> SUBMITTED. Only ``job_submit`` calls it."""
    _serialise_log_appends()
    row = _append_log(
        job,
        from_state=None,
        to_state=JobState.SUBMITTED,
        reason=Reason.SUBMITTED,
        actor=actor,
        at=at,
        detail={},
        tick_id=None,
        actor_name=actor_name,
    )
    _announce_after_commit(row)
    return row


def _announce_after_commit(row: Transition) -> None:
    transaction.on_commit(lambda: transition_committed.send(sender=Transition, transition=row))


def _serialise_log_appends() -> None:
    # SQLite has a single writer already (transactions BEGIN IMMEDIATE).
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOG_APPEND_LOCK_KEY])


def _append_log(
    job: Job,
    *,
    from_state: JobState | None,
    to_state: JobState,
    reason: Reason,
    actor: Actor,
    at: datetime,
    detail: dict[str, Any],
    tick_id: str | int | None,
    actor_name: str,
) -> Transition:
    return Transition.objects.create(
        job=job,
        from_state=from_state.value if from_state else None,
        to_state=to_state.value,
        at=at,
        reason=reason.value,
        detail=detail,
        actor=actor.value,
        actor_name=actor_name,
        tick_id="" if tick_id is None else str(tick_id),
    )


def _update_projection(job: Job, row: Transition) -> None:
    """Bring Job, Allocation, Node and Tenant rows in line with the appended ``row``."""
    proj = JobProjection(
        state=JobState(job.state),
        alloc=_open_alloc_map(job),
        **{name: getattr(job, name) for name in JOB_COLUMNS},
    )
    before = proj.alloc
    apply_transition(
        proj,
        to_state=JobState(row.to_state),
        reason=row.reason,
        at=row.at,
        detail=row.detail,
        checkpointable=job.checkpointable,
    )
    if proj.alloc != before:
        _move_allocations(job, before, proj.alloc, row.at)

    if proj.state != job.state:
        # the tick sets a fresh pending reason for a queued job; an old one would mislead
        job.pending_reason = PendingReason.NONE.value
    job.state = row.to_state
    for name in JOB_COLUMNS:
        setattr(job, name, getattr(proj, name))
    job.save(update_fields=["state", "pending_reason", *JOB_COLUMNS])


def _open_alloc_map(job: Job) -> AllocMap:
    rows = Allocation.objects.filter(job=job, end__isnull=True).select_related("node")
    return normalise_alloc({a.node.name: a.gpu_indices for a in rows})


def _move_allocations(job: Job, before: AllocMap, after: AllocMap, at: datetime) -> None:
    """End the job's open allocations and open ``after``: GPUs back to and from nodes,
    the tenant's held GPUs and usage accrued at ``at``."""
    nodes = Node.objects.in_bulk(sorted(set(before) | set(after)), field_name="name")
    missing = sorted(set(after) - set(nodes))
    if missing:
        raise AllocationError(f"job {job.pk}: unknown node(s) {', '.join(missing)}")
    _check_free(job, after, nodes)

    _accrue_tenant_usage(job.tenant_id, at, alloc_gpus(after) - alloc_gpus(before))
    for name, indices in before.items():
        Node.objects.filter(pk=nodes[name].pk).update(free_gpus=F("free_gpus") + len(indices))
    Allocation.objects.filter(job=job, end__isnull=True).update(end=at)
    for name, indices in after.items():
        Node.objects.filter(pk=nodes[name].pk).update(free_gpus=F("free_gpus") - len(indices))
    Allocation.objects.bulk_create(
        Allocation(
            job=job, node=nodes[name], gpu_indices=indices, start=at, preemptible=job.preemptible
        )
        for name, indices in after.items()
    )


def _check_free(job: Job, alloc: AllocMap, nodes: dict[str, Node]) -> None:
    """Every index exists on its node and no other job holds it (appends are serialised,
    so nothing can take it between this check and the insert)."""
    held: dict[int, set[int]] = {}
    others = Allocation.objects.filter(
        node__in=[nodes[name] for name in alloc], end__isnull=True
    ).exclude(job=job)
    for node_id, indices in others.values_list("node_id", "gpu_indices"):
        held.setdefault(node_id, set()).update(indices)
    for name, indices in alloc.items():
        node = nodes[name]
        if not indices or len(set(indices)) != len(indices):
            raise AllocationError(f"job {job.pk}: bad GPU indices {indices} on {name}")
        out_of_range = [i for i in indices if not 0 <= i < node.gpu_count]
        if out_of_range:
            raise AllocationError(
                f"job {job.pk}: {name} has GPUs 0-{node.gpu_count - 1}, not {out_of_range}"
            )
        taken = sorted(held.get(node.pk, set()) & set(indices))
        if taken:
            raise AllocationError(f"job {job.pk}: GPUs {taken} on {name} are already allocated")


def _accrue_tenant_usage(tenant_id: int, at: datetime, held_delta: int) -> None:
    if held_delta == 0:
        return
    tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
    since = int(tenant.usage_at.timestamp()) if tenant.usage_at else None
    usage, as_of = accrued(
        tenant.usage_gpu_s, since, tenant.held_gpus, int(at.timestamp()), half_life_s()
    )
    tenant.usage_gpu_s = usage
    tenant.usage_at = datetime.fromtimestamp(as_of, tz=UTC)
    tenant.held_gpus += held_delta
    tenant.save(update_fields=["usage_gpu_s", "usage_at", "held_gpus"])
