"""The head's reservation and the backfill rule that protects it.

The highest-ranked job that cannot start gets a reservation: the GPUs it will use and the
instant they are free, computed from the *declared* limits (``max_runtime_s``) of the jobs
running there, never from a formula on queue length. Other jobs may start meanwhile only
if they cannot delay it (:func:`backfill_allowed`). The basis is a sentence the user
reads: "reserved 4 nodes (32 GPUs) in pod-a from t=1000, when big-a reaches its declared
limit".
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field

from .capacity import Capacity, mask_of
from .placement import place_spec
from .types import Allocation, JobSpec, NodeHealth, alloc_gpus, written_init


@dataclass(frozen=True, slots=True)
class Release:
    """A running job's GPUs coming back at its declared limit."""

    end_s: int
    job_id: str
    alloc: Allocation

    def __init__(self, end_s: int, job_id: str, alloc: Allocation) -> None:
        self.end_s = end_s  # type: ignore[misc]
        self.job_id = job_id  # type: ignore[misc]
        self.alloc = alloc  # type: ignore[misc]


written_init(Release)


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: str
    start_s: int
    alloc: Allocation
    basis: str  # the sentence shown to the user
    after_job: str | None  # the release that makes it fit (None: fits now / after preemption)
    _masks: dict[str, int] | None = field(default=None, init=False, repr=False,
                                          compare=False)
    _gpus: int = field(default=-1, init=False, repr=False, compare=False)

    def __init__(self, job_id: str, start_s: int, alloc: Allocation, basis: str,
                 after_job: str | None) -> None:
        self.job_id = job_id  # type: ignore[misc]
        self.start_s = start_s  # type: ignore[misc]
        self.alloc = alloc  # type: ignore[misc]
        self.basis = basis  # type: ignore[misc]
        self.after_job = after_job  # type: ignore[misc]
        self._masks = None  # type: ignore[misc]
        self._gpus = -1  # type: ignore[misc]

    @property
    def masks(self) -> dict[str, int]:
        """node -> the GPUs as a bitmask (do not modify). A kept reservation is checked
        and booked at every tick: they are read once, when first asked (most plans, the
        look-ahead's, are never asked)."""
        masks = self._masks
        if masks is None:
            masks = {n: mask_of(ix) for n, ix in self.alloc.items()}
            object.__setattr__(self, "_masks", masks)
        return masks

    @property
    def gpus(self) -> int:
        """The GPUs held (counted once: the walk reads it for each booked reservation of a
        team, at each job of the team it examines)."""
        gpus = self._gpus
        if gpus < 0:
            gpus = alloc_gpus(self.alloc)
            object.__setattr__(self, "_gpus", gpus)
        return gpus


written_init(Reservation)


def unreserved(basis: str) -> str:
    """A plan's sentence for a start that holds no GPUs (a look-ahead's estimate): "would
    fit on 4 nodes ... from t=..., when ..." instead of "reserved 4 nodes ..."."""
    return "would fit on " + basis[len("reserved "):] if basis.startswith("reserved ") \
        else basis


def plan_reservation(
    cap: Capacity,
    spec: JobSpec,
    releases: Sequence[Release],
    now: int,
    *,
    exclude: Container[str] = frozenset(),
    mask_cache: dict[int, tuple[Release, list[tuple[str, int, int]]]] | None = None,
    presorted: bool = False,
) -> Reservation | None:
    """Where and when ``spec`` will fit if every running job ends at its declared limit.

    Gives ``releases`` back in (end_s, job_id) order inside a trial (``cap`` is left as it
    was) until the job fits; releases ending at the same instant count together. None if
    it does not fit even when every release is back (the GPUs it needs are held by jobs
    that declare no limit, or are down): its start cannot be promised.

    Cost: releases are given back one by one (cheap, O(1) each) and find_placement is not
    called until enough GPUs are free in aggregate; from there the search gallops
    (1, 2, 4, ... more groups) and then bisects, so a head behind thousands of running
    jobs costs O(log n) placements, not n. Groups are given back merged into one bitmask
    per node (one bucket move per node, not per release); ``mask_cache``, a dict the
    caller keeps while the releases and node health do not change (one tick), saves
    re-reading every release's indices in each of the tick's plans. ``presorted``: the
    caller passes ``releases`` already in (end_s, job_id) order (the scheduler's release
    index is), so they are grouped lazily and a plan reads only the releases it needs, not
    all of them; an out-of-order list then raises ValueError instead of planning wrong.
    """

    alloc = place_spec(cap, spec, exclude)
    if alloc is not None:
        return Reservation(
            spec.id,
            now,
            alloc,
            f"reserved {_where(cap, alloc, spec)} from t={now}: they are free now",
            after_job=None,
        )
    src = iter(releases if presorted else sorted(releases, key=lambda r: (r.end_s, r.job_id)))
    plan = _Groups(cap, spec, src, mask_cache)
    has, group, give, give_one_by_one = plan.has, plan.group, plan.give, plan.give_one_by_one
    groups = plan.groups
    need = spec.least_gpus

    with cap.trial():
        done = 0  # groups given back so far
        # Not a single placement while the aggregate says it cannot fit: count, then give
        # the groups back in one batch.
        free = cap.free_gpus(spec.gpu_type)
        while free < need and has(done):
            g = group(done)
            if g is None:
                give_one_by_one(0, done + 1)  # raises, naming the release
            free += g[1]  # type: ignore[index]
            done += 1
        if free >= need and spec.gpus_per_node is not None and spec.min_gpus is None:
            done = _enough_nodes(cap, spec, exclude, done, has, group)
        give(0, done)
        if cap.free_gpus(spec.gpu_type) < need:
            return None
        if done and (alloc := place_spec(cap, spec, exclude)) is not None:
            return _reserved(cap, spec, groups, done, alloc, now)
        # Gallop: find a prefix that fits, then bisect between the last failure and it.
        # A step that does not fit is kept (the next step starts from it); one that fits
        # is rolled back. The states tried are those of giving back a prefix, whatever
        # the path to them (the index does not depend on the order of give-backs).
        step = 1
        while has(done):
            hi = done + step if has(done + step - 1) else len(groups)
            mark = cap.mark()
            give(done, hi)
            if place_spec(cap, spec, exclude, materialise=False) is None:
                done = hi
                step *= 2
                continue
            cap.rollback(mark)
            lo = done  # fails with lo groups back (or it was never tried: lo = 0 fails too)
            while hi - lo > 1:  # invariant: fails at lo, fits at hi; lo groups are back
                mid = (lo + hi) // 2
                mark = cap.mark()
                give(lo, mid)
                if place_spec(cap, spec, exclude, materialise=False) is None:
                    lo = mid
                else:
                    hi = mid
                    cap.rollback(mark)
            give(lo, hi)
            alloc = place_spec(cap, spec, exclude)
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


class _Groups:
    """A plan's releases grouped by end instant, lazily, and given back to ``cap``.

    A class and not closures: compiled (mypyc), nested functions live in a cycle with
    their environment, which only the cyclic collector frees, and with it every copy of
    the cluster the plan read (a tenth of a compiled busy day went to the collector)."""

    def __init__(self, cap: Capacity, spec: JobSpec, src: Iterator[Release],
                 mask_cache: dict[int, tuple[Release, list[tuple[str, int, int]]]] | None
                 ) -> None:
        self.cap, self.spec, self.src, self.mask_cache = cap, spec, src, mask_cache
        self.groups: list[tuple[int, list[Release]]] = []
        self.peek: Release | None = next(src, None)
        # Each group as per-node bitmasks (None: malformed, left to give_one_by_one to
        # name) and the GPUs it frees in the aggregate free_gpus(spec.gpu_type) counts,
        # computed once per plan: the gallop gives the same groups back several times.
        self.merged: list[tuple[dict[str, int], int] | None] = []

    def has(self, i: int) -> bool:
        """Group ``i`` exists (grouping the releases up to it, lazily)."""
        groups, src = self.groups, self.src
        while len(groups) <= i:
            r = self.peek
            if r is None:
                return False
            rels = [r]
            nxt = next(src, None)
            while nxt is not None and nxt.end_s == r.end_s:
                if nxt.job_id < rels[-1].job_id:
                    raise ValueError(f"releases out of (end_s, job_id) order at {nxt.job_id}")
                rels.append(nxt)
                nxt = next(src, None)
            if nxt is not None and nxt.end_s < r.end_s:
                raise ValueError(f"releases out of (end_s, job_id) order at {nxt.job_id}")
            self.peek = nxt
            groups.append((r.end_s, rels))
        return True

    def give_one_by_one(self, lo: int, hi: int) -> None:
        for _end, rels in self.groups[lo:hi]:
            for r in rels:
                try:
                    self.cap.give_back(r.alloc)
                except ValueError as e:  # a caller's bug: say which release, not just where
                    raise ValueError(
                        f"release of {r.job_id} (end t={r.end_s}) gives back GPUs that are"
                        f" not held: {e}. Releases must be disjoint allocations held now."
                    ) from e

    def group(self, i: int) -> tuple[dict[str, int], int] | None:
        merged = self.merged
        while len(merged) <= i:
            merged.append(_merge(self.cap, self.groups[len(merged)][1], self.spec.gpu_type,
                                 self.mask_cache))
        return merged[i]

    def give(self, lo: int, hi: int) -> None:
        """Give groups [lo, hi) back in one batch: the same state as one by one."""
        batch: dict[str, int] = {}
        for i in range(lo, hi):
            g = self.group(i)
            if g is None:
                return self.give_one_by_one(lo, hi)  # raises, naming the release
            for name, m in g[0].items():
                old = batch.get(name, 0)
                if old & m:
                    return self.give_one_by_one(lo, hi)
                batch[name] = old | m
        try:
            self.cap.give_back_masks(batch)
        except ValueError:  # nothing was applied: replay one by one for the message
            self.give_one_by_one(lo, hi)
            raise


def _enough_nodes(
    cap: Capacity,
    spec: JobSpec,
    exclude: Container[str],
    done: int,
    has: Callable[[int], bool],
    group: Callable[[int], tuple[dict[str, int], int] | None],
) -> int:
    """The fewest groups (at least ``done``) after which enough nodes have
    ``gpus_per_node`` GPUs free for a shaped gang: a placement needs that many such nodes,
    so no shorter prefix can fit. Counted on bitmasks, without touching ``cap``: a
    whole-node gang behind thousands of releases finds the aggregate GPUs long before the
    whole nodes, and galloping that stretch would give it back step by step."""
    g = spec.gpus_per_node
    assert g is not None
    want = -(-spec.gpus // g)
    healthy = NodeHealth.HEALTHY
    gpu_type = spec.gpu_type
    nodes = cap.nodes
    back: dict[str, int] = {}  # node -> GPUs given back by the groups counted so far
    for i in range(done):
        got = group(i)
        if got is None:
            return done  # malformed: the caller's give-back names it
        for name, m in got[0].items():
            back[name] = back.get(name, 0) | m
    # the nodes a placement may use, and how many of them have enough free already, in
    # one pass (a set, not a nested function: see _Groups)
    usable: set[str] = set()
    enough = 0
    for name, node in nodes.items():
        if (node.health is healthy and node.gpus >= g and name not in exclude
                and (gpu_type is None or node.gpu_type == gpu_type)):
            usable.add(name)
            if (node.free_mask | back.get(name, 0)).bit_count() >= g:
                enough += 1
    while enough < want and has(done):
        got = group(done)
        if got is None:
            return done
        for name, m in got[0].items():
            old = back.get(name, 0)
            back[name] = old | m
            if name in usable:
                free_mask = nodes[name].free_mask
                if (free_mask | old).bit_count() < g <= (free_mask | old | m).bit_count():
                    enough += 1
        done += 1
    return done


def _merge(
    cap: Capacity,
    rels: list[Release],
    gpu_type: str | None,
    cache: dict[int, tuple[Release, list[tuple[str, int, int]]]] | None = None,
) -> tuple[dict[str, int], int] | None:
    """One group's releases as per-node bitmasks, and how many of its GPUs count as free
    for ``gpu_type`` once back (HEALTHY nodes only). None if malformed (unknown node,
    index out of range or repeated, releases overlapping): the caller replays it one by
    one, which raises the precise error."""
    out: dict[str, int] = {}
    counted = 0
    healthy = NodeHealth.HEALTHY
    nodes = cap.nodes
    for r in rels:
        hit = None if cache is None else cache.get(id(r))
        if hit is not None and hit[0] is r:
            masks = hit[1]
        else:
            found = _release_masks(cap, r)
            if found is None:
                return None
            masks = found
            if cache is not None:
                cache[id(r)] = (r, masks)  # keeps r alive: its id cannot be reused
        for name, m, n in masks:
            old = out.get(name, 0)
            if old & m:
                return None
            out[name] = old | m
            node = nodes[name]
            if node.health is healthy and (gpu_type is None or node.gpu_type == gpu_type):
                counted += n
    return out, counted


def _release_masks(cap: Capacity, r: Release) -> list[tuple[str, int, int]] | None:
    """(node, bitmask, GPUs) per node of a release; None if malformed."""
    out = []
    for name, indices in r.alloc.items():
        node = cap.nodes.get(name)
        if node is None:
            return None
        m = 0
        for i in indices:
            if not 0 <= i < node.gpus:
                return None
            m |= 1 << i
        n = m.bit_count()
        if n != len(indices):
            return None
        out.append((name, m, n))
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
    gpus = alloc_gpus(alloc)
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
