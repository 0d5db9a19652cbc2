"""Where a gang fits: all its GPUs in one decision, or nothing.

Rules, in the order they decide (DESIGN.md, issue 3):

1. **Shape.** ``gpus_per_node=g``: exactly g GPUs on each node used, so ``gpus`` must be a
   multiple of g. No shape: any split, fewest nodes first.
2. **Topology.** Inside one pod when any pod can hold the whole gang; otherwise the fewest
   pods (the pods with the most room, then the best-fitting pod for the remainder).
3. **Best fit.** Among the pods (or nodes) that can hold it, the one that breaks the fewest
   whole free nodes, then wastes the fewest GPUs on the nodes it uses, then leaves the
   least room behind (so big holes stay big), then the lowest pod name. Inside a pod,
   partial nodes with the fewest free GPUs that still hold the part go first and whole
   free nodes last, so small jobs pack onto already-partial nodes and whole nodes stay
   free for gangs. A whole-node gang (g = node size, or no shape and a multiple of it)
   thus lands on whole free nodes. A job that one node can hold goes to the best-fitting
   node of the whole cluster (fewest free GPUs that still hold it, partial before whole,
   then the lowest pod and node name): one node is one pod whichever it is.
4. **Exact GPUs.** Lowest free indices first on each node; nodes in name order within a
   bucket. Every tie is broken by a sorted key: the result is deterministic.
5. **Elastic.** With ``min_gpus`` the job gets the largest size in [min_gpus, gpus] that
   fits (a multiple of g when shaped).

Cost: the search reads the per-pod buckets of :class:`~.capacity.Capacity` (a handful of
bitmask counts per pod), never the nodes, and only materialises the nodes it returns.
``exclude`` and ``only`` cost O(their size).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container
from dataclasses import dataclass
from functools import partial

from .capacity import Capacity, PodIndex, indices_of, lowest_bits
from .types import Allocation, JobSpec


@dataclass(slots=True)
class _Entry:
    """One non-empty bucket of one pod, as the request sees it (filters applied)."""

    pod: PodIndex
    gpu_type: str | None
    size: int  # GPUs per node
    free: int  # free GPUs on each of its nodes
    mask: int  # the pod's nodes in this bucket (filters applied)
    count: int

    @property
    def whole(self) -> bool:
        return self.free == self.size

    def fit_order(self) -> tuple[bool, int, int, str]:
        # best fit: partial before whole, then fewest free, then deterministic
        return (self.whole, self.free, self.size, self.gpu_type or "")


@dataclass(slots=True)
class _PodView:
    pod: PodIndex
    entries: list[_Entry]  # sorted by fit_order
    free: int  # free GPUs in the pod (filters applied)


# A per-pod plan: (entry, nodes, gpus on each of those nodes), taken in entry member order.
_Pick = tuple[_Entry, int, int]


def find_placement(
    cap: Capacity,
    *,
    gpus: int,
    gpus_per_node: int | None = None,
    gpu_type: str | None = None,
    min_gpus: int | None = None,
    exclude: Container[str] = frozenset(),
    only: Collection[str] | None = None,
    materialise: bool = True,
) -> Allocation | None:
    """The allocation for a gang of ``gpus`` GPUs, or None if it does not fit now.

    ``materialise=False``: only whether it fits; a fit returns an empty dict instead of
    the GPU indices (searches that try many states, like the reservation planner's
    gallop, need the indices of the last one only; building them is half the cost).

    Never mutates ``cap``. Uses HEALTHY nodes only. ``exclude``: node names not to use;
    ``only``: if set, use nothing else. Raises ValueError for a request that can never be
    well formed (non-positive sizes, ``gpus`` not a multiple of the shape).
    """
    if gpus <= 0:
        raise ValueError(f"gpus must be positive, got {gpus}")
    if gpus_per_node is not None and gpus_per_node <= 0:
        raise ValueError(f"gpus_per_node must be positive, got {gpus_per_node}")
    low = gpus if min_gpus is None else min_gpus
    if not 0 < low <= gpus:
        raise ValueError(f"min_gpus must be in [1, gpus={gpus}], got {min_gpus}")
    g = gpus_per_node
    if g is not None:
        if low == gpus and gpus % g:
            raise ValueError(f"gpus={gpus} is not a multiple of gpus_per_node={g}")
        low = -(-low // g) * g  # elastic sizes are whole multiples of the shape
        gpus = gpus // g * g
        if low > gpus:
            return None

    # Cheap refusal before looking at any pod: the aggregate is O(1).
    if cap.free_gpus(gpu_type) < low:
        return None

    allowed, banned = _filters(cap, exclude, only)
    if low == gpus and (g is None or g == gpus):
        # One node would do: the best-fitting node of the cluster, found from the bucket
        # keys (a few dozen) instead of the pods. When no node holds it, an unshaped job
        # falls through to the multi-node search.
        single = _best_single_node(cap, gpus, gpu_type, allowed, banned)
        if single is not None or g is not None:
            return single

    views = _pod_views(cap, gpu_type, g or 1, allowed, banned)
    if not views:
        return None

    if g is None:
        room = sum(v.free for v in views)
        size = min(gpus, room)
        if size < low:
            return None
        plan = _plan_split(views, size)
    else:
        room_nodes = sum(_nodes_for_shape(v, g) for v in views)
        size = min(gpus, room_nodes * g)
        if size < low:
            return None
        plan = _plan_shaped(views, g, size // g)
    if plan is None:
        return None
    if not materialise:
        return {} if plan else None  # what _materialise would say, without the indices
    return _materialise(cap, plan)


def place_spec(cap: Capacity, spec: JobSpec, exclude: Container[str] = frozenset(),
               only: Collection[str] | None = None, materialise: bool = True
               ) -> Allocation | None:
    """:func:`find_placement` for a job's own shape (GPUs, per node, type, elastic
    minimum)."""
    return find_placement(cap, gpus=spec.gpus, gpus_per_node=spec.gpus_per_node,
                          gpu_type=spec.gpu_type, min_gpus=spec.min_gpus, exclude=exclude,
                          only=only, materialise=materialise)


# ---- the view of the index that the request sees -----------------------------------------


def _filters(
    cap: Capacity, exclude: Container[str], only: Collection[str] | None
) -> tuple[dict[str, int] | None, dict[str, int]]:
    """``only`` and ``exclude`` as per-pod node bitmasks: (allowed or None: all, banned).

    Memoised per (exclude, only) when both are frozensets: the tick passes the same few
    sets to thousands of placements, and building the masks walks every name in them.
    The masks depend on node names and pod ordinals only, which never change.
    """
    if not isinstance(exclude, frozenset) or not (only is None or isinstance(only, frozenset)):
        return _build_filters(cap, exclude, only)
    key = (exclude, only)
    cache = cap.filter_cache
    found = cache.get(key)
    if found is None:
        if len(cache) > 64:
            cache.clear()
        found = cache[key] = _build_filters(cap, exclude, only)
    return found  # type: ignore[return-value]


def _build_filters(
    cap: Capacity, exclude: Container[str], only: Collection[str] | None
) -> tuple[dict[str, int] | None, dict[str, int]]:
    allowed: dict[str, int] | None = None
    if only is not None:
        allowed = {}
        for name in only:
            node = cap.nodes.get(name)
            if node is not None:
                pod = cap.pods[node.pod]
                allowed[node.pod] = allowed.get(node.pod, 0) | (1 << pod.ordinal[name])
    banned: dict[str, int] = {}
    if exclude:
        if isinstance(exclude, Collection):
            names = exclude
        else:  # a bare Container cannot be iterated: ask it about each node (rare)
            names = [n for n in cap.nodes if n in exclude]
        for name in names:
            node = cap.nodes.get(name)
            if node is not None:  # unhealthy nodes are in no bucket: banning them is moot
                pod = cap.pods[node.pod]
                banned[node.pod] = banned.get(node.pod, 0) | (1 << pod.ordinal[name])
    return allowed, banned


def _best_single_node(
    cap: Capacity,
    gpus: int,
    gpu_type: str | None,
    allowed: dict[str, int] | None,
    banned: dict[str, int],
) -> Allocation | None:
    """Best fit over the whole cluster: partial before whole, fewest free GPUs that still
    hold ``gpus``, then the lowest pod name, then the lowest node name."""
    pods = cap.pod_list
    for key in cap.keys_best_fit_first():
        t, _size, free = key
        if free < gpus or (gpu_type is not None and t != gpu_type):
            continue
        pod_mask = cap.key_pods[key]
        while pod_mask:
            low = pod_mask & -pod_mask
            pod_mask ^= low
            pod = pods[low.bit_length() - 1]
            m = pod.buckets[key]
            if allowed is not None:
                m &= allowed.get(pod.name, 0)
            if banned:
                m &= ~banned.get(pod.name, 0)
            if m:
                name = pod.names[(m & -m).bit_length() - 1]
                return {name: indices_of(lowest_bits(cap.nodes[name].free_mask, gpus))}
    return None


def _pod_views(
    cap: Capacity,
    gpu_type: str | None,
    min_free: int,
    allowed: dict[str, int] | None,
    banned: dict[str, int],
) -> list[_PodView]:
    """Per pod, its non-empty buckets with free >= ``min_free``, filters applied."""
    views = []
    pods = cap.pods if allowed is None else {p: cap.pods[p] for p in sorted(allowed)}
    for name, pod in pods.items():
        keep = -1 if allowed is None else allowed[name]
        keep &= ~banned.get(name, 0)
        entries = []
        free = 0
        for (t, size, nfree), mask in pod.buckets.items():
            if nfree < min_free or (gpu_type is not None and t != gpu_type):
                continue
            m = mask & keep
            if m:
                c = m.bit_count()
                entries.append(_Entry(pod, t, size, nfree, m, c))
                free += c * nfree
        if entries:
            entries.sort(key=_Entry.fit_order)
            views.append(_PodView(pod, entries, free))
    return views


def _nodes_for_shape(view: _PodView, g: int) -> int:
    return sum(e.count for e in view.entries if e.free >= g)


def nodes_with_room(cap: Capacity, gpus: int, gpu_type: str | None,
                    exclude: Container[str] = frozenset()) -> int:
    """Nodes with at least ``gpus`` free GPUs now, of ``gpu_type`` (None: any), that
    ``find_placement`` may use (healthy, not excluded). O(pods x buckets)."""
    allowed, banned = _filters(cap, exclude, None)
    return sum(_nodes_for_shape(v, gpus)
               for v in _pod_views(cap, gpu_type, gpus, allowed, banned))


# ---- shaped gangs: n nodes of exactly g GPUs ---------------------------------------------


def _shaped_in_pod(view: _PodView, g: int, n: int) -> tuple[tuple[int, ...], list[_Pick]]:
    """Best-fit picks of ``n`` nodes in one pod and their score (lower is better)."""
    need, broken, waste, picks = n, 0, 0, []
    for e in view.entries:
        if need == 0:
            break
        if e.free < g:
            continue
        t = min(e.count, need)
        picks.append((e, t, g))
        need -= t
        if e.whole and g < e.size:
            broken += t
        waste += t * (e.free - g)
    assert need == 0
    return (broken, waste, _nodes_for_shape(view, g) - n), picks


def _plan_shaped(views: list[_PodView], g: int, n: int) -> list[_Pick] | None:
    room = {v.pod.name: _nodes_for_shape(v, g) for v in views}
    fitting = [v for v in views if room[v.pod.name] >= n]
    if fitting:
        return _best(fitting, lambda v: _shaped_in_pod(v, g, n))
    # Fewest pods: the pods with the most room first; the last part goes to the pod that
    # fits it best among the rest.
    order = sorted(views, key=lambda v: (-room[v.pod.name], v.pod.name))
    plan: list[_Pick] = []
    need = n
    for i, v in enumerate(order):
        if room[v.pod.name] >= need:
            rest = [w for w in order[i:] if room[w.pod.name] >= need]
            return plan + _best(rest, partial(_shaped_in_pod, g=g, n=need))
        plan += _shaped_in_pod(v, g, room[v.pod.name])[1]
        need -= room[v.pod.name]
    return None


# ---- no shape: any split, fewest nodes ---------------------------------------------------


def _split_in_pod(view: _PodView, gpus: int) -> tuple[tuple[int, ...], list[_Pick]] | None:
    """Fewest nodes of one pod holding ``gpus``: the fullest nodes whole while no single
    node can hold the rest, then the best-fitting node for the rest."""
    left = {id(e): e.count for e in view.entries}
    rem, picks, broken, waste, used = gpus, [], 0, 0, 0
    while rem:
        cover = next((e for e in view.entries if e.free >= rem and left[id(e)]), None)
        if cover is not None:
            picks.append((cover, 1, rem))
            used += 1
            left[id(cover)] -= 1
            waste = cover.free - rem
            broken = int(cover.whole and rem < cover.free)
            break
        big = max(
            (e for e in view.entries if left[id(e)]),
            key=lambda e: (e.free, not e.whole, e.size),
            default=None,
        )
        if big is None:
            return None
        t = min(left[id(big)], (rem - 1) // big.free)
        picks.append((big, t, big.free))
        left[id(big)] -= t
        used += t
        rem -= t * big.free
    return (used, broken, waste, view.free - gpus), picks


def _plan_split(views: list[_PodView], gpus: int) -> list[_Pick] | None:
    fitting = [v for v in views if v.free >= gpus]
    if fitting:
        return _best(fitting, lambda v: _split_in_pod(v, gpus))
    order = sorted(views, key=lambda v: (-v.free, v.pod.name))
    plan: list[_Pick] = []
    need = gpus
    for i, v in enumerate(order):
        if v.free >= need:
            rest = [w for w in order[i:] if w.free >= need]
            return plan + _best(rest, partial(_split_in_pod, gpus=need))
        plan += [(e, e.count, e.free) for e in v.entries]  # the whole pod
        need -= v.free
    return None


# ---- shared --------------------------------------------------------------------------


_Scored = tuple[tuple[int, ...], list[_Pick]] | None


def _best(views: list[_PodView], score_of: Callable[[_PodView], _Scored]) -> list[_Pick]:
    """The picks of the pod with the lowest (score, pod name)."""
    best_key: tuple[object, ...] | None = None
    best: list[_Pick] = []
    for v in views:
        scored = score_of(v)
        if scored is None:
            continue
        score, picks = scored
        key = (*score, v.pod.name)
        if best_key is None or key < best_key:
            best_key, best = key, picks
    return best


def _materialise(cap: Capacity, plan: list[_Pick]) -> Allocation | None:
    if not plan:
        return None
    alloc: Allocation = {}
    taken: dict[int, int] = {}  # id(entry) -> members already used (a bucket may be hit twice)
    for entry, nodes, per_node in plan:
        if nodes == 0:
            continue
        skip = taken.get(id(entry), 0)
        taken[id(entry)] = skip + nodes
        mask = entry.mask
        if skip:
            mask &= ~lowest_bits(mask, skip)
        for name in entry.pod.members(lowest_bits(mask, nodes)):
            node = cap.nodes[name]
            alloc[name] = indices_of(lowest_bits(node.free_mask, per_node))
    return dict(sorted(alloc.items()))
