"""A small slice of the synthetic busy day (gangs, elastic sweeps, checkpointing training
runs, preemptible evals, 4 teams) runs through every policy and obeys the contract."""

from __future__ import annotations

import pytest

from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads.synthetic import SyntheticParams, generate

from .helpers import run


@pytest.mark.parametrize("policy", ["full", "fifo", "priority-kill"])
def test_a_small_synthetic_mix_obeys_the_contract(policy: str) -> None:
    data = generate(SyntheticParams(jobs=200, nodes=8, nodes_per_pod=8, teams=4, seed=0))
    data["until_s"] = 1200
    data["events"] = [{"at_s": 600, "node_down": "pod-00-003"},
                      {"at_s": 900, "node_up": "pod-00-003"}]
    r = run(validate_scenario(data), policy)
    started = [j for j in r["jobs"].values() if j["first_start_s"] is not None]
    assert started  # the cluster did some work
    assert r["metrics"]["utilization"] > 0
