"""The db engine: the same scenario through models, the log, the services and the leader
gives the same transitions (job, from, to, reason, time) as the memory engine, and in
fact the same result file (tick timings aside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F

from scheduler_app.core.states import is_allowed
from scheduler_app.models import Job, Node, Tenant, Transition
from scheduler_app.sim.db_engine import DbEngineError, simulate_db
from scheduler_app.sim.engine import simulate
from scheduler_app.sim.invariants import check_result
from scheduler_app.sim.result import build_result
from scheduler_app.sim.scenario import Scenario, load_scenario, validate_scenario
from tests.foundation.test_replay import replay_verify

from .helpers import EXAMPLE_SCENARIOS, job, make, scenario_dir

pytestmark = pytest.mark.django_db

SHARED = sorted(p.stem for p in scenario_dir().glob("*.yaml"))
#: the slow one: 1,440 ticks of a 2-hour run through the database
HEAVY = {"reclaim-cheapest-victim"}


def without_timings(result: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(result))
    # the memory engine skips quiet ticks, the db engine ticks every interval: ``ticks``
    # (the ticks that ran) differs, what they decided does not
    out["metrics"] = {k: v for k, v in out["metrics"].items()
                      if not k.startswith("tick_ms") and k != "ticks"}
    return out


def moves(result: dict[str, Any]) -> dict[str, list[tuple[str | None, str, str, int]]]:
    """Every job's transitions as (from, to, reason, time)."""
    out = {}
    for job_id, rec in result["jobs"].items():
        before = None
        out[job_id] = []
        for t in rec["transitions"]:
            out[job_id].append((before, t["to"], t["reason"], t["at_s"]))
            before = t["to"]
    return out


def both(scenario: Scenario, policy: str = "full") -> tuple[dict, dict]:
    memory = build_result(simulate(scenario, policy=policy))
    db = build_result(simulate_db(scenario, policy=policy))
    return memory, db


def assert_equivalent(scenario: Scenario, policy: str = "full") -> dict[str, Any]:
    memory, db = both(scenario, policy)
    assert moves(db) == moves(memory)
    assert without_timings(db) == without_timings(memory)
    assert check_result(db, scenario) == []
    ok, output = replay_verify()
    assert ok, output
    return db


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in SHARED],
)
def test_every_shared_scenario_gives_the_same_transitions_on_both_engines(name):
    db = assert_equivalent(load_scenario(scenario_dir() / f"{name}.yaml"))
    # the run really went through the database: every transition of the result is a row
    moves_logged = Transition.objects.filter(kind="job").exclude(from_state=F("to_state"))
    assert moves_logged.count() == sum(len(j["transitions"]) for j in db["jobs"].values())


def events_scenario(**changes: Any) -> Scenario:
    """Node failures and repairs, drains, a quota change, a cancel, an elastic job, a job
    that ignores preemption, checkpointing and non-checkpointing jobs."""
    return validate_scenario(make(
        name="events",
        until_s=3000,
        cluster={"pods": [{"name": "pod-a", "nodes": 2, "gpus_per_node": 8},
                          {"name": "pod-b", "nodes": 2, "gpus_per_node": 8}]},
        tenants=[
            {"name": "team-a", "guaranteed_gpus": 16, "borrow_limit_gpus": 16},
            {"name": "team-b", "guaranteed_gpus": 16, "borrow_limit_gpus": 0},
            {"name": "team-c", "guaranteed_gpus": 0, "borrow_limit_gpus": 8,
             "initial_usage_gpu_s": 5000},
        ],
        jobs=[
            job("a-big", gpus=24, gpus_per_node=8, runtime_s=2000, max_runtime_s=2600,
                checkpointable=True, checkpoint_interval_s=300, checkpoint_time_s=30,
                restart_s=60),
            job("a-elastic", gpus=8, min_gpus=4, runtime_s=1500, checkpointable=True,
                checkpoint_interval_s=200, checkpoint_time_s=20, submit_at_s=5),
            job("c-free", tenant="team-c", gpus=4, preemptible=True, runtime_s=5000,
                ignores_preempt=True),
            job("b-plain", tenant="team-b", gpus=2, runtime_s=2500, submit_at_s=10),
            job("a-cancel", gpus=2, runtime_s=9000, submit_at_s=50),
            job("b-1", tenant="team-b", gpus=8, runtime_s=600, max_runtime_s=900,
                submit_at_s=100),
            job("b-2", tenant="team-b", gpus=16, gpus_per_node=8, runtime_s=800,
                submit_at_s=200, priority=3),
            job("b-huge", tenant="team-b", gpus=64, runtime_s=10, submit_at_s=20),
        ],
        events=[
            {"at_s": 300, "node_down": "pod-a-001"},
            {"at_s": 400, "cancel": "a-cancel"},
            {"at_s": 500, "node_drain": "pod-b-000"},
            {"at_s": 700, "set_quota": {"tenant": "team-a", "guaranteed_gpus": 8}},
            {"at_s": 700, "set_quota": {"tenant": "team-b", "guaranteed_gpus": 24}},
            {"at_s": 900, "node_up": "pod-a-001"},
            {"at_s": 950, "node_drain": "pod-a-001"},
            {"at_s": 1000, "node_down": "pod-b-000"},
            {"at_s": 1200, "node_undrain": "pod-a-001"},
            {"at_s": 1500, "node_up": "pod-b-000"},
        ],
        **changes,
    ))


@pytest.mark.parametrize("policy", ["full", "fifo", "priority-kill"])
def test_node_quota_and_cancel_events_give_the_same_transitions(policy):
    db = assert_equivalent(events_scenario(), policy)
    kinds = set(Transition.objects.values_list("kind", flat=True))
    assert kinds == {"job", "node", "tenant"}
    reasons = {t["reason"] for j in db["jobs"].values() for t in j["transitions"]}
    if policy == "full":
        # the scenario exercises what it claims to
        assert {"NodeFailed", "Cancelled", "NeverFits"} <= reasons, reasons


def test_every_logged_job_row_is_a_legal_move_and_a_transition_of_the_result():
    db = assert_equivalent(events_scenario())
    ids = dict(Job.objects.values_list("pk", "name"))
    logged: dict[str, list[tuple[str | None, str, str, int]]] = {}
    # self-transitions (Checkpointed, Shrunk) are logged but are not moves of the result
    for row in Transition.objects.filter(kind="job").exclude(from_state=F("to_state")):
        logged.setdefault(ids[row.job_id], []).append(
            (row.from_state, row.to_state, row.reason, int(row.at.timestamp()))
        )
        if row.from_state:
            assert is_allowed(row.from_state, row.to_state)
    assert logged == moves(db)


def test_the_db_engine_refuses_a_database_that_is_not_empty():
    Tenant.objects.create(name="someone-else")
    with pytest.raises(DbEngineError, match=r"not empty \(1 tenants\).*scratch database"):
        simulate_db(events_scenario())
    assert not Node.objects.exists()


def test_simulate_engine_db_writes_the_same_result_file(tmp_path: Path):
    # through the command: a scratch database of its own, this (test) database untouched
    path = scenario_dir() / "gang-no-deadlock.yaml"
    out_db, out_mem = tmp_path / "db.json", tmp_path / "mem.json"
    Tenant.objects.create(name="live-team")
    call_command("simulate", str(path), "--engine", "db", "--out", str(out_db), "--quiet")
    call_command("simulate", str(path), "--out", str(out_mem), "--quiet")
    db, memory = (json.loads(p.read_text()) for p in (out_db, out_mem))
    assert without_timings(db) == without_timings(memory)
    assert list(Tenant.objects.values_list("name", flat=True)) == ["live-team"]
    assert not Job.objects.exists() and not Transition.objects.exists()


@pytest.mark.parametrize("name", ["user-limit-waits", "team-default-runtime",
                                  "pipeline-dependencies", "array-max-running"])
def test_the_team_limit_and_pipeline_examples_give_the_same_transitions_on_both_engines(
        name):
    assert_equivalent(load_scenario(EXAMPLE_SCENARIOS / f"{name}.yaml"))


def test_per_user_caps_and_default_limits_agree_with_preemption_and_quota_events():
    # owners across two teams, a cap that makes jobs wait, a default limit that lets a
    # job backfill and stops another, preemption of a capped owner's borrowed GPUs
    sc = validate_scenario(make(
        name="team-limits",
        until_s=3000,
        cluster={"pods": [{"name": "pod-a", "nodes": 2, "gpus_per_node": 8},
                          {"name": "pod-b", "nodes": 2, "gpus_per_node": 8}]},
        events=[
            {"at_s": 300, "node_down": "pod-a-001"},
            {"at_s": 700, "set_quota": {"tenant": "team-a", "guaranteed_gpus": 8}},
            {"at_s": 900, "node_up": "pod-a-001"},
        ],
        tenants=[
            {"name": "team-a", "guaranteed_gpus": 16, "borrow_limit_gpus": 16,
             "max_gpus_per_user": 8, "default_runtime_s": 700, "max_runtime_s": 3000},
            {"name": "team-b", "guaranteed_gpus": 16, "borrow_limit_gpus": 0,
             "max_gpus_per_user": 16},
            {"name": "team-c", "guaranteed_gpus": 0, "borrow_limit_gpus": 8,
             "initial_usage_gpu_s": 5000},
        ],
        jobs=[
            job("a-ann-1", owner="ann", gpus=8, runtime_s=1200, max_runtime_s=1500,
                checkpointable=True, checkpoint_interval_s=300, checkpoint_time_s=30),
            job("a-ann-2", owner="ann", gpus=8, runtime_s=400, submit_at_s=5),
            job("a-bob-1", owner="bob", gpus=8, runtime_s=900, submit_at_s=10),
            job("a-bob-2", owner="bob", gpus=4, min_gpus=2, runtime_s=300, submit_at_s=20,
                max_runtime_s=600),
            job("b-ann", tenant="team-b", owner="ann", gpus=8, runtime_s=800,
                submit_at_s=30, max_runtime_s=900),
            job("b-cy", tenant="team-b", owner="cy", gpus=16, gpus_per_node=8,
                runtime_s=600, submit_at_s=200, priority=3),
            job("c-free", tenant="team-c", gpus=4, preemptible=True, runtime_s=5000),
        ],
    ))
    db = assert_equivalent(sc)
    assert "UserLimit" in {p["reason"] for p in db["jobs"]["a-ann-2"]["pending_reasons"]}
    # the default was given by the services (the db engine's submit), noted on the job
    assert Job.objects.filter(name="a-ann-2", runtime_from_team_default=True,
                              max_runtime_s=700).exists()


def test_dependencies_and_arrays_agree_with_preemption_failures_and_node_events():
    # a sweep borrowing GPUs is preempted by a guarantee coming back (a preempted task
    # keeps its slot), a node fails under a task, a pipeline's stage fails and dooms the
    # next, an afternotok branch runs, an array is cancelled as a whole, another task by
    # its name: the production path makes the same moves as the core in memory
    sc = validate_scenario(make(
        name="pipelines",
        until_s=6000,
        cluster={"pods": [{"name": "pod-a", "nodes": 4, "gpus_per_node": 8}]},
        tenants=[{"name": "team-a", "guaranteed_gpus": 8, "borrow_limit_gpus": 24},
                 {"name": "team-b", "guaranteed_gpus": 24, "borrow_limit_gpus": 0}],
        events=[{"at_s": 250, "node_down": "pod-a-001"},
                {"at_s": 900, "node_up": "pod-a-001"},
                {"at_s": 400, "cancel": "grid"},
                {"at_s": 450, "cancel": "sweep_5"}],
        jobs=[
            job("sweep", gpus=4, runtime_s=600, max_runtime_s=900, checkpointable=True,
                checkpoint_interval_s=100, checkpoint_time_s=20,
                array={"count": 8, "max_running": 4}),
            job("grid", gpus=1, runtime_s=100, max_runtime_s=200, submit_at_s=5,
                array={"count": 20, "max_running": 2}),
            job("prep", tenant="team-b", gpus=8, runtime_s=900, max_runtime_s=1000,
                submit_at_s=100, fails_after_s=300),
            job("train", tenant="team-b", gpus=16, runtime_s=600, max_runtime_s=800,
                submit_at_s=100, depends_on=[{"job": "prep", "when": "ok"}]),
            job("alert", tenant="team-b", gpus=8, runtime_s=60, max_runtime_s=100,
                submit_at_s=100, depends_on=[{"job": "prep", "when": "notok"}]),
            job("summary", gpus=1, runtime_s=30, max_runtime_s=60, submit_at_s=10,
                depends_on=[{"job": "sweep", "when": "any"}]),
            job("b-big", tenant="team-b", gpus=16, runtime_s=500, max_runtime_s=600,
                submit_at_s=200),
        ],
    ))
    db = assert_equivalent(sc)
    jobs = db["jobs"]
    assert jobs["train"]["state"] == "CANCELLED" and jobs["alert"]["first_start_s"] == 400
    assert any(j["preemptions"] for k, j in jobs.items() if k.startswith("sweep_"))
    assert jobs["grid_19"]["state"] == "CANCELLED" and jobs["sweep_5"]["state"] == "CANCELLED"
    assert jobs["summary"]["state"] == "COMPLETED"
