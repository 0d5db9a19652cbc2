"""The tick: the seed's loop, as numbered phases.

    0. fire due timers         grace expiry, time limits, placing timeouts
    1. update usage            every tenant's usage decayed to now (O(tenants))
    2. order the heaps         (tenant, size class) heaps: those of teams below their
                               guarantee first, then the rest; each by fair share, then
                               the head's rank
    3. pop heads               a. hand reclaimed GPUs to heads whose victims have exited;
                               b. for each job in rank order: its team's quota (and the
                               place a higher job of the team holds in it), a placement
                               that respects every reservation of a higher-ranked job, else
                               a preemption search (when the rule lets it preempt and the
                               GPUs of jobs already asked to stop do not make room) or a
                               reservation of its own
    4. start estimates         the reserved jobs' and the quota holders' from their plans;
                               the rest of the look-ahead (``estimate_lookahead`` jobs of
                               each tenant's queue) planned behind them in rounds
    5. pending reasons         published for every job the tick examined

Reservations (Slurm's backfill with ``bf_max_job_test``, not only the head): up to
``config.reservation_depth`` jobs that wait for GPUs each hold a reservation: nodes and a
start from the declared limits of what runs there, planned one after the other on a
picture of the cluster in which each earlier reservation holds its GPUs (``_Line``). A
reservation is a promise ("it starts then at the latest, if every running job uses its
whole limit"): last tick's reservations that still hold are booked first, oldest first,
before any job is examined (``_keep_reservations``), so a job ranked higher that arrives
later, or whose team's share falls below, plans around them instead of taking them over;
the jobs that wait without one get new plans in rank order while the depth allows. A
job may start now only if, for every reservation but its own, it uses none of that
reservation's GPUs or ends by its declared limit before that reservation's start; a job
with no declared limit only the first. A job whose team stays within its guarantee does
not simply wait for a reservation in its way: it first searches for preemption victims
away from the reserved nodes (its team takes its guarantee back from borrowers within
the grace window); when that search finds none and every reservation in its way is a
borrower's of another team (its team above its guarantee once it starts), it takes
those GPUs (the log row says so, ``entitled_past``): a borrower's plan never holds back a
guarantee, since the borrower, once started, could be preempted for it anyway. Only a
reservation held within its team's guarantee makes it wait. (Letting a higher-ranked job
take a reservation over pushed large gangs back without end on a cluster whose
guarantees add up to its size: the anchor window's short 33-GPU-and-larger jobs waited a
day.)

A job that waits only for its own team's quota holds no reservation on the cluster's
GPUs (another team may use them, and the rule lets its team reclaim them later); it
holds its place in its team's quota instead (``QuotaHold``): a lower-ranked job of the
team may use that quota only if it ends by its declared limit before the holder's
planned start.

A job whose owner holds what the team's ``max_gpus_per_user`` lets one person hold waits
(``UserLimit``) with neither a reservation nor a quota hold: the owner's held GPUs are a
counter the core keeps as GPUs are taken and given back (``Scheduler.user_held``), so the
check reads no queue. Such a job is not charged to its heap's ``BLOCKED_PER_HEAP``: the
other owners' jobs behind it are still looked at.

Bounds (the tick never scans all jobs or all nodes):

- Phase 3 stops after ``config.tick_work_budget`` jobs examined (the simulator's
  reproducible bound) or ``config.tick_budget_s`` of wall time when a clock is passed. The
  next tick resumes the same pass where it stopped (jobs already examined in the pass are
  skipped, the pass's reservations stand); a pass that reaches the end is complete.
- A preemption search that found nothing is not repeated for the same head until some
  state changes (``Scheduler.version``); a placement search that failed is not repeated
  for another job of the same shape until some state changes.
- A reservation is kept from one tick to the next while it still holds (its GPUs free,
  or released by its start, on nodes it may use, and its team's quota allows it); one
  last looked at more than ``RESERVATION_REFRESH_S`` ago, with what a plan reads changed
  since (``Scheduler.plan_inputs``), is planned afresh, the stalest
  ``REFRESHES_PER_TICK`` per tick (a fresh plan that is not better counts as a look); at
  most ``config.reservation_plans_per_tick`` plans
  per tick in all, new and fresh. A placement search is made once per shape per state
  (``Scheduler.version``), whether it found GPUs or not.
- Start estimates beyond the reservations are planned in *rounds* (phase 4): a round
  plans the look-ahead in rank order, at most ``config.estimate_plans_per_tick`` plans
  (and ``estimate_budget_s`` of wall time with a clock) per tick, and goes on at the next
  tick. A new round starts when something changed and a job entered the look-ahead or
  the last round is ``ESTIMATE_REFRESH_S`` old.
- Inside one heap, the walk stops after ``BLOCKED_PER_HEAP`` jobs that could not start
  (like Slurm's per-user backfill limit): the jobs behind them are of the same tenant and
  size class and almost always wait for the same reason; they keep their last pending
  reason and are looked at once the ones ahead start. A heap whose tenant has no quota
  left, or any heap once the cluster has no free GPU, is looked at only up to its head
  (the head still gets its reservation or preemption search).
- At most ``config.max_preemption_searches_per_tick`` preemption searches per tick. A head
  that ``preemption.cannot_make_room`` shows no search could help (a bound on the tick's
  pool of possible victims, O(teams + their nodes)) takes none of them, and a head whose
  search found nothing is not searched again until the cluster or the claims change. The
  heads a tick's budget left without a search are searched for at the next tick, without
  the walk if nothing else changed (``_searches_alone``).

Policies: ``full`` (everything above); ``priority-kill`` (the same, but the victims are
chosen most-recently-started first and killed at once, and the head starts in the same
tick); ``fifo`` (one queue in submit order, whole gangs first fit in node-name order, the
first job that cannot start blocks everyone behind it: no reservation, no backfill, no
preemption, no fair share; the same team limits).

This module reads the scheduler's state and changes it through its methods; it never
imports ``scheduler.py`` (which imports it): the records they share live in
``records.py``.

Phase timings use ``clock`` when given, else ``time.perf_counter``: they go to the stats
only and never into a decision.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .capacity import Capacity, lowest_bits, mask_of
from .layers import Layer
from .placement import find_placement
from .preemption import (
    Candidate,
    PreemptionPlan,
    TenantLoad,
    VictimPool,
    cannot_make_room,
    may_preempt,
    select_victims,
    victim_pool,
)
from .queues import EntryKey, QueueKey
from .records import DAY_S, JobRecord, ReclaimClaim, StartEstimate, TickResult
from .reservation import Release, Reservation, plan_reservation, unreserved
from .states import JobState, PendingReason, Reason
from .types import Allocation, JobSpec, alloc_gpus, written_init

if TYPE_CHECKING:  # for annotations only: scheduler.py imports this module
    from .scheduler import Scheduler

S = JobState
P = PendingReason

#: jobs that could not start after which the walk leaves one (tenant, size class) heap
BLOCKED_PER_HEAP = 16
#: a picture followed across ticks (Tick._followed) keeps the jobs it saw start and end
#: beside the index's maps; past this many entries a fresh picture is built instead
PICTURE_FOLLOWED_ENTRIES = 20_000
#: seconds after which the look-ahead estimates are replanned even if no job entered it
ESTIMATE_REFRESH_S = 60
#: seconds a still-valid reservation is kept before it is planned afresh
RESERVATION_REFRESH_S = 30
#: kept reservations planned afresh per tick at most (the stalest first)
REFRESHES_PER_TICK = 2
#: the estimates a kept reservation gives (``Tick._kept_estimate``; ``quota``: one its
#: team's quota holder keeps waiting)
_KEPT_KINDS = frozenset({"reserved", "borrowed", "quota"})
#: GPU ends further than this past now count as "no declared limit" for the quota plan
_FOREVER = 1 << 62

_ZERO_SHARE = (0, 0.0)


def _release_key(r: Release) -> tuple[int, str]:
    return (r.end_s, r.job_id)


def minus(alloc: Allocation, taken: Allocation) -> Allocation:
    """``alloc`` without the GPU indices of ``taken``."""
    out: Allocation = {}
    for n, ix in alloc.items():
        gone = taken.get(n)
        keep = tuple(i for i in ix if i not in gone) if gone else ix
        if keep:
            out[n] = keep
    return out


def first_fit(sched: Scheduler, spec: JobSpec, size: int, least: int,
              exclude: frozenset[str]) -> Allocation | None:
    """``fifo``'s naive placement: nodes in name order, the first GPUs that fit, all
    ``size`` GPUs or nothing (an elastic job: at least ``least``). Scans nodes: it is the
    baseline the product's placement is measured against, not the product.
    """
    need = size
    g = spec.gpus_per_node
    alloc: Allocation = {}
    for name in sched.node_order:
        node = sched.cap.nodes[name]
        if name in exclude or not sched.cap.is_schedulable(name):
            continue
        if spec.gpu_type is not None and node.gpu_type != spec.gpu_type:
            continue
        take = min(node.free, need) if g is None else (g if node.free >= g else 0)
        if take <= 0:
            continue
        mask = lowest_bits(node.free_mask, take)
        alloc[name] = tuple(i for i in range(node.gpus) if mask >> i & 1)
        need -= take
        if need == 0:
            return alloc
    return alloc if size - need >= least else None


@dataclass(slots=True)
class EstimateRound:
    """A look-ahead planning round in progress (see ``Tick.start_estimates``)."""

    line: list[str]  # job ids in planning order, the reservation holder first
    version: int  # Scheduler.version when the round began
    started_s: int
    cursor: int = 0  # line[:cursor] are planned
    #: the cluster as the round plans it: a copy of the free GPUs and the running jobs'
    #: releases taken at the round's first tick, plus what the planned jobs hold
    plan: _Line | None = None
    #: the nodes that were not healthy when the copy was taken (a change ends the round)
    unhealthy: frozenset[str] = frozenset()
    #: per team, (start, declared end, GPUs) of its jobs planned so far in the round: the
    #: team's quota as the later jobs of the team see it
    team_plans: dict[str, list[tuple[int, int | None, int]]] = field(default_factory=dict)
    #: the jobs planned so far in the round that got a plan (their quota is in team_plans)
    planned_ok: set[str] = field(default_factory=set)
    #: plan_reservation's release masks for ``plan`` (valid while its nodes' health holds)
    masks: dict[int, Any] = field(default_factory=dict)


#: what a placement reads of a job: (GPUs, gpus_per_node, gpu_type, min_gpus, interactive)
Shape = tuple[int, int | None, str | None, int | None, bool]


def _shape_of(spec: JobSpec, size: int) -> Shape | None:
    """The job's placement on ``size`` GPUs as a memo key reads it (the walk asks for
    hundreds of placements a tick, most of them remembered); None if an elastic job's
    minimum is more than ``size``: no placement."""
    min_gpus = spec.min_gpus if spec.elastic else None
    if min_gpus is not None and min_gpus > size:
        return None
    return (size, spec.gpus_per_node, spec.gpu_type, min_gpus, spec.interactive)


def _placement_args(shape: Shape) -> dict[str, Any]:
    """find_placement's arguments for ``shape`` (built on a memo's miss only)."""
    gpus, gpus_per_node, gpu_type, min_gpus, _interactive = shape
    return dict(gpus=gpus, gpus_per_node=gpus_per_node, gpu_type=gpu_type,
                min_gpus=min_gpus)


def _size(spec: JobSpec, room: int, user_room: int | None) -> int:
    """The most GPUs a job starts on: its request, within its team's room and its owner's
    room under the per-user cap (None: no cap). An elastic job takes what they leave."""
    return min(spec.gpus, room if user_room is None else min(room, user_room))


class _Line:
    """The running jobs' releases as a look-ahead round plans, on the round's own copy of
    the cluster: each planned job holds its GPUs from now and gives them back at its
    declared end, so the jobs behind it plan around it."""

    def __init__(self, releases: list[Release], cap: Capacity,
                 lent: tuple[Layer, Layer]) -> None:
        """``lent``: ``ReleaseIndex.lend()`` when ``releases`` were taken from it: its
        maps by job and by node as at this instant, this picture's changes kept apart
        (``layers``)."""
        self.releases = releases
        self.cap = cap
        #: job -> its release; node -> the releases giving GPUs back there (sets
        #: replaced, never changed)
        self.by_id, self.on_node = lent

    def hold(self, job_id: str, alloc: Allocation, end: int | None,
             masks: dict[str, int] | None = None) -> None:
        """Hold one plan: its GPUs free now are taken from the copy; those a running job
        holds now become the plan's from its start, so no other release gives them back
        (releases stay disjoint). Bitmasks per node keep this O(the plan's nodes).
        ``masks``: ``alloc`` as bitmasks, when known (Reservation.masks)."""
        nodes = self.cap.nodes
        free_now: dict[str, int] = {}
        later: dict[str, int] = {}  # node -> GPUs a running job holds now
        whole: set[str] = set()  # nodes where the plan takes every GPU held now
        for n, ix in alloc.items():
            m = mask_of(ix) if masks is None else masks[n]
            node = nodes[n]
            free_mask = node.free_mask
            if m & free_mask:
                free_now[n] = m & free_mask
            if m & ~free_mask:
                later[n] = m & ~free_mask
                if m | free_mask == (1 << node.gpus) - 1:
                    whole.add(n)
        if free_now:
            self.cap.take_masks(free_now)
        releases, by_id, on_node = self.releases, self.by_id, self.on_node
        if later:  # only the releases on those nodes, found by node: O(them)
            hit: set[str] = set()
            for n in later:
                hit |= on_node.get(n, frozenset())
            gone: set[str] = set()
            old_of: dict[str, Release] = {}  # the releases that shrink or go
            for jid in hit:  # each keeps its place in the order: only its GPUs shrink
                r = by_id[jid]
                kept: Allocation = {}
                shrunk = False
                for n, ix in r.alloc.items():
                    taken = later.get(n)
                    if taken is None:
                        kept[n] = ix
                        continue
                    # (a gang's plan mostly takes whole nodes: every release there
                    # loses all of its GPUs on the node, with no index to test)
                    left = () if n in whole else tuple(i for i in ix if not taken >> i & 1)
                    if len(left) == len(ix):
                        kept[n] = ix
                        continue
                    shrunk = True
                    if left:
                        kept[n] = left
                    else:
                        on_node[n] = on_node[n] - {jid}
                if not shrunk:
                    continue  # the same object: the plans' mask caches still know it
                old_of[jid] = r
                if kept:
                    by_id[jid] = Release(r.end_s, jid, kept)
                else:
                    del by_id[jid]
                    gone.add(jid)
            if len(old_of) > 32:  # one pass over the list, not a bisect and a shift for each
                # (the others are in by_id as they are in the list: only these are read)
                new_of = {jid: by_id[jid] for jid in old_of if jid not in gone}
                releases[:] = [new_of.get(r.job_id, r) for r in releases
                               if r.job_id not in gone]
            else:
                for jid in old_of:
                    r = old_of[jid]
                    i = bisect.bisect_left(releases, (r.end_s, jid), key=_release_key)
                    if jid in gone:
                        del releases[i]
                    else:
                        releases[i] = by_id[jid]
        if end is not None and alloc:
            r = Release(end_s=end, job_id=job_id,
                        alloc={n: tuple(ix) for n, ix in alloc.items() if ix})
            # kept in (end_s, job_id) order: plan_reservation reads it presorted
            bisect.insort(releases, r, key=_release_key)
            by_id[job_id] = r
            for n in r.alloc:
                on_node[n] = on_node.get(n, frozenset()) | {job_id}

    def occupy(self, job_id: str, alloc: Allocation, end: int | None) -> None:
        """A job started now on ``alloc``: the GPUs the picture shows free are held until
        its declared end. Its GPUs that a reservation holds in the picture are left to the
        reservation: a job may use them only if it ends before the reserved start, so no
        plan made after it can use them before then anyway."""
        free_now = {}
        nodes = self.cap.nodes
        for n, ix in alloc.items():
            free_mask = nodes[n].free_mask
            left = tuple(i for i in ix if free_mask >> i & 1)
            if left:
                free_now[n] = left
        if free_now:
            self.hold(job_id, free_now, end)

    def end(self, job_id: str, alloc: Allocation, reserved: dict[str, int]) -> None:
        """A running job let ``alloc`` go: its release is gone, and its GPUs are free now
        but for those a reservation holds (``reserved``: node -> the reservations'
        GPUs), which stay the reservation's: a fresh picture would show them free, and
        booking the reservation would take them again. (A GPU of the job that a
        reservation counts on is the reservation's in the picture: taken from the job's
        release when the plan was booked, or left to it when the job started ending
        before it.)"""
        by_id = self.by_id
        r = by_id.get(job_id)
        if r is not None:
            releases = self.releases
            i = bisect.bisect_left(releases, (r.end_s, job_id), key=_release_key)
            del releases[i]
            del by_id[job_id]
            on_node = self.on_node
            for n in r.alloc:
                on_node[n] = on_node[n] - {job_id}
        free: dict[str, int] = {}
        for n, ix in alloc.items():
            m = mask_of(ix) & ~reserved.get(n, 0)
            if m:
                free[n] = m
        self.cap.give_back_masks(free)

    def kept_entries(self) -> int:
        """The entries this picture keeps beside the index's maps (its own writes, and
        the values it saved of the index's changes): they grow while it is followed."""
        by_id, on_node = self.by_id, self.on_node
        return (len(by_id.own) + len(by_id.journal.saved)
                + len(on_node.own) + len(on_node.journal.saved))

    def still_holds(self, res: Reservation, exclude: frozenset[str]) -> bool:
        """Each GPU of ``res`` is free in the picture, or given back by its start, on a node
        the job may use: a kept reservation is still a plan the picture allows."""
        cap = self.cap
        for n, mask in res.masks.items():
            if n in exclude or not cap.is_schedulable(n):
                return False
            busy = mask & ~cap.nodes[n].free_mask
            if not busy:
                continue
            for jid in self.on_node.get(n, ()):
                r = self.by_id[jid]
                if r.end_s <= res.start_s:
                    busy &= ~mask_of(r.alloc.get(n, ()))
            if busy:
                return False
        return True


@dataclass(frozen=True, slots=True)
class Booked:
    """A reservation as the walk holds it: which jobs it binds."""

    res: Reservation
    tenant: str
    #: its team would hold more than its guarantee once it starts: a job within its own
    #: team's guarantee that no preemption can help takes its GPUs rather than wait
    borrowing: bool

    def __init__(self, res: Reservation, tenant: str, borrowing: bool) -> None:
        self.res = res  # type: ignore[misc]
        self.tenant = tenant  # type: ignore[misc]
        self.borrowing = borrowing  # type: ignore[misc]

    @property
    def masks(self) -> dict[str, int]:
        """node -> reserved GPU bitmask (the reservation's own: do not modify)."""
        return self.res.masks


written_init(Booked)


@dataclass(frozen=True, slots=True)
class QuotaHold:
    """The highest-ranked job of a team that waits for the team's own quota: its place in
    that quota. ``start_s`` is when the team's running jobs (and its reserved jobs) leave
    room for ``need`` GPUs by their declared limits; None: not plannable (a job of the
    team declares no limit)."""

    job_id: str
    need: int
    start_s: int | None
    basis: str


@dataclass(frozen=True, slots=True)
class KeptLine:
    """A tick's picture with its reservations booked, handed to the next tick when the
    cluster did not change in between: the next tick keeps the same reservations, in the
    same order, on the same cluster, and would book them into a fresh copy to the same
    result (a clone of the cluster and a booking per reservation, at every tick). Jobs
    arriving in the queue change no picture."""

    sig: tuple[int, int]  # Scheduler.picture_sig() when it was built
    reserved: tuple[Reservation, ...]
    line: _Line
    masks: dict[int, Any]

    def __init__(self, sig: tuple[int, int], reserved: tuple[Reservation, ...], line: _Line,
                 masks: dict[int, Any]) -> None:
        self.sig = sig  # type: ignore[misc]
        self.reserved = reserved  # type: ignore[misc]
        self.line = line  # type: ignore[misc]
        self.masks = masks  # type: ignore[misc]


written_init(KeptLine)


class Tick:
    """One run of the loop over a Scheduler's state. Built and run by ``Scheduler.tick``."""

    def __init__(self, sched: Scheduler, now: int, clock: Callable[[], float] | None, *,
                 looks_alone: bool = False) -> None:
        self.s = sched
        #: a fixed point but for kept reservations due for their fresh look, a round of
        #: estimates going on or heads denied a search (Scheduler.looks_alone_due): the
        #: tick ends after the looks if they keep the reservations as they were
        #: (:meth:`_kept_as_before`) and the searches find no victims
        #: (:meth:`_searches_alone`)
        self.looks_alone = looks_alone
        self.cfg = sched.config
        self.now = now
        self.clock = clock
        self.timer = clock or time.perf_counter
        self.started_at = self.timer()
        self.policy = self.cfg.policy
        self.examined = 0
        self.stats: dict[str, Any] = {}
        # reasons set between ticks (gates.py: a job parked or let through) come out first
        self.pending: dict[str, PendingReason] = dict(sched.pending_news)
        #: job -> the job whose reservation keeps it waiting (reason Reservation)
        self.blockers: dict[str, str] = {}
        sched.pending_news.clear()
        self.estimates: dict[str, Any] = dict(sched.estimate_news)
        sched.estimate_news.clear()
        self.order: list[tuple[tuple[bool, Any, EntryKey], str, QueueKey, Iterator]] = []
        #: this tick's reservations, in rank order, and the picture they are planned on
        self.reserved: list[Booked] = []
        #: job id -> its reservation in ``reserved`` (the jobs that hold one)
        self.booked: dict[str, Booked] = {}
        #: node -> the reservations there, in booking order, for the first
        #: ``_booked_indexed`` of ``reserved`` (indexed when the walk first asks: a tick
        #: that only keeps its reservations, and most of them span many nodes, never does)
        self._booked_on_node: dict[str, list[Booked]] = {}
        self._booked_indexed = 0
        #: bumped at every booking and every start of a reserved job (memo key)
        self._reserved_version = 0
        #: (alloc's id, _reserved_version) -> (alloc, the reservations it uses GPUs of);
        #: the alloc is kept so that its id is not reused while the entry lives
        self._overlaps_memo: dict[tuple[int, int], tuple[Allocation, list[Booked]]] = {}
        self._avoid_memo: dict[tuple[int, tuple[int, ...]], frozenset[str]] = {}
        self.planned_at: dict[str, int] = {}
        self.checked_at: dict[str, int] = {}  # kept reservations planned afresh, not bettered
        self.looked_sig: dict[str, int] = {}  # Scheduler.plan_inputs() at their last look
        self.looked: set[str] = set()  # reservations planned, or planned afresh, this tick
        self.line: _Line | None = None
        self.line_version = 0  # bumped at every change of the picture (memo key)
        self._line_sig: tuple[int, int] | None = None  # the picture_sig() the line shows
        #: reservation -> the Scheduler.picture_sig() on which the line, holding the
        #: reservations booked before it, was seen to allow it (_Line.still_holds)
        self._holds_on: dict[str, tuple[int, int]] = {}
        self._line_masks: dict[int, Any] = {}
        self.plans_left = self.cfg.reservation_plans_per_tick
        #: the walk met a job it would have planned a reservation for, but the plan budget
        #: was spent: the next tick, with a budget again, plans it (no fixed point)
        self.plan_denied = False
        self.quota_holds: dict[str, QuotaHold] = {}
        self.searches = 0
        #: a head the rule lets preempt found no search left in this tick's budget
        self.search_denied = False
        #: (head, its held GPUs, nodes to avoid) of each search asked for once the budget
        #: was spent, in the walk's order: what the next tick searches for if nothing
        #: else changed (Scheduler.denied_searches, :meth:`_searches_alone`)
        self.denied: list[tuple[str, int, frozenset[str]]] = []
        #: the walk planned a reservation (a head walked before it searched without it in
        #: the way, the next tick's walk, which keeps it first, with it), or resumed a
        #: pass (the next tick's walks from the heads): the next walk may search for
        #: other heads than this one denied
        self.walk_unlike_next = False
        self.placed = 0
        self.backfilled = 0
        self.preempt_requests = 0
        self.budget_hit = False
        self._candidates: list[Candidate] | None = None
        self._excl_key = -1
        self._excl_all: frozenset[str] = frozenset()
        self._claimed_all: frozenset[str] = frozenset()
        self._free_cache: dict[tuple[Any, ...], int] = {}
        self._failed_places: set[tuple[Any, ...]] = set()  # on the picture (line)
        self._places: dict[tuple[Any, ...], Allocation | None] = {}  # on the cluster now
        self._victim_costs: dict[str, Any] = {}  # victim_cost at this tick's now, by job
        self._ends_cache: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self._borrows: dict[str, bool] = {}
        # memos of answers that only a change of state alters (keyed by
        # Scheduler.version; every start, exit and request to stop bumps it): the walk
        # asks them for each of the hundreds of jobs it examines on a backlog
        self._loads_memo: tuple[int, dict[str, TenantLoad]] = (-1, {})
        self._may_memo: dict[tuple[Any, ...], bool] = {}
        self._diagnose_memo: dict[tuple[Any, ...], PendingReason] = {}
        #: of self.candidates(), built when first read (again after a search takes victims)
        self._pool: VictimPool | None = None
        #: (Scheduler.version, node -> [(a job asked to stop, its GPUs' mask there)], the
        #: cluster with those GPUs shown free, when built): read by _leaving_makes_room
        self._leaving_memo: tuple[int, dict[str, list[tuple[str, int]]],
                                  Capacity | None] | None = None
        self._leaving_places: dict[tuple[Any, ...], bool] = {}

    # ------------------------------------------------------------------ the loop
    def run(self) -> TickResult:
        phases: list[tuple[str, Callable[[], None]]] = [
            ("0_timers", self.fire_timers),
            ("1_usage", self.update_usage),
            ("2_order", self.order_heaps),
            ("3_place", self.pop_heads),
            ("4_estimates", self.start_estimates),
            ("5_pending", self.pending_reasons),
        ]
        for name, phase in phases:
            t0 = self.timer()
            phase()
            self.stats[f"phase_{name}_ms"] = round((self.timer() - t0) * 1000, 3)
        # what the next tick may search for without a walk (only when this walk met its
        # denied heads as the next one would)
        self.s.denied_searches = (self.denied if self.search_denied
                                  and not self.walk_unlike_next else [])
        self.stats.update(
            examined=self.examined, placed=self.placed, backfilled=self.backfilled,
            preemption_searches=self.searches, preempt_requests=self.preempt_requests,
            search_denied=self.search_denied,
            reservation=self.reserved[0].res.job_id if self.reserved else None,
            reservations=len(self.reserved),
            reservations_planned=self.cfg.reservation_plans_per_tick - self.plans_left,
            plan_denied=self.plan_denied,
            budget_exhausted=self.budget_hit,
            tick_ms=round((self.timer() - self.started_at) * 1000, 3),
        )
        return TickResult(self.s.flush(), self.stats, self.pending, self.estimates,
                          self.blockers)

    # ------------------------------------------------------------------ 0. timers
    def fire_timers(self) -> None:
        self.s.fire_timers(self.now)

    # ------------------------------------------------------------------ 1. usage
    def update_usage(self) -> None:
        """Every tenant's fair-share key at now: its usage decayed to now with what it has
        held since its last change (read, not stored: ``FairShare.usage_at``)."""
        s = self.s
        s.share_keys = {} if self.policy == "fifo" else s.share_keys_at(self.now)

    # ------------------------------------------------------------------ 2. order
    def order_heaps(self) -> None:
        # fixed for the whole walk: a team that reaches its guarantee halfway through the
        # tick keeps its place, so its own jobs keep their order
        self._borrows = {} if self.policy == "fifo" else self._borrowing()
        if not self.looks_alone:
            self._order_heads()
        # else put off to pop_heads: the tick may end after the looks, with no walk

    def _order_heads(self) -> None:
        """Each heap's first job the walk has not passed, in the walk's order."""
        s = self.s
        q = s.queues
        cursor = s.pass_cursor if s.pass_seen else {}
        claimed = {q.key_of(s.jobs[j].spec) for j in s.claims} if cursor else set()
        for key in q.heap_keys():
            at = cursor.get(key)
            # A resumed pass walks on from the last job it examined in the heap when
            # every job ahead of it was examined in this pass: nothing was pushed ahead
            # of it since (while jobs arrive, most land behind it), and no job there waits
            # for reclaimed GPUs (one such is examined again). The walk would step over
            # each of them (see _advance).
            after = None
            if at is not None and key not in claimed:
                pushed = q.pushed_since(key, at[1])
                if pushed is not None and all(ek > at[0] for ek in pushed):
                    after = at[0]
                    if pushed:
                        self._count("resumed_past_pushes")
            self._advance(key, q.iter_heap(key, after))

    def _borrowing(self) -> dict[str, bool]:
        """Each team: at or above its guarantee. It reads the GPUs held, those on their way
        out, the claims and the quotas, all of which ``picture_sig()`` follows, so the
        answer is kept from tick to tick until one of them changes (on a backlog most
        ticks change none: jobs only arrive)."""
        s = self.s
        sig = s.picture_sig()
        memo = s.borrows_memo
        if memo is None or memo[0] != sig:
            memo = s.borrows_memo = (sig, {
                n: self._held(n) >= s.tenants[n].guaranteed_gpus for n in s.tenant_names})
        return memo[1]

    def _advance(self, key: QueueKey, it: Iterator[tuple[EntryKey, str]]) -> None:
        """Put the heap's next job in the walk's order: the jobs of teams below their
        guarantee before those of teams at or above it (as Kueue orders its heads: a
        borrower placed first would only be preempted by the entitled job behind it in
        the same tick), then the team's fair share, then the job's own rank. The first
        key is the team's, not the job's, so a team's own jobs keep their order.

        The jobs the walk would only step over when it reached them (examined already in
        this pass, and not waiting for reclaimed GPUs) are stepped over here: a pass that
        resumes walks every heap again from its head, and on a backlog most of what it
        meets first was seen by the ticks before. The order of the others is the same
        (their keys do not change during the walk), and so is what the walk decides."""
        s = self.s
        jobs, seen, claims = s.jobs, s.pass_seen, s.claims
        for nxt in it:
            job_id = nxt[1]
            if jobs[job_id].state == S.QUEUED and (job_id not in seen or job_id in claims):
                break
        else:
            return
        team = key[0]
        share = s.share_keys.get(team, _ZERO_SHARE)
        heapq.heappush(self.order, ((self._borrows.get(team, False), share, nxt[0]), nxt[1],
                                    key, it))

    # ------------------------------------------------------------------ 3. pop heads
    def out_of_budget(self) -> bool:
        if self.clock is not None:
            return self.clock() - self.started_at >= self.cfg.tick_budget_s
        budget = self.cfg.tick_work_budget
        return budget is not None and self.examined >= budget

    def pop_heads(self) -> None:
        """Walk the queued jobs in rank order, examining each once per *pass*.

        A pass that runs out of budget resumes at the next tick where it stopped (the jobs
        it already examined are skipped, their reservations and quota holds stand), like
        Slurm's ``bf_continue``: without it, a budget smaller than the number of blocked
        jobs ahead would starve everything behind them. A pass that reaches the end of the
        queues is complete; the next tick starts a fresh one from the heads. A head waiting
        for reclaimed GPUs is never skipped: its handover cannot wait for a new pass.
        """
        s = self.s
        resuming = bool(s.pass_seen)
        if self.policy != "fifo":
            self._keep_reservations()
            if self.looks_alone and self._kept_as_before() and self._searches_alone():
                # the walk would find the quota holds of the last tick, too
                self.quota_holds = dict(s.quota_holds)
                self.stats["looks_alone"] = len(self.looked)
                return
        if self.looks_alone:
            self._order_heads()
        if resuming and self.policy != "fifo":
            self._restore_pass()
        if resuming:
            # no fixed point: the next tick's fresh pass walks from the heads, and may
            # spend its budget before the jobs this one reached (Scheduler._note_quiet)
            self.stats["resumed_pass"] = True
            self.walk_unlike_next = True
        blocked = s.pass_blocked if resuming else {}
        cursor = s.pass_cursor if resuming else {}
        seen = s.pass_seen
        with s.queues.hold():  # heaps are being walked: pushes wait until the end
            self.hand_over()
            while self.order:
                if self.out_of_budget():
                    self.budget_hit = True
                    break
                okey, job_id, key, it = heapq.heappop(self.order)
                rec = s.jobs[job_id]
                if rec.state != S.QUEUED or (job_id in seen and job_id not in s.claims):
                    self._advance(key, it)  # handed over already, or seen in this pass
                    continue
                self.examined += 1
                seen.add(job_id)
                at = cursor.get(key)
                # the heap is walked in order, so every job ahead of this one was examined
                # in this pass; not so for a job ahead of the cursor (pushed there since,
                # found by a walk from the head): jobs between the two may not be, and the
                # cursor keeps the push it knew of (the next tick walks from the head)
                if at is None or at[0] < okey[2]:
                    cursor[key] = (okey[2], s.queues.last_push(key))
                if self.policy == "fifo":
                    if not self.examine_fifo(rec):
                        self._behind(key, job_id, it)
                        break  # the head blocks everyone behind it
                    self._advance(key, it)
                    continue
                outcome = self.examine(rec)
                if outcome not in ("started", "user-limit"):
                    blocked[key] = blocked.get(key, 0) + 1
                    if blocked[key] >= BLOCKED_PER_HEAP or self._heap_is_stuck(rec):
                        self._behind(key, job_id, it)
                        continue
                self._advance(key, it)
        if self.budget_hit:
            s.pass_blocked = blocked
            s.pass_cursor = cursor
        else:
            s.pass_seen = set()
            s.pass_blocked = {}
            s.pass_cursor = {}

    def _keep_reservations(self) -> None:
        """Last tick's reservations that still hold are booked first, oldest first, before
        any job is examined: a reservation is a promise ("it starts then at the latest"),
        and a job ranked higher that arrives later, or whose team's share falls below,
        plans around it rather than taking it over. One planned more than
        ``RESERVATION_REFRESH_S`` ago is planned afresh on the same picture; the new plan
        replaces it if it no longer holds, or if it starts no later and uses no GPU that
        another kept reservation holds."""
        s = self.s
        # in last tick's order (the oldest first, then those it planned, in rank order):
        # each plan was made on a picture holding those before it, so each still holds
        # in that order
        held: dict[str, int] = {}  # node -> GPUs the kept reservations hold there
        for res in s.reserved:
            for n, m in res.masks.items():
                held[n] = held.get(n, 0) | m
        # the stalest few are planned afresh in this tick: a plan on 2,000 nodes costs
        # milliseconds, and reservations made in one tick all go stale in the same one.
        # Stale: last looked at (planned, or planned afresh and kept) RESERVATION_REFRESH_S
        # ago or more, with what a plan reads changed since (Scheduler.plan_inputs: on the
        # same inputs a plan finds what the last one found). A fresh plan that is not
        # better keeps the old one and still counts as a look: without that, the same two
        # reservations whose fresh plans start later would be planned again at every tick,
        # and the other stale ones never. (The instants and the digest are published with
        # the reservation: a rebuilt leader looks when this one would.)
        now = self.now
        inputs = s.plan_inputs()
        stale = sorted((at, s.jobs[r.job_id].spec.seq, r.job_id) for r in s.reserved
                       if now - (at := s.looked_at(r.job_id, now)) >= RESERVATION_REFRESH_S
                       and s.looked_sig.get(r.job_id) != inputs)
        refresh = {jid for _at, _seq, jid in stale[:REFRESHES_PER_TICK]}
        if self.plans_left <= 0:
            refresh = set()
        # The cluster as at the last tick (KeptLine): each reservation that the last
        # tick's picture was seen to allow is allowed again (the same cluster, the same ones
        # booked before it), so only what time alone moves is asked again (the quota's
        # answer), and the last tick's picture is taken over instead of booking them all
        # into a fresh copy. A reservation planned afresh needs the picture holding those
        # before it: that copy is built for it as usual, and dropped after the last one
        # if the fresh plans kept theirs. At the first difference the rest go the usual
        # way on a fresh copy holding those booked so far.
        kept: KeptLine | None = s.kept_line
        s.kept_line = None
        sig = s.picture_sig()
        if kept is not None and kept.sig != sig:
            kept = self._followed(kept, sig)
        following = (kept is not None and kept.sig == sig
                     and len(kept.reserved) == len(s.reserved)
                     and all(a is b for a, b in zip(kept.reserved, s.reserved, strict=True)))
        last_refresh = max((i for i, r in enumerate(s.reserved) if r.job_id in refresh),
                           default=-1)
        for i, res in enumerate(list(s.reserved)):
            if len(self.reserved) >= self.cfg.reservation_depth:
                break
            job_id = res.job_id
            rec = s.jobs[job_id]
            if rec.state != S.QUEUED or job_id in s.claims or self._over_user_cap(rec.spec):
                following = False
                continue  # (a job over its owner's cap holds no reservation)
            planned_at = s.planned_at.get(job_id, now)
            checked_at = s.checked_at.get(job_id)
            looked_sig = s.looked_sig.get(job_id)
            if following and job_id not in refresh:
                if self._quota_fits(rec.spec, res.start_s):
                    if i > last_refresh:
                        self.line = None  # the last tick's picture is taken over below
                    self._book(rec, res, planned_at, holds_on=sig)
                    self._carry_looks(job_id, planned_at, checked_at, looked_sig)
                else:
                    following = False
                continue
            kept_res = res
            line = self._line()
            exclude = self._excluded(job_id)
            holds = line.still_holds(res, exclude)
            keep = holds and self._quota_fits(rec.spec, res.start_s)
            if job_id in refresh and self.plans_left > 0:
                self.plans_left -= 1
                checked_at, looked_sig = now, None
                self.looked.add(job_id)
                new = self.plan(rec, line.releases, cap=line.cap, masks=self._line_masks)
                # an earlier start elsewhere, on GPUs no other kept reservation holds
                # (taking theirs would break their promise for this one's sake)
                if new is not None and (not keep or (
                        new.start_s <= res.start_s
                        and not self._takes_others(new, res, held))):
                    res, keep, planned_at = new, True, now
                    holds = line.still_holds(res, exclude)
            if keep:
                self._book(rec, res, planned_at, holds_on=sig if holds else None)
                self._carry_looks(job_id, planned_at, checked_at, looked_sig)
            following = following and keep and holds and res is kept_res
        if following and kept is not None and len(self.reserved) == len(kept.reserved):
            self.line, self._line_masks, self._line_sig = kept.line, kept.masks, sig
            self.line_version += 1
            self.stats["picture_taken_over"] = True

    def _followed(self, kept: KeptLine, sig: tuple[int, int]) -> KeptLine | None:
        """The last tick's picture brought to the cluster as it is now, when only jobs
        letting their GPUs go (or moving between the holding states on the same GPUs and
        release) changed it since (``Scheduler.picture_moves``): each such end frees the
        GPUs the picture shows its job holding (``_Line.end``), which is the picture a
        fresh copy with the same reservations booked would show. None if anything else
        changed (a start, a request to stop, a health or quota change, a claim): a fresh
        picture is built."""
        moves = self.s.picture_moves
        if (kept.sig[1] != sig[1] or sig[0] - kept.sig[0] != len(moves)
                or any(kind == "other" for kind, _j, _a in moves)
                or kept.line.kept_entries() + len(kept.masks) > PICTURE_FOLLOWED_ENTRIES):
            return None
        reserved: dict[str, int] = {}
        for res in kept.reserved:
            for n, m in res.masks.items():
                reserved[n] = reserved.get(n, 0) | m
        for kind, job_id, alloc in moves:
            if kind == "end" and alloc:
                kept.line.end(job_id, alloc, reserved)
        self._count("picture_followed")
        return replace(kept, sig=sig)

    def _kept_as_before(self) -> bool:
        """At a fixed point but for the looks just taken (``looks_alone``): every
        reservation holds the same GPUs from the same start as the last tick left it (a
        fresh plan of the same GPUs may tell it in other words: the walk does not read
        them). The walk would then meet the same state in the same order past the same
        reservations and find the last tick's answers (no decision, the same reasons and
        quota holds): it is not run. Phase 4 still runs (a reservation told in other
        words is a new estimate; a round of estimates may be due)."""
        s = self.s
        return (len(self.reserved) == len(s.reserved)
                and all(b.res is r or (b.res.job_id == r.job_id and b.res.start_s == r.start_s
                                       and b.res.alloc == r.alloc)
                        for b, r in zip(self.reserved, s.reserved, strict=True)))

    def _searches_alone(self) -> bool:
        """At a fixed point but for heads the last tick's search budget left without a
        search (``Scheduler.denied_searches``): the walk would meet the same heads in the
        same state, pass the one searched in vain last tick (remembered as vain), and ask
        for a search for the first of these. Their searches are asked for here, in that
        order, as the walk asks (``_may_search``: the first allowed one is made, the next
        one is denied again). True if no search found victims: the walk would then find
        the last tick's answers, and is not run. False (the walk runs, and makes that
        search again) if one found victims: the walk decides, and what it finds behind
        that head changes."""
        s = self.s
        if s.denied_searches:
            self._count("searches_alone")
        for job_id, held, avoid in s.denied_searches:
            rec = s.jobs[job_id]
            if rec.state != S.QUEUED:  # (not at a fixed point) walk, to be safe
                return self._searched_alone_none()
            if not self._may_search(rec, held, avoid):
                continue
            read = (s.cluster_version, s.claims_version)
            if self._victims_for(rec, held, avoid):
                return self._searched_alone_none()
            self.searches += 1
            self._note_vain(job_id, avoid, read)
        return True

    def _searched_alone_none(self) -> bool:
        """The walk runs after all: it asks for the searches itself."""
        self.searches = 0
        self.search_denied = False
        self.denied = []
        return False

    def _count(self, stat: str) -> None:
        self.stats[stat] = self.stats.get(stat, 0) + 1

    def _carry_looks(self, job_id: str, planned_at: int, checked_at: int | None,
                     looked_sig: int | None) -> None:
        if checked_at is not None and checked_at > planned_at:
            self.checked_at[job_id] = checked_at
        if looked_sig is not None:
            self.looked_sig[job_id] = looked_sig

    def _hand_on_line(self) -> None:
        """Keep this tick's picture for the next tick (KeptLine) if it shows the state as it
        is now with exactly this tick's reservations booked, each seen to be allowed by the
        picture before it: no start, stop or claim since the picture was built."""
        s = self.s
        sig = s.picture_sig()
        holds_on = self._holds_on
        if (self.line is not None and self._line_sig == sig
                and all(holds_on.get(b.res.job_id) == sig for b in self.reserved)):
            s.kept_line = KeptLine(sig, tuple(b.res for b in self.reserved), self.line,
                                   self._line_masks)
        else:
            s.kept_line = None
        s.picture_moves.clear()  # what the next tick's picture must follow starts now

    @staticmethod
    def _takes_others(new: Reservation, old: Reservation, held: dict[str, int]) -> bool:
        return any(m & held.get(n, 0) & ~old.masks.get(n, 0) for n, m in new.masks.items())

    def _restore_pass(self) -> None:
        """A resumed pass keeps what its earlier ticks decided for the jobs they examined:
        their teams' quota holds (their reservations are kept as every tick keeps them)."""
        s = self.s
        seen = s.pass_seen
        for tenant, hold in s.quota_holds.items():
            rec = s.jobs[hold.job_id]
            if rec.state == S.QUEUED and hold.job_id in seen:
                self.quota_holds[tenant] = hold

    def _behind(self, key: QueueKey, left_at: str, it: Iterator[tuple[EntryKey, str]]) -> None:
        """The walk leaves a heap: the next ``estimate_lookahead`` jobs in it, if nothing
        was said about them yet, wait behind jobs that rank higher (Priority).

        Only a push puts a job without a reason into a heap, and a reason once said never
        goes back to none while the job stays queued: the queues keep the jobs pushed that
        were not yet found with a reason, and only those of them in the stretch are read
        (``JobQueues.unsettled_behind``). While jobs arrive, the walk moves on through
        each heap at every tick, and walking the stretch behind where it stopped each time
        was a seventh of a busy day's run."""
        s = self.s
        if not s.look_ahead:
            return  # no view is kept (a benchmark, a what-if): nobody reads these reasons
        jobs = s.jobs
        n = self.cfg.estimate_lookahead
        waiting = s.queues.unsettled_behind(
            left_at, n, lambda job_id: jobs[job_id].pending_reason != P.NONE)
        if waiting is None:  # the job the walk stopped at is no longer queued: walk on
            waiting = [job_id for _i, (_ek, job_id) in zip(range(n), it, strict=False)]
        else:
            self._count("stretches_read_unsettled")
        for job_id in waiting:
            rec = jobs[job_id]
            if rec.state == S.QUEUED and rec.pending_reason == P.NONE:
                # (a job requeued after a cut of its team's quota was told it waits
                # behind the jobs ahead, "until the team's running jobs free 96 GPUs",
                # which could never start it: an operator's session, 2026-12-07)
                self._wait(rec, self.s.beyond_limits(rec.spec) or P.PRIORITY)

    def hand_over(self) -> None:
        """Reclaimed GPUs go to the head they were reclaimed for as soon as its victims have
        exited, before the ranked walk: a head waiting on reclaim must not depend on the
        walk reaching it (a job ahead of it in its heap may stop the walk there)."""
        s = self.s
        for head_id in sorted(s.claims, key=lambda j: s.jobs[j].spec.seq):
            claim = s.claims.get(head_id)
            rec = s.jobs[head_id]
            if claim is None or rec.state != S.QUEUED or self._victims_holding(claim):
                continue
            self.examined += 1
            self.examine(rec)

    def _victims_holding(self, claim: ReclaimClaim) -> bool:
        s = self.s
        for v in claim.victims:
            victim = s.jobs[v]
            if (victim.state in (S.PREEMPT_REQUESTED, S.CHECKPOINTING)
                    and victim.alloc and not claim.nodes.isdisjoint(victim.alloc)):
                return True
        return False

    def _heap_is_stuck(self, rec: JobRecord) -> bool:
        """Nothing behind this job in its heap can start in this tick, nor take a
        reservation: its team has no quota left, or the cluster has no free GPU and every
        reservation of the tick is taken."""
        s = self.s
        tenant = rec.spec.tenant
        room = s.limit_of(tenant) - s.running[tenant] - s.claimed_gpus(tenant)
        if room <= 0:
            return True
        if len(self.reserved) < self.cfg.reservation_depth:
            return False  # the jobs behind it may still get reservations of their own
        # interactive jobs may use the slice, so only reclaimed nodes are out of reach
        self._excluded(None)  # refreshes the cached node sets
        return s.cap.free_gpus() - self._free_on(self._claimed_all, None) <= 0

    # -- one job, policy full / priority-kill
    def examine(self, rec: JobRecord) -> str:
        """Try to start ``rec``. Returns "started", "waiting" (reclaim in progress) or
        "blocked", and sets the job's pending reason when it does not start."""
        s = self.s
        spec = rec.spec
        job_id = spec.id
        team = spec.tenant
        claim = s.claims.get(job_id)
        held = self._held(team, besides=job_id)
        need = spec.least_gpus
        room = self._team_room(spec)
        if room < need:
            # It waits for its own team's quota: no reservation on the cluster's GPUs
            # (another team may use them, and the rule lets this team reclaim them), but
            # the first such job of the team holds its place in the team's quota.
            self._wait(rec, P.QUOTA_LIMIT)
            if team not in self.quota_holds:
                self._hold_quota(rec, need)
            return "blocked"
        user_room = s.user_room(spec)
        if user_room is not None and user_room < need:
            return self._user_limited(rec)
        size = _size(spec, room, user_room)
        end = None if spec.max_runtime_s is None else self.now + spec.max_runtime_s
        hold = self.quota_holds.get(team)
        in_quota = None if hold is None else self._quota_allows(hold, team, size, end)
        if hold is not None and in_quota is None:
            self._wait(rec, P.QUOTA_RESERVED)
            return "blocked"
        entitled = held + size <= s.tenants[team].guaranteed_gpus
        exclude = self._excluded(job_id)
        own = self.booked.get(job_id)
        binding = self.reserved if own is None else [b for b in self.reserved if b is not own]
        alloc = self._own_gpus(own, size, exclude)
        shared = alloc is None  # _place's answer is the memo's: shared by jobs of a shape
        if shared:
            alloc = self._place(spec, size, exclude)
        clash = (self._clashes(own, alloc, end, shared=shared)
                 if alloc is not None and binding else [])
        passed: list[Booked] = []
        if clash:
            # the first fit takes GPUs a higher-ranked job has reserved before this one
            # would end: place it on GPUs no reservation holds, if there are enough
            first = alloc
            alloc = self._place_on_line(spec, size, exclude)
            if alloc is None and claim is not None and self._victims_holding(claim):
                self._wait(rec, P.PREEMPTING)  # its own victims are making room
                return "waiting"
            if alloc is None:
                if entitled:
                    # reservations stand in the way of this team's guarantee: take it
                    # back from borrowers by preemption (within the grace window), away
                    # from the reserved nodes, where the rule allows; failing that, a
                    # borrower's future plan does not hold back a guarantee now (the
                    # borrower, once started, could be preempted for this job anyway):
                    # only reservations of jobs within their own guarantee make it wait
                    avoid = self._avoid(clash)
                    # (one that may start now past borrowers' plans does not wait for GPUs
                    # already leaving)
                    may_pass = all(b.borrowing and b.tenant != team for b in clash)
                    outcome = self._try_reclaim(rec, held, avoid=avoid, leaving=not may_pass)
                    if outcome is not None:
                        return outcome
                    if may_pass:
                        alloc, passed = first, clash
                        binding = [b for b in binding if b not in clash]
                if alloc is None:
                    self._wait(rec, P.RESERVATION)
                    self.blockers[job_id] = clash[0].res.job_id  # the first kept promise
                    self._reserve(rec)
                    return "blocked"
        if (alloc is not None and binding
                and not self._spares_quota(binding, job_id, team, size, end)):
            # its GPUs hold no reservation back, its team's quota would: a reserved job of
            # the team could not start at its reserved start within the team's limit
            self._wait(rec, P.QUOTA_RESERVED)
            return "blocked"
        if alloc is not None:
            reason = Reason.BACKFILLED if binding else Reason.PLACED
            detail = self._backfill_detail(binding, alloc, end) if binding else {}
            if in_quota == "before":  # backfilled within its team's quota
                assert hold is not None and hold.start_s is not None
                reason = Reason.BACKFILLED
                detail.update(ends_by_s=end, quota_of={"job": hold.job_id,
                                                       "start_s": hold.start_s})
            if passed:  # borrowers' reservations: they do not hold back a guarantee
                detail["entitled_past"] = [b.res.job_id for b in passed]
            if claim is not None:
                detail["reclaimed_from"] = sorted(claim.victims)
            self._start(rec, alloc, reason, detail)
            self.backfilled += reason == Reason.BACKFILLED
            return "started"
        if claim is not None:
            if self._victims_holding(claim):
                self._wait(rec, P.PREEMPTING)
                return "waiting"
            s.drop_claim(job_id)  # the victims are gone and it still does not fit: start over
        pending = self._diagnose(spec, need, exclude)
        outcome = self._try_reclaim(rec, held)
        if outcome is not None:
            return outcome
        self._wait(rec, pending)
        self._reserve(rec)
        return "blocked"

    def _user_limited(self, rec: JobRecord) -> str:
        """Its owner holds what the team lets one person hold: it waits (UserLimit) with no
        reservation and no quota hold, since neither would help it start sooner, and the
        walk's per-heap count of blocked jobs is not charged ("user-limit"), so that one
        owner's queued sweep does not hide the other owners' jobs behind it in the heap.
        Its place in the heap is kept: it is looked at again at each tick."""
        if rec.spec.id in self.s.claims:
            self.s.drop_claim(rec.spec.id)  # GPUs reclaimed for it could not be used
        self._wait(rec, P.USER_LIMIT)
        return "user-limit"

    def _over_user_cap(self, spec: JobSpec) -> bool:
        room = self.s.user_room(spec)
        return room is not None and room < spec.least_gpus

    def _own_gpus(self, own: Booked | None, size: int, exclude: frozenset[str]
                  ) -> Allocation | None:
        """The GPUs of the job's own reservation, when they are all free now: it starts
        where it was promised (and where no other plan counts on), also before the
        promised time when the jobs it waited for ended before their limits (the caller
        still checks the other reservations: a plan may count on these GPUs later)."""
        if own is None or own.res.gpus != size:
            return None
        cap = self.s.cap
        for n, m in own.masks.items():
            if n in exclude or not cap.is_schedulable(n) or cap.nodes[n].free_mask & m != m:
                return None
        return dict(own.res.alloc)

    def _try_reclaim(self, rec: JobRecord, held: int, *,
                     avoid: frozenset[str] = frozenset(), leaving: bool = True) -> str | None:
        """A preemption search, when the rule and the tick's budget allow one: "started"
        or "waiting" when victims were asked to stop, None when there was no search or it
        found nothing (remembered until the cluster or the claims change). ``avoid``:
        nodes the head must not be placed on (reserved for a higher-ranked job).
        ``leaving``: no search when GPUs already on their way out make room (None: the
        head waits for them, with a reservation)."""
        s = self.s
        if leaving and self._leaving_makes_room(rec, held, avoid):
            return None
        if not self._may_search(rec, held, avoid):
            return None
        self.searches += 1
        read = (s.cluster_version, s.claims_version)
        if self._reclaim(rec, held, avoid):
            return "started" if rec.state == S.PLACING else "waiting"
        self._note_vain(rec.spec.id, avoid, read)
        return None

    def _note_vain(self, job_id: str, avoid: frozenset[str],
                   read: tuple[int, int] | None = None) -> None:
        """Remember that no search can place this head on what the search read (``read``:
        the cluster and claims versions it began on; now if not given)."""
        s = self.s
        if len(s.vain_searches) > 4096:  # forget old ones; a stale entry never matches
            s.vain_searches.clear()
        cluster, claims = read or (s.cluster_version, s.claims_version)
        s.vain_searches[job_id] = (cluster, claims, avoid)

    def _start(self, rec: JobRecord, alloc: Allocation, reason: Reason,
               detail: dict[str, Any]) -> None:
        alloc = dict(alloc)  # (an answer of _place is shared by the jobs of its shape)
        before = self.s.picture_sig()
        self.s.start(rec, alloc, reason, self.now, detail)
        self.placed += 1
        self.estimates[rec.spec.id] = rec.estimate
        gone = self.booked.pop(rec.spec.id, None)
        if gone is not None:  # it starts on (or instead of) its reservation
            at = next(i for i, b in enumerate(self.reserved) if b is gone)
            self.reserved = [b for b in self.reserved if b is not gone]
            self._reserved_version += 1
            if at < self._booked_indexed:
                self._booked_indexed -= 1
                for n in gone.masks:
                    self._booked_on_node[n].remove(gone)
            self.line = None  # rebuilt without it at the next need
            self.line_version += 1
        elif self.line is not None:
            spec = rec.spec
            end = None if spec.max_runtime_s is None else self.now + spec.max_runtime_s
            self.line.occupy(spec.id, alloc, end)
            self.line_version += 1
            self._follow_start(before, detail)

    def _follow_start(self, before: tuple[int, int], detail: dict[str, Any]) -> None:
        """The picture, with the job just started occupying it, is the one a fresh copy
        would show with the same reservations booked (``_Line.occupy``), and each
        reservation still holds: the job used none of their GPUs, or ends by its
        declared limit before their starts. So the picture and the reservations seen to
        hold on it follow the start (the next tick may take it over). Not after a start
        that took GPUs a borrower's reservation held (``entitled_past``: that reservation
        no longer holds) or one that changed the claims (a handover)."""
        after = self.s.picture_sig()
        if (self._line_sig != before or after[1] != before[1]
                or "entitled_past" in detail):
            return
        self._line_sig = after
        holds_on = self._holds_on
        for job_id, on in holds_on.items():
            if on == before:
                holds_on[job_id] = after

    def _held(self, team: str, *, besides: str | None = None) -> int:
        """GPUs the team holds that are not on their way out, plus those being reclaimed
        for its other heads: what its share is computed from."""
        s = self.s
        return s.running[team] - s.leaving[team] + s.claimed_gpus(team, besides=besides)

    def _searched_in_vain(self, job_id: str, avoid: frozenset[str]) -> bool:
        """A search for this head found nothing, and nothing it reads has changed since: the
        same search would find nothing again (searches are the costliest part of a tick).

        A search reads the jobs holding GPUs (who may give, what they free), the nodes'
        health, the teams' quotas and the claims, never the queue
        (``Scheduler.cluster_version``): jobs arriving behind a vain head do not make it
        search again. Fewer nodes to use never helps, so a search that avoided no more
        nodes than this one (``avoid``: other jobs' reservations) answers for it. Time
        alone changes no candidate's eligibility (a job stays at its daily cap for good
        once it reaches it), only the victims' costs and so the order the bounded walks
        take them in; that is ignored until the next change of the cluster. (A memo, not
        a decision: a leader rebuilt from the log, which has no memo, searches again.)"""
        s = self.s
        found = s.vain_searches.get(job_id)
        return (found is not None and found[0] == s.cluster_version
                and found[1] == s.claims_version and found[2] <= avoid)

    def _team_room(self, spec: JobSpec) -> int:
        """GPUs the job's team may still take under its borrow limit, besides what is
        being reclaimed for its other jobs."""
        s = self.s
        team = spec.tenant
        return s.limit_for(spec) - s.running[team] - s.claimed_gpus(team, besides=spec.id)

    def _may_hold(self, spec: JobSpec) -> int:
        """The most GPUs the job may start on now (:func:`_size`)."""
        return _size(spec, self._team_room(spec), self.s.user_room(spec))

    # -- reservations: placing around them
    def _clashes(self, own: Booked | None, alloc: Allocation, end: int | None, *,
                 shared: bool) -> list[Booked]:
        """The reservations but ``own`` that ``alloc`` would delay: it uses some of their
        GPUs and does not end (by its declared limit) by their start, in booking order.
        ``shared``: ``alloc`` is an answer of :meth:`_place`, met again by every job of
        its shape while the state holds, so the reservations it overlaps are
        remembered (the jobs differ only in their ends)."""
        if not shared:
            overlaps = self._overlaps(alloc)
        else:
            key = (id(alloc), self._reserved_version)
            found = self._overlaps_memo.get(key)
            if found is None:
                if len(self._overlaps_memo) > 1024:
                    self._overlaps_memo.clear()
                found = self._overlaps_memo[key] = (alloc, self._overlaps(alloc))
            overlaps = found[1]
        return [b for b in overlaps
                if b is not own and (end is None or end > b.res.start_s)]

    def _overlaps(self, alloc: Allocation) -> list[Booked]:
        """The reservations that hold some GPU of ``alloc``, in booking order. Looked up by
        node (``alloc`` spans a few nodes, the reservations may span thousands)."""
        on_node = self._booked_on_node
        reserved = self.reserved
        for b in reserved[self._booked_indexed:]:
            for n in b.masks:
                on_node.setdefault(n, []).append(b)
        self._booked_indexed = len(reserved)
        hit: set[int] = set()
        for n, ix in alloc.items():
            entries = on_node.get(n)
            if not entries:
                continue
            m = mask_of(ix)
            for b in entries:
                if m & b.masks[n]:
                    hit.add(id(b))
        if not hit:
            return []
        return [b for b in reserved if id(b) in hit]

    def _avoid(self, clash: list[Booked]) -> frozenset[str]:
        """The nodes of the reservations in ``clash`` (memo: the jobs of one shape meet the
        same ones)."""
        key = (self._reserved_version, tuple(id(b) for b in clash))
        found = self._avoid_memo.get(key)
        if found is None:
            if len(self._avoid_memo) > 1024:
                self._avoid_memo.clear()
            found = self._avoid_memo[key] = frozenset(n for b in clash for n in b.res.alloc)
        return found

    def _backfill_detail(self, binding: list[Booked], alloc: Allocation, end: int | None
                         ) -> dict[str, Any]:
        """What the log row says of a job that starts while higher-ranked jobs hold
        reservations: for each, whether it uses none of their GPUs or ends by its limit
        before their start (only ever said when true)."""
        around: list[str] = []
        ends_before: list[dict[str, Any]] = []
        for b in binding:
            uses = any(b.masks.get(n, 0) & mask_of(ix) for n, ix in alloc.items())
            if uses:
                assert end is not None and end <= b.res.start_s, (b.res.job_id, end)
                ends_before.append({"job": b.res.job_id, "start_s": b.res.start_s})
            else:
                around.append(b.res.job_id)
        detail: dict[str, Any] = {"around": [b.res.job_id for b in binding]}
        if ends_before:
            detail["ends_by_s"] = end
            detail["ends_before"] = ends_before
        if around:
            detail["uses_none_of"] = around
        return detail

    def _line(self) -> _Line:
        """The picture reservations are planned on (built at the first need in a tick):
        the free GPUs and the running jobs' releases now, each reservation holding its
        GPUs from now to its declared end."""
        if self.line is None:
            s = self.s
            self.line = _Line(list(self.release_list()), s.cap.clone(),
                              s.releases.lend())
            self._line_masks = {}
            self._line_sig = s.picture_sig()
            self.line_version += 1
            for b in self.reserved:
                self.line.hold(b.res.job_id, b.res.alloc, self._res_end(b.res), b.masks)
        return self.line

    def _res_end(self, res: Reservation) -> int | None:
        limit = self.s.jobs[res.job_id].spec.max_runtime_s
        return None if limit is None else res.start_s + limit

    def _place_on_line(self, spec: JobSpec, size: int, exclude: frozenset[str]
                       ) -> Allocation | None:
        """A placement now on GPUs that no reservation holds (the picture's free GPUs)."""
        line = self._line()
        shape = _shape_of(spec, size)
        if shape is None:
            return None
        key = (self.line_version, shape, exclude)
        if key in self._failed_places:
            return None
        alloc = self._search(spec, exclude, _placement_args(shape), cap=line.cap)
        if alloc is None:
            self._failed_places.add(key)
        return alloc

    def _reserve(self, rec: JobRecord) -> None:
        """A job that waits for GPUs and holds no reservation yet (last tick's that still
        hold were booked before the walk: ``_keep_reservations``) gets a new plan while
        fewer than ``reservation_depth`` jobs hold one (at most
        ``reservation_plans_per_tick`` plans a tick)."""
        s = self.s
        spec = rec.spec
        if (self.policy == "fifo" or len(self.reserved) >= self.cfg.reservation_depth
                or spec.id in self.booked or spec.id in s.claims):
            return
        if self.plans_left <= 0:
            self.plan_denied = True
            return
        line = self._line()
        self.plans_left -= 1
        res = self.plan(rec, line.releases, cap=line.cap, masks=self._line_masks)
        planned_at = self.now
        if res is None:
            return
        hold = self.quota_holds.get(spec.tenant)
        if hold is not None and self._quota_allows(
                hold, spec.tenant, res.gpus, self._res_end(res)) is None:
            return  # it would take quota a higher job of its team holds its place in
        # seen now so that the next tick, if nothing changes, need not look again
        holds = line.still_holds(res, self._excluded(spec.id))
        self.walk_unlike_next = True
        self._book(rec, res, planned_at,
                   holds_on=s.picture_sig() if holds else None)

    def _book(self, rec: JobRecord, res: Reservation, planned_at: int, *,
              holds_on: tuple[int, int] | None) -> None:
        """``holds_on``: the Scheduler.picture_sig() on which the picture, holding the
        reservations booked before this one, was seen to allow it (None: not seen)."""
        spec = rec.spec
        if self.line is not None:  # else the picture, once built, holds it with the others
            self.line.hold(spec.id, res.alloc, self._res_end(res), res.masks)
            self.line_version += 1
        if holds_on is None:
            self._holds_on.pop(spec.id, None)
        else:
            self._holds_on[spec.id] = holds_on
        held = self._held(spec.tenant, besides=spec.id)
        borrowing = held + res.gpus > self.s.tenants[spec.tenant].guaranteed_gpus
        booked = Booked(res, spec.tenant, borrowing)
        self.reserved.append(booked)
        self.booked[spec.id] = booked
        self._reserved_version += 1
        self.planned_at[spec.id] = planned_at
        if planned_at == self.now:
            self.looked.add(spec.id)

    # -- a team's quota: the place a waiting job holds in it
    def _hold_quota(self, rec: JobRecord, need: int) -> None:
        spec = rec.spec
        start, basis = self._quota_plan(spec.tenant, need, besides=spec.id,
                                        planned=self._team_reserved(spec.tenant))
        self.quota_holds[spec.tenant] = QuotaHold(spec.id, need, start, basis)

    def _team_reserved(self, team: str) -> list[tuple[int, int | None, int]]:
        """(start, declared end, GPUs) of the team's jobs reserved in this tick so far."""
        return [self._planned(b) for b in self.reserved if b.tenant == team]

    def _planned(self, b: Booked) -> tuple[int, int | None, int]:
        """A reservation as the quota plans read it: (start, declared end, GPUs)."""
        return b.res.start_s, self._res_end(b.res), b.res.gpus

    def _quota_plan(self, team: str, need: int, *, besides: str,
                    planned: list[tuple[int, int | None, int]]) -> tuple[int | None, str]:
        """:meth:`_quota_start`, with the sentence a waiting job shows."""
        ok_from, held_now, limit = self._quota_start(team, need, besides=besides,
                                                     planned=planned)
        if ok_from is None:
            return None, (f"waits for team {team}'s quota ({held_now} of {limit} GPUs held): "
                          "a job of the team declares no limit, so no start can be planned")
        return ok_from, (f"waits for team {team}'s quota ({held_now} of {limit} GPUs held):"
                         f" its jobs' declared limits leave room for {need} more at "
                         f"t={ok_from}")

    def _quota_start(self, team: str, need: int, *, besides: str,
                     planned: list[tuple[int, int | None, int]], starting: str | None = None
                     ) -> tuple[int | None, int, int]:
        """When the team's declared limits leave room for ``need`` more GPUs for good: its
        running jobs give theirs back at their declared ends, and its ``planned`` jobs
        (start, declared end, GPUs: reserved, or planned ahead in a look-ahead round) take
        theirs from their starts. None: never, by the declared limits (a job of the team
        declares none). Also the GPUs the team holds now and its limit. ``starting``: a
        job about to start, in ``planned``: its claim, if it has one, is not counted as
        well."""
        s = self.s
        rec = s.jobs.get(besides)
        limit = s.limit_of(team) if rec is None else s.limit_for(rec.spec)
        held_now = (s.running[team] + s.claimed_gpus(team, besides=besides)
                    - self._claim_of(starting, team))
        if held_now + need + sum(p[2] for p in planned) <= limit:
            return self.now, held_now, limit  # room even if every planned job started now
        held = held_now
        events = list(self._team_ends(team))  # (instant, change in GPUs held)
        for start, end, gpus in planned:
            events.append((max(start, self.now), gpus))
            if end is not None:
                events.append((max(end, self.now), -gpus))
        events.sort()
        ok_from = self.now if held + need <= limit else None
        i = 0
        while i < len(events):
            at = events[i][0]
            while i < len(events) and events[i][0] == at:
                held += events[i][1]
                i += 1
            if held + need > limit:
                ok_from = None
            elif ok_from is None:
                ok_from = at
        return ok_from, held_now, limit

    def _team_ends(self, team: str) -> list[tuple[int, int]]:
        """(declared end, -GPUs) of the team's holding jobs: what the quota plans read,
        once per state (a tick asks for each of its waiting jobs)."""
        s = self.s
        key = (team, s.version)
        found = self._ends_cache.get(key)
        if found is None:
            found = []
            for job_id in s.holders[team]:
                end = s.releases.end_of(job_id)
                if end is not None:
                    found.append((max(end, self.now), -alloc_gpus(s.jobs[job_id].alloc)))
            self._ends_cache[key] = found
        return found

    def _quota_allows(self, hold: QuotaHold, team: str, size: int, end: int | None
                      ) -> str | None:
        """May a job of ``size`` GPUs of ``team``, ranked below the team's quota holder,
        start (now, or at a reservation) and run until ``end``? ``"room"`` if the quota
        has room for both whatever happens (the GPUs the team's reserved jobs will take
        counted); ``"before"`` if it ends by the holder's planned start; ``"unplanned"`` if
        the holder has no planned start (a job of its team declares no limit, so nothing
        can be promised to it); None: it may not."""
        s = self.s
        reserved = sum(b.res.gpus for b in self.reserved if b.tenant == team)
        held = s.running[team] + s.claimed_gpus(team, besides=hold.job_id)
        # the holder's own limit: one that may not borrow needs the team within its
        # guarantee, and a job of the team borrowing meanwhile would push its start back
        if held + reserved + size + hold.need <= s.limit_for(s.jobs[hold.job_id].spec):
            return "room"
        if hold.start_s is None:
            return "unplanned"
        if end is not None and end <= hold.start_s:
            return "before"
        return None

    def _spares_quota(self, binding: list[Booked], job_id: str, team: str, size: int,
                      end: int | None) -> bool:
        """May job ``job_id``, ``size`` GPUs of ``team``, start now and run until ``end``
        without taking the quota one of the team's reservations in ``binding`` starts on?
        Each is checked as a kept reservation is (:meth:`_quota_fits`: the team's
        reservations booked before it planned), with this job planned from now to ``end``
        instead of at its own reservation, if it holds one."""
        s = self.s
        mine = [b for b in binding if b.tenant == team]
        if not mine:
            return True
        # a head starting on reclaimed GPUs: its claim becomes its running GPUs
        held = s.running[team] + s.claimed_gpus(team) - self._claim_of(job_id, team)
        limit = min(s.limit_for(s.jobs[b.res.job_id].spec) for b in mine)
        if held + size + sum(b.res.gpus for b in mine) <= limit:
            return True  # room for all of them whatever ends when
        if end is not None and end <= min(b.res.start_s for b in mine):
            return True  # gone before the first of them starts
        checked = {id(b) for b in mine}
        planned: list[tuple[int, int | None, int]] = [(self.now, end, size)]
        for b in self.reserved:  # in booking order
            if b.tenant != team or b.res.job_id == job_id:
                continue
            if id(b) in checked:
                spec = s.jobs[b.res.job_id].spec
                at, _held, _limit = self._quota_start(team, spec.least_gpus, besides=spec.id,
                                                      planned=planned, starting=job_id)
                if at is None or at > b.res.start_s:
                    return False
            planned.append(self._planned(b))
        return True

    def _claim_of(self, job_id: str | None, team: str) -> int:
        """The GPUs being reclaimed for ``job_id`` of ``team`` (0: none)."""
        claim = None if job_id is None else self.s.claims.get(job_id)
        return claim.gpus if claim is not None and claim.tenant == team else 0

    def _quota_fits(self, spec: JobSpec, start_s: int) -> bool:
        at, _held, _limit = self._quota_start(spec.tenant, spec.least_gpus, besides=spec.id,
                                              planned=self._team_reserved(spec.tenant))
        return at is not None and at <= start_s

    def _place(self, spec: JobSpec, size: int, exclude: frozenset[str]) -> Allocation | None:
        """A placement now on the cluster's free GPUs. The answer is the memo's, shared by
        every job of the shape while the state holds: read it, never modify it."""
        s = self.s
        shape = _shape_of(spec, size)
        if shape is None:
            return None
        # Jobs of one heap often ask for the same shape: the search is deterministic and
        # its answer holds until the state changes (every start, end or health change
        # bumps Scheduler.version), so it is not repeated; a job that then clashes with
        # a reservation leaves the GPUs as they were for the next one.
        key = (s.version, shape, exclude)
        places = self._places
        if key in places:
            return places[key]
        alloc = self._search(spec, exclude, _placement_args(shape))
        if len(places) > 4096:
            places.clear()
        places[key] = alloc
        return alloc

    def _search(self, spec: JobSpec, exclude: frozenset[str], kw: dict[str, Any],
                cap: Capacity | None = None) -> Allocation | None:
        """An interactive job tries the interactive slice first; one that does not fit
        there is an ordinary job, placed (and preemptible) outside it."""
        s = self.s
        cap = s.cap if cap is None else cap
        if spec.interactive and s.interactive_nodes:
            inside = find_placement(cap, only=s.interactive_nodes - self._claimed_all, **kw)
            if inside is not None:
                return inside
        return find_placement(cap, exclude=exclude, **kw)

    def _excluded(self, job_id: str | None) -> frozenset[str]:
        """Nodes a job may not use: the interactive slice and other heads' reclaimed nodes.
        Cached while the claims do not change (every examined job asks)."""
        s = self.s
        if self._excl_key != s.claims_version:
            self._excl_key = s.claims_version
            self._claimed_all = frozenset(s.claimed_nodes)
            self._excl_all = s.interactive_nodes | self._claimed_all
        claim = s.claims.get(job_id) if job_id is not None else None
        if claim is None:
            return self._excl_all
        return self._excl_all - (claim.nodes - s.interactive_nodes)

    def _excluded_free(self, gpu_type: str | None) -> int:
        return self._free_on(self._excluded(None), gpu_type)

    def _free_on(self, names: frozenset[str], gpu_type: str | None) -> int:
        """Free GPUs on these schedulable nodes; cached until the next state change."""
        s = self.s
        key = (s.version, s.claims_version, names, gpu_type)
        hit = self._free_cache.get(key)
        if hit is not None:
            return hit
        total = 0
        for n in names:
            node = s.cap.nodes[n]
            if s.cap.is_schedulable(n) and (gpu_type is None or node.gpu_type == gpu_type):
                total += node.free
        if len(self._free_cache) > 64:
            self._free_cache.clear()
        self._free_cache[key] = total
        return total

    def _diagnose(self, spec: JobSpec, need: int, exclude: frozenset[str]) -> PendingReason:
        s = self.s
        key = (s.version, s.claims_version, spec.gpu_type, need, spec.interactive)
        found = self._diagnose_memo.get(key)
        if found is None:
            found = self._diagnose_memo[key] = self._diagnosed(spec, need)
        return found

    def _diagnosed(self, spec: JobSpec, need: int) -> PendingReason:
        cap = self.s.cap
        t = spec.gpu_type
        if cap.healthy_gpus(t) < need:
            return P.NODE_DOWN
        free = cap.free_gpus(t)
        if free - self._excluded_free(t) < need:
            idle_elsewhere = sum(
                cap.nodes[n].free for n in self.s.unhealthy
                if t is None or cap.nodes[n].gpu_type == t
            )
            if free - self._excluded_free(t) + idle_elsewhere >= need:
                return P.NODE_DOWN  # it would fit if the down or draining nodes were back
            if spec.interactive and need <= self._slice_gpus():
                return P.INTERACTIVE_TIER_FULL  # it would fit the slice, were it free
            return P.GPU_TYPE if t is not None else P.RESOURCES
        return P.TOPOLOGY

    def _slice_gpus(self) -> int:
        cap = self.s.cap
        return sum(cap.nodes[n].gpus for n in self.s.interactive_nodes)

    def _wait(self, rec: JobRecord, reason: PendingReason) -> None:
        rec.pending_reason = reason
        self.pending[rec.spec.id] = reason

    def release_list(self) -> list[Any]:
        """The running jobs' releases in (end_s, job_id) order (the scheduler's index keeps
        the list and the Release objects between ticks; do not modify it)."""
        return self.s.releases.releases()

    def plan(self, rec: JobRecord, releases: list[Release], *, cap: Capacity | None = None,
             masks: dict[int, Any] | None = None,
             planned: list[tuple[int, int | None, int]] | None = None) -> Reservation | None:
        """plan_reservation for ``rec``, started no earlier than its team's quota allows
        (its team's ``planned`` jobs ahead of it counted; default: those reserved in this
        tick). ``cap``/``masks``: a picture of the cluster (this tick's, or a look-ahead
        round's) and its mask cache; a round's releases may lie in the past by now: such a
        start is shown as now."""
        s = self.s
        spec = self._planned_size(rec.spec)
        res = plan_reservation(s.cap if cap is None else cap, spec, releases, self.now,
                               exclude=self._excluded(spec.id),
                               mask_cache=self.s.releases.masks if masks is None else masks,
                               presorted=True)
        if res is None:
            return None
        if cap is not None and res.start_s < self.now:  # a release of the copy came early
            res = replace(res, start_s=self.now)
        if planned is None:
            planned = self._team_reserved(spec.tenant)
        quota_at, _held, _limit = self._quota_start(spec.tenant, spec.least_gpus,
                                                    besides=spec.id, planned=planned)
        if quota_at is None:
            return None
        if quota_at > res.start_s:
            res = replace(res, start_s=quota_at,
                          basis=f"{res.basis}; team {spec.tenant}'s own declared limits "
                                f"leave room for it at t={quota_at}")
        return res

    def _planned_size(self, spec: JobSpec) -> JobSpec:
        """An elastic job planned at no more than it may ever hold: its team's limit (its
        guarantee alone if it may not borrow) and its owner's cap. Planned at its full
        size, a job that could hold 8 was told it "would fit on 2 nodes (16 GPUs)", and
        the jobs behind it planned around GPUs it would never take."""
        if not spec.elastic:
            return spec
        most = self.s.limit_for(spec)
        owner_cap = self.s.tenants[spec.tenant].max_gpus_per_user
        if owner_cap is not None and spec.owner is not None:
            most = min(most, owner_cap)
        if spec.min_gpus is None or not spec.min_gpus <= most < spec.gpus:
            return spec  # never fits under its limit (the planner says so) or not capped
        return replace(spec, gpus=most)

    # -- preemption
    def _may_search(self, rec: JobRecord, held: int,
                    avoid: frozenset[str] = frozenset()) -> bool:
        """May this head start a preemption search now? The rule (preemption.may_preempt:
        some team above its guarantee has a share above this team's once the head runs),
        a search left in this tick's budget, and no vain search since the last change."""
        spec = rec.spec
        if (self.policy == "fifo" or spec.interactive
                or self._searched_in_vain(spec.id, avoid)):
            return False
        capped = self.searches >= self.cfg.max_preemption_searches_per_tick
        if capped and self.search_denied:
            self.denied.append((spec.id, held, avoid))
            return False
        allowed = self._rule_allows(spec, held)
        if allowed and self._cannot_make_room(rec, held, avoid):
            # no search could help, and the bound costs a fraction of one: it takes no
            # search from the tick's budget (the next head may have the search)
            self._note_vain(spec.id, avoid)
            return False
        if capped:
            # the next tick searches for this head: this tick is no fixed point
            if allowed:
                self.search_denied = True
                self.denied.append((spec.id, held, avoid))
            return False
        return allowed

    def _rule_allows(self, spec: JobSpec, held: int) -> bool:
        """preemption.may_preempt for this head, its team holding ``held``: some team
        above its guarantee has a share above this team's once the head runs."""
        key = (self.s.version, spec.tenant, held, spec.gpus)
        allowed = self._may_memo.get(key)
        if allowed is None:
            mine = TenantLoad(spec.tenant, self.s.tenants[spec.tenant].guaranteed_gpus, held)
            allowed = may_preempt(mine, spec.gpus, self._loads().values())
            if len(self._may_memo) > 4096:
                self._may_memo.clear()
            self._may_memo[key] = allowed
        return allowed

    def _leaving_makes_room(self, rec: JobRecord, held: int, avoid: frozenset[str]) -> bool:
        """The head fits on free GPUs and GPUs of jobs already asked to stop (on nodes it
        may use): it makes no search and waits for them, with a reservation, as a job
        waits for running jobs' ends. They stop within their grace windows, as a new
        victim would, and nobody else loses work. A search counted their GPUs as held and
        asked another job to stop: a 64-GPU gang stopped for one 8-GPU head, and the next
        head stopped a second job while 56 of the gang's GPUs were on their way back (the
        demo, 2026-12-07). (Claiming those GPUs for the head instead, as a search's claim
        does, left the claimed nodes' free GPUs idle: the anchor window's mean wait grew by
        a fifth.)"""
        s = self.s
        spec = rec.spec
        if self.policy != "full" or spec.interactive or not s.leaving_jobs:
            return False
        exclude = self._excluded(spec.id) | avoid
        leaving_on = self._leaving_on()
        cap = s.cap
        coming = sum(m.bit_count() for n, gone in leaving_on.items()
                     if n not in exclude and cap.is_schedulable(n) for _j, m in gone)
        if not coming or not self._rule_allows(spec, held):
            return False
        shape = _shape_of(spec, self._may_hold(spec))
        if shape is None:
            return False
        key = (s.version, s.claims_version, shape, exclude)
        found = self._leaving_places.get(key)
        if found is None:
            alloc = find_placement(self._leaving_cap(), exclude=exclude,
                                   **_placement_args(shape))
            # on GPUs of a job asked to stop: on free GPUs alone the walk would place it
            found = alloc is not None and any(
                m & mask_of(ix) for n, ix in alloc.items() for _j, m in leaving_on.get(n, ()))
            if len(self._leaving_places) > 4096:
                self._leaving_places.clear()
            self._leaving_places[key] = found
        return found

    def _leaving_on(self) -> dict[str, list[tuple[str, int]]]:
        """By node, the jobs asked to stop and the GPUs (a mask) each gives back there
        (built once per state)."""
        s = self.s
        if self._leaving_memo is None or self._leaving_memo[0] != s.version:
            on: dict[str, list[tuple[str, int]]] = {}
            for job_id in sorted(s.leaving_jobs):
                alloc = s.jobs[job_id].alloc
                for n, ix in (alloc or {}).items():
                    on.setdefault(n, []).append((job_id, mask_of(ix)))
            self._leaving_memo = (s.version, on, None)
        return self._leaving_memo[1]

    def _leaving_cap(self) -> Capacity:
        """The cluster with the GPUs of every job asked to stop shown free (built once per
        state, when a head first needs it)."""
        s = self.s
        on = self._leaving_on()
        memo = self._leaving_memo
        assert memo is not None
        if memo[2] is None:
            cap = s.cap.clone()
            masks: dict[str, int] = {}
            for n, gone in on.items():
                for _j, m in gone:
                    masks[n] = masks.get(n, 0) | m
            cap.give_back_masks(masks)
            self._leaving_memo = (memo[0], on, cap)
            return cap
        return memo[2]

    def _victims_for(self, rec: JobRecord, held: int, avoid: frozenset[str]
                     ) -> tuple[PreemptionPlan, frozenset[str]] | None:
        """The search itself (it changes nothing): the plan, if it found victims, and
        the nodes the head may not use."""
        cands = self.candidates()
        if not cands:
            return None
        loads, exclude = self._as_head_sees(rec.spec, held, avoid)
        plan = select_victims(
            self.s.cap, rec.spec, cands, loads, self.now, config=self.cfg,
            policy=self.policy, exclude=exclude, costs=self._victim_costs,
        )
        return (plan, exclude) if plan is not None and plan.victims else None

    def _cannot_make_room(self, rec: JobRecord, held: int, avoid: frozenset[str]) -> bool:
        """preemption.cannot_make_room for this head on the tick's candidates."""
        pool = self._pool
        if pool is None:
            pool = self._pool = victim_pool(self.candidates(), self.cfg, self.policy)
        loads, exclude = self._as_head_sees(rec.spec, held, avoid)
        return cannot_make_room(self.s.cap, rec.spec, loads, pool, exclude)

    def _as_head_sees(self, spec: JobSpec, held: int, avoid: frozenset[str]
                      ) -> tuple[dict[str, TenantLoad], frozenset[str]]:
        """What a preemption search for this head reads: every team's load, its own team's
        counting ``held``, and the nodes it may not use."""
        loads = dict(self._loads())
        loads[spec.tenant] = TenantLoad(spec.tenant,
                                        self.s.tenants[spec.tenant].guaranteed_gpus, held)
        return loads, self._excluded(spec.id) | avoid

    def _loads(self) -> dict[str, TenantLoad]:
        """Every team's load now (the same dict while the state holds: do not modify)."""
        s = self.s
        version, loads = self._loads_memo
        if version != s.version:
            loads = {
                name: TenantLoad(name, s.tenants[name].guaranteed_gpus,
                                 s.running[name] - s.leaving[name])
                for name in s.tenant_names
            }
            self._loads_memo = (s.version, loads)
        return loads

    def _reclaim(self, rec: JobRecord, held: int, avoid: frozenset[str] = frozenset()
                 ) -> bool:
        """Preemption search for a head the rule lets preempt. True if victims were asked
        to stop."""
        s = self.s
        spec = rec.spec
        cands = self.candidates()
        found = self._victims_for(rec, held, avoid)
        if found is None:
            return False
        plan, exclude = found
        chosen = {v.job_id for v in plan.victims}
        self._candidates = [c for c in cands if c.spec.id not in chosen]
        self._pool = None  # its node masks are built when read: a rebuild costs a filter
        # a view (the dashboard's "weighed"), which sorts and words every candidate: a
        # simulation without views (the benchmarks, what-if) records none
        weighed = [w.words for w in plan.weighed] if s.look_ahead else None
        for v in plan.victims:
            victim = s.jobs[v.job_id]
            detail = {
                "for": spec.id, "cost_s": v.cost_s, "est_gpu_s_lost": v.est_gpu_s_lost,
                "grace_s": v.grace_s, "words": v.words, "why": plan.why,
            }
            if weighed is not None:
                detail["weighed"] = weighed
            s.request_preempt(victim, spec.id, self.now, detail)
            self.preempt_requests += 1
            if self.policy == "priority-kill":
                s.kill_now(victim, self.now, {"killed": True, "for": spec.id})
        self.line = None  # the victims' GPUs come back sooner: the picture is rebuilt
        if self.policy == "priority-kill":
            # no more than the job may hold (its team's room, its owner's cap): the plan
            # made room for an elastic job's whole request
            alloc = self._place(spec, min(alloc_gpus(plan.placement), self._may_hold(spec)),
                                exclude)
            if alloc is not None:
                self._start(rec, alloc, Reason.PLACED, {"reclaimed_from": sorted(chosen)})
                return True
        s.add_claim(ReclaimClaim(
            head_id=spec.id, tenant=spec.tenant, gpus=alloc_gpus(plan.placement),
            nodes=frozenset(plan.placement), victims=chosen, at_s=self.now, why=plan.why,
        ))
        self._wait(rec, P.PREEMPTING)
        return True

    def candidates(self) -> list[Candidate]:
        """Running jobs of the tenants above their guarantee (built once per tick). A job's
        Candidate is kept from the tick that last built it while what it is made of holds
        (the same allocation object, run start, last checkpoint and count against the
        daily cap): a search at every tick would otherwise remake thousands of them. The
        whole list is kept while nothing it is made of changed: no job started, stopped
        or checkpointed, no quota or node changed (``cluster_version``, ``checkpoints``),
        and no preemption of a candidate left the last day (the count the daily cap
        reads): until then, a tick that builds it again gets the same list."""
        if self._candidates is None:
            s = self.s
            memo = s.candidates_memo
            if memo is not None and memo[0] == s.cluster_version and self.now < memo[1]:
                if s.kept_checkpoints != s.checkpoints:
                    memo = self._checkpointed_since(memo)
                if memo is not None:
                    self._candidates = memo[2]
                    self._count("candidates_kept")
                    return memo[2]
            self._candidates = self._build_candidates()
        return self._candidates

    def _build_candidates(self) -> list[Candidate]:
        """The list afresh, team by team in ``tenant_names`` order, each team's running
        jobs in submission order. A team's slice is taken from the last build when none
        of its own jobs changed the cluster since (``Scheduler.team_touched``), nothing
        else did (a quota, a node: ``slices_layout``), its Candidates know every
        checkpoint reported since (``kept_checkpoints``) and no count against the daily
        cap moved: a start or an end changes one team's slice, and building the 30 others
        again was most of a build on a cluster of thousands of jobs."""
        s = self.s
        now = self.now
        kept = s.candidates
        layout = s.cluster_version - s.touched_total
        slices = s.candidate_slices
        if (slices is None or s.slices_layout != layout
                or self._kept_current(kept) is None):
            slices = {}
        cap_n = self.cfg.max_preemptions_per_job_per_day
        fresh: dict[str, Candidate] = {}
        new_slices: dict[str, tuple[int, int, list[str]]] = {}
        out: list[Candidate] = []
        valid_until = _FOREVER
        for name in s.tenant_names:
            if s.running[name] - s.leaving[name] <= s.tenants[name].guaranteed_gpus:
                continue
            touched = s.team_touched.get(name, 0)
            sl = slices.get(name)
            if sl is not None and sl[0] == touched and now < sl[1]:
                for job_id in sl[2]:
                    c = fresh[job_id] = kept[job_id]
                    out.append(c)
                new_slices[name] = sl
                valid_until = min(valid_until, sl[1])
                self._count("candidate_slices_kept")
                continue
            by_seq = s.holders_by_seq.get(name)
            if by_seq is None:
                by_seq = s.holders_by_seq[name] = sorted(
                    s.holders[name], key=lambda j: s.jobs[j].spec.seq)
            ids: list[str] = []
            team_until = _FOREVER
            for job_id in by_seq:
                r = s.jobs[job_id]
                if r.state != S.RUNNING or not r.alloc:
                    continue
                last_day = r.preemptions_against_cap(now, cap_n)
                for t in r.preemption_times:  # the count changes when one is a day old
                    if now < t + DAY_S < team_until:
                        team_until = t + DAY_S
                run_start = r.run_start_s or 0
                c = kept.get(job_id)
                if (c is None or c.spec is not r.spec or c.alloc is not r.alloc
                        or c.run_start_s != run_start
                        or c.last_checkpoint_s != r.last_checkpoint_s
                        or c.preemptions_last_day != last_day):
                    c = Candidate(
                        spec=r.spec, alloc=r.alloc, run_start_s=run_start,
                        last_checkpoint_s=r.last_checkpoint_s,
                        preemptions_last_day=last_day,
                        in_slice=r.spec.interactive and s.in_slice(r.alloc),
                        grace_s=s.grace_window(r.spec),
                    )
                fresh[job_id] = c
                out.append(c)
                ids.append(job_id)
            new_slices[name] = (touched, team_until, ids)
            valid_until = min(valid_until, team_until)
        s.candidates = fresh  # only the jobs still candidates: the memo stays small
        if s.candidate_slices is not None:
            s.candidate_slices = new_slices
        s.slices_layout = layout
        s.kept_checkpoints = s.checkpoints
        s.candidates_memo = (s.cluster_version, valid_until, out)
        return out

    def _kept_current(self, kept: dict[str, Candidate]) -> dict[str, Candidate] | None:
        """Bring the kept Candidates up to date with the checkpoints reported since they
        were last (``kept_checkpoints``): each job that checkpointed gets its new last
        checkpoint. Returns the Candidates replaced, by job; None if there were too many
        to tell (the scheduler remembers the last ``CHECKPOINTS_REMEMBERED``)."""
        s = self.s
        since = s.checkpoints - s.kept_checkpoints
        changed: dict[str, Candidate] = {}
        if not since:
            return changed
        if since > len(s.checkpointed):
            return None
        for job_id in list(s.checkpointed)[-since:]:
            c = kept.get(job_id)
            if c is None:
                continue  # not a candidate (its team within its guarantee, or leaving)
            last = s.jobs[job_id].last_checkpoint_s
            if c.last_checkpoint_s != last:
                kept[job_id] = changed[job_id] = replace(c, last_checkpoint_s=last)
        s.kept_checkpoints = s.checkpoints
        return changed

    def _checkpointed_since(self, memo: tuple[int, int, list[Candidate]]
                            ) -> tuple[int, int, list[Candidate]] | None:
        """The last candidates with the checkpoints reported since (nothing else changed:
        the same cluster_version, and no count against the daily cap moved): the jobs
        that checkpointed get their new last checkpoint, the rest stay as they are. A
        running job checkpoints every few minutes, so on a cluster of thousands of jobs
        some did at nearly every tick, and building every candidate again cost an eighth
        of a what-if run. None: too many to tell."""
        changed = self._kept_current(self.s.candidates)
        if changed is None:
            return None
        out = memo[2]
        if changed:
            out = [changed.get(c.spec.id, c) for c in out]
            self._count("candidates_checkpointed")
        memo = (memo[0], memo[1], out)
        self.s.candidates_memo = memo
        return memo

    # -- one job, policy fifo
    def examine_fifo(self, rec: JobRecord) -> bool:
        s = self.s
        spec = rec.spec
        room = s.limit_of(spec.tenant) - s.running[spec.tenant]
        if room < spec.least_gpus:
            self._wait(rec, P.QUOTA_LIMIT)
            return False
        user_room = s.user_room(spec)
        if user_room is not None:
            if user_room < spec.least_gpus:
                self._wait(rec, P.USER_LIMIT)
                return False
            room = min(room, user_room)
        # an elastic job asks for no more than its team's room; otherwise the whole gang
        size = min(spec.gpus, room)
        slice_ = s.interactive_nodes if not spec.interactive else frozenset()
        alloc = first_fit(s, spec, size, spec.least_gpus, slice_)
        if alloc is None:
            self._wait(rec, self._diagnose(spec, spec.gpus, s.interactive_nodes))
            return False
        self._start(rec, alloc, Reason.PLACED, {})
        return True

    # ------------------------------------------------------------------ 4. estimates
    def start_estimates(self) -> None:
        """Publish what this tick planned, then plan the rest of the look-ahead.

        The reserved jobs' estimates are their reservations (kind ``reserved``: at the
        latest, if every running job uses its whole declared limit); a quota holder's is
        when its team's declared limits leave it room (``quota``). The first
        ``estimate_lookahead`` jobs of each tenant's queue that hold neither are planned
        one after the other behind the reservations, each holding its planned GPUs from
        its planned start to its declared end, so a later job's estimate accounts for those
        ahead (``projected``: nothing reserves it, so jobs that start meanwhile may delay
        it).

        That look-ahead is a *round* that may span ticks, like Slurm's backfill cycle: each
        tick plans at most ``estimate_plans_per_tick`` jobs of it (and, with a clock, stops
        after ``estimate_budget_s``), and the next tick goes on where it stopped. The round
        plans against the cluster as it was at its first tick (a copy of the free GPUs and
        of the running jobs' releases, with that tick's reservations held, kept with the
        round), as Slurm's backfill goes on with its node-space map after yielding its
        locks (``bf_continue``): going on costs only the new plans. A node changing health
        ends the round early; a planned start earlier than now (its release came early) is
        shown as now. Estimates are not decisions: a round that takes a few ticks delays no
        job, while planning 300 jobs in one tick at 100,000 jobs would take seconds.
        """
        s = self.s
        held_before = [r.job_id for r in s.reserved]
        self._hand_on_reservations()
        s.quota_holds = dict(self.quota_holds)
        # a job whose reservation this tick did not keep (its team's quota was cut, a job
        # ranked higher took its place, ...) no longer starts "at the latest" then: its
        # estimate goes until the look-ahead plans it again, which may be never for a job
        # deep in its team's queue (a job told QuotaLimit still read "reserved 8 nodes" ten
        # minutes on: a check of the estimates on the demo, 2026-12-07)
        for job_id in held_before:
            rec = s.jobs.get(job_id)
            if (rec is not None and rec.state == S.QUEUED and job_id not in self.booked
                    and job_id not in s.claims and rec.estimate is not None
                    and rec.estimate.kind in _KEPT_KINDS):
                self._estimate(rec, None)
        if not len(s.queues):
            s.estimate_round = None
            return
        for b in self.reserved:
            if b.res.job_id not in s.claims:
                self._estimate_if_new(s.jobs[b.res.job_id], self._kept_estimate(b))
        # a head whose GPUs are being reclaimed starts when its victims have exited: said
        # at once, not when the look-ahead's round reaches it (its kept reservation's
        # "at the latest" 50 minutes away stood while it started 25 s later: a check of
        # the estimates on the demo, 2026-12-07)
        for job_id, claim in s.claims.items():
            rec = s.jobs.get(job_id)
            if rec is not None and rec.state == S.QUEUED:
                self._estimate_if_new(rec, self._reclaim_estimate(claim, rec))
        if not s.look_ahead:
            s.estimate_round = None
            return
        rnd: EstimateRound | None = s.estimate_round
        if rnd is not None and rnd.plan is not None and rnd.unhealthy != s.unhealthy:
            rnd = s.estimate_round = None  # its picture of the cluster is wrong now
        if rnd is None:
            rnd = self._new_round()
            if rnd is None:
                return
            s.estimate_round = rnd
        self._plan_in_line(rnd)
        self.stats["estimate_round_left"] = len(rnd.line) - rnd.cursor
        if rnd.cursor >= len(rnd.line):
            s.estimate_round = None
            s.planned = set(rnd.line)
            s.estimates_version = rnd.version
            s.estimates_at = rnd.started_s

    def _hand_on_reservations(self) -> None:
        """The tick's reservations, their looks and its picture, for the next tick."""
        s = self.s
        s.reserved = [b.res for b in self.reserved]
        self._hand_on_line()
        s.planned_at = self.planned_at
        s.checked_at = self.checked_at
        # the plans and looks of this tick saw the cluster as it is now: every start of
        # the tick respected them (a start can only take GPUs no reservation needs)
        inputs = s.plan_inputs()
        for job_id in self.looked:
            if job_id in self.booked:
                self.looked_sig[job_id] = inputs
        s.looked_sig = self.looked_sig

    def _estimate_if_new(self, rec: JobRecord, est: StartEstimate | None) -> None:
        old = rec.estimate
        if (est is None) != (old is None) or (
                est is not None and old is not None
                and (est.start_s, est.basis, est.kind) != (old.start_s, old.basis, old.kind)):
            self._estimate(rec, est)

    def _new_round(self) -> EstimateRound | None:
        """The look-ahead to plan now, or None if the last round still stands.

        Planning replays the running jobs' releases (costly at scale), so the look-ahead
        is replanned only when something changed and either a job entered it or the last
        round is ESTIMATE_REFRESH_S old (``Scheduler.round_due``, which the fixed points read
        too). Nothing changed: not even the look-ahead is walked.
        """
        s = self.s
        due = s.round_due(self.now, self.booked)
        if due is None or due > self.now:
            return None
        wanted = sorted(((s.share_keys.get(name, _ZERO_SHARE), ek), job_id)
                        for name, ek, job_id in s.look_ahead_jobs(self.booked))
        return EstimateRound(line=[j for _k, j in wanted], version=s.version,
                             started_s=self.now)

    def _plan_in_line(self, rnd: EstimateRound) -> None:
        s = self.s
        if rnd.plan is None:  # the round's first tick: its picture of the cluster
            rnd.plan = _Line(list(self.release_list()), s.cap.clone(),
                              s.releases.lend())
            for b in self.reserved:
                rnd.plan.hold(b.res.job_id, b.res.alloc, self._res_end(b.res), b.masks)
                rnd.team_plans.setdefault(b.tenant, []).append(self._planned(b))
            rnd.unhealthy = frozenset(s.unhealthy)
        line = rnd.plan
        cfg = self.cfg
        phase_started = self.timer()
        plans = 0
        while rnd.cursor < len(rnd.line):
            if plans >= cfg.estimate_plans_per_tick or (
                self.clock is not None
                and self.timer() - phase_started >= cfg.estimate_budget_s
            ):
                break
            rec = s.jobs[rnd.line[rnd.cursor]]
            rnd.cursor += 1
            job_id = rec.spec.id
            if rec.state != S.QUEUED or job_id in self.booked:
                continue
            if job_id in s.claims:
                continue  # (its estimate is its claim's: start_estimates)
            plans += 1
            if rec.pending_reason == P.USER_LIMIT:
                self._estimate(rec, self._owner_free_at(rec.spec))
                continue
            team_plans = rnd.team_plans.setdefault(rec.spec.tenant, [])
            hold = s.quota_holds.get(rec.spec.tenant)
            holder = None if hold is None else s.jobs.get(hold.job_id)
            holder_planned = hold is not None and hold.job_id in rnd.planned_ok
            planned = self._behind_hold(
                rec, team_plans,
                holder.estimate.start_s if holder_planned and holder is not None
                and holder.estimate is not None else None, holder_planned=holder_planned)
            if planned is None:
                self._estimate(rec, None)  # it waits for a holder whose start is unknown
                continue
            res = self.plan(rec, line.releases, cap=line.cap, masks=rnd.masks,
                            planned=planned)
            if res is None:
                self._estimate(rec, None)
                continue
            rnd.planned_ok.add(job_id)
            # a look-ahead's plan reserves nothing: its sentence says where it would fit
            # (it read "reserved 1 node ... (not reserved: ...)": 2026-12-07)
            basis = unreserved(res.basis)
            if rec.pending_reason in (P.QUOTA_LIMIT, P.QUOTA_RESERVED):
                est = StartEstimate(res.start_s, f"{basis} (it waits for its team's quota"
                                    " and holds no GPUs: it starts then if they are free)",
                                    "quota")
            else:
                est = StartEstimate(res.start_s, f"{basis} (not reserved: jobs that start"
                                    " meanwhile may delay it)", "projected")
            self._estimate(rec, est)
            end = None if rec.spec.max_runtime_s is None else (
                res.start_s + rec.spec.max_runtime_s)
            line.hold(job_id, dict(res.alloc), end)  # the jobs behind it plan around it
            team_plans.append((res.start_s, end, res.gpus))
        self.stats["estimate_plans"] = plans

    def _behind_hold(self, rec: JobRecord, team_plans: list[tuple[int, int | None, int]],
                     holder_start: int | None, *, holder_planned: bool
                     ) -> list[tuple[int, int | None, int]] | None:
        """The team's quota as a job's plan reads it. A job held back by its team's quota
        holder (QuotaReserved) may start only when the quota has room for both, within the
        holder's own limit (``_quota_allows``: its guarantee, if it may not borrow), until
        the holder starts; then after the holder's use of the quota. So the holder counts
        from now: until its start (``holder_start``, its plan when ``holder_planned``, its
        plan then being in ``team_plans``; else its quota start) with the GPUs that keep
        the job behind it within the holder's limit, then for its declared limit. None if
        that start is unknown (the job then waits for it, and nothing can be promised).
        Planned as if the holder were not there, the job was told "now", a time already
        past by the next minute (a pipeline author's session, 2026-12-07); planned from
        the holder's start on, or within the team's limit rather than the holder's, or on
        a reservation kept from before the hold, "now" still (a team lead's session)."""
        if rec.pending_reason != P.QUOTA_RESERVED:
            return team_plans
        s = self.s
        hold = s.quota_holds.get(rec.spec.tenant)
        if hold is None or hold.job_id == rec.spec.id:
            return team_plans
        holder = s.jobs.get(hold.job_id)
        # the holder's limit read as the job's: held + job + holder <= the holder's limit
        extra = 0 if holder is None else max(0, s.limit_for(rec.spec)
                                              - s.limit_for(holder.spec))
        if holder_planned:
            if holder_start is None or holder_start <= self.now:
                return team_plans
            return [*team_plans, (self.now, holder_start, hold.need + extra)]
        if hold.start_s is None:
            return None
        limit = None if holder is None else holder.spec.max_runtime_s
        start = max(hold.start_s, self.now)
        end = None if limit is None else start + limit
        plans = [*team_plans, (start, end, hold.need)]
        if start > self.now:
            plans.append((self.now, start, hold.need + extra))
        return plans

    def _reclaim_estimate(self, claim: ReclaimClaim, rec: JobRecord) -> StartEstimate:
        """A head's start while its victims stop: when the last of them has exited (their
        grace windows end by then). With none of their ends known, the instant the claim
        was first told, kept (told as "now" anew it changed at every tick)."""
        ends = [self.s.releases.end_of(v) for v in claim.victims]
        known = [e for e in ends if e is not None]
        old = rec.estimate
        start = (max(known) if known else old.start_s if old is not None
                 and old.kind == "reclaim" else self.now)
        return StartEstimate(start, "when the preempted jobs have exited (their grace "
                             "windows end by then)", "reclaim")

    def _kept_estimate(self, b: Booked) -> StartEstimate | None:
        """A reservation's estimate: its start, at the latest (kind ``reserved``; a
        borrower's may be taken by a guarantee: ``borrowed``). A job its team's quota
        holder keeps waiting (QuotaReserved) on a reservation it kept from before the hold
        starts no earlier than the quota allows both (:meth:`_behind_hold`): it said "from
        t=now: they are free now" while it could not start (a team lead's session,
        2026-12-07)."""
        s = self.s
        rec = s.jobs[b.res.job_id]
        est = StartEstimate(b.res.start_s, b.res.basis, "borrowed" if b.borrowing
                            else "reserved")
        hold = s.quota_holds.get(b.tenant)
        if (rec.pending_reason != P.QUOTA_RESERVED or hold is None
                or hold.job_id == rec.spec.id):
            return est
        holder = self.booked.get(hold.job_id)
        plans = self._behind_hold(rec, [self._planned(o) for o in self.reserved
                                        if o.tenant == b.tenant and o is not b],
                                  None if holder is None else holder.res.start_s,
                                  holder_planned=holder is not None)
        if plans is None:
            return None
        at, _held, _limit = self._quota_start(b.tenant, rec.spec.least_gpus,
                                              besides=rec.spec.id, planned=plans)
        if at is None:
            return None
        if at <= est.start_s:
            return est
        return StartEstimate(at, f"{est.basis}; job {hold.job_id}, ahead of it in team "
                             f"{b.tenant}, holds the team's quota until it starts, and the "
                             f"team's declared limits leave room for both at t={at} (it "
                             "holds GPUs it cannot start on before then)", "quota")

    def _owner_free_at(self, spec: JobSpec) -> StartEstimate | None:
        """A job over its owner's cap: when the owner's running jobs, ending by their
        declared limits, leave it room (None: one of them has no limit). Reads the team's
        holding jobs, at most ``estimate_plans_per_tick`` times per tick."""
        s = self.s
        cap = s.tenants[spec.tenant].max_gpus_per_user
        room = s.user_room(spec)
        if cap is None or room is None:
            return None
        ends: list[tuple[int, int]] = []
        for job_id in s.holders[spec.tenant]:
            rec = s.jobs[job_id]
            if rec.spec.owner == spec.owner:
                end = s.releases.end_of(job_id)
                ends.append((end if end is not None else _FOREVER, alloc_gpus(rec.alloc)))
        need = spec.least_gpus
        at = self.now
        for end, gpus in sorted(ends):
            if room >= need:
                break
            if end == _FOREVER:  # no declared limit: no plan
                return None
            room += gpus
            at = max(at, end)
        if room < need:
            return None
        return StartEstimate(at, f"when its owner's running jobs reach their declared "
                             f"limits, leaving room under the team's cap of {cap} GPUs per "
                             "user (it holds no GPUs: it starts then if they are free)", "quota")

    def _estimate(self, rec: JobRecord, est: Any) -> None:
        rec.estimate = est
        self.estimates[rec.spec.id] = est

    # ------------------------------------------------------------------ 5. pending reasons
    def pending_reasons(self) -> None:
        """Reasons were set as jobs were examined; jobs examined and started clear theirs.
        Only the jobs that are still waiting are published."""
        s = self.s
        for job_id in list(self.pending):
            if s.jobs[job_id].state != S.QUEUED:
                del self.pending[job_id]
