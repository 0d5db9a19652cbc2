"""The free-capacity index: which GPUs are free, where, on which kind of node.

The seed's tick asks "where does this gang fit?" thousands of times per tick on a
2,048-node cluster, so nothing here scans every node per call:

* per pod, healthy nodes are kept in *buckets* keyed by (gpu type, node size, free GPUs).
  A bucket is an int bitmask over the pod's nodes (bit i = the pod's i-th node by name),
  so membership moves in O(1), counting is ``bit_count()`` and the lowest-named members
  come out in name order without sorting. The bucket whose free count equals the node
  size holds the pod's *whole free nodes*; the others are the *partial nodes*.
* GPU indices per node are a bitmask too (``NodeState.free_mask``).
* aggregates (free, healthy, total GPUs per type and overall) are updated with every
  change, so reading them is O(1).

Only HEALTHY nodes are in buckets and count as free: a DRAINING node keeps running its
jobs but takes nothing new; a DOWN node offers nothing. Jobs can still give GPUs back on
either (the scheduler requeues a dead node's jobs), which updates the node's mask.

``trial()`` is the what-if of the preemption search and the reservation planner: every
change made inside the block is journaled and undone, newest first, when it exits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from .types import Allocation, NodeHealth, NodeSpec, written_init

#: (gpu type, node size, free GPUs on the node)
BucketKey = tuple[str | None, int, int]

_ALL = object()  # aggregate key for "any GPU type" (None is a real type: untyped nodes)


@dataclass(slots=True)
class NodeState:
    name: str
    pod: str
    gpus: int
    gpu_type: str | None
    rail: int
    health: NodeHealth
    free_mask: int  # bit i set = GPU i free

    def __init__(self, name: str, pod: str, gpus: int, gpu_type: str | None, rail: int,
                 health: NodeHealth, free_mask: int) -> None:
        self.name = name
        self.pod = pod
        self.gpus = gpus
        self.gpu_type = gpu_type
        self.rail = rail
        self.health = health
        self.free_mask = free_mask

    @property
    def free(self) -> int:
        """Number of free GPUs (whatever the health)."""
        return self.free_mask.bit_count()

    @property
    def full_mask(self) -> int:
        return (1 << self.gpus) - 1

    @property
    def whole_free(self) -> bool:
        return self.free_mask == self.full_mask


written_init(NodeState)


def mask_of(indices: Iterable[int]) -> int:
    m = 0
    for i in indices:
        m |= 1 << i
    return m


def indices_of(mask: int) -> tuple[int, ...]:
    """The set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def lowest_bits(mask: int, n: int) -> int:
    """The ``n`` lowest set bits of ``mask`` (fewer if it has fewer)."""
    out = 0
    while mask and n:
        low = mask & -mask
        out |= low
        mask ^= low
        n -= 1
    return out


class PodIndex:
    """One pod's nodes in name order and its buckets of healthy nodes."""

    __slots__ = ("name", "index", "names", "ordinal", "buckets")

    def __init__(self, name: str, index: int, node_names: Iterable[str]) -> None:
        self.name = name
        self.index = index  # position among the pods sorted by name
        self.names: list[str] = sorted(node_names)
        self.ordinal: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.buckets: dict[BucketKey, int] = {}

    def add(self, key: BucketKey, node: str) -> bool:
        """Put ``node`` in bucket ``key``; True if the bucket was empty before."""
        old = self.buckets.get(key, 0)
        self.buckets[key] = old | (1 << self.ordinal[node])
        return not old

    def remove(self, key: BucketKey, node: str) -> bool:
        """Take ``node`` out of bucket ``key``; True if the bucket is empty now."""
        m = self.buckets[key] & ~(1 << self.ordinal[node])
        if m:
            self.buckets[key] = m
            return False
        del self.buckets[key]  # keeps the key set small: only non-empty buckets
        return True

    def members(self, mask: int) -> Iterator[str]:
        """Node names of the set bits of ``mask``, in name order."""
        names = self.names
        while mask:
            low = mask & -mask
            yield names[low.bit_length() - 1]
            mask ^= low

    def clone(self) -> PodIndex:
        """A copy whose buckets change independently (names and ordinals are shared:
        they never change)."""
        c = PodIndex(self.name, self.index, ())  # (no __new__: mypyc's classes need __init__)
        c.name, c.index, c.names, c.ordinal = self.name, self.index, self.names, self.ordinal
        c.buckets = dict(self.buckets)
        return c

    def mask_of_names(self, names: Iterable[str]) -> int:
        m = 0
        for n in names:
            i = self.ordinal.get(n)
            if i is not None:
                m |= 1 << i
        return m


def _bucket_key(node: NodeState) -> BucketKey:
    return (node.gpu_type, node.gpus, node.free)


def best_fit_order(key: BucketKey) -> tuple[bool, int, int, str]:
    gpu_type, size, free = key
    return (free == size, free, size, gpu_type or "")


# journal entries: (kind, node name, argument)
_TAKE, _GIVE, _HEALTH = "take", "give", "health"


class Capacity:
    """Free GPUs of the cluster, indexed for placement, with what-if trials."""

    def __init__(self, nodes: Iterable[NodeSpec]) -> None:
        self.nodes: dict[str, NodeState] = {}
        by_pod: dict[str, list[str]] = {}
        for spec in nodes:
            if spec.name in self.nodes:
                raise ValueError(f"node {spec.name}: listed twice")
            if spec.gpus <= 0:
                raise ValueError(f"node {spec.name}: gpus must be positive, got {spec.gpus}")
            self.nodes[spec.name] = NodeState(
                name=spec.name,
                pod=spec.pod,
                gpus=spec.gpus,
                gpu_type=spec.gpu_type,
                rail=spec.rail,
                health=NodeHealth(spec.health),
                free_mask=(1 << spec.gpus) - 1,
            )
            by_pod.setdefault(spec.pod, []).append(spec.name)
        self.pods: dict[str, PodIndex] = {
            p: PodIndex(p, i, by_pod[p]) for i, p in enumerate(sorted(by_pod))
        }
        self.pod_list: list[PodIndex] = list(self.pods.values())
        # bucket key -> bitmask of the pods (by PodIndex.index) whose bucket is non-empty:
        # answers "who has a node with k free GPUs?" without visiting every pod.
        self.key_pods: dict[BucketKey, int] = {}
        self._keys_sorted: list[BucketKey] | None = None
        #: placement's per-pod masks of exclude/only sets (names and ordinals never change)
        self.filter_cache: dict[object, object] = {}
        self._free: dict[object, int] = {}
        self._healthy: dict[object, int] = {}
        self._total: dict[object, int] = {}
        self._max_per_node: dict[object, int] = {}
        self._pod_total: dict[tuple[str, object], int] = {}
        for node in self.nodes.values():
            for key in (_ALL, node.gpu_type):
                self._total[key] = self._total.get(key, 0) + node.gpus
                pk = (node.pod, key)
                self._pod_total[pk] = self._pod_total.get(pk, 0) + node.gpus
                self._max_per_node[key] = max(self._max_per_node.get(key, 0), node.gpus)
            if node.health == NodeHealth.HEALTHY:
                self._enter(node)
        self.gpu_types: tuple[str | None, ...] = tuple(
            sorted({n.gpu_type for n in self.nodes.values()}, key=lambda t: (t is not None, t))
        )
        self._journal: list[tuple[str, str, object]] | None = None
        #: the nodes whose NodeState no clone shares (None: all of them); see clone()
        self._owned: set[str] | None = None

    def clone(self) -> Capacity:
        """An independent copy of the free GPUs and their index, for planning against a
        frozen picture of the cluster over several ticks (the look-ahead round). O(nodes)
        with small constants; the per-pod filter cache is shared (names never change).

        Copy on write: the two share every NodeState until one of them changes a node
        (``_own`` copies it first), so a clone that changes a few nodes, as each tick's
        picture does, copies only those (copying 2,048 node objects was 3 ms a tick)."""
        if self._journal is not None:
            raise RuntimeError("clone() inside a trial: the copy would keep its changes")
        c = Capacity(())  # an empty cluster, filled in below (mypyc's classes need __init__)
        c.nodes = dict(self.nodes)
        c._owned = set()
        self._owned = set()  # every node object is now shared with the clone
        c.pods = {p: pod.clone() for p, pod in self.pods.items()}
        c.pod_list = list(c.pods.values())
        c.key_pods = dict(self.key_pods)
        c._keys_sorted = None
        c.filter_cache = self.filter_cache
        c._free = dict(self._free)
        c._healthy = dict(self._healthy)
        c._total = self._total  # never changes after __init__
        c._max_per_node = self._max_per_node
        c._pod_total = self._pod_total
        c.gpu_types = self.gpu_types
        c._journal = None
        return c

    # ---- aggregates (O(1)) -------------------------------------------------------------

    def free_gpus(self, gpu_type: str | None = None) -> int:
        """Free GPUs on HEALTHY nodes (of ``gpu_type``; None: any type)."""
        return self._free.get(_ALL if gpu_type is None else gpu_type, 0)

    def healthy_gpus(self, gpu_type: str | None = None) -> int:
        """All GPUs of HEALTHY nodes, used or not."""
        return self._healthy.get(_ALL if gpu_type is None else gpu_type, 0)

    def total_gpus(self, gpu_type: str | None = None) -> int:
        """All GPUs whatever the health: what a job can ever hope for (NeverFits)."""
        return self._total.get(_ALL if gpu_type is None else gpu_type, 0)

    def max_gpus_per_node(self, gpu_type: str | None = None) -> int:
        return self._max_per_node.get(_ALL if gpu_type is None else gpu_type, 0)

    def pod_gpus(self, pod: str, gpu_type: str | None = None) -> int:
        """All GPUs of ``pod`` (of ``gpu_type``), whatever the health: can it ever hold X?"""
        return self._pod_total.get((pod, _ALL if gpu_type is None else gpu_type), 0)

    # ---- changes -----------------------------------------------------------------------

    def take(self, alloc: Allocation) -> None:
        """Mark exactly these GPU indices used. All or nothing: ValueError if any is not free."""
        masks = self._masks(alloc)
        for name, m in masks:
            node = self.nodes[name]
            if node.free_mask & m != m:
                busy = indices_of(m & ~node.free_mask)
                raise ValueError(f"node {name}: GPUs {list(busy)} are not free")
        for name, m in masks:
            self._apply(name, -m)
            if self._journal is not None:
                self._journal.append((_TAKE, name, m))

    def give_back(self, alloc: Allocation) -> None:
        """The reverse of take. All or nothing: ValueError if any index is already free."""
        masks = self._masks(alloc)
        for name, m in masks:
            node = self.nodes[name]
            if node.free_mask & m:
                free = indices_of(m & node.free_mask)
                raise ValueError(f"node {name}: GPUs {list(free)} are already free")
        for name, m in masks:
            self._apply(name, m)
            if self._journal is not None:
                self._journal.append((_GIVE, name, m))

    def take_masks(self, masks: Mapping[str, int]) -> None:
        """take, for allocations already as per-node bitmasks (no index lists to build).
        All or nothing: ValueError if any GPU is not free."""
        for name, m in masks.items():
            node = self._node(name)
            if node.free_mask & m != m:
                raise ValueError(f"node {name}: GPUs {list(indices_of(m & ~node.free_mask))}"
                                 " are not free")
        journal = self._journal
        for name, m in masks.items():
            if m:
                self._apply(name, -m)
                if journal is not None:
                    journal.append((_TAKE, name, m))

    def give_back_masks(self, masks: Mapping[str, int]) -> None:
        """give_back for many allocations at once, merged per node into bitmasks.

        The reservation planner gives back hundreds of releases per plan; merged, each
        node's bucket moves once instead of once per release. The resulting state is the
        same as giving each allocation back in turn (buckets are bitmasks and counts,
        independent of order). All or nothing: ValueError if any GPU is already free.
        """
        for name, m in masks.items():
            node = self._node(name)
            if node.free_mask & m or m >> node.gpus:
                raise ValueError(f"node {name}: GPUs {list(indices_of(m & node.free_mask))}"
                                 " are already free")
        journal = self._journal
        for name, m in masks.items():
            if m:
                self._apply(name, m)
                if journal is not None:
                    journal.append((_GIVE, name, m))

    def set_health(self, name: str, health: NodeHealth) -> None:
        node = self._node(name)
        health = NodeHealth(health)
        old = node.health
        if old == health:
            return
        node = self._own(name)
        if old == NodeHealth.HEALTHY:
            self._leave(node)
        node.health = health
        if health == NodeHealth.HEALTHY:
            self._enter(node)
        if self._journal is not None:
            self._journal.append((_HEALTH, name, old))

    def trial(self) -> Trial:
        """What-if: every take/give_back/set_health inside the ``with`` block is undone on
        exit.

        Trials nest; each undoes only its own changes, newest first, also on an exception.
        """
        return Trial(self)

    def mark(self) -> int:
        """Inside a trial: a point to :meth:`rollback` to. Cheaper than a nested trial
        when the change is usually kept (the planner's gallop keeps every failed step)."""
        if self._journal is None:
            raise RuntimeError("mark() outside a trial")
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        """Undo the changes made since ``mark`` (newest first); the trial goes on."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("rollback() outside a trial")
        undo = journal[mark:]
        del journal[mark:]
        self._journal = None
        try:
            self._undo(undo)
        finally:
            self._journal = journal

    def _undo(self, journal: list[tuple[str, str, object]]) -> None:
        for kind, name, arg in reversed(journal):
            if kind == _TAKE:
                self._apply(name, arg)  # type: ignore[arg-type]
            elif kind == _GIVE:
                self._apply(name, -arg)  # type: ignore[operator]
            else:
                self.set_health(name, arg)  # type: ignore[arg-type]

    # ---- reads for placement -----------------------------------------------------------

    def whole_free_nodes(self, pod: str, gpu_type: str | None = None) -> int:
        """How many healthy nodes of ``pod`` have every GPU free."""
        return sum(
            m.bit_count()
            for (t, size, free), m in self.pods[pod].buckets.items()
            if free == size and (gpu_type is None or t == gpu_type)
        )

    def is_schedulable(self, name: str) -> bool:
        return self._node(name).health == NodeHealth.HEALTHY

    def allocation_gpus(self, alloc: Mapping[str, Iterable[int]]) -> int:
        return sum(len(tuple(ix)) for ix in alloc.values())

    def check_invariants(self) -> None:
        """Recount everything from the nodes and compare with the index (tests, debug).

        O(nodes): never called on the scheduling path.
        """
        free: dict[object, int] = {}
        healthy: dict[object, int] = {}
        total: dict[object, int] = {}
        want_buckets: dict[str, dict[BucketKey, int]] = {p: {} for p in self.pods}
        for node in self.nodes.values():
            assert 0 <= node.free_mask <= node.full_mask, node
            for key in (_ALL, node.gpu_type):
                total[key] = total.get(key, 0) + node.gpus
                if node.health == NodeHealth.HEALTHY:
                    free[key] = free.get(key, 0) + node.free
                    healthy[key] = healthy.get(key, 0) + node.gpus
            if node.health == NodeHealth.HEALTHY and node.free:
                pod = self.pods[node.pod]
                b = want_buckets[node.pod]
                key = _bucket_key(node)
                b[key] = b.get(key, 0) | (1 << pod.ordinal[node.name])

        def nz(d: dict[object, int]) -> dict[object, int]:
            return {k: v for k, v in d.items() if v}

        assert nz(free) == nz(self._free), (free, self._free)
        assert nz(healthy) == nz(self._healthy), (healthy, self._healthy)
        assert nz(total) == nz(self._total), (total, self._total)
        want_key_pods: dict[BucketKey, int] = {}
        for p, pod in self.pods.items():
            assert pod.buckets == want_buckets[p], (p, pod.buckets, want_buckets[p])
            for key in pod.buckets:
                want_key_pods[key] = want_key_pods.get(key, 0) | (1 << pod.index)
        assert self.key_pods == want_key_pods, (self.key_pods, want_key_pods)
        assert self.keys_best_fit_first() == sorted(want_key_pods, key=best_fit_order)

    # ---- internals ---------------------------------------------------------------------

    def _own(self, name: str) -> NodeState:
        """The node's state, to be changed: copied first if a clone may share it."""
        node = self.nodes[name]
        owned = self._owned
        if owned is not None and name not in owned:
            node = self.nodes[name] = NodeState(node.name, node.pod, node.gpus, node.gpu_type,
                                                node.rail, node.health, node.free_mask)
            owned.add(name)
        return node

    def _node(self, name: str) -> NodeState:
        try:
            return self.nodes[name]
        except KeyError:
            raise ValueError(f"unknown node {name!r}") from None

    def _masks(self, alloc: Allocation) -> list[tuple[str, int]]:
        """Each node's indices as a bitmask, validated (in the allocation's order: the
        result does not depend on it, every node is independent)."""
        out = []
        for name, indices in alloc.items():
            node = self._node(name)
            m = 0
            for i in indices:
                if not 0 <= i < node.gpus:
                    raise ValueError(f"node {name}: no GPU {i} (it has {node.gpus})")
                m |= 1 << i
            if m.bit_count() != len(indices):
                raise ValueError(f"node {name}: GPU indices repeated in {list(indices)}")
            if m:
                out.append((name, m))
        return out

    def _enter(self, node: NodeState) -> None:
        """A node becomes schedulable: count it and put it in its bucket."""
        for key in (_ALL, node.gpu_type):
            self._healthy[key] = self._healthy.get(key, 0) + node.gpus
            self._free[key] = self._free.get(key, 0) + node.free
        if node.free:
            self._bucket_add(self.pods[node.pod], _bucket_key(node), node.name)

    def _leave(self, node: NodeState) -> None:
        for key in (_ALL, node.gpu_type):
            self._healthy[key] -= node.gpus
            self._free[key] -= node.free
        if node.free:
            self._bucket_remove(self.pods[node.pod], _bucket_key(node), node.name)

    def _apply(self, name: str, signed_mask: int) -> None:
        """Free (positive mask) or use (negative mask) GPUs, keeping the index in step."""
        node = self._own(name)
        old_mask = node.free_mask
        new_mask = old_mask | signed_mask if signed_mask > 0 else old_mask & ~(-signed_mask)
        node.free_mask = new_mask
        if node.health is not NodeHealth.HEALTHY:
            return
        old_free = old_mask.bit_count()
        new_free = new_mask.bit_count()
        delta = new_free - old_free
        self._free[_ALL] += delta
        self._free[node.gpu_type] += delta
        pod = self.pods[node.pod]
        if old_free:
            self._bucket_remove(pod, (node.gpu_type, node.gpus, old_free), name)
        if new_free:
            self._bucket_add(pod, (node.gpu_type, node.gpus, new_free), name)

    def _bucket_add(self, pod: PodIndex, key: BucketKey, name: str) -> None:
        if pod.add(key, name):
            old = self.key_pods.get(key, 0)
            self.key_pods[key] = old | (1 << pod.index)
            if not old:
                self._keys_sorted = None

    def _bucket_remove(self, pod: PodIndex, key: BucketKey, name: str) -> None:
        if pod.remove(key, name):
            m = self.key_pods[key] & ~(1 << pod.index)
            if m:
                self.key_pods[key] = m
            else:
                del self.key_pods[key]
                self._keys_sorted = None

    def keys_best_fit_first(self) -> list[BucketKey]:
        """The non-empty bucket keys, best fit first: partial nodes before whole ones,
        then fewest free GPUs, then node size and type (deterministic)."""
        if self._keys_sorted is None:
            self._keys_sorted = sorted(self.key_pods, key=best_fit_order)
        return self._keys_sorted


class Trial:
    """The ``with`` block of :meth:`Capacity.trial`. A class, not a
    ``contextlib.contextmanager``: the planner and the preemption search open several
    trials a tick, and contextlib's wrapper is interpreted Python around the compiled
    generator, three calls a trial (docs/core.md: "Trials without contextlib")."""

    __slots__ = ("cap", "outer", "journal")

    def __init__(self, cap: Capacity) -> None:
        self.cap = cap
        self.outer: list[tuple[str, str, object]] | None = None
        self.journal: list[tuple[str, str, object]] = []

    def __enter__(self) -> Capacity:
        cap = self.cap
        self.outer = cap._journal
        cap._journal = self.journal
        return cap

    def __exit__(self, *exc: object) -> None:  # an exception goes on, its changes undone
        cap = self.cap
        cap._journal = None  # the undo itself must not be journaled
        cap._undo(self.journal)
        cap._journal = self.outer
