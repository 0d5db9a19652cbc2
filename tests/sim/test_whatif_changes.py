"""What a what-if makes of its changes and of the jobs its runs end, on a snapshot built
here (no database): a change given twice with two values, a guarantee that overflows
the cluster (the flag that raised it is named), a setting that is not a finite number or
is past its bound; a queued job whose dependency fails in the run is not counted as
waiting to the horizon; a cancelled running job is listed; the outputs are written whole
or not at all."""

from __future__ import annotations

import dataclasses
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
    cancelled_words,
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
    kw.setdefault("max_runtime_s", HOUR)
    return JobSnap(id=job_id, tenant=tenant, running=False, submit_s=-60, gpus=gpus,
                   **kw)  # type: ignore[arg-type]


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
    # beta has nothing queued: its "-" is said under the table (found 2026-12-07)
    beta = next(line for line in table.splitlines() if line.startswith("beta "))
    assert beta.split("|")[1].split() == ["-", "-"]
    assert "(mean and p95 wait: - = nothing to count: no job of the team queued" in table


def test_a_cancelled_running_job_is_listed_with_the_queued_ones():
    snap = snapshot(running("up", "alpha", "a1", started_s=-60, limit_s=HOUR),
                    queued("q", "beta", 8))
    w, _ = run_whatif(snap, Changes(cancel=("up", "q")), hours=2, workers=1)
    assert w.cancelled == [{"id": "q", "name": "q", "tenant": "beta", "running": False},
                           {"id": "up", "name": "up", "tenant": "alpha", "running": True}]
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
    # the nearest name, as the team, pod and setting errors give (an operator's session)
    (Changes(drain=("a01",)), "--drain a01: unknown node (did you mean a1?)"),
    # a list is no node: one node a flag (it suggested one of them: 2026-12-07)
    (Changes(drain=("a1,a2",)),
     "--drain a1,a2: unknown node (--drain takes one node: give --drain once per node)"),
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


@pytest.mark.parametrize(("value", "why"), [
    ("tick_budget_s=0.001", "the runs tick without a wall clock"),
    ("SCHEDULER_ESTIMATE_BUDGET_S=0.001", "the runs tick without a wall clock"),
    ("estimate_lookahead=0", "estimates decide nothing"),
    ("placing_timeout_s=1", "the runs' agents confirm a start at once"),
])
def test_a_setting_the_runs_cannot_show_is_taken_with_a_warning(value, why):
    """tick_budget_s=0.001 (a tick of 1 ms in production) was answered "no queued job's
    start moves" with no warning (found by a user session, 2026-12-07)."""
    warned: list[str] = []
    apply_changes(snapshot_scenario(snapshot()), Changes(setting=(value,)), warnings=warned)
    assert len(warned) == 1 and warned[0].startswith(f"--setting {value}: the what-if "
                                                     "cannot show what ")
    assert why in warned[0]
    warned = []
    apply_changes(snapshot_scenario(snapshot()), Changes(setting=("queue_stretch=2",)),
                  warnings=warned)
    assert warned == []  # one the runs play out


def test_one_pods_count_written_twice_otherwise_counts_once():
    data = snapshot_scenario(snapshot())
    nodes = len(next(p for p in data["cluster"]["pods"] if p["name"] == "pod-a")["nodes"])
    changed = apply_changes(data, Changes(add_nodes=("pod-a=2", "pod-a = 02")))
    pod = next(p for p in changed["cluster"]["pods"] if p["name"] == "pod-a")
    assert len(pod["nodes"]) == nodes + 2


def test_a_change_written_twice_otherwise_is_compared_with_the_snapshot_not_itself():
    # "--set-quota beta=16 --set-quota beta=016" warned "team beta has that quota already"
    # of a team whose live quota was 8: the second copy was compared with the first's
    # result (an operator's session, 2026-12-07)
    data = snapshot_scenario(snapshot())  # beta 8:8; grace_period_s 120 by default
    warned: list[str] = []
    changed = apply_changes(data, Changes(
        set_quota=("beta=16", "beta=016"),
        setting=("grace_period_s=300", "SCHEDULER_GRACE_PERIOD_S=300")), warnings=warned)
    assert not [w for w in warned if "does nothing" in w], warned
    beta = next(t for t in changed["tenants"] if t["name"] == "beta")
    assert beta["guaranteed_gpus"] == 16 and changed["settings"]["grace_period_s"] == 300
    # and a change that does nothing is still said once, not once per copy
    warned = []
    apply_changes(data, Changes(set_quota=("beta=8", "beta = 8")), warnings=warned)
    assert [w for w in warned if "does nothing" in w] == [
        "--set-quota beta=8: team beta has that quota already (8:8); the change does nothing"]


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


def test_a_job_that_fails_in_the_plan_is_counted_per_team():
    # "up" ran past its limit before the snapshot: the run stops it at t=0 (TimeLimit)
    snap = snapshot(running("up", "alpha", "a1", started_s=-200, limit_s=100),
                    queued("q", "beta", 8))
    w, _ = run_whatif(snap, Changes(), hours=2, workers=1)
    failed = {t["name"]: (t["baseline_failed"], t["whatif_failed"]) for t in w.tenants}
    assert failed == {"alpha": (1, 1), "beta": (0, 0)}
    assert {"baseline_failed", "whatif_failed"} <= set(w.to_json()["tenants"][0])
    table = render_table(w)
    assert "failed" in table.splitlines()[table.splitlines().index("") + 1]
    assert any("fails there (TimeLimit" in a for a in w.assumptions)


def test_a_job_preempted_in_the_plan_whose_reload_takes_it_past_its_limit_fails():
    # "b" (beta, preemptible, cannot checkpoint, 10 min to reload) borrows 16 GPUs; alpha's
    # queued job takes them back at t=0. Back an hour later, "b" restarts from zero and
    # reloads for 10 min: its 2 h limit ends with 10 min of its work left: it fails there
    b = JobSnap(id="b", tenant="beta", running=True, submit_s=-300, gpus=16,
                max_runtime_s=2 * HOUR, started_s=-300, preemptible=True, restart_s=600,
                alloc=tuple((f"a{i}", tuple(range(8))) for i in range(1, 3)))
    snap = dataclasses.replace(
        snapshot(running("r", "alpha", "a4", started_s=-60, limit_s=8 * HOUR), b,
                 running("c", "beta", "a3", started_s=-60, limit_s=8 * HOUR),
                 queued("q", "alpha", 16)),
        tenants=(TenantSnap("alpha", 24, 0, 0.0), TenantSnap("beta", 8, 24, 0.0)))
    w, _ = run_whatif(snap, Changes(), hours=6, workers=1)
    beta = next(t for t in w.tenants if t["name"] == "beta")
    assert beta["baseline_preemptions"] == 1 and beta["baseline_failed"] == 1


def test_capacity_below_the_guarantees_is_a_warning():
    data = snapshot_scenario(snapshot())  # 32 GPUs; alpha 16 + beta 8 guaranteed
    warned: list[str] = []
    apply_changes(data, Changes(drain=("a1", "a2")), warnings=warned)
    assert warned == ["capacity below the guarantees: 16 GPUs are schedulable (on nodes "
                      "healthy, not drained or down), fewer than the 24 the teams are "
                      "guaranteed"]
    warned = []
    apply_changes(data, Changes(setting=("interactive_reserved_gpus=5000",)), warnings=warned)
    assert warned == ["capacity below the guarantees: of the 32 schedulable GPUs, "
                      "interactive_reserved_gpus=5000 keeps 32 for interactive jobs; batch "
                      "jobs can use 0, fewer than the 24 the teams are guaranteed"]
    # the guarantee check is the live rule's: drained and down nodes count (they come
    # back), so a raise that fits the cluster is run, with the warning
    warned = []
    apply_changes(data, Changes(drain=("a1",), set_quota=("beta=16",)), warnings=warned)
    assert warned and "fewer than the 32 the teams are guaranteed" in warned[0]


def test_a_change_that_does_nothing_is_a_warning_and_undrain_and_up_bring_nodes_back():
    snap = dataclasses.replace(snapshot(), nodes=(
        NodeSnap("a1", "pod-a", 8), NodeSnap("a2", "pod-a", 8, health="draining"),
        NodeSnap("a3", "pod-a", 8, health="down"), NodeSnap("a4", "pod-a", 8)))
    data = snapshot_scenario(snap)
    warned: list[str] = []
    apply_changes(data, Changes(drain=("a2", "a3"), set_quota=("beta=8",)), warnings=warned)
    assert warned[:3] == [
        "--set-quota beta=8: team beta has that quota already (8:8); the change does nothing",
        "--drain a2: a2 is draining already; the change does nothing",
        "--drain a3: a3 is down already; the change does nothing"]
    # (a2 and a3 out of service at the snapshot already: capacity is below the guarantees)
    assert [w.split(":")[0] for w in warned[3:]] == ["capacity below the guarantees"]
    # a node the what-if adds, drained: it adds nothing (no word of it until 2026-12-08)
    warned = []
    added = apply_changes(data, Changes(add_nodes=("pod-a=1",), drain=("pod-a-whatif-000",)),
                          warnings=warned)
    assert warned[0] == ("--drain pod-a-whatif-000: pod-a-whatif-000 is a node --add-nodes "
                         "pod-a=1 adds; added drained, it takes no job, as if not added")
    assert added["events"][-1] == {"at_s": 0, "node_drain": "pod-a-whatif-000"}
    changed = apply_changes(data, Changes(undrain=("a2",), up=("a3",)))
    assert changed["events"][-2:] == [{"at_s": 0, "node_undrain": "a2"},
                                      {"at_s": 0, "node_up": "a3"}]
    for changes, named in [
        # one pod, two counts: add up, or the last? (they added up until 2026-12-07)
        (Changes(add_nodes=("pod-a=2", "pod-a=3")),
         "--add-nodes pod-a=3: pod pod-a is already given --add-nodes pod-a=2; give a pod "
         "one count"),
        # one node, two flags: which one? (accepted with a warning until 2026-12-07)
        (Changes(drain=("a2",), undrain=("a2",)),
         "--undrain a2: a2 is already given --drain a2; give a node one of --drain, "
         "--undrain, --up"),
        (Changes(drain=("a1",), undrain=("a1",)), "--undrain a1: a1 is already given --drain"),
        (Changes(up=("a3",), drain=("a3",)), "--up a3: a3 is already given --drain a3"),
        (Changes(undrain=("a1",)), "--undrain a1: a1 is not drained (it is healthy)"),
        (Changes(undrain=("a3",)), "--undrain a3: a3 is not drained (it is down)"),
        (Changes(up=("a2",)), "--up a2: a2 is not down (it is draining)"),
        (Changes(up=("zz",)), "--up zz: unknown node"),
    ]:
        with pytest.raises(WhatIfError) as err:
            apply_changes(data, changes)
        assert named in str(err.value)
    # the nodes back in use take work in the plan: beta's queued job starts at once
    snap = dataclasses.replace(snap, nodes=snap.nodes[1:3])  # a2 draining, a3 down only
    snap = dataclasses.replace(snap, jobs=(queued("q", "beta", 8),),
                               tenants=(TenantSnap("beta", 8, 8, 0.0),))
    w, _ = run_whatif(snap, Changes(up=("a3",)), hours=1, workers=1)
    assert w.jobs[0]["baseline_start_in_s"] is None and w.jobs[0]["whatif_start_in_s"] == 0
    assert parse_changes(undrain=["a2"], up=[" a3"]) == Changes(undrain=("a2",), up=("a3",))


def task(index: int, **kw: object) -> JobSnap:
    return queued(str(11 + index), "beta", 8, array=("8", index, 12, 3), **kw)


def test_array_tasks_are_named_as_gpuq_names_them_and_cancelled_so():
    snap = snapshot(running("up", "alpha", "a1", started_s=-60, limit_s=HOUR),
                    task(3), task(4), task(5))
    w, _ = run_whatif(snap, Changes(cancel=("8_4",)), hours=2, workers=1)
    assert {j["id"]: j["name"] for j in w.jobs} == {"14": "8_3", "15": "8_4", "16": "8_5"}
    assert w.cancelled == [{"id": "15", "name": "8_4", "tenant": "beta", "running": False}]
    assert "8_4 (queued)" in render_table(w)
    data = snapshot_scenario(snap)
    every = apply_changes(data, Changes(cancel=("8_*",)))
    assert [e["cancel"] for e in every["events"]] == ["14", "15", "16"]
    for value, named in [("8_9", "--cancel 8_9: no such task running or queued"),
                         ("9_*", "--cancel 9_*: no task of array 9 running or queued"),
                         ("8-3", "--cancel 8-3: not a job id (a job's number, or an array "
                                 "task's <array>_<index>")]:
        with pytest.raises(WhatIfError) as err:
            apply_changes(data, Changes(cancel=(value,)))
        assert named in str(err.value)
    ended = {"2": ("2", "COMPLETED"), "8_1": ("12", "CANCELLED")}
    for value, named in [("2", "--cancel 2: job 2 has ended (COMPLETED)"),
                         ("8_1", "--cancel 8_1: task 8_1 (job 12) has ended (CANCELLED)")]:
        with pytest.raises(WhatIfError) as err:
            apply_changes(data, Changes(cancel=(value,)), ended=ended)
        assert named in str(err.value)


def test_a_move_past_the_horizon_is_a_lower_bound_and_moves_under_a_minute_are_not_listed():
    # alpha's second job starts within the horizon only when alpha gets more GPUs
    snap = snapshot(running("r1", "alpha", "a1", started_s=-60, limit_s=4 * HOUR),
                    running("r2", "alpha", "a2", started_s=-60, limit_s=4 * HOUR),
                    queued("q", "alpha", 8), queued("s", "beta", 8, max_runtime_s=30))
    w, _ = run_whatif(snap, Changes(set_quota=("alpha=24",)), hours=2, workers=1)
    q = next(j for j in w.jobs if j["id"] == "q")
    assert q["baseline_start_in_s"] is None and q["whatif_start_in_s"] == 0
    assert q["moved_s"] == -2 * HOUR and q["moved_lower_bound"] is True
    table = render_table(w)
    assert "<-2.00" in table and "mean GPUs held" in table
    moved = [line.split()[0] for line in table.split("moves the most")[1].splitlines()[2:]]
    assert moved == ["q"]  # "s" does not move (and a move under a minute is not listed)
    assert not next(j for j in w.jobs if j["id"] == "s")["moved_lower_bound"]
    assert any("up to the end of the horizon (so a wait can be longer than the horizon"
               in a for a in w.assumptions)


def test_cancelling_an_arrays_first_task_cancels_that_task_only():
    """In production an array's id is its task 0's job id: a cancel event naming that id
    is the job, not the whole array (the run cancelled every task of the array, and the
    answer said the other tasks ended CANCELLED)."""
    first = [queued(str(8 + i), "beta", 8, array=("8", i, 3, None)) for i in range(3)]
    snap = snapshot(running("up", "alpha", "a1", started_s=-60, limit_s=HOUR), *first)
    for value in ("8_0", "8"):
        w, _ = run_whatif(snap, Changes(cancel=(value,)), hours=4, workers=1)
        assert [c["name"] for c in w.cancelled] == ["8_0"]
        rest = {j["name"]: j for j in w.jobs if j["name"] != "8_0"}
        assert set(rest) == {"8_1", "8_2"}
        assert all(j["whatif_ended"] is None and j["whatif_start_in_s"] is not None
                   for j in rest.values()), rest


def test_many_cancelled_tasks_of_one_array_are_said_as_a_count():
    # --cancel 64_* printed all 3,000 tasks on one line (an operator's session, 2026-12-07)
    tasks = [{"id": str(100 + i), "name": f"64_{i}", "tenant": "evals", "running": i < 64}
             for i in range(3000)]
    few = [{"id": "9", "name": "8_3", "tenant": "beta", "running": False},
           {"id": "7", "tenant": "alpha", "running": True}]
    assert cancelled_words([few[0], *tasks, few[1]]) == [
        "8_3 (queued)", "3,000 tasks of array 64 (64 running, 2,936 queued)", "7 (running)"]
    assert cancelled_words(tasks[64:67]) == ["64_64 (queued)", "64_65 (queued)",
                                            "64_66 (queued)"]  # a few: by name
