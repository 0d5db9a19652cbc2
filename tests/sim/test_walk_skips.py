"""Two walks of a heap are skipped when they could change nothing, and pushes onto a heap
(jobs arriving) no longer undo that unless they land where the walk looks:

- a pass that resumes walks on from where it stopped in a heap (the cursor) when nothing
  was pushed ahead of that point since (before: when nothing was pushed at all), instead
  of stepping again over every job the pass examined;
- when the walk leaves a heap, the jobs just behind where it stopped are told they wait
  behind higher-ranked jobs (Priority) unless they have a reason already (Tick._behind):
  only the jobs pushed and not yet found with a reason are read there
  (``JobQueues.unsettled_behind``), not the whole stretch.

Both rest on what the queues know of pushes. These tests compare every decision and every
recorded pending reason and estimate with a core whose queues never say what was pushed
(so it walks every heap from its head and every stretch at every tick), on the shared
scenarios, the worked examples and a busy half hour whose arrivals push onto most heaps
at most ticks, and count the walks skipped despite pushes: the comparison is not vacuous.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.scenario import Scenario, load_scenario, validate_scenario
from scheduler_app.workloads.synthetic import ADVERSARIAL, generate

from .helpers import ALL_SCENARIOS, assert_same_counting

_STATS = ("resumed_past_pushes", "stretches_read_unsettled")


class _Unaware(Scheduler):
    """Queues that never say what was pushed since: every walk starts from a heap's head
    and every stretch behind a job the walk left is walked again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queues.pushed_since = lambda key, version: None  # type: ignore[method-assign]
        self.queues.unsettled_behind = (  # type: ignore[method-assign]
            lambda job_id, n, settled: None)


def _compare(scenario: Scenario, policy: str) -> dict[str, int]:
    """Asserts the same result both ways; returns the walks skipped despite pushes."""
    return assert_same_counting(scenario, policy, _Unaware, *_STATS)  # reasons, estimates too


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_skipped_walks_change_no_decision_nor_reason(path, policy) -> None:
    _compare(load_scenario(path), policy)


#: a busy half hour of arrivals: 5,000 jobs of 1 to 2,048 GPUs on 2,048 GPUs, every
#: arrival in the first 20 minutes, so that most heaps are pushed onto at most ticks, and
#: a work budget that cuts the walk's passes (they resume at the next tick)
_ARRIVING = dataclasses.replace(ADVERSARIAL, jobs=5000, nodes=256, nodes_per_pod=64,
                                arrival_span_s=1200)


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_skipped_walks_change_no_decision_on_a_busy_half_hour(policy) -> None:
    scenario = validate_scenario(generate(_ARRIVING))
    # (200 cut too few passes under priority-kill once the reclaim search killed for heads
    # its three conditions had left waiting: 10 resumed past pushes)
    settings = {**dict(scenario.settings), "tick_work_budget": 100}
    scenario = dataclasses.replace(scenario, until_s=1800,
                                   settings=tuple(sorted(settings.items())))
    counts = _compare(scenario, policy)
    assert counts["resumed_past_pushes"] > 100
    assert counts["stretches_read_unsettled"] > 100
