"""A run without views (``Simulation(views=False)``: the benchmarks, the what-if) skips the
work whose only output is what users see: the look-ahead's start estimates and the
reasons of the jobs behind where the walk left a heap (``Scheduler.look_ahead``). Its
decisions must be those of a run with views: every transition, run and preemption,
compared here on the shared scenarios, the worked examples and a loaded Helios day."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import build_result
from scheduler_app.sim.scenario import Scenario, load_scenario

from .helpers import ALL_SCENARIOS, loaded_helios_day, needs_helios_trace

#: what a run without views does not record (its metrics count ticks and their timings)
_VIEWS = ("start_estimates", "pending_reasons")


def _decisions(scenario: Scenario, policy: str, views: bool) -> dict[str, Any]:
    result = build_result(Simulation(scenario, policy=policy, views=views).run())
    jobs = {job_id: {k: v for k, v in job.items() if k not in _VIEWS}
            for job_id, job in result["jobs"].items()}
    return {"jobs": jobs, "preemptions": result["preemptions"]}


def _assert_same(scenario: Scenario, policy: str) -> None:
    off, on = _decisions(scenario, policy, False), _decisions(scenario, policy, True)
    assert off["preemptions"] == on["preemptions"]
    for job_id, job in on["jobs"].items():
        assert off["jobs"][job_id] == job, job_id


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_a_run_without_views_decides_as_one_with_them(path: Any, policy: str) -> None:
    _assert_same(load_scenario(path), policy)


@pytest.mark.slow
@needs_helios_trace
def test_a_run_without_views_decides_as_one_with_them_on_a_loaded_helios_day() -> None:
    scenario = loaded_helios_day()
    _assert_same(scenario, "full")
