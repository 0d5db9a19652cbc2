"""What one team learns of another's jobs: their shape and team, never their ids or names.

A job's id is the key to the rest (through the API, a 403 named its team): wherever the
API or the dashboard would name a job the caller may not see (a refusal, a reservation's
basis, a preemption's plan and the candidates it weighed, the log's details), it says "a
job of team X". And an idempotency key is its owner's: a teammate reusing yours gets a
job of their own.
"""

from __future__ import annotations

import re

import pytest

from scheduler_app.models import Job

from .conftest import job_body, submit

pytestmark = pytest.mark.django_db


def names(text: str, pk: int) -> bool:
    """Does a core sentence name job ``pk`` ("to start 42 (", "evicted 17 and 42,",
    "kept 42: ...", "when 42 reaches")? Counts and sizes ("2 nodes", "pod1") are not ids."""
    return bool(re.search(rf"(?:\b(?:start|evicted|kept|killed|when|best:)|,| and) {pk}\b(?![.\d])"
                          rf"|^{pk}: ", text))


@pytest.mark.parametrize("how", ["get", "cancel"])
def test_a_403_for_another_teams_job_does_not_say_whose_it_is(world, how):
    job = submit(world, gpus=1)  # vision's
    client = world.client("other_team")  # nlp's
    response = (client.get(f"/api/v1/jobs/{job['id']}/") if how == "get" else
                client.post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json"))
    assert response.status_code == 403
    message = response.json()["errors"][0]["message"]
    assert "vision" not in message and "tenant" not in message, message
    assert "is not yours to see" in message


def test_a_reservations_basis_names_the_jobs_you_may_not_see_by_their_team(world, reclaim):
    gang, head = reclaim["gang"], reclaim["head"]
    theirs = world.client("other_team").get("/api/v1/cluster/reservations/").json()
    (plan,) = theirs
    assert plan["job"] == head
    assert not names(plan["basis"], gang), plan["basis"]
    assert "evicted a job of team vision" in plan["basis"]
    mine = world.client("researcher").get("/api/v1/cluster/reservations/").json()
    assert "to start a job of team nlp (" in mine[0]["basis"]
    assert not names(mine[0]["basis"], head) and names(mine[0]["basis"], gang)
    everything = world.client("operator").get("/api/v1/cluster/reservations/").json()
    assert f"to start {head} (" in everything[0]["basis"]
    # the summary carries the same rows
    assert world.client("other_team").get("/api/v1/cluster/").json()["reservations"] == theirs


def test_a_preemption_names_the_job_it_made_room_for_by_its_team(world, reclaim):
    gang, head = reclaim["gang"], reclaim["head"]
    detail = world.client("researcher").get(f"/api/v1/jobs/{gang}/").json()
    (preemption,) = detail["preemptions"]
    assert preemption["for_job"] is None
    shown = preemption["detail"]
    assert shown["for"] == "a job of team nlp"
    assert shown["why"].startswith("to start a job of team nlp (")
    assert shown["claim"]["victims"] == [str(gang)]  # the researcher's own job
    for text in [shown["why"], shown["words"], *shown["weighed"], preemption["why"]]:
        assert not names(text, head), text
    asked = [row for row in detail["history"] if row["reason"] == "PreemptRequested"]
    assert asked and all(row["detail"]["for"] == "a job of team nlp" for row in asked)
    # who may see both jobs reads the ids
    raw = world.client("operator").get(f"/api/v1/jobs/{gang}/").json()["preemptions"][0]
    assert raw["for_job"] == head and raw["detail"]["for"] == str(head)


def test_the_feed_names_other_teams_jobs_by_their_team(world, reclaim):
    head = reclaim["head"]
    feed = world.client("researcher").get(
        f"/api/v1/cluster/transitions/?job={reclaim['gang']}").json()["results"]
    asked = [row for row in feed if row["reason"] == "PreemptRequested"]
    assert asked and asked[0]["detail"]["for"] == "a job of team nlp"
    assert not names(asked[0]["detail"]["why"], head)
    raw = world.client("operator").get(
        f"/api/v1/cluster/transitions/?job={reclaim['gang']}").json()["results"]
    assert [r for r in raw if r["reason"] == "PreemptRequested"][0]["detail"]["for"] == str(head)


def test_an_idempotency_key_is_its_owners(world):
    """A teammate reusing your key gets a job of their own, not yours."""
    body = job_body(gpus=1, idempotency_key="nightly-1")
    mine = world.client("researcher").post("/api/v1/jobs/", body, format="json")
    theirs = world.client("teammate").post("/api/v1/jobs/", body, format="json")
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert theirs.json()["id"] != mine.json()["id"]
    assert theirs.json()["owner"] == "vision-r2"
    # each one's retry returns their own job, and writes nothing
    again = world.client("researcher").post("/api/v1/jobs/", body, format="json")
    assert again.status_code == 200 and again.json()["id"] == mine.json()["id"]
    again = world.client("teammate").post("/api/v1/jobs/", body, format="json")
    assert again.status_code == 200 and again.json()["id"] == theirs.json()["id"]
    # the same key with another spec is a conflict for its owner only
    other = job_body(gpus=2, idempotency_key="nightly-1")
    assert world.client("researcher").post("/api/v1/jobs/", other,
                                           format="json").status_code == 409
    assert world.client("lead").post("/api/v1/jobs/", other, format="json").status_code == 201
    assert Job.objects.count() == 3


def test_a_batch_key_is_its_owners(world):
    body = {"tenant": "vision", "idempotency_key": "sweep",
            "jobs": [{"name": f"lr-{i}", "gpus": 1} for i in range(3)]}
    mine = world.client("researcher").post("/api/v1/jobs/batch/", body, format="json")
    theirs = world.client("teammate").post("/api/v1/jobs/batch/", body, format="json")
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert {j["id"] for j in mine.json()["jobs"]}.isdisjoint(
        j["id"] for j in theirs.json()["jobs"])
    again = world.client("teammate").post("/api/v1/jobs/batch/", body, format="json")
    assert again.status_code == 200 and again.json()["jobs"] == theirs.json()["jobs"]
    assert Job.objects.count() == 6


def test_only_the_job_ids_of_a_sentence_are_rewritten(world):
    from scheduler_app.api.access import other_jobs

    mine = submit(world, gpus=1)["id"]
    hidden = submit(world, who="other_team", tenant="nlp", gpus=1)["id"]
    sentences = {
        f"to start {hidden} (16 GPUs) on 2 nodes in pod1: evicted {mine} and {hidden}, "
        f"0.7 GPU-hours lost; next best: {hidden} ({mine}.5 GPU-hours)":
        f"to start a job of team nlp (16 GPUs) on 2 nodes in pod1: evicted {mine} and a "
        f"job of team nlp, 0.7 GPU-hours lost; next best: a job of team nlp ({mine}.5 "
        "GPU-hours)",
        f"reserved 1 node (8 GPUs) in pod0 from t=1767603600, when {hidden} and 3 other "
        "jobs reach their declared limits":
        "reserved 1 node (8 GPUs) in pod0 from t=1767603600, when a job of team nlp and 3 "
        "other jobs reach their declared limits",
        f"{hidden}: interactive": "a job of team nlp: interactive",
        f"kept {mine}: last checkpoint 5 min ago": f"kept {mine}: last checkpoint 5 min ago",
        # the weighed candidates as "job N" (the sentences' other form)
        f"evicted job {hidden}: no checkpoint": "evicted a job of team nlp: no checkpoint",
        f"job {hidden}: protected, job {mine}: kept":
        f"a job of team nlp: protected, job {mine}: kept",
    }
    others = other_jobs(world.users["researcher"]).learn(texts=list(sentences))
    assert {others.text(s): s for s in sentences} == {v: k for k, v in sentences.items()}
    assert others.job_id(str(hidden)) is None and others.job_id(mine) == mine


def test_every_job_id_of_a_rows_detail_is_rewritten_at_any_depth(world):
    from scheduler_app.api.access import other_jobs

    mine = submit(world, gpus=1)["id"]
    hidden = submit(world, who="other_team", tenant="nlp", gpus=1)["id"]
    detail = {
        "for": str(hidden), "around": hidden, "reclaimed_from": [str(mine), str(hidden)],
        "claim": {"victims": [str(hidden)], "gpus": 8, "nodes": ["n0"]},
        "ends_before": [{"job": hidden, "start_s": 100}, {"job": mine, "start_s": 200}],
        "quota_of": {"job": hidden, "start_s": 300}, "uses_none_of": [hidden],
        "entitled_past": [hidden], "weighed": [f"kept {hidden}: 1 GPU"],
        "gpus": hidden, "alloc": {"n0": [hidden]},  # numbers that are no job ids stay
    }
    shown = other_jobs(world.users["researcher"]).learn(details=[detail]).detail(detail)
    nlp = "a job of team nlp"
    assert shown == {
        "for": nlp, "around": nlp, "reclaimed_from": [str(mine), nlp],
        "claim": {"victims": [nlp], "gpus": 8, "nodes": ["n0"]},
        "ends_before": [{"job": nlp, "start_s": 100}, {"job": mine, "start_s": 200}],
        "quota_of": {"job": nlp, "start_s": 300}, "uses_none_of": [nlp],
        "entitled_past": [nlp], "weighed": [f"kept {nlp}: 1 GPU"],
        "gpus": hidden, "alloc": {"n0": [hidden]},
    }
    assert detail["for"] == str(hidden)  # the row itself is left as it is



def test_a_basis_gives_its_instants_as_clock_times_not_epoch_seconds(world):
    """The core writes instants as t=<epoch seconds>; the API passed them on ("from
    t=1796626794"), and gpuq show printed them raw while gpuq why and the dashboard said
    "07:00 UTC" (2026-12-07). A reservation's basis and a job's estimate basis say the
    clock time, as why_pending's evidence does."""
    from scheduler_app.models import Reservation
    from scheduler_app.services.leader import LeaderLoop
    from scheduler_app.services.transitions import now_s

    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    submit(world, who="other_team", tenant="nlp", gpus=16, gpus_per_node=8,
           max_runtime_s=3600)
    assert not loop.step(now=now_s()).error
    waits = submit(world, gpus=32, gpus_per_node=8, max_runtime_s=3600)["id"]
    assert not loop.step(now=now_s()).error
    raw = Reservation.objects.get(job_id=waits).basis
    assert re.search(r"\bt=\d{9,11}\b", raw), raw  # the core's text has an instant
    client = world.client("researcher")
    (plan,) = client.get("/api/v1/cluster/reservations/").json()
    (summary,) = client.get("/api/v1/cluster/").json()["reservations"]
    detail = client.get(f"/api/v1/jobs/{waits}/").json()
    estimate = detail["estimate"]["basis"]
    for basis in (plan["basis"], summary["basis"], estimate):
        assert "t=" not in basis and re.search(r"\b\d\d:\d\d UTC\b", basis), basis
    assert any(estimate in line for line in detail["why_pending"]["evidence"]), estimate


def test_two_hidden_jobs_of_one_team_in_a_list_are_counted_not_repeated(world):
    # "when a job of team infra and a job of team infra reach their declared limits" read
    # as a slip (a pipeline author's session, 2026-12-07)
    from scheduler_app.selectors.redaction import OtherJobs

    a, b, c = (submit(world, gpus=1)["id"] for _ in range(3))
    mine = submit(world, gpus=1, who="other_team", tenant="nlp")["id"]
    nlp = Job.objects.get(pk=mine).tenant_id
    other = OtherJobs(lambda tenant_id, owner_id: tenant_id == nlp)
    text = f"reserved 1 node from t=5, when {a}, {mine}, {b} and {c} reach their declared limits"
    assert other.learn(texts=[text]).text(text) == (
        f"reserved 1 node from t=5, when 3 jobs of team vision and {mine} reach their "
        "declared limits")
    two = f"when {a} and {mine} reach"  # nothing repeated: as it was
    assert other.learn(texts=[two]).text(two) == f"when a job of team vision and {mine} reach"
