"""The seed's "naive tick", as the baseline the indexed tick is measured against.

    naive tick: scan 80,000 queued jobs, try to place each -> O(jobs x nodes) per tick

Every queued job, in priority-then-age order, is tried against every node in name order,
first fit, all-or-nothing (so the baseline is not also wrong: a partial gang would
deadlock). No index, no per-pod summary, no early exit on a full cluster: that is what
makes it naive. It works on a snapshot (free GPUs per node), so it can be timed on the
very state the real tick saw, without changing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler_app.core.states import JobState
from scheduler_app.core.types import JobSpec, NodeHealth


@dataclass(frozen=True, slots=True)
class NaiveJob:
    id: str
    gpus: int
    gpus_per_node: int | None


@dataclass(frozen=True, slots=True)
class NaiveSnapshot:
    jobs: tuple[NaiveJob, ...]  # queued, in priority-then-age order
    free: tuple[int, ...]  # free GPUs per schedulable node, in name order


@dataclass(frozen=True, slots=True)
class NaiveOutcome:
    placed: int
    examined: int
    seconds: float
    complete: bool  # False: stopped at the deadline, ``seconds`` is extrapolated

    @property
    def ms(self) -> float:
        return self.seconds * 1000.0


def snapshot(sched: object) -> NaiveSnapshot:
    """The queued jobs and free GPUs of a core ``Scheduler`` (read-only)."""
    jobs: list[JobSpec] = [
        rec.spec for rec in sched.jobs.values()  # type: ignore[attr-defined]
        if rec.state == JobState.QUEUED
    ]
    jobs.sort(key=lambda s: (-s.priority, s.submit_s, s.seq))
    nodes = sched.cap.nodes  # type: ignore[attr-defined]
    free = tuple(nodes[n].free for n in sorted(nodes) if nodes[n].health == NodeHealth.HEALTHY)
    return NaiveSnapshot(
        jobs=tuple(NaiveJob(s.id, s.gpus, s.gpus_per_node) for s in jobs), free=free
    )


def naive_tick(snap: NaiveSnapshot, *, deadline_s: float | None = None,
               clock: Callable[[], float] = time.perf_counter) -> NaiveOutcome:
    """Try every queued job on every node, first fit. Returns how long it took.

    ``deadline_s`` bounds the benchmark, not the algorithm: past it, the scan stops and the
    time is extrapolated linearly over the jobs not yet examined (``complete`` False).
    """
    free = list(snap.free)
    started = clock()
    placed = 0
    examined = 0
    for job in snap.jobs:
        examined += 1
        if _first_fit(free, job.gpus, job.gpus_per_node):
            placed += 1
        if deadline_s is not None and examined % 256 == 0 and clock() - started > deadline_s:
            elapsed = clock() - started
            return NaiveOutcome(placed, examined, elapsed * len(snap.jobs) / examined, False)
    return NaiveOutcome(placed, examined, clock() - started, True)


def _first_fit(free: list[int], gpus: int, per_node: int | None) -> bool:
    """All-or-nothing first fit over every node; commits into ``free`` when it fits."""
    taken: list[tuple[int, int]] = []
    need = gpus
    for i, f in enumerate(free):
        if per_node is None:
            if f:
                take = min(f, need)
                taken.append((i, take))
                need -= take
        elif f >= per_node:
            taken.append((i, per_node))
            need -= per_node
        if need <= 0:
            for j, take in taken:
                free[j] -= take
            return True
    return False


def naive_ms_on(jobs: Sequence[NaiveJob], free: Sequence[int]) -> float:
    """Convenience for tests and notebooks: one complete naive tick, in milliseconds."""
    return naive_tick(NaiveSnapshot(tuple(jobs), tuple(free))).ms
