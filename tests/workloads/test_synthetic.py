"""The synthetic busy day: deterministic per seed, the documented mix, every job valid."""

from __future__ import annotations

import collections
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads import SyntheticParams, dump_scenario, generate
from scheduler_app.workloads.synthetic import (
    CHECKPOINT_INTERVALS_S,
    JOB_MIX,
    TRAIN_SIZES,
    job_kind,
)

MIX_JOBS = 20_000  # enough for the shares to settle within a percent or two


@pytest.fixture(scope="module")
def busy_day() -> dict:
    return generate(SyntheticParams(jobs=MIX_JOBS, seed=11))


def test_same_seed_gives_the_same_scenario_byte_for_byte() -> None:
    params = SyntheticParams(jobs=600, nodes=64, teams=6, seed=7)
    assert dump_scenario(generate(params)) == dump_scenario(generate(params))


def test_another_seed_gives_another_scenario() -> None:
    a = generate(SyntheticParams(jobs=500, seed=1))
    b = generate(SyntheticParams(jobs=500, seed=2))
    assert a["jobs"] != b["jobs"]


def test_default_cluster_is_the_seeds_16384_gpus_in_16_pods() -> None:
    scenario = generate(SyntheticParams(jobs=10))
    pods = scenario["cluster"]["pods"]
    assert len(pods) == 16
    assert {p["nodes"] for p in pods} == {128}
    assert sum(p["nodes"] * p["gpus_per_node"] for p in pods) == 16_384


def test_thirty_teams_whose_guarantees_sum_to_the_cluster_in_whole_nodes(busy_day) -> None:
    tenants = busy_day["tenants"]
    assert len(tenants) == 30
    assert sum(t["guaranteed_gpus"] for t in tenants) == 16_384
    assert all(t["guaranteed_gpus"] % 8 == 0 and t["guaranteed_gpus"] > 0 for t in tenants)
    assert all(0 < t["borrow_limit_gpus"] <= 16_384 - t["guaranteed_gpus"] for t in tenants)
    # Zipf-like: the largest team owns several times the median one.
    sizes = sorted(t["guaranteed_gpus"] for t in tenants)
    assert sizes[-1] > 4 * statistics.median(sizes)


def test_job_kinds_follow_the_documented_mix(busy_day) -> None:
    counts = collections.Counter(job_kind(j["id"]) for j in busy_day["jobs"])
    for kind, share in JOB_MIX:
        assert counts[kind] / MIX_JOBS == pytest.approx(share, abs=0.015), kind


def test_training_sizes_follow_the_documented_weights(busy_day) -> None:
    train = [j for j in busy_day["jobs"] if job_kind(j["id"]) == "train"]
    counts = collections.Counter(j["gpus"] for j in train)
    assert set(counts) <= {size for size, _ in TRAIN_SIZES}
    for size, share in TRAIN_SIZES:
        assert counts[size] / len(train) == pytest.approx(share, abs=0.03), size


def test_each_kind_has_its_shape_and_checkpoint_model(busy_day) -> None:
    for j in busy_day["jobs"]:
        kind = job_kind(j["id"])
        assert j["max_runtime_s"] >= j["runtime_s"] + j.get("restart_s", 0), j["id"]
        if kind == "eval":
            assert j["gpus"] == 1 and not j.get("checkpointable")
        elif kind == "dev":
            assert j["gpus"] in (2, 4) and not j.get("checkpointable")
        elif kind == "sweep":
            assert (j["gpus"], j["checkpoint_interval_s"], j["restart_s"]) == (8, 300, 60)
            assert j["min_gpus"] in (2, 4)
        else:
            assert kind == "train"
            assert 64 <= j["gpus"] <= 2048 and j["gpus_per_node"] == 8
            assert j["checkpoint_interval_s"] in CHECKPOINT_INTERVALS_S
            assert 60 <= j["restart_s"] <= 600
            assert j["runtime_s"] >= 3600


def test_most_jobs_are_small_and_most_gpus_are_gangs(busy_day) -> None:
    jobs = busy_day["jobs"]
    small = sum(1 for j in jobs if j["gpus"] <= 8)
    gang_gpus = sum(j["gpus"] for j in jobs if j["gpus"] >= 64)
    assert small / len(jobs) > 0.9
    assert gang_gpus / sum(j["gpus"] for j in jobs) > 0.5


def test_backlog_is_in_the_system_when_the_window_opens(busy_day) -> None:
    submits = [j["submit_at_s"] for j in busy_day["jobs"]]
    assert submits == sorted(submits), "file order is submit order"
    at_zero = sum(1 for s in submits if s == 0)
    # 80 % backlog at t=0, plus the late arrivals' share of that second.
    assert at_zero / len(submits) == pytest.approx(0.8 + 0.2 / 7200, abs=0.015)
    late = [s for s in submits if s > 0]
    assert max(late) - min(late) > 0.9 * 7200  # the rest spread over the window
    assert max(submits) < busy_day["until_s"] == 7200


def test_generated_scenario_passes_the_simulators_validator(busy_day) -> None:
    scenario = validate_scenario(busy_day)
    assert len(scenario.jobs) == MIX_JOBS


@settings(max_examples=25, deadline=None)
@given(
    jobs=st.integers(1, 300),
    nodes=st.integers(1, 40),
    teams=st.integers(1, 12),
    seed=st.integers(0, 2**32),
    hours=st.sampled_from([0.25, 1.0, 2.0, 24.0]),
)
def test_every_job_is_valid_and_can_fit_its_team_on_any_cluster(
    jobs: int, nodes: int, teams: int, seed: int, hours: float
) -> None:
    raw = generate(SyntheticParams(jobs=jobs, nodes=nodes, teams=teams, seed=seed, hours=hours))
    scenario = validate_scenario(raw)  # raises with the offending field if not
    limit = {t.name: t.guaranteed_gpus + t.borrow_limit_gpus for t in scenario.tenants}
    for j in scenario.jobs:
        assert j.spec.gpus <= min(scenario.total_gpus(), limit[j.spec.tenant]), j.id
        assert j.spec.submit_s < scenario.until_s


@pytest.mark.parametrize("field, value", [("jobs", 0), ("nodes", 0), ("teams", 0),
                                           ("hours", 0), ("backlog_fraction", 1.5),
                                           ("guarantee_fraction", 1.2),
                                           ("arrival_span_s", 0)])
def test_bad_parameters_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SyntheticParams(**{field: value})


def test_the_adversarial_workload_is_what_it_says() -> None:
    """Every arrival in the first hour, 8 pods of 256 nodes, guarantees adding up to 94 %
    of the cluster, sizes from 1 to 2,048 GPUs (a 2,000-job sample of the same draw)."""
    import dataclasses

    from scheduler_app.workloads.synthetic import ADVERSARIAL

    raw = generate(dataclasses.replace(ADVERSARIAL, jobs=2000))
    scenario = validate_scenario(raw)
    assert [(p.nodes, p.gpus_per_node) for p in scenario.pods] == [(256, 8)] * 8
    assert sum(t.guaranteed_gpus for t in scenario.tenants) == int(16_384 * 0.94) // 8 * 8
    assert len(scenario.tenants) == 30
    assert max(j.spec.submit_s for j in scenario.jobs) < 3600 < scenario.until_s
    sizes = {j.spec.gpus for j in scenario.jobs}
    assert min(sizes) == 1 and max(sizes) == 2048


def test_the_new_knobs_leave_the_busy_day_as_it_was() -> None:
    base = generate(SyntheticParams(jobs=300, seed=5))
    same = generate(SyntheticParams(jobs=300, seed=5, guarantee_fraction=1.0,
                                    arrival_span_s=None))
    assert base == same


def test_a_scenario_written_over_an_old_one_is_whole_or_not_written(tmp_path, monkeypatch):
    """The old file stays as it was and no temporary file is left when writing fails."""
    import pathlib

    import yaml

    from scheduler_app.workloads import write_scenario

    path = tmp_path / "day.yaml"
    path.write_text("old\n")
    scenario = generate(SyntheticParams(jobs=20, nodes=4, teams=2, hours=0.1, seed=1))

    write_text = pathlib.Path.write_text

    def full_disk(self, text, *args, **kwargs):
        write_text(self, text[: len(text) // 2], *args, **kwargs)  # half of it, then
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_scenario(scenario, path)
    monkeypatch.undo()
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["day.yaml"]
    assert write_scenario(scenario, path) == path
    assert yaml.safe_load(path.read_text())["jobs"] == scenario["jobs"]
