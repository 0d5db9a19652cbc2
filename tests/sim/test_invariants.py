"""The result checker catches each broken rule (so a clean run means something)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler_app.sim.invariants import check_result
from scheduler_app.sim.scenario import validate_scenario

from .helpers import job, make, run

SCENARIO = make(
    until_s=2000,
    jobs=[job("a", gpus=8, runtime_s=100), job("b", gpus=8, runtime_s=100)],
    events=[{"at_s": 500, "node_down": "pod-a-000"}, {"at_s": 600, "node_up": "pod-a-000"}],
)


@pytest.fixture(scope="module")
def clean() -> dict[str, Any]:
    return run(SCENARIO)


def broken(result: dict[str, Any], edit: Any) -> list[str]:
    doc = copy.deepcopy(result)
    edit(doc)
    return check_result(doc, validate_scenario(SCENARIO))


def _set(path: list[Any], value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


CASES = [
    ("illegal path", _set(["jobs", "a", "transitions", 2, "to"], "COMPLETED"),
     "a: illegal transition QUEUED -> COMPLETED"),
    ("partial gang", _set(["jobs", "a", "runs", 0, "alloc"], {"pod-a-000": 4}),
     "a: runs[0]: alloc holds 4 GPUs, the job needs 8"),
    ("unknown run end", _set(["jobs", "a", "runs", 0, "end"], "DONE"),
     "a: runs[0]: end DONE is not one of"),
    ("open run with an end", _set(["jobs", "a", "runs", 0, "end_s"], None),
     "a: runs[0]: end_s None with end COMPLETED"),
    ("over-committed node", _set(["jobs", "b", "runs", 0, "alloc"], {"pod-a-000": 8}),
     "pod-a-000: holds 16 GPUs at 0 (has 8)"),
    ("run on a down node", _set(["jobs", "a", "runs", 0, "end_s"], 550),
     "a: runs on pod-a-000 from 0 to 550 while it is down (500..600)"),
    ("first start disagrees", _set(["jobs", "a", "first_start_s"], 3),
     "a: first_start_s 3 but first run at 0"),
    ("preemption without a request",
     _set(["preemptions"], [{"at_s": 5, "victim": "a", "for": "b", "cost_s": 1,
                             "est_gpu_s_lost": 8, "why": ""}]),
     "preemptions[0]: a was not asked to stop at 5"),
]


def test_a_clean_run_has_no_violations(clean: dict[str, Any]) -> None:
    assert check_result(clean, validate_scenario(SCENARIO)) == []
    assert clean["jobs"]["a"]["runs"][0]["alloc"] == {"pod-a-000": 8}


@pytest.mark.parametrize(("case", "edit", "want"), CASES, ids=[c[0] for c in CASES])
def test_the_checker_reports_each_broken_rule(clean: dict[str, Any], case: str, edit: Any,
                                              want: str) -> None:
    problems = broken(clean, edit)
    assert any(p.startswith(want) for p in problems), problems
