"""Queued jobs, indexed by (tenant, size class).

Each (tenant, size class) key owns one heap (a priority queue, kept as a sorted list so
that it is walked in order without a frontier) ordered by priority (higher first), then
the job's *deadline* (earlier first), then seq (the total-order tie-break). The deadline is
the submit time plus ``queue_stretch`` times the declared GPU-seconds, the declared limit
times the GPUs asked (see :func:`deadline_of`): an earliest-deadline-first order for a
target slowdown, weighted by what a job occupies, so that among jobs of one team and
priority a small, short job does not wait behind a two-day one or a 64-GPU one submitted
a minute before it, while every job still reaches the head (its deadline is fixed and at
most 7 days past its submit time). Updates are incremental:
a job is pushed when it enters QUEUED (O(log n)) and lazily deleted when it leaves (its
entry stays in the list, marked stale by a version number, and is skipped; a heap whose
stale entries outnumber its live ones is rebuilt). The tick therefore never scans all
queued jobs: it walks heaps in order from their heads and stops when its budget says so.

Why a sorted list (``sortedlist.SortedList``) and not a binary heap: the tick walks
heaps far more than it pushes onto them. A binary heap yields its entries in order only
through a frontier heap (a pop and two pushes per entry), and a pass that resumes behind
its last job had to step through every entry before it; on the 100,000-job busy day that
was a quarter of the run. A sorted list yields its entries by plain iteration and finds a
resumed pass's place by bisection. The order is the same total order (entry key, version).

Iteration never mutates a heap, so the tick can read heaps while it places jobs. Pushes
made while a walk may be in progress (a victim requeued in the same tick) are deferred
with :meth:`JobQueues.hold`; removals are lazy, and compaction waits for the hold's end.

Positions (the cost is bounded by one tenant's queue, never the whole cluster's):

- ``position_in_tenant``: 1-based rank of a job in its tenant's queue, by counting the
  tenant's live entries that order before it: O(jobs the tenant has queued).
- ``cluster_rank``: 1-based rank across the cluster in the tick's order (tenants by fair
  share, see ``fairshare.py``): every job of a tenant whose share key is lower counts whole
  (O(1) per tenant from the live counters), a tenant with an equal share key is counted
  entry by entry, so the cost is O(tenants + queued jobs of equal-share tenants).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .sortedlist import SortedList
from .types import JobSpec, size_class

#: (tenant, size class index). In ``fifo`` mode every job shares FIFO_KEY.
QueueKey = tuple[str, int]
#: Order inside a heap: smaller first.
EntryKey = tuple[int, int, int]

FIFO_KEY: QueueKey = ("*", 0)

# heap entry: (entry key, version, job id). Versions are unique, so tuples never compare ids.
_Entry = tuple[EntryKey, int, str]
# sorts after every entry of the same entry key (any version): a resumed walk's bisection
_AFTER_VERSIONS = math.inf


#: A job's deadline is never more than this past its submit time: a job that declares no
#: limit is ordered as if it declared this one (declaring none gains nothing), and a typo of
#: a year does not park a job behind a year of its team's work.
MAX_DEADLINE_OFFSET_S = 7 * 86400


def deadline_of(submit_s: int, max_runtime_s: int | None, gpus: int, stretch: float) -> int:
    """Submit time + ``stretch`` x the declared GPU-seconds (the limit, capped as above,
    times the GPUs asked: for an elastic job its full request, so asking for fewer GPUs
    to go first also runs on fewer), the offset capped at ``MAX_DEADLINE_OFFSET_S``.

    GPU-seconds, not seconds alone, because a queue served in this order is a shortest
    area first one (the order that lowers the mean wait on a cluster of many GPUs, as
    the Helios paper's qssf does with a predicted area): a 1-GPU job of ten hours no
    longer waits behind 8-GPU jobs of two, and a 1-GPU job's deadline is what it was when
    the offset was its limit alone. The database's queue positions (``selectors.jobs``)
    compute it from the same columns."""
    if stretch <= 0:
        return submit_s
    limit = MAX_DEADLINE_OFFSET_S if max_runtime_s is None else min(max_runtime_s,
                                                                     MAX_DEADLINE_OFFSET_S)
    return submit_s + min(int(stretch * limit * max(gpus, 1)), MAX_DEADLINE_OFFSET_S)


def deadline_s(spec: JobSpec, stretch: float) -> int:
    return deadline_of(spec.submit_s, spec.max_runtime_s, spec.gpus, stretch)


def entry_key(spec: JobSpec, stretch: float = 0.0) -> EntryKey:
    """Priority desc, then the deadline (the submit time when ``stretch`` is 0), then seq:
    the order inside a (tenant, class) heap."""
    return (-spec.priority, deadline_s(spec, stretch), spec.seq)


def fifo_entry_key(spec: JobSpec) -> EntryKey:
    """``fifo`` policy: submit order only, priority ignored."""
    return (0, spec.submit_s, spec.seq)


class JobQueues:
    """Heaps of queued job ids per (tenant, size class). A job that leaves is taken out
    of its heap at once, but while the heaps are walked (``hold``): then its entry stays,
    dead, until the walk ends (a sorted list must not change under its iterators)."""

    #: pushes remembered per heap (pushed_since): while jobs arrive, a heap has a few
    #: pushes a tick at most
    PUSHES_TRACKED = 32

    def __init__(self, *, fifo: bool = False, stretch: float = 0.0) -> None:
        self.fifo = fifo
        self.stretch = stretch
        self._heaps: dict[QueueKey, SortedList] = {}  # of _Entry
        # job id -> (heap key, entry key, version, tenant)
        self._live: dict[str, tuple[QueueKey, EntryKey, int, str]] = {}
        self._count: dict[QueueKey, int] = {}
        #: entries of the jobs that left while the heaps were held, taken out at the end
        self._dead: list[tuple[QueueKey, _Entry]] = []
        #: per heap, the entries of the jobs pushed that nobody has yet said are settled
        #: (``unsettled_behind``): a superset of the jobs still without a pending reason
        self._fresh: dict[QueueKey, SortedList] = {}
        #: heap key -> a number that changes whenever its heap, its unsettled jobs or its
        #: dead entries change; and the last (number, job id, n) for which
        #: ``unsettled_behind`` found nothing: the same question then has the same answer
        self._changes = 0
        self._changed: dict[QueueKey, int] = {}
        self._none_behind: dict[QueueKey, tuple[int, str, int]] = {}
        self._tenant_count: dict[str, int] = {}
        self._version = 0
        #: heap key -> the version of its last push (a walk's "nothing new here" check)
        self._last_push: dict[QueueKey, int] = {}
        #: heap key -> its last PUSHES_TRACKED pushes, (version, entry key), oldest first,
        #: and the version of the last one forgotten (pushed_since)
        self._push_log: dict[QueueKey, deque[tuple[int, EntryKey]]] = {}
        self._forgot: dict[QueueKey, int] = {}
        self._held = 0
        self._deferred: list[JobSpec] = []

    # -- membership ---------------------------------------------------------------------
    def __contains__(self, job_id: object) -> bool:
        return job_id in self._live

    def __len__(self) -> int:
        return len(self._live)

    def key_of(self, spec: JobSpec) -> QueueKey:
        return FIFO_KEY if self.fifo else (spec.tenant, size_class(spec.gpus))

    def push(self, spec: JobSpec) -> None:
        """Add a job that entered QUEUED. O(log n)."""
        if spec.id in self._live:
            raise ValueError(f"job {spec.id} is already queued")
        if self._held:
            self._deferred.append(spec)
            return
        key = self.key_of(spec)
        ek = fifo_entry_key(spec) if self.fifo else entry_key(spec, self.stretch)
        self._version += 1
        heap = self._heaps.get(key)
        if heap is None:
            heap = self._heaps[key] = SortedList()
        entry = (ek, self._version, spec.id)
        heap.add(entry)
        fresh = self._fresh.get(key)
        if fresh is None:
            fresh = self._fresh[key] = SortedList()
        fresh.add(entry)
        self._mark_changed(key)
        self._last_push[key] = self._version
        log = self._push_log.get(key)
        if log is None:
            log = self._push_log[key] = deque()
        elif len(log) >= self.PUSHES_TRACKED:
            self._forgot[key] = log.popleft()[0]
        log.append((self._version, ek))
        self._live[spec.id] = (key, ek, self._version, spec.tenant)
        self._count[key] = self._count.get(key, 0) + 1
        self._tenant_count[spec.tenant] = self._tenant_count.get(spec.tenant, 0) + 1

    def remove(self, job_id: str) -> bool:
        """The job left QUEUED. O(log n). False if it was not queued."""
        if self._held:
            for i, spec in enumerate(self._deferred):
                if spec.id == job_id:
                    del self._deferred[i]
                    return True
        found = self._live.pop(job_id, None)
        if found is None:
            return False
        key, ek, ver, tenant = found
        self._count[key] -= 1
        self._tenant_count[tenant] -= 1
        # a dead entry left in place is stepped over by every walk of the heap until it
        # goes: on a backlog a quarter of the walks' steps, when heaps were compacted
        # only once they held as many dead entries as live ones
        if self._held:
            self._dead.append((key, (ek, ver, job_id)))
        else:
            self._heaps[key].remove((ek, ver, job_id))
            self._fresh[key].discard((ek, ver, job_id))
        self._mark_changed(key)
        return True

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Defer pushes and the removal of entries while heaps are being walked (the
        tick's phase 3)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held:
                dead, self._dead = self._dead, []
                for key, entry in dead:
                    self._heaps[key].remove(entry)
                    self._fresh[key].discard(entry)
                    self._mark_changed(key)
                deferred, self._deferred = self._deferred, []
                for spec in deferred:
                    self.push(spec)

    def _mark_changed(self, key: QueueKey) -> None:
        """Heap ``key``, its unsettled jobs or its dead entries changed: what
        ``unsettled_behind`` remembers for it no longer holds."""
        self._changes += 1
        self._changed[key] = self._changes

    def _is_live(self, entry: _Entry) -> bool:
        live = self._live.get(entry[2])
        return live is not None and live[2] == entry[1]

    # -- reading ------------------------------------------------------------------------
    def heap_keys(self) -> list[QueueKey]:
        """Keys of the heaps that hold at least one queued job, sorted."""
        return sorted(k for k, n in self._count.items() if n > 0)

    def last_push(self, key: QueueKey) -> int:
        """A number that changes whenever a job is pushed onto heap ``key`` (0: never)."""
        return self._last_push.get(key, 0)

    def pushed_since(self, key: QueueKey, version: int) -> list[EntryKey] | None:
        """The entry keys pushed onto heap ``key`` after ``last_push(key)`` read
        ``version``; None when some of them are forgotten (more than ``PUSHES_TRACKED``
        since). Whether a push landed inside a stretch of the heap a walk saw."""
        if self._last_push.get(key, 0) <= version:
            return []
        if self._forgot.get(key, 0) > version:
            return None
        return [ek for ver, ek in self._push_log[key] if ver > version]

    def count(self, key: QueueKey) -> int:
        return self._count.get(key, 0)

    def tenant_count(self, tenant: str) -> int:
        return self._tenant_count.get(tenant, 0)

    def iter_heap(self, key: QueueKey, after: EntryKey | None = None
                  ) -> Iterator[tuple[EntryKey, str]]:
        """Live entries of one heap in order, without mutating it. O(log k) to start, then
        O(1) an entry. ``after``: only the entries whose key is greater (a pass that
        resumes starts where it stopped, found by bisection)."""
        heap = self._heaps.get(key)
        if not heap:
            return
        entries = iter(heap) if after is None else heap.islice(
            heap.bisect_left((after, _AFTER_VERSIONS)))
        live = self._live
        for entry in entries:
            # _is_live, inlined: this loop is the walk's step (about 1,200 a tick on the
            # busy day), and a method call an entry doubles the check's cost (timeit)
            found = live.get(entry[2])
            if found is not None and found[2] == entry[1]:
                yield entry[0], entry[2]

    def unsettled_behind(self, job_id: str, n: int,
                         settled: Callable[[str], bool]) -> list[str] | None:
        """The queued jobs among the ``n`` right behind ``job_id`` in its heap that are not
        ``settled``, in order; None if ``job_id`` is not queued. A job found settled is
        forgotten until it is pushed again (the caller's promise: a job once settled stays
        so while it stays queued).

        Read from the jobs pushed and not yet found settled, between ``job_id`` and the
        entry ``n`` places behind it (found by position): O(log n) and a step a job read,
        where a walk of the stretch steps over all ``n`` (at every tick, as the walk moves
        on through a heap that jobs keep arriving on). While a walk leaves dead entries in
        the heap, each job is placed by a bisection of its own instead."""
        live = self._live.get(job_id)
        if live is None:
            return None
        key, ek, ver, _tenant = live
        asked = (self._changed.get(key, 0), job_id, n)
        if self._none_behind.get(key) == asked:
            return []  # asked at every tick while nothing changed in the heap
        heap, fresh = self._heaps[key], self._fresh[key]
        start = (ek, ver, job_id)
        if not fresh or fresh[-1] <= start:
            self._none_behind[key] = asked
            return []  # nothing unsettled behind it, without a bisection
        first = heap.bisect_left(start) + 1
        # entries of jobs gone while a walk is under way stay in the list until it ends
        dead = sorted(e for k, e in self._dead if k == key and e > start) if self._dead else []
        out: list[str] = []
        gone: list[_Entry] = []
        if not dead:
            # the stretch ends before the heap's entry n places behind: one bisection
            # bounds it, where placing each unsettled job took one of its own
            end = first + n
            limit = heap[end] if end < len(heap) else None
            for entry in fresh.irange(start, limit, inclusive=(False, False)):
                if settled(entry[2]):
                    gone.append(entry)
                else:
                    out.append(entry[2])
        else:
            for entry in fresh.irange(start, inclusive=(False, False)):
                behind = heap.bisect_left(entry) - first - bisect.bisect_left(dead, entry)
                if behind >= n:
                    break
                if not self._is_live(entry):
                    continue  # dead: taken out when the walk ends
                if settled(entry[2]):
                    gone.append(entry)
                else:
                    out.append(entry[2])
        for entry in gone:
            fresh.remove(entry)
        if gone:
            self._mark_changed(key)
        if not out:
            self._none_behind[key] = (self._changed.get(key, 0), job_id, n)
        return out

    def head(self, key: QueueKey) -> tuple[EntryKey, str] | None:
        return next(self.iter_heap(key), None)

    def tenant_keys(self, tenant: str) -> list[QueueKey]:
        if self.fifo:
            return [FIFO_KEY] if self.count(FIFO_KEY) else []
        return [(tenant, c) for c in range(5) if self.count((tenant, c))]

    def iter_tenant(self, tenant: str) -> Iterator[tuple[EntryKey, str]]:
        """A tenant's queued jobs in its queue order (its size-class heaps merged)."""
        if self.fifo:
            for ek, job_id in self.iter_heap(FIFO_KEY):
                if self._live[job_id][3] == tenant:
                    yield ek, job_id
            return
        yield from heapq.merge(*(self.iter_heap(k) for k in self.tenant_keys(tenant)))

    def position_in_tenant(self, job_id: str) -> int | None:
        """1-based position in the tenant's queue; O(jobs the tenant has queued)."""
        live = self._live.get(job_id)
        if live is None:
            return None
        _key, ek, _ver, tenant = live
        return 1 + sum(1 for (_k, e, _v, t) in self._tenant_entries(tenant) if e < ek)

    def _tenant_entries(self, tenant: str) -> Iterator[tuple[QueueKey, EntryKey, int, str]]:
        for key in self.tenant_keys(tenant):
            for e in self._heaps[key]:
                if self._is_live(e):
                    live = self._live[e[2]]
                    if live[3] == tenant:
                        yield live

    def cluster_rank(
        self, job_id: str, share_keys: Mapping[str, Any], tenants: Callable[[], list[str]]
    ) -> int | None:
        """1-based rank across the cluster in the tick's order (see the module docstring).

        ``share_keys``: tenant -> its fair-share key from the last tick (lower goes first);
        ``tenants``: every tenant name. In ``fifo`` mode the rank is the position in the one
        queue, O(queued jobs).
        """
        live = self._live.get(job_id)
        if live is None:
            return None
        _key, ek, _ver, tenant = live
        if self.fifo:
            return 1 + sum(1 for e in self._heaps.get(FIFO_KEY, []) if self._is_live(e)
                           and e[0] < ek)
        mine = share_keys.get(tenant)
        rank = 1
        for other in tenants():
            n = self.tenant_count(other)
            if not n:
                continue
            theirs = share_keys.get(other)
            if other == tenant or theirs == mine:
                rank += sum(1 for (_k, e, _v, _t) in self._tenant_entries(other) if e < ek)
            elif mine is None or (theirs is not None and theirs < mine):
                rank += n
        return rank
