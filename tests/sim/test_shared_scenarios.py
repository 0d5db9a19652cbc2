"""The three shared scenarios show what their comments require (SCENARIOS.md examples).

Read from ../shared/scenarios when it is there, else from the repo's copies in
scenarios/examples/ (the repo stands alone).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler_app.sim.scenario import load_scenario

from .helpers import EXAMPLE_SCENARIOS, SHARED_SCENARIOS, first_at, run, run_text, scenario_dir

NAMES = ("gang-no-deadlock", "backfill-around-reservation", "reclaim-cheapest-victim")


def result_of(name: str, policy: str = "full") -> dict[str, Any]:
    return run(load_scenario(scenario_dir() / f"{name}.yaml"), policy)


def test_gang_no_deadlock_admits_one_gang_whole_and_the_other_after_it() -> None:
    r = result_of("gang-no-deadlock")
    starts = {j: r["jobs"][j]["first_start_s"] for j in ("gang-a", "gang-b")}
    first, second = sorted(starts, key=lambda j: (starts[j], j))
    assert starts[first] == 0  # whole at the first tick
    assert 600 <= starts[second] <= 605  # when the first completes
    for job_id in ("gang-a", "gang-b"):
        runs = r["jobs"][job_id]["runs"]
        assert len(runs) == 1  # the waiting gang held nothing before it started
        assert sum(runs[0]["alloc"].values()) == 24  # never a partial gang
        assert r["jobs"][job_id]["state"] == "COMPLETED"


def test_backfill_around_reservation_never_delays_the_reserved_head() -> None:
    r = result_of("backfill-around-reservation")
    jobs = r["jobs"]
    assert jobs["short-a"]["first_start_s"] == 20  # backfilled at once
    assert jobs["short-a"]["transitions"][2]["reason"] == "Backfilled"
    head_start = jobs["head-a"]["first_start_s"]
    assert 1000 <= head_start <= 1015
    first_estimate = jobs["head-a"]["start_estimates"][0]
    assert first_estimate["at_s"] == 10  # shown from the moment it is queued
    assert 1000 <= first_estimate["start_s"] <= 1015
    assert jobs["long-a"]["first_start_s"] >= head_start  # never before the head


def test_reclaim_preempts_the_cheapest_victim_with_the_grace_protocol() -> None:
    r = result_of("reclaim-cheapest-victim")
    jobs = r["jobs"]
    victims = {p["victim"] for p in r["preemptions"]}
    assert victims == {"sweep-b"}
    p = r["preemptions"][0]
    assert p["for"] == "eval-a" and p["why"]
    # the researcher reads the victim's own arithmetic, then why its set won
    assert p["why"].startswith("evicted job sweep-b: last checkpoint")
    assert "restart on 8 GPUs" in p["why"] and "next best: train-b" in p["why"]
    assert p["cost_s"] <= 300 + 60 and p["est_gpu_s_lost"] == p["cost_s"] * 8
    asked = first_at(r, "sweep-b", "PREEMPT_REQUESTED")
    assert asked is not None and asked >= 3300
    assert first_at(r, "sweep-b", "CHECKPOINTING") == asked  # it acknowledged at once
    assert first_at(r, "sweep-b", "PREEMPTED") == asked + 40  # checkpointed in its 40 s
    sweep_path = [t["to"] for t in jobs["sweep-b"]["transitions"]]
    i = sweep_path.index("PREEMPT_REQUESTED")
    assert sweep_path[i - 1: i + 4] == [
        "RUNNING", "PREEMPT_REQUESTED", "CHECKPOINTING", "PREEMPTED", "QUEUED"]
    assert jobs["eval-a"]["first_start_s"] <= 3360
    assert jobs["train-b"]["preemptions"] == 0
    assert first_at(r, "train-b", "PREEMPT_REQUESTED") is None
    assert jobs["train-b"]["state"] == "RUNNING"
    # lost for real: the 40 s checkpoint write and the 60 s reload, on 8 GPUs
    assert jobs["sweep-b"]["gpu_s_lost"] == (40 + 60) * 8
    assert r["metrics"]["gpu_hours_lost_to_preemption"] == round(800 / 3600, 6)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("policy", ["full", "fifo", "priority-kill"])
def test_every_policy_obeys_the_contract_rules(name: str, policy: str) -> None:
    run(load_scenario(scenario_dir() / f"{name}.yaml"), policy)  # run() checks invariants


@pytest.mark.parametrize("name", NAMES)
def test_the_same_scenario_gives_byte_identical_results(name: str) -> None:
    sc = load_scenario(scenario_dir() / f"{name}.yaml")
    a, b = run_text(sc), run_text(sc)
    # bytes equal apart from the measured tick timings, which live on the metrics line
    assert [x for x in a.splitlines() if not x.startswith('"metrics"')] == [
        x for x in b.splitlines() if not x.startswith('"metrics"')]
    ma, mb = json.loads(a)["metrics"], json.loads(b)["metrics"]
    for m in (ma, mb):
        for key in ("tick_ms_p50", "tick_ms_p99", "tick_ms_max"):
            m.pop(key)
    assert ma == mb


def test_the_repo_copies_match_the_shared_scenarios() -> None:
    if not SHARED_SCENARIOS.is_dir():
        pytest.skip("no shared folder next to the repo: the copies are the source")
    for name in NAMES:
        shared = (SHARED_SCENARIOS / f"{name}.yaml").read_text()
        assert (EXAMPLE_SCENARIOS / f"{name}.yaml").read_text() == shared, name
