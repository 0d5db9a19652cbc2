"""Node agents through the API: register, heartbeat, assignments, and the job reports.
An agent acts only on its own node's jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Transition
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.agents import agent_confirm_start
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import job_in_state

pytestmark = pytest.mark.django_db


def errors_of(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


@pytest.fixture
def placed(world) -> Job:
    """A 4-GPU vision job placed on n0 (GPUs 0-3)."""
    return job_in_state(JobState.PLACING, tenant=world.vision, node=world.nodes[0], gpus=4)


def test_an_operator_registers_a_new_node_and_gets_its_agent_token_once(world):
    response = world.client("operator").post(
        "/api/v1/agent/register/",
        {"name": "n9", "pod": "pod9", "gpus": 4, "gpu_type": "H100", "issue_token": True},
        format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["node"]["name"] == "n9" and body["node"]["health"] == "healthy"
    assert body["token"].startswith("gsa_")
    agent = world.client(None)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert agent.post("/api/v1/agent/heartbeat/", {}, format="json").json()["name"] == "n9"
    # the registration is a row of the log, naming the operator who made it (it named
    # the node's agent: found by trying the product, 2026-12-07)
    row = Transition.objects.get(kind="node", node__name="n9")
    assert (row.actor, row.actor_name) == ("operator", "op")


def test_issuing_a_known_nodes_token_again_rotates_it(world):
    """Re-issuing (register with issue_token, or manage.py api_token --node) left the old
    key working: an operator rotating a leaked key left the leak open (found by a user
    session, 2026-12-07). A node has one live agent token."""
    from io import StringIO

    from django.core.management import call_command

    from scheduler_app.api.models import ApiToken

    old = world.client("agent:n0")
    assert old.post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 200
    response = world.client("operator").post(
        "/api/v1/agent/register/",
        {"name": "n0", "pod": "pod0", "gpus": 8, "gpu_type": "H100", "issue_token": True},
        format="json")
    assert response.status_code == 200, response.json()
    new = world.client(None)
    new.credentials(HTTP_AUTHORIZATION=f"Bearer {response.json()['token']}")
    assert new.post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 200
    assert old.post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 401
    # the server's command rotates too
    out = StringIO()
    call_command("api_token", "--node", "n0", stdout=out)
    assert new.post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 401
    newest = world.client(None)
    newest.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")
    assert newest.post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 200
    assert ApiToken.objects.filter(node__name="n0", revoked_at__isnull=True).count() == 1
    # other nodes' tokens are untouched
    assert world.client("agent:n1").post("/api/v1/agent/heartbeat/", {},
                                         format="json").status_code == 200


def test_only_operators_may_ask_for_an_agent_token(world):
    response = world.client("agent:n0").post(
        "/api/v1/agent/register/",
        {"name": "n0", "pod": "pod0", "gpus": 8, "gpu_type": "H100", "issue_token": True},
        format="json")
    assert response.status_code == 403


def test_an_agent_registers_only_its_own_node(world):
    response = world.client("agent:n0").post(
        "/api/v1/agent/register/", {"name": "n1", "pod": "pod0", "gpus": 8}, format="json")
    assert response.status_code == 403
    assert "n0" in response.json()["errors"][0]["message"]


def test_a_node_the_heartbeat_timeout_marked_down_comes_up_when_its_agent_registers(world):
    from scheduler_app.services.cluster import nodes_mark_silent_down

    Node.objects.filter(name="n1").update(last_heartbeat=now_s() - timedelta(minutes=5))
    Node.objects.filter(name="n0").update(last_heartbeat=now_s())  # not all went silent
    assert [n.name for n in nodes_mark_silent_down(now=now_s(), timeout_s=30)] == ["n1"]
    response = world.client("agent:n1").post(
        "/api/v1/agent/register/", {"name": "n1", "pod": "pod0", "gpus": 8, "gpu_type": "H100"},
        format="json")
    assert response.status_code == 200
    assert response.json()["node"]["health"] == "healthy"
    up = Transition.objects.filter(kind="node", node__name="n1").latest("id")
    assert (up.actor, up.actor_name, up.detail["action"]) == ("agent", "n1", "up")


def test_a_node_an_operator_marked_down_stays_down_when_its_agent_registers(world):
    """agent-protocol.md: "A node an operator marked down while its agent was healthy
    stays down: the agent does not fight the operator." The agent's registration brought
    it up, and a job placed there meanwhile was requeued (an agent author's session,
    2026-12-07). Only an operator brings it back."""
    world.client("operator").post("/api/v1/nodes/n1/down/", {"why": "maintenance"},
                                  format="json")
    rows = Transition.objects.count()
    response = world.client("agent:n1").post(
        "/api/v1/agent/register/", {"name": "n1", "pod": "pod0", "gpus": 8, "gpu_type": "H100"},
        format="json")
    assert response.status_code == 200 and response.json()["node"]["health"] == "down"
    assert Node.objects.get(name="n1").health == "down"
    assert Transition.objects.count() == rows  # nothing logged: nothing changed
    up = world.client("operator").post("/api/v1/nodes/n1/up/", {}, format="json")
    assert up.status_code == 200, up.json()
    assert Node.objects.get(name="n1").health == "healthy"


def test_an_operators_registration_is_not_the_nodes_heartbeat(world):
    """It set one: a node no agent ran yet was placed on, then marked down 30 s later and
    its job requeued (an agent author's session, 2026-12-07)."""
    from scheduler_app.services.cluster import nodes_mark_silent_down

    operator = world.client("operator")
    made = operator.post("/api/v1/agent/register/",
                         {"name": "n9", "pod": "pod9", "gpus": 4, "issue_token": True},
                         format="json")
    assert made.status_code == 201 and made.json()["node"]["last_heartbeat"] is None
    Node.objects.filter(name="n0").update(last_heartbeat=now_s())  # run by an agent
    marked = nodes_mark_silent_down(now=now_s() + timedelta(hours=1), timeout_s=30)
    assert [n.name for n in marked] == ["n0"]  # n9 has no agent yet: exempt
    assert Node.objects.get(name="n9").health == "healthy"
    agent = world.client(None)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {made.json()['token']}")
    beat = agent.post("/api/v1/agent/register/", {"name": "n9", "pod": "pod9", "gpus": 4},
                      format="json")
    assert beat.json()["node"]["last_heartbeat"] is not None  # the agent's own call is one


def test_a_busy_nodes_shape_change_names_the_field_that_changed(world, placed):
    for change, field in (({"pod": "pod-zz"}, "pod"), ({"gpus": 4}, "gpus"),
                          ({"gpu_type": "A100"}, "gpu_type"), ({"rail": 2}, "rail")):
        response = world.client("agent:n0").post(
            "/api/v1/agent/register/",
            {"name": "n0", "pod": "pod0", "gpus": 8, "gpu_type": "H100"} | change,
            format="json")
        assert response.status_code == 409, response.json()
        error = response.json()["errors"][0]
        assert (error["code"], error["field"]) == ("node_busy", field)


def test_registration_errors_name_the_field(world):
    response = world.client("operator").post(
        "/api/v1/agent/register/", {"name": "n9", "pod": "", "gpus": -1}, format="json")
    assert response.status_code == 400
    assert {"pod", "gpus"} <= set(errors_of(response))
    # the services' bound, not the column's (it said "<= 32767": found 2026-12-07)
    for gpus in (0, 40_000):
        response = world.client("operator").post(
            "/api/v1/agent/register/", {"name": "n9", "pod": "p", "gpus": gpus},
            format="json")
        assert errors_of(response)["gpus"] == "A node has 1 to 1024 GPUs."
    assert not Node.objects.filter(name="n9").exists()


@pytest.mark.parametrize("name", ["../../etc", "pod x n1", "a/b", ".hidden", "-rf", "n\t1",
                                  "nœud", "x" * 65, "n1;reboot"])
def test_a_node_name_outside_the_safe_set_is_refused(world, name):
    """'../../etc' and 'pod x n1' were registered (201) and joined the cluster's GPUs, but
    the REST API could not address them (404) (found by a user session, 2026-12-07)."""
    response = world.client("operator").post(
        "/api/v1/agent/register/", {"name": name, "pod": "pod0", "gpus": 8,
                                    "issue_token": True}, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["errors"][0]
    assert (error["field"], error["code"]) == ("name", "bad_node_name"), error
    assert "letters, digits" in error["message"]
    assert not Node.objects.filter(name=name).exists()


@pytest.mark.parametrize("name", ["pod-a-n01", "n0", "gpu_7.rack-2", "N" * 64, "0"])
def test_a_safe_node_name_registers_and_the_api_can_address_it(world, name):
    response = world.client("operator").post(
        "/api/v1/agent/register/", {"name": name, "pod": "pod0", "gpus": 8}, format="json")
    assert response.status_code in (200, 201), response.json()
    client = world.client("operator")
    assert client.get(f"/api/v1/nodes/{name}/").status_code == 200
    assert client.post(f"/api/v1/nodes/{name}/drain/", {"why": "fan"},
                       format="json").status_code == 200


def test_a_node_registered_before_the_name_rule_still_registers(world):
    Node.objects.filter(name="n3").update(name="old node")
    response = world.client("operator").post(
        "/api/v1/agent/register/", {"name": "old node", "pod": "pod1", "gpus": 8},
        format="json")
    assert response.status_code == 200, response.json()


def test_a_gpu_type_that_differs_only_in_case_is_a_typo(world):
    # "h100" beside the cluster's H100 made a type of its own, which no H100 job would
    # ever use (found by running it as production does, 2026-12-07)
    response = world.client("operator").post(
        "/api/v1/agent/register/", {"name": "n9", "pod": "pod0", "gpus": 8,
                                    "gpu_type": "h100"}, format="json")
    assert response.status_code == 400
    assert "only in case" in errors_of(response)["gpu_type"] and "'H100'" in errors_of(
        response)["gpu_type"]
    assert not Node.objects.filter(name="n9").exists()
    ok = world.client("operator").post(
        "/api/v1/agent/register/", {"name": "n9", "pod": "pod0", "gpus": 8,
                                    "gpu_type": "H100"}, format="json")
    assert ok.status_code == 201


def test_a_heartbeat_records_the_time(world):
    before = timezone.now() - timedelta(seconds=1)
    response = world.client("agent:n2").post("/api/v1/agent/heartbeat/", {}, format="json")
    assert response.status_code == 200
    assert Node.objects.get(name="n2").last_heartbeat >= before.replace(microsecond=0)


def test_assignments_tell_the_agent_what_to_start(world, placed):
    body = world.client("agent:n0").get("/api/v1/agent/assignments/").json()
    assert [s["job_id"] for s in body["start"]] == [placed.pk]
    start = body["start"][0]
    assert start["gpus"] == {"n0": [0, 1, 2, 3]}
    assert start["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert body["preempt"] == [] and body["running"] == []
    # another node is told nothing about it
    other = world.client("agent:n1").get("/api/v1/agent/assignments/").json()
    assert other == {"start": [], "preempt": [], "running": []}


def test_the_agent_confirms_the_start(world, placed):
    response = world.client("agent:n0").post(f"/api/v1/agent/jobs/{placed.pk}/start/", {},
                                             format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "RUNNING"
    assert (body["transition"]["actor"], body["transition"]["actor_name"]) == ("agent", "n0")
    assert world.client("agent:n0").get("/api/v1/agent/assignments/").json()["running"] == [
        placed.pk]


def test_another_nodes_agent_may_not_touch_the_job(world, placed):
    rows = Transition.objects.count()
    for action, body in (("start", {}), ("checkpoint", {"resume_pointer": "x"}),
                         ("preempt-ack", {}), ("exit", {"outcome": "completed"})):
        response = world.client("agent:n1").post(
            f"/api/v1/agent/jobs/{placed.pk}/{action}/", body, format="json")
        assert response.status_code == 403, (action, response.json())
        assert response.json()["errors"][0]["code"] == "not_on_node"
    assert Transition.objects.count() == rows


def test_a_move_the_state_does_not_allow_is_a_conflict(world, placed):
    client = world.client("agent:n0")
    response = client.post(f"/api/v1/agent/jobs/{placed.pk}/preempt-ack/", {}, format="json")
    assert response.status_code == 409
    assert "PLACING" in response.json()["errors"][0]["message"]
    client.post(f"/api/v1/agent/jobs/{placed.pk}/start/", {}, format="json")
    client.post(f"/api/v1/agent/jobs/{placed.pk}/exit/", {"outcome": "completed"}, format="json")
    rows = Transition.objects.count()
    again = client.post(f"/api/v1/agent/jobs/{placed.pk}/start/", {}, format="json")
    assert again.status_code == 409
    assert again.json()["errors"][0]["code"] == "job_completed"
    assert Transition.objects.count() == rows


# ---------------------------------------------------------------- gangs
@pytest.fixture
def gang(world) -> Job:
    """A 16-GPU vision gang placed on n0 and n1 (all their GPUs)."""
    job = job_submit(tenant=world.vision, name="gang", gpus=16, gpus_per_node=8,
                     checkpointable=True)
    job_transition(job_id=job.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, alloc={"n0": list(range(8)), "n1": list(range(8))})
    return job


def test_a_gangs_start_items_carry_every_field_the_agent_reads(world, gang):
    """The API gave no ``run`` (its serializer dropped the field the selector builds), and
    the reference agent took each poll of a gang still placing for a new placement: it
    restarted the gang's runs every two seconds, for good (found by running it as
    production does, 2026-12-07). The API's items are the selector's, whole."""
    from scheduler_app.selectors.agents import agent_assignments

    items = {}
    for name in ("n0", "n1"):
        body = world.client(f"agent:{name}").get("/api/v1/agent/assignments/").json()
        (item,) = body["start"]
        (built,) = agent_assignments(node=Node.objects.get(name=name))["start"]
        assert set(item) == set(built), set(built) - set(item)
        assert item["run"] == built["run"] and item["run"]
        assert item["nodes"] == ["n0", "n1"]
        items[name] = item
    assert items["n0"]["run"] == items["n1"]["run"]  # one placement, whichever node asks


def report(world, node: str, job: Job, action: str, body: dict | None = None):
    return world.client(f"agent:{node}").post(f"/api/v1/agent/jobs/{job.pk}/{action}/",
                                              body or {}, format="json")


def test_every_node_of_a_gang_confirms_its_start_and_only_the_first_writes(world, gang):
    first = report(world, "n1", gang, "start")
    assert first.status_code == 200 and "Idempotent-Replayed" not in first
    rows = Transition.objects.count()
    for node in ("n0", "n1"):  # the other node, then a retry of the first
        again = report(world, node, gang, "start")
        assert again.status_code == 200, again.json()
        assert again["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()  # same state, same row (n1's Started)
    assert Transition.objects.count() == rows
    assert report(world, "n2", gang, "start").status_code == 403  # not in the gang


def test_every_node_of_a_gang_acknowledges_the_preemption_once(world, gang):
    report(world, "n0", gang, "start")
    job_transition(job_id=gang.pk, to_state=JobState.PREEMPT_REQUESTED,
                   reason=Reason.PREEMPT_REQUESTED, actor=Actor.SCHEDULER)
    first = report(world, "n0", gang, "preempt-ack")
    assert first.status_code == 200 and first.json()["state"] == "CHECKPOINTING"
    rows = Transition.objects.count()
    again = report(world, "n1", gang, "preempt-ack")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["transition"] == first.json()["transition"]
    late_start = report(world, "n1", gang, "start")  # further along: answered too
    assert late_start.status_code == 200
    assert late_start.json()["state"] == "CHECKPOINTING"
    assert late_start.json()["transition"]["reason"] == "Started"
    assert Transition.objects.count() == rows


def test_every_node_of_a_gang_reports_its_checkpoint_and_the_log_has_it_once(world, gang):
    """Each node's agent reports the checkpoint the gang wrote (found on the demo's two
    real agents: every checkpoint of a 2-node job was two log rows, 2026-12-07)."""
    report(world, "n0", gang, "start")
    body = {"resume_pointer": "s3://ckpt/step-200"}
    first = report(world, "n0", gang, "checkpoint", body)
    assert first.status_code == 200 and "Idempotent-Replayed" not in first
    rows = Transition.objects.count()
    for node in ("n1", "n0"):  # the other node, then a retry
        again = report(world, node, gang, "checkpoint", body)
        assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
        assert again.json()["transition"] == first.json()["transition"]
    assert Transition.objects.count() == rows
    later = report(world, "n1", gang, "checkpoint", {"resume_pointer": "s3://ckpt/step-300"})
    assert later.status_code == 200 and "Idempotent-Replayed" not in later
    assert Transition.objects.count() == rows + 1
    assert Job.objects.get(pk=gang.pk).resume_pointer == "s3://ckpt/step-300"
    assert report(world, "n2", gang, "checkpoint", body).status_code == 403  # not its job


def test_a_checkpoint_older_than_the_runs_latest_is_refused(world, gang):
    """A backdated report moved last_checkpoint_at back and logged a row dated before an
    earlier one (found by a user gaming the scheduler, 2026-12-07)."""
    at = now_s() - timedelta(seconds=60)
    agent_confirm_start(node=world.nodes[0], job=gang, at=at - timedelta(seconds=1))
    latest = {"resume_pointer": "s3://ckpt/step-300",
              "checkpoint_at": (at + timedelta(seconds=10)).isoformat()}
    assert report(world, "n0", gang, "checkpoint", latest).status_code == 200
    rows = Transition.objects.count()
    old = report(world, "n1", gang, "checkpoint",
                 {"resume_pointer": "old", "checkpoint_at": at.isoformat()})
    assert old.status_code == 400, old.json()
    error = old.json()["errors"][0]
    assert (error["field"], error["code"]) == ("checkpoint_at", "before_last")
    assert Transition.objects.count() == rows
    job = Job.objects.get(pk=gang.pk)
    assert job.resume_pointer == "s3://ckpt/step-300"
    assert job.last_checkpoint_at == at + timedelta(seconds=10)
    # the latest checkpoint again (the other node of the gang) is still its row, replayed,
    # whatever time that node gives it
    again = report(world, "n1", gang, "checkpoint",
                   {"resume_pointer": "s3://ckpt/step-300", "checkpoint_at": at.isoformat()})
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    # a checkpoint at the same instant as the latest, or after it, is taken
    same = report(world, "n0", gang, "checkpoint", {
        "resume_pointer": "s3://ckpt/step-301", "checkpoint_at": latest["checkpoint_at"]})
    assert same.status_code == 200 and "Idempotent-Replayed" not in same
    assert Transition.objects.count() == rows + 1


def test_the_first_exit_of_a_gang_ends_it_and_the_others_get_its_row(world, gang):
    report(world, "n0", gang, "start")
    first = report(world, "n1", gang, "exit", {"outcome": "completed", "exit_code": 0})
    assert first.status_code == 200 and first.json()["state"] == "COMPLETED"
    assert sorted(Node.objects.values_list("free_gpus", flat=True)) == [8, 8, 8, 8]
    rows = Transition.objects.count()
    again = report(world, "n0", gang, "exit", {"outcome": "failed", "exit_code": 137})
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()  # the first report decided the outcome
    assert Transition.objects.count() == rows
    history = world.client("operator").get(f"/api/v1/jobs/{gang.pk}/").json()["history"]
    assert [h["to_state"] for h in history] == ["SUBMITTED", "QUEUED", "PLACING", "RUNNING",
                                                "COMPLETED"]


def test_an_exit_after_the_scheduler_requeued_the_gang_is_still_a_conflict(world, gang):
    report(world, "n0", gang, "start")
    job_transition(job_id=gang.pk, to_state=JobState.QUEUED, reason=Reason.NODE_FAILED,
                   actor=Actor.SCHEDULER)
    response = report(world, "n1", gang, "exit", {"outcome": "failed", "exit_code": 1})
    assert response.status_code == 409
    assert response.json()["errors"][0]["code"] == "job_queued"


def test_an_unknown_job_is_a_404_for_an_agent(world):
    response = world.client("agent:n0").post("/api/v1/agent/jobs/99999/start/", {},
                                             format="json")
    assert response.status_code == 404


def test_a_checkpoint_records_the_resume_pointer(world, placed):
    client = world.client("agent:n0")
    client.post(f"/api/v1/agent/jobs/{placed.pk}/start/", {}, format="json")
    response = client.post(f"/api/v1/agent/jobs/{placed.pk}/checkpoint/",
                           {"resume_pointer": "s3://ckpt/step-100"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["transition"]["reason"] == "Checkpointed"
    job = Job.objects.get(pk=placed.pk)
    assert job.resume_pointer == "s3://ckpt/step-100" and job.last_checkpoint_at is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"resume_pointer": ""}, "resume_pointer"),
        ({"resume_pointer": "x" * 513}, "resume_pointer"),
        ({}, "resume_pointer"),
        # handed to the next run as SCHED_RESUME_POINTER: printable text only
        ({"resume_pointer": "s3://ckpt/a\nb"}, "resume_pointer"),
        ({"resume_pointer": "s3://ckpt/\u202eevil"}, "resume_pointer"),
        ({"resume_pointer": "p", "checkpoint_at": "yesterday"}, "checkpoint_at"),
        ({"resume_pointer": "p", "checkpoint_at": "2999-01-01T00:00:00Z"}, "checkpoint_at"),
        ({"resume_pointer": "p", "checkpoint_at": "2001-01-01T00:00:00Z"}, "checkpoint_at"),
    ],
)
def test_bad_checkpoint_reports_name_the_field_and_write_nothing(world, placed, body, field):
    client = world.client("agent:n0")
    client.post(f"/api/v1/agent/jobs/{placed.pk}/start/", {}, format="json")
    rows = Transition.objects.count()
    response = client.post(f"/api/v1/agent/jobs/{placed.pk}/checkpoint/", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in errors_of(response)
    assert Transition.objects.count() == rows


@pytest.mark.parametrize(
    ("body", "field"),
    [({"outcome": "vanished"}, "outcome"), ({}, "outcome"),
     ({"outcome": "failed", "exit_code": 100000}, "exit_code"),
     # a job that exited non-zero did not complete: its afterok dependents ran on its word
     ({"outcome": "completed", "exit_code": 3}, "exit_code"),
     ({"outcome": "completed", "exit_code": -9}, "exit_code"),
     ({"outcome": "completed", "run": "yesterday"}, "run")],
)
def test_bad_exit_reports_name_the_field(world, placed, body, field):
    response = world.client("agent:n0").post(f"/api/v1/agent/jobs/{placed.pk}/exit/", body,
                                             format="json")
    assert response.status_code == 400 and field in errors_of(response)


def test_a_report_of_an_earlier_run_does_not_move_the_run_placed_since(world, placed):
    """An exit the agent queued for a run the scheduler then requeued, delivered once the
    job was placed on the same node again, failed the new run before it started; a late
    start/ confirmed it (an agent author's session, 2026-12-07). A report names its run;
    an earlier run's is 409 stale_run and writes nothing. Without ``run``, as before."""
    client = world.client("agent:n0")
    old_run = client.get("/api/v1/agent/assignments/").json()["start"][0]["run"]
    # the node was marked down and the job requeued, then placed on n0 again, later
    job_transition(job_id=placed.pk, to_state=JobState.QUEUED, reason=Reason.NODE_FAILED,
                   actor=Actor.SCHEDULER, at=now_s() + timedelta(seconds=1))
    job_transition(job_id=placed.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, alloc={"n0": [4, 5, 6, 7]},
                   at=now_s() + timedelta(seconds=2))
    new_run = client.get("/api/v1/agent/assignments/").json()["start"][0]["run"]
    assert new_run != old_run
    rows = Transition.objects.count()
    for action, body in (("start", {}), ("checkpoint", {"resume_pointer": "s3://x/1"}),
                         ("preempt-ack", {}), ("exit", {"outcome": "failed", "exit_code": 1})):
        late = client.post(f"/api/v1/agent/jobs/{placed.pk}/{action}/", body | {"run": old_run},
                           format="json")
        assert late.status_code == 409, (action, late.json())
        error = late.json()["errors"][0]
        assert (error["field"], error["code"]) == ("run", "stale_run"), action
        assert new_run in error["message"] and "drop the report" in error["message"]
    assert Transition.objects.count() == rows
    assert Job.objects.get(pk=placed.pk).state == JobState.PLACING
    started = client.post(f"/api/v1/agent/jobs/{placed.pk}/start/", {"run": new_run},
                          format="json")
    assert started.status_code == 200 and started.json()["state"] == "RUNNING"
    done = client.post(f"/api/v1/agent/jobs/{placed.pk}/exit/",
                       {"outcome": "completed", "exit_code": 0, "run": new_run}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "COMPLETED"
    # a retry of that exit, naming its run, is its row again
    again = client.post(f"/api/v1/agent/jobs/{placed.pk}/exit/",
                        {"outcome": "completed", "exit_code": 0, "run": new_run},
                        format="json")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"


def test_an_exit_frees_the_gpus(world, placed):
    client = world.client("agent:n0")
    client.post(f"/api/v1/agent/jobs/{placed.pk}/start/", {}, format="json")
    response = client.post(f"/api/v1/agent/jobs/{placed.pk}/exit/",
                           {"outcome": "completed", "exit_code": 0}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "COMPLETED"
    assert Node.objects.get(name="n0").free_gpus == 8
    node = world.client("operator").get("/api/v1/nodes/n0/").json()
    assert node["allocations"] == []


def test_a_revoked_agent_token_is_refused(world):
    tokens = world.client("operator").get("/api/v1/tokens/")  # operators' own tokens only
    assert tokens.status_code == 200
    from scheduler_app.api.models import ApiToken

    agent_token = ApiToken.objects.get(node__name="n0")
    assert world.client("operator").delete(f"/api/v1/tokens/{agent_token.pk}/").status_code == 200
    assert world.client("agent:n0").get("/api/v1/agent/assignments/").status_code == 401
