"""Tenants, nodes and the cluster through the API: the figures, the borrowing
attribution, reservations, the feed's seq cursor, throttling, and query counts that do
not grow with the rows (no N+1)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from scheduler_app.api.reads import TenantFigures, attribute_borrowing
from scheduler_app.core.states import JobState
from scheduler_app.models import Allocation, Node, Tenant, Transition
from tests.foundation.factories import job_in_state

from .conftest import submit

pytestmark = pytest.mark.django_db


def running(world, tenant, node, gpus):
    return job_in_state(JobState.RUNNING, tenant=tenant, node=node, gpus=gpus)


# ---------------------------------------------------------------- tenants
def test_tenant_figures_show_quota_usage_and_queue_depth_by_size_class(world):
    running(world, world.vision, world.nodes[0], 8)
    running(world, world.vision, world.nodes[1], 8)
    running(world, world.vision, world.nodes[2], 4)
    submit(world, gpus=1)
    submit(world, gpus=1)
    submit(world, gpus=16)
    vision = world.client("researcher").get("/api/v1/tenants/vision/").json()
    assert (vision["guaranteed_gpus"], vision["borrow_limit_gpus"],
            vision["quota_limit_gpus"]) == (16, 16, 32)
    assert vision["current_gpus"] == 20
    assert vision["borrowed_gpus"] == 4
    # 32 GPUs, 32 guaranteed: the 4 borrowed GPUs come from nlp's idle guarantee
    assert vision["borrowed_from"] == [{"tenant": "nlp", "gpus": 4}]
    assert vision["queued_jobs"] == 3
    assert vision["queued_by_size_class"] == {"1": 2, "2-8": 0, "9-64": 1, "65-512": 0,
                                              "513+": 0}
    assert vision["usage_gpu_s"] > 0 and vision["share"] == vision["usage_gpu_s"] / 16
    nlp = world.client("researcher").get("/api/v1/tenants/nlp/").json()
    assert nlp["lent_gpus"] == 4 and nlp["lent_to"] == [{"tenant": "vision", "gpus": 4}]
    assert world.client("researcher").get("/api/v1/tenants/nobody/").status_code == 404


def row(name, guaranteed, held):
    return TenantFigures(tenant=Tenant(name=name, guaranteed_gpus=guaranteed, held_gpus=held),
                         usage_gpu_s=0.0, share=None)


def test_borrowing_comes_first_from_unguaranteed_capacity_then_idle_guarantees():
    a, b, c, d = row("a", 10, 25), row("b", 10, 0), row("c", 10, 4), row("d", 0, 3)
    attribute_borrowing([a, b, c, d], cluster_gpus=40)  # 10 GPUs guaranteed to nobody
    assert a.borrowed_from == [{"tenant": None, "gpus": 10}, {"tenant": "b", "gpus": 5}]
    assert d.borrowed_from == [{"tenant": "b", "gpus": 3}]
    assert (b.lent_gpus, c.lent_gpus) == (8, 0)
    for r in (a, b, c, d):
        assert sum(p["gpus"] for p in r.borrowed_from) == r.borrowed_gpus


def test_borrowing_past_every_idle_guarantee_is_reported_not_hidden():
    a, b = row("a", 10, 30), row("b", 30, 25)
    attribute_borrowing([a, b], cluster_gpus=30)  # guarantees oversubscribe the cluster
    assert a.borrowed_from == [{"tenant": "b", "gpus": 5},
                               {"tenant": "(oversubscribed)", "gpus": 15}]


# ---------------------------------------------------------------- nodes
def test_nodes_show_health_free_gpus_and_allocations(world):
    job = running(world, world.vision, world.nodes[1], 4)
    world.client("operator").post("/api/v1/nodes/n1/drain/", {"why": "bios"}, format="json")
    page = world.client("operator").get("/api/v1/nodes/?health=draining").json()
    assert [n["name"] for n in page["results"]] == ["n1"]
    n1 = page["results"][0]
    assert (n1["free_gpus"], n1["gpu_count"], n1["pod"]) == (4, 8, "pod0")
    assert n1["allocations"][0]["job"] == job.pk
    assert n1["allocations"][0]["gpu_indices"] == [0, 1, 2, 3]
    detail = world.client("operator").get("/api/v1/nodes/n1/").json()
    assert detail["events"][0]["to_state"] == "draining"
    assert detail["events"][0]["actor_name"] == "op"
    assert world.client("operator").get("/api/v1/nodes/nope/").status_code == 404


def test_draining_a_draining_node_is_a_conflict(world):
    client = world.client("operator")
    assert client.post("/api/v1/nodes/n0/drain/", {"why": "fan"},
                       format="json").status_code == 200
    again = client.post("/api/v1/nodes/n0/drain/", {"why": "fan"}, format="json")
    assert again.status_code == 409
    assert "draining" in again.json()["errors"][0]["message"]


@pytest.mark.parametrize("action", ["drain", "down"])
@pytest.mark.parametrize("body", [{}, {"why": ""}, {"why": "   "}])
def test_taking_a_node_out_of_service_needs_a_reason(world, action, body):
    """The dashboard asks why a node is drained; the API took none, and the log row said
    nothing (an operator's session, 2026-12-07). Slurm requires a Reason for both."""
    rows = Transition.objects.count()
    response = world.client("operator").post(f"/api/v1/nodes/n2/{action}/", body,
                                             format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["errors"][0]
    assert error["field"] == "why" and "the reason goes in the log" in error["message"]
    assert Node.objects.get(name="n2").health == "healthy"
    assert Transition.objects.count() == rows


def test_marking_a_node_down_is_logged_with_the_reason(world):
    response = world.client("operator").post("/api/v1/nodes/n2/down/",
                                             {"why": "PSU failure"}, format="json")
    assert response.json()["health"] == "down"
    assert response.json()["events"][0]["detail"]["why"] == "PSU failure"


def test_draining_and_undraining_a_node_keep_the_operators_reason(world):
    client = world.client("operator")
    drained = client.post("/api/v1/nodes/n2/drain/", {"why": "firmware update"},
                          format="json").json()
    assert drained["events"][0]["detail"]["why"] == "firmware update"
    back = client.post("/api/v1/nodes/n2/undrain/", {"why": "firmware 2.1 in"},
                       format="json").json()
    assert back["health"] == "healthy"
    assert back["events"][0]["detail"]["why"] == "firmware 2.1 in"


@pytest.mark.parametrize(("action", "why", "message"), [
    ("drain", "line\nbreak", "A node's reason is printable text"),
    ("down", "fan \u202eecalper", "A node's reason is printable text"),
    ("drain", "x" * 501, "A reason of at most 500 characters."),
])
def test_a_node_moves_reason_follows_one_rule_everywhere(world, action, why, message):
    # the API took a line break and a right-to-left override (which reversed the
    # operator's transition stream after it) and 300 characters the dashboard refused
    # (an operator's session, 2026-12-07): the services' rule now, at the field, nothing
    # written
    from scheduler_app.models import Node, Transition

    rows = Transition.objects.count()
    refused = world.client("operator").post(f"/api/v1/nodes/n2/{action}/", {"why": why},
                                            format="json")
    assert refused.status_code == 400
    [error] = refused.json()["errors"]
    assert error["field"] == "why" and error["message"].startswith(message)
    assert Transition.objects.count() == rows and Node.objects.get(name="n2").health == "healthy"
    # the dashboard's form refuses the same, in the same words
    from django.test import Client

    client = Client()
    client.force_login(world.users["operator"])
    page = client.post(f"/operator/nodes/{Node.objects.get(name='n2').pk}/drain/",
                       {"why": why}, follow=True).content.decode()
    assert Node.objects.get(name="n2").health == "healthy" and Transition.objects.count() == rows
    assert ("at most 500 characters" in page) if len(why) > 500 else (
        "A node&#x27;s reason is printable text" in page)


# ---------------------------------------------------------------- cluster
def test_the_summary_counts_gpus_free_used_borrowed_and_unavailable(world):
    running(world, world.vision, world.nodes[0], 8)
    running(world, world.vision, world.nodes[1], 8)
    running(world, world.vision, world.nodes[2], 2)
    world.client("operator").post("/api/v1/nodes/n3/drain/", {"why": "fan"}, format="json")
    submit(world, gpus=4)
    s = world.client("researcher").get("/api/v1/cluster/").json()
    assert (s["gpus"], s["gpus_used"], s["gpus_free"], s["gpus_unavailable"]) == (32, 18, 6, 8)
    assert s["gpus_borrowed"] == 2
    assert s["nodes_by_health"] == {"healthy": 3, "draining": 1, "down": 0}
    assert s["jobs_by_state"]["RUNNING"] == 3 and s["jobs_by_state"]["QUEUED"] == 1
    assert s["gpus_reserved"] == 0 and s["reservations"] == []


def test_reservations_are_the_ones_the_last_tick_published(world, reclaim):
    """vision borrows 16 GPUs with a checkpointable gang; nlp asks for its guarantee: the
    gang's nodes are promised to nlp's job (a reclaim) while the gang checkpoints."""
    gang, head, asked = reclaim["gang"], reclaim["head"], reclaim["asked"]
    nodes = sorted(Allocation.objects.filter(job_id=gang, end__isnull=True)
                   .values_list("node__name", flat=True))
    mine = world.client("researcher").get("/api/v1/cluster/reservations/").json()
    assert [(r["job"], r["tenant"], r["kind"], r["gpus"], r["nodes"]) for r in mine] == [
        (None, "nlp", "reclaim", 16, nodes)]  # nlp's job is not the researcher's
    assert mine[0]["victims"] == [{"job": gang, "tenant": "vision"}]
    assert mine[0]["start_at"] == (asked + timedelta(seconds=60)).isoformat().replace(
        "+00:00", "Z")  # the end of the gang's 60 s grace window
    theirs = world.client("other_team").get("/api/v1/cluster/reservations/").json()
    assert theirs[0]["job"] == head and theirs[0]["victims"] == [{"job": None,
                                                                  "tenant": "vision"}]
    summary = world.client("researcher").get("/api/v1/cluster/").json()
    assert summary["gpus_reserved"] == 16 and summary["reservations"] == mine
    # the head leaves the queue: its reservation is not shown, before any tick
    world.client("other_team").post(f"/api/v1/jobs/{head}/cancel/", {}, format="json")
    assert world.client("researcher").get("/api/v1/cluster/reservations/").json() == []
    assert world.client("researcher").get("/api/v1/cluster/").json()["gpus_reserved"] == 0


def test_the_feed_resumes_after_a_seq_without_repeats_or_gaps(world):
    for _ in range(5):
        submit(world, gpus=1)  # two rows each
    client = world.client("operator")
    first = client.get("/api/v1/cluster/transitions/?limit=4").json()
    assert len(first["results"]) == 4
    rest = client.get(f"/api/v1/cluster/transitions/?after={first['next_after']}").json()
    seqs = [r["seq"] for r in first["results"] + rest["results"]]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)) == 10
    assert f"after={first['next_after']}" in first["next"]
    tail = client.get(f"/api/v1/cluster/transitions/?after={rest['next_after']}").json()
    assert tail["results"] == [] and tail["next_after"] == rest["next_after"]
    assert client.get("/api/v1/cluster/transitions/?limit=0").status_code == 400
    assert client.get("/api/v1/cluster/transitions/?after=x").status_code == 400


# ---------------------------------------------------------------- throttling
def test_a_pipeline_past_its_rate_is_told_to_wait(world, monkeypatch):
    from scheduler_app.api.throttling import UserThrottle

    monkeypatch.setattr(UserThrottle, "THROTTLE_RATES",
                        {**api_settings.DEFAULT_THROTTLE_RATES, "user": "3/min"})
    client = world.client("researcher")
    statuses = [client.get("/api/v1/me/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = client.get("/api/v1/me/")
    assert response.json()["errors"][0]["code"] == "throttled"
    assert int(response["Retry-After"]) > 0
    # another user has a budget of their own
    assert world.client("lead").get("/api/v1/me/").status_code == 200


def test_callers_without_credentials_are_throttled_per_address(world, monkeypatch):
    """DRF refuses an unauthenticated request (401) before its throttles run, so the
    anonymous throttle never applied: 65 requests, 65 401s (found by a user session,
    2026-12-07). Requests with no credentials, or a made-up token, count against the
    address's anonymous rate; past it they are 429."""
    from scheduler_app.api.throttling import AnonThrottle

    monkeypatch.setattr(AnonThrottle, "THROTTLE_RATES",
                        {**api_settings.DEFAULT_THROTTLE_RATES, "anon": "3/min"})
    nobody = world.client(None)
    forger = APIClient()
    forger.credentials(HTTP_AUTHORIZATION="Bearer gsu_made-up")
    statuses = [nobody.get("/api/v1/cluster/").status_code,
                forger.get("/api/v1/cluster/").status_code,
                nobody.get("/api/v1/me/").status_code,
                forger.get("/api/v1/cluster/").status_code,
                nobody.get("/api/v1/cluster/", HTTP_X_FORWARDED_FOR="10.9.8.7").status_code]
    assert statuses == [401, 401, 401, 429, 429]  # a made-up X-Forwarded-For changes nothing
    response = nobody.get("/api/v1/jobs/")
    assert response.json()["errors"][0]["code"] == "throttled"
    assert int(response["Retry-After"]) > 0
    # a caller with credentials, from the same address, has a budget of its own
    assert world.client("researcher").get("/api/v1/cluster/").status_code == 200
    assert world.client("agent:n0").post("/api/v1/agent/heartbeat/", {},
                                         format="json").status_code == 200


# ---------------------------------------------------------------- query counts
@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/api/v1/nodes/", "/api/v1/tenants/",
                                 "/api/v1/cluster/", "/api/v1/cluster/transitions/"])
def test_list_queries_do_not_grow_with_the_rows(world, url, django_assert_max_num_queries):
    client = world.client("lead")
    for i in range(2):
        running(world, world.vision, world.nodes[i], 4)
    submit(world, gpus=1)
    client.get(url)  # warm: token last-used stamp, membership cache
    with django_assert_max_num_queries(100) as few:
        assert client.get(url).status_code == 200
    queries = len(few)  # now: every request start empties the connection's query log
    assert queries > 0
    client.post("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": [
        {"name": f"b{i}", "gpus": 1} for i in range(30)]}, format="json")
    for i in range(2, 4):
        running(world, world.vision, world.nodes[i], 4)
    with django_assert_max_num_queries(queries):
        assert client.get(url).status_code == 200
