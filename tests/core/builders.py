"""Short fixtures for the core tests: clusters, jobs, allocations.

Shared by every test module under tests/core (import ``from tests.core.builders import ...``).
Node names follow the simulator's convention: ``pod-a-000``, ``pod-a-001``, ...
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from scheduler_app.core.capacity import Capacity
from scheduler_app.core.preemption import Candidate, TenantLoad
from scheduler_app.core.types import Allocation, JobSpec, NodeHealth, NodeSpec, TenantSpec

_seq = itertools.count(1)


def node_name(pod: str, i: int) -> str:
    return f"{pod}-{i:03d}"


def nodes(
    pods: Mapping[str, int] | None = None,
    *,
    gpus: int = 8,
    gpu_type: str | None = None,
    typed: Mapping[str, str] | None = None,
    sizes: Mapping[str, int] | None = None,
) -> list[NodeSpec]:
    """NodeSpecs for ``{"pod-a": 4, "pod-b": 2}`` (node counts), ``gpus`` per node.

    ``typed`` and ``sizes`` override the GPU type and node size per pod.
    """
    pods = pods if pods is not None else {"pod-a": 4}
    out = []
    for pod in sorted(pods):
        for i in range(pods[pod]):
            out.append(
                NodeSpec(
                    name=node_name(pod, i),
                    pod=pod,
                    gpus=(sizes or {}).get(pod, gpus),
                    gpu_type=(typed or {}).get(pod, gpu_type),
                )
            )
    return out


def cluster(pods: Mapping[str, int] | None = None, **kw: object) -> Capacity:
    """A Capacity over :func:`nodes` (same arguments)."""
    return Capacity(nodes(pods, **kw))  # type: ignore[arg-type]


def used(cap: Capacity, busy: Mapping[str, int | Iterable[int]]) -> Capacity:
    """Mark GPUs used: ``{"pod-a-000": 4}`` takes GPUs 0-3, or give the exact indices."""
    alloc: Allocation = {}
    for name, what in busy.items():
        alloc[name] = tuple(range(what)) if isinstance(what, int) else tuple(what)
    cap.take(alloc)
    return cap


def down(cap: Capacity, *names: str, health: NodeHealth = NodeHealth.DOWN) -> Capacity:
    for n in names:
        cap.set_health(n, health)
    return cap


def job(id: str = "j", gpus: int = 8, *, tenant: str = "team-a", **kw: object) -> JobSpec:
    """A JobSpec with a fresh seq; any JobSpec field may be given by keyword."""
    kw.setdefault("seq", next(_seq))
    kw.setdefault("submit_s", 0)
    return JobSpec(id=id, tenant=tenant, gpus=gpus, **kw)  # type: ignore[arg-type]


def tenant(name: str, guaranteed: int, borrow: int = 0) -> TenantSpec:
    return TenantSpec(name=name, guaranteed_gpus=guaranteed, borrow_limit_gpus=borrow)


def alloc_gpus(alloc: Allocation | None) -> int:
    return 0 if alloc is None else sum(len(ix) for ix in alloc.values())


def per_node(alloc: Allocation | None) -> dict[str, int]:
    """``{"pod-a-000": 8, ...}``: GPUs per node, the form tables compare against."""
    return {} if alloc is None else {n: len(ix) for n, ix in sorted(alloc.items())}


def pods_of(alloc: Allocation | None, cap: Capacity) -> list[str]:
    return sorted({cap.nodes[n].pod for n in (alloc or {})})


def candidate(
    cap: Capacity,
    id: str,
    alloc: Mapping[str, int | Iterable[int]],
    *,
    tenant: str = "team-b",
    now: int = 10_000,
    ran_s: int = 3600,
    ckpt_ago_s: int | None = None,
    restart_s: int = 60,
    preemptions: int = 0,
    in_slice: bool = False,
    **spec: object,
) -> Candidate:
    """A running job as the preemption search sees it; takes its GPUs in ``cap``.

    ``alloc``: ``{"pod-a-000": 8}`` (GPUs 0..7 that are free, lowest first) or indices.
    It started ``ran_s`` before ``now`` and last checkpointed ``ckpt_ago_s`` ago (None:
    never). Checkpointable unless told otherwise.
    """
    exact: Allocation = {}
    for name, what in alloc.items():
        if isinstance(what, int):
            free = cap.nodes[name].free_mask
            exact[name] = tuple(i for i in range(cap.nodes[name].gpus) if free >> i & 1)[:what]
        else:
            exact[name] = tuple(what)
    cap.take(exact)
    spec.setdefault("checkpointable", True)
    gpus = sum(len(ix) for ix in exact.values())
    return Candidate(
        spec=job(id, gpus, tenant=tenant, restart_s=restart_s, **spec),
        alloc=exact,
        run_start_s=now - ran_s,
        last_checkpoint_s=None if ckpt_ago_s is None else now - ckpt_ago_s,
        preemptions_last_day=preemptions,
        in_slice=in_slice,
    )


def load(name: str, guaranteed: int, held: int) -> TenantLoad:
    """A team as the preemption rule sees it: its guarantee and the GPUs it holds."""
    return TenantLoad(name, guaranteed, held)
