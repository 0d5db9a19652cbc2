"""The what-if's two runs side by side (sim.parallel): the same result documents as one
after the other, progress from both children, a child's failure raised with its run's
number, a refused scenario with its run and the validator's words, and one process where
children are not allowed."""

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
    serial = parallel.run_scenarios(datas, [lambda f: None] * 2, workers=1,
                                    scenarios=scenarios)
    seen: list[list[float]] = [[], []]
    side = parallel.run_scenarios(datas, [seen[0].append, seen[1].append], workers=2)
    assert decisions(side) == decisions(serial)
    # the change mattered: equal documents prove something
    assert serial[0]["jobs"] != serial[1]["jobs"]
    for fractions in seen:  # each child reported its progress, to the end
        assert len(fractions) > 2 and fractions == sorted(fractions) and fractions[-1] == 1.0


def _refused(datas: list[dict[str, Any]], workers: int) -> parallel.InvalidScenario:
    with pytest.raises(parallel.InvalidScenario) as caught:
        parallel.run_scenarios(datas, [lambda f: None] * 2, workers=workers)
    return caught.value


def _broken(data: dict[str, Any]) -> dict[str, Any]:
    broken = copy.deepcopy(data)
    broken["tenants"][0]["guaranteed_gpus"] = -1
    return broken


@pytest.mark.parametrize("workers", (1, 2))
def test_a_refused_scenario_is_raised_with_its_run_and_the_field(workers):
    """Side by side, each child validates its own data: its refusal comes back with the
    validator's words, as one after the other would say it."""
    _scenarios, datas = two_scenarios()
    refused = _refused([datas[0], _broken(datas[1])], workers)
    assert refused.index == 1 and "guaranteed_gpus" in refused.message


@pytest.mark.parametrize("workers", (1, 2))
def test_when_both_are_refused_the_first_runs_refusal_is_raised(workers):
    _scenarios, datas = two_scenarios()
    assert _refused([_broken(datas[0]), _broken(datas[1])], workers).index == 0


def _fails(result: dict[str, Any], scenario: Any) -> Any:
    """The changed run's summary (its first team guarantees nothing) fails."""
    if scenario.tenants[0].guaranteed_gpus == 0:
        raise RuntimeError(f"no summary of {len(result['jobs'])} jobs")
    return None


def test_a_failing_child_is_raised_with_its_run_number():
    _scenarios, datas = two_scenarios()
    with pytest.raises(parallel.RunFailed, match=r"what-if run 2 failed: RuntimeError: no summ"):
        parallel.run_scenarios(datas, [lambda f: None] * 2, workers=2, summarize=_fails)


def _team_names(result: dict[str, Any], scenario: Any) -> Any:
    return [t.name for t in scenario.tenants], len(result["jobs"])


def test_each_child_sends_back_its_summary_alone():
    _scenarios, datas = two_scenarios()
    got = parallel.run_scenarios(datas, [lambda f: None] * 2, workers=2,
                                 summarize=_team_names)
    names = [t["name"] for t in datas[0]["tenants"]]
    assert got == [(names, len(datas[0]["jobs"]))] * 2


def test_a_daemonic_process_runs_both_in_itself(monkeypatch):
    """A Celery prefork worker's processes are daemonic and may not have children."""

    class Daemon:
        daemon = True

    monkeypatch.setattr(parallel.multiprocessing, "current_process", lambda: Daemon())

    def no_children(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a child process was started")

    monkeypatch.setattr(parallel.multiprocessing, "get_context", no_children)
    assert parallel.default_workers() == 1
    _scenarios, datas = two_scenarios()
    results = parallel.run_scenarios(datas, [lambda f: None] * 2, workers=2)
    assert len(results) == 2 and results[0]["jobs"] != results[1]["jobs"]


def test_one_usable_core_means_one_process(monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    assert parallel.default_workers() == 1
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    assert parallel.default_workers() == parallel.MAX_WORKERS == 2
