"""Property tests: random small clusters and workloads, with preemption and node failures.

Whatever the policy, every result obeys the contract's rules (checked by the invariants
checker), the same input gives the same result, and a finite workload without failures
eventually runs every job.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.sim.scenario import validate_scenario

from .helpers import run, run_text

NODES = 3
TENANTS = ("team-a", "team-b")


@st.composite
def scenarios(draw: st.DrawFn, *, failures: bool = True) -> dict[str, Any]:
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.sampled_from([1, 2, 4, 8, 16]))
        checkpointable = draw(st.booleans())
        j: dict[str, Any] = {
            "id": f"j{i}", "tenant": draw(st.sampled_from(TENANTS)),
            "submit_at_s": draw(st.integers(0, 300)), "gpus": gpus,
            "runtime_s": draw(st.integers(1, 600)),
            "priority": draw(st.integers(0, 2)),
            "checkpointable": checkpointable,
            "preemptible": draw(st.booleans()),
        }
        if gpus >= 8 and draw(st.booleans()):
            j["gpus_per_node"] = 8
        if draw(st.booleans()):
            j["max_runtime_s"] = j["runtime_s"] + draw(st.integers(0, 300))
        if checkpointable:
            j["checkpoint_interval_s"] = draw(st.integers(10, 200))
            j["checkpoint_time_s"] = draw(st.integers(0, 60))
            j["restart_s"] = draw(st.integers(0, 60))
            j["ignores_preempt"] = draw(st.booleans())
        if gpus > 1 and "gpus_per_node" not in j and draw(st.booleans()):
            j["min_gpus"] = gpus // 2
        jobs.append(j)
    events: list[dict[str, Any]] = []
    if failures:
        for _ in range(draw(st.integers(0, 3))):
            node = f"pod-a-00{draw(st.integers(0, NODES - 1))}"
            at = draw(st.integers(0, 900))
            events.append({"at_s": at, "node_down": node})
            events.append({"at_s": at + draw(st.integers(1, 300)), "node_up": node})
    return {
        "name": "prop",
        "until_s": 4000,
        "settings": {"grace_period_s": draw(st.integers(5, 120))},
        "cluster": {"pods": [{"name": "pod-a", "nodes": NODES, "gpus_per_node": 8}]},
        "tenants": [
            {"name": "team-a", "guaranteed_gpus": (a := draw(st.sampled_from([0, 8, 16]))),
             "borrow_limit_gpus": draw(st.sampled_from([0, 8, 24]))},
            # the guarantees add up to at most the cluster
            {"name": "team-b",
             "guaranteed_gpus": draw(st.sampled_from([g for g in (0, 8, 16)
                                                      if a + g <= NODES * 8])),
             "borrow_limit_gpus": draw(st.sampled_from([8, 24]))},
        ],
        "jobs": jobs,
        "events": events,
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=scenarios(), policy=st.sampled_from(["full", "fifo", "priority-kill"]))
def test_every_run_obeys_the_contract_rules_and_is_deterministic(
    data: dict[str, Any], policy: str
) -> None:
    run(data, policy)  # asserts the invariants
    sc = validate_scenario(data)
    a, b = run_text(sc, policy), run_text(sc, policy)
    strip = [line for line in a.splitlines() if not line.startswith('"metrics"')]
    assert strip == [line for line in b.splitlines() if not line.startswith('"metrics"')]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=scenarios(failures=False))
def test_a_finite_workload_without_failures_runs_every_job_that_fits(
    data: dict[str, Any]
) -> None:
    data["until_s"] = 200_000
    r = run(data)
    for job_id, j in r["jobs"].items():
        never_fits = j["transitions"][-1]["reason"] == "NeverFits"
        assert never_fits or j["first_start_s"] is not None, (job_id, j)
        assert j["state"] in ("COMPLETED", "FAILED"), (job_id, j["state"])
