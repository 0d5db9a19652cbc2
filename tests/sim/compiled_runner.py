"""Runs the comparison workloads of tests/sim/test_compiled_core.py in this process's core
(``SCHED_CORE`` picks it) and writes their results, without tick timings, as JSON,
with the reference cycles each run left for the cyclic collector (by type, the project's
types only; the simulator pauses the collector on the promise that there are none):

    SCHED_CORE=compiled python -m tests.sim.compiled_runner OUT.json
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import scheduler_app.core as core
from scheduler_app.core import tick
from scheduler_app.sim.scenario import Scenario, load_scenario, validate_scenario
from scheduler_app.workloads.synthetic import ADVERSARIAL, SyntheticParams, generate

from .helpers import ALL_SCENARIOS, loaded_helios_day, needs_helios_trace, run_untimed


def _busy_half_hour() -> Scenario:
    """Arrivals on most heaps at most ticks, passes cut by the work budget (as in
    tests/sim/test_walk_skips.py)."""
    arriving = dataclasses.replace(ADVERSARIAL, jobs=5000, nodes=256, nodes_per_pod=64,
                                   arrival_span_s=1200)
    scenario = validate_scenario(generate(arriving))
    settings = {**dict(scenario.settings), "tick_work_budget": 200}
    return dataclasses.replace(scenario, until_s=1800, settings=tuple(sorted(settings.items())))


def workloads() -> Iterator[tuple[str, Callable[[], Scenario], tuple[str, ...]]]:
    both = ("full", "priority-kill")
    for path in ALL_SCENARIOS:
        yield path.stem, (lambda p=path: load_scenario(p)), both
    yield "busy-half-hour", _busy_half_hour, both
    for seed in (1, 2):  # make_workload's mix, small: every kind of job and team
        yield (f"synthetic-s{seed}",
               lambda seed=seed: validate_scenario(generate(SyntheticParams(
                   jobs=3000, nodes=128, teams=8, hours=0.5, seed=seed))), both)
    if not needs_helios_trace.args[0]:
        yield "helios-day-102", loaded_helios_day, ("full",)


def main(out: str) -> None:
    results: dict[str, Any] = {
        "compiled": core.COMPILED, "tick_module": tick.__file__, "runs": {}, "cycles": {}}
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage
    for name, make, policies in workloads():
        scenario = make()
        for policy in policies:
            run = f"{name}/{policy}"
            gc.garbage.clear()
            results["runs"][run] = run_untimed(scenario, policy, None)
            gc.collect()
            found = collections.Counter(
                f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
                if type(o).__module__.startswith("scheduler_app"))
            results["cycles"][run] = dict(found)
    gc.set_debug(0)
    with open(out, "w") as f:
        json.dump(results, f, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
