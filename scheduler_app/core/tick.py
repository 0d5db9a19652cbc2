"""The tick: the seed's loop, as numbered phases.

    0. fire due timers         grace expiry, time limits, placing timeouts
    1. update usage            decay every tenant's usage to now (O(tenants))
    2. order the heaps         (tenant, size class) heaps by fair share, then head rank
    3. pop heads               a. hand reclaimed GPUs to heads whose victims have exited;
                               b. for each job in rank order: quota, placement,
                               reservation, backfill, preemption search for entitled heads
    4. start estimates         from the reservation plan, for the reservation holder and the
                               first ``estimate_lookahead`` jobs of each tenant's queue
    5. pending reasons         published for every job the tick examined

Bounds (the tick never scans all jobs or all nodes):

- Phase 3 stops after ``config.tick_work_budget`` jobs examined (the simulator's
  reproducible bound) or ``config.tick_budget_s`` of wall time when a clock is passed. The
  next tick resumes the same pass where it stopped (jobs already examined in the pass are
  skipped, the pass's reservation stands); a pass that reaches the end is complete.
- A preemption search that found nothing is not repeated for the same head until some
  state changes (``Scheduler.version``); a placement search that failed is not repeated
  for another job of the same shape until some state changes.
- The reservation is kept from one tick to the next while it still holds (its GPUs free
  or released by its start) for up to ``RESERVATION_REFRESH_S``, then planned afresh.
- Start estimates are planned in *rounds* (phase 4): a round plans the look-ahead in rank
  order, at most ``config.estimate_plans_per_tick`` plans (and ``estimate_budget_s`` of
  wall time with a clock) per tick, and goes on at the next tick. A new round starts
  when something changed and a job entered the look-ahead or the last round is
  ``ESTIMATE_REFRESH_S`` old. The reservation holder's estimate is current every tick.
- Inside one heap, the walk stops after ``BLOCKED_PER_HEAP`` jobs that could not start
  (like Slurm's per-user backfill limit): the jobs behind them are of the same tenant and
  size class and almost always wait for the same reason; they keep their last pending
  reason and are looked at once the ones ahead start. A heap whose tenant has no quota
  left, or any heap once the cluster has no free GPU, is looked at only up to its head
  (the head still gets its reservation or preemption search).
- At most ``config.max_preemption_searches_per_tick`` preemption searches per tick.

Policies: ``full`` (everything above); ``priority-kill`` (the same, but the victims are
chosen most-recently-started first and killed at once, and the head starts in the same
tick); ``fifo`` (one queue in submit order, whole gangs first fit in node-name order, the
first job that cannot start blocks everyone behind it: no reservation, no backfill, no
preemption, no fair share; the same team limits).

Phase timings use ``clock`` when given, else ``time.perf_counter``: they go to the stats
only and never into a decision.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from .capacity import indices_of, lowest_bits, mask_of
from .placement import find_placement
from .preemption import Candidate, TenantLoad, select_victims
from .queues import EntryKey, QueueKey
from .reservation import Release, Reservation, backfill_allowed, plan_reservation
from .scheduler import JobRecord, ReclaimClaim, Scheduler, StartEstimate, TickResult
from .states import JobState, PendingReason, Reason
from .types import Allocation, JobSpec, alloc_gpus

S = JobState
P = PendingReason

#: jobs that could not start after which the walk leaves one (tenant, size class) heap
BLOCKED_PER_HEAP = 16
#: seconds after which the look-ahead estimates are replanned even if no job entered it
ESTIMATE_REFRESH_S = 60
#: seconds a still-valid reservation is kept before it is planned afresh
RESERVATION_REFRESH_S = 30
#: jobs that may try to take the reservation in one tick when the earlier ones cannot be
#: planned (a holder without a declared limit makes a start time unknowable)
RESERVATION_ATTEMPTS = 4

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
    #: plan_reservation's release masks for ``plan`` (valid while its nodes' health holds)
    masks: dict[int, Any] = field(default_factory=dict)


class _Line:
    """The running jobs' releases as a look-ahead round plans, on the round's own copy of
    the cluster: each planned job holds its GPUs from now and gives them back at its
    declared end, so the jobs behind it plan around it."""

    def __init__(self, releases: list[Release], cap: Any) -> None:
        self.releases = releases
        self.cap = cap
        self.by_id = {r.job_id: r for r in releases}
        self.on_node: dict[str, set[str]] = {}  # node -> the releases giving GPUs back there
        for r in releases:
            for n in r.alloc:
                self.on_node.setdefault(n, set()).add(r.job_id)

    def hold(self, job_id: str, alloc: Allocation, end: int | None) -> None:
        """Hold one plan: its GPUs free now are taken from the copy; those a running job
        holds now become the plan's from its start, so no other release gives them back
        (releases stay disjoint). Bitmasks per node keep this O(the plan's nodes)."""
        cap = self.cap
        mine: dict[str, int] = {}  # node -> GPU bitmask
        free_now: dict[str, int] = {}
        later: dict[str, int] = {}
        for n, ix in alloc.items():
            m = mine[n] = mask_of(ix)
            free_mask = cap.nodes[n].free_mask
            if m & free_mask:
                free_now[n] = m & free_mask
            if m & ~free_mask:
                later[n] = m & ~free_mask
        if free_now:
            cap.take({n: indices_of(m) for n, m in free_now.items()})
        releases, by_id, on_node = self.releases, self.by_id, self.on_node
        if later:  # only the releases on those nodes, found by node: O(them)
            taken = {n: indices_of(m) for n, m in later.items()}
            hit: set[str] = set()
            for n in taken:
                hit |= on_node.get(n, set())
            gone: set[str] = set()
            old_of = {jid: by_id[jid] for jid in hit}
            for jid in hit:  # each keeps its place in the order: only its GPUs shrink
                r = by_id[jid]
                kept = minus(r.alloc, taken)
                for n in r.alloc.keys() - kept.keys():
                    on_node[n].discard(jid)
                if kept:
                    by_id[jid] = replace(r, alloc=kept)
                else:
                    del by_id[jid]
                    gone.add(jid)
            if len(hit) > 32:  # one pass over the list, not a bisect and a shift for each
                releases[:] = [by_id[r.job_id] for r in releases if r.job_id not in gone]
            else:
                for jid in hit:
                    r = old_of[jid]
                    i = bisect.bisect_left(releases, (r.end_s, jid), key=_release_key)
                    if jid in gone:
                        del releases[i]
                    else:
                        releases[i] = by_id[jid]
        kept_alloc = {n: indices_of(m) for n, m in mine.items() if m}
        if end is not None and kept_alloc:
            r = Release(end_s=end, job_id=job_id, alloc=kept_alloc)
            # kept in (end_s, job_id) order: plan_reservation reads it presorted
            bisect.insort(releases, r, key=_release_key)
            by_id[job_id] = r
            for n in r.alloc:
                on_node.setdefault(n, set()).add(job_id)


class Tick:
    """One run of the loop over a Scheduler's state. Built and run by ``Scheduler.tick``."""

    def __init__(self, sched: Scheduler, now: int, clock: Callable[[], float] | None) -> None:
        self.s = sched
        self.cfg = sched.config
        self.now = now
        self.clock = clock
        self.timer = clock or time.perf_counter
        self.started_at = self.timer()
        self.policy = self.cfg.policy
        self.examined = 0
        self.stats: dict[str, Any] = {}
        self.pending: dict[str, PendingReason] = {}
        self.estimates: dict[str, Any] = {}
        self.order: list[tuple[tuple[Any, EntryKey], str, QueueKey, Iterator]] = []
        self.reservation: Reservation | None = None
        self.res_borrowing = False
        self.res_tenant: str | None = None
        self.reserve_attempts = 0
        self.searches = 0
        self.placed = 0
        self.backfilled = 0
        self.preempt_requests = 0
        self.budget_hit = False
        self._candidates: list[Candidate] | None = None
        self._excl_key = -1
        self._excl_all: frozenset[str] = frozenset()
        self._claimed_all: frozenset[str] = frozenset()
        self._free_cache: dict[tuple[Any, ...], int] = {}
        self._failed_places: set[tuple[Any, ...]] = set()
        self._around_key: tuple[int, int] | None = None
        self._around_set: frozenset[str] = frozenset()
        self._victim_costs: dict[str, Any] = {}  # victim_cost at this tick's now, by job

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
        self.stats.update(
            examined=self.examined, placed=self.placed, backfilled=self.backfilled,
            preemption_searches=self.searches, preempt_requests=self.preempt_requests,
            reservation=None if self.reservation is None else self.reservation.job_id,
            budget_exhausted=self.budget_hit,
            tick_ms=round((self.timer() - self.started_at) * 1000, 3),
        )
        return TickResult(self.s.flush(), self.stats, self.pending, self.estimates)

    # ------------------------------------------------------------------ 0. timers
    def fire_timers(self) -> None:
        self.s.fire_timers(self.now)

    # ------------------------------------------------------------------ 1. usage
    def update_usage(self) -> None:
        s = self.s
        for name in s.tenant_names:
            s.fair.advance(name, self.now, s.running[name])

    # ------------------------------------------------------------------ 2. order
    def order_heaps(self) -> None:
        s = self.s
        if self.policy == "fifo":
            s.share_keys = {}
        else:
            s.share_keys = {
                n: s.fair.share(n, s.tenants[n].guaranteed_gpus) for n in s.tenant_names
            }
        for key in s.queues.heap_keys():
            s.queues.prune(key)  # the heads that left since the last tick, once
            it = s.queues.iter_heap(key)
            self._advance(key, it)

    def _advance(self, key: QueueKey, it: Iterator[tuple[EntryKey, str]]) -> None:
        nxt = next(it, None)
        if nxt is None:
            return
        share = self.s.share_keys.get(key[0], _ZERO_SHARE)
        heapq.heappush(self.order, ((share, nxt[0]), nxt[1], key, it))

    # ------------------------------------------------------------------ 3. pop heads
    def out_of_budget(self) -> bool:
        if self.clock is not None:
            return self.clock() - self.started_at >= self.cfg.tick_budget_s
        budget = self.cfg.tick_work_budget
        return budget is not None and self.examined >= budget

    def pop_heads(self) -> None:
        """Walk the queued jobs in rank order, examining each once per *pass*.

        A pass that runs out of budget resumes at the next tick where it stopped (the jobs
        it already examined are skipped, its reservation stands), like Slurm's
        ``bf_continue``: without it, a budget smaller than the number of blocked jobs
        ahead would starve everything behind them. A pass that reaches the end of the
        queues is complete; the next tick starts a fresh one from the heads. A head waiting
        for reclaimed GPUs is never skipped: its handover cannot wait for a new pass.
        """
        s = self.s
        resuming = bool(s.pass_seen)
        if resuming and self.policy != "fifo":
            res = s.reservation
            if res is not None and s.jobs[res.job_id].state == S.QUEUED:
                self._hold_reservation(res, s.jobs[res.job_id])
        blocked = s.pass_blocked if resuming else {}
        seen = s.pass_seen
        with s.queues.hold():  # heaps are being walked: pushes wait until the end
            self.hand_over()
            while self.order:
                if self.out_of_budget():
                    self.budget_hit = True
                    break
                _okey, job_id, key, it = heapq.heappop(self.order)
                rec = s.jobs[job_id]
                if rec.state != S.QUEUED or (job_id in seen and job_id not in s.claims):
                    self._advance(key, it)  # handed over already, or seen in this pass
                    continue
                self.examined += 1
                seen.add(job_id)
                if self.policy == "fifo":
                    if not self.examine_fifo(rec):
                        self._behind(key, job_id, it)
                        break  # the head blocks everyone behind it
                    self._advance(key, it)
                    continue
                outcome = self.examine(rec)
                if outcome != "started":
                    blocked[key] = blocked.get(key, 0) + 1
                    if blocked[key] >= BLOCKED_PER_HEAP or self._heap_is_stuck(rec):
                        self._behind(key, job_id, it)
                        continue
                self._advance(key, it)
        if self.budget_hit:
            s.pass_blocked = blocked
        else:
            s.pass_seen = set()
            s.pass_blocked = {}

    def _behind(self, key: QueueKey, left_at: str, it: Iterator[tuple[EntryKey, str]]) -> None:
        """The walk leaves a heap: the next ``estimate_lookahead`` jobs in it, if nothing
        was said about them yet, wait behind jobs that rank higher (Priority).

        Only a push puts a job without a reason into a heap, so when the walk leaves the
        heap at the same job as last time and nothing was pushed since nor left (a job
        leaving brings one more into reach), the jobs behind it all have their reason
        already: they are not walked again (a heap is left at each tick, and walking it
        costs a heap traversal)."""
        s = self.s
        mark = (left_at, s.queues.last_push(key), s.queues.count(key))
        if s.behind_marks.get(key) == mark:
            return
        s.behind_marks[key] = mark
        for _i, (_ek, job_id) in zip(range(self.cfg.estimate_lookahead), it, strict=False):
            rec = s.jobs[job_id]
            if rec.state == S.QUEUED and rec.pending_reason == P.NONE:
                self._wait(rec, P.PRIORITY)

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
        return any(
            s.jobs[v].state in (S.PREEMPT_REQUESTED, S.CHECKPOINTING)
            and s.jobs[v].alloc and not claim.nodes.isdisjoint(s.jobs[v].alloc)
            for v in claim.victims
        )

    def _heap_is_stuck(self, rec: JobRecord) -> bool:
        """Nothing behind this job in its heap can start in this tick."""
        s = self.s
        tenant = rec.spec.tenant
        room = s.limit_of(tenant) - s.running[tenant] - s.claimed_gpus(tenant)
        if room <= 0:
            return True
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
        tenant = s.tenants[spec.tenant]
        claim = s.claims.get(job_id)
        held = s.running[spec.tenant] + s.claimed_gpus(spec.tenant, besides=job_id)
        need = self._need(spec)
        room = s.limit_of(spec.tenant) - held
        entitled = held + spec.gpus <= tenant.guaranteed_gpus
        if room < need:
            self._wait(rec, P.QUOTA_LIMIT)
            if self.reservation is None:
                self._reserve(rec, quota=True)
            return "blocked"
        size = min(spec.gpus, room)
        exclude = self._excluded(job_id)
        alloc = self._place(spec, size, exclude)
        if alloc is not None:
            reason = Reason.PLACED
            detail: dict[str, Any] = {}
            res = self.reservation
            if res is not None:
                if self._may_pass(res, alloc, spec, size):
                    reason = Reason.BACKFILLED
                    detail = {"around": res.job_id}
                elif self.res_borrowing and entitled and spec.tenant != self.res_tenant:
                    detail = {"entitled_past": res.job_id}  # a borrower's plan never blocks it
                elif self._takes_holders_quota(res, spec, size):
                    self._wait(rec, P.RESERVATION)  # other nodes would not help: same quota
                    return "blocked"
                else:
                    alt = self._place(spec, size, self._around(exclude, res))
                    if alt is None:
                        self._wait(rec, P.RESERVATION)
                        return "blocked"
                    alloc, reason, detail = alt, Reason.BACKFILLED, {"around": res.job_id}
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
        reason = self._diagnose(spec, need, exclude)
        if (
            entitled
            and self.policy != "fifo"
            and not spec.interactive
            and self.searches < self.cfg.max_preemption_searches_per_tick
            and not self._searched_in_vain(job_id)
        ):
            self.searches += 1
            version = s.version
            if self._reclaim(rec):
                return "started" if rec.state == S.PLACING else "waiting"
            if len(s.vain_searches) > 4096:  # forget old ones; a stale entry never matches
                s.vain_searches.clear()
            s.vain_searches[job_id] = version
        self._wait(rec, reason)
        if self.reservation is None:
            self._reserve(rec, quota=False)
        return "blocked"

    def _start(self, rec: JobRecord, alloc: Allocation, reason: Reason,
               detail: dict[str, Any]) -> None:
        self.s.start(rec, alloc, reason, self.now, detail)
        self.placed += 1
        self.estimates[rec.spec.id] = rec.estimate

    def _searched_in_vain(self, job_id: str) -> bool:
        """A search for this head found nothing and no state has changed since: the same
        search would find nothing again (searches are the costliest part of a tick). Only
        the passing of time is ignored: a job whose daily cap expires becomes a candidate
        at the next change of any job. (A memo, not a decision: a leader rebuilt from the
        log, which has no memo, searches and finds the same nothing.)"""
        return self.s.vain_searches.get(job_id) == self.s.version

    def _need(self, spec: JobSpec) -> int:
        return spec.min_gpus if spec.elastic and spec.min_gpus else spec.gpus

    def _may_pass(self, res: Any, alloc: Allocation, spec: JobSpec, size: int) -> bool:
        end = None if spec.max_runtime_s is None else self.now + spec.max_runtime_s
        if self._takes_holders_quota(res, spec, size):
            # Reservations count quota as well as capacity: a job of the holder's own team
            # that leaves no quota for the holder may start only if it ends before it.
            return end is not None and end <= res.start_s
        return backfill_allowed(res, alloc, end)

    def _takes_holders_quota(self, res: Any, spec: JobSpec, size: int) -> bool:
        """Would starting ``size`` GPUs of ``spec`` leave the reservation holder's team
        without the quota the holder needs at its reserved start?"""
        if spec.tenant != self.res_tenant:
            return False
        s = self.s
        held = s.running[spec.tenant] + s.claimed_gpus(spec.tenant, besides=res.job_id)
        return held + size + res.gpus > s.limit_of(spec.tenant)

    def _place(self, spec: JobSpec, size: int, exclude: frozenset[str]) -> Allocation | None:
        s = self.s
        kw: dict[str, Any] = dict(
            gpus=size, gpus_per_node=spec.gpus_per_node, gpu_type=spec.gpu_type,
            min_gpus=spec.min_gpus if spec.elastic else None,
        )
        if kw["min_gpus"] is not None and kw["min_gpus"] > size:
            return None
        # Jobs of one heap often ask for the same shape: a search that failed cannot
        # succeed until the state changes (every start, end or health change bumps
        # Scheduler.version), so it is not repeated.
        key = (s.version, size, spec.gpus_per_node, spec.gpu_type, kw["min_gpus"],
               spec.interactive, exclude)
        if key in self._failed_places:
            return None
        alloc = self._search(spec, exclude, kw)
        if alloc is None:
            if len(self._failed_places) > 4096:
                self._failed_places.clear()
            self._failed_places.add(key)
        return alloc

    def _search(self, spec: JobSpec, exclude: frozenset[str], kw: dict[str, Any]
                ) -> Allocation | None:
        s = self.s
        if spec.interactive and s.interactive_nodes:
            inside = find_placement(s.cap, only=s.interactive_nodes - exclude, **kw)
            if inside is not None:
                return inside
            exclude = exclude - s.interactive_nodes
        return find_placement(s.cap, exclude=exclude, **kw)

    def _around(self, exclude: frozenset[str], res: Reservation) -> frozenset[str]:
        """``exclude`` plus the reserved nodes: one set object per (exclude, reservation),
        so the placement caches keyed by it hit across the jobs that try to pass."""
        key = (id(exclude), id(res))
        if self._around_key != key:
            self._around_key = key
            self._around_set = exclude | frozenset(res.alloc)
        return self._around_set

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
        cap = self.s.cap
        t = spec.gpu_type
        if cap.healthy_gpus(t) < need:
            return P.NODE_DOWN
        free = cap.free_gpus(t)
        if spec.interactive and self.s.interactive_nodes:
            return P.INTERACTIVE_TIER_FULL if free < need else P.TOPOLOGY
        if free - self._excluded_free(t) < need:
            idle_elsewhere = sum(
                cap.nodes[n].free for n in self.s.unhealthy
                if t is None or cap.nodes[n].gpu_type == t
            )
            if free - self._excluded_free(t) + idle_elsewhere >= need:
                return P.NODE_DOWN  # it would fit if the down or draining nodes were back
            return P.GPU_TYPE if t is not None else P.RESOURCES
        return P.TOPOLOGY

    def _wait(self, rec: JobRecord, reason: PendingReason) -> None:
        rec.pending_reason = reason
        self.pending[rec.spec.id] = reason

    # -- reservation
    def _reserve(self, rec: JobRecord, *, quota: bool) -> None:
        """The highest-ranked job that cannot start gets the reservation, if a start can be
        planned from the declared limits of what runs."""
        if self.policy == "fifo" or self.reserve_attempts >= RESERVATION_ATTEMPTS:
            return
        self.reserve_attempts += 1
        res = self._kept_reservation(rec)
        if res is None:
            res = self.plan(rec, self.release_list())
            if res is None:
                return
            self.s.reservation_planned_at = self.now
        self._hold_reservation(res, rec)

    def _kept_reservation(self, rec: JobRecord) -> Reservation | None:
        """Last tick's reservation for the same holder, if it still holds and is less than
        RESERVATION_REFRESH_S old (Slurm replans its reservations once per backfill cycle,
        not at every scheduling pass). Still holds: every reserved GPU is free now or held
        by a job whose declared limit ends by the reserved start, on a node the holder may
        use, and the team's quota allows it by then. A job ending early could make a
        better plan possible; that waits for the refresh (the head is not delayed past
        its promised start, and it starts at once when it fits now)."""
        s = self.s
        old = s.reservation
        if (
            old is None or old.job_id != rec.spec.id or old.start_s <= self.now
            or self.now - s.reservation_planned_at >= RESERVATION_REFRESH_S
        ):
            return None
        exclude = self._excluded(rec.spec.id)
        cap = s.cap
        for n, ix in old.alloc.items():
            if n in exclude or not cap.is_schedulable(n):
                return None
            node = cap.nodes[n]
            busy = 0
            for i in ix:
                if not node.free_mask >> i & 1:
                    busy |= 1 << i
            if not busy:
                continue
            for job_id in s.node_jobs[n]:
                held = s.jobs[job_id].alloc.get(n, ()) if s.jobs[job_id].alloc else ()
                if not any(busy >> i & 1 for i in held):
                    continue
                end = s.releases.end_of(job_id)
                if end is None or end > old.start_s:
                    return None
        quota_at = s.quota_free_at(rec.spec.tenant, self._need(rec.spec), self.now,
                                   besides=rec.spec.id)
        if quota_at is None or quota_at > old.start_s:
            return None
        return old

    def _hold_reservation(self, res: Reservation, rec: JobRecord) -> None:
        s = self.s
        spec = rec.spec
        self.reservation = res
        self.res_tenant = spec.tenant
        held = s.running[spec.tenant] + s.claimed_gpus(spec.tenant, besides=spec.id)
        self.res_borrowing = held + spec.gpus > s.tenants[spec.tenant].guaranteed_gpus
        s.reservation = res

    def release_list(self) -> list[Any]:
        """The running jobs' releases in (end_s, job_id) order (the scheduler's index keeps
        the list and the Release objects between ticks; do not modify it)."""
        return self.s.releases.releases()

    def plan(self, rec: JobRecord, releases: list[Any], *, cap: Any = None,
             masks: dict[int, Any] | None = None) -> Any:
        """plan_reservation for ``rec``, started no earlier than its team's quota allows.
        ``cap``/``masks``: a look-ahead round's copy of the cluster and its mask cache
        (whose releases may lie in the past by now: such a start is shown as now)."""
        s = self.s
        spec = rec.spec
        res = plan_reservation(s.cap if cap is None else cap, spec, releases, self.now,
                               exclude=self._excluded(spec.id),
                               mask_cache=self.s.releases.masks if masks is None else masks,
                               presorted=True)
        if res is None:
            return None
        if cap is not None and res.start_s < self.now:  # a release of the copy came early
            res = replace(res, start_s=self.now)
        quota_at = s.quota_free_at(spec.tenant, self._need(spec), self.now, besides=spec.id)
        if quota_at is None:
            return None
        if quota_at > res.start_s:
            res = replace(res, start_s=quota_at,
                          basis=f"{res.basis}; team {spec.tenant}'s own declared limits "
                                f"leave room for it at t={quota_at}")
        return res

    # -- preemption
    def _reclaim(self, rec: JobRecord) -> bool:
        """Preemption search for an entitled head. True if victims were asked to stop."""
        s = self.s
        spec = rec.spec
        cands = self.candidates()
        if not cands:
            return False
        loads = {}
        for name in s.tenant_names:
            g = s.tenants[name].guaranteed_gpus
            run = s.running[name]
            ratio = run / g if g > 0 else (float("inf") if run else 0.0)
            loads[name] = TenantLoad(name, g, run, ratio)
        plan = select_victims(
            s.cap, spec, cands, loads, self.now, config=self.cfg,
            policy=self.policy, exclude=self._excluded(spec.id), costs=self._victim_costs,
        )
        if plan is None or not plan.victims:
            return False
        chosen = {v.job_id for v in plan.victims}
        self._candidates = [c for c in cands if c.spec.id not in chosen]
        for v in plan.victims:
            victim = s.jobs[v.job_id]
            detail = {
                "for": spec.id, "cost_s": v.cost_s, "est_gpu_s_lost": v.est_gpu_s_lost,
                "words": v.words, "why": plan.why,
                "weighed": [w.words for w in plan.weighed],
            }
            s.request_preempt(victim, spec.id, self.now, detail)
            self.preempt_requests += 1
            if self.policy == "priority-kill":
                s.kill_now(victim, self.now, {"killed": True, "for": spec.id})
        if self.policy == "priority-kill":
            alloc = self._place(spec, alloc_gpus(plan.placement), self._excluded(spec.id))
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
        """Running jobs of the tenants above their guarantee (built once per tick)."""
        if self._candidates is None:
            s = self.s
            out = []
            for name in s.tenant_names:
                if s.running[name] <= s.tenants[name].guaranteed_gpus:
                    continue
                for job_id in sorted(s.holders[name], key=lambda j: s.jobs[j].spec.seq):
                    r = s.jobs[job_id]
                    if r.state != S.RUNNING or r.spec.interactive or not r.alloc:
                        continue
                    out.append(Candidate(
                        spec=r.spec, alloc=r.alloc, run_start_s=r.run_start_s or 0,
                        last_checkpoint_s=r.last_checkpoint_s,
                        preemptions_last_day=r.preemptions_against_cap(
                            self.now, self.cfg.max_preemptions_per_job_per_day),
                    ))
            self._candidates = out
        return self._candidates

    # -- one job, policy fifo
    def examine_fifo(self, rec: JobRecord) -> bool:
        s = self.s
        spec = rec.spec
        room = s.limit_of(spec.tenant) - s.running[spec.tenant]
        if room < self._need(spec):
            self._wait(rec, P.QUOTA_LIMIT)
            return False
        # an elastic job asks for no more than its team's room; otherwise the whole gang
        size = min(spec.gpus, room)
        slice_ = s.interactive_nodes if not spec.interactive else frozenset()
        alloc = first_fit(s, spec, size, self._need(spec), slice_)
        if alloc is None:
            self._wait(rec, self._diagnose(spec, spec.gpus, s.interactive_nodes))
            return False
        self._start(rec, alloc, Reason.PLACED, {})
        return True

    # ------------------------------------------------------------------ 4. estimates
    def start_estimates(self) -> None:
        """Plan the reservation holder and the first ``estimate_lookahead`` jobs of each
        tenant's queue one after the other, each holding its planned GPUs from its planned
        start to its declared end, so a later job's estimate accounts for those ahead.

        The holder's estimate is current every tick. The rest is a *round* that may span
        ticks, like Slurm's backfill cycle: each tick plans at most
        ``estimate_plans_per_tick`` jobs of it (and, with a clock, stops after
        ``estimate_budget_s``), and the next tick goes on where it stopped. The round
        plans against the cluster as it was at its first tick (a copy of the free GPUs and
        of the running jobs' releases, kept with the round, plus what its earlier jobs
        planned), as Slurm's backfill goes on with its node-space map after yielding its
        locks (``bf_continue``): going on costs only the new plans, not a rebuild of the
        picture. A node changing health ends the round early; a planned start earlier
        than now (its release came early) is shown as now. Estimates are not decisions:
        a round that takes a few ticks delays no job, while planning 300 jobs in one
        tick at 100,000 jobs would take seconds.
        """
        s = self.s
        s.reservation = self.reservation
        if not len(s.queues):
            s.estimate_round = None
            return
        res = self.reservation
        if res is not None:  # the holder is planned first: it owns its plan
            holder = s.jobs[res.job_id]
            if holder.estimate is None or holder.estimate.start_s != res.start_s:
                self._estimate(holder, StartEstimate(res.start_s, res.basis))
        rnd = s.estimate_round
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

    def _new_round(self) -> EstimateRound | None:
        """The look-ahead to plan now, or None if the last round still stands.

        Planning replays the running jobs' releases (costly at scale), so the look-ahead
        is replanned only when something changed and either a job entered it or the last
        round is ESTIMATE_REFRESH_S old. Nothing changed: not even the look-ahead is walked.
        """
        s = self.s
        if s.version == s.estimates_version:
            return None
        res = self.reservation
        n = self.cfg.estimate_lookahead
        wanted: list[tuple[Any, str]] = []
        for name in s.tenant_names:
            for i, (ek, job_id) in enumerate(s.queues.iter_tenant(name)):
                if i >= n:
                    break
                wanted.append(((s.share_keys.get(name, _ZERO_SHARE), ek), job_id))
        if res is not None and all(j != res.job_id for _k, j in wanted):
            wanted.append(((_ZERO_SHARE, (0, 0, 0)), res.job_id))
        wanted.sort()
        if res is not None:
            wanted.sort(key=lambda kj: kj[1] != res.job_id)
        newcomer = any(j not in s.planned for _k, j in wanted)
        due = self.now - s.estimates_at >= ESTIMATE_REFRESH_S
        if not (newcomer or due):
            return None
        return EstimateRound(line=[j for _k, j in wanted], version=s.version,
                             started_s=self.now)

    def _plan_in_line(self, rnd: EstimateRound) -> None:
        s = self.s
        if rnd.plan is None:  # the round's first tick: its picture of the cluster
            rnd.plan = _Line(list(self.release_list()), s.cap.clone())
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
            if rec.state != S.QUEUED:
                continue
            job_id = rec.spec.id
            claim = s.claims.get(job_id)
            if claim is not None:
                ends = [s.releases.end_of(v) for v in claim.victims]
                known = [e for e in ends if e is not None]
                est = StartEstimate(max(known) if known else self.now,
                                    "when the preempted jobs have exited (grace window)")
                self._estimate(rec, est)
                continue
            if self.reservation is not None and self.reservation.job_id == job_id:
                res = self.reservation
            else:
                plans += 1
                res = self.plan(rec, line.releases, cap=line.cap, masks=rnd.masks)
            if res is None:
                self._estimate(rec, None)
                continue
            self._estimate(rec, StartEstimate(res.start_s, res.basis))
            end = None if rec.spec.max_runtime_s is None else (
                res.start_s + rec.spec.max_runtime_s)
            line.hold(job_id, dict(res.alloc), end)  # the jobs behind it plan around it
        self.stats["estimate_plans"] = plans

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
