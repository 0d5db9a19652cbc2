"""Rebuild the projection from the Transition log alone, and compare it with the tables.

The rebuild walks the log in seq order, in chunks, applying the same rules as the
service (``services.projection.apply_transition``); it reads the Job table only for the
immutable spec (checkpointable) and the Node table for capacity. Tenant usage is rebuilt
with the same accrual, in the same order, so it matches to the last bits.

Cluster rows are replayed too: a node's health is the ``to_state`` of its last node row
(a node without one is as it was born: healthy), a tenant's quota is the ``after`` of its
last tenant row (a tenant without one keeps the quota it was created with). A tenant
created through ``services.cluster.tenant_create`` has a first row (action ``register``)
that also gives the usage it carried in, the starting point of its usage replay. Each row
must start where the previous row of the same node or tenant ended, or it is reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from scheduler_app.core.states import JobState, is_allowed
from scheduler_app.core.types import NodeHealth, alloc_gpus
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition
from scheduler_app.services.projection import (
    JOB_COLUMNS,
    AllocMap,
    JobProjection,
    apply_transition,
    normalise_alloc,
)
from scheduler_app.services.usage import accrued, half_life_s

CHUNK = 5000
_HEALTHS = frozenset(h.value for h in NodeHealth)
QUOTA_KEYS = ("guaranteed_gpus", "borrow_limit_gpus")


@dataclass(frozen=True, slots=True)
class Mismatch:
    what: str  # e.g. "job 12 state", "node n1 free_gpus", "log #40"
    from_log: object
    in_tables: object

    def __str__(self) -> str:
        return f"{self.what}: log says {self.from_log!r}, tables say {self.in_tables!r}"


@dataclass(slots=True)
class _TenantUsage:
    usage: float = 0.0
    since_s: int | None = None
    held: int = 0


@dataclass(slots=True)
class Rebuilt:
    jobs: dict[int, JobProjection] = field(default_factory=dict)
    node_used: dict[str, int] = field(default_factory=dict)
    tenants: dict[int, _TenantUsage] = field(default_factory=dict)
    #: node id -> health after its last node row
    node_health: dict[int, str] = field(default_factory=dict)
    #: tenant id -> {"guaranteed_gpus", "borrow_limit_gpus"} after its last tenant row
    tenant_quota: dict[int, dict[str, int]] = field(default_factory=dict)
    log_errors: list[Mismatch] = field(default_factory=list)
    rows: int = 0
    cluster_rows: int = 0


def rebuild_from_log(*, on_rows: Callable[[int], None] | None = None) -> Rebuilt:
    """Replay every Transition in seq order. ``on_rows(n)`` reports progress per chunk."""
    spec = {
        pk: (tenant_id, checkpointable)
        for pk, tenant_id, checkpointable in Job.objects.values_list(
            "pk", "tenant_id", "checkpointable"
        )
    }
    out = Rebuilt()
    half_life = half_life_s()
    for chunk in _log_chunks():
        for row in chunk:
            seq, kind, job_id, node_id, tenant_id, from_state, to_state, reason, at, detail = row
            if kind == Transition.Kind.NODE:
                _replay_node_row(out, seq, node_id, from_state, to_state)
            elif kind == Transition.Kind.TENANT:
                _replay_tenant_row(out, seq, tenant_id, detail)
            else:
                _replay_row(
                    out, spec, half_life, seq, job_id, from_state, to_state, reason, at, detail
                )
        out.rows += len(chunk)
        if on_rows:
            on_rows(len(chunk))
    return out


def _log_chunks() -> Iterator[list[tuple]]:
    """The log in seq order, keyset-paginated (no long-lived cursor, bounded memory)."""
    last = 0
    while True:
        chunk = list(
            Transition.objects.filter(pk__gt=last)
            .order_by("pk")
            .values_list(
                "pk", "kind", "job_id", "node_id", "tenant_id",
                "from_state", "to_state", "reason", "at", "detail",
            )[:CHUNK]
        )
        if not chunk:
            return
        yield chunk
        last = chunk[-1][0]


def _replay_row(
    out: Rebuilt,
    spec: dict[int, tuple[int, bool]],
    half_life: int,
    seq: int,
    job_id: int,
    from_state: str | None,
    to_state: str,
    reason: str,
    at: datetime,
    detail: dict,
) -> None:
    proj = out.jobs.setdefault(job_id, JobProjection())
    here = f"log #{seq} (job {job_id})"
    if from_state != (proj.state.value if proj.state else None):
        out.log_errors.append(Mismatch(f"{here} from_state", proj.state, from_state))
    legal = (
        is_allowed(from_state, to_state)
        if from_state is not None
        else to_state == JobState.SUBMITTED
    )
    if not legal:
        out.log_errors.append(Mismatch(f"{here} illegal move", "a legal move", to_state))
    tenant_id, checkpointable = spec[job_id]
    before = proj.alloc
    apply_transition(
        proj,
        to_state=JobState(to_state),
        reason=reason,
        at=at,
        detail=detail,
        checkpointable=checkpointable,
    )
    if proj.alloc == before:
        return
    usage = out.tenants.setdefault(tenant_id, _TenantUsage())
    usage.usage, usage.since_s = accrued(
        usage.usage, usage.since_s, usage.held, int(at.timestamp()), half_life
    )
    usage.held += alloc_gpus(proj.alloc) - alloc_gpus(before)
    for name, indices in before.items():
        out.node_used[name] = out.node_used.get(name, 0) - len(indices)
    for name, indices in proj.alloc.items():
        out.node_used[name] = out.node_used.get(name, 0) + len(indices)


def _replay_node_row(
    out: Rebuilt, seq: int, node_id: int, from_state: str | None, to_state: str
) -> None:
    out.cluster_rows += 1
    # a node with no row yet is as it was born (healthy), or is registering (from null)
    before = out.node_health.get(node_id)
    expected = (None, NodeHealth.HEALTHY.value) if before is None else (before,)
    if from_state not in expected:
        out.log_errors.append(
            Mismatch(f"log #{seq} (node {node_id}) from_state", expected[-1], from_state)
        )
    if to_state not in _HEALTHS:
        out.log_errors.append(Mismatch(f"log #{seq} (node {node_id}) health", "a health", to_state))
    out.node_health[node_id] = to_state


def _replay_tenant_row(out: Rebuilt, seq: int, tenant_id: int, detail: dict) -> None:
    out.cluster_rows += 1
    before, after = detail.get("before"), detail.get("after")
    previous = out.tenant_quota.get(tenant_id)
    here = f"log #{seq} (tenant {tenant_id})"
    if not isinstance(after, dict) or not set(QUOTA_KEYS) <= set(after):
        out.log_errors.append(Mismatch(f"{here} after", "a quota", after))
        return
    if detail.get("action") == "register":
        # the team's first row: its quota and the usage it carried in, as of usage_at_s
        if previous is not None or tenant_id in out.tenants:
            out.log_errors.append(Mismatch(f"{here} register", "the first row", "a later row"))
        out.tenants[tenant_id] = _TenantUsage(
            usage=float(after.get("usage_gpu_s", 0.0)), since_s=after.get("usage_at_s")
        )
    elif previous is not None and before != previous:
        out.log_errors.append(Mismatch(f"{here} before", previous, before))
    out.tenant_quota[tenant_id] = {key: after[key] for key in QUOTA_KEYS}


def compare_with_tables(rebuilt: Rebuilt) -> list[Mismatch]:
    """Every difference between the rebuilt projection and the tables, in a stable order."""
    found = list(rebuilt.log_errors)
    found += _compare_jobs(rebuilt)
    found += _compare_nodes(rebuilt)
    found += _compare_tenants(rebuilt)
    return found


_JOB_FIELDS = ("state", *JOB_COLUMNS)


def _compare_jobs(rebuilt: Rebuilt) -> list[Mismatch]:
    found: list[Mismatch] = []
    open_allocs: dict[int, dict[str, list[int]]] = {}
    for job_id, node_name, indices in Allocation.objects.filter(end__isnull=True).values_list(
        "job_id", "node__name", "gpu_indices"
    ):
        open_allocs.setdefault(job_id, {}).setdefault(node_name, []).extend(indices)
    for row in Job.objects.order_by("pk").values("pk", *_JOB_FIELDS).iterator(chunk_size=CHUNK):
        job_id = row["pk"]
        proj = rebuilt.jobs.get(job_id)
        if proj is None:
            found.append(Mismatch(f"job {job_id}", "no transitions", row["state"]))
            continue
        for name in _JOB_FIELDS:
            expected = getattr(proj, name)
            expected = expected.value if isinstance(expected, JobState) else expected
            if expected != row[name]:
                found.append(Mismatch(f"job {job_id} {name}", expected, row[name]))
        actual: AllocMap = normalise_alloc(open_allocs.pop(job_id, {}))
        if proj.alloc != actual:
            found.append(Mismatch(f"job {job_id} allocation", proj.alloc, actual))
    for job_id, alloc in sorted(open_allocs.items()):
        found.append(Mismatch(f"allocation of unknown job {job_id}", {}, alloc))
    return found


def _compare_nodes(rebuilt: Rebuilt) -> list[Mismatch]:
    found: list[Mismatch] = []
    for pk, name, gpu_count, free, health in Node.objects.order_by("name").values_list(
        "pk", "name", "gpu_count", "free_gpus", "health"
    ):
        expected = gpu_count - rebuilt.node_used.get(name, 0)
        if expected != free:
            found.append(Mismatch(f"node {name} free_gpus", expected, free))
        expected_health = rebuilt.node_health.get(pk, NodeHealth.HEALTHY.value)
        if expected_health != health:
            found.append(Mismatch(f"node {name} health", expected_health, health))
    return found


def _compare_tenants(rebuilt: Rebuilt) -> list[Mismatch]:
    found: list[Mismatch] = []
    for pk, name, held, usage, guaranteed, borrow in Tenant.objects.order_by("name").values_list(
        "pk", "name", "held_gpus", "usage_gpu_s", "guaranteed_gpus", "borrow_limit_gpus"
    ):
        quota = rebuilt.tenant_quota.get(pk)
        if quota is not None:
            for key, actual in (("guaranteed_gpus", guaranteed), ("borrow_limit_gpus", borrow)):
                if quota.get(key) != actual:
                    found.append(Mismatch(f"tenant {name} {key}", quota.get(key), actual))
        expected = rebuilt.tenants.get(pk, _TenantUsage())
        if expected.held != held:
            found.append(Mismatch(f"tenant {name} held_gpus", expected.held, held))
        if not math.isclose(expected.usage, usage, rel_tol=1e-9, abs_tol=1e-6):
            found.append(Mismatch(f"tenant {name} usage_gpu_s", expected.usage, usage))
    return found
