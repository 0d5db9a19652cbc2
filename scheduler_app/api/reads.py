"""Read models the API shows that no selector computes yet: per-tenant figures (decayed
usage now, borrowed GPUs and from whom, queue depth by size class) and the cluster
summary.

Pure arithmetic over a handful of aggregate queries: one query for the tenants, one for
the queue depths, one for the nodes, whatever the number of jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q, Sum

from scheduler_app.core.states import JobState
from scheduler_app.core.types import SIZE_CLASS_LABELS, NodeHealth
from scheduler_app.models import Job, Node, Tenant
from scheduler_app.services.usage import usage_at

from .filters import size_class_q

#: The lender name for capacity no tenant is guaranteed.
UNGUARANTEED = None


@dataclass(slots=True)
class TenantFigures:
    tenant: Tenant
    usage_gpu_s: float  # decayed, accrued to now
    share: float | None  # usage / guarantee (None: no guarantee)
    borrowed_gpus: int = 0
    borrowed_from: list[dict] = field(default_factory=list)
    lent_gpus: int = 0
    lent_to: list[dict] = field(default_factory=list)
    queued_by_size_class: dict[str, int] = field(default_factory=dict)


def tenant_figures(*, now: datetime) -> list[TenantFigures]:
    tenants = list(Tenant.objects.order_by("name"))
    rows = []
    for t in tenants:
        usage = usage_at(t, now)
        rows.append(TenantFigures(
            tenant=t,
            usage_gpu_s=usage,
            share=usage / t.guaranteed_gpus if t.guaranteed_gpus else None,
        ))
    depth = queue_depths()
    for row in rows:
        row.queued_by_size_class = depth.get(row.tenant.pk, dict.fromkeys(SIZE_CLASS_LABELS, 0))
    cluster_gpus = Node.objects.aggregate(n=Sum("gpu_count"))["n"] or 0
    attribute_borrowing(rows, cluster_gpus)
    return rows


def queue_depths() -> dict[int, dict[str, int]]:
    """tenant id -> {size class label: queued jobs}."""
    counts = {
        label: Count("id", filter=size_class_q(label)) for label in SIZE_CLASS_LABELS
    }
    out: dict[int, dict[str, int]] = {}
    rows = (
        Job.objects.filter(state=JobState.QUEUED.value)
        .values("tenant_id")
        .annotate(**{f"c{i}": c for i, c in enumerate(counts.values())})
        .order_by()
    )
    for row in rows:
        out[row["tenant_id"]] = {
            label: row[f"c{i}"] for i, label in enumerate(SIZE_CLASS_LABELS)
        }
    return out


def attribute_borrowing(rows: list[TenantFigures], cluster_gpus: int) -> None:
    """Say whose GPUs each borrower uses.

    A tenant borrows what it holds past its guarantee. GPUs are fungible, so this is an
    attribution, not a ledger: borrowed GPUs come first from capacity nobody is
    guaranteed (borrowing it costs no one), then from the guarantees other tenants leave
    idle, in name order. Deterministic, and the sums always match: each borrower's
    ``borrowed_from`` adds up to its ``borrowed_gpus``. Whatever cannot be attributed
    (guarantees oversubscribing the cluster) is listed under lender "(oversubscribed)".
    """
    guaranteed = sum(r.tenant.guaranteed_gpus for r in rows)
    lenders: list[tuple[str | None, int, TenantFigures | None]] = []
    free_pool = max(0, cluster_gpus - guaranteed)
    if free_pool:
        lenders.append((UNGUARANTEED, free_pool, None))
    for r in rows:
        idle = r.tenant.guaranteed_gpus - r.tenant.held_gpus
        if idle > 0:
            lenders.append((r.tenant.name, idle, r))
    li, left = 0, lenders[0][1] if lenders else 0
    for r in rows:
        need = max(0, r.tenant.held_gpus - r.tenant.guaranteed_gpus)
        r.borrowed_gpus = need
        parts: dict[str | None, int] = {}
        while need > 0 and li < len(lenders):
            take = min(need, left)
            if take:
                name, _cap, lender = lenders[li]
                parts[name] = parts.get(name, 0) + take
                if lender is not None:
                    lender.lent_gpus += take
                    lender.lent_to.append({"tenant": r.tenant.name, "gpus": take})
                need -= take
                left -= take
            if left == 0:
                li += 1
                left = lenders[li][1] if li < len(lenders) else 0
        if need > 0:
            parts["(oversubscribed)"] = need
        r.borrowed_from = [{"tenant": name, "gpus": gpus} for name, gpus in parts.items()]


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    nodes: int
    nodes_by_health: dict[str, int]
    gpus: int
    gpus_used: int
    gpus_free: int
    gpus_unavailable: int  # free but on draining or down nodes
    gpus_borrowed: int
    gpus_reserved: int
    jobs_by_state: dict[str, int]


def cluster_summary(*, reserved_gpus: int) -> ClusterSummary:
    by_health: dict[str, int] = dict.fromkeys((h.value for h in NodeHealth), 0)
    gpus = used = free = unavailable = nodes = 0
    for health, n, count, free_gpus in (
        Node.objects.values("health")
        .annotate(n=Count("id"), count=Sum("gpu_count"), free=Sum("free_gpus"))
        .order_by()
        .values_list("health", "n", "count", "free")
    ):
        by_health[health] = n
        nodes += n
        gpus += count or 0
        used += (count or 0) - (free_gpus or 0)
        if health == NodeHealth.HEALTHY:
            free += free_gpus or 0
        else:
            unavailable += free_gpus or 0
    borrowed = sum(
        max(0, held - guaranteed)
        for held, guaranteed in Tenant.objects.filter(
            held_gpus__gt=0).values_list("held_gpus", "guaranteed_gpus")
    )
    states = dict.fromkeys((s.value for s in JobState), 0)
    live = [s.value for s in JobState if s not in (JobState.COMPLETED, JobState.FAILED,
                                                 JobState.CANCELLED)]
    for state, n in (
        Job.objects.filter(state__in=live).values("state").annotate(n=Count("id"))
        .order_by().values_list("state", "n")
    ):
        states[state] = n
    return ClusterSummary(
        nodes=nodes, nodes_by_health=by_health, gpus=gpus, gpus_used=used, gpus_free=free,
        gpus_unavailable=unavailable, gpus_borrowed=borrowed, gpus_reserved=reserved_gpus,
        jobs_by_state={s: n for s, n in states.items() if s in live},
    )


__all__ = ["Q", "TenantFigures", "cluster_summary", "tenant_figures"]
