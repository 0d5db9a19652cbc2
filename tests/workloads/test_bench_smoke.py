"""The benchmarks' plumbing at tiny sizes: each script runs, writes its JSON and its section.

Seconds, not minutes; no timing assertions (the numbers live in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import gates, memory, naive_tick, policies, run_all, sim_speed, tick_latency
from bench._common import update_doc_section


@pytest.fixture
def out(tmp_path: Path) -> dict[str, str]:
    return {"results": str(tmp_path / "results"), "doc": str(tmp_path / "PERFORMANCE.md"),
            "img": str(tmp_path / "img" / "policies.png")}


@pytest.fixture
def tiny_trace(tmp_path: Path) -> dict[str, str]:
    quota = tmp_path / "quota.csv"
    with open(quota, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["date", "vcA", "vcB", "total"])
        w.writerow(["2020-04-01", 8, 8, 16])
    trace = tmp_path / "trace.csv"
    with open(trace, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "arrival_s", "service_sec", "gpu_count"])
        for i in range(12):
            w.writerow([f"{i}#0", 10 * i, 60 + 30 * i, 1 + i % 8])
    return {"trace": str(trace), "quota": str(quota)}


def _common(out: dict[str, str]) -> list[str]:
    return ["--results-dir", out["results"], "--doc", out["doc"], "--no-pin"]


def _json(out: dict[str, str], name: str) -> dict:
    data = json.loads((Path(out["results"]) / f"{name}.json").read_text())
    assert data["benchmark"] == name and data["machine"]["nproc"] >= 1
    assert f"<!-- bench:{name} -->" in Path(out["doc"]).read_text()
    return data


def test_tick_latency_plumbing(out: dict[str, str]) -> None:
    tick_latency.main(["--jobs", "40", "--nodes", "4", "--teams", "2", "--hours", "0.05",
                       "--naive-samples", "1", "--naive-every", "3", *_common(out)])
    data = _json(out, "tick_latency")
    assert data["ticks"] > 0 and data["tick_ms_p99"] is not None
    assert len(data["naive_samples"]) == 1 or data["error"]


def test_gates_plumbing(out: dict[str, str]) -> None:
    gates.main(["--nodes", "8", "--queued", "20", "--parked", "60", "--ticks", "2",
                "--release", "50", *_common(out)])
    data = _json(out, "gates")
    assert data["ticks"]["gated"]["parked"] > 0 and data["ticks"]["plain"]["parked"] == 0
    assert set(data["submit_cpu_us_per_job"]) == {"plain job", "dependent", "array task"}


def test_tick_latency_runs_the_adversarial_workload(out: dict[str, str]) -> None:
    tick_latency.main(["--workload", "adversarial", "--jobs", "40", "--naive-samples", "0",
                       *_common(out)])
    data = _json(out, "tick_latency_adversarial")
    p = data["params"]
    assert (p["workload"], p["nodes"], p["nodes_per_pod"], p["arrival_span_s"]) == (
        "adversarial", 2048, 256, 3600)
    assert data["ticks"] > 0 and data["complete"]
    assert "every arrival in the first 3,600 s" in Path(out["doc"]).read_text()


def test_memory_plumbing(out: dict[str, str]) -> None:
    memory.main(["--jobs", "200", "--nodes", "8", "--teams", "3", *_common(out)])
    data = _json(out, "memory")
    assert data["queued"] == 200 and data["traced_peak_mib"] > 0


def test_sim_speed_and_policies_plumbing(out: dict[str, str], tiny_trace) -> None:
    trace = ["--trace", tiny_trace["trace"], "--quota", tiny_trace["quota"], "--days", "1"]
    sim_speed.main([*trace, *_common(out)])
    speed = _json(out, "sim_speed")
    assert speed["window"]["jobs"] == 12 and speed["complete"], speed["error"]
    policies.main([*trace, "--reuse-full", "--img", out["img"], *_common(out)])
    data = _json(out, "policies")
    assert [r["policy"] for r in data["runs"]] == ["full", "fifo", "priority-kill"]
    assert data["runs"][0].get("reused")  # full came from sim_speed, not a second run
    assert Path(out["img"]).exists()


def test_policies_one_team_puts_every_job_in_one_team(out: dict[str, str],
                                                     tiny_trace) -> None:
    from bench._helios_run import helios_scenario

    scenario, info = helios_scenario(0, 1, trace=tiny_trace["trace"],
                                     quota=tiny_trace["quota"], one_team=True)
    assert [(t.name, t.guaranteed_gpus) for t in scenario.tenant_specs()] == [
        ("all", info["gpus"])]
    assert {j.spec.tenant for j in scenario.jobs} == {"all"} and not scenario.events
    policies.main(["--trace", tiny_trace["trace"], "--quota", tiny_trace["quota"], "--days",
                   "1", "--one-team", "--policies", "full", "--img", out["img"],
                   *_common(out)])
    data = _json(out, "policies_1team")
    assert data["window"]["one_team"] and data["runs"][0]["complete"]
    text = Path(out["doc"]).read_text()
    assert "one team guaranteed the whole cluster" in text and "--one-team" in text
    assert "do not apply" in text and "Issue 15's targets" not in text


def test_the_machine_line_says_how_many_cores_the_run_used() -> None:
    from bench._common import machine, machine_line

    m = machine()
    assert "(one core used)" in machine_line(m)
    m["cores_used"] = 2
    assert "(2 cores used, one a process)" in machine_line(m)


def test_doc_sections_are_replaced_not_duplicated(tmp_path: Path) -> None:
    doc = tmp_path / "P.md"
    update_doc_section("a", "first", doc)
    update_doc_section("b", "other", doc)
    update_doc_section("a", "second", doc)
    text = doc.read_text()
    assert text.count("<!-- bench:a -->") == 1 and "second" in text and "first" not in text
    assert "other" in text


@pytest.mark.parametrize("free, jobs, want_placed", [
    ([8, 8], [(16, 8)], 1),           # a whole-node gang on two free nodes
    ([4, 4], [(8, 8)], 0),            # shape: 8 per node does not fit 4 + 4
    ([4, 4], [(8, None)], 1),         # no shape: 4 + 4 fits
    ([8, 0], [(8, 8), (1, None)], 1), # first fit takes the node; the second finds nothing
    ([3, 0, 5], [(2, None), (6, None)], 2),
])
def test_naive_tick_is_all_or_nothing_first_fit(free, jobs, want_placed) -> None:
    snap = naive_tick.NaiveSnapshot(
        tuple(naive_tick.NaiveJob(f"j{i}", g, s) for i, (g, s) in enumerate(jobs)), tuple(free))
    outcome = naive_tick.naive_tick(snap)
    assert outcome.complete and outcome.examined == len(jobs)
    assert outcome.placed == want_placed


def test_run_all_knows_every_benchmark_in_both_sizes() -> None:
    names = {"tick_latency", "memory", "gates", "sim_speed", "policies", "policies_contended",
             "policies_week_contended"}
    assert set(run_all.FULL) == set(run_all.QUICK) == names
    assert {run_all.module_of(n) for n in names} == {
        "bench.tick_latency", "bench.memory", "bench.gates", "bench.sim_speed",
        "bench.policies"}


def test_the_slowdown_breakdown_groups_completed_jobs_by_size_and_run_time() -> None:
    from bench.slowdown_breakdown import breakdown
    from scheduler_app.sim.result import JobRecord, RunRecord

    def job(i: int, gpus: int, runtime: int, wait: int, state: str = "COMPLETED"):
        rec = JobRecord(f"j{i}", "t", 0, gpus, runtime, state=state)
        rec.runs.append(RunRecord(wait, {"n": gpus}, wait + runtime, state))
        rec.end_s = wait + runtime
        return rec

    rows = breakdown([job(1, 128, 5, 995), job(2, 128, 20, 980), job(3, 1, 100, 0),
                      job(4, 1, 100, 50_000, state="CANCELLED")])
    assert [r["jobs"] for r in rows] == ["65 GPUs or more, run < 60 s",
                                         "1 GPU, run 60-600 s"]
    big, small = rows
    # (1000 / 10 + 1000 / 20) / 2, then the small job's 100 / 100; the cancelled job is out
    assert big["count"] == 2 and big["mean_bounded_slowdown"] == 75.0
    assert big["mean_wait_s"] == 987.5 and small["mean_wait_s"] == 0
    assert big["share_of_sum"] == 150 / 151 and small["share_of_sum"] == 1 / 151


def test_the_wait_shift_splits_the_change_in_waits_by_size_and_team() -> None:
    from bench.wait_shift import shift, waits
    from scheduler_app.sim.result import JobRecord, RunRecord

    def job(i: int, tenant: str, gpus: int, wait: int, preemptions: int = 0):
        rec = JobRecord(f"j{i}", tenant, 100, gpus, 60, state="COMPLETED")
        rec.runs.append(RunRecord(100 + wait, {"n": gpus}, 160 + wait, "COMPLETED"))
        rec.preemptions = preemptions
        return rec

    unstarted = JobRecord("j9", "a", 0, 1, 60)
    before = waits([job(1, "a", 128, 1000), job(2, "b", 1, 10, 1), unstarted])
    after = waits([job(1, "a", 128, 4000), job(2, "b", 1, 1010)])
    assert set(before) == {"j1", "j2"} and before["j1"]["wait_s"] == 1000
    by_size = shift(before, after, "size")
    assert [r["size"] for r in by_size] == ["65 GPUs or more", "1-8 GPUs"]
    assert by_size[0]["part_of_change"] == 0.75 and by_size[1]["part_of_change"] == 0.25
    assert by_size[1]["preemptions_before"] == 1 and by_size[1]["preemptions_after"] == 0
    by_team = shift(before, after, "tenant")
    assert [(r["tenant"], r["mean_wait_after_s"]) for r in by_team] == [("a", 4000),
                                                                       ("b", 1010)]
