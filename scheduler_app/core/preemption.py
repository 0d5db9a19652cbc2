"""Whom to evict so an entitled head can start: cheapest GPU-hours first, with the arithmetic.

The seed's rule: evict *borrowed* gangs (jobs of tenants running above their guarantee)
until the head fits; cost of a victim = (now - last checkpoint) + restart time, times its
GPUs; order by usage / guarantee descending, then cost ascending; prefer many small cheap
victims over one expensive one when they lose fewer GPU-hours in total; cap preemptions
per job per day. Every decision carries sentences a researcher can read.

Nothing here mutates state: the search gives victims' GPUs back inside ``cap.trial()``
and asks :func:`~.placement.find_placement` for a real placement (shape and topology
included), then the trial undoes it.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .capacity import Capacity
from .placement import find_placement
from .types import Allocation, JobSpec, SchedulerConfig, alloc_gpus

#: the cheapest eligible candidates tried alone, and the pool tried in pairs (bounds)
SINGLES_TRIED = 32
PAIR_POOL = 10
#: walks pruned (the cheapest before pruning); pruning costs |set| checks each
PRUNED_SETS = 3


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running job the search may weigh."""

    spec: JobSpec
    alloc: Allocation
    run_start_s: int
    last_checkpoint_s: int | None
    preemptions_last_day: int

    @property
    def gpus(self) -> int:
        return alloc_gpus(self.alloc)


@dataclass(frozen=True, slots=True)
class VictimCost:
    job_id: str
    gpus: int
    cost_s: int  # seconds of work lost plus restart
    est_gpu_s_lost: int  # cost_s x GPUs
    #: the sentence, if set; else :attr:`words` writes it from the three fields below (a
    #: search weighs hundreds of candidates per tick and explains only the ones it keeps)
    text: str | None = None
    lost_s: int = 0  # seconds since the last checkpoint (or the start of the run)
    restart_s: int = 0
    checkpointed: bool = False

    @property
    def words(self) -> str:
        """The arithmetic, in a sentence."""
        if self.text is not None:
            return self.text
        lost, gpus, restart_s = self.lost_s, self.gpus, self.restart_s
        what = (f"last checkpoint {_dur(lost)} ago" if self.checkpointed
                else f"no checkpoint, started {_dur(lost)} ago")
        restart = f"{_dur(restart_s)} restart" if restart_s else "no restart"
        return (f"{self.job_id}: {what} + {restart} on {gpus} {_plural(gpus, 'GPU')}"
                f" = {_hours(self.cost_s * gpus)}")


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    head_id: str
    victims: tuple[VictimCost, ...]
    placement: Allocation  # where the head goes once the victims have exited
    weighed: tuple[VictimCost, ...]  # every candidate, chosen or not, and why
    why: str

    @property
    def est_gpu_s_lost(self) -> int:
        return sum(v.est_gpu_s_lost for v in self.victims)


@dataclass(frozen=True, slots=True)
class TenantLoad:
    name: str
    guaranteed_gpus: int
    running_gpus: int
    usage_ratio: float  # usage / guarantee (inf for a tenant that guarantees nothing)

    @property
    def excess(self) -> int:
        """GPUs held above the guarantee: what may be reclaimed from it."""
        return self.running_gpus - self.guaranteed_gpus


# ---- cost and order ----------------------------------------------------------------------


def victim_cost(c: Candidate, now: int) -> VictimCost:
    """What evicting ``c`` now loses: work since its last checkpoint, plus the restart.

    cost_s = (now - last checkpoint) + restart_s, where the last checkpoint is the later of
    the last reported checkpoint and the start of the current run (a checkpoint from an
    earlier run does not save the time spent in this one); a run that never checkpointed
    loses everything since it started. est_gpu_s_lost = cost_s x GPUs.
    """
    gpus = c.gpus
    since = c.run_start_s
    if c.last_checkpoint_s is not None:
        since = max(c.last_checkpoint_s, c.run_start_s)
    lost = max(0, now - since)
    cost = lost + c.spec.restart_s
    return VictimCost(c.spec.id, gpus, cost, cost * gpus, lost_s=lost,
                      restart_s=c.spec.restart_s, checkpointed=c.last_checkpoint_s is not None)


def victim_sort_key(
    c: Candidate, usage_ratio: float, now: int, *, cost: VictimCost | None = None
) -> tuple[float, int, int]:
    """THE order in which preemption candidates are weighed (the seed's rule).

    1. usage / guarantee of the candidate's tenant, descending: the team furthest above
       its share gives back first;
    2. cost ascending: the fewest GPU-seconds lost (``victim_cost(...).est_gpu_s_lost``);
    3. the job's seq ascending: an arbitrary but total, deterministic tie-break.

    ``cost`` may pass ``victim_cost(c, now)`` when the caller already has it.
    """
    if cost is None:
        cost = victim_cost(c, now)
    return (-usage_ratio, cost.est_gpu_s_lost, c.spec.seq)


def recency_key(c: Candidate) -> tuple[int, int]:
    """Policy ``priority-kill``: most recently started first (what most batch schedulers
    do), no cost awareness; the higher seq first on a tie."""
    return (-c.run_start_s, -c.spec.seq)


# ---- the search ---------------------------------------------------------------------------


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
    """The set of victims whose eviction gives ``head`` a real placement, losing the
    fewest GPU-seconds; None if no eligible set does (or the head fits without one).

    ``costs``: a cache of ``victim_cost(c, now)`` by job id that the caller keeps for one
    instant ``now`` (a tick's searches weigh the same candidates); filled as needed.

    Eligible (policy ``full``): the tenant is above its guarantee; the job is
    checkpointable or opted into preemptible pricing; not interactive; preempted fewer than
    ``config.max_preemptions_per_job_per_day`` times in the last day; not the head's team.
    Re-evaluated as victims are picked: a set is allowed only if each tenant is still above
    its guarantee before its last victim is taken (sum of its victims' GPUs minus the
    largest one < its excess), so once enough is reclaimed from a team its remaining jobs
    stop being candidates. A tenant within its guarantee is never a victim.

    Search (bounded; every check is a trial plus one find_placement):
      1. each of the ``SINGLES_TRIED`` cheapest candidates alone, stopping at the first
         that fits (the cheapest single victim);
      2. every allowed pair among the ``PAIR_POOL`` cheapest, skipped unless it could beat
         the best set so far;
      3. walks: the candidates in :func:`victim_sort_key` order, and again in cost order,
         skipping a team once it would be back at its guarantee; the shortest prefix that
         lets the head fit is found by galloping then bisecting (O(log n) checks). Walks
         run inside each pod that could hold the head (its candidates only, the head
         placed with ``only=`` that pod), pods with the smallest least-possible loss
         first (cheapest GPU-seconds per GPU to free what the pod lacks, fractionally);
         a pod whose least possible loss cannot beat the best set so far is skipped
         (branch and bound). Only if no pod-local set exists, the walks run cluster-wide;
      4. the ``PRUNED_SETS`` cheapest walks are pruned in one trial each: victims are
         handed their GPUs back, most expensive first, and stay if the head still fits
         without spanning more pods.
    Winner: the fewest pods for the head (topology first, as in placement: a gang that
    one pod can hold goes to one pod), then the fewest GPU-seconds lost, then the fewest
    victims, then the earliest in sort-key order.
    Work: SINGLES_TRIED + PAIR_POOL^2 / 2 + 2 x pods x O(log candidates) + PRUNED_SETS x
    |set| placements, and O(candidates log candidates) give-backs per walk.

    Policy ``priority-kill``: the baseline. Candidates are the jobs of tenants above their
    guarantee that are not interactive (no checkpoint awareness, no cap); greedy in
    :func:`recency_key` order until the head fits, then the victims not needed (last
    picked first) are dropped; if the walk fails, the most recently started job that
    makes room alone. Same need for a real placement.
    """
    if policy not in ("full", "priority-kill"):
        raise ValueError(f"policy {policy!r} does not preempt")

    def place(only: list[str] | None = None, materialise: bool = True) -> Allocation | None:
        return find_placement(
            cap,
            gpus=head.gpus,
            gpus_per_node=head.gpus_per_node,
            gpu_type=head.gpu_type,
            min_gpus=head.min_gpus,
            exclude=exclude,
            only=only,
            materialise=materialise,
        )

    if place() is not None:
        return None  # nothing to reclaim: the head fits as it is

    if costs is None:
        costs = {}
    for c in candidates:
        if c.spec.id not in costs:
            costs[c.spec.id] = victim_cost(c, now)
    ratio = {c.spec.id: _ratio(tenants, c.spec.tenant) for c in candidates}
    eligible: list[Candidate] = []
    refused: dict[str, str] = {}
    for c in sorted(candidates, key=lambda c: c.spec.seq):
        why_not = _protected(c, head, tenants, config, policy, cap, exclude)
        if why_not is None:
            eligible.append(c)
        else:
            refused[c.spec.id] = why_not
    if not eligible:
        return None

    def fits(victims: Iterable[Candidate], only: list[str] | None = None) -> Allocation | None:
        with cap.trial():
            for v in victims:
                cap.give_back(v.alloc)
            return place(only)

    def lost(victims: Iterable[Candidate]) -> int:
        return sum(costs[v.spec.id].est_gpu_s_lost for v in victims)

    def walk(order: Iterable[Candidate]) -> list[Candidate]:
        """The order with each team skipped once it would be back at its guarantee."""
        out: list[Candidate] = []
        taken: dict[str, int] = {}
        for c in order:
            load = tenants[c.spec.tenant]
            if load.excess - taken.get(load.name, 0) > 0:
                out.append(c)
                taken[load.name] = taken.get(load.name, 0) + c.gpus
        return out

    def shortest_prefix(seq: list[Candidate], only: list[str] | None) -> list[Candidate] | None:
        """The shortest prefix of ``seq`` whose eviction lets the head fit: gallop (1, 2,
        4, ... more victims), then bisect; O(log n) placements. Fitting is monotone in the
        prefix (more GPUs back never hurts), and the empty prefix does not fit."""

        def give(lo: int, hi: int) -> None:
            for c in seq[lo:hi]:
                cap.give_back(c.alloc)

        with cap.trial():
            done, step = 0, 1
            while done < len(seq):
                hi = min(len(seq), done + step)
                with cap.trial():
                    give(done, hi)
                    ok = place(only, materialise=False) is not None
                if not ok:
                    give(done, hi)
                    done, step = hi, step * 2
                    continue
                lo = done
                while hi - lo > 1:  # fails with lo victims, fits with hi
                    mid = (lo + hi) // 2
                    with cap.trial():
                        give(done, mid)
                        ok = place(only, materialise=False) is not None
                    lo, hi = (lo, mid) if ok else (mid, hi)
                return seq[:hi]
        return None

    def prune(victims: list[Candidate], drop_order: list[Candidate]) -> list[Candidate]:
        """Drop victims the head does not need, as long as its placement spans no more
        pods than with all of them. One trial: every victim's GPUs go back, then each in
        ``drop_order`` is handed its GPUs again and stays if the head still fits."""
        dropped: set[int] = set()
        with cap.trial():
            for v in victims:
                cap.give_back(v.alloc)
            base = _pods(cap, place())
            for v in drop_order:
                if len(dropped) == len(victims) - 1:
                    break
                cap.take(v.alloc)
                alloc = place()
                if alloc is not None and _pods(cap, alloc) <= base:
                    dropped.add(id(v))
                else:
                    cap.give_back(v.alloc)
        return [v for v in victims if id(v) not in dropped]

    if policy == "priority-kill":
        order = sorted(eligible, key=recency_key)
        chosen = shortest_prefix(walk(order), None)
        if chosen is None:
            # the walk can spend a team's excess on jobs that free nothing useful: then
            # the most recently started single job that makes room on its own
            chosen = next(([c] for c in order if fits([c]) is not None), None)
        if chosen is None:
            return None
        chosen = prune(chosen, list(reversed(chosen)))
        return _plan(cap, head, chosen, fits(chosen), costs, eligible, refused, now,
                     runner_up=None, policy=policy)

    key_of = {
        c.spec.id: victim_sort_key(c, ratio[c.spec.id], now, cost=costs[c.spec.id])
        for c in eligible
    }
    by_key = sorted(eligible, key=lambda c: key_of[c.spec.id])
    by_cost = sorted(eligible, key=lambda c: (costs[c.spec.id].est_gpu_s_lost, c.spec.seq))

    # c. and d. first: the cheapest single victim, and pairs that could beat the best so
    # far. They are cheap to check and give the walks below a bound to beat.
    found: list[list[Candidate]] = []
    best: int | None = None
    upper: int | None = None  # the cheapest set whose head placement is inside one pod
    for c in by_cost[:SINGLES_TRIED]:
        if best is not None and lost([c]) >= best:
            break
        if (alloc := fits([c])) is not None:
            found.append([c])
            best = lost([c])
            upper = best if _pods(cap, alloc) == 1 else None
            break  # by_cost: the first single that fits is the cheapest single
    for a, b in itertools.combinations(by_cost[:PAIR_POOL], 2):
        pair = [a, b]
        if best is not None and lost(pair) >= best:
            continue
        if _allowed(pair, tenants) and (alloc := fits(pair)) is not None:
            found.append(pair)
            best = lost(pair)
            if _pods(cap, alloc) == 1:
                upper = best

    # a. and b.: the walks in sort-key and in cost order, inside each pod that could hold
    # the head (most promising pod first, skipping pods whose least possible loss cannot
    # beat the best set so far), else across the cluster.
    walked: list[list[Candidate]] = []
    need = head.min_gpus if head.min_gpus is not None else head.gpus
    in_pod: dict[str, dict[str, int]] = {}  # pod -> candidate -> its GPUs in that pod
    for c in eligible:
        for n, ix in c.alloc.items():
            per = in_pod.setdefault(cap.nodes[n].pod, {})
            per[c.spec.id] = per.get(c.spec.id, 0) + len(ix)
    bounds = []
    for pod in cap.pod_list:
        mine = in_pod.get(pod.name)
        if not mine or cap.pod_gpus(pod.name, head.gpu_type) < need:
            continue
        short = need - _pod_free(cap, pod.name, head.gpu_type)
        bound = _least_loss(short, [(costs[j].cost_s, g) for j, g in mine.items()])
        if bound is not None:
            bounds.append((bound, pod.index, pod, mine))
    for bound, _i, pod, mine in sorted(bounds, key=lambda b: (b[0], b[1])):
        if upper is not None and bound >= upper:
            break  # branch and bound: no set placing the head in this pod can be cheaper
        for order in (by_key, by_cost):
            seq = shortest_prefix(walk(c for c in order if c.spec.id in mine), pod.names)
            if seq is not None:
                walked.append(seq)
                upper = lost(seq) if upper is None else min(upper, lost(seq))
    if not walked and upper is None:
        for order in (by_key, by_cost):
            seq = shortest_prefix(walk(order), None)
            if seq is not None:
                walked.append(seq)
    for seq in sorted(walked, key=lambda v: (lost(v), len(v)))[:PRUNED_SETS]:
        expensive_first = sorted(
            seq, key=lambda c: (costs[c.spec.id].est_gpu_s_lost, key_of[c.spec.id]),
            reverse=True,
        )
        found.append(prune(seq, expensive_first))
    if not found:
        return None

    def rank(victims: list[Candidate]) -> tuple[object, ...]:
        keys = sorted(key_of[v.spec.id] for v in victims)
        return (_pods(cap, fits(victims)), lost(victims), len(victims), keys)

    ranked = sorted({tuple(v.spec.id for v in s): s for s in found}.values(), key=rank)
    chosen = ranked[0]
    runner_up = ranked[1] if len(ranked) > 1 else None
    if runner_up is None:
        # For the explanation only: the cheapest other single victim that makes room.
        for c in by_cost[:SINGLES_TRIED]:
            if all(c is not v for v in chosen) and fits([c]) is not None:
                runner_up = [c]
                break
    return _plan(cap, head, chosen, fits(chosen), costs, eligible, refused, now,
                 runner_up=runner_up, policy=policy)


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


def _ratio(tenants: Mapping[str, TenantLoad], name: str) -> float:
    load = tenants.get(name)
    return 0.0 if load is None else load.usage_ratio


def _protected(
    c: Candidate,
    head: JobSpec,
    tenants: Mapping[str, TenantLoad],
    config: SchedulerConfig,
    policy: str,
    cap: Capacity,
    exclude: Container[str],
) -> str | None:
    """Why ``c`` may not be a victim (a sentence), or None if it may."""
    load = tenants.get(c.spec.tenant)
    if c.spec.id == head.id or c.spec.tenant == head.tenant:
        return "protected: same team as the job it would make room for"
    if load is None or load.excess <= 0:
        held = 0 if load is None else load.running_gpus
        guaranteed = 0 if load is None else load.guaranteed_gpus
        return (
            f"protected: team {c.spec.tenant} is within its guarantee"
            f" ({held} of {guaranteed} GPUs)"
        )
    if c.spec.interactive:
        return "protected: interactive jobs are never preempted"
    if policy == "full":
        if not (c.spec.checkpointable or c.spec.preemptible):
            return "protected: cannot checkpoint and did not opt into preemptible pricing"
        cap_n = config.max_preemptions_per_job_per_day
        if c.preemptions_last_day >= cap_n:
            return (
                f"protected: preempted {c.preemptions_last_day} "
                f"{_plural(c.preemptions_last_day, 'time')} within a day (cap {cap_n}), "
                "so it runs until it completes"
            )
    if head.gpu_type is not None and all(
        cap.nodes[n].gpu_type != head.gpu_type for n in c.alloc
    ):
        return f"not useful: runs on no {head.gpu_type} GPU"
    if all(not cap.is_schedulable(n) or n in exclude for n in c.alloc):
        return "not useful: its nodes take no new jobs (draining, down or set aside)"
    return None


def _allowed(victims: Sequence[Candidate], tenants: Mapping[str, TenantLoad]) -> bool:
    """Each team is still above its guarantee before its last victim is taken."""
    per_team: dict[str, list[int]] = {}
    for v in victims:
        per_team.setdefault(v.spec.tenant, []).append(v.gpus)
    return all(sum(g) - max(g) < tenants[t].excess for t, g in per_team.items())


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
) -> PreemptionPlan:
    assert placement is not None
    ids = {c.spec.id for c in chosen}
    n_elig = len(eligible)
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
                else f"the cheapest that makes room, of {n_elig} candidates"
            )
        else:
            tail = f"one of {len(chosen)} victims, of {n_elig} candidates"
        victims.append(replace(vc, text=f"evicted {vc.words}, {tail}"))
    weighed = []
    for c in sorted(eligible, key=lambda c: (costs[c.spec.id].est_gpu_s_lost, c.spec.seq)):
        vc = costs[c.spec.id]
        verb = "evicted" if c.spec.id in ids else "kept"
        weighed.append(replace(vc, text=f"{verb} {vc.words}"))
    for job_id in sorted(refused):
        weighed.append(VictimCost(job_id, 0, 0, 0, text=f"{job_id}: {refused[job_id]}"))

    total = sum(costs[c.spec.id].est_gpu_s_lost for c in chosen)
    names = _join([c.spec.id for c in chosen])
    where = _where(cap, placement)
    if policy == "priority-kill":
        why = (
            f"to start {head.id} ({head.gpus} GPUs) on {where}: killed {names}, the most "
            f"recently started borrowers, {_hours(total)} lost"
        )
    else:
        why = (
            f"to start {head.id} ({head.gpus} GPUs) on {where}: evicted {names}, "
            f"{_hours(total)} lost, the fewest of the victim sets that make room"
        )
        if runner_up is not None:
            other = sum(costs[c.spec.id].est_gpu_s_lost for c in runner_up)
            why += f"; next best: {_join([c.spec.id for c in runner_up])} ({_hours(other)})"
        if refused:
            why += f"; {len(refused)} running {_plural(len(refused), 'job')} protected"
    return PreemptionPlan(head.id, tuple(victims), placement, tuple(weighed), why)


def _where(cap: Capacity, alloc: Allocation) -> str:
    pods = sorted({cap.nodes[n].pod for n in alloc})
    nodes = f"{len(alloc)} {_plural(len(alloc), 'node')}"
    return f"{nodes} in {pods[0]}" if len(pods) == 1 else f"{nodes} across {_join(pods)}"


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


def _join(items: list[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"
