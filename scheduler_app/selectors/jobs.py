"""Reads about one job: its history in the log and its place in the queues.

Queue positions are computed on read (never stored: they change with every submit and
start), with the core's definitions (``core.queues``): inside a tenant, priority (higher
first), then submit time, then seq (the primary key); across the cluster, tenants in the
order of the last tick's fair-share key (``Tenant.share_rank``, written by the leader):
every queued job of a tenant ranked before counts whole, a tenant of equal rank (the
job's own included) counts only its jobs that order before this one.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from scheduler_app.core.states import JobState
from scheduler_app.models import Job, Membership, Tenant, Transition

from .redaction import Sees


def job_history(*, job: Job) -> QuerySet[Transition]:
    """Every log row of ``job``, oldest first (index ``transition_job_seq``)."""
    return Transition.objects.filter(job=job).order_by("id")


def _ahead_of(job: Job) -> Q:
    """Queued jobs that order before ``job`` inside one heap (priority, age, seq)."""
    return (
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, submitted_at__lt=job.submitted_at)
        | Q(priority=job.priority, submitted_at=job.submitted_at, pk__lt=job.pk)
    )


def job_queue_position(*, job: Job) -> tuple[int | None, int | None]:
    """(position in its tenant's queue, rank across the cluster), 1 = next; (None, None)
    unless the job is QUEUED. Cost: three COUNTs over the queued jobs."""
    if job.state != JobState.QUEUED:
        return None, None
    queued = Job.objects.filter(state=JobState.QUEUED)
    ahead = _ahead_of(job)
    in_tenant = 1 + queued.filter(ahead, tenant_id=job.tenant_id).count()
    mine = Tenant.objects.filter(pk=job.tenant_id).values_list("share_rank", flat=True).first()
    if mine is None:
        # not ranked yet: every ranked tenant comes first, the unranked ones tie
        before = Q(tenant__share_rank__isnull=False)
        equal = Q(tenant__share_rank__isnull=True)
    else:
        before = Q(tenant__share_rank__lt=mine)
        equal = Q(tenant__share_rank=mine)
    rank = 1 + queued.filter(before).count() + queued.filter(equal).filter(ahead).count()
    return in_tenant, rank


def queue_order() -> list[tuple[int, int]]:
    """(job id, tenant id) of every QUEUED job in the cluster's order (two queries): the
    order ``job_queue_position`` counts in, for a whole page or list at once."""
    ranks = dict(Tenant.objects.values_list("pk", "share_rank"))
    queued = sorted(
        (
            (0, ranks[tenant_id]) if ranks.get(tenant_id) is not None else (1, 0),
            -priority,
            submitted_at,
            pk,
            tenant_id,
        )
        for pk, tenant_id, priority, submitted_at in Job.objects.filter(
            state=JobState.QUEUED
        ).values_list("pk", "tenant_id", "priority", "submitted_at")
    )
    return [(pk, tenant_id) for _tier, _prio, _at, pk, tenant_id in queued]


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


__all__ = ["array_tasks", "job_history", "job_queue_position", "job_visibility",
           "queue_order"]
