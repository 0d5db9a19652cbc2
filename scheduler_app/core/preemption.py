"""Whom to evict so a head can start: the teams furthest over their share first, then the
cheapest GPU-hours, with the arithmetic.

The seed's rule, made exact (DESIGN.md, Kueue's fair-sharing strategy
``LessThanInitialShare``). A team's *share* is the GPUs it holds over its guarantee
(:func:`held_share`). A head of team A may preempt a running job of team V when

- V is above its guarantee,
- A's share once the head runs is below V's share before the preemption, and
- V's share once the job is gone is not below A's share once the head runs, so no team is
  pushed below another it was above (a preemption never turns one unfairness into the
  opposite one). Kueue's ``LessThanOrEqualToFinalShare``, tried first.

When no set of victims under all three makes room and A stays within its guarantee once
the head runs, the search is made again without the third (Kueue's fallback to
``LessThanInitialShare`` alone, :data:`RECLAIM_KEEP`): a team's guarantee is a promise,
and a borrower whose borrowing is one large job would otherwise keep it for good, since
losing that job always leaves its team below A (a researcher who wanted never to be
preempted could submit one job of 192 GPUs instead of 24 of 8; found by a researcher's
session, 2026-12-07). Among borrowers the third condition always holds, so two borrowing
teams never take the same GPUs back and forth.

So a team under its guarantee reclaims even for a job larger than the rest of its
guarantee, and a team one GPU over its guarantee keeps its jobs while another is fifteen
times over. Candidates come from the team with the highest share first, shares recomputed
as victims are chosen; within a team the cheapest first, cost = (now - last checkpoint) +
restart time, times its GPUs; many small cheap victims beat one large one when they lose
fewer GPU-hours in total; preemptions are capped per job per day; a job that cannot
checkpoint is protected unless it opted into preemptible pricing; an interactive job in
the interactive slice is protected. Every decision carries sentences a researcher can read.

Nothing here mutates state: the search gives victims' GPUs back inside ``cap.trial()``
and asks :func:`~.placement.find_placement` for a real placement (shape and topology
included), then the trial undoes it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from .capacity import Capacity, mask_of
from .placement import nodes_with_room, place_spec
from .types import Allocation, JobSpec, SchedulerConfig, alloc_gpus, join_words, written_init

#: a victim's declared restart time counts at most this long in its cost: a longer
#: declaration (366 days was accepted) buys no protection from its teammates' turn
RESTART_COUNTED_S = 3600
#: the cheapest candidates of the highest-share teams tried alone, and in pairs (bounds)
SINGLES_TRIED = 32
PAIR_POOL = 10
#: walks pruned (the cheapest before pruning); pruning costs |set| checks each
PRUNED_SETS = 3
#: the share a victim's team must keep in the reclaim search (a head within its team's
#: guarantee, when the search under the three conditions found nothing): any, the third
#: condition waived
RECLAIM_KEEP = 0.0


def held_share(held_gpus: int, guaranteed_gpus: int) -> float:
    """GPUs held over the guarantee. A team with no guarantee is infinitely over as soon
    as it holds a GPU; holding none it is exactly at its guarantee (1.0), like a team that
    holds what it is guaranteed."""
    if guaranteed_gpus > 0:
        return held_gpus / guaranteed_gpus
    return math.inf if held_gpus > 0 else 1.0


def share_words(share: float) -> str:
    """A held share in words that say what it is (GPUs held over the guarantee): the fair
    share the teams are ordered by is another number (decayed usage per guaranteed GPU),
    and "share 1.83" beside it read as one of them (a user session, 2026-12-07)."""
    if share == math.inf:
        return "infinitely over: no guarantee"
    return f"{share:.2f} times its guarantee"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running job the search may weigh."""

    spec: JobSpec
    alloc: Allocation
    run_start_s: int
    last_checkpoint_s: int | None
    preemptions_last_day: int
    #: runs entirely inside the interactive slice (an interactive job there is protected)
    in_slice: bool = False
    #: the grace window it would get (its declared checkpoint time, capped)
    grace_s: int = 0
    #: GPUs it holds (computed from ``alloc`` when not given: the search reads it often)
    gpus: int = -1

    def __post_init__(self) -> None:
        if self.gpus < 0:
            object.__setattr__(self, "gpus", alloc_gpus(self.alloc))


@dataclass(frozen=True, slots=True)
class VictimCost:
    job_id: str
    gpus: int
    cost_s: int  # seconds of work lost plus restart
    est_gpu_s_lost: int  # cost_s x GPUs
    #: the sentence, if set; else :attr:`words` writes it from the fields below (a search
    #: weighs hundreds of candidates per tick and explains only the ones it keeps)
    text: str | None = None
    lost_s: int = 0  # seconds since the last checkpoint (or the start of the run)
    restart_s: int = 0
    checkpointed: bool = False
    grace_s: int = 0  # the (capped) grace window it gets to checkpoint and exit

    def __init__(self, job_id: str, gpus: int, cost_s: int, est_gpu_s_lost: int,
                 text: str | None = None, lost_s: int = 0, restart_s: int = 0,
                 checkpointed: bool = False, grace_s: int = 0) -> None:
        self.job_id = job_id  # type: ignore[misc]
        self.gpus = gpus  # type: ignore[misc]
        self.cost_s = cost_s  # type: ignore[misc]
        self.est_gpu_s_lost = est_gpu_s_lost  # type: ignore[misc]
        self.text = text  # type: ignore[misc]
        self.lost_s = lost_s  # type: ignore[misc]
        self.restart_s = restart_s  # type: ignore[misc]
        self.checkpointed = checkpointed  # type: ignore[misc]
        self.grace_s = grace_s  # type: ignore[misc]

    def told(self, text: str) -> VictimCost:
        """The same cost with its sentence set (``dataclasses.replace``, without its
        reading of the fields by name: a search with views tells hundreds a tick)."""
        return VictimCost(self.job_id, self.gpus, self.cost_s, self.est_gpu_s_lost, text,
                          self.lost_s, self.restart_s, self.checkpointed, self.grace_s)

    @property
    def words(self) -> str:
        """The arithmetic, in a sentence."""
        if self.text is not None:
            return self.text
        lost, gpus, restart_s = self.lost_s, self.gpus, self.restart_s
        what = (f"last checkpoint {_dur(lost)} ago" if self.checkpointed
                else f"no checkpoint, started {_dur(lost)} ago")
        restart = f"{_dur(restart_s)} restart" if restart_s else "no restart"
        return (f"job {self.job_id}: {what} + {restart} on {gpus} {_plural(gpus, 'GPU')}"
                f" = {_hours(self.cost_s * gpus)}")


written_init(VictimCost)


@dataclass(frozen=True, slots=True, eq=False)
class PreemptionPlan:
    head_id: str
    victims: tuple[VictimCost, ...]
    placement: Allocation  # where the head goes once the victims have exited
    #: every candidate, chosen or not, and why (``weighed``): written when read, since
    #: only a view reads it (the log's detail) and it sorts and words every candidate
    weigh: Callable[[], tuple[VictimCost, ...]]
    why: str

    @property
    def weighed(self) -> tuple[VictimCost, ...]:
        return self.weigh()

    def __eq__(self, other: object) -> bool:  # two plans are equal by what they say
        if not isinstance(other, PreemptionPlan):
            return NotImplemented
        return ((self.head_id, self.victims, self.placement, self.why, self.weighed)
                == (other.head_id, other.victims, other.placement, other.why, other.weighed))

    @property
    def est_gpu_s_lost(self) -> int:
        return sum(v.est_gpu_s_lost for v in self.victims)


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """A team as the rule sees it: its guarantee and the GPUs it holds (not counting the
    jobs already on their way out, which a preemption cannot take twice)."""

    name: str
    guaranteed_gpus: int
    held_gpus: int

    def __init__(self, name: str, guaranteed_gpus: int, held_gpus: int) -> None:
        self.name = name  # type: ignore[misc]
        self.guaranteed_gpus = guaranteed_gpus  # type: ignore[misc]
        self.held_gpus = held_gpus  # type: ignore[misc]

    @property
    def share(self) -> float:
        return held_share(self.held_gpus, self.guaranteed_gpus)

    @property
    def excess(self) -> int:
        """GPUs held above the guarantee: what may be reclaimed from it."""
        return self.held_gpus - self.guaranteed_gpus


written_init(TenantLoad)


def share_after(load: TenantLoad, gpus: int) -> float:
    """The team's share once a head of ``gpus`` GPUs runs."""
    return held_share(load.held_gpus + gpus, load.guaranteed_gpus)


def may_give(held: int, guaranteed: int, gpus: int, head_share_after: float,
             keep: float | None = None) -> bool:
    """May a team holding ``held`` GPUs lose a job of ``gpus`` GPUs to a head whose team's
    share, once it runs, is ``head_share_after``? (The three conditions of the module
    docstring; ``keep``: the share the team must keep, ``head_share_after`` unless the
    reclaim search waives it with :data:`RECLAIM_KEEP`.)"""
    return (held > guaranteed
            and held_share(held, guaranteed) > head_share_after
            and held_share(held - gpus, guaranteed) >= (
                head_share_after if keep is None else keep))


def reclaim_keep(head_share_after: float) -> float | None:
    """The ``keep`` of the reclaim search, for a head whose team's share once it runs is
    ``head_share_after``: :data:`RECLAIM_KEEP` when that team stays within its guarantee,
    else None (no reclaim search: the third condition holds)."""
    return RECLAIM_KEEP if head_share_after <= 1.0 else None


def may_preempt(head_team: TenantLoad, gpus: int, others: Iterable[TenantLoad]) -> bool:
    """Could a head of ``gpus`` GPUs of ``head_team`` preempt anyone at all? (A team with
    no guarantee never may: its share after the start is infinite.)"""
    after = share_after(head_team, gpus)
    if after == math.inf:
        return False
    return any(t.name != head_team.name and t.held_gpus > t.guaranteed_gpus
               and t.share > after for t in others)


# ---- cost and order ----------------------------------------------------------------------


def victim_cost(c: Candidate, now: int) -> VictimCost:
    """What evicting ``c`` now loses: work since its last checkpoint, plus the restart.

    cost_s = (now - last checkpoint) + restart_s (at most :data:`RESTART_COUNTED_S`),
    where the last checkpoint is the later of
    the last reported checkpoint and the start of the current run (a checkpoint from an
    earlier run does not save the time spent in this one); a run that never checkpointed
    loses everything since it started. est_gpu_s_lost = cost_s x GPUs. The declared
    checkpoint time does not enter the cost (declaring a long one buys no protection);
    it only sets the grace window, which the scheduler caps (``max_grace_period_s``).
    """
    gpus = c.gpus
    since = c.run_start_s
    if c.last_checkpoint_s is not None:
        since = max(c.last_checkpoint_s, c.run_start_s)
    lost = max(0, now - since)
    restart = min(c.spec.restart_s, RESTART_COUNTED_S)
    cost = lost + restart
    return VictimCost(c.spec.id, gpus, cost, cost * gpus, lost_s=lost,
                      restart_s=restart, checkpointed=c.last_checkpoint_s is not None,
                      grace_s=c.grace_s)


def victim_sort_key(
    c: Candidate, team_share: float, now: int, *, cost: VictimCost | None = None
) -> tuple[float, int, int]:
    """THE order in which preemption candidates are taken (the seed's rule, made exact).

    1. the share (GPUs held / guarantee) of the candidate's team *as it stands when the
       candidate is taken*, descending: the team furthest over its share gives back
       first, and a team's share is recomputed after each of its jobs is taken;
    2. cost ascending: the fewest GPU-seconds lost (``victim_cost(...).est_gpu_s_lost``);
    3. the job's seq ascending: an arbitrary but total, deterministic tie-break.

    The search takes the candidate with the least key, lowers its team's share, and takes
    the least key again (:func:`share_order`). ``cost`` may pass ``victim_cost(c, now)``.
    """
    if cost is None:
        cost = victim_cost(c, now)
    return (-team_share, cost.est_gpu_s_lost, c.spec.seq)


def recency_key(c: Candidate) -> tuple[int, int]:
    """Policy ``priority-kill``: most recently started first (what most batch schedulers
    do), no cost awareness; the higher seq first on a tie."""
    return (-c.run_start_s, -c.spec.seq)


def share_order(
    candidates: Iterable[Candidate],
    tenants: Mapping[str, TenantLoad],
    head_share_after: float,
    within: Callable[[Candidate], tuple[object, ...]],
    keep: float | None = None,
) -> list[Candidate]:
    """The candidates in the order the rule takes them: the team with the highest share
    (recomputed after each pick) gives its next job in ``within`` order; among teams of
    equal share, the one whose next job comes first in ``within``. A job whose loss would
    break the rule (:func:`may_give`, with ``keep``) is skipped, and its team stops giving
    once it is back at its guarantee or no longer above the head's share. O(n log teams)."""
    per_team: dict[str, list[Candidate]] = {}
    for c in sorted(candidates, key=within):
        per_team.setdefault(c.spec.tenant, []).append(c)
    held = {t: tenants[t].held_gpus for t in per_team}
    nxt = dict.fromkeys(per_team, 0)
    heap: list[tuple[float, tuple[object, ...], str]] = []
    for team in sorted(per_team):
        _offer(team, per_team, tenants, held, nxt, heap, head_share_after, within, keep)
    out: list[Candidate] = []
    while heap:
        _share, _key, team = heapq.heappop(heap)
        c = per_team[team][nxt[team]]
        out.append(c)
        held[team] -= c.gpus
        nxt[team] += 1
        _offer(team, per_team, tenants, held, nxt, heap, head_share_after, within, keep)
    return out


def _offer(team: str, per_team: dict[str, list[Candidate]],
           tenants: Mapping[str, TenantLoad], held: dict[str, int], nxt: dict[str, int],
           heap: list[tuple[float, tuple[object, ...], str]], head_share_after: float,
           within: Callable[[Candidate], tuple[object, ...]], keep: float | None) -> None:
    """share_order: push the team's next job that it may give, if any. (A function of
    its own, not a nested one: see _Search.)"""
    jobs, g = per_team[team], tenants[team].guaranteed_gpus
    i = nxt[team]
    while i < len(jobs) and not may_give(held[team], g, jobs[i].gpus, head_share_after, keep):
        if not may_give(held[team], g, 0, head_share_after, keep):
            i = len(jobs)  # the team itself may give nothing more
            break
        i += 1  # too large to lose: held only falls, so it never becomes allowed
    nxt[team] = i
    if i < len(jobs):
        heapq.heappush(heap, (-held_share(held[team], g), within(jobs[i]), team))


# ---- the bound: when no search can help ----------------------------------------------------


class VictimPool:
    """Per team, the running jobs that could ever be a victim of a borrowing head: not in
    the interactive slice and, under policy ``full``, checkpointable (or preemptible) and
    below the daily cap; :meth:`for_reclaim`, the pool of a head whose team takes its
    guarantee back, which the cap does not stop (:func:`_protected`). What :func:`select_victims`
    may take for a head is a subset of the giving teams' part of its pool, so the pool
    bounds every search (:func:`cannot_make_room`).

    A team's node masks are built when the bound first reads them: most heads are ruled
    in or out by the GPU totals alone, and a tick's pool holds thousands of jobs."""

    __slots__ = ("gpus", "_jobs", "_masks", "_reclaim")

    def __init__(self, jobs: dict[str, list[Candidate]],
                 reclaim: VictimPool | None = None) -> None:
        self._jobs = jobs  # team -> its jobs in the pool
        self.gpus = {t: sum(c.gpus for c in cs) for t, cs in jobs.items()}  # team -> GPUs
        self._masks: dict[str, dict[str, int]] = {}
        # None: the same pool (no job past the cap). Never ``self``: a reference cycle
        # only the cyclic collector frees (tests/sim/test_compiled_core.py)
        self._reclaim = reclaim

    def for_reclaim(self) -> VictimPool:
        """The pool of a head whose team takes its guarantee back: jobs past the cap too."""
        return self if self._reclaim is None else self._reclaim

    def masks(self, team: str) -> dict[str, int]:
        """node -> bitmask of the GPUs the team's pool jobs hold there."""
        on = self._masks.get(team)
        if on is None:
            on = self._masks[team] = {}
            for c in self._jobs.get(team, ()):
                for n, ix in c.alloc.items():
                    on[n] = on.get(n, 0) | mask_of(ix)
        return on


def victim_pool(candidates: Iterable[Candidate], config: SchedulerConfig,
                policy: str = "full") -> VictimPool:
    jobs: dict[str, list[Candidate]] = {}
    capped = False
    cap_n = config.max_preemptions_per_job_per_day
    for c in candidates:
        if c.in_slice:
            continue
        if policy == "full" and not (c.spec.checkpointable or c.spec.preemptible):
            continue
        jobs.setdefault(c.spec.tenant, []).append(c)
        capped = capped or (policy == "full" and c.preemptions_last_day >= cap_n)
    if not capped:
        return VictimPool(jobs)
    return VictimPool({t: [c for c in cs if c.preemptions_last_day < cap_n]
                       for t, cs in jobs.items()}, VictimPool(jobs))


def most_given(load: TenantLoad, head_share_after: float, keep: float | None = None) -> int:
    """At most how many GPUs the rule lets a team give to a head whose team's share, once
    it runs, is ``head_share_after``: what it may lose and keep a share at least that
    (:func:`may_give` for its last victim), or anything while it is over its guarantee
    in the reclaim search (``keep`` :data:`RECLAIM_KEEP`). An upper bound, rounded up."""
    held, g = load.held_gpus, load.guaranteed_gpus
    if held <= g or held_share(held, g) <= head_share_after:
        return 0
    if keep is not None and keep <= 0.0:
        return held
    if g == 0:  # infinitely over while it holds a GPU; at 1.0 once it holds none
        return held if head_share_after <= 1.0 else held - 1
    return max(0, min(held, math.floor(held - head_share_after * g + 1e-9)))


def cannot_make_room(cap: Capacity, head: JobSpec, tenants: Mapping[str, TenantLoad],
                     pool: VictimPool, exclude: Container[str] = frozenset()) -> bool:
    """True when no set of victims the rule allows can give ``head`` a placement, so
    :func:`select_victims` would find none. Each team gives at most its pool's GPUs and
    what the rule lets it lose (:func:`most_given`); no search can help when the head's
    team has no guarantee, when the GPUs free now plus all that fall short of the head, or,
    for a gang of whole ``gpus_per_node`` slices, when too few usable nodes would have a
    slice free: the nodes that have one now, plus those the giving teams' pool jobs
    could complete, as many as the GPUs given can pay for (each needs what it lacks). A
    necessary condition only: when it is False a search may still find nothing.
    O(teams + the giving teams' nodes)."""
    mine = tenants.get(head.tenant, TenantLoad(head.tenant, 0, 0))
    after = share_after(mine, head.gpus)
    if after == math.inf:
        return True
    keep = reclaim_keep(after)  # the bound covers the reclaim search too
    if keep is not None:
        pool = pool.for_reclaim()  # past the daily cap too: they give a guarantee back
    give: dict[str, int] = {}
    for t, gpus in pool.gpus.items():
        load = tenants.get(t)
        if t != head.tenant and load is not None:
            most = min(gpus, most_given(load, after, keep))
            if most > 0:
                give[t] = most
    need = head.least_gpus
    given = sum(give.values())
    if cap.free_gpus(head.gpu_type) + given < need:
        return True
    g = head.gpus_per_node
    if g is None:
        return False
    short = -(-need // g) - nodes_with_room(cap, g, head.gpu_type, exclude)
    if short <= 0:
        return False
    back: dict[str, int] = {}
    for t in give:
        for n, m in pool.masks(t).items():
            back[n] = back.get(n, 0) | m
    lacks = []  # per node that could complete a slice: the GPUs it lacks now
    for n, m in back.items():
        if n in exclude or not cap.is_schedulable(n):
            continue
        node = cap.nodes[n]
        if head.gpu_type is not None and node.gpu_type != head.gpu_type:
            continue
        free = node.free_mask.bit_count()
        if free < g <= (node.free_mask | m).bit_count():
            lacks.append(g - free)
    if len(lacks) < short:
        return True
    lacks.sort()
    return sum(lacks[:short]) > given


# ---- the search ---------------------------------------------------------------------------


class _Search:
    """What one victim search reads, and its steps (:func:`select_victims`).

    A class and not closures: compiled (mypyc), nested functions live in a cycle with
    their environment, which only the cyclic collector frees, and with it the tick's cost
    cache and the cluster copies they read (a tenth of a compiled busy day went to the
    collector)."""

    def __init__(self, cap: Capacity, head: JobSpec, exclude: Container[str],
                 costs: dict[str, VictimCost], tenants: Mapping[str, TenantLoad],
                 after: float, keep: float | None) -> None:
        self.cap, self.head, self.exclude = cap, head, exclude
        self.costs, self.tenants, self.after, self.keep = costs, tenants, after, keep
        self.rank_of: dict[str, int] = {}

    def place(self, only: list[str] | None = None, materialise: bool = True
              ) -> Allocation | None:
        return place_spec(self.cap, self.head, self.exclude, only, materialise)

    def fits(self, victims: Iterable[Candidate], only: list[str] | None = None,
             materialise: bool = True) -> Allocation | None:
        cap = self.cap
        with cap.trial():
            for v in victims:
                cap.give_back(v.alloc)
            return self.place(only, materialise)

    def lost(self, victims: Iterable[Candidate]) -> int:
        costs = self.costs
        return sum(costs[v.spec.id].est_gpu_s_lost for v in victims)

    def by_lost(self, c: Candidate) -> tuple[object, ...]:
        return (self.costs[c.spec.id].est_gpu_s_lost, c.spec.seq)

    def by_cost_per_gpu(self, c: Candidate) -> tuple[object, ...]:
        cost = self.costs[c.spec.id]
        return (cost.cost_s, cost.est_gpu_s_lost, c.spec.seq)

    def walk(self, pool: Iterable[Candidate],
             within: Callable[[Candidate], tuple[object, ...]]) -> list[Candidate]:
        return share_order(pool, self.tenants, self.after, within, self.keep)

    def _give(self, seq: list[Candidate], lo: int, hi: int) -> None:
        cap = self.cap
        for c in seq[lo:hi]:
            cap.give_back(c.alloc)

    def shortest_prefix(self, seq: list[Candidate], only: list[str] | None
                        ) -> list[Candidate] | None:
        """The shortest prefix of ``seq`` whose eviction lets the head fit: gallop (1, 2,
        4, ... more victims), then bisect; O(log n) placements. Fitting is monotone in the
        prefix (more GPUs back never hurts), and the empty prefix does not fit."""
        cap, give = self.cap, self._give
        with cap.trial():
            done, step = 0, 1
            while done < len(seq):
                hi = min(len(seq), done + step)
                with cap.trial():
                    give(seq, done, hi)
                    ok = self.place(only, materialise=False) is not None
                if not ok:
                    give(seq, done, hi)
                    done, step = hi, step * 2
                    continue
                lo = done
                while hi - lo > 1:  # fails with lo victims, fits with hi
                    mid = (lo + hi) // 2
                    with cap.trial():
                        give(seq, done, mid)
                        ok = self.place(only, materialise=False) is not None
                    lo, hi = (lo, mid) if ok else (mid, hi)
                return seq[:hi]
        return None

    def prune(self, victims: list[Candidate], drop_order: list[Candidate]
              ) -> list[Candidate]:
        """Drop victims the head does not need, as long as its placement spans no more
        pods than with all of them. One trial: every victim's GPUs go back, then each in
        ``drop_order`` is handed its GPUs again and stays if the head still fits."""
        cap = self.cap
        dropped: set[int] = set()
        with cap.trial():
            for v in victims:
                cap.give_back(v.alloc)
            base = _pods(cap, self.place())
            for v in drop_order:
                if len(dropped) == len(victims) - 1:
                    break
                cap.take(v.alloc)
                alloc = self.place()
                if alloc is not None and _pods(cap, alloc) <= base:
                    dropped.add(id(v))
                else:
                    cap.give_back(v.alloc)
        return [v for v in victims if id(v) not in dropped]

    def floor(self, victims: Iterable[Candidate]) -> float:
        """The lowest share (before the preemption) among the victims' teams."""
        tenants = self.tenants
        return min(tenants[v.spec.tenant].share for v in victims)

    def rank(self, victims: list[Candidate]) -> tuple[object, ...]:
        """The winner's key: the highest share floor (:meth:`floor`: every victim from
        the teams furthest over their share), then fewest pods, fewest GPU-seconds lost,
        fewest victims, then the earliest in ``rank_of`` order. The floor first: a set
        that spared the team furthest over for a cheaper victim of a team less far over
        made that team reclaim in turn (two preemptions where one was needed; found by a
        user session, 2026-12-07)."""
        rank_of = self.rank_of
        keys = sorted(rank_of.get(v.spec.id, len(rank_of)) for v in victims)
        return (-self.floor(victims), _pods(self.cap, self.fits(victims)), self.lost(victims),
                len(victims), keys)


def select_victims(
    cap: Capacity,
    head: JobSpec,
    candidates: Sequence[Candidate],
    tenants: Mapping[str, TenantLoad],
    now: int,
    *,
    config: SchedulerConfig,
    policy: str = "full",
    exclude: Container[str] = frozenset(),
    costs: dict[str, VictimCost] | None = None,
) -> PreemptionPlan | None:
    """The set of victims whose eviction gives ``head`` a real placement, taken in the
    rule's order, losing the fewest GPU-seconds; None if no allowed set does (or the head
    fits without one).

    ``tenants``: every team's :class:`TenantLoad`, the head's team included (its held
    GPUs count what it already holds and what is being reclaimed for its other heads).
    ``costs``: a cache of ``victim_cost(c, now)`` by job id that the caller keeps for one
    instant ``now`` (a tick's searches weigh the same candidates); filled as needed.

    Allowed (policy ``full``): the team may give the job (:func:`may_give`, re-evaluated
    as victims are picked); the job is checkpointable or opted into preemptible pricing;
    not an interactive job in the interactive slice; preempted fewer than
    ``config.max_preemptions_per_job_per_day`` times in the last day, unless the head's team
    takes its guarantee back (it stays within it once the head runs) and no set without
    such a job makes room (a third search, :func:`_past_cap`: the cap protects a job from
    other borrowers, never from the team whose guarantee it holds); not the head's team;
    on a node the head could use.

    Search (bounded; every check is a trial plus one find_placement):
      1. the cheapest candidates of the highest-share team(s) alone (``SINGLES_TRIED``),
         then in pairs (``PAIR_POOL``), when they could beat the best set so far;
      2. walks: the candidates in :func:`share_order`, within a team by GPU-seconds lost
         and again by cost per GPU (a large cheap job may free more for less); the
         shortest prefix that lets the head fit is found by galloping then bisecting
         (O(log n) checks). Walks run inside each pod that could hold the head (its
         candidates only, the head placed with ``only=`` that pod), pods with the smallest
         least-possible loss first; a pod whose least possible loss cannot beat the best
         one-pod set so far is skipped (branch and bound). Unless a set so far takes its
         victims from the highest-share team(s) alone, the walks run cluster-wide too
         (with more than one pod: one pod's walk is the cluster's);
      3. the ``PRUNED_SETS`` cheapest walks are pruned in one trial each: victims are
         handed their GPUs back, most expensive first, and stay if the head still fits
         without spanning more pods (fewer victims never breaks the rule: every team then
         keeps more).
    Winner (:meth:`_Search.rank`): the highest share floor (every victim from the teams
    furthest over their share), then the fewest pods for the head (topology, as in
    placement), then the fewest GPU-seconds lost, then the fewest victims, then the
    earliest in key order.

    Policy ``priority-kill``: the baseline. The same teams may be preempted (the rule is
    about fairness, not about the victims' cost); within them any job not in the
    interactive slice, most recently started first (:func:`recency_key`), with no
    checkpoint awareness and no cap, until the head fits; victims not needed (last picked
    first) are dropped; if the walk fails, the most recently started single job that makes
    room alone.
    """
    if policy not in ("full", "priority-kill"):
        raise ValueError(f"policy {policy!r} does not preempt")

    if place_spec(cap, head, exclude) is not None:
        return None  # nothing to reclaim: the head fits as it is
    mine = tenants.get(head.tenant, TenantLoad(head.tenant, 0, 0))
    after = share_after(mine, head.gpus)
    if after == math.inf:
        return None  # a team with no guarantee never preempts

    if costs is None:
        costs = {}  # one cache for both searches: the same candidates at the same instant
    plan = _select(cap, head, candidates, tenants, now, config, policy, exclude, costs,
                   after, None)
    keep = reclaim_keep(after)
    if plan is None and keep is not None and _kept_back(candidates, head, tenants, after):
        plan = _select(cap, head, candidates, tenants, now, config, policy, exclude, costs,
                       after, keep)
    if (plan is None and keep is not None and policy == "full"
            and _past_cap(candidates, head, config)):
        # the last resort of a team taking its guarantee back: jobs past the daily cap
        plan = _select(cap, head, candidates, tenants, now, config, policy, exclude, costs,
                       after, keep, past_cap=True)
    return plan


def _past_cap(candidates: Iterable[Candidate], head: JobSpec,
              config: SchedulerConfig) -> bool:
    """Did the daily cap alone keep back a job of another team that could checkpoint or
    stop (and is not in the interactive slice)? Else the last search would weigh the
    same candidates as the reclaim search and find nothing either."""
    cap_n = config.max_preemptions_per_job_per_day
    return any(c.preemptions_last_day >= cap_n and c.spec.tenant != head.tenant
               and not c.in_slice and (c.spec.checkpointable or c.spec.preemptible)
               for c in candidates)


def _kept_back(candidates: Iterable[Candidate], head: JobSpec,
               tenants: Mapping[str, TenantLoad], after: float) -> bool:
    """Did the third condition alone keep a candidate back (:func:`may_give` allows it in
    the reclaim search, not in the first)? Else the reclaim search would weigh the same
    candidates and find nothing either."""
    for c in candidates:
        load = tenants.get(c.spec.tenant)
        if c.spec.tenant == head.tenant or load is None:
            continue
        held, g = load.held_gpus, load.guaranteed_gpus
        if (may_give(held, g, c.gpus, after, RECLAIM_KEEP)
                and not may_give(held, g, c.gpus, after)):
            return True
    return False


def _select(cap: Capacity, head: JobSpec, candidates: Sequence[Candidate],
            tenants: Mapping[str, TenantLoad], now: int, config: SchedulerConfig,
            policy: str, exclude: Container[str], costs: dict[str, VictimCost],
            after: float, keep: float | None, past_cap: bool = False
            ) -> PreemptionPlan | None:
    """One search of :func:`select_victims`: under the three conditions (``keep`` None),
    or the reclaim search (``keep`` :data:`RECLAIM_KEEP`); ``past_cap``: jobs past the
    daily cap may be taken too (the last resort of a team taking its guarantee back)."""
    eligible: list[Candidate] = []
    refused: dict[str, str] = {}
    team_why: dict[str, str | None] = {}  # what protects every job of a team, if anything
    for c in sorted(candidates, key=lambda c: c.spec.seq):
        team = c.spec.tenant
        if team not in team_why:
            team_why[team] = _team_protected(team, head, tenants, after)
        why_not = team_why[team] or _protected(c, head, tenants, after, config, policy, cap,
                                               exclude, keep, past_cap)
        if why_not is None:
            eligible.append(c)
        else:
            refused[c.spec.id] = why_not
    if not eligible:
        return None
    search = _Search(cap, head, exclude, costs, tenants, after, keep)
    fits, lost = search.fits, search.lost
    by_lost, by_cost_per_gpu, walk = search.by_lost, search.by_cost_per_gpu, search.walk
    shortest_prefix, prune = search.shortest_prefix, search.prune
    for c in eligible:  # only these are weighed: a protected job's cost is never read
        if c.spec.id not in costs:
            costs[c.spec.id] = victim_cost(c, now)
    # No set can make room if every GPU free now plus every eligible victim's falls short
    # of the head (a third of the vain searches on a loaded window end here, before a
    # single trial placement).
    need = head.least_gpus
    if cap.free_gpus(head.gpu_type) + sum(c.gpus for c in eligible) < need:
        return None

    # Nor if the head does not fit with every eligible victim's GPUs back: every set the
    # search tries is a subset of those, and fitting is monotone (more GPUs back never
    # hurts; find_placement is complete). One trial placement instead of the singles,
    # pairs and walks (on the loaded anchor window, nine in ten searches that find nothing
    # end here, at a fifth of the cost: the GPUs are there, on nodes the head's shape
    # cannot use).
    if fits(eligible, materialise=False) is None:
        return None

    if policy == "priority-kill":
        chosen = shortest_prefix(walk(eligible, recency_key), None)
        if chosen is None:
            # the walk can spend a team's excess on jobs that free nothing useful: then
            # the most recently started single job that makes room on its own (each one
            # is allowed alone: _protected checked it)
            single = sorted(eligible, key=recency_key)
            chosen = next(([c] for c in single if fits([c]) is not None), None)
        if chosen is None:
            return None
        chosen = prune(chosen, list(reversed(chosen)))
        return _plan(cap, head, chosen, fits(chosen), costs, eligible, refused, now,
                     runner_up=None, policy=policy, tenants=tenants, after=after, keep=keep)

    search.rank_of = {c.spec.id: i for i, c in enumerate(walk(eligible, by_lost))}

    # 1. The cheapest single victims and pairs of the highest-share team(s): cheap to check,
    # and they give the walks below a bound to beat.
    top = max(tenants[c.spec.tenant].share for c in eligible)
    hot = sorted((c for c in eligible if tenants[c.spec.tenant].share == top), key=by_lost)
    found: list[list[Candidate]] = []
    best: int | None = None
    upper: int | None = None  # the cheapest set whose head placement is inside one pod
    for c in hot[:SINGLES_TRIED]:
        if best is not None and lost([c]) >= best:
            break
        if (alloc := fits([c])) is not None:
            found.append([c])
            best = lost([c])
            upper = best if _pods(cap, alloc) == 1 else None
            break  # by_lost: the first single that fits is the cheapest single
    for a, b in itertools.combinations(hot[:PAIR_POOL], 2):
        pair = [a, b]
        if best is not None and lost(pair) >= best:
            continue
        if _allowed(pair, tenants, after, keep) and (alloc := fits(pair)) is not None:
            found.append(pair)
            best = lost(pair)
            if _pods(cap, alloc) == 1:
                upper = best

    # 2. The walks in share order, inside each pod that could hold the head (most
    # promising pod first, skipping pods whose least possible loss cannot beat the best
    # one-pod set so far), else across the cluster.
    walked: list[list[Candidate]] = []
    need = head.least_gpus
    in_pod: dict[str, dict[str, int]] = {}  # pod -> candidate -> its GPUs in that pod
    for c in eligible:
        for n, ix in c.alloc.items():
            per = in_pod.setdefault(cap.nodes[n].pod, {})
            per[c.spec.id] = per.get(c.spec.id, 0) + len(ix)
    bounds = []
    for pod in cap.pod_list:
        here = in_pod.get(pod.name)
        if not here or cap.pod_gpus(pod.name, head.gpu_type) < need:
            continue
        short = need - _pod_free(cap, pod.name, head.gpu_type)
        bound = _least_loss(short, [(costs[j].cost_s, g) for j, g in here.items()])
        if bound is not None:
            bounds.append((bound, pod.index, pod, here))
    for bound, _i, pod, here in sorted(bounds, key=lambda b: (b[0], b[1])):
        if upper is not None and bound >= upper:
            break  # branch and bound: no set placing the head in this pod can be cheaper
        for within in (by_lost, by_cost_per_gpu):
            seq = shortest_prefix(walk((c for c in eligible if c.spec.id in here), within),
                                  pod.names)
            if seq is not None:
                walked.append(seq)
                if search.floor(seq) == top:  # only such a set bounds the others
                    upper = lost(seq) if upper is None else min(upper, lost(seq))
    if not found and not any(search.floor(seq) == top for seq in walked) and (
            not walked or len(cap.pod_list) > 1):
        # no set yet whose victims all come from the teams furthest over: one that spans
        # pods may (the share floor ranks before the pods). Found by a user session
        # (2026-12-07): a head took a set inside one pod from teams 1.33 and 1.38 times
        # over while the team 2.5 times over had jobs in the other pods, and the victims'
        # teams reclaimed from it within seconds: two preemptions where one was needed
        for within in (by_lost, by_cost_per_gpu):
            seq = shortest_prefix(walk(eligible, within), None)
            if seq is not None:
                walked.append(seq)
    for seq in sorted(walked, key=lambda v: (-search.floor(v), lost(v), len(v)))[:PRUNED_SETS]:
        expensive_first = sorted(seq, key=by_lost, reverse=True)
        found.append(prune(seq, expensive_first))
    if not found:
        return None

    ranked = sorted({tuple(v.spec.id for v in s): s for s in found}.values(),
                    key=search.rank)
    chosen = ranked[0]
    runner_up = ranked[1] if len(ranked) > 1 else None
    if runner_up is None:
        # For the explanation only: the cheapest other single victim that makes room.
        for c in hot[:SINGLES_TRIED]:
            if all(c is not v for v in chosen) and fits([c]) is not None:
                runner_up = [c]
                break
    won_by = None
    if runner_up is not None:
        mine, theirs = search.rank(chosen), search.rank(runner_up)
        won_by = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True))
                       if a != b), None)
    cap_n = config.max_preemptions_per_job_per_day
    capped = ([c.spec.id for c in chosen if c.preemptions_last_day >= cap_n] if past_cap
              else [])
    return _plan(cap, head, chosen, fits(chosen), costs, eligible, refused, now,
                 runner_up=runner_up, policy=policy, tenants=tenants, after=after, keep=keep,
                 won_by=won_by, past_cap=capped, cap_n=cap_n)


def _weigh(eligible: Sequence[Candidate], costs: Mapping[str, VictimCost], ids: set[str],
           refused: Mapping[str, str]) -> tuple[VictimCost, ...]:
    """Every candidate, chosen or not, and why (``PreemptionPlan.weighed``, written when
    read). A partial of a module function, not a closure: see _Search."""
    weighed = []
    for c in sorted(eligible, key=lambda c: (costs[c.spec.id].est_gpu_s_lost, c.spec.seq)):
        vc = costs[c.spec.id]
        verb = "evicted" if c.spec.id in ids else "kept"
        weighed.append(vc.told(f"{verb} {vc.words}"))
    for job_id in sorted(refused):
        weighed.append(VictimCost(job_id, 0, 0, 0, text=f"job {job_id}: {refused[job_id]}"))
    return tuple(weighed)


def _least_loss(short: int, offers: list[tuple[int, int]]) -> int | None:
    """A lower bound on the GPU-seconds lost to free ``short`` GPUs from ``offers``
    ((cost_s, GPUs) per candidate): the cheapest seconds per GPU first, fractionally.
    None if all of them together do not free enough."""
    if short <= 0:
        return 0
    total = 0
    for cost_s, gpus in sorted(offers):
        take = min(gpus, short)
        total += cost_s * take
        short -= take
        if short == 0:
            return total
    return None


def _pods(cap: Capacity, alloc: Allocation | None) -> int:
    return len({cap.nodes[n].pod for n in alloc}) if alloc else 0


def _pod_free(cap: Capacity, pod: str, gpu_type: str | None) -> int:
    """Free GPUs on the healthy nodes of ``pod`` (from its buckets, not its nodes)."""
    return sum(
        m.bit_count() * free
        for (t, _size, free), m in cap.pods[pod].buckets.items()
        if gpu_type is None or t == gpu_type
    )


# ---- eligibility -----------------------------------------------------------------------


def _team_protected(team: str, head: JobSpec, tenants: Mapping[str, TenantLoad],
                    after: float) -> str | None:
    """Why no job of ``team`` may be a victim for ``head`` (a sentence), or None."""
    if team == head.tenant:
        return "protected: same team as the job it would make room for"
    load = tenants.get(team)
    held = 0 if load is None else load.held_gpus
    guaranteed = 0 if load is None else load.guaranteed_gpus
    if held <= guaranteed:
        return f"protected: team {team} is within its guarantee ({held} of {guaranteed} GPUs)"
    if held_share(held, guaranteed) <= after:
        return (f"protected: team {team}'s share ({share_words(held_share(held, guaranteed))})"
                f" is not above team {head.tenant}'s once the job starts "
                f"({share_words(after)})")
    return None


def _protected(
    c: Candidate,
    head: JobSpec,
    tenants: Mapping[str, TenantLoad],
    after: float,
    config: SchedulerConfig,
    policy: str,
    cap: Capacity,
    exclude: Container[str],
    keep: float | None = None,
    past_cap: bool = False,
) -> str | None:
    """Why ``c`` may not be a victim (a sentence), or None if it may, its team not being
    protected as a whole (:func:`_team_protected` returned None for it)."""
    load = tenants.get(c.spec.tenant)
    held = 0 if load is None else load.held_gpus
    guaranteed = 0 if load is None else load.guaranteed_gpus
    team = f"team {c.spec.tenant}"
    if held_share(held - c.gpus, guaranteed) < (after if keep is None else keep):
        return (f"protected: without it {team}'s share "
                f"({share_words(held_share(held - c.gpus, guaranteed))}) would fall below "
                f"team {head.tenant}'s once the job starts ({share_words(after)})")
    if c.in_slice:
        return "protected: an interactive job in the interactive slice"
    if policy == "full":
        if not (c.spec.checkpointable or c.spec.preemptible):
            return "protected: cannot checkpoint and did not opt into preemptible pricing"
        cap_n = config.max_preemptions_per_job_per_day
        if c.preemptions_last_day >= cap_n and not past_cap:
            return (
                f"protected: preempted {c.preemptions_last_day} "
                f"{_plural(c.preemptions_last_day, 'time')} within a day (cap {cap_n}), "
                "so only a team taking its guarantee back may preempt it again, when no "
                "other set of victims makes room"
            )
    if head.gpu_type is not None and all(
        cap.nodes[n].gpu_type != head.gpu_type for n in c.alloc
    ):
        return f"not useful: runs on no {head.gpu_type} GPU"
    if all(not cap.is_schedulable(n) or n in exclude for n in c.alloc):
        return "not useful: its nodes take no new jobs (draining, down or set aside)"
    return None


def _allowed(victims: Sequence[Candidate], tenants: Mapping[str, TenantLoad],
             after: float, keep: float | None) -> bool:
    """The rule holds for each victim, taken in its team in largest-last order (the order
    most favourable to the team's earlier victims: if any order works, this one does)."""
    per_team: dict[str, list[int]] = {}
    for v in victims:
        per_team.setdefault(v.spec.tenant, []).append(v.gpus)
    for team, sizes in per_team.items():
        load = tenants[team]
        held = load.held_gpus
        for gpus in sorted(sizes):
            if not may_give(held, load.guaranteed_gpus, gpus, after, keep):
                return False
            held -= gpus
    return True


# ---- the explanation -------------------------------------------------------------------


def _plan(
    cap: Capacity,
    head: JobSpec,
    chosen: list[Candidate],
    placement: Allocation | None,
    costs: Mapping[str, VictimCost],
    eligible: list[Candidate],
    refused: Mapping[str, str],
    now: int,
    *,
    runner_up: list[Candidate] | None,
    policy: str,
    tenants: Mapping[str, TenantLoad],
    after: float,
    keep: float | None = None,
    won_by: int | None = None,
    past_cap: Sequence[str] = (),
    cap_n: int = 0,
) -> PreemptionPlan:
    """``won_by``: the first element of ``_Search.rank`` on which ``chosen`` beat
    ``runner_up`` (the sentence names it when the next best loses less: "the fewest"
    beside a cheaper next best read as a contradiction; an operator's session,
    2026-12-07). ``past_cap``: the victims past the daily cap (``cap_n``), which only
    the last search of a team taking its guarantee back may take."""
    assert placement is not None
    ids = {c.spec.id for c in chosen}
    n_elig = len(eligible)
    total = sum(costs[c.spec.id].est_gpu_s_lost for c in chosen)
    other = (None if runner_up is None
             else sum(costs[c.spec.id].est_gpu_s_lost for c in runner_up))
    cheaper_next = other is not None and other < total
    victims = []
    for c in chosen:
        vc = costs[c.spec.id]
        if policy == "priority-kill":
            tail = f"most recently started of {n_elig} {_plural(n_elig, 'candidate')}"
        elif len(chosen) == 1:
            cheaper = sum(1 for e in eligible if costs[e.spec.id].est_gpu_s_lost
                          < vc.est_gpu_s_lost)
            tail = (
                f"cheapest of {n_elig} {_plural(n_elig, 'candidate')}"
                if cheaper == 0
                else f"not the cheapest that makes room, of {n_elig} candidates"
                if cheaper_next
                else f"the cheapest that makes room, of {n_elig} candidates"
            )
        else:
            tail = f"one of {len(chosen)} victims, of {n_elig} candidates"
        victims.append(vc.told(f"evicted {vc.words}, {tail}"))

    weigh = partial(_weigh, eligible, costs, ids, refused)

    names = join_words([c.spec.id for c in chosen])
    where = _where(cap, placement)
    if policy == "priority-kill":
        why = (
            f"to start {head.id} ({head.gpus} GPUs) on {where}: killed {names}, the most "
            f"recently started borrowers, {_hours(total)} lost"
        )
    else:
        why = (
            f"to start {head.id} ({head.gpus} GPUs) on {where}: evicted {names}, "
            f"{_hours(total)} lost, "
            + (_WON_BY.get(won_by if won_by is not None else -1, _FEWEST) if cheaper_next
               else _FEWEST)
        )
        if runner_up is not None:
            why += (f"; next best: {join_words([c.spec.id for c in runner_up])}"
                    f" ({_hours(other or 0)})")
        if refused:
            why += f"; {len(refused)} running {_plural(len(refused), 'job')} protected"
    teams = sorted({c.spec.tenant for c in chosen},
                   key=lambda t: (-tenants[t].share, t))
    shares = ", ".join(
        f"team {t} holds {tenants[t].held_gpus} of its {tenants[t].guaranteed_gpus}"
        f" guaranteed GPUs ({share_words(tenants[t].share)})" for t in teams)
    why += (f"; {shares}, above team {head.tenant}'s share once it runs"
            f" ({share_words(after)})")
    lost_by = {t: sum(c.gpus for c in chosen if c.spec.tenant == t) for t in teams}
    below = [t for t in teams if held_share(tenants[t].held_gpus - lost_by[t],
                                            tenants[t].guaranteed_gpus) < after]
    if keep is not None and below:  # (the last search's set may keep them above it)
        givers = join_words([f"team {t}" for t in below])
        why += (f"; team {head.tenant} stays within its guarantee once it runs and no set "
                f"of victims that leaves their teams at or above its share makes room, so "
                f"{givers} {'gives' if len(below) == 1 else 'give'} back below it (a "
                f"guarantee is taken back from borrowers whatever the size of their jobs)")
    if past_cap:
        were = "was" if len(past_cap) == 1 else "were"
        why += (f"; {join_words(list(past_cap))} {were} past the daily preemption cap ({cap_n} "
                f"within a day), and no set of victims without "
                f"{'it' if len(past_cap) == 1 else 'them'} gives team {head.tenant} its "
                "guarantee back")
    grace = max(c.grace_s for c in chosen)
    if policy != "priority-kill" and grace:
        why += f"; the victims stop within {_dur(grace)} (their grace window)"
    return PreemptionPlan(head.id, tuple(victims), placement, weigh, why)


#: the victim set the search keeps, in words: the fewest GPU-hours lost, unless the next
#: best loses fewer (then what ranked it first, by ``_Search.rank``'s element)
_FEWEST = "the fewest of the victim sets that make room from the teams furthest over their share"
_WON_BY = {
    0: "not the fewest: its victims' teams are further over their share than the next best's",
    1: "not the fewest: with it the job spans fewer pods than with the next best",
}


def _where(cap: Capacity, alloc: Allocation) -> str:
    pods = sorted({cap.nodes[n].pod for n in alloc})
    nodes = f"{len(alloc)} {_plural(len(alloc), 'node')}"
    return f"{nodes} in {pods[0]}" if len(pods) == 1 else f"{nodes} across {join_words(pods)}"


def _dur(seconds: int) -> str:
    """4 min, 40 s, 2.5 h: the unit a person would say."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 2 * 3600:
        minutes = seconds / 60
        return f"{minutes:.0f} min" if seconds % 60 == 0 else f"{minutes:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _hours(gpu_s: int) -> str:
    return f"{gpu_s / 3600:.2f} GPU-hours"


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"
