"""Reads about one job: its history in the log and its place in the queues.

Queue positions are computed on read (never stored: they change with every submit and
start), with the core's definitions (``core.queues``): inside a tenant, priority (higher
first), then the deadline (submit second + ``queue_stretch`` x the declared limit x the
GPUs asked, ``core.queues.deadline_of``), then seq (the primary key); across the cluster, tenants in
the order of the last tick's fair-share key (``Tenant.share_rank``, written by the
leader): every queued job of a tenant ranked before counts whole, a tenant of equal rank
(the job's own included) counts only its jobs that order before this one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet

from scheduler_app.core.queues import EntryKey, deadline_of
from scheduler_app.core.states import JobState, PendingReason
from scheduler_app.models import Job, Membership, Tenant, Transition
from scheduler_app.scheduler_config import scheduler_config

from .redaction import Sees


def job_history(*, job: Job) -> QuerySet[Transition]:
    """Every log row of ``job``, oldest first (index ``transition_job_seq``)."""
    return Transition.objects.filter(job=job).order_by("id")


#: what a queued job's place is computed from, in ``_order_key``'s argument order
_ORDER_COLUMNS = ("priority", "submitted_at", "max_runtime_s", "gpus", "pk")

#: Queued jobs that wait off the heaps (a dependency not met, an array at its cap): not in
#: line, so they have no position and are counted ahead of nobody (3,000 tasks of an
#: array capped at 2 put a 64-GPU job "2,996th", a minute before it started: 2026-12-07)
PARKED = (PendingReason.DEPENDENCY.value, PendingReason.ARRAY_LIMIT.value)


#: a job in these states waits for a run: its last run's start is history, not its own
_WAITING = frozenset({JobState.SUBMITTED.value, JobState.QUEUED.value, JobState.PLACING.value})


def run_started_at(job: Job) -> datetime | None:
    """When the job's current run started, None while it waits for one, as Slurm resets
    StartTime on a requeue (a requeued job showed its previous run's start while QUEUED:
    found 2026-12-07). The API and the job page both say this."""
    return None if job.state in _WAITING else job.started_at


def in_line(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The QUEUED jobs among ``jobs`` that wait in the scheduler's queues (not parked)."""
    return jobs.filter(state=JobState.QUEUED).exclude(pending_reason__in=PARKED)


def _order_key(priority: int, submitted_at: datetime, max_runtime_s: int | None, gpus: int,
               pk: int, stretch: float) -> EntryKey:
    """The core's ``entry_key`` from a Job's columns (the core's submit time is the whole
    second, ``services.leader.epoch``; its seq is the primary key)."""
    return (-priority, _deadline(submitted_at, max_runtime_s, gpus, stretch), pk)


def _deadline(submitted_at: datetime, max_runtime_s: int | None, gpus: int,
              stretch: float) -> int:
    return deadline_of(int(submitted_at.timestamp()), max_runtime_s, gpus, stretch)


def queue_deadline(*, job: Job) -> datetime:
    """When ``job`` orders in its team's queue among the jobs of its priority (earlier
    first): its submit second + ``queue_stretch`` x its declared limit x its GPUs
    (core.queues)."""
    at = _deadline(job.submitted_at, job.max_runtime_s, job.gpus,
                   scheduler_config().queue_stretch)
    return datetime.fromtimestamp(at, tz=UTC)


def _count_ahead(jobs: QuerySet[Job], key: EntryKey, stretch: float) -> int:
    """How many of ``jobs`` order before ``key`` (one query: those of its priority or
    higher, read; the deadline depends on the setting, so it is computed here)."""
    rows = jobs.filter(priority__gte=-key[0]).values_list(*_ORDER_COLUMNS)
    return sum(1 for row in rows if _order_key(*row, stretch) < key)


def job_queue_position(*, job: Job) -> tuple[int | None, int | None]:
    """(position in its tenant's queue, rank across the cluster), 1 = next; (None, None)
    unless the job is QUEUED in line (a ``PARKED`` job waits off the queues). Cost: three
    queries: a COUNT of the tenants ranked before, and the queued jobs of its priority or
    higher in its own tenant and in the tenants of equal rank, read (as the core's
    ``position_in_tenant`` counts: O(what the tenant has queued))."""
    if job.state != JobState.QUEUED or job.pending_reason in PARKED:
        return None, None
    stretch = scheduler_config().queue_stretch
    key = _order_key(job.priority, job.submitted_at, job.max_runtime_s, job.gpus, job.pk,
                     stretch)
    queued = in_line(Job.objects.all())
    in_tenant = 1 + _count_ahead(queued.filter(tenant_id=job.tenant_id), key, stretch)
    mine = Tenant.objects.filter(pk=job.tenant_id).values_list("share_rank", flat=True).first()
    if mine is None:
        # not ranked yet: every ranked tenant comes first, the unranked ones tie
        before = Q(tenant__share_rank__isnull=False)
        equal = Q(tenant__share_rank__isnull=True)
    else:
        before = Q(tenant__share_rank__lt=mine)
        equal = Q(tenant__share_rank=mine)
    rank = 1 + queued.filter(before).count() + _count_ahead(queued.filter(equal), key, stretch)
    return in_tenant, rank


def queue_order() -> list[tuple[int, int]]:
    """(job id, tenant id) of every QUEUED job in line (not ``PARKED``) in the cluster's
    order (two queries): the order ``job_queue_position`` counts in, for a whole page or
    list at once."""
    ranks = dict(Tenant.objects.values_list("pk", "share_rank"))
    stretch = scheduler_config().queue_stretch
    queued = sorted(
        (
            (0, ranks[tenant_id]) if ranks.get(tenant_id) is not None else (1, 0),
            _order_key(priority, submitted_at, max_runtime_s, gpus, pk, stretch),
            tenant_id,
        )
        for tenant_id, priority, submitted_at, max_runtime_s, gpus, pk in in_line(
            Job.objects.all()
        ).values_list("tenant_id", *_ORDER_COLUMNS)
    )
    return [(key[2], tenant_id) for _tier, key, tenant_id in queued]


def job_visibility(user: Any) -> Sees:
    """Which jobs ``user`` may see, as ``sees(tenant id, owner id)``: the rule of the API's
    ``access.sees`` (docs/api.md, "Who may do what"; a test holds the two equal), for the
    services, which must not import the API: operators see every job, a team's leads
    every job of the team, a member their own jobs there. One query."""
    if user.is_staff:
        return lambda tenant_id, owner_id: True
    roles = dict(Membership.objects.filter(user=user).values_list("tenant_id", "role"))
    lead = Membership.Role.LEAD.value

    def sees(tenant_id: int, owner_id: int | None) -> bool:
        role = roles.get(tenant_id)
        return role == lead or (role is not None and owner_id == user.pk)

    return sees


def array_tasks(*, array_id: int) -> QuerySet[Job]:
    """The tasks of job array ``array_id`` (index ``job_array_tasks``), by index."""
    return Job.objects.filter(array_id=array_id).order_by("array_index")


__all__ = ["array_tasks", "in_line", "job_history", "job_queue_position", "job_visibility",
           "queue_deadline", "queue_order", "run_started_at"]
