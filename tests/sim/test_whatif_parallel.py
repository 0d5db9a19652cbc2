"""The what-if's two runs side by side (sim.parallel): the same result documents as one
after the other, progress from both children, a child's failure raised with its run's
number, and one process where children are not allowed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler_app.sim import parallel
from scheduler_app.sim.scenario import validate_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"


def two_scenarios() -> tuple[list[Any], list[dict[str, Any]]]:
    """A worked example and the same with its first team's guarantee cut: two runs that
    differ."""
    base = yaml.safe_load((EXAMPLES / "victims-furthest-over.yaml").read_text())
    changed = copy.deepcopy(base)
    changed["tenants"][0]["guaranteed_gpus"] = 0
    datas = [base, changed]
    return [validate_scenario(d) for d in datas], datas


def decisions(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents without the ticks' wall times (``metrics.tick_ms_*``)."""
    out = copy.deepcopy(results)
    for doc in out:
        for key in [k for k in doc["metrics"] if k.startswith("tick_ms")]:
            del doc["metrics"][key]
    return out


def test_side_by_side_gives_the_same_results_as_one_after_the_other():
    scenarios, datas = two_scenarios()
    serial = parallel.run_scenarios(scenarios, datas, [lambda f: None] * 2, workers=1)
    seen: list[list[float]] = [[], []]
    side = parallel.run_scenarios(scenarios, datas,
                                  [seen[0].append, seen[1].append], workers=2)
    assert decisions(side) == decisions(serial)
    # the change mattered: equal documents prove something
    assert serial[0]["jobs"] != serial[1]["jobs"]
    for fractions in seen:  # each child reported its progress, to the end
        assert len(fractions) > 2 and fractions == sorted(fractions) and fractions[-1] == 1.0


def test_a_failing_child_is_raised_with_its_run_number():
    scenarios, datas = two_scenarios()
    broken = copy.deepcopy(datas[1])
    broken["tenants"][0]["guaranteed_gpus"] = -1  # the child validates its data again
    with pytest.raises(parallel.RunFailed, match=r"what-if run 2 failed: ScenarioError"):
        parallel.run_scenarios(scenarios, [datas[0], broken], [lambda f: None] * 2,
                               workers=2)


def test_a_daemonic_process_runs_both_in_itself(monkeypatch):
    """A Celery prefork worker's processes are daemonic and may not have children."""

    class Daemon:
        daemon = True

    monkeypatch.setattr(parallel.multiprocessing, "current_process", lambda: Daemon())

    def no_children(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a child process was started")

    monkeypatch.setattr(parallel.multiprocessing, "get_context", no_children)
    assert parallel.default_workers() == 1
    scenarios, datas = two_scenarios()
    results = parallel.run_scenarios(scenarios, datas, [lambda f: None] * 2, workers=2)
    assert len(results) == 2 and results[0]["jobs"] != results[1]["jobs"]


def test_one_usable_core_means_one_process(monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    assert parallel.default_workers() == 1
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    assert parallel.default_workers() == parallel.MAX_WORKERS == 2
