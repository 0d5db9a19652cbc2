"""A tick hands its picture (the cluster with its reservations booked) to the next tick
(tick.KeptLine): the next tick takes it over instead of booking the same reservations
into a fresh copy, when nothing changed in between or only what the picture can follow
(the tick's own starts, jobs letting their GPUs go: ``Tick._followed``). Its decisions
must be those of a core that books them afresh at every tick: compared here on the shared
scenarios, the worked examples, a busy half hour and a loaded Helios day, with counts that
prove the picture was taken over, and followed across changes (the comparison is not
vacuous)."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler_app.sim.scenario import Scenario, load_scenario, validate_scenario
from scheduler_app.workloads.synthetic import ADVERSARIAL, generate

from .helpers import (
    ALL_SCENARIOS,
    assert_same_counting,
    core_keeping_no,
    loaded_helios_day,
    needs_helios_trace,
)

#: the core that never hands a picture on: every tick books its reservations afresh
_FreshPicture = core_keeping_no("kept_line")


def _counts(scenario: Scenario, policy: str, *, views: bool = True) -> dict[str, int]:
    """Asserts the same result both ways; returns the ticks that took a picture over and
    those that followed one across changes."""
    return assert_same_counting(scenario, policy, _FreshPicture, "picture_taken_over",
                                "picture_followed", views=views)


def _compare(scenario: Scenario, policy: str, *, views: bool = True) -> int:
    return _counts(scenario, policy, views=views)["picture_taken_over"]


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_a_kept_picture_changes_no_decision(path, policy) -> None:
    _compare(load_scenario(path), policy)


def test_the_scenarios_do_take_a_picture_over() -> None:
    """Over all the scenarios, some ticks took the picture over (the parametrized
    comparison above is not vacuous on them as a whole)."""
    assert sum(_compare(load_scenario(p), "full") for p in ALL_SCENARIOS) > 0


#: a busy half hour: 5,000 jobs of 1 to 2,048 GPUs on 2,048 GPUs, teams over their
#: guarantees from the start (reservations, quota holds, claims and preemptions)
_BUSY = dataclasses.replace(ADVERSARIAL, jobs=5000, nodes=256, nodes_per_pod=64)


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_a_kept_picture_changes_no_decision_on_a_busy_half_hour(policy) -> None:
    scenario = dataclasses.replace(validate_scenario(generate(_BUSY)), until_s=1800)
    counts = _counts(scenario, policy, views=False)
    assert counts["picture_taken_over"] > 20
    # jobs end and start at most ticks of a busy half hour: most pictures taken over
    # were followed across those changes
    assert counts["picture_followed"] > 20


@pytest.mark.slow
@needs_helios_trace
def test_a_kept_picture_changes_no_decision_on_a_loaded_helios_day() -> None:
    """Venus day 102 at 0.3 of its capacity with arrivals compressed 2.2x: reservations
    kept over many quiet stretches, refreshed, replaced and started."""
    scenario = loaded_helios_day()
    assert _compare(scenario, "full") > 100
