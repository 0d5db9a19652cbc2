"""The simulator skips the periodic ticks in which nothing can change (a fixed point of
the core: Scheduler.quiet_until). Its decisions are those of a run that ticks every
interval: compared here on the shared scenarios, the worked examples and a loaded window
of the Helios trace, under every policy."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.core.types import SchedulerConfig
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import build_result
from scheduler_app.sim.scenario import Scenario, load_scenario, validate_scenario
from scheduler_app.workloads.synthetic import ADVERSARIAL, generate
from tests.core.builders import nodes, tenant
from tests.core.test_scheduler import Sim, work

from .helpers import EXAMPLE_SCENARIOS, loaded_helios_day, needs_helios_trace, scenario_dir

POLICIES = ("full", "fifo", "priority-kill")


def both(scenario: Scenario, policy: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    out = []
    skipped = 0
    for skip in (True, False):
        sim = Simulation(scenario, policy=policy, skip_quiet=skip)
        result = build_result(sim.run())
        skipped = max(skipped, sim.skipped_ticks)
        for key in ("ticks", "tick_ms_p50", "tick_ms_p99", "tick_ms_max"):
            result["metrics"].pop(key)
        out.append(result)
    return out[0], out[1], skipped


def assert_same(skipping: dict[str, Any], every: dict[str, Any]) -> None:
    """Every transition, run, preemption and metric; start estimates too."""
    assert skipping["preemptions"] == every["preemptions"]
    for job_id, job in every["jobs"].items():
        assert skipping["jobs"][job_id] == job, job_id
    assert skipping == every


SCENARIOS = sorted({*scenario_dir().glob("*.yaml"), *EXAMPLE_SCENARIOS.glob("*.yaml")},
                   key=lambda p: p.name)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_skipping_quiet_ticks_changes_no_decision(path, policy) -> None:
    skipping, every, _skipped = both(load_scenario(path), policy)
    assert_same(skipping, every)


@pytest.mark.slow
@needs_helios_trace
@pytest.mark.parametrize("policy", POLICIES)
def test_skipping_quiet_ticks_changes_no_decision_on_a_loaded_helios_day(policy) -> None:
    """Venus day 102 at 0.3 of its capacity with arrivals compressed 2.2x (609 jobs, an
    offered load near 3): preemptions, reservations, quota waits and fair-share reorders
    at every step."""
    scenario = loaded_helios_day()
    skipping, every, skipped = both(scenario, policy)
    assert skipped > 1000  # it did skip (the comparison is not vacuous)
    assert_same(skipping, every)


class _NeverQuiet(Scheduler):
    """The core without its fixed points: every tick runs in full."""

    def quiet_until(self, now: int, upto: int) -> int | None:
        return None

    def looks_alone_due(self, now: int) -> bool:
        return False


def _shortcuts_and_whole_ticks(scenario: Scenario, policy: str, *,
                               views: bool) -> list[dict[str, Any]]:
    """The results of the core with its fixed points (skipped by the engine, or returning
    at once) and of a core that runs every tick in full, without the tick timings."""
    runs = []
    for factory, skip in ((None, True), (_NeverQuiet, False)):
        sim = Simulation(scenario, policy=policy, views=views, skip_quiet=skip,
                         scheduler_factory=factory)
        result = build_result(sim.run())
        for key in ("ticks", "tick_ms_p50", "tick_ms_p99", "tick_ms_max"):
            result["metrics"].pop(key)
        runs.append(result)
    return runs


#: a busy half hour: 5,000 jobs of 1 to 2,048 GPUs arriving on 2,048 GPUs, teams over their
#: guarantees from the start, so that heads wait for their turn at the preemption search
_BUSY = dataclasses.replace(ADVERSARIAL, jobs=5000, nodes=256, nodes_per_pod=64)


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_the_cores_fixed_points_change_no_decision_on_a_busy_half_hour(policy) -> None:
    """Skipped ticks (the engine's) and ticks that return at once (the core's own) must be
    ticks that would decide nothing. A tick whose one preemption search went to a head
    that found nothing left the next head without one: it was taken for a fixed point,
    and that head's preemption waited for the next change of state. Without the look-ahead
    (views off) nothing else keeps such ticks busy, which is how this was found."""
    scenario = dataclasses.replace(validate_scenario(generate(_BUSY)), until_s=1800)
    runs = _shortcuts_and_whole_ticks(scenario, policy, views=False)
    assert runs[0]["metrics"]["preemptions"] > 0
    assert_same(*runs)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_the_cores_fixed_points_change_no_estimate(path) -> None:
    """With the look-ahead on (views), the core's own fixed points against a core that
    runs every tick in full: the same decisions, estimates and reasons."""
    scenario = load_scenario(path)
    assert_same(*_shortcuts_and_whole_ticks(scenario, "full", views=True))


def test_a_fixed_point_holds_only_until_a_round_of_estimates_would_start() -> None:
    # A round of estimates plans two jobs a tick: q2..q4 (q1 holds the one reservation)
    # take the ticks at t=1 and t=6. q5 arrives at t=6, while that round is on, so it is
    # not in it. A tick that runs in full at t=10 starts a round for the newcomer; the
    # fixed point found at t=6 holds only until then, and a quiet t=10 would leave q5
    # without an estimate until the next change of state or of the fair-share order.
    config = dataclasses.replace(SchedulerConfig(), reservation_depth=1,
                                 estimate_plans_per_tick=2)
    sim = Sim(nodes({"pod-a": 1}), [tenant("team-a", 8)],
              [work("r", 8, 1000, max_runtime_s=1000),
               *(work(f"q{i}", 8, 100, at=1, max_runtime_s=100) for i in range(1, 5)),
               work("q5", 8, 100, at=6, max_runtime_s=100)], config=config)
    sim.run(6)
    assert "q5" not in sim.estimates  # the round at t=6 was planned before it arrived
    assert sim.sched.quiet_until(10, 10) is None
    ticks = [sim.sched.tick(t) for t in (10, 15, 20)]
    assert not any(r.stats.get("quiet") for r in ticks)
    assert ticks[2].start_estimates["q5"].start_s == 1400
    # planned on the state as it is: the next tick is a fixed point again
    assert sim.sched.quiet_until(25, 25) == 25


@pytest.mark.slow
@needs_helios_trace
def test_the_cores_fixed_points_change_no_estimate_on_a_loaded_helios_day() -> None:
    """The same day with the look-ahead on: a round of estimates finished on an older
    state (jobs arrived during it) left the newcomers unplanned through the quiet ticks
    that followed, until the fair-share order moved (found by this test)."""
    scenario = loaded_helios_day()
    assert_same(*_shortcuts_and_whole_ticks(scenario, "full", views=True))


@pytest.mark.slow
@needs_helios_trace
@pytest.mark.parametrize("settings", (
    {"reservation_plans_per_tick": 0},  # no look is ever taken: stale plans stay due
    {"estimate_lookahead": 0},  # rounds of estimates with nothing in them
    {"estimate_plans_per_tick": 1, "estimate_lookahead": 50},  # rounds over many ticks
    {"reservation_plans_per_tick": 1, "reservation_depth": 1},
), ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_the_cores_shortcuts_hold_at_the_edges_of_the_settings(settings) -> None:
    """An operator's extreme values for the settings the fixed points and the looks
    alone read: the same decisions, estimates and reasons as a core that runs every tick
    in full, on the loaded Helios day with the look-ahead on."""
    scenario = loaded_helios_day()
    scenario = dataclasses.replace(
        scenario, settings=tuple(sorted({**dict(scenario.settings), **settings}.items())))
    assert_same(*_shortcuts_and_whole_ticks(scenario, "full", views=True))
