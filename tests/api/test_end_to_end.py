"""A scenario driven through the API alone (the tick is the leader's step, as the
scheduler process runs it): submit, tick, the agent confirms, checkpoint, an entitled
team's job arrives and preempts the borrower, the agent acknowledges and exits, the
borrower is requeued with its resume pointer; the transition history matches."""

from __future__ import annotations

import pytest
from django.utils.dateparse import parse_datetime

from scheduler_app.services.leader import LeaderLoop

pytestmark = pytest.mark.django_db


def test_submit_tick_confirm_checkpoint_preempt_ack_exit_through_the_api(world):
    leader = LeaderLoop(holder="e2e-leader", ttl_s=15)
    vision = world.client("researcher")
    nlp = world.client("other_team")
    agents = {n.name: world.client(f"agent:{n.name}") for n in world.nodes}

    def tick() -> None:
        report = leader.step()
        assert report.leader and not report.error, report.line()

    def job(client, pk: int) -> dict:
        response = client.get(f"/api/v1/jobs/{pk}/")
        assert response.status_code == 200
        return response.json()

    # 1. vision (16 guaranteed + 16 borrow) takes the whole cluster: its guaranteed 16 with
    # one job, 16 borrowed with a checkpointable training run
    base = vision.post("/api/v1/jobs/", {
        "tenant": "vision", "name": "llm-eval", "gpus": 16, "gpus_per_node": 8,
    }, format="json", HTTP_IDEMPOTENCY_KEY="eval-1")
    assert base.status_code == 201, base.json()
    big = vision.post("/api/v1/jobs/", {
        "tenant": "vision", "name": "llm-pretrain", "gpus": 16, "gpus_per_node": 8,
        "checkpointable": True, "checkpoint_interval_s": 1800, "checkpoint_time_s": 300,
        "restart_s": 60,
    }, format="json", HTTP_IDEMPOTENCY_KEY="pretrain-1")
    assert big.status_code == 201, big.json()
    base_id, big_id = base.json()["id"], big.json()["id"]

    # 2. the tick places both gangs, whole nodes each
    tick()
    placed = job(vision, big_id)
    assert placed["state"] == "PLACING"
    assert sorted(len(ix) for ix in placed["allocation"].values()) == [8, 8]
    big_nodes = sorted(placed["allocation"])
    assert not set(big_nodes) & set(job(vision, base_id)["allocation"])

    # 3. every agent is told to start its share; one start confirmation runs a gang
    for name, agent in agents.items():
        starts = agent.get("/api/v1/agent/assignments/").json()["start"]
        want = big_id if name in big_nodes else base_id
        assert [s["job_id"] for s in starts] == [want]
    here = agents[big_nodes[0]]
    confirmed = here.post(f"/api/v1/agent/jobs/{big_id}/start/", {}, format="json")
    assert confirmed.status_code == 200 and confirmed.json()["state"] == "RUNNING"
    other = next(n for n in agents if n not in big_nodes)
    assert agents[other].post(f"/api/v1/agent/jobs/{base_id}/start/", {},
                              format="json").status_code == 200

    # 4. a checkpoint
    ckpt = here.post(f"/api/v1/agent/jobs/{big_id}/checkpoint/",
                     {"resume_pointer": "s3://ckpt/llm/step-1000"}, format="json")
    assert ckpt.status_code == 200, ckpt.json()
    tick()

    tenants = {t["name"]: t for t in vision.get("/api/v1/tenants/").json()}
    assert tenants["vision"]["borrowed_gpus"] == 16
    assert tenants["vision"]["borrowed_from"] == [{"tenant": "nlp", "gpus": 16}]
    assert tenants["nlp"]["lent_to"] == [{"tenant": "vision", "gpus": 16}]

    # 5. nlp, entitled to its 16 guaranteed GPUs, submits: the tick asks the borrower to stop
    # (vision keeps its guaranteed 16: its share falls to nlp's once nlp's job runs, no lower)
    small = nlp.post("/api/v1/jobs/", {"tenant": "nlp", "name": "bert-finetune", "gpus": 16,
                                       "gpus_per_node": 8, "max_runtime_s": 7200},
                     format="json")
    assert small.status_code == 201, small.json()
    small_id = small.json()["id"]
    tick()
    asked = job(vision, big_id)
    assert asked["state"] == "PREEMPT_REQUESTED"
    # the job it made room for is another team's: named by its team, not its id
    assert [p["for_job"] for p in asked["preemptions"]] == [None]
    assert asked["preemptions"][0]["detail"]["for"] == "a job of team nlp"
    assert asked["preemptions"][0]["why"]
    assert asked["preemptions"][0]["detail"]["why"].startswith("to start a job of team nlp (")
    # still stopping: the estimate it was chosen on, nothing lost yet
    assert asked["preemptions"][0]["cost_s"] is not None
    assert [(p["stopped_at"], p["work_lost_s"]) for p in asked["preemptions"]] == [(None, None)]
    waiting = job(nlp, small_id)
    assert waiting["state"] == "QUEUED"
    assert waiting["pending_reason"] == "Preempting"

    # 6. the agent sees the request with its grace deadline, acknowledges, exits
    preempt = here.get("/api/v1/agent/assignments/").json()["preempt"]
    assert [(p["job_id"], p["state"]) for p in preempt] == [(big_id, "PREEMPT_REQUESTED")]
    assert preempt[0]["grace_deadline"]
    ack = here.post(f"/api/v1/agent/jobs/{big_id}/preempt-ack/", {}, format="json")
    assert ack.status_code == 200 and ack.json()["state"] == "CHECKPOINTING"
    gone = here.post(f"/api/v1/agent/jobs/{big_id}/exit/", {"outcome": "preempted"},
                     format="json")
    assert gone.status_code == 200 and gone.json()["state"] == "PREEMPTED"
    # what it really lost: the work from its checkpoint to its stop, read from the log
    stopped = job(vision, big_id)
    at = {h["reason"]: parse_datetime(h["at"]) for h in stopped["history"]}
    [loss] = stopped["preemptions"]
    assert parse_datetime(loss["checkpoint_at"]) == at["Checkpointed"]
    assert parse_datetime(loss["stopped_at"]) == at["Preempted"]
    assert loss["work_lost_s"] == int((at["Preempted"] - at["Checkpointed"]).total_seconds())

    # 7. the tick requeues the borrower (with its resume pointer) and places nlp's job
    tick()
    requeued = job(vision, big_id)
    assert requeued["state"] == "QUEUED"
    assert requeued["resume_pointer"] == "s3://ckpt/llm/step-1000"
    # waiting for its next run: no start (its last run's is in the history), as Slurm
    # resets StartTime on a requeue (it showed the old one: found 2026-12-07)
    assert requeued["started_at"] is None
    listed = vision.get("/api/v1/jobs/?state=QUEUED").json()["results"]
    assert [j["started_at"] for j in listed if j["id"] == big_id] == [None]
    assert job(nlp, small_id)["state"] == "PLACING"

    # the history, as the API shows it
    history = [(h["from_state"], h["to_state"], h["reason"], h["actor"])
               for h in requeued["history"]]
    assert history == [
        (None, "SUBMITTED", "Submitted", "user"),
        ("SUBMITTED", "QUEUED", "Admitted", "user"),
        ("QUEUED", "PLACING", "Placed", "scheduler"),
        ("PLACING", "RUNNING", "Started", "agent"),
        ("RUNNING", "RUNNING", "Checkpointed", "agent"),
        ("RUNNING", "PREEMPT_REQUESTED", "PreemptRequested", "scheduler"),
        ("PREEMPT_REQUESTED", "CHECKPOINTING", "CheckpointStarted", "agent"),
        ("CHECKPOINTING", "PREEMPTED", "Preempted", "agent"),
        ("PREEMPTED", "QUEUED", "Requeued", "scheduler"),
    ]
    # and the feed carries the same rows in the same order
    feed = world.client("operator").get(
        f"/api/v1/cluster/transitions/?job={big_id}&limit=1000").json()["results"]
    assert [(r["from_state"], r["to_state"]) for r in feed] == [h[:2] for h in history]

    # 8. nlp's job starts and finishes; the borrower comes back from its checkpoint
    placed_on = sorted(job(nlp, small_id)["allocation"])
    agent = agents[placed_on[0]]
    assert agent.post(f"/api/v1/agent/jobs/{small_id}/start/", {},
                      format="json").status_code == 200
    done = agent.post(f"/api/v1/agent/jobs/{small_id}/exit/",
                      {"outcome": "completed", "exit_code": 0}, format="json")
    assert done.json()["state"] == "COMPLETED"
    tick()
    assert job(vision, big_id)["state"] == "PLACING"
    restart = agents[sorted(job(vision, big_id)["allocation"])[0]].get(
        "/api/v1/agent/assignments/").json()["start"]
    assert restart[0]["resume_pointer"] == "s3://ckpt/llm/step-1000"
    assert restart[0]["env"]["SCHED_RESUME_POINTER"] == "s3://ckpt/llm/step-1000"
