"""The Helios importer: window filter, team assignment, checkpoint model, cluster and quotas."""

from __future__ import annotations

import collections
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads.helios import (
    DAY_S,
    QUOTA_FILE,
    TRACE_FILE,
    CheckpointModel,
    HeliosParams,
    assign_team,
    cluster_pods,
    default_trace_dir,
    import_helios,
    stable_unit,
)

REAL_TRACE = default_trace_dir() / TRACE_FILE
REAL_QUOTA = default_trace_dir() / QUOTA_FILE
needs_trace = pytest.mark.skipif(not REAL_TRACE.exists(), reason="Helios trace not present")

TEAMS = ("vcA", "vcB", "vcC", "vcZ")


def write_quota(path: Path, rows: list[tuple[int, ...]]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["date", *TEAMS, "total"])
        for d, row in enumerate(rows):
            w.writerow([f"2020-04-{d + 1:02d}", *row, sum(row)])
    return path


def write_trace(path: Path, jobs: list[tuple[str, float, float, int]]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "arrival_s", "service_sec", "gpu_count"])
        w.writerows(jobs)
    return path


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    quota = write_quota(tmp_path / "quota.csv", [
        (16, 8, 0, 0),     # day 0
        (16, 8, 0, 0),     # day 1
        (16, 24, 40, 0),   # day 2: vcB grows, vcC appears (total 80, the window's max)
        (16, 24, 40, 0),   # day 3
    ])
    trace = write_trace(tmp_path / "trace.csv", [
        ("a#0", 0.0, 30.0, 1),
        ("b#0", 86_399.0, 3600.0, 8),
        ("c#0", 86_400.0, 3601.0, 16),
        ("d#0", 172_799.0, 172_800.0, 12),
        ("e#0", 172_800.0, 10.0, 2),
        ("f#0", 300_000.0, 7200.0, 4),
    ])
    return trace, quota


# --- window ----------------------------------------------------------------------------


@pytest.mark.parametrize("from_day, days, want_ids, want_submits", [
    (0, 1, ["a#0", "b#0"], [0, 86_399]),
    (1, 1, ["c#0", "d#0"], [0, 86_399]),
    (1, 2, ["c#0", "d#0", "e#0"], [0, 86_399, 86_400]),
    (3, 1, ["f#0"], [300_000 - 3 * DAY_S]),
])
def test_window_keeps_arrivals_in_its_days_and_shifts_them_to_zero(
    small, from_day: int, days: int, want_ids: list[str], want_submits: list[int]
) -> None:
    trace, quota = small
    s = import_helios(HeliosParams(from_day=from_day, days=days), trace=trace, quota=quota)
    assert [j["id"] for j in s["jobs"]] == want_ids
    assert [j["submit_at_s"] for j in s["jobs"]] == want_submits
    assert s["until_s"] == days * DAY_S + HeliosParams().drain_s


@pytest.mark.slow
@needs_trace
def test_default_window_is_days_0_to_119_of_the_real_trace() -> None:
    with open(REAL_TRACE, newline="") as fh:
        want = [r["job_id"] for r in csv.DictReader(fh) if float(r["arrival_s"]) < 10_368_000]
    s = import_helios()
    assert [j["id"] for j in s["jobs"]] == want
    assert max(j["submit_at_s"] for j in s["jobs"]) < 10_368_000
    validate_scenario(s)  # the whole window is a valid scenario


# --- cluster and quotas ------------------------------------------------------------------


def test_cluster_is_the_windows_largest_daily_total_in_8_gpu_nodes(small) -> None:
    trace, quota = small
    assert sum(p["nodes"] * 8 for p in import_helios(
        HeliosParams(from_day=0, days=2), trace=trace, quota=quota)["cluster"]["pods"]) == 24
    assert sum(p["nodes"] * 8 for p in import_helios(
        HeliosParams(from_day=0, days=4), trace=trace, quota=quota)["cluster"]["pods"]) == 80


@pytest.mark.parametrize("gpus, want_pod_nodes", [
    (8, [1]), (256, [32]), (264, [17, 16]), (1064, [27, 27, 27, 26, 26]), (1, [1]),
])
def test_pods_are_even_and_at_most_32_nodes(gpus: int, want_pod_nodes: list[int]) -> None:
    assert [p["nodes"] for p in cluster_pods(gpus)] == want_pod_nodes


def test_teams_come_from_the_quota_columns_and_zero_quota_teams_only_borrow(small) -> None:
    trace, quota = small
    s = import_helios(HeliosParams(from_day=0, days=4), trace=trace, quota=quota)
    tenants = {t["name"]: t for t in s["tenants"]}
    assert list(tenants) == list(TEAMS)
    assert tenants["vcZ"]["guaranteed_gpus"] == 0 and tenants["vcZ"]["borrow_limit_gpus"] == 80
    assert tenants["vcA"] == {"name": "vcA", "guaranteed_gpus": 16, "borrow_limit_gpus": 64}


def test_quota_changes_inside_the_window_become_set_quota_events(small) -> None:
    trace, quota = small
    s = import_helios(HeliosParams(from_day=1, days=3), trace=trace, quota=quota)
    assert s["events"] == [
        {"at_s": DAY_S, "set_quota": {"tenant": "vcB", "guaranteed_gpus": 24,
                                      "borrow_limit_gpus": 56}},
        {"at_s": DAY_S, "set_quota": {"tenant": "vcC", "guaranteed_gpus": 40,
                                      "borrow_limit_gpus": 40}},
    ]
    validate_scenario(s)


# --- team assignment ---------------------------------------------------------------------


def test_team_of_a_job_is_stable_across_processes_and_hash_seeds() -> None:
    ids = [f"{n}#{n % 7}" for n in range(200)]
    here = [assign_team(i, TEAMS, (16, 8, 40, 0)) for i in ids]
    code = ("from scheduler_app.workloads.helios import assign_team\n"
            f"print(','.join(assign_team(i, {TEAMS!r}, (16, 8, 40, 0)) for i in {ids!r}))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip().split(",") == here


def test_jobs_go_to_teams_in_proportion_to_their_quota() -> None:
    quotas = (16, 8, 40, 0)
    n = 40_000
    counts = collections.Counter(assign_team(f"job{i}", TEAMS, quotas) for i in range(n))
    total = sum(quotas)
    for team, q in zip(TEAMS, quotas, strict=True):
        assert counts[team] / n == pytest.approx(q / total, abs=0.01), team
    assert counts["vcZ"] == 0  # zero quota that day: no jobs


def test_job_uses_its_arrival_days_quotas(small, tmp_path: Path) -> None:
    _, quota = small
    # 2,000 jobs on day 0 (vcA 16, vcB 8) and 2,000 on day 2 (vcA 16, vcB 24, vcC 40).
    rows = [(f"d0-{i}", 10.0 + i, 60.0, 1) for i in range(2000)]
    rows += [(f"d2-{i}", 2 * DAY_S + 10.0 + i, 60.0, 1) for i in range(2000)]
    trace = write_trace(tmp_path / "days.csv", rows)
    s = import_helios(HeliosParams(from_day=0, days=3), trace=trace, quota=quota)
    by_day = {0: collections.Counter(), 2: collections.Counter()}
    for j in s["jobs"]:
        by_day[j["submit_at_s"] // DAY_S][j["tenant"]] += 1
    assert by_day[0]["vcC"] == 0 and by_day[0]["vcZ"] == 0
    assert by_day[0]["vcA"] / 2000 == pytest.approx(16 / 24, abs=0.04)
    assert by_day[2]["vcC"] / 2000 == pytest.approx(40 / 80, abs=0.04)
    assert by_day[2]["vcZ"] == 0


def test_stable_unit_is_uniform_in_zero_one() -> None:
    xs = [stable_unit(f"id-{i}") for i in range(10_000)]
    assert all(0.0 <= x < 1.0 for x in xs)
    assert sum(xs) / len(xs) == pytest.approx(0.5, abs=0.01)


# --- checkpoint model and shape ----------------------------------------------------------


@pytest.mark.parametrize("service, want", [
    (1, {"max_runtime_s": 60}),
    (3600, {"max_runtime_s": 5400}),  # exactly an hour: not longer than one, no checkpoints
    (3601, {"max_runtime_s": 5460, "checkpointable": True, "checkpoint_interval_s": 1800,
            "checkpoint_time_s": 60, "restart_s": 120}),
    (100_000, {"max_runtime_s": 150_000, "checkpointable": True, "checkpoint_interval_s": 1800,
               "checkpoint_time_s": 60, "restart_s": 120}),
    # 1.5 x would pass 48 h: capped, but never below service + restart (a resumed run fits)
    (120_000, {"max_runtime_s": 172_800, "checkpointable": True, "checkpoint_interval_s": 1800,
               "checkpoint_time_s": 60, "restart_s": 120}),
    (172_800, {"max_runtime_s": 172_920, "checkpointable": True, "checkpoint_interval_s": 1800,
               "checkpoint_time_s": 60, "restart_s": 120}),
])
def test_checkpoint_model_as_documented(service: int, want: dict) -> None:
    assert CheckpointModel().fields(service) == want


def test_whole_node_shape_only_for_multiples_of_8(small) -> None:
    trace, quota = small
    s = import_helios(HeliosParams(from_day=0, days=4), trace=trace, quota=quota)
    shapes = {j["id"]: (j["gpus"], j.get("gpus_per_node")) for j in s["jobs"]}
    assert shapes == {"a#0": (1, None), "b#0": (8, 8), "c#0": (16, 8), "d#0": (12, None),
                      "e#0": (2, None), "f#0": (4, None)}


def test_fractional_times_are_integers_service_rounded_up(tmp_path: Path) -> None:
    quota = write_quota(tmp_path / "q.csv", [(8, 0, 0, 0)])
    trace = write_trace(tmp_path / "t.csv", [("x#1", 12.0, 10.2, 1)])
    (job,) = import_helios(HeliosParams(days=1), trace=trace, quota=quota)["jobs"]
    assert (job["submit_at_s"], job["runtime_s"]) == (12, 11)


# --- capacity scale ----------------------------------------------------------------------


def test_capacity_scale_shrinks_cluster_and_guarantees_but_not_team_assignment(small) -> None:
    trace, quota = small
    full = import_helios(HeliosParams(from_day=0, days=4), trace=trace, quota=quota)
    half = import_helios(HeliosParams(from_day=0, days=4, capacity_scale=0.5),
                         trace=trace, quota=quota)
    assert sum(p["nodes"] * 8 for p in half["cluster"]["pods"]) == 40  # 80 x 0.5
    assert {t["name"]: t["guaranteed_gpus"] for t in half["tenants"]} == {
        "vcA": 8, "vcB": 4, "vcC": 0, "vcZ": 0}
    assert all(t["guaranteed_gpus"] + t["borrow_limit_gpus"] == 40 for t in half["tenants"])
    assert [e["set_quota"]["guaranteed_gpus"] for e in half["events"]] == [12, 20]
    assert [j["tenant"] for j in half["jobs"]] == [j["tenant"] for j in full["jobs"]]
    validate_scenario(half)


@pytest.mark.parametrize("scale", [0.0, -1.0, 1.5])
def test_capacity_scale_out_of_range_is_refused(scale: float) -> None:
    with pytest.raises(ValueError, match="capacity_scale"):
        HeliosParams(capacity_scale=scale)


# --- loaded windows: compressed arrivals, the artifact's cluster -------------------------


def test_arrival_compression_divides_submit_times_and_the_window(small) -> None:
    trace, quota = small
    plain = import_helios(HeliosParams(from_day=0, days=4), trace=trace, quota=quota)
    fast = import_helios(HeliosParams(from_day=0, days=4, arrival_compression=2.0),
                         trace=trace, quota=quota)
    assert [j["submit_at_s"] for j in fast["jobs"]] == [
        int(j["submit_at_s"] / 2.0) for j in plain["jobs"]]
    assert [j["runtime_s"] for j in fast["jobs"]] == [j["runtime_s"] for j in plain["jobs"]]
    assert fast["until_s"] == 2 * DAY_S + HeliosParams().drain_s
    assert [e["at_s"] for e in fast["events"]] == [e["at_s"] // 2 for e in plain["events"]]
    assert fast["name"].endswith("-c2")
    validate_scenario(fast)


def test_quota_changes_of_one_instant_cut_before_they_raise(tmp_path: Path) -> None:
    """Day 1 moves 16 GPUs of guarantee from vcA to vcB: applied in file order the raise
    would come first and, for an instant, the guarantees would exceed the cluster."""
    quota = write_quota(tmp_path / "q.csv", [(16, 8, 0, 0), (0, 24, 0, 0)])
    trace = write_trace(tmp_path / "t.csv", [("a#0", 0.0, 30.0, 1)])
    s = import_helios(HeliosParams(from_day=0, days=2), trace=trace, quota=quota)
    assert [(e["set_quota"]["tenant"], e["set_quota"]["guaranteed_gpus"])
            for e in s["events"]] == [("vcA", 0), ("vcB", 24)]
    validate_scenario(s)


def test_the_artifacts_cluster_one_pool_of_a_given_size_with_capped_jobs(small) -> None:
    trace, quota = small
    s = import_helios(HeliosParams(from_day=0, days=4, cluster_nodes=12, nodes_per_pod=12,
                                   max_job_gpus=8), trace=trace, quota=quota)
    assert s["cluster"]["pods"] == [{"name": "pod-0", "nodes": 12, "gpus_per_node": 8}]
    assert max(j["gpus"] for j in s["jobs"]) == 8
    assert all(j.get("gpus_per_node") == 8 for j in s["jobs"] if j["gpus"] == 8)
    with pytest.raises(ValueError, match="cannot hold the window's guarantees"):
        import_helios(HeliosParams(from_day=0, days=4, cluster_nodes=2), trace=trace,
                      quota=quota)


@pytest.mark.parametrize("field, value", [
    ("arrival_compression", 0.5), ("arrival_compression", 1000.0), ("cluster_nodes", 0),
    ("nodes_per_pod", 0), ("max_job_gpus", 0),
])
def test_loaded_window_parameters_out_of_range_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        HeliosParams(**{field: value})


@needs_trace
def test_the_artifacts_window_is_the_one_anchors_describes() -> None:
    """Venus days 100-113, arrivals compressed 2.2x, 136 nodes of 8 in one pool, jobs
    capped at 512 GPUs: 10,380 jobs, an offered load of 1.15 over the arrival span."""
    s = import_helios(HeliosParams(from_day=100, days=14, arrival_compression=2.2,
                                   cluster_nodes=136, nodes_per_pod=136, max_job_gpus=512))
    assert len(s["jobs"]) == 10_380
    span = max(j["submit_at_s"] for j in s["jobs"])
    load = sum(j["gpus"] * j["runtime_s"] for j in s["jobs"]) / span / (136 * 8)
    assert 1.14 < load < 1.16


def test_the_shared_directory_may_be_named_for_a_clone_elsewhere(monkeypatch, tmp_path):
    # a clone not beside shared/ could not find the trace: import_trace, the Helios
    # snippet and make bench-quick failed (found by following the README, 2026-12-07)
    from scheduler_app.workloads.helios import default_trace_dir

    monkeypatch.setenv("SCHED_SHARED_DIR", str(tmp_path))
    assert default_trace_dir() == tmp_path / "traces"
    monkeypatch.delenv("SCHED_SHARED_DIR")
    assert default_trace_dir().parts[-2:] == ("shared", "traces")
