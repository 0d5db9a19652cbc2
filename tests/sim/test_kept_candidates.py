"""The preemption candidates are kept from one tick to the next while nothing they are
made of changes (Tick.candidates, ``Scheduler.candidates_memo``). Every decision must be
that of a core that builds them afresh at every tick: compared here on the shared
scenarios, the worked examples and a busy half hour of preemptions, with a count that
proves the list was kept (the comparison is not vacuous). When the list is built again,
each team's slice of it is kept while none of that team's jobs changed
(``Scheduler.candidate_slices``): compared the same way with a core that builds every
team's again. tests/core/test_candidates_memo.py changes each thing a candidate reads
with the cluster otherwise the same."""

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

#: the core that keeps no candidates between ticks
_Afresh = core_keeping_no("candidates_memo")


def _compare(scenario: Scenario, policy: str) -> int:
    """Asserts the same result both ways; returns the ticks that kept the list."""
    return assert_same_counting(scenario, policy, _Afresh, "candidates_kept")["candidates_kept"]


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_kept_candidates_change_no_decision(path, policy) -> None:
    _compare(load_scenario(path), policy)


#: a busy half hour: 5,000 jobs of 1 to 2,048 GPUs on 2,048 GPUs, teams over their
#: guarantees from the start (preemption searches at most ticks)
_BUSY = dataclasses.replace(ADVERSARIAL, jobs=5000, nodes=256, nodes_per_pod=64)


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_kept_candidates_change_no_decision_on_a_busy_half_hour(policy) -> None:
    scenario = dataclasses.replace(validate_scenario(generate(_BUSY)), until_s=1800)
    assert _compare(scenario, policy) > 100


#: the core that builds every team's slice of the list again at each build
_AllTeams = core_keeping_no("candidate_slices")


def _compare_slices(scenario: Scenario, policy: str) -> int:
    """The same result as a core keeping no team's slice; returns the slices kept."""
    return assert_same_counting(scenario, policy, _AllTeams,
                                "candidate_slices_kept")["candidate_slices_kept"]


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_kept_team_slices_change_no_decision(path, policy) -> None:
    _compare_slices(load_scenario(path), policy)


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_kept_team_slices_change_no_decision_on_a_busy_half_hour(policy) -> None:
    scenario = dataclasses.replace(validate_scenario(generate(_BUSY)), until_s=1800)
    assert _compare_slices(scenario, policy) > 100


@needs_helios_trace
def test_kept_team_slices_change_no_decision_on_a_loaded_helios_day() -> None:
    """25 teams, checkpoints reported throughout: slices kept across the checkpoints
    reported between two builds (Tick._kept_current)."""
    assert _compare_slices(loaded_helios_day(), "full") > 100
