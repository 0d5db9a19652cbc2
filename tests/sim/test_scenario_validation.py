"""Scenario files: every malformed field is refused with one line naming its path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler_app.sim.scenario import (
    DEFAULT_TICK_WORK_BUDGET,
    ScenarioError,
    load_scenario,
    parse_scenario,
    validate_scenario,
)

from .helpers import BASE, job, make, scenario_dir

JOB_KEYS = (
    "array, array_task, checkpoint_interval_s, checkpoint_time_s, checkpointable, depends_on, "
    "fails_after_s, gpu_type, gpus, gpus_per_node, "
    "id, ignores_preempt, interactive, max_runtime_s, min_gpus, owner, preemptible, "
    "preemption_times_s, priority, queued, restart_s, running, runtime_s, submit_at_s, tenant"
)


def with_team(**limits: Any) -> dict[str, Any]:
    return make(tenants=[{"name": "team-a", "guaranteed_gpus": 16, **limits}])


def team_and_job(limits: dict[str, Any], **fields: Any) -> dict[str, Any]:
    data = with_team(**limits)
    data["jobs"] = [job("j1", **fields)]
    return data
EVENT_KEYS = "at_s, cancel, node_down, node_drain, node_undrain, node_up, set_quota"


def with_job(**fields: Any) -> dict[str, Any]:
    return make(jobs=[job("j1", **fields)])


def without(key: str) -> dict[str, Any]:
    j = job("j1")
    del j[key]
    return make(jobs=[j])


BAD: list[tuple[str, Any, str]] = [
    ("zero gpus", with_job(gpus=0), "jobs[0].gpus: must be a positive integer"),
    ("gpus as text", with_job(gpus="8"), "jobs[0].gpus: must be a positive integer"),
    ("gpus as bool", with_job(gpus=True), "jobs[0].gpus: must be a positive integer"),
    ("fractional gpus", with_job(gpus=1.5), "jobs[0].gpus: must be a positive integer"),
    ("unknown job key", with_job(gpu=8), f"jobs[0].gpu: unknown key; allowed: {JOB_KEYS}"),
    ("unknown tenant", with_job(tenant="team-z"),
     "jobs[0].tenant: unknown tenant team-z; known: team-a"),
    ("duplicate job id", make(jobs=[job("j1"), job("j1")]), "jobs[1].id: duplicate job id j1"),
    ("shape does not divide", with_job(gpus=12, gpus_per_node=8),
     "jobs[0].gpus_per_node: must divide gpus (12)"),
    ("min_gpus above gpus", with_job(min_gpus=9), "jobs[0].min_gpus: must be at most gpus (8)"),
    ("min_gpus off shape", with_job(gpus=16, gpus_per_node=8, min_gpus=4),
     "jobs[0].min_gpus: must be a multiple of gpus_per_node (8)"),
    ("negative submit", with_job(submit_at_s=-1),
     "jobs[0].submit_at_s: must be a non-negative integer"),
    ("absurd runtime", with_job(runtime_s=10**12), "jobs[0].runtime_s: must be at most 315360000"),
    ("missing runtime", without("runtime_s"), "jobs[0].runtime_s: required"),
    ("missing id", without("id"), "jobs[0].id: required"),
    ("id with a space", with_job(id="my job"), "jobs[0].id: must not contain spaces"),
    ("checkpoint setting on a plain job", with_job(checkpoint_interval_s=300),
     "jobs[0].checkpoint_interval_s: set only for a checkpointable job (checkpointable: true)"),
    ("bool as text", with_job(checkpointable="yes"),
     "jobs[0].checkpointable: must be true or false"),
    ("unknown gpu type", with_job(gpu_type="A100"),
     "jobs[0].gpu_type: no pod has GPUs of type A100 (none declared)"),
    ("zero until", make(until_s=0), "until_s: must be a positive integer"),
    ("missing name", {k: v for k, v in BASE.items() if k != "name"}, "name: required"),
    ("unknown top-level key", make(clusters={}),
     "clusters: unknown key; allowed: claims, cluster, events, jobs, name, reservations, "
     "settings, tenants, until_s"),
    ("not a mapping", [1, 2], "scenario: must be a mapping with name, until_s, cluster, "
     "tenants, jobs"),
    ("jobs not a list", make(jobs={"id": "j1"}), "jobs: must be a list"),
    ("zero tick interval", make(settings={"tick_interval_s": 0}),
     "settings.tick_interval_s: must be a positive integer"),
    ("zero nodes", make(cluster={"pods": [{"name": "pod-a", "nodes": 0, "gpus_per_node": 8}]}),
     "cluster.pods[0].nodes: must be a positive integer"),
    ("duplicate pod", make(cluster={"pods": [{"name": "p", "nodes": 1, "gpus_per_node": 8},
                                             {"name": "p", "nodes": 1, "gpus_per_node": 8}]}),
     "cluster.pods[1].name: duplicate pod name p"),
    ("negative guarantee", make(tenants=[{"name": "team-a", "guaranteed_gpus": -1}]),
     "tenants[0].guaranteed_gpus: must be a non-negative integer"),
    ("duplicate tenant", make(tenants=[{"name": "team-a", "guaranteed_gpus": 1},
                                       {"name": "team-a", "guaranteed_gpus": 1}]),
     "tenants[1].name: duplicate tenant name team-a"),
    ("unknown event kind", make(events=[{"at_s": 5, "reboot": "pod-a-000"}]),
     f"events[0].reboot: unknown key; allowed: {EVENT_KEYS}"),
    ("two kinds in one event", make(events=[{"at_s": 5, "node_down": "pod-a-000",
                                             "node_up": "pod-a-000"}]),
     "events[0]: must have at_s and exactly one of: node_down, node_up, node_drain, "
     "node_undrain, cancel, set_quota"),
    ("event on unknown node", make(events=[{"at_s": 5, "node_down": "pod-b-000"}]),
     "events[0].node_down: unknown node pod-b-000 (the scenario's nodes: pod-a-000, "
     "pod-a-001)"),
    # a listed pod (an exported live cluster) names its nodes as listed: the hint lists them
    ("event on unknown node of a listed pod",
     make(cluster={"pods": [{"name": "pod-a", "nodes": [
         {"name": f"pod-a-n0{i}", "gpus": 8} for i in range(1, 6)]}]},
          events=[{"at_s": 5, "node_drain": "pod-a-000"}]),
     "events[0].node_drain: unknown node pod-a-000 (the scenario's nodes: pod-a-n01, "
     "pod-a-n02, pod-a-n03, ... (5 nodes))"),
    ("cancel of unknown job", make(events=[{"at_s": 5, "cancel": "nope"}]),
     "events[0].cancel: unknown job nope"),
    ("cancel before submit", make(jobs=[job("j1", submit_at_s=50)],
                                  events=[{"at_s": 5, "cancel": "j1"}]),
     "events[0].at_s: before job j1 is submitted (at 50)"),
    ("quota of unknown tenant", make(events=[{"at_s": 5, "set_quota": {
        "tenant": "team-z", "guaranteed_gpus": 8}}]),
     "events[0].set_quota.tenant: unknown tenant team-z"),
    ("empty quota change", make(events=[{"at_s": 5, "set_quota": {"tenant": "team-a"}}]),
     "events[0].set_quota: must set guaranteed_gpus or borrow_limit_gpus"),
    ("event without time", make(events=[{"node_down": "pod-a-000"}]), "events[0].at_s: required"),
    ("guarantees past the cluster at the start",
     make(tenants=[{"name": "team-a", "guaranteed_gpus": 8},
                   {"name": "team-b", "guaranteed_gpus": 100_000}]),
     "tenants[1].guaranteed_gpus: 100000 GPUs is more than the cluster's 16 on its own "
     "(the guarantees add up to 100008 GPUs)"),
    # the first tenant raised: the whole sum is named at tenants, not the running sum at
    # the tenant after it (it said "tenants[1]...: would add up to 16", blaming team-b)
    ("guarantees that add up past the cluster",
     make(tenants=[{"name": "team-a", "guaranteed_gpus": 12},
                   {"name": "team-b", "guaranteed_gpus": 8},
                   {"name": "team-c", "guaranteed_gpus": 4}]),
     "tenants: the guarantees add up to 24 GPUs; the cluster has 16"),
    ("a quota change past the cluster",
     make(tenants=[{"name": "team-a", "guaranteed_gpus": 8},
                   {"name": "team-b", "guaranteed_gpus": 8}],
          events=[{"at_s": 5, "set_quota": {"tenant": "team-b", "guaranteed_gpus": 100_000}}]),
     "events[0].set_quota.guaranteed_gpus: the guarantees would add up to 100008 GPUs; the "
     "cluster has 16"),
    ("a raise before the cut that would make room, at the same instant",
     make(tenants=[{"name": "team-a", "guaranteed_gpus": 8},
                   {"name": "team-b", "guaranteed_gpus": 8}],
          events=[{"at_s": 5, "set_quota": {"tenant": "team-b", "guaranteed_gpus": 16}},
                  {"at_s": 5, "set_quota": {"tenant": "team-a", "guaranteed_gpus": 0}}]),
     "events[0].set_quota.guaranteed_gpus: the guarantees would add up to 24 GPUs; the "
     "cluster has 16"),
    ("a negative grace cap", make(settings={"max_grace_period_s": -1}),
     "settings.max_grace_period_s: must be a non-negative integer"),
    # a NaN passes any "<= 0" test; a stretch of 1e308 made every queue key infinite
    ("a stretch that is not a number", make(settings={"queue_stretch": float("nan")}),
     "settings.queue_stretch: must be a number from 0 to 1000"),
    ("an infinite tick budget", make(settings={"tick_budget_s": float("inf")}),
     "settings.tick_budget_s: must be a number from 0.001 to 3600"),
    ("a stretch past its bound", make(settings={"queue_stretch": 1e308}),
     "settings.queue_stretch: must be a number from 0 to 1000"),
    ("a whole-number setting past the table's maximum",
     make(settings={"tick_interval_s": 10**12}),
     "settings.tick_interval_s: must be at most 315360000"),
    # team limits (SCENARIOS.md: max_gpus_per_user, default_runtime_s, max_runtime_s)
    ("zero GPUs per user", with_team(max_gpus_per_user=0),
     "tenants[0].max_gpus_per_user: must be a positive integer"),
    ("GPUs per user as text", with_team(max_gpus_per_user="8"),
     "tenants[0].max_gpus_per_user: must be a positive integer"),
    ("a negative default limit", with_team(default_runtime_s=-5),
     "tenants[0].default_runtime_s: must be a positive integer"),
    ("an absurd team max", with_team(max_runtime_s=10**12),
     "tenants[0].max_runtime_s: must be at most 315360000"),
    ("a default over the team max", with_team(default_runtime_s=7200, max_runtime_s=3600),
     "tenants[0].default_runtime_s: must be at most the team's max_runtime_s (3600)"),
    ("a job over the team max", team_and_job({"max_runtime_s": 3600}, max_runtime_s=7200),
     "jobs[0].max_runtime_s: 7200 is more than team team-a's max_runtime_s (3600); such a "
     "job is refused at submit"),
    ("an owner with a space", with_job(owner="ann lee"), "jobs[0].owner: must not contain spaces"),
    ("an owner as a number", with_job(owner=7), "jobs[0].owner: must be a non-empty string"),
    # dependencies, arrays, simulated failures (issue 19)
    ("a dependency on an unknown job", with_job(depends_on=[{"job": "nope", "when": "ok"}]),
     "jobs[0].depends_on[0].job: unknown job nope"),
    ("a dependency of an unknown kind",
     make(jobs=[job("j0"), job("j1", depends_on=[{"job": "j0", "when": "afterok"}])]),
     "jobs[1].depends_on[0].when: must be one of ok, any, notok"),
    ("a dependency without its kind",
     make(jobs=[job("j0"), job("j1", depends_on=[{"job": "j0"}])]),
     "jobs[1].depends_on[0].when: required"),
    ("a dependency with a typo'd key",
     make(jobs=[job("j0"), job("j1", depends_on=[{"jobs": "j0", "when": "ok"}])]),
     "jobs[1].depends_on[0].jobs: unknown key; allowed: job, when"),
    ("dependencies not in a list", with_job(depends_on={"job": "j1", "when": "ok"}),
     "jobs[0].depends_on: must be a list"),
    ("a job depending on itself", with_job(depends_on=[{"job": "j1", "when": "any"}]),
     "jobs[0].depends_on: a job cannot depend on itself"),
    ("a dependency cycle (so a job waits for one submitted after it)",
     make(jobs=[job("a", depends_on=[{"job": "c", "when": "ok"}]),
                job("b", depends_on=[{"job": "a", "when": "ok"}]),
                job("c", depends_on=[{"job": "b", "when": "any"}])]),
     "jobs[0].depends_on: job c is submitted after a: a job may only depend on jobs "
     "submitted before it (earlier, or at the same instant earlier in the file)"),
    ("a dependency on a job submitted later, earlier in the file",
     make(jobs=[job("late", submit_at_s=50), job("early", depends_on=[
         {"job": "late", "when": "ok"}])]),
     "jobs[1].depends_on: job late is submitted after early: a job may only depend on "
     "jobs submitted before it (earlier, or at the same instant earlier in the file)"),
    ("an array of 10,001 tasks", with_job(array={"count": 10_001}),
     "jobs[0].array.count: must be at most 10000"),
    ("an array of no task", with_job(array={"count": 0, "max_running": 1}),
     "jobs[0].array.count: must be a positive integer"),
    ("an array running no task at once", with_job(array={"count": 4, "max_running": 0}),
     "jobs[0].array.max_running: must be a positive integer"),
    ("an array with a typo'd key", with_job(array={"count": 4, "max_runing": 2}),
     "jobs[0].array.max_runing: unknown key; allowed: count, max_running"),
    ("an array task named like another job",
     make(jobs=[job("sw", array={"count": 2}), job("sw_1")]),
     "jobs[0].array: its task sw_1 has the id of another job"),
    ("an array already running at t=0",
     with_job(submit_at_s=-10, queued=True, array={"count": 2}),
     "jobs[0].array: not for a job running or queued at t=0 (list its tasks as jobs of their "
     "own)"),
    ("a failure after 0 s", with_job(fails_after_s=0),
     "jobs[0].fails_after_s: must be a positive integer"),
]


@pytest.mark.parametrize(("case", "data", "message"), BAD, ids=[c[0] for c in BAD])
def test_a_malformed_scenario_is_refused_with_one_line_naming_the_field(
    case: str, data: Any, message: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_an_unknown_setting_lists_the_allowed_ones() -> None:
    with pytest.raises(ScenarioError) as err:
        validate_scenario(make(settings={"tick_intervals": 5}))
    assert str(err.value).startswith("settings.tick_intervals: unknown key; allowed: ")
    assert "tick_interval_s" in str(err.value) and "grace_period_s" in str(err.value)


def test_a_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario("name: x\njobs: [\n", source="bad.yaml")
    assert str(err.value).startswith("bad.yaml: not valid YAML (line ")


def test_a_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x",\n}')
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}: not valid JSON (line 2, column 1)")


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(tmp_path / "nope.yaml")
    assert "cannot read" in str(err.value) and "\n" not in str(err.value)


def test_json_and_yaml_give_the_same_scenario(tmp_path: Path) -> None:
    data = make(jobs=[job("j1", checkpointable=True, checkpoint_interval_s=60)],
                events=[{"at_s": 5, "set_quota": {"tenant": "team-a", "guaranteed_gpus": 8}}])
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    assert load_scenario(path) == validate_scenario(data)


def test_jobs_map_to_core_specs_in_file_order() -> None:
    sc = validate_scenario(make(jobs=[
        job("b", gpus=16, gpus_per_node=8, priority=3, max_runtime_s=200, checkpointable=True,
            checkpoint_interval_s=60, checkpoint_time_s=10, restart_s=5, min_gpus=8),
        job("a", submit_at_s=7, ignores_preempt=True),
    ]))
    b, a = sc.jobs
    assert (b.spec.seq, a.spec.seq) == (0, 1)
    assert b.spec.gpus_per_node == 8 and b.spec.priority == 3 and b.spec.elastic
    assert b.spec.checkpoint_interval_s == 60 and b.spec.restart_s == 5
    assert b.runtime_s == 100 and not b.ignores_preempt
    assert a.spec.submit_s == 7 and a.ignores_preempt and not a.spec.checkpointable


def test_nodes_are_named_after_their_pod_and_sort_in_node_order() -> None:
    sc = validate_scenario(make(cluster={"pods": [
        {"name": "pod-a", "nodes": 2, "gpus_per_node": 8, "gpu_type": "H100"},
        {"name": "pod-b", "nodes": 1001, "gpus_per_node": 4},
    ]}))
    names = [n.name for n in sc.node_specs()]
    assert names[:3] == ["pod-a-000", "pod-a-001", "pod-b-0000"]
    assert names[-1] == "pod-b-1000"
    assert names[2:] == sorted(names[2:])
    assert sc.node_specs()[0].gpu_type == "H100" and sc.node_specs()[0].pod == "pod-a"
    assert sc.total_gpus() == 16 + 4004


def test_settings_become_the_core_config_with_a_work_budget() -> None:
    sc = validate_scenario(make(settings={"tick_interval_s": 10, "grace_period_s": 30}))
    cfg = sc.config("fifo")
    assert (cfg.tick_interval_s, cfg.grace_period_s, cfg.policy) == (10, 30, "fifo")
    assert cfg.tick_work_budget == DEFAULT_TICK_WORK_BUDGET
    assert validate_scenario(make()).config().tick_interval_s == 5


def test_a_float_setting_takes_its_bounds_from_the_settings_table() -> None:
    # production takes SCHEDULER_QUEUE_STRETCH=0 (submit order): a scenario does too
    cfg = validate_scenario(make(settings={"queue_stretch": 0, "tick_budget_s": 3600})).config()
    assert (cfg.queue_stretch, cfg.tick_budget_s) == (0.0, 3600.0)


def test_guarantees_may_fill_the_cluster_exactly_and_move_between_teams() -> None:
    sc = validate_scenario(make(
        tenants=[{"name": "team-a", "guaranteed_gpus": 8},
                 {"name": "team-b", "guaranteed_gpus": 8}],
        events=[{"at_s": 5, "set_quota": {"tenant": "team-a", "guaranteed_gpus": 0}},
                {"at_s": 5, "set_quota": {"tenant": "team-b", "guaranteed_gpus": 16}}]))
    assert len(sc.events) == 2


def test_the_grace_cap_and_reservation_settings_reach_the_core() -> None:
    cfg = validate_scenario(make(settings={
        "max_grace_period_s": 90, "reservation_depth": 4, "reservation_plans_per_tick": 2,
    })).config()
    assert (cfg.max_grace_period_s, cfg.reservation_depth, cfg.reservation_plans_per_tick) \
        == (90, 4, 2)
    assert validate_scenario(make()).config().max_grace_period_s == 600


def test_the_shared_scenarios_are_valid() -> None:
    paths = sorted(scenario_dir().glob("*.yaml"))
    assert len(paths) >= 3
    for path in paths:
        assert load_scenario(path).jobs


def test_the_team_limits_and_the_owner_reach_the_core_specs() -> None:
    sc = validate_scenario(team_and_job(
        {"max_gpus_per_user": 8, "default_runtime_s": 600, "max_runtime_s": 3600},
        owner="ann", max_runtime_s=3600))
    (team,) = sc.tenant_specs()
    assert (team.max_gpus_per_user, team.default_runtime_s, team.max_runtime_s) == (8, 600, 3600)
    assert sc.jobs[0].spec.owner == "ann"
    # a job with no owner and no limit keeps both unset: the core gives it the default
    bare = validate_scenario(with_team(default_runtime_s=600)).jobs[0].spec
    assert (bare.owner, bare.max_runtime_s) == (None, None)


def test_an_array_becomes_its_tasks_in_the_place_of_the_array() -> None:
    sc = validate_scenario(make(jobs=[
        job("first"), job("sw", array={"count": 3, "max_running": 2}),
        job("after", depends_on=[{"job": "sw", "when": "any"}, {"job": "first", "when": "ok"}]),
    ]))
    assert [j.id for j in sc.jobs] == ["first", "sw_0", "sw_1", "sw_2", "after"]
    assert [j.spec.seq for j in sc.jobs] == [0, 1, 2, 3, 4]
    task = sc.jobs[2].spec
    assert (task.array_id, task.array_index, task.array_count, task.array_max_running) == (
        "sw", 1, 3, 2)
    # naming the array means each of its tasks
    assert sc.jobs[4].spec.depends_on == (
        ("sw_0", "any"), ("sw_1", "any"), ("sw_2", "any"), ("first", "ok"))


def test_a_cancel_event_may_name_an_array() -> None:
    sc = validate_scenario(make(jobs=[job("sw", array={"count": 2})],
                                events=[{"at_s": 5, "cancel": "sw"}]))
    assert sc.events[0].target == "sw"


def test_a_long_pipeline_is_valid() -> None:
    jobs = [job("s0")] + [job(f"s{i}", depends_on=[{"job": f"s{i - 1}", "when": "ok"}])
                          for i in range(1, 5000)]
    assert len(validate_scenario(make(jobs=jobs)).jobs) == 5000
