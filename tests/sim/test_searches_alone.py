"""A tick whose preemption-search budget left heads without a search is no fixed point:
the next tick searches for the next of them. When nothing else changed, that tick makes
those searches without the walk (``Tick._searches_alone``, on a fresh pass's list of the
heads it denied), and walks only if one finds victims. Every decision, estimate and
recorded reason must be those of a core that walks at every such tick: compared on the
shared scenarios, a busy half hour (heads queue for the search at almost every tick) and
a loaded Helios day, with a count that proves such ticks happened."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.scenario import load_scenario, validate_scenario
from scheduler_app.workloads.synthetic import ADVERSARIAL, generate

from .helpers import ALL_SCENARIOS, assert_same_counting, loaded_helios_day, needs_helios_trace


class _WalkForEverySearch(Scheduler):
    """The reference: a tick after one that denied a search walks the queues."""

    def _note_quiet(self, result: Any, now: int) -> None:
        self.denied_searches = []  # (what a walk that planned a reservation leaves)
        super()._note_quiet(result, now)


#: 5,000 jobs of 1 to 2,048 GPUs on 2,048 GPUs, teams over their guarantees from the start
_BUSY = dataclasses.replace(ADVERSARIAL, jobs=5000, nodes=256, nodes_per_pod=64)


@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_searches_without_the_walk_change_no_decision(path: Any) -> None:
    assert_same_counting(load_scenario(path), "full", _WalkForEverySearch, "searches_alone")


def test_a_search_budget_of_zero_denies_every_search_with_or_without_the_walk() -> None:
    """An operator's ``max_preemption_searches_per_tick: 0`` (allowed: preemption off by
    budget): every head that may preempt is denied at every tick, so every such tick
    after the first is one of these, and none may search."""
    total = 0
    for path in ALL_SCENARIOS:
        scenario = load_scenario(path)
        settings = {**dict(scenario.settings), "max_preemption_searches_per_tick": 0}
        scenario = dataclasses.replace(scenario, settings=tuple(sorted(settings.items())))
        counted = assert_same_counting(scenario, "full", _WalkForEverySearch,
                                       "searches_alone", "preemption_searches")
        assert counted["preemption_searches"] == 0
        total += counted["searches_alone"]
    assert total > 0


@pytest.mark.parametrize("views", (True, False))
@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_searches_without_the_walk_change_no_decision_on_a_busy_half_hour(
        policy: str, views: bool) -> None:
    scenario = dataclasses.replace(validate_scenario(generate(_BUSY)), until_s=1800)
    counted = assert_same_counting(scenario, policy, _WalkForEverySearch, "searches_alone",
                                   views=views)
    # (under full, a head that GPUs already leaving make room for searches no more, since
    # 2026-12-08: 14 such ticks in the half hour where there had been more than 50)
    assert counted["searches_alone"] > (10 if policy == "full" else 50)


@pytest.mark.slow
@needs_helios_trace
def test_searches_without_the_walk_change_no_decision_on_a_loaded_helios_day() -> None:
    counted = assert_same_counting(loaded_helios_day(), "full", _WalkForEverySearch,
                                   "searches_alone", views=False)
    assert counted["searches_alone"] > 0
