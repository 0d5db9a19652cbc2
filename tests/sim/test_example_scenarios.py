"""The worked examples in scenarios/examples/ do what their comments say a correct
scheduler must do (the three shared ones: test_shared_scenarios.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.sim.scenario import load_scenario
from tests.sim.helpers import EXAMPLE_SCENARIOS, run


def result(name: str, **settings: Any) -> dict[str, Any]:
    sc = load_scenario(EXAMPLE_SCENARIOS / f"{name}.yaml")
    if settings:
        import dataclasses

        sc = dataclasses.replace(sc, settings=tuple(sorted({**dict(sc.settings),
                                                             **settings}.items())))
    return run(sc)


def moves(r: dict[str, Any], job: str) -> list[tuple[int, str, str]]:
    return [(t["at_s"], t["to"], t.get("reason", "")) for t in r["jobs"][job]["transitions"]]


def test_grace_capped() -> None:
    r = result("grace-capped")
    stop = [m for m in moves(r, "hog-b") if m[1] in ("PREEMPT_REQUESTED", "PREEMPTED")]
    assert stop == [(1000, "PREEMPT_REQUESTED", "PreemptRequested"),
                    (1600, "PREEMPTED", "GraceExpired")]
    assert r["jobs"]["job-a"]["first_start_s"] == 1600
    assert {e["start_s"] for e in r["jobs"]["job-a"]["start_estimates"]} == {1600}


def test_interactive_slice() -> None:
    r = result("interactive-slice")
    jobs = r["jobs"]
    assert [run["alloc"] for run in jobs["nb-small"]["runs"]] == [{"pod-a-002": 4}]
    assert jobs["nb-small"]["preemptions"] == 0
    assert "pod-a-002" not in jobs["nb-large"]["runs"][0]["alloc"]
    assert [p["victim"] for p in r["preemptions"]] == ["nb-large"]
    assert jobs["batch-b"]["runs"] == []  # the slice's idle GPUs are never a batch job's
    assert {p["reason"] for p in jobs["batch-b"]["pending_reasons"]} == {"Resources"}
    assert 1000 <= jobs["job-a"]["first_start_s"] <= 1025
    assert all(p["for"] != "nb-small" for p in r["preemptions"])


def test_victims_furthest_over() -> None:
    r = result("victims-furthest-over")
    assert [p["victim"] for p in r["preemptions"]] == ["y-8"]
    assert r["jobs"]["x-8"]["preemptions"] == r["jobs"]["x-1"]["preemptions"] == 0
    assert r["jobs"]["job-a"]["first_start_s"] <= 1035


def test_guarantee_larger_than_rest() -> None:
    r = result("guarantee-larger-than-rest")
    asked = [(p["at_s"], p["victim"]) for p in r["preemptions"]]
    assert sorted(asked) == [(1000, "b-0"), (1000, "b-1"), (1000, "b-2")]
    assert r["jobs"]["big-a"]["first_start_s"] <= 1035
    assert r["jobs"]["b-3"]["preemptions"] == 0


def test_quota_wait_holds_no_gpus() -> None:
    r = result("quota-wait-holds-no-gpus")
    jobs = r["jobs"]
    assert jobs["b-job"]["first_start_s"] == 10
    assert all(p["reason"] != "Reservation" for p in jobs["b-job"]["pending_reasons"])
    assert {p["reason"] for p in jobs["a-head"]["pending_reasons"]} == {"QuotaLimit"}
    assert {e["start_s"] for e in jobs["a-head"]["start_estimates"]} == {5000}
    assert jobs["a-head"]["first_start_s"] == 5000
    assert jobs["a-short"]["first_start_s"] == 20
    assert moves(r, "a-short")[2] == (20, "PLACING", "Backfilled")
    assert "QuotaReserved" in {p["reason"] for p in jobs["a-long"]["pending_reasons"]}
    assert jobs["a-long"]["first_start_s"] == 5900  # when a-head ends


def test_borrower_reservation_binds() -> None:
    r = result("borrower-reservation-binds")
    jobs = r["jobs"]
    assert [(p["at_s"], p["victim"], p["for"]) for p in r["preemptions"]] == [
        (10, "b-long", "e-new")]
    assert 10 <= jobs["e-new"]["first_start_s"] <= 45
    assert [run["alloc"] for run in jobs["e-new"]["runs"]] == [{"pod-a-001": 8}]
    assert jobs["g-big"]["first_start_s"] == 1000
    assert set(jobs["g-big"]["runs"][0]["alloc"]) == {"pod-a-000", "pod-a-002", "pod-a-003"}


def test_many_reservations() -> None:
    r = result("many-reservations")
    jobs = r["jobs"]
    assert jobs["g1"]["first_start_s"] == 1000 and jobs["g2"]["first_start_s"] == 2000
    assert {e["start_s"] for e in jobs["g1"]["start_estimates"]} == {1000}
    assert {e["start_s"] for e in jobs["g2"]["start_estimates"]} == {2000}
    assert jobs["j"]["first_start_s"] == 10
    assert list(jobs["j"]["runs"][0]["alloc"]) == ["pod-b-001"]
    assert jobs["k"]["pending_reasons"][0]["reason"] == "Reservation"
    assert jobs["k"]["first_start_s"] == 1500
    # what many reservations prevent: with the head's alone, k delays g2
    one = result("many-reservations", reservation_depth=1)
    assert one["jobs"]["k"]["first_start_s"] == 5
    assert one["jobs"]["g2"]["first_start_s"] == 2995


@pytest.mark.parametrize("path", sorted(EXAMPLE_SCENARIOS.glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_example_says_what_a_correct_scheduler_must_do(path) -> None:
    assert "A correct scheduler" in path.read_text()
    assert load_scenario(path).jobs


def _held_by(r: dict[str, Any], jobs: list[str], at: int) -> int:
    """GPUs the runs of ``jobs`` hold at instant ``at``."""
    return sum(sum(run["alloc"].values()) for j in jobs for run in r["jobs"][j]["runs"]
               if run["start_s"] <= at < run["end_s"])


def test_user_limit_waits() -> None:
    r = result("user-limit-waits")
    jobs = r["jobs"]
    ann = ["ann-1", "ann-2", "ann-3"]
    starts = {run["start_s"] for j in r["jobs"] for run in jobs[j]["runs"]}
    assert all(_held_by(r, ann, t) <= 16 for t in starts)
    assert {p["reason"] for p in jobs["ann-3"]["pending_reasons"]} == {"UserLimit"}
    # planned from ann's own declared limits, not from the free GPUs
    assert {e["start_s"] for e in jobs["ann-3"]["start_estimates"]} == {1000}
    assert jobs["bob-1"]["first_start_s"] == 20
    assert jobs["ann-3"]["first_start_s"] == 1000
    assert jobs["carol-big"]["first_start_s"] == 30


def test_team_default_runtime() -> None:
    r = result("team-default-runtime")
    jobs = r["jobs"]
    assert moves(r, "quick")[2] == (2, "PLACING", "Backfilled")
    assert moves(r, "quick")[-1] == (402, "COMPLETED", "Completed")
    assert jobs["head"]["first_start_s"] == 1000
    assert moves(r, "late")[-1] == (3600, "FAILED", "TimeLimit")


def test_pipeline_dependencies() -> None:
    r = result("pipeline-dependencies")
    jobs = r["jobs"]
    assert moves(r, "prep")[-1] == (400, "FAILED", "ExitFailed")  # fails_after_s
    for doomed in ("train", "evaluate"):
        assert moves(r, doomed)[-1] == (400, "CANCELLED", "DependencyNeverSatisfied")
        assert jobs[doomed]["runs"] == []
    assert jobs["notify"]["first_start_s"] == 400  # notok: prep failed
    assert jobs["cleanup"]["first_start_s"] == 400  # any: evaluate ended (cancelled)
    for waiting in ("train", "evaluate", "notify", "cleanup"):
        assert {p["reason"] for p in jobs[waiting]["pending_reasons"]} == {"Dependency"}
        assert jobs[waiting]["start_estimates"] == [] or all(
            e["start_s"] is None for e in jobs[waiting]["start_estimates"])
    assert jobs["other"]["first_start_s"] == 10  # nothing reserved for the dependents


def test_array_max_running() -> None:
    r = result("array-max-running")
    jobs = r["jobs"]
    tasks = [f"sweep_{i}" for i in range(10)]
    assert set(tasks) <= set(jobs)
    starts = {t: jobs[t]["first_start_s"] for t in tasks}
    assert starts == {"sweep_0": 0, "sweep_1": 0, "sweep_2": 0, "sweep_3": 300,
                      "sweep_4": None, "sweep_5": 300, "sweep_6": 300, "sweep_7": 600,
                      "sweep_8": 600, "sweep_9": 600}
    instants = {run["start_s"] for t in tasks for run in jobs[t]["runs"]}
    assert all(_held_by(r, tasks, t) <= 3 * 2 for t in instants)
    assert {p["reason"] for p in jobs["sweep_7"]["pending_reasons"]} == {"ArrayLimit"}
    assert moves(r, "sweep_4")[-1] == (100, "CANCELLED", "Cancelled")
    assert jobs["report"]["first_start_s"] == 900
    assert jobs["other"]["first_start_s"] == 5


@pytest.mark.parametrize(("stretch", "starts", "slowdown"), [
    (1.0, {"short-1": 1000, "short-2": 1000, "long": 1300}, 2.69),
    (0.0, {"long": 1000, "short-1": 1000, "short-2": 1300}, 2.92),
])
def test_short_jobs_first(stretch: float, starts: dict[str, int], slowdown: float) -> None:
    r = result("short-jobs-first", queue_stretch=stretch)
    jobs = r["jobs"]
    assert {j: jobs[j]["first_start_s"] for j in starts} == starts
    for name in starts:  # every limit is exact: the last estimate published is the start
        published = [e["start_s"] for e in jobs[name]["start_estimates"]]
        assert published[-1] == starts[name], name
    if stretch:
        for name in ("short-1", "short-2"):
            assert {e["start_s"] for e in jobs[name]["start_estimates"]} == {1000}
        # long's first estimate (a quota estimate, not a bound) moves once, by the tick
        # after the two shorter jobs arrive
        assert [(e["at_s"], e["start_s"]) for e in jobs["long"]["start_estimates"]] == [
            (10, 1000), (35, 1300)]
    assert round(r["metrics"]["mean_bounded_slowdown"], 2) == slowdown


@pytest.mark.parametrize(("stretch", "starts", "mean_wait", "slowdown"), [
    (1.0, {"narrow-1": 1000, "narrow-2": 1000, "narrow-3": 1000, "narrow-4": 1000,
           "wide": 2500}, 1068, 1.85),
    (0.0, {"wide": 1000, "narrow-1": 2000, "narrow-2": 2000, "narrow-3": 2000,
           "narrow-4": 2000}, 1485, 2.045),
])
def test_small_jobs_first(stretch: float, starts: dict[str, int], mean_wait: int,
                          slowdown: float) -> None:
    r = result("small-jobs-first", queue_stretch=stretch)
    jobs = r["jobs"]
    assert {j: jobs[j]["first_start_s"] for j in starts} == starts
    if stretch:  # every limit is exact: each estimate a narrow job is given is its start
        for name in ("narrow-1", "narrow-2", "narrow-3", "narrow-4"):  # (None: not yet
            # planned, the look-ahead plans two jobs a tick)
            told = [e["start_s"] for e in jobs[name]["start_estimates"]]
            assert set(told) - {None} == {1000} and told[-1] == 1000, name
    assert round(r["metrics"]["mean_wait_s"]) == mean_wait
    assert r["metrics"]["mean_bounded_slowdown"] == pytest.approx(slowdown, abs=0.005)
