"""The result file and its metrics, on hand-built run records."""

from __future__ import annotations

import json

import pytest

from scheduler_app.sim.result import (
    JobRecord,
    PreemptionRecord,
    RunRecord,
    SimOutcome,
    build_result,
    compute_metrics,
    dump_result,
    job_wait_s,
    percentile,
)


def rec(job_id: str, submit: int, gpus: int, runtime: int, runs: list[RunRecord],
        state: str, end_s: int | None = None, **kw: object) -> JobRecord:
    r = JobRecord(job_id=job_id, tenant="t", submit_s=submit, gpus=gpus, runtime_s=runtime,
                  state=state, runs=runs, end_s=end_s)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def outcome(jobs: list[JobRecord], end_s: int = 1000, capacity: int = 16,
            ticks: list[float] | None = None) -> SimOutcome:
    return SimOutcome(scenario="s", policy="full", seed=0, until_s=1000, end_s=end_s,
                      capacity_gpus=capacity, jobs=jobs, preemptions=[],
                      tick_ms=ticks if ticks is not None else [1.0, 2.0, 3.0])


@pytest.mark.parametrize(("values", "pct", "want"), [
    ([], 95, None),
    ([7], 95, 7),
    ([1, 2, 3, 4], 50, 2),
    (list(range(1, 101)), 95, 95),
    (list(range(1, 101)), 99, 99),
    ([5, 1, 4, 2, 3], 100, 5),
    ([10, 20], 95, 20),
])
def test_percentiles_use_the_nearest_rank(values: list[int], pct: float, want: int | None) -> None:
    assert percentile(values, pct) == want


def test_waits_count_jobs_that_never_started_until_the_end_of_the_run() -> None:
    started = rec("a", 10, 8, 100, [RunRecord(40, {"n": 8}, 140, "COMPLETED")], "COMPLETED", 140)
    waiting = rec("b", 100, 8, 100, [], "QUEUED")
    cancelled = rec("c", 100, 8, 100, [], "CANCELLED", end_s=300)
    never_fits = rec("d", 0, 99, 100, [], "FAILED", end_s=0)
    not_submitted = rec("e", 2000, 8, 100, [], None)
    assert job_wait_s(started, 1000) == 30
    assert job_wait_s(waiting, 1000) == 900
    assert job_wait_s(cancelled, 1000) == 200
    assert job_wait_s(never_fits, 1000) is None
    assert job_wait_s(not_submitted, 1000) is None


def test_metrics_follow_the_contract_definitions() -> None:
    a = rec("a", 0, 8, 100, [RunRecord(0, {"n1": 8}, 100, "COMPLETED")], "COMPLETED", 100,
            entitled=True)
    b = rec("b", 0, 8, 5, [RunRecord(50, {"n2": 8}, 55, "COMPLETED")], "COMPLETED", 55)
    c = rec("c", 0, 16, 500, [RunRecord(100, {"n1": 8, "n2": 8}, 300, "PREEMPTED"),
                             RunRecord(300, {"n1": 8, "n2": 8}, None, "RUNNING")],
            "RUNNING", None, preemptions=1, lost_to_preemption_gpu_s=7200, entitled=True)
    m = compute_metrics(outcome([a, b, c], end_s=400))
    # held: a 800 + b 40 + c 16*200 + 16*100 = 5640 over 16 GPUs x 400 s
    assert m["utilization"] == round(5640 / 6400, 6)
    assert m["mean_wait_s"] == 50.0  # waits 0, 50, 100
    assert m["p95_wait_s"] == 100
    assert m["entitled_wait_p95_s"] == 100  # a (0) and c (100)
    assert m["mean_jct_s"] == 77.5  # (100 + 55) / 2
    assert m["mean_bounded_slowdown"] == round((100 / 100 + 55 / 10) / 2, 6)
    assert m["gpu_hours_lost_to_preemption"] == 2.0
    assert m["preemptions"] == 1
    assert (m["ticks"], m["tick_ms_p50"], m["tick_ms_max"]) == (3, 2.0, 3.0)


def test_a_run_carried_in_from_before_t0_counts_its_gpu_seconds_from_t0() -> None:
    """A what-if's running job started before t=0: counted from its start, an exported
    what-if simulated gave a utilization of 1.02 (2026-12-07); the capacity counts from 0."""
    carried = rec("a", -5000, 16, 6000, [RunRecord(-5000, {"n1": 8, "n2": 8}, 1000,
                                                   "COMPLETED")], "COMPLETED", 1000)
    m = compute_metrics(outcome([carried], end_s=1000))
    assert m["utilization"] == 1.0  # 16 GPUs x 1000 s of 16 x 1000


def test_metrics_without_samples_are_null_not_zero() -> None:
    m = compute_metrics(outcome([rec("a", 0, 8, 100, [], "QUEUED")], end_s=0, ticks=[]))
    assert m["utilization"] is None and m["mean_jct_s"] is None
    assert m["mean_bounded_slowdown"] is None and m["tick_ms_p99"] is None
    assert m["entitled_wait_p95_s"] is None
    assert m["mean_wait_s"] == 0.0


def test_the_result_has_the_contract_shape_and_serialises_deterministically() -> None:
    a = rec("b-job", 0, 8, 100, [RunRecord(5, {"pod-a-001": 4, "pod-a-000": 4}, None)],
            "RUNNING", transitions=[(0, "SUBMITTED", "Submitted"), (0, "QUEUED", "Admitted"),
                                    (5, "PLACING", "Placed"), (5, "RUNNING", "Started")],
            start_estimates=[(0, 5)], pending_reasons=[(0, "Resources")])
    z = rec("a-job", 0, 8, 100, [], "QUEUED")
    out = outcome([a, z])
    out.preemptions.append(PreemptionRecord(3, "b-job", "a-job", 360, 2880, "cheapest"))
    text = dump_result(build_result(out))
    assert text == dump_result(build_result(out))
    doc = json.loads(text)
    assert list(doc["jobs"]) == ["a-job", "b-job"]
    job = doc["jobs"]["b-job"]
    assert job["runs"] == [{"start_s": 5, "end_s": None, "end": "RUNNING",
                            "alloc": {"pod-a-000": 4, "pod-a-001": 4}}]
    assert job["transitions"][2] == {"at_s": 5, "to": "PLACING", "reason": "Placed"}
    assert job["start_estimates"] == [{"at_s": 0, "start_s": 5}]
    assert job["pending_reasons"] == [{"at_s": 0, "reason": "Resources"}]
    assert (job["first_start_s"], job["end_s"], job["preemptions"], job["gpu_s_lost"]) == (
        5, None, 0, 0)
    assert doc["preemptions"] == [{"at_s": 3, "victim": "b-job", "for": "a-job", "cost_s": 360,
                                   "est_gpu_s_lost": 2880, "why": "cheapest"}]
    assert set(doc["metrics"]) == {
        "utilization", "mean_wait_s", "p95_wait_s", "gpu_hours_lost_to_preemption",
        "preemptions", "entitled_wait_p95_s", "mean_jct_s", "mean_bounded_slowdown", "ticks",
        "tick_ms_p50", "tick_ms_p99", "tick_ms_max"}


def test_change_lists_keep_only_changes() -> None:
    r = rec("a", 0, 8, 100, [], "QUEUED")
    for at, reason in [(0, "Resources"), (5, "Resources"), (10, "Reservation"), (15, "Resources")]:
        r.note_reason(at, reason)
    for at, est in [(0, None), (5, 900), (10, 900)]:
        r.note_estimate(at, est)
    assert r.pending_reasons == [(0, "Resources"), (10, "Reservation"), (15, "Resources")]
    assert r.start_estimates == [(0, None), (5, 900)]
