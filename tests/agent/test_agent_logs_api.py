"""The log tail endpoints (scheduler_app/api/agent_logs.py): an agent pushes the tail of
a job it runs, whoever may see the job reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app.core.states import JobState, Reason
from tests.api.conftest import World
from tests.foundation.factories import T0, job_in_state, move

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def push(world: World, who: str, job_id: int, **body: str):
    return world.client(who).post(f"/api/v1/agent/jobs/{job_id}/log/", body, format="json")


def test_an_agent_pushes_the_tail_of_its_job_and_the_teams_lead_reads_it(world):
    job = job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[0])
    response = push(world, "agent:n0", job.pk, stdout="step 41\nstep 42\n", stderr="warn\n")
    assert response.status_code == 200, response.json()

    tail = world.client("lead").get(f"/api/v1/jobs/{job.pk}/log/").json()
    assert tail["stdout"] == "step 41\nstep 42\n" and tail["stderr"] == "warn\n"
    assert tail["node"] == "n0" and tail["at"] is not None

    push(world, "agent:n0", job.pk, stdout="step 43\n")
    assert world.client("lead").get(f"/api/v1/jobs/{job.pk}/log/").json()["stdout"] == "step 43\n"


def test_a_job_without_a_pushed_log_has_an_empty_tail(world):
    job = job_in_state(JobState.QUEUED, tenant=world.vision, node=world.nodes[0])
    tail = world.client("operator").get(f"/api/v1/jobs/{job.pk}/log/").json()
    assert tail == {"job_id": job.pk, "node": None, "at": None, "stdout": "", "stderr": ""}


def test_an_agent_may_not_push_the_log_of_a_job_that_never_ran_on_its_node(world):
    job = job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[0])
    response = push(world, "agent:n1", job.pk, stdout="forged")
    assert response.status_code == 403
    assert response.json()["errors"][0]["code"] == "not_on_node"
    assert world.client("operator").get(f"/api/v1/jobs/{job.pk}/log/").json()["stdout"] == ""


def test_the_last_tail_of_a_finished_job_is_accepted_from_the_node_that_ran_it(world):
    job = job_in_state(JobState.COMPLETED, tenant=world.vision, node=world.nodes[0])
    assert push(world, "agent:n0", job.pk, stdout="done\n").status_code == 200


def test_a_node_the_job_has_left_may_not_replace_the_log_of_its_run_elsewhere(world):
    """A node where the job once ran pushed a tail for it while it ran on another node,
    and the job's visible log was that stale node's output until the current node pushed
    again (found by a user session, 2026-12-07)."""
    job = job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[0])
    assert push(world, "agent:n0", job.pk, stdout="first run\n").status_code == 200
    later = T0 + timedelta(hours=1)
    move(job, JobState.QUEUED, Reason.NODE_FAILED, at=later)
    move(job, JobState.PLACING, Reason.PLACED, at=later + timedelta(seconds=5),
         alloc={"n1": [0, 1, 2, 3]})
    move(job, JobState.RUNNING, Reason.STARTED, at=later + timedelta(seconds=9))
    assert push(world, "agent:n1", job.pk, stdout="second run\n").status_code == 200

    stale = push(world, "agent:n0", job.pk, stdout="FAKE LOG from n0")
    assert stale.status_code == 403
    assert stale.json()["errors"][0]["code"] == "not_on_node"
    assert "no longer runs on node n0" in stale.json()["errors"][0]["message"]
    tail = world.client("lead").get(f"/api/v1/jobs/{job.pk}/log/").json()
    assert (tail["node"], tail["stdout"]) == ("n1", "second run\n")


def test_only_those_who_may_see_the_job_read_its_log(world):
    job = job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[0])
    push(world, "agent:n0", job.pk, stdout="secret\n")
    assert world.client("other_team").get(f"/api/v1/jobs/{job.pk}/log/").status_code == 403
    assert world.client("agent:n0").get(f"/api/v1/jobs/{job.pk}/log/").status_code == 403
    assert world.client(None).get(f"/api/v1/jobs/{job.pk}/log/").status_code == 401
    assert world.client("lead").get("/api/v1/jobs/999999/log/").status_code == 404


def test_a_tail_longer_than_the_limit_or_not_text_is_refused(world):
    job = job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[0])
    too_long = push(world, "agent:n0", job.pk, stdout="x" * 16385)
    assert too_long.status_code == 400
    assert too_long.json()["errors"][0]["field"] == "stdout"
    wrong = world.client("agent:n0").post(f"/api/v1/agent/jobs/{job.pk}/log/",
                                          {"stdout": 7}, format="json")
    assert wrong.status_code == 400
    assert push(world, "agent:n0", 999999, stdout="x").status_code == 404


def test_an_empty_tail_from_one_node_of_a_gang_does_not_hide_anothers_output(world):
    # each node's agent sends its tail at the end of the run even if empty (so that a run
    # that wrote nothing reads as one that ran): rank 1's empty tail replaced rank 0's
    # output (a review of 2026-12-07)
    job = job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[0])
    later = T0 + timedelta(hours=1)
    move(job, JobState.QUEUED, Reason.NODE_FAILED, at=later)
    move(job, JobState.PLACING, Reason.PLACED, at=later + timedelta(seconds=5),
         alloc={"n0": [0, 1, 2, 3], "n1": [0, 1, 2, 3]})
    move(job, JobState.RUNNING, Reason.STARTED, at=later + timedelta(seconds=9))
    assert push(world, "agent:n0", job.pk, stdout="rank 0: loss 0.1\n").status_code == 200
    assert push(world, "agent:n1", job.pk, stdout="", stderr="").status_code == 200
    tail = world.client("lead").get(f"/api/v1/jobs/{job.pk}/log/").json()
    assert (tail["node"], tail["stdout"]) == ("n0", "rank 0: loss 0.1\n")
    # a tail with output still replaces it
    assert push(world, "agent:n1", job.pk, stderr="rank 1: warn\n").status_code == 200
    assert world.client("lead").get(f"/api/v1/jobs/{job.pk}/log/").json()["stderr"] == (
        "rank 1: warn\n")
