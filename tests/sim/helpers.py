"""Builders for simulator tests: small scenarios as dicts, run through the real core."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.engine import Simulation, simulate
from scheduler_app.sim.invariants import check_result
from scheduler_app.sim.result import build_result, dump_result
from scheduler_app.sim.scenario import Scenario, validate_scenario
from scheduler_app.workloads import HeliosParams, import_helios
from scheduler_app.workloads.helios import TRACE_FILE, default_trace_dir, shared_dir

REPO = Path(__file__).resolve().parents[2]
SHARED_SCENARIOS = shared_dir() / "scenarios"
EXAMPLE_SCENARIOS = REPO / "scenarios" / "examples"


#: a test that reads the Helios trace (skipped where it is not present)
needs_helios_trace = pytest.mark.skipif(not (default_trace_dir() / TRACE_FILE).exists(),
                                        reason="Helios trace not present")


def loaded_helios_day() -> Scenario:
    """Venus day 102 at 0.3 of its capacity with arrivals compressed 2.2x: the loaded day
    the tests comparing two cores run (teams borrow and are reclaimed from, reservations
    are kept over quiet stretches, refreshed, replaced and started)."""
    return validate_scenario(import_helios(HeliosParams(
        from_day=102, days=1, arrival_compression=2.2, capacity_scale=0.3, drain_s=3600)))


def scenario_dir() -> Path:
    """The shared folder when it is there (the source of truth), else the repo's copies."""
    return SHARED_SCENARIOS if SHARED_SCENARIOS.is_dir() else EXAMPLE_SCENARIOS


#: the shared scenarios and the worked examples: what the tests comparing two cores run
ALL_SCENARIOS = sorted({*scenario_dir().glob("*.yaml"), *EXAMPLE_SCENARIOS.glob("*.yaml")},
                       key=lambda p: p.name)


def run_untimed(scenario: Scenario, policy: str, factory: Any, *,
                views: bool = True) -> dict[str, Any]:
    """The result document of a run with ``factory``'s core, without the tick timings
    (which differ between any two runs)."""
    sim = Simulation(scenario, policy=policy, views=views, scheduler_factory=factory)
    result = build_result(sim.run())
    for key in ("ticks", "tick_ms_p50", "tick_ms_p99", "tick_ms_max"):
        result["metrics"].pop(key)
    return result


def counting_core(*stats: str) -> Any:
    """The core as it is, summing the tick stats ``stats`` over a run into the class's
    ``totals`` (a fresh class, so fresh totals, at each call): how an equivalence test
    proves that what it compares did happen."""
    class Counting(Scheduler):
        totals: dict[str, int] = dict.fromkeys(stats, 0)

        def tick(self, now: int, clock: Any = None) -> Any:
            result = super().tick(now, clock)
            for stat in stats:
                self.totals[stat] += int(result.stats.get(stat) or 0)
            return result

    return Counting


def core_keeping_no(attr: str) -> Any:
    """The core with the memo ``attr`` never kept (always read as None): the reference
    an equivalence test compares the memo's decisions with."""
    return type(f"No_{attr}", (Scheduler,), {
        attr: property(lambda self: None, lambda self, value: None)})


def assert_same_runs(scenario: Scenario, policy: str, core: Any, reference: Any, *,
                     views: bool = True) -> None:
    """Every decision, estimate and recorded reason of ``core`` is ``reference``'s."""
    got = run_untimed(scenario, policy, core, views=views)
    want = run_untimed(scenario, policy, reference, views=views)
    assert got["preemptions"] == want["preemptions"]
    for job_id, job in want["jobs"].items():
        assert got["jobs"][job_id] == job, job_id
    assert got == want


def assert_same_counting(scenario: Scenario, policy: str, reference: Any, *stats: str,
                         views: bool = True) -> dict[str, int]:
    """``assert_same_runs`` of the core as it is against ``reference``; returns the tick
    stats ``stats`` summed over the core's run (the proof that what the reference lacks
    did happen, so the comparison is not vacuous)."""
    counting = counting_core(*stats)
    assert_same_runs(scenario, policy, counting, reference, views=views)
    return counting.totals


BASE: dict[str, Any] = {
    "name": "t",
    "until_s": 1000,
    "cluster": {"pods": [{"name": "pod-a", "nodes": 2, "gpus_per_node": 8}]},
    "tenants": [{"name": "team-a", "guaranteed_gpus": 16, "borrow_limit_gpus": 0}],
    "jobs": [{"id": "j1", "tenant": "team-a", "submit_at_s": 0, "gpus": 8, "runtime_s": 100}],
}


def make(**changes: Any) -> dict[str, Any]:
    """BASE with top-level keys replaced."""
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(changes))
    return data


def job(job_id: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": job_id, "tenant": "team-a", "submit_at_s": 0, "gpus": 8,
                           "runtime_s": 100}
    out.update(fields)
    return out


def run(scenario: Scenario | dict[str, Any], policy: str = "full") -> dict[str, Any]:
    """Simulate, check every invariant of the contract, return the result document."""
    sc = scenario if isinstance(scenario, Scenario) else validate_scenario(scenario)
    result = build_result(simulate(sc, policy=policy))
    problems = check_result(result, sc)
    assert problems == [], problems
    return result


def run_text(scenario: Scenario, policy: str = "full") -> str:
    return dump_result(build_result(simulate(scenario, policy=policy)))


def transitions(result: dict[str, Any], job_id: str) -> list[tuple[int, str]]:
    return [(t["at_s"], t["to"]) for t in result["jobs"][job_id]["transitions"]]


def first_at(result: dict[str, Any], job_id: str, state: str) -> int | None:
    for at, to in transitions(result, job_id):
        if to == state:
            return at
    return None
