"""A seeded synthetic workload with the seed's mix: the "busy day" of a 16,384-GPU cluster.

Pure Python (no Django): bench scripts and the ``make_workload`` command both call
:func:`generate`. Everything random comes from one ``random.Random(seed)``, drawn in a fixed
order, so the same parameters and seed give the same scenario, byte for byte.

The mix (fractions of the job count; docs/workloads.md explains the choices):

| kind    | share | GPUs             | shape        | checkpoints                         |
| ------- | ----- | ---------------- | ------------ | ----------------------------------- |
| eval    | 55 %  | 1                | -            | none (20 % opt into preemptible)    |
| dev     | 7 %   | 2 or 4           | -            | none (20 % opt into preemptible)    |
| sweep   | 30 %  | 8, elastic to 2/4| -            | every 5 min, 20-40 s, restart 1 min |
| train   | 8 %   | 64 .. 2,048      | 8 per node   | every 5-30 min, 30-120 s, restart 1-10 min |

Every job declares a max runtime (its true runtime times 1.1-2.0, plus its restart time,
rounded up to 5 minutes) so backfill has limits to plan with and no job hits TimeLimit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: (kind, share of jobs). Order matters: it is the order of the cumulative draw.
JOB_MIX: tuple[tuple[str, float], ...] = (
    ("eval", 0.55),
    ("dev", 0.07),
    ("sweep", 0.30),
    ("train", 0.08),
)

#: Training sizes (GPUs) and their weights: most runs are the smaller ones.
TRAIN_SIZES: tuple[tuple[int, float], ...] = (
    (64, 0.40),
    (128, 0.25),
    (256, 0.17),
    (512, 0.10),
    (1024, 0.05),
    (2048, 0.03),
)

#: (priority, share of jobs): higher runs first within a tenant.
PRIORITY_MIX: tuple[tuple[int, float], ...] = ((0, 0.85), (1, 0.12), (2, 0.03))

CHECKPOINT_INTERVALS_S: tuple[int, ...] = (300, 600, 900, 1200, 1800)
LIMIT_ROUND_S = 300  # declared limits are round numbers, as users write them


@dataclass(frozen=True, slots=True)
class SyntheticParams:
    """What ``manage.py make_workload`` exposes. Defaults are the seed's busy day."""

    jobs: int = 100_000
    nodes: int = 2048
    gpus_per_node: int = 8
    nodes_per_pod: int = 128
    teams: int = 30
    seed: int = 0
    hours: float = 2.0  # the simulated window (until_s) and the span of the late arrivals
    #: Share of the jobs already in the system when the window opens (submitted in its
    #: first ``backlog_span_s``, by default all at t=0): the seed's "100,000 jobs in the
    #: system on a busy day", so the tick faces the full queue from the first instant.
    backlog_fraction: float = 0.8
    backlog_span_s: int = 1
    #: Each tenant may borrow up to this share of the cluster above its guarantee.
    borrow_fraction: float = 0.5
    #: The teams' guarantees add up to this share of the cluster (in whole nodes).
    guarantee_fraction: float = 1.0
    #: The late arrivals (those not in the backlog) come within this many seconds of the
    #: window's start; None: spread over the whole window.
    arrival_span_s: int | None = None

    def __post_init__(self) -> None:
        for name in ("jobs", "nodes", "gpus_per_node", "nodes_per_pod", "teams"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be a positive integer")
        if self.hours <= 0:
            raise ValueError("hours: must be positive")
        if not 0.0 <= self.backlog_fraction <= 1.0:
            raise ValueError("backlog_fraction: must be between 0 and 1")
        if self.backlog_span_s < 1:
            raise ValueError("backlog_span_s: must be a positive integer")
        if not 0.0 <= self.borrow_fraction <= 1.0:
            raise ValueError("borrow_fraction: must be between 0 and 1")
        if not 0.0 <= self.guarantee_fraction <= 1.0:
            raise ValueError("guarantee_fraction: must be between 0 and 1")
        if self.arrival_span_s is not None and self.arrival_span_s < 1:
            raise ValueError("arrival_span_s: must be a positive integer")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def window_s(self) -> int:
        return max(1, int(round(self.hours * 3600)))


#: A workload unlike the busy day's, for the tick's bound: no backlog, every arrival in
#: the first hour of two, 2,048 nodes in 8 pods of 256 (the placement search's pods are
#: twice as wide), 30 teams whose guarantees add up to 94 % of the cluster (so some GPUs
#: are nobody's and teams borrow from the start), sizes 1 to 2,048 GPUs.
ADVERSARIAL = SyntheticParams(jobs=100_000, nodes=2048, nodes_per_pod=256, teams=30,
                              hours=2.0, backlog_fraction=0.0, arrival_span_s=3600,
                              guarantee_fraction=0.94)


def generate(params: SyntheticParams | None = None) -> dict[str, Any]:
    """The scenario (a dict in the SCENARIOS.md format) for ``params``."""
    p = params or SyntheticParams()
    rng = random.Random(p.seed)
    pods = _pods(p)
    tenants = _tenants(p, rng)
    demand = _demand_weights(tenants, rng)
    raw = [_job(p, rng, tenants, demand) for _ in range(p.jobs)]
    # File order is submit order (ties keep draw order): the scenario's seq tie-break then
    # matches age, which is what a reader of the file expects.
    raw.sort(key=lambda j: j["submit_at_s"])
    width = max(6, len(str(p.jobs)))
    for i, job in enumerate(raw):
        job["id"] = f"{job.pop('_kind')}-{i:0{width}d}"
    jobs = [{"id": j.pop("id"), **j} for j in raw]  # id first, for readable files
    return {
        "name": f"synthetic-{p.jobs}j-{p.nodes}n-{p.teams}t-s{p.seed}",
        "until_s": p.window_s,
        "settings": {},
        "cluster": {"pods": pods},
        "tenants": tenants,
        "jobs": jobs,
        "events": [],
    }


# ---------------------------------------------------------------------------------------
# Cluster and tenants


def _pods(p: SyntheticParams) -> list[dict[str, Any]]:
    count = math.ceil(p.nodes / p.nodes_per_pod)
    pods = []
    for i in range(count):
        nodes = min(p.nodes_per_pod, p.nodes - i * p.nodes_per_pod)
        pods.append({"name": f"pod-{i:02d}", "nodes": nodes, "gpus_per_node": p.gpus_per_node})
    return pods


def _tenants(p: SyntheticParams, rng: random.Random) -> list[dict[str, Any]]:
    """Guarantees in whole nodes, Zipf-like (a few big teams, a long tail), summing to
    ``guarantee_fraction`` of the cluster (all of it by default) when it has at least one
    node per team."""
    total = p.total_gpus
    unit = p.gpus_per_node
    weights = [1.0 / (i + 1) ** 0.8 for i in range(p.teams)]
    rng.shuffle(weights)  # which team is big depends on the seed, not on its name
    wsum = sum(weights)
    units_total = int(total * p.guarantee_fraction) // unit
    units = [int(units_total * w / wsum) for w in weights]
    # Hand the rounding remainder to the largest teams, one node each, in a fixed order.
    by_size = sorted(range(p.teams), key=lambda i: (-weights[i], i))
    for k in range(units_total - sum(units)):
        units[by_size[k % p.teams]] += 1
    borrow_cap = int(total * p.borrow_fraction)
    out = []
    for i in range(p.teams):
        guaranteed = units[i] * unit
        out.append({
            "name": f"team-{i + 1:02d}",
            "guaranteed_gpus": guaranteed,
            "borrow_limit_gpus": max(0, min(borrow_cap, total - guaranteed)),
        })
    return out


def _demand_weights(tenants: list[dict[str, Any]], rng: random.Random) -> list[float]:
    """How many jobs each team submits: its guarantee (plus one node, so a tiny team still
    submits) times log-normal noise, so some teams ask for more than they own and borrow."""
    return [(t["guaranteed_gpus"] + 8) * rng.lognormvariate(0.0, 0.5) for t in tenants]


# ---------------------------------------------------------------------------------------
# Jobs


def _pick(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    u = rng.random() * sum(w for _, w in table)
    for value, weight in table:
        u -= weight
        if u < 0:
            return value
    return table[-1][0]


def _lognormal_s(rng: random.Random, median_s: float, sigma: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(rng.lognormvariate(math.log(median_s), sigma)))))


def _limit(rng: random.Random, runtime_s: int, restart_s: int) -> int:
    """Declared max runtime: the truth times 1.1-2.0 (users pad their estimates), plus the
    restart time so a resumed run still fits, rounded up to 5 minutes."""
    padded = runtime_s * rng.uniform(1.1, 2.0) + restart_s
    return int(math.ceil(padded / LIMIT_ROUND_S) * LIMIT_ROUND_S)


def _job(p: SyntheticParams, rng: random.Random, tenants: list[dict[str, Any]],
         demand: list[float]) -> dict[str, Any]:
    kind = _pick(rng, JOB_MIX)
    team = rng.choices(tenants, weights=demand)[0]
    # The largest job a team may ever run: a bigger one would fail NeverFits at submit.
    fits = min(p.total_gpus, team["guaranteed_gpus"] + team["borrow_limit_gpus"])
    if rng.random() < p.backlog_fraction:
        submit = rng.randrange(min(p.backlog_span_s, p.window_s))
    else:
        submit = rng.randrange(min(p.arrival_span_s or p.window_s, p.window_s))
    job: dict[str, Any] = {
        "_kind": kind,
        "tenant": team["name"],
        "submit_at_s": submit,
        "priority": _pick(rng, PRIORITY_MIX),
    }
    job.update(_BUILDERS[kind](p, rng, fits))
    return job


def _eval(p: SyntheticParams, rng: random.Random, fits: int) -> dict[str, Any]:
    runtime = _lognormal_s(rng, 900, 0.8, 60, 4 * 3600)
    return {
        "gpus": 1,
        "runtime_s": runtime,
        "max_runtime_s": _limit(rng, runtime, 0),
    } | _preemptible(rng)


def _dev(p: SyntheticParams, rng: random.Random, fits: int) -> dict[str, Any]:
    runtime = _lognormal_s(rng, 2700, 0.8, 300, 8 * 3600)
    return {
        "gpus": min(fits, rng.choice((2, 4))),
        "runtime_s": runtime,
        "max_runtime_s": _limit(rng, runtime, 0),
    } | _preemptible(rng)


def _preemptible(rng: random.Random) -> dict[str, Any]:
    """A fifth of the jobs that cannot checkpoint opt into preemptible pricing (cheaper GPUs,
    may be stopped); only set when true, to keep 100,000-job files short."""
    return {"preemptible": True} if rng.random() < 0.2 else {}


def _sweep(p: SyntheticParams, rng: random.Random, fits: int) -> dict[str, Any]:
    runtime = _lognormal_s(rng, 5400, 0.7, 600, 12 * 3600)
    gpus = min(8, fits)
    restart = 60
    return {
        "gpus": gpus,
        "min_gpus": min(gpus, rng.choice((2, 4))),
        "runtime_s": runtime,
        "max_runtime_s": _limit(rng, runtime, restart),
        "checkpointable": True,
        "checkpoint_interval_s": 300,
        "checkpoint_time_s": rng.randrange(20, 41),
        "restart_s": restart,
    }


def _train(p: SyntheticParams, rng: random.Random, fits: int) -> dict[str, Any]:
    size = _pick(rng, TRAIN_SIZES)
    # On a small (test) cluster, shrink to what fits, in whole nodes.
    unit = p.gpus_per_node
    gpus = max(unit, min(size, fits // unit * unit)) if fits >= unit else fits
    runtime = _lognormal_s(rng, 8 * 3600, 0.8, 3600, 48 * 3600)
    restart = rng.randrange(60, 601, 30)
    job: dict[str, Any] = {
        "gpus": gpus,
        "runtime_s": runtime,
        "max_runtime_s": _limit(rng, runtime, restart),
        "checkpointable": True,
        "checkpoint_interval_s": rng.choice(CHECKPOINT_INTERVALS_S),
        "checkpoint_time_s": rng.randrange(30, 121),
        "restart_s": restart,
    }
    if gpus % unit == 0:
        job["gpus_per_node"] = unit
    return job


_BUILDERS: dict[str, Callable[[SyntheticParams, random.Random, int], dict[str, Any]]] = {
    "eval": _eval,
    "dev": _dev,
    "sweep": _sweep,
    "train": _train,
}


def job_kind(job_id: str) -> str:
    """The kind a generated job id names (``sweep-000042`` -> ``sweep``)."""
    return job_id.rsplit("-", 1)[0]
