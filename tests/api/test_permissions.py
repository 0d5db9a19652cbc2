"""Who may do what: every endpoint, every role. 401 without credentials, 403 for the
wrong ones (never a 404 that hides the object, never a row in a list).

Roles (conftest.World): operator (staff), lead (vision's lead), researcher (vision, owns
the job under test), teammate (another vision researcher), other_team (an nlp
researcher), outsider (in no tenant), agent:n0 / agent:n1 (node agents), None (no
credentials).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from scheduler_app.api.models import ApiToken
from scheduler_app.core.states import JobState
from scheduler_app.models import Job, Node, Tenant, Transition
from tests.foundation.factories import job_in_state, sign_in

from .conftest import job_body, submit

pytestmark = pytest.mark.django_db

ALL = ("operator", "lead", "researcher", "teammate", "other_team", "outsider", "agent:n0",
       None)
USERS = ("operator", "lead", "researcher", "teammate", "other_team", "outsider")


def expect(allowed: int, who_may: tuple, *, agents: int = 403) -> dict[Any, int]:
    """The status for each role: ``allowed`` for ``who_may``, 403 for the other users,
    ``agents`` for a node agent, 401 without credentials."""
    out: dict[Any, int] = {role: (allowed if role in who_may else 403) for role in USERS}
    out["agent:n0"] = agents
    out[None] = 401
    return out


EVERY_USER = USERS
JOB_SEERS = ("operator", "lead", "researcher")  # the owner, the tenant's lead, operators
VISION_MEMBERS = ("operator", "lead", "researcher", "teammate")


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    url: Callable[[dict], str]
    body: Callable[[dict], Any]
    statuses: dict[Any, int]


def placed_on_n0(world) -> Job:
    return job_in_state(JobState.PLACING, tenant=world.vision, node=world.nodes[0], gpus=4)


CASES = [
    Case("me", "get", lambda s: "/api/v1/me/", lambda s: None, expect(200, EVERY_USER)),
    Case("tokens list", "get", lambda s: "/api/v1/tokens/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("token create", "post", lambda s: "/api/v1/tokens/", lambda s: {"name": "ci"},
         expect(201, EVERY_USER)),
    Case("token revoke", "delete", lambda s: f"/api/v1/tokens/{s['token']}/",
         lambda s: None, expect(200, ("operator", "researcher"))),
    Case("jobs list", "get", lambda s: "/api/v1/jobs/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("jobs submit", "post", lambda s: "/api/v1/jobs/", lambda s: job_body(gpus=1),
         expect(201, VISION_MEMBERS)),
    Case("jobs batch", "post", lambda s: "/api/v1/jobs/batch/",
         lambda s: {"tenant": "vision", "jobs": [{"name": "a", "gpus": 1}]},
         expect(201, VISION_MEMBERS)),
    Case("job detail", "get", lambda s: f"/api/v1/jobs/{s['job']}/", lambda s: None,
         expect(200, JOB_SEERS)),
    Case("job cancel", "post", lambda s: f"/api/v1/jobs/{s['job']}/cancel/", lambda s: {},
         expect(200, JOB_SEERS)),
    Case("tenants list", "get", lambda s: "/api/v1/tenants/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("tenant detail", "get", lambda s: "/api/v1/tenants/nlp/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("quota put", "put", lambda s: "/api/v1/tenants/vision/quota/",
         lambda s: {"guaranteed_gpus": 8, "borrow_limit_gpus": 8}, expect(200, ("operator",))),
    Case("quota patch", "patch", lambda s: "/api/v1/tenants/vision/quota/",
         lambda s: {"borrow_limit_gpus": 0}, expect(200, ("operator",))),
    Case("nodes list", "get", lambda s: "/api/v1/nodes/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("node detail", "get", lambda s: "/api/v1/nodes/n0/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("node drain", "post", lambda s: "/api/v1/nodes/n2/drain/", lambda s: {"why": "fan"},
         expect(200, ("operator",))),
    Case("node undrain", "post", lambda s: "/api/v1/nodes/n3/undrain/", lambda s: {},
         expect(200, ("operator",))),
    Case("node down", "post", lambda s: "/api/v1/nodes/n2/down/", lambda s: {"why": "psu"},
         expect(200, ("operator",))),
    Case("node up", "post", lambda s: "/api/v1/nodes/n3/up/", lambda s: {},
         expect(200, ("operator",))),
    Case("cluster summary", "get", lambda s: "/api/v1/cluster/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("reservations", "get", lambda s: "/api/v1/cluster/reservations/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("transitions feed", "get", lambda s: "/api/v1/cluster/transitions/", lambda s: None,
         expect(200, EVERY_USER)),
    Case("agent register", "post", lambda s: "/api/v1/agent/register/",
         lambda s: {"name": "n0", "pod": "pod0", "gpus": 8, "gpu_type": "H100"},
         expect(200, ("operator",), agents=200)),
    Case("agent heartbeat", "post", lambda s: "/api/v1/agent/heartbeat/", lambda s: {},
         expect(200, (), agents=200)),
    Case("agent assignments", "get", lambda s: "/api/v1/agent/assignments/", lambda s: None,
         expect(200, (), agents=200)),
    Case("agent confirm start", "post",
         lambda s: f"/api/v1/agent/jobs/{s['placed']}/start/", lambda s: {},
         expect(200, (), agents=200)),
    Case("agent exit", "post", lambda s: f"/api/v1/agent/jobs/{s['placed']}/exit/",
         lambda s: {"outcome": "failed", "exit_code": 1}, expect(200, (), agents=200)),
]


@pytest.fixture
def scene(world) -> dict[str, Any]:
    """A queued job of the researcher's, a job placed on n0, n3 draining, and a token of
    the researcher's that is not the one the client uses."""
    job = submit(world, who="researcher", gpus=2)
    placed = placed_on_n0(world)
    Node.objects.filter(name="n3").update(health="draining")
    token = ApiToken.objects.create(user=world.users["researcher"], prefix="x",
                                    key_hash="0" * 64, created_at=placed.submitted_at)
    return {"job": job["id"], "placed": placed.pk, "token": token.pk}


@pytest.mark.parametrize("role", ALL, ids=lambda r: str(r))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_endpoint_allows_exactly_its_roles(world, scene, case: Case, role):
    client = world.client(role)
    body = case.body(scene)
    response = getattr(client, case.method)(case.url(scene), body, format="json")
    want = case.statuses[role]
    assert response.status_code == want, (case.name, role, response.json())
    if want in (401, 403):
        error = response.json()["errors"][0]
        assert error["code"] in ("not_authenticated", "permission_denied", "forbidden")
    if want == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")


# ---------------------------------------------------------------- lists never leak
def test_each_role_lists_exactly_the_jobs_it_may_see(world):
    mine = submit(world, who="researcher", gpus=1)["id"]
    teammates = submit(world, who="teammate", gpus=1)["id"]
    leads = submit(world, who="lead", gpus=1)["id"]
    nlp = submit(world, who="other_team", tenant="nlp", gpus=1)["id"]
    want = {
        "operator": {mine, teammates, leads, nlp},
        "lead": {mine, teammates, leads},
        "researcher": {mine},
        "teammate": {teammates},
        "other_team": {nlp},
        "outsider": set(),
    }
    for role, ids in want.items():
        got = {j["id"] for j in world.client(role).get("/api/v1/jobs/").json()["results"]}
        assert got == ids, role


def test_asking_for_a_tenant_you_are_not_in_is_refused_not_emptied(world):
    submit(world, who="other_team", tenant="nlp", gpus=1)
    assert world.client("researcher").get("/api/v1/jobs/?tenant=nlp").status_code == 403
    assert world.client("lead").get("/api/v1/jobs/?tenant=nlp").status_code == 403
    assert world.client("operator").get("/api/v1/jobs/?tenant=nlp").status_code == 200


@pytest.mark.parametrize("who", ["researcher", "operator"])
def test_asking_for_a_tenant_that_does_not_exist_is_a_400_not_an_empty_list(world, who):
    # a typo read as "no jobs" (found by trying the product, 2026-12-07)
    response = world.client(who).get("/api/v1/jobs/?tenant=visoin")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "tenant" and "No tenant named 'visoin'" in error["message"]


def test_a_researcher_asking_for_a_teammates_jobs_is_refused(world):
    submit(world, who="teammate", gpus=1)
    assert world.client("researcher").get("/api/v1/jobs/?owner=vision-r2").status_code == 403
    assert world.client("researcher").get("/api/v1/jobs/?owner=vision-r1").status_code == 200
    lead_view = world.client("lead").get("/api/v1/jobs/?owner=vision-r2").json()["results"]
    assert [j["owner"] for j in lead_view] == ["vision-r2"]


def test_the_feed_carries_only_the_jobs_you_may_see_and_every_cluster_event(world):
    mine = submit(world, who="researcher", gpus=1)["id"]
    theirs = submit(world, who="other_team", tenant="nlp", gpus=1)["id"]
    world.client("operator").post("/api/v1/nodes/n1/drain/", {"why": "fan"}, format="json")
    world.client("operator").put("/api/v1/tenants/nlp/quota/",
                                 {"guaranteed_gpus": 8, "borrow_limit_gpus": 0}, format="json")
    rows = world.client("researcher").get("/api/v1/cluster/transitions/").json()["results"]
    assert {r["job"] for r in rows if r["kind"] == "job"} == {mine}
    assert [r["node"] for r in rows if r["kind"] == "node"] == ["n1"]
    assert [r["tenant"] for r in rows if r["kind"] == "tenant"] == ["nlp"]
    everything = world.client("operator").get("/api/v1/cluster/transitions/").json()
    assert {r["job"] for r in everything["results"] if r["kind"] == "job"} == {mine, theirs}


def test_the_feed_of_one_job_answers_as_the_job_endpoint_does(world):
    """?job=<another team's job> was 200 with an empty list, as if it had no history
    (found by a user gaming the scheduler, 2026-12-07): 403 as GET /jobs/<id>/ is; no
    such job is a 400 as the jobs list's ?array= is; both name the parameter."""
    mine = submit(world, who="researcher", gpus=1)["id"]
    theirs = submit(world, who="other_team", tenant="nlp", gpus=1)["id"]
    client = world.client("researcher")
    assert client.get(f"/api/v1/jobs/{theirs}/").status_code == 403
    for job, status in ((theirs, 403), (999_999, 400)):
        response = client.get(f"/api/v1/cluster/transitions/?job={job}")
        assert response.status_code == status, response.json()
        assert response.json()["errors"][0]["field"] == "job"
    rows = client.get(f"/api/v1/cluster/transitions/?job={mine}").json()["results"]
    assert rows and {r["job"] for r in rows} == {mine}
    assert world.client("operator").get(
        f"/api/v1/cluster/transitions/?job={theirs}").status_code == 200
    assert client.get("/api/v1/cluster/transitions/?job=x").status_code == 400


def test_node_allocations_name_only_the_jobs_you_may_see(world):
    placed = placed_on_n0(world)  # vision, no owner: its lead and operators may see it
    for role, visible in (("operator", True), ("lead", True), ("researcher", False),
                          ("other_team", False)):
        node = world.client(role).get("/api/v1/nodes/n0/").json()
        assert node["allocations"][0]["tenant"] == "vision"
        assert node["allocations"][0]["job"] == (placed.pk if visible else None), role


def test_everyone_signed_in_sees_every_tenants_fair_share_and_queue(world):
    submit(world, who="other_team", tenant="nlp", gpus=4)
    for role in USERS:
        tenants = {t["name"]: t for t in world.client(role).get("/api/v1/tenants/").json()}
        assert tenants["nlp"]["queued_jobs"] == 1, role
        assert tenants["nlp"]["queued_by_size_class"]["2-8"] == 1
    roles = {t["name"]: t["your_role"]
             for t in world.client("lead").get("/api/v1/tenants/").json()}
    assert roles == {"nlp": None, "vision": "lead"}


def test_everyone_signed_in_sees_the_queue_position_of_the_jobs_they_see(world):
    submit(world, who="other_team", tenant="nlp", gpus=4)
    job = submit(world, who="researcher", gpus=4)
    detail = world.client("researcher").get(f"/api/v1/jobs/{job['id']}/").json()
    assert detail["queue_position"]["tenant"] == 1
    assert detail["queue_position"]["cluster"] in (1, 2)


# ---------------------------------------------------------------- authentication
def test_an_unknown_or_revoked_token_is_a_401(world):
    client = world.client(None)
    client.credentials(HTTP_AUTHORIZATION="Bearer gsu_not-a-real-key")
    assert client.get("/api/v1/me/").status_code == 401
    revoke = world.client("researcher").get("/api/v1/tokens/").json()[0]["id"]
    world.client("researcher").delete(f"/api/v1/tokens/{revoke}/")
    response = world.client("researcher").get("/api/v1/me/")
    assert response.status_code == 401
    assert response.json()["errors"][0]["message"] == "Unknown or revoked token."


def test_an_inactive_users_token_is_a_401(world):
    get_user_model().objects.filter(username="vision-r1").update(is_active=False)
    assert world.client("researcher").get("/api/v1/me/").status_code == 401


def test_a_token_is_shown_once_and_stored_only_as_a_hash(world):
    created = world.client("researcher").post("/api/v1/tokens/", {"name": "ci"},
                                              format="json").json()
    key = created["key"]
    assert key.startswith("gsu_") and created["prefix"] == key[:12]
    row = ApiToken.objects.get(pk=created["id"])
    assert key not in (row.key_hash, row.prefix, row.name)
    listed = world.client("researcher").get("/api/v1/tokens/").json()
    assert all("key" not in t for t in listed)
    client = world.client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")  # DRF clients' scheme works too
    assert client.get("/api/v1/me/").json()["username"] == "vision-r1"


def test_the_browser_signs_in_with_a_session_and_writes_need_the_csrf_token(world):
    from rest_framework.test import APIClient

    user = world.users["researcher"]
    user.set_password("pw-for-tests-1")
    user.save()
    browser = APIClient(enforce_csrf_checks=True)
    assert sign_in(browser, "vision-r1", "pw-for-tests-1")
    assert browser.get("/api/v1/me/").json()["memberships"] == [
        {"tenant": "vision", "role": "researcher"}]
    refused = browser.post("/api/v1/jobs/", job_body(gpus=1), format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["errors"][0]["message"]
    browser.get("/login/")  # sets the csrftoken cookie
    token = browser.cookies["csrftoken"].value
    ok = browser.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                      HTTP_X_CSRFTOKEN=token)
    assert ok.status_code == 201


def test_me_says_who_you_are(world):
    me = world.client("lead").get("/api/v1/me/").json()
    assert me == {"username": "vision-lead", "operator": False,
                  "memberships": [{"tenant": "vision", "role": "lead"}]}
    assert world.client("operator").get("/api/v1/me/").json()["operator"] is True


def test_an_empty_quota_patch_is_refused_and_writes_no_row(world):
    rows = Transition.objects.count()
    response = world.client("operator").patch("/api/v1/tenants/vision/quota/", {},
                                              format="json")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert "Nothing to change: give at least one of guaranteed_gpus" in error["message"]
    assert Transition.objects.count() == rows


def test_a_borrow_limit_past_what_a_what_if_can_read_is_refused(world):
    # the API took 10,000,000 where the what-if and the scenario file refused past
    # 1,000,000: a live quota the what-if could not snapshot (an operator's session,
    # 2026-12-07). One bound now.
    from scheduler_app.sim.scenario import MAX_GPUS

    rows = Transition.objects.count()
    client = world.client("operator")
    past = client.patch("/api/v1/tenants/vision/quota/", {"borrow_limit_gpus": MAX_GPUS + 1},
                        format="json")
    assert past.status_code == 400
    (error,) = past.json()["errors"]
    assert error["field"] == "borrow_limit_gpus" and Transition.objects.count() == rows
    at = client.patch("/api/v1/tenants/vision/quota/", {"borrow_limit_gpus": MAX_GPUS},
                      format="json")
    assert at.status_code == 200


def test_a_tenant_quota_change_by_an_operator_goes_through_the_log(world):
    response = world.client("operator").put(
        "/api/v1/tenants/vision/quota/", {"guaranteed_gpus": 8, "borrow_limit_gpus": 24},
        format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["tenant"]["guaranteed_gpus"] == 8 and body["tenant"]["quota_limit_gpus"] == 32
    assert body["transition"]["reason"] == "QuotaChanged"
    assert body["transition"]["detail"]["before"] == {"guaranteed_gpus": 16,
                                                      "borrow_limit_gpus": 16}
    assert Tenant.objects.get(name="vision").guaranteed_gpus == 8


def test_a_team_added_before_any_node_is_told_to_register_the_nodes_first(db):
    """The documented first start added teams before nodes, and the guarantee was refused
    with 'the cluster has 0' and no word of what to do (found by a user session)."""
    from scheduler_app.services.cluster import tenant_create
    from scheduler_app.services.errors import Invalid

    with pytest.raises(Invalid) as refused:
        tenant_create(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16,
                      actor_name="op")
    assert "the cluster has 0" in str(refused.value)
    assert "register the nodes first" in str(refused.value)
    # a team without a guarantee can be added now, and gets one once nodes exist
    assert tenant_create(name="nlp", guaranteed_gpus=0, borrow_limit_gpus=8,
                         actor_name="op").guaranteed_gpus == 0


@pytest.mark.parametrize("guaranteed", [17, 100_000])
def test_a_guarantee_past_the_cluster_is_refused_naming_the_field_and_both_numbers(
        world, guaranteed):
    """4 nodes of 8 GPUs; nlp is guaranteed 16, so vision may have at most 16."""
    rows = Transition.objects.count()
    response = world.client("operator").put(
        "/api/v1/tenants/vision/quota/", {"guaranteed_gpus": guaranteed, "borrow_limit_gpus": 0},
        format="json")
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "guaranteed_gpus" and error["code"] == "over_capacity"
    assert f"add up to {guaranteed + 16:,} GPUs; the cluster has 32" in error["message"]
    assert "at most 16 is left for this one" in error["message"]
    assert Transition.objects.count() == rows  # nothing written
    assert Tenant.objects.get(name="vision").guaranteed_gpus == 16


def test_where_the_guarantees_exceed_the_cluster_a_lower_one_goes_through_a_raise_does_not(
        world):
    """A node removed left the guarantees past the cluster: 16 + 16 on 24 GPUs. Lowering
    one (the way back) and changing only a borrow limit were refused as "over capacity"
    (found 2026-12-07); a raise still is."""
    Node.objects.filter(name="n3").delete()
    operator = world.client("operator")
    borrow = operator.put("/api/v1/tenants/nlp/quota/",
                          {"guaranteed_gpus": 16, "borrow_limit_gpus": 4}, format="json")
    assert borrow.status_code == 200, borrow.json()
    lower = operator.put("/api/v1/tenants/vision/quota/",
                         {"guaranteed_gpus": 12, "borrow_limit_gpus": 0}, format="json")
    assert lower.status_code == 200, lower.json()
    raised = operator.put("/api/v1/tenants/vision/quota/",
                          {"guaranteed_gpus": 13, "borrow_limit_gpus": 0}, format="json")
    assert raised.status_code == 400
    assert raised.json()["errors"][0]["code"] == "over_capacity"
    assert Tenant.objects.get(name="vision").guaranteed_gpus == 12
