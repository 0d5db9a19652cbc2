"""The carried-in state extension (docs/scenarios.md): a scenario may start with jobs
already running or queued at t=0, nodes listed by name, and the memory engine restores
them through the core's restore path."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.sim.cli import SimulateError, run_simulation
from scheduler_app.sim.scenario import ScenarioError, validate_scenario

from .helpers import run


def carried(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "carried", "until_s": 5000,
        "cluster": {"pods": [{"name": "p", "nodes": [
            {"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8, "rail": 1}]}]},
        "tenants": [{"name": "a", "guaranteed_gpus": 8, "borrow_limit_gpus": 8},
                    {"name": "b", "guaranteed_gpus": 8, "borrow_limit_gpus": 8}],
        "jobs": [
            {"id": "r1", "tenant": "a", "submit_at_s": -500, "gpus": 8, "runtime_s": 1000,
             "max_runtime_s": 1000, "checkpointable": True, "checkpoint_interval_s": 100,
             "running": {"started_at_s": -400, "alloc": {"n1": 8}, "last_checkpoint_s": -50}},
            {"id": "r2", "tenant": "a", "submit_at_s": -500, "gpus": 8, "runtime_s": 700,
             "max_runtime_s": 1000,
             "running": {"started_at_s": -300, "alloc": {"n2": list(range(8))}}},
            {"id": "q1", "tenant": "b", "submit_at_s": -100, "queued": True, "gpus": 8,
             "runtime_s": 300, "max_runtime_s": 300},
        ],
    }
    data.update(changes)
    return data


def test_running_jobs_keep_their_gpus_and_end_when_their_work_is_done() -> None:
    result = run(carried(jobs=carried()["jobs"][1:2]))
    r2 = result["jobs"]["r2"]
    # 700 s of work, 300 done by t=0: it ends at 400, on the GPUs it held
    assert r2["runs"] == [{"start_s": -300, "end_s": 400, "alloc": {"n2": 8},
                           "end": "COMPLETED"}]
    assert [t["to"] for t in r2["transitions"]] == [
        "SUBMITTED", "QUEUED", "PLACING", "RUNNING", "COMPLETED"]


def test_a_queued_job_is_in_its_queue_at_t0_and_reclaims_its_guarantee() -> None:
    result = run(carried())
    # team b is owed 8 GPUs, team a borrows 8: the cheapest victim (checkpoint 50 s ago)
    # is asked at t=0, checkpoints and leaves; q1 starts on its GPUs
    assert [(p["at_s"], p["victim"], p["for"], p["cost_s"]) for p in result["preemptions"]] \
        == [(0, "r1", "q1", 50)]
    q1 = result["jobs"]["q1"]
    assert q1["runs"][0]["alloc"] == {"n1": 8} and q1["first_start_s"] == 60
    # r1 resumes from the progress it saved when asked (400 s): 600 s left
    r1 = result["jobs"]["r1"]
    assert r1["runs"][-1]["end"] == "COMPLETED"
    assert r1["runs"][-1]["end_s"] - r1["runs"][-1]["start_s"] == 600


def test_a_carried_in_queued_job_is_not_submitted_again() -> None:
    result = run(carried())
    steps = [t["to"] for t in result["jobs"]["q1"]["transitions"]]
    assert steps.count("SUBMITTED") == 1 and result["jobs"]["q1"]["transitions"][0]["at_s"] == -100


def test_usage_carried_in_orders_the_teams() -> None:
    jobs = [{"id": f"{t}{i}", "tenant": t, "submit_at_s": -10, "queued": True, "gpus": 8,
             "runtime_s": 100, "max_runtime_s": 100} for i in range(2) for t in "ab"]
    fresh = run(carried(jobs=jobs))
    used = run(carried(jobs=jobs, tenants=[
        {"name": "a", "guaranteed_gpus": 8, "borrow_limit_gpus": 8,
         "initial_usage_gpu_s": 1e6},
        {"name": "b", "guaranteed_gpus": 8, "borrow_limit_gpus": 8}]))
    # one team fills the cluster (16 GPUs) first: with a's usage, b goes first
    assert fresh["jobs"]["a0"]["first_start_s"] == 0
    assert used["jobs"]["b0"]["first_start_s"] == 0 and used["jobs"]["b1"]["first_start_s"] == 0
    assert used["jobs"]["a0"]["first_start_s"] > 0


@pytest.mark.parametrize(("change", "message"), [
    ({"submit_at_s": -1, "running": None},
     "jobs[0].submit_at_s: must be a non-negative integer"),
    ({"running": {"started_at_s": -600, "alloc": {"n1": 8}}},
     "jobs[0].running.started_at_s: before the job is submitted (-500)"),
    ({"running": {"started_at_s": -400, "alloc": {"n9": 8}}},
     "jobs[0].running.alloc.n9: unknown node n9 (the scenario's nodes: n1, n2)"),
    ({"running": {"started_at_s": -400, "alloc": {"n1": 4}}},
     "jobs[0].running.alloc: holds 4 GPUs; the job runs on 8"),
    ({"running": {"started_at_s": -400, "alloc": {"n1": [0, 0, 1, 2, 3, 4, 5, 6]}}},
     "jobs[0].running.alloc.n1: must list distinct GPU indices"),
    ({"running": {"started_at_s": -400, "alloc": {"n1": 8}, "progress_s": 1000}},
     "jobs[0].running.progress_s: must be less than runtime_s (1000): a job that has done "
     "its work is not running"),
    ({"running": {"started_at_s": 10, "alloc": {"n1": 8}}},
     "jobs[0].running.started_at_s: must be at most 0"),
    ({"queued": True},
     "jobs[0].queued: a job is queued or running at t=0, not both"),
    ({"preemption_times_s": [-5, -10]}, "jobs[0].preemption_times_s: must be in time order"),
])
def test_a_malformed_carried_in_job_names_its_field(change: dict[str, Any],
                                                   message: str) -> None:
    data = carried()
    data["jobs"][0].update(change)
    if data["jobs"][0].get("running") is None:
        data["jobs"][0].pop("running", None)
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert str(err.value) == message


def test_a_gpu_held_twice_is_refused() -> None:
    data = carried()
    data["jobs"][1]["running"]["alloc"] = {"n1": [7]}
    data["jobs"][1]["gpus"] = 1
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert str(err.value) == "jobs[1].running.alloc.n1: GPU 7 of n1 is held by job r1 already"


def test_listed_nodes_name_their_fields() -> None:
    data = carried(cluster={"pods": [{"name": "p", "nodes": [{"name": "n1", "gpus": 0}]}]})
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert str(err.value) == "cluster.pods[0].nodes[0].gpus: must be a positive integer"


def test_the_db_engine_refuses_a_carried_in_scenario(tmp_path) -> None:
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(carried()))
    with pytest.raises(SimulateError, match="--engine db: .*only the memory engine"):
        run_simulation(str(path), str(tmp_path / "r.json"), engine="db", quiet=True)


# ------------------------------------------------------------------ arrays and dependencies
def _task(i: int, *, running: str | None = None, **kw: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"id": f"412_{i}", "tenant": "a", "submit_at_s": -600, "gpus": 2,
                           "runtime_s": 500, "max_runtime_s": 600,
                           "array_task": {"array": "412", "index": i, "count": 5,
                                          "max_running": 2}, **kw}
    if running:
        job["running"] = {"started_at_s": -100, "alloc": {running: 2}}
    else:
        job["queued"] = True
    return job


def test_carried_in_array_tasks_keep_their_cap_and_dependents_their_wait() -> None:
    # two tasks of array 412 run at t=0 (its max_running), three wait; "after" waits for
    # the running r2. Whatever order the file lists them in, at most two tasks run at once
    # and "after" starts only once r2 has ended.
    jobs = [_task(3), _task(0, running="n1"), _task(4), _task(1, running="n1"), _task(2),
            {"id": "after", "tenant": "b", "submit_at_s": -50, "queued": True, "gpus": 2,
             "runtime_s": 100, "max_runtime_s": 100,
             "depends_on": [{"job": "r2", "when": "ok"}]},
            carried()["jobs"][1]]
    result = run(carried(jobs=jobs))
    spans = [(run_["start_s"], run_["end_s"]) for k, j in result["jobs"].items()
             if k.startswith("412_") for run_ in j["runs"]]
    assert len(spans) == 5
    assert all(sum(1 for a, b in spans if a <= t < b) <= 2 for t, _ in spans)
    reasons = {p["reason"] for p in result["jobs"]["412_2"]["pending_reasons"]}
    assert reasons == {"ArrayLimit"}
    assert result["jobs"]["after"]["first_start_s"] == 400  # r2 ends at 400
    assert {p["reason"] for p in result["jobs"]["after"]["pending_reasons"]} == {"Dependency"}


@pytest.mark.parametrize(("task", "message"), [
    ({"array": "412", "index": 5, "count": 5}, "jobs[0].array_task.index: must be at most 4"),
    ({"array": "412", "index": 0}, "jobs[0].array_task.count: required"),
    ({"array": "412", "index": 0, "count": 5, "max_running": 0},
     "jobs[0].array_task.max_running: must be a positive integer"),
])
def test_a_malformed_carried_in_task_names_its_field(task: dict[str, Any],
                                                     message: str) -> None:
    job = {**_task(0), "array_task": task}
    with pytest.raises(ScenarioError) as err:
        validate_scenario(carried(jobs=[job]))
    assert str(err.value) == message


def test_only_a_carried_in_job_is_a_task_of_an_existing_array() -> None:
    job = {k: v for k, v in _task(0).items() if k != "queued"}
    job["submit_at_s"] = 0
    with pytest.raises(ScenarioError) as err:
        validate_scenario(carried(jobs=[job]))
    assert str(err.value) == ("jobs[0].array_task: only for a job running or queued at t=0 "
                              "(use array to make the tasks of a new array)")


def stopping(asked_s: int, **preempting: Any) -> dict[str, Any]:
    """``carried()`` with r1 (checkpointable, 60 s to write a checkpoint) asked at
    ``asked_s`` to make room for q1, its node n1 claimed for q1."""
    data = carried()
    r1 = data["jobs"][0]
    r1["checkpoint_time_s"] = 60
    r1["running"]["preempting"] = {"requested_at_s": asked_s, "for": "q1", **preempting}
    data["claims"] = [{"job": "q1", "gpus": 8, "nodes": ["n1"], "victims": ["r1"],
                       "at_s": asked_s}]
    return data


def test_a_job_being_preempted_keeps_its_gpus_until_its_checkpoint_is_written() -> None:
    # asked 20 s before t=0, 60 s to checkpoint: it leaves at 40 and its beneficiary
    # starts there, on its node; before, it was back in its queue at t=0 and its GPUs
    # were anyone's at once
    result = run(stopping(-20))
    r1, q1 = result["jobs"]["r1"], result["jobs"]["q1"]
    assert r1["runs"][0] == {"start_s": -400, "end_s": 40, "alloc": {"n1": 8},
                             "end": "PREEMPTED"}
    assert [(t["at_s"], t["to"]) for t in r1["transitions"][2:7]] == [
        (-400, "PLACING"), (-400, "RUNNING"), (-20, "PREEMPT_REQUESTED"),
        (0, "CHECKPOINTING"), (40, "PREEMPTED")]
    assert q1["first_start_s"] == 40 and q1["runs"][0]["alloc"] == {"n1": 8}
    assert result["preemptions"] == []  # asked before the run: not one of its decisions


@pytest.mark.parametrize(("asked_s", "change", "left_at"), [
    (-200, {"acknowledged": True}, 0),  # its checkpoint was due at -140: it leaves at once
    (-20, {"acknowledged": True}, 40),
])
def test_a_checkpointing_job_leaves_when_its_checkpoint_is_written(asked_s, change, left_at):
    result = run(stopping(asked_s, **change))
    assert result["jobs"]["r1"]["runs"][0]["end_s"] == left_at
    assert result["jobs"]["q1"]["first_start_s"] == left_at


def test_a_job_that_cannot_checkpoint_leaves_at_once_and_one_that_ignores_is_killed():
    data = stopping(-20)
    r1 = data["jobs"][0]
    for key in ("checkpointable", "checkpoint_interval_s", "checkpoint_time_s"):
        r1.pop(key)
    r1["running"].pop("last_checkpoint_s")
    assert run(data)["jobs"]["r1"]["runs"][0]["end_s"] == 0
    data = stopping(-20)
    data["jobs"][0]["ignores_preempt"] = True
    result = run(data)  # killed at the end of its grace (its 60 s), from the request
    assert result["jobs"]["r1"]["runs"][0]["end_s"] == 40
    assert result["jobs"]["r1"]["transitions"][5]["reason"] == "GraceExpired"


def reserved(reservation: dict[str, Any] | None) -> dict[str, Any]:
    """n1 idle, r2 on n2 until 400; "head" (team b, both nodes) and "other" (team c, an
    hour on one node; its team is ahead of b in fair share) wait."""
    data = carried(
        tenants=[{"name": "a", "guaranteed_gpus": 8, "borrow_limit_gpus": 8},
                 {"name": "b", "guaranteed_gpus": 4, "borrow_limit_gpus": 12,
                  "initial_usage_gpu_s": 1e6},
                 {"name": "c", "guaranteed_gpus": 4, "borrow_limit_gpus": 12}],
        jobs=[carried()["jobs"][1],
              {"id": "head", "tenant": "b", "submit_at_s": -200, "queued": True, "gpus": 16,
               "gpus_per_node": 8, "runtime_s": 600, "max_runtime_s": 600},
              {"id": "other", "tenant": "c", "submit_at_s": -100, "queued": True, "gpus": 8,
               "runtime_s": 3600, "max_runtime_s": 3600}])
    if reservation is not None:
        data["reservations"] = [reservation]
    return data


def test_a_published_reservation_holds_its_gpus_for_its_job() -> None:
    plan = {"job": "head", "start_s": 400, "basis": "r2 ends",
            "alloc": {"n1": list(range(8)), "n2": list(range(8))}, "planned_at_s": -30}
    kept = run(reserved(plan))["jobs"]
    # the head starts when the live scheduler said; the other team's hour-long job does
    # not take the idle node at t=0 (it would run past the reserved start)
    assert kept["head"]["first_start_s"] == 400 and kept["other"]["first_start_s"] == 1000
    fresh = run(reserved(None))["jobs"]  # planned afresh, the other team's job goes first
    assert fresh["other"]["first_start_s"] == 0 and fresh["head"]["first_start_s"] == 3600


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["jobs"][0]["running"]["preempting"].update(requested_at_s=-401),
     "jobs[0].running.preempting.requested_at_s: before its run started (-400)"),
    (lambda d: d["jobs"][0]["running"]["preempting"].update(**{"for": "nope"}),
     "jobs[0].running.preempting.for: unknown job nope"),
    (lambda d: d["jobs"][0]["running"]["preempting"].update(when=3),
     "jobs[0].running.preempting.when: unknown key; allowed: acknowledged, for, "
     "requested_at_s"),
    (lambda d: d["jobs"][1]["running"].update(preempting={"requested_at_s": -5,
                                                          "acknowledged": True}),
     "jobs[1].running.preempting.acknowledged: only a checkpointable job acknowledges (one "
     "that cannot checkpoint exits when asked)"),
    (lambda d: d["claims"][0].update(job="r2"),
     "claims[0].job: job r2 is not queued at t=0 (queued: true)"),
    (lambda d: d["claims"][0].update(victims=["r2"]),
     "claims[0].victims[0]: job r2 is not being preempted at t=0 (running.preempting)"),
    (lambda d: d["claims"][0].update(nodes=["n7"]),
     "claims[0].nodes[0]: unknown node n7 (the scenario's nodes: n1, n2)"),
    (lambda d: d.update(reservations=[{"job": "q1", "start_s": -5, "alloc": {"n1": [0]}}]),
     "reservations[0].start_s: must be a non-negative integer"),
    (lambda d: d.update(reservations=[{"job": "q1", "start_s": 5, "alloc": {"n1": [8]}}]),
     "reservations[0].alloc.n1[0]: must be at most 7"),
    (lambda d: d.update(reservations=[{"job": "q1", "start_s": 5, "alloc": {"n1": [0]}},
                                      {"job": "q1", "start_s": 5, "alloc": {"n2": [0]}}]),
     "reservations[1].job: job q1 has a reservation already"),
    (lambda d: d.update(reservations=[{"job": "q9", "start_s": 5, "alloc": {"n1": [0]}}]),
     "reservations[0].job: unknown job q9"),
])
def test_a_malformed_carried_in_plan_names_its_field(change, message: str) -> None:
    data = stopping(-20)
    change(data)
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert str(err.value) == message
