"""Read-only queries for the overview page: tenants, pods and nodes, recent activity."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, QuerySet, Sum

from scheduler_app.models import Job, Node, Pod, Tenant, Transition
from scheduler_app.services.usage import usage_at


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: Tenant
    usage_gpu_h: float  # decayed, as of now
    share: float | None  # usage / guarantee (None without a guarantee)
    jobs_by_state: dict[str, int]


def tenant_rows(*, now: datetime) -> list[TenantRow]:
    counts: dict[int, dict[str, int]] = {}
    for tenant_id, state, n in (
        Job.objects.values_list("tenant_id", "state").annotate(n=Count("id")).order_by()
    ):
        counts.setdefault(tenant_id, {})[state] = n
    rows = []
    for tenant in Tenant.objects.order_by("name"):
        usage = usage_at(tenant, now)
        share = usage / tenant.guaranteed_gpus if tenant.guaranteed_gpus else None
        rows.append(TenantRow(tenant, usage / 3600.0, share, counts.get(tenant.pk, {})))
    return rows


@dataclass(frozen=True, slots=True)
class PodRow:
    pod: Pod
    nodes: list[Node]
    gpus: int
    free: int


def pod_rows() -> list[PodRow]:
    nodes: dict[int, list[Node]] = {}
    for node in Node.objects.order_by("name"):
        nodes.setdefault(node.pod_id, []).append(node)
    return [
        PodRow(
            pod,
            nodes.get(pod.pk, []),
            sum(n.gpu_count for n in nodes.get(pod.pk, [])),
            sum(n.free_gpus for n in nodes.get(pod.pk, [])),
        )
        for pod in Pod.objects.order_by("name")
    ]


def cluster_totals() -> dict[str, int]:
    totals = Node.objects.aggregate(gpus=Sum("gpu_count"), free=Sum("free_gpus"))
    return {"gpus": totals["gpus"] or 0, "free": totals["free"] or 0}


def recent_jobs(*, limit: int = 20) -> QuerySet[Job]:
    return Job.objects.select_related("tenant", "owner").order_by("-id")[:limit]


def recent_transitions(*, limit: int = 30) -> QuerySet[Transition]:
    return Transition.objects.select_related("job").order_by("-id")[:limit]
