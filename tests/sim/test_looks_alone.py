"""A tick at a fixed point but for kept reservations due for their fresh look ends after
the looks when no fresh plan moves a reservation (``Tick(looks_alone=True)``): the walk
would find the last tick's answers. Every decision, estimate and recorded reason must be
those of a core that runs the whole tick: compared here on the shared scenarios, the
worked examples and a loaded Helios day, with a count that proves such
ticks happened (the comparison is not vacuous)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.scenario import Scenario, load_scenario

from .helpers import ALL_SCENARIOS, assert_same_counting, loaded_helios_day, needs_helios_trace


class _WholeTicks(Scheduler):
    """The reference: every tick that is not quiet runs whole."""

    def looks_alone_due(self, now: int) -> bool:
        return False


def _compare(scenario: Scenario, policy: str, *, views: bool = True) -> int:
    """Asserts the same result both ways; returns the ticks that ended after the looks."""
    return assert_same_counting(scenario, policy, _WholeTicks, "looks_alone",
                                views=views)["looks_alone"]


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_a_tick_of_looks_alone_changes_no_decision(path: Any, policy: str) -> None:
    _compare(load_scenario(path), policy)


def test_the_scenarios_do_end_ticks_after_the_looks() -> None:
    """Over all the scenarios, some ticks ended after the looks (the parametrized
    comparison above is not vacuous on them as a whole). (A busy half hour of arrivals
    has none: a job arrives at every tick, so no tick is due for looks alone.)"""
    assert sum(_compare(load_scenario(p), "full") for p in ALL_SCENARIOS) > 0


@pytest.mark.slow
@needs_helios_trace
@pytest.mark.parametrize("views", (True, False))
def test_a_tick_of_looks_alone_changes_no_decision_on_a_loaded_helios_day(views: bool) -> None:
    """Venus day 102 at 0.3 of its capacity with arrivals compressed 2.2x: reservations
    kept over many quiet stretches, their plans gone stale as jobs end before their
    limits."""
    scenario = loaded_helios_day()
    assert _compare(scenario, "full", views=views) > 100
