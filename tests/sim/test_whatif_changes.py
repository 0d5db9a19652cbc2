"""What a what-if makes of its changes and of the jobs its runs end, on a snapshot built
here (no database): a change given twice with two values, a guarantee that overflows
the cluster (the flag that raised it is named), a setting that is not a finite number or
is past its bound; a queued job whose dependency fails in the run is not counted as
waiting to the horizon; a cancelled running job is listed; the outputs are written whole
or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_app.core.types import SchedulerConfig
from scheduler_app.sim.whatif import (
    Changes,
    JobSnap,
    NodeSnap,
    Snapshot,
    TenantSnap,
    WhatIfError,
    apply_changes,
    parse_changes,
    render_table,
    run_whatif,
    settings_of,
    snapshot_scenario,
    write_files,
)

HOUR = 3600


def snapshot(*jobs: JobSnap) -> Snapshot:
    nodes = tuple(NodeSnap(name=f"a{i}", pod="pod-a", gpus=8) for i in range(1, 5))
    tenants = (TenantSnap("alpha", 16, 0, 0.0), TenantSnap("beta", 8, 8, 0.0))
    return Snapshot(taken_at="2026-12-06T00:00:00+0000", nodes=nodes, tenants=tenants,
                    jobs=jobs, settings=settings_of(SchedulerConfig()))


def running(job_id: str, tenant: str, node: str, *, started_s: int, limit_s: int) -> JobSnap:
    return JobSnap(id=job_id, tenant=tenant, running=True, submit_s=started_s, gpus=8,
                   max_runtime_s=limit_s, started_s=started_s,
                   alloc=((node, tuple(range(8))),))


def queued(job_id: str, tenant: str, gpus: int, **kw: object) -> JobSnap:
    return JobSnap(id=job_id, tenant=tenant, running=False, submit_s=-60, gpus=gpus,
                   max_runtime_s=HOUR, **kw)  # type: ignore[arg-type]


def test_a_job_whose_dependency_fails_in_the_run_is_not_counted_as_waiting():
    # "up" ran past its limit before the snapshot: the run stops it at once (TimeLimit),
    # so "down", which waits for it to succeed, is cancelled and never starts; "other"
    # fits at once. Counted to the horizon, "down" would make alpha's mean wait 12 h.
    snap = snapshot(running("up", "alpha", "a1", started_s=-200, limit_s=100),
                    queued("down", "alpha", 8, depends_on=(("up", "ok"),)),
                    queued("other", "alpha", 8))
    w, _ = run_whatif(snap, Changes(), hours=24, workers=1)
    alpha = next(t for t in w.tenants if t["name"] == "alpha")
    assert alpha["baseline_ended"] == alpha["whatif_ended"] == 1
    assert alpha["baseline_mean_wait_s"] == alpha["whatif_mean_wait_s"] == 60  # "other"
    down = next(j for j in w.jobs if j["id"] == "down")
    assert down["baseline_ended"] == down["whatif_ended"] == "CANCELLED"
    assert down["moved_s"] is None
    table = render_table(w)
    assert "ended without a start" in table
    assert "down" in table.split("ended without a start")[1].splitlines()[1]


def test_a_cancelled_running_job_is_listed_with_the_queued_ones():
    snap = snapshot(running("up", "alpha", "a1", started_s=-60, limit_s=HOUR),
                    queued("q", "beta", 8))
    w, _ = run_whatif(snap, Changes(cancel=("up", "q")), hours=2, workers=1)
    assert w.cancelled == [{"id": "q", "tenant": "beta", "running": False},
                           {"id": "up", "tenant": "alpha", "running": True}]
    assert "Cancelled at t=0 by --cancel (left out of the waits): q (queued), up (running)" \
        in render_table(w)


@pytest.mark.parametrize(("changes", "named"), [
    (Changes(set_quota=("alpha=8", "alpha=12")),
     "--set-quota alpha=12: team alpha is already given --set-quota alpha=8"),
    (Changes(setting=("tick_interval_s=5", "tick_interval_s=60")),
     "--setting tick_interval_s=60: tick_interval_s is already given --setting "
     "tick_interval_s=5"),
    # the flag that raised a guarantee is named, not the last one given (beta's is as it
    # was)
    (Changes(set_quota=("alpha=30", "beta=8")),
     "--set-quota alpha=30: the guarantees would add up to 38 GPUs; the cluster has 32"),
    (Changes(set_quota=("alpha=30", "beta=4", "beta=4")),
     "--set-quota alpha=30: the guarantees would add up to 34 GPUs"),
    (Changes(setting=("queue_stretch=nan",)), "--setting queue_stretch: must be a finite"),
    (Changes(setting=("queue_stretch=inf",)), "--setting queue_stretch: must be a finite"),
    (Changes(setting=("queue_stretch=1e308",)), "--setting queue_stretch: must be at most 1000"),
    (Changes(setting=("tick_budget_s=nan",)), "--setting tick_budget_s: must be a finite"),
    (Changes(setting=("tick_interval_s=1000000000000",)),
     "--setting tick_interval_s: must be at most 315360000"),
    (Changes(add_nodes=("pod-a=99997",)), "--add-nodes pod-a=99997: must be from 1 to 99996"),
    (Changes(set_quota=("alpha=1_0",)), "--set-quota alpha=1_0: '1_0' is not a whole number"),
    (Changes(set_quota=("alpha=\u0663",)), "is not a whole number"),
    (Changes(set_quota=("alpha=8:-2",)),
     "--set-quota alpha=8:-2: the borrow limit must be from 0 to"),
    (Changes(drain=("pod-a",)), "--drain pod-a: unknown node (pod-a is a pod"),
])
def test_a_bad_change_is_refused_naming_its_flag(changes, named):
    data = snapshot_scenario(snapshot())
    with pytest.raises(WhatIfError) as err:
        apply_changes(data, changes)
    assert named in str(err.value)


def test_a_setting_may_be_named_as_its_production_variable():
    data = snapshot_scenario(snapshot())
    changed = apply_changes(data, Changes(setting=("SCHEDULER_TICK_INTERVAL_S=10",)))
    assert changed["settings"]["tick_interval_s"] == 10
    with pytest.raises(WhatIfError, match="is already given"):
        apply_changes(data, Changes(setting=("tick_interval_s=5",
                                             "SCHEDULER_TICK_INTERVAL_S=10")))


def test_the_same_change_twice_counts_once_and_an_empty_one_is_refused():
    assert parse_changes(set_quota=[" alpha=8", "alpha=8"], drain=["a1", "a1"]) == Changes(
        set_quota=("alpha=8",), drain=("a1",))
    for flag in ("set_quota", "add_nodes", "drain", "cancel", "setting"):
        with pytest.raises(WhatIfError, match=f"--{flag.replace('_', '-')} '': must be"):
            parse_changes(**{flag: ["  "]})


def test_outputs_are_written_all_or_none(tmp_path: Path):
    first, second = tmp_path / "a.json", tmp_path / "gone" / "b.yaml"
    with pytest.raises(OSError):
        write_files([(first, "{}\n"), (second, "x: 1\n")])
    assert list(tmp_path.iterdir()) == []  # neither the first answer nor a temporary file
    write_files([(first, "{}\n"), (tmp_path / "b.yaml", "x: 1\n")])
    assert first.read_text() == "{}\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.json", "b.yaml"]
