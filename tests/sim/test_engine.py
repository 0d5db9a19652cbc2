"""The memory engine drives the real core: job behaviour, events, ticks, the clock."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.sim.engine import Simulation, simulate
from scheduler_app.sim.result import build_result
from scheduler_app.sim.scenario import validate_scenario

from .helpers import first_at, job, make, run, transitions

RECLAIM_CLUSTER = {"pods": [{"name": "pod-a", "nodes": 2, "gpus_per_node": 8}]}
RECLAIM_TENANTS = [
    {"name": "team-a", "guaranteed_gpus": 16, "borrow_limit_gpus": 0},
    {"name": "team-b", "guaranteed_gpus": 0, "borrow_limit_gpus": 16},
]


def reclaim(victim: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """team-b borrows the whole cluster with ``victim``; team-a comes back at t=1000."""
    return make(until_s=kw.pop("until_s", 3000), cluster=RECLAIM_CLUSTER, tenants=RECLAIM_TENANTS,
                jobs=[victim, job("head", submit_at_s=1000, gpus=16, gpus_per_node=8,
                                  runtime_s=100, max_runtime_s=200)], **kw)


def test_a_job_submitted_at_t_can_start_at_t() -> None:
    r = run(make(jobs=[job("j1", submit_at_s=7)]))
    assert r["jobs"]["j1"]["first_start_s"] == 7
    assert transitions(r, "j1")[:4] == [(7, "SUBMITTED"), (7, "QUEUED"), (7, "PLACING"),
                                        (7, "RUNNING")]
    assert r["jobs"]["j1"]["end_s"] == 107


def test_the_run_ends_when_the_last_job_ends() -> None:
    r = run(make(jobs=[job("j1", runtime_s=100)]))
    assert r["end_s"] == 100
    # the tick at 0 places it, the next confirms the fixed point, the completion at 100
    # ends the run; the quiet periodic ticks in between are skipped
    assert r["metrics"]["ticks"] == 3
    assert r["metrics"]["utilization"] == 0.5  # 8 of 16 GPUs for the whole run
    every = build_result(simulate(validate_scenario(make(jobs=[job("j1", runtime_s=100)])),
                                  skip_quiet=False))
    assert every["metrics"]["ticks"] == 100 // 5 + 1  # periodic ticks 0..100
    assert every["jobs"] == r["jobs"]


def test_jobs_still_running_at_until_stay_running_with_an_open_run() -> None:
    r = run(make(until_s=50, jobs=[job("j1", runtime_s=100)]))
    j = r["jobs"]["j1"]
    assert j["state"] == "RUNNING" and j["end_s"] is None
    assert j["runs"][-1]["end"] == "RUNNING" and j["runs"][-1]["end_s"] is None
    assert r["end_s"] == 50


def test_a_time_limit_fails_the_job_at_its_declared_limit() -> None:
    r = run(make(jobs=[job("j1", runtime_s=500, max_runtime_s=300)]))
    j = r["jobs"]["j1"]
    assert j["state"] == "FAILED" and j["end_s"] == 300
    assert j["transitions"][-1]["reason"] == "TimeLimit"
    assert j["runs"][0]["end"] == "FAILED"


def test_a_node_failure_requeues_a_checkpointable_job_with_its_resume_pointer() -> None:
    r = run(make(
        until_s=3000,
        jobs=[job("j1", runtime_s=1000, checkpointable=True, checkpoint_interval_s=300,
                  restart_s=50)],
        events=[{"at_s": 700, "node_down": "pod-a-000"}],
    ))
    j = r["jobs"]["j1"]
    assert [run_["end"] for run_ in j["runs"]] == ["NODE_FAILED", "COMPLETED"]
    assert j["runs"][0]["end_s"] == 700
    second = j["runs"][1]
    assert "pod-a-000" not in second["alloc"]
    # resumes from the checkpoint at 600: 50 s reload + 400 s of work left
    assert j["end_s"] == second["start_s"] + 50 + 400
    assert j["gpu_s_lost"] == (100 + 50) * 8  # 100 s redone, 50 s reloading


def test_a_plain_job_retries_from_scratch_then_fails_when_its_budget_is_spent() -> None:
    r = run(make(
        settings={"retry_budget": 1},
        cluster={"pods": [{"name": "pod-a", "nodes": 1, "gpus_per_node": 8}]},
        tenants=[{"name": "team-a", "guaranteed_gpus": 8}],
        jobs=[job("j1", runtime_s=1000)],
        events=[{"at_s": 100, "node_down": "pod-a-000"}, {"at_s": 200, "node_up": "pod-a-000"},
                {"at_s": 300, "node_down": "pod-a-000"}],
    ))
    j = r["jobs"]["j1"]
    assert [run_["end"] for run_ in j["runs"]] == ["NODE_FAILED", "FAILED"]
    assert j["runs"][1]["start_s"] == 200  # back when the node is up, not before
    assert j["state"] == "FAILED" and j["transitions"][-1]["reason"] == "RetriesExhausted"
    assert j["gpu_s_lost"] == 100 * 8 + 100 * 8


def test_an_elastic_job_shrinks_onto_its_remaining_nodes() -> None:
    r = run(make(
        jobs=[job("j1", gpus=16, gpus_per_node=8, min_gpus=8, runtime_s=1000)],
        events=[{"at_s": 100, "node_down": "pod-a-001"}],
    ))
    j = r["jobs"]["j1"]
    assert [(x["start_s"], x["end_s"], x["end"], x["alloc"]) for x in j["runs"]] == [
        (0, 100, "NODE_FAILED", {"pod-a-000": 8, "pod-a-001": 8}),
        (100, 1000, "COMPLETED", {"pod-a-000": 8}),
    ]
    assert j["gpu_s_lost"] == 0
    assert "QUEUED" not in [to for _, to in transitions(r, "j1")[2:]]


def test_cancel_events_end_a_running_and_a_waiting_job() -> None:
    r = run(make(
        jobs=[job("run", gpus=16, runtime_s=1000), job("wait", gpus=8)],
        events=[{"at_s": 50, "cancel": "wait"}, {"at_s": 100, "cancel": "run"},
                {"at_s": 200, "cancel": "run"}],  # already final: nothing happens
    ))
    assert r["jobs"]["wait"]["state"] == "CANCELLED" and r["jobs"]["wait"]["runs"] == []
    assert r["jobs"]["wait"]["end_s"] == 50
    assert r["jobs"]["run"]["runs"][0]["end"] == "CANCELLED"
    assert r["jobs"]["run"]["end_s"] == 100


def test_a_quota_change_lets_a_waiting_job_start_at_its_instant() -> None:
    r = run(make(
        tenants=[{"name": "team-a", "guaranteed_gpus": 8, "borrow_limit_gpus": 0}],
        jobs=[job("j1", runtime_s=1000), job("j2")],
        events=[{"at_s": 333, "set_quota": {"tenant": "team-a", "guaranteed_gpus": 16}}],
    ))
    assert r["jobs"]["j2"]["first_start_s"] == 333
    assert r["jobs"]["j2"]["pending_reasons"][0] == {"at_s": 0, "reason": "QuotaLimit"}


def test_a_job_that_ignores_the_request_is_killed_at_grace_expiry() -> None:
    victim = job("v", tenant="team-b", gpus=16, gpus_per_node=8, runtime_s=10**5,
                 checkpointable=True, checkpoint_interval_s=600, checkpoint_time_s=40,
                 restart_s=60, ignores_preempt=True)
    r = run(reclaim(victim))
    asked = first_at(r, "v", "PREEMPT_REQUESTED")
    assert asked == 1000
    assert first_at(r, "v", "CHECKPOINTING") is None  # never acknowledged
    assert r["jobs"]["v"]["transitions"][5]["reason"] == "GraceExpired"
    assert first_at(r, "v", "PREEMPTED") == asked + 40  # killed at expiry, not before
    assert r["jobs"]["head"]["first_start_s"] == asked + 40
    # falls back to its checkpoint at 600: 440 s of work to redo, plus 60 s reloading
    assert r["jobs"]["v"]["gpu_s_lost"] == (1040 - 600 + 60) * 16


def test_a_preemptible_job_that_cannot_checkpoint_exits_at_once() -> None:
    victim = job("v", tenant="team-b", gpus=16, gpus_per_node=8, runtime_s=10**5,
                 preemptible=True)
    r = run(reclaim(victim))
    assert first_at(r, "v", "PREEMPT_REQUESTED") == 1000
    assert first_at(r, "v", "PREEMPTED") == 1000
    assert r["jobs"]["v"]["transitions"][5]["reason"] == "NoCheckpoint"
    # its exit asks for a tick, which runs at the next second
    assert r["jobs"]["head"]["first_start_s"] == 1001
    assert r["jobs"]["v"]["gpu_s_lost"] == 1000 * 16  # everything, restarted from zero


def test_a_job_entitled_when_submitted_counts_in_the_entitled_wait() -> None:
    sim = Simulation(validate_scenario(make(
        tenants=[{"name": "team-a", "guaranteed_gpus": 8, "borrow_limit_gpus": 8}],
        jobs=[job("first"), job("second"), job("high", submit_at_s=10, priority=5)],
    )))
    sim.run()
    entitled = {j: sim.records[j].entitled for j in ("first", "second", "high")}
    # first: 0 + 8 <= 8. second: 8 queued ahead + 8 > 8. high (t=10): 16 running + 8 > 8.
    assert entitled == {"first": True, "second": False, "high": False}


def test_periodic_ticks_run_every_interval_unless_nothing_can_change() -> None:
    data = make(until_s=100, settings={"tick_interval_s": 10},
                tenants=[{"name": "team-a", "guaranteed_gpus": 4, "borrow_limit_gpus": 4}],
                # j1 borrows 4: preemptible pricing lets a job without a limit borrow
                jobs=[job("j1", gpus=8, submit_at_s=3, preemptible=True), job("big", gpus=16)])
    every = build_result(simulate(validate_scenario(data), skip_quiet=False))
    # 0, 3 (submit), 10, 20, ..., 100 (j1 ends at 103, after until_s)
    assert every["metrics"]["ticks"] == 1 + 1 + 10
    assert every["jobs"]["big"]["state"] == "FAILED"  # never fits the team's limit
    # the tick at 3 places j1 and the one at 10 finds nothing left to change: the ticks at
    # 20 .. 100 are skipped, and the run is the same
    r = run(data)
    assert r["metrics"]["ticks"] == 1 + 1 + 1
    assert r["jobs"] == every["jobs"] and r["preemptions"] == every["preemptions"]


def test_a_job_submitted_after_until_is_never_seen() -> None:
    r = run(make(until_s=100, jobs=[job("j1", runtime_s=50), job("late", submit_at_s=500)]))
    late = r["jobs"]["late"]
    assert late["state"] is None and late["transitions"] == [] and late["runs"] == []
    assert r["end_s"] == 100  # not every job ended: the run lasts until until_s
    assert r["metrics"]["mean_wait_s"] == 0.0  # the late job does not count


def test_nothing_starts_on_a_draining_node_until_it_is_undrained() -> None:
    r = run(make(
        cluster={"pods": [{"name": "pod-a", "nodes": 1, "gpus_per_node": 8}]},
        tenants=[{"name": "team-a", "guaranteed_gpus": 8}],
        jobs=[job("j1", submit_at_s=10)],
        events=[{"at_s": 0, "node_drain": "pod-a-000"}, {"at_s": 42, "node_undrain": "pod-a-000"}],
    ))
    assert r["jobs"]["j1"]["first_start_s"] == 42


def test_a_tick_that_places_thousands_of_jobs_does_not_recurse() -> None:
    # Each placement's agent reaction (confirm the start) used to run one call deeper
    # than the last; 1,500 placements in one tick went past Python's recursion limit.
    import sys

    jobs = [job(f"j{i:04d}", gpus=1, runtime_s=50) for i in range(1500)]
    scenario = make(
        until_s=100,
        # every one of them examined (and placed) in the first tick
        settings={"tick_work_budget": 2000},
        cluster={"pods": [{"name": "pod-a", "nodes": 200, "gpus_per_node": 8}]},
        tenants=[{"name": "team-a", "guaranteed_gpus": 1600, "borrow_limit_gpus": 0}],
        jobs=jobs,
    )
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)  # well below what the old recursion needed
    try:
        result = run(scenario)
    finally:
        sys.setrecursionlimit(limit)
    assert all(result["jobs"][j["id"]]["first_start_s"] == 0 for j in jobs)


def test_the_memory_engine_pauses_the_cyclic_collector_for_its_run_only() -> None:
    """Its runs make no reference cycle (tests/sim/test_compiled_core.py checks both
    cores), so the collector is paused while it runs, and restored after, also after an
    error; a run on another scheduler (the db engine's) leaves it alone."""
    import gc

    from scheduler_app.core.scheduler import Scheduler

    scenario = validate_scenario(make(jobs=[job("j1", submit_at_s=7), job("j2", submit_at_s=9)]))
    seen: list[bool] = []
    assert gc.isenabled()
    Simulation(scenario, progress=lambda now: seen.append(gc.isenabled())).run()
    assert seen and not any(seen)
    assert gc.isenabled()

    seen.clear()
    Simulation(scenario, scheduler_factory=Scheduler,
               progress=lambda now: seen.append(gc.isenabled())).run()
    assert seen and all(seen)

    def fail(now: int) -> None:
        raise RuntimeError("a progress callback that fails")

    with pytest.raises(RuntimeError, match="fails"):
        Simulation(scenario, progress=fail).run()
    assert gc.isenabled()

    gc.disable()  # a caller that paused it already keeps it paused
    try:
        Simulation(scenario).run()
        assert not gc.isenabled()
    finally:
        gc.enable()
