"""The preemption candidates kept from the last search are brought up to date with the
checkpoints reported since (``Tick._checkpointed_since``) instead of being built again.
Every decision, estimate and recorded reason must be those of a core that builds them
all again after any checkpoint: compared on the shared scenarios, the worked examples and
a loaded Helios day, with a count that proves such updates happened."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.scenario import Scenario, load_scenario

from .helpers import ALL_SCENARIOS, assert_same_counting, loaded_helios_day, needs_helios_trace


class _RebuiltAfterCheckpoints(Scheduler):
    """The reference: it remembers no checkpoint, so any checkpoint since the last search
    has the tick build every candidate again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checkpointed = deque(maxlen=0)


def _compare(scenario: Scenario, policy: str) -> int:
    """Asserts the same result both ways; returns the ticks whose candidates were updated."""
    return assert_same_counting(scenario, policy, _RebuiltAfterCheckpoints,
                                "candidates_checkpointed")["candidates_checkpointed"]


@pytest.mark.parametrize("policy", ("full", "priority-kill"))
@pytest.mark.parametrize("path", ALL_SCENARIOS, ids=lambda p: p.stem)
def test_candidates_updated_for_checkpoints_change_no_decision(path: Any, policy: str) -> None:
    _compare(load_scenario(path), policy)


@pytest.mark.slow
@needs_helios_trace
@pytest.mark.parametrize("policy", ("full", "priority-kill"))
def test_candidates_updated_for_checkpoints_on_a_loaded_helios_day(policy: str) -> None:
    """Venus day 102 at 0.3 of its capacity with arrivals compressed 2.2x: teams borrow
    and are reclaimed from while their jobs checkpoint."""
    scenario = loaded_helios_day()
    assert _compare(scenario, policy) > 0
