"""One simulator run of a Helios window under a wall-time budget (shared by sim_speed and
policies)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench._common import log
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import compute_metrics
from scheduler_app.sim.scenario import Scenario, validate_scenario
from scheduler_app.workloads import HeliosParams, import_helios


class _OutOfTime(Exception):
    pass


@dataclass(slots=True)
class RunReport:
    policy: str
    complete: bool
    error: str | None
    simulated_s: int  # the last instant reached
    wall_s: float
    metrics: dict[str, Any] | None  # the result file's metrics (complete runs only)

    @property
    def sim_s_per_wall_s(self) -> float | None:
        return None if self.wall_s <= 0 else round(self.simulated_s / self.wall_s, 1)

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "complete": self.complete, "error": self.error,
                "simulated_s": self.simulated_s, "wall_s": round(self.wall_s, 1),
                "sim_s_per_wall_s": self.sim_s_per_wall_s, "metrics": self.metrics}


def helios_scenario(from_day: int, days: int, *, trace: str | None = None,
                    quota: str | None = None, scale: float = 1.0, compress: float = 1.0,
                    cluster_nodes: int | None = None, pod_nodes: int | None = None,
                    max_job_gpus: int | None = None,
                    one_team: bool = False) -> tuple[Scenario, dict[str, Any]]:
    """The window as a scenario, and what describes it. ``one_team``: every job in one team
    guaranteed the whole cluster, no quota changes (a diagnostic, not a workload: what the
    order, placement and backfill do where no guarantee binds, as the Helios artifact's
    one pool without quotas)."""
    params = HeliosParams(from_day=from_day, days=days, capacity_scale=scale,
                          arrival_compression=compress, cluster_nodes=cluster_nodes,
                          max_job_gpus=max_job_gpus,
                          **({"nodes_per_pod": pod_nodes} if pod_nodes else {}))
    raw = import_helios(params, trace=trace, quota=quota)
    gpus = sum(p["nodes"] * p["gpus_per_node"] for p in raw["cluster"]["pods"])
    if one_team:
        raw["tenants"] = [{"name": "all", "guaranteed_gpus": gpus, "borrow_limit_gpus": 0}]
        raw["events"] = []
        for job in raw["jobs"]:
            job["tenant"] = "all"
    submits = [j["submit_at_s"] for j in raw["jobs"]]
    span = max(submits) - min(submits) if submits else 0
    work = sum(j["gpus"] * j["runtime_s"] for j in raw["jobs"])
    info = {"from_day": from_day, "days": days, "capacity_scale": scale,
            "jobs": len(raw["jobs"]), "gpus": gpus,
            "teams": len(raw["tenants"]), "until_s": raw["until_s"],
            "quota_events": len(raw["events"])}
    if compress != 1.0:
        info["compress"] = compress
        info["offered_load"] = round(work / span / gpus, 3) if span else None
    for key, value in (("cluster_nodes", cluster_nodes), ("pod_nodes", pod_nodes),
                       ("max_job_gpus", max_job_gpus)):
        if value is not None:
            info[key] = value
    if one_team:
        info["one_team"] = True
    return validate_scenario(raw), info


def run_policy(scenario: Scenario, policy: str, *, max_wall_s: float | None,
               views: bool = True) -> RunReport:
    """Run to the end (or the wall budget). ``views`` as ``manage.py simulate`` runs it."""
    started = time.monotonic()
    deadline = None if max_wall_s is None else started + max_wall_s
    reached = [0]
    shown = [started]

    def progress(now: int) -> None:
        reached[0] = now
        t = time.monotonic()
        if t - shown[0] > 30:
            shown[0] = t
            log(f"  {policy}: t={now / 86400:.1f} d after {t - started:.0f} s")
        if deadline is not None and t > deadline:
            raise _OutOfTime

    sim = Simulation(scenario, policy=policy, progress=progress, views=views)
    try:
        outcome = sim.run()
    except _OutOfTime:
        return RunReport(policy, False, f"stopped by the wall budget ({max_wall_s:.0f} s)",
                         reached[0], time.monotonic() - started, None)
    except Exception as exc:  # noqa: BLE001 - a core bug must not lose the other policies
        return RunReport(policy, False, f"{type(exc).__name__}: {exc}", reached[0],
                         time.monotonic() - started, None)
    wall = time.monotonic() - started
    return RunReport(policy, True, None, outcome.end_s, wall, compute_metrics(outcome))
