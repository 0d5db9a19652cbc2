"""The head's reservation and the backfill rule that protects it.

The highest-ranked job that cannot start gets a reservation: the GPUs it will use and the
instant they are free, computed from the *declared* limits (``max_runtime_s``) of the jobs
running there, never from a formula on queue length. Other jobs may start meanwhile only
if they cannot delay it (:func:`backfill_allowed`). The basis is a sentence the user
reads: "reserved 4 nodes (32 GPUs) in pod-a from t=1000, when big-a reaches its declared
limit".
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

from .capacity import Capacity
from .placement import find_placement
from .types import Allocation, JobSpec


@dataclass(frozen=True, slots=True)
class Release:
    """A running job's GPUs coming back at its declared limit."""

    end_s: int
    job_id: str
    alloc: Allocation


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: str
    start_s: int
    alloc: Allocation
    basis: str  # the sentence shown to the user
    after_job: str | None  # the release that makes it fit (None: fits now / after preemption)

    @property
    def gpus(self) -> int:
        return sum(len(ix) for ix in self.alloc.values())


def plan_reservation(
    cap: Capacity,
    spec: JobSpec,
    releases: Sequence[Release],
    now: int,
    *,
    exclude: Container[str] = frozenset(),
) -> Reservation | None:
    """Where and when ``spec`` will fit if every running job ends at its declared limit.

    Gives ``releases`` back in (end_s, job_id) order inside a trial (``cap`` is left as it
    was) until the job fits; releases ending at the same instant count together. None if
    it does not fit even when every release is back (the GPUs it needs are held by jobs
    that declare no limit, or are down): its start cannot be promised.

    Cost: releases are given back one by one (cheap, O(1) each) and find_placement is not
    called until enough GPUs are free in aggregate; from there the search gallops
    (1, 2, 4, ... more groups) and then bisects, so a head behind thousands of running
    jobs costs O(log n) placements, not n.
    """

    def place() -> Allocation | None:
        return find_placement(
            cap,
            gpus=spec.gpus,
            gpus_per_node=spec.gpus_per_node,
            gpu_type=spec.gpu_type,
            min_gpus=spec.min_gpus,
            exclude=exclude,
        )

    alloc = place()
    if alloc is not None:
        return Reservation(
            spec.id,
            now,
            alloc,
            f"reserved {_where(cap, alloc, spec)} from t={now}: they are free now",
            after_job=None,
        )

    groups = _groups(releases)
    need = spec.min_gpus if spec.min_gpus is not None else spec.gpus

    def give(lo: int, hi: int) -> None:
        for _end, rels in groups[lo:hi]:
            for r in rels:
                try:
                    cap.give_back(r.alloc)
                except ValueError as e:  # a caller's bug: say which release, not just where
                    raise ValueError(
                        f"release of {r.job_id} (end t={r.end_s}) gives back GPUs that are"
                        f" not held: {e}. Releases must be disjoint allocations held now."
                    ) from e

    with cap.trial():
        done = 0  # groups given back so far
        # Not a single placement while the aggregate says it cannot fit.
        while done < len(groups) and cap.free_gpus(spec.gpu_type) < need:
            give(done, done + 1)
            done += 1
        if cap.free_gpus(spec.gpu_type) < need:
            return None
        if done and (alloc := place()) is not None:
            return _reserved(cap, spec, groups, done, alloc, now)
        # Gallop: find a prefix that fits, then bisect between the last failure and it.
        step = 1
        while done < len(groups):
            hi = min(len(groups), done + step)
            with cap.trial():
                give(done, hi)
                fits = place() is not None
            if not fits:
                give(done, hi)
                done = hi
                step *= 2
                continue
            lo = done  # fails with lo groups back (or it was never tried: lo = 0 fails too)
            while hi - lo > 1:  # invariant: fails at lo, fits at hi
                mid = (lo + hi) // 2
                with cap.trial():
                    give(done, mid)
                    fits = place() is not None
                if fits:
                    hi = mid
                else:
                    lo = mid
            give(done, hi)
            alloc = place()
            assert alloc is not None  # same state as the trial that fitted
            return _reserved(cap, spec, groups, hi, alloc, now)
    return None


def backfill_allowed(res: Reservation, alloc: Allocation, end_s: int | None) -> bool:
    """True if a job placed at ``alloc`` cannot delay ``res``.

    Either it declares a limit and ends by the reserved start (``end_s`` is its declared
    end: start + max_runtime_s), or it uses none of the GPUs the reservation needs. A job
    with no declared limit may only use GPUs outside the reservation.
    """
    if end_s is not None and end_s <= res.start_s:
        return True
    for name, indices in alloc.items():
        reserved = res.alloc.get(name)
        if reserved and not set(reserved).isdisjoint(indices):
            return False
    return True


# ---- helpers -------------------------------------------------------------------------


def _groups(releases: Sequence[Release]) -> list[tuple[int, list[Release]]]:
    """Releases grouped by end instant, in (end_s, job_id) order."""
    out: list[tuple[int, list[Release]]] = []
    for r in sorted(releases, key=lambda r: (r.end_s, r.job_id)):
        if out and out[-1][0] == r.end_s:
            out[-1][1].append(r)
        else:
            out.append((r.end_s, [r]))
    return out


def _reserved(
    cap: Capacity,
    spec: JobSpec,
    groups: list[tuple[int, list[Release]]],
    upto: int,
    alloc: Allocation,
    now: int,
) -> Reservation:
    end_s, last = groups[upto - 1]
    start = max(end_s, now)
    last_ids = [r.job_id for r in last]
    earlier = sum(len(rels) for _e, rels in groups[: upto - 1])
    basis = f"reserved {_where(cap, alloc, spec)} from t={start}, when {_who(last_ids)}"
    if earlier:
        ends = "job ends by its limit" if earlier == 1 else "jobs end by their limits"
        basis += f" (after {earlier} earlier {ends})"
    return Reservation(spec.id, start, alloc, basis, after_job=last_ids[-1])


def _where(cap: Capacity, alloc: Allocation, spec: JobSpec) -> str:
    gpus = sum(len(ix) for ix in alloc.values())
    pods = sorted({cap.nodes[n].pod for n in alloc})
    in_pods = f"in {pods[0]}" if len(pods) == 1 else f"across {len(pods)} pods ({', '.join(pods)})"
    size = f"{gpus} GPUs" if gpus == spec.gpus else f"{gpus} of {spec.gpus} GPUs (elastic)"
    return f"{len(alloc)} {_plural(len(alloc), 'node')} ({size}) {in_pods}"


def _who(job_ids: list[str]) -> str:
    if len(job_ids) == 1:
        return f"{job_ids[0]} reaches its declared limit"
    if len(job_ids) == 2:
        return f"{job_ids[0]} and {job_ids[1]} reach their declared limits"
    others = len(job_ids) - 1
    return f"{job_ids[0]} and {others} other jobs reach their declared limits"


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"
