"""The API's per-process caches (api/cache.py, ClusterShape(max_age_s=...)): what this
process changes is seen at once; what another process changes (simulated here by
writes that send no model signal: ``QuerySet.update`` and raw SQL) within
``API_CACHE_S`` seconds, and not a request later."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from scheduler_app.api import cache as api_cache
from scheduler_app.api.models import ApiToken
from scheduler_app.api.tokens import hash_key, token_find, token_revoke
from scheduler_app.models import Membership, Node, Tenant
from scheduler_app.services import jobs as job_services
from scheduler_app.services.agents import agent_register

from .conftest import job_body


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(api_cache, "clock", fake)
    monkeypatch.setattr(job_services, "shape_clock", fake)
    return fake


def ttl() -> float:
    return api_cache.ttl_s()


def test_the_cache_lives_a_few_seconds_by_default():
    assert 0 < ttl() <= 10


# ---------------------------------------------------------------- tokens
def test_a_token_revoked_through_the_api_is_refused_at_once(world, clock):
    client = world.client("researcher")
    assert client.get("/api/v1/me/").status_code == 200  # cached now
    token = client.get("/api/v1/tokens/").json()[0]["id"]
    assert client.delete(f"/api/v1/tokens/{token}/").status_code in (200, 204)
    assert client.get("/api/v1/me/").status_code == 401


def test_a_token_revoked_by_another_process_is_refused_within_the_ttl(world, clock):
    client = world.client("researcher")
    assert client.get("/api/v1/me/").status_code == 200
    # another process revokes it: no signal reaches this one
    ApiToken.objects.filter(key_hash=hash_key(world.keys["researcher"])).update(
        revoked_at="2026-01-01T00:00:00Z")
    clock.now += ttl() - 0.5
    assert client.get("/api/v1/me/").status_code == 200  # still within the bound
    clock.now += 0.5
    response = client.get("/api/v1/me/")
    assert response.status_code == 401
    assert response.json()["errors"][0]["message"] == "Unknown or revoked token."
    assert world.client("researcher").post(
        "/api/v1/jobs/", job_body(gpus=1), format="json").status_code == 401


def test_a_user_deactivated_elsewhere_is_refused_within_the_ttl(world, clock):
    client = world.client("researcher")
    assert client.get("/api/v1/me/").status_code == 200
    get_user_model().objects.filter(username="vision-r1").update(is_active=False)
    clock.now += ttl()
    assert client.get("/api/v1/me/").status_code == 401


def test_a_user_saved_in_this_process_is_read_again(world, clock):
    client = world.client("researcher")
    assert client.get("/api/v1/me/").status_code == 200
    user = world.users["researcher"]
    user.is_active = False
    user.save()
    assert client.get("/api/v1/me/").status_code == 401


def test_unknown_tokens_are_not_cached(world, clock):
    token, key = ApiToken.objects.get(user=world.users["researcher"]), world.keys["researcher"]
    token_revoke(token=token)
    assert token_find(key=key) is None
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=None)  # un-revoked elsewhere
    assert token_find(key=key) is not None  # a miss was not remembered


def test_each_request_gets_its_own_user_and_token(world, clock):
    key = world.keys["researcher"]
    first, second = token_find(key=key), token_find(key=key)
    assert first is not second and first.user is not second.user
    first.user._api_roles = {"leaked": "lead"}
    assert not hasattr(second.user, "_api_roles")
    assert token_find(key=key).user.pk == world.users["researcher"].pk


def test_last_used_is_written_once_a_minute_not_once_per_cached_request(world, clock):
    key = world.keys["researcher"]
    token_find(key=key)
    stamped = ApiToken.objects.get(key_hash=hash_key(key)).last_used_at
    assert stamped is not None
    ApiToken.objects.filter(key_hash=hash_key(key)).update(last_used_at=None)
    token_find(key=key)  # the cached copy has the stamp: no second write
    assert ApiToken.objects.get(key_hash=hash_key(key)).last_used_at is None


@override_settings(API_CACHE_S=0)
def test_no_cache_when_the_ttl_is_zero(world, clock):
    client = world.client("researcher")
    assert client.get("/api/v1/me/").status_code == 200
    ApiToken.objects.filter(key_hash=hash_key(world.keys["researcher"])).update(
        revoked_at="2026-01-01T00:00:00Z")
    assert client.get("/api/v1/me/").status_code == 401
    assert len(api_cache.TOKENS) == 0


# ---------------------------------------------------------------- roles, tenants
def _remove_membership_elsewhere(user_id: int, tenant_id: int) -> None:
    table = Membership._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE user_id = %s AND tenant_id = %s",
                       [user_id, tenant_id])


def test_a_member_removed_by_another_process_may_not_submit_after_the_ttl(world, clock):
    client = world.client("researcher")
    assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json").status_code == 201
    _remove_membership_elsewhere(world.users["researcher"].pk, world.vision.pk)
    clock.now += ttl()
    response = client.post("/api/v1/jobs/", job_body(gpus=1), format="json")
    assert response.status_code == 403


def test_a_member_removed_in_this_process_may_not_submit_at_once(world, clock):
    client = world.client("researcher")
    assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json").status_code == 201
    Membership.objects.get(user=world.users["researcher"], tenant=world.vision).delete()
    assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json").status_code == 403


def test_a_quota_cut_elsewhere_is_applied_by_the_never_fits_check_after_the_ttl(world, clock):
    client = world.client("researcher")
    # (a limit: a job nothing may preempt borrows only with one)
    big = job_body(gpus=24, max_runtime_s=3600)
    assert client.post("/api/v1/jobs/", big, format="json").status_code == 201
    Tenant.objects.filter(pk=world.vision.pk).update(borrow_limit_gpus=0)  # 16 + 0
    clock.now += ttl()
    response = client.post("/api/v1/jobs/", big, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["code"] == "never_fits"


# ---------------------------------------------------------------- the cluster's shape
def test_a_job_larger_than_the_cluster_is_refused_with_the_shape_cached(world, clock):
    client = world.client("researcher")
    assert client.post("/api/v1/jobs/", job_body(gpus=8), format="json").status_code == 201
    for _ in range(2):  # the second answer comes from the cached shape
        response = client.post("/api/v1/jobs/", job_body(gpus=33), format="json")
        assert response.status_code == 400
        assert response.json()["errors"][0]["code"] == "never_fits"


def test_a_node_registered_in_this_process_counts_at_once(world, clock):
    world.vision.borrow_limit_gpus = 48  # the team may hold 64: the cluster is the limit
    world.vision.save()
    client = world.client("operator")
    big = job_body(gpus=40, max_runtime_s=3600)  # (borrows: a limit lets it)
    assert client.post("/api/v1/jobs/", big, format="json").status_code == 400
    agent_register(name="n9", pod="pod1", gpus=8, gpu_type="H100")
    assert client.post("/api/v1/jobs/", big, format="json").status_code == 201


def test_a_node_shrunk_by_another_process_is_seen_within_the_ttl(world, clock):
    client = world.client("operator")
    big = job_body(gpus=32, max_runtime_s=3600)  # (borrows: a limit lets it)
    assert client.post("/api/v1/jobs/", big, format="json").status_code == 201
    Node.objects.filter(name="n3").update(gpu_count=4, free_gpus=4)  # 28 GPUs now
    clock.now += ttl()
    response = client.post("/api/v1/jobs/", big, format="json")
    assert response.status_code == 400
    assert "the cluster has 28" in response.json()["errors"][0]["message"]


def test_a_heartbeat_keeps_the_cached_shape(world, clock):
    job_services.ClusterShape(max_age_s=5).sizes("")
    assert job_services._SHAPE_CACHE is not None
    node = world.nodes[0]
    node.health = node.health  # a save of health fields only
    node.save(update_fields=["health", "last_heartbeat"])
    assert job_services._SHAPE_CACHE is not None
    node.save()  # any other save may change the shape: read it again
    assert job_services._SHAPE_CACHE is None


def test_the_services_read_the_shape_fresh_unless_asked(world, clock):
    job_services.ClusterShape(max_age_s=5).sizes("")
    Node.objects.filter(name="n3").update(gpu_count=4, free_gpus=4)
    assert sum(job_services.ClusterShape().sizes("")) == 28
    assert sum(job_services.ClusterShape(max_age_s=5).sizes("")) == 32  # within the bound


def test_a_warm_submit_reads_nothing_before_its_transaction(world, clock):
    from django.test.utils import CaptureQueriesContext

    client = world.client("researcher")
    assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json").status_code == 201
    with CaptureQueriesContext(connection) as queries:
        assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                           HTTP_IDEMPOTENCY_KEY="warm-1").status_code == 201
    sql = [q["sql"] for q in queries.captured_queries]
    read = [s for s in sql if any(t in s for t in (
        ApiToken._meta.db_table, Membership._meta.db_table, Node._meta.db_table))]
    assert read == []
    # BEGIN, the append lock (PostgreSQL), the job, its two rows, COMMIT
    assert len(sql) <= 6, sql
