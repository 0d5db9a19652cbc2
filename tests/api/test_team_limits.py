"""Team limits through the API: the per-user cap, the default time limit and the longest
one a job may ask for; set by operators through the logged quota service."""

from __future__ import annotations

import pytest

from scheduler_app.models import Job, Tenant, Transition
from scheduler_app.services.cluster import tenant_set_quota
from tests.foundation.test_replay import replay_verify

from .conftest import job_body, submit

pytestmark = pytest.mark.django_db


def errors_of(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def limit(tenant: Tenant, **limits: int | None) -> None:
    tenant_set_quota(tenant=tenant, guaranteed_gpus=tenant.guaranteed_gpus,
                     borrow_limit_gpus=tenant.borrow_limit_gpus, actor_name="ops",
                     limits=limits)


# ---------------------------------------------------------------- submit
def test_a_limit_over_the_team_max_is_refused_naming_the_field_and_both_numbers(world):
    limit(world.vision, max_runtime_s=3600)
    rows = Transition.objects.count()
    response = world.client("researcher").post(
        "/api/v1/jobs/", job_body(max_runtime_s=7200), format="json")
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"max_runtime_s"}
    assert "3,600" in errors["max_runtime_s"] and "7,200" in errors["max_runtime_s"]
    assert Job.objects.count() == 0 and Transition.objects.count() == rows
    # at the max exactly: admitted
    assert submit(world, max_runtime_s=3600)["state"] == "QUEUED"


def test_a_batch_item_over_the_team_max_is_named_with_its_index(world):
    limit(world.vision, max_runtime_s=600)
    specs = [{"name": "ok", "gpus": 1, "max_runtime_s": 600},
             {"name": "long", "gpus": 1, "max_runtime_s": 601},
             {"name": "none", "gpus": 1}]
    response = world.client("researcher").post(
        "/api/v1/jobs/batch/", {"tenant": "vision", "jobs": specs}, format="json")
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"jobs[1].max_runtime_s"}
    assert "600" in errors["jobs[1].max_runtime_s"] and "601" in errors["jobs[1].max_runtime_s"]
    assert Job.objects.count() == 0


def test_the_service_refuses_it_too(world):
    from scheduler_app.services.errors import Invalid
    from scheduler_app.services.jobs import job_submit, jobs_submit_batch

    limit(world.vision, max_runtime_s=60)
    with pytest.raises(Invalid) as err:
        job_submit(tenant=world.vision, name="x", gpus=1, max_runtime_s=61)
    assert err.value.field == "max_runtime_s"
    with pytest.raises(Invalid) as err:
        jobs_submit_batch(tenant=world.vision, owner=None,
                          specs=[{"name": "x", "gpus": 1, "max_runtime_s": 61}])
    assert err.value.field == "jobs[0].max_runtime_s"


def test_a_job_without_a_limit_gets_the_team_default_noted_as_such(world):
    limit(world.vision, default_runtime_s=900)
    given = submit(world)
    declared = submit(world, max_runtime_s=300)
    detail = world.client("researcher").get(f"/api/v1/jobs/{given['id']}/").json()
    assert detail["max_runtime_s"] == 900 and detail["max_runtime_from"] == "team_default"
    own = world.client("researcher").get(f"/api/v1/jobs/{declared['id']}/").json()
    assert own["max_runtime_s"] == 300 and own["max_runtime_from"] == "job"
    other = submit(world, who="other_team", tenant="nlp")  # nlp has no default
    none = world.client("other_team").get(f"/api/v1/jobs/{other['id']}/").json()
    assert none["max_runtime_s"] is None and none["max_runtime_from"] is None


def test_a_retry_of_a_job_given_the_default_is_the_same_job(world):
    limit(world.vision, default_runtime_s=900)
    body = job_body(idempotency_key="k-1")
    first = world.client("researcher").post("/api/v1/jobs/", body, format="json")
    again = world.client("researcher").post("/api/v1/jobs/", body, format="json")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]


def test_a_job_larger_than_the_per_user_cap_can_never_run(world):
    limit(world.vision, max_gpus_per_user=4)
    response = world.client("researcher").post("/api/v1/jobs/", job_body(gpus=8),
                                               format="json")
    assert response.status_code == 400
    assert "max_gpus_per_user" in errors_of(response)["gpus"]
    assert submit(world, gpus=8, min_gpus=4)["state"] == "QUEUED"  # may shrink to the cap


# ---------------------------------------------------------------- tenant endpoints
def test_an_operator_sets_the_limits_through_the_log_and_replay_agrees(world):
    response = world.client("operator").patch(
        "/api/v1/tenants/vision/quota/",
        {"max_gpus_per_user": 8, "default_runtime_s": 600, "max_runtime_s": 7200},
        format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["tenant"]["max_gpus_per_user"], body["tenant"]["default_runtime_s"],
            body["tenant"]["max_runtime_s"]) == (8, 600, 7200)
    assert body["transition"]["detail"]["after"] == {
        "guaranteed_gpus": 16, "borrow_limit_gpus": 16, "max_gpus_per_user": 8,
        "default_runtime_s": 600, "max_runtime_s": 7200}
    # a PUT of the quota alone keeps them; null clears one
    world.client("operator").put("/api/v1/tenants/vision/quota/",
                                 {"guaranteed_gpus": 8, "borrow_limit_gpus": 8}, format="json")
    cleared = world.client("operator").patch(
        "/api/v1/tenants/vision/quota/", {"default_runtime_s": None}, format="json")
    assert cleared.status_code == 200
    vision = Tenant.objects.get(name="vision")
    assert (vision.guaranteed_gpus, vision.max_gpus_per_user, vision.default_runtime_s,
            vision.max_runtime_s) == (8, 8, None, 7200)
    got = world.client("researcher").get("/api/v1/tenants/vision/").json()
    assert (got["max_gpus_per_user"], got["default_runtime_s"], got["max_runtime_s"]) == (
        8, None, 7200)
    ok, output = replay_verify()
    assert ok, output


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_gpus_per_user": -1}, "max_gpus_per_user"),
        ({"max_gpus_per_user": 0}, "max_gpus_per_user"),
        ({"max_gpus_per_user": 10**9}, "max_gpus_per_user"),
        ({"default_runtime_s": -60}, "default_runtime_s"),
        ({"default_runtime_s": 10**12}, "default_runtime_s"),
        ({"max_runtime_s": "a day"}, "max_runtime_s"),
        ({"max_runtime_s": 1.5}, "max_runtime_s"),
        ({"max_runtime_s": True}, "max_runtime_s"),
        ({"default_runtime_s": 7200, "max_runtime_s": 3600}, "default_runtime_s"),
    ],
)
def test_bad_tenant_limits_are_refused_naming_the_field_and_write_nothing(world, body, field):
    rows = Transition.objects.count()
    response = world.client("operator").patch("/api/v1/tenants/vision/quota/", body,
                                              format="json")
    assert response.status_code == 400, response.json()
    assert field in errors_of(response)
    assert Transition.objects.count() == rows
    vision = Tenant.objects.get(name="vision")
    assert (vision.max_gpus_per_user, vision.default_runtime_s, vision.max_runtime_s) == (
        None, None, None)


def test_a_longest_limit_below_the_teams_default_names_the_field_sent(world):
    """It named default_runtime_s, a field the request did not send (an operator's
    session, 2026-12-07)."""
    world.client("operator").patch("/api/v1/tenants/vision/quota/",
                                   {"default_runtime_s": 1200}, format="json")
    rows = Transition.objects.count()
    response = world.client("operator").patch("/api/v1/tenants/vision/quota/",
                                              {"max_runtime_s": 600}, format="json")
    assert response.status_code == 400
    assert list(errors_of(response)) == ["max_runtime_s"]
    assert "1,200 s, default_runtime_s" in errors_of(response)["max_runtime_s"]
    assert Transition.objects.count() == rows


def test_only_operators_set_the_limits(world):
    response = world.client("lead").patch("/api/v1/tenants/vision/quota/",
                                          {"max_gpus_per_user": 8}, format="json")
    assert response.status_code == 403
    assert Tenant.objects.get(name="vision").max_gpus_per_user is None


def test_the_service_refuses_bad_limits_naming_the_field(world):
    from scheduler_app.services.cluster import tenant_create
    from scheduler_app.services.errors import Invalid

    with pytest.raises(Invalid) as err:
        limit(world.vision, max_gpus_per_user=-3)
    assert err.value.field == "max_gpus_per_user"
    with pytest.raises(Invalid) as err:
        limit(world.vision, bogus=1)  # type: ignore[arg-type]
    assert err.value.field == "bogus"
    with pytest.raises(Invalid) as err:
        tenant_create(name="new", guaranteed_gpus=0, borrow_limit_gpus=0, actor_name="ops",
                      limits={"default_runtime_s": 100, "max_runtime_s": 50})
    assert err.value.field == "default_runtime_s"
    assert not Tenant.objects.filter(name="new").exists()
