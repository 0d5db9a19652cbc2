"""A small cluster, a user for every role, agent tokens, and API clients that
authenticate the way pipelines and agents do (a Bearer token)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from rest_framework.test import APIClient

from scheduler_app.api import cache as api_cache
from scheduler_app.api.tokens import token_issue
from scheduler_app.models import Allocation, Membership, Node, Pod, Tenant
from scheduler_app.services.jobs import forget_cluster_shape
from scheduler_app.services.leader import LeaderLoop
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import NodeFactory, TenantFactory

ROLES = ("operator", "lead", "researcher", "teammate", "other_team", "outsider")


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    # throttle counters live in the (process-wide) cache: no test inherits another's;
    # nor the API's own per-process caches (tokens, roles, the cluster's shape)
    cache.clear()
    api_cache.clear_all()
    forget_cluster_shape()
    yield
    cache.clear()
    api_cache.clear_all()
    forget_cluster_shape()


@dataclass
class World:
    nodes: list[Node]
    vision: Tenant
    nlp: Tenant
    users: dict[str, Any]
    keys: dict[str, str]  # role or node name -> bearer key

    def client(self, who: str | None) -> APIClient:
        """A client for a role ("operator", "lead", ...), a node's agent ("agent:n0"),
        or nobody (None)."""
        client = APIClient()
        if who is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.keys[who]}")
        return client


@pytest.fixture
def world(db) -> World:
    """Two pods of two 8-GPU H100 nodes (n0..n3, 32 GPUs); tenants vision (16
    guaranteed + 16 borrow) and nlp (16 + 0). Roles: an operator (staff), vision's lead,
    two vision researchers (researcher, teammate), an nlp researcher (other_team), and a
    user in no tenant (outsider)."""
    pods = [Pod.objects.create(name=f"pod{i}") for i in range(2)]
    nodes = [NodeFactory(name=f"n{i}", pod=pods[i // 2]) for i in range(4)]
    vision = TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)
    nlp = TenantFactory(name="nlp", guaranteed_gpus=16, borrow_limit_gpus=0)
    User = get_user_model()
    users = {
        "operator": User.objects.create_user("op", is_staff=True),
        "lead": User.objects.create_user("vision-lead"),
        "researcher": User.objects.create_user("vision-r1"),
        "teammate": User.objects.create_user("vision-r2"),
        "other_team": User.objects.create_user("nlp-r1"),
        "outsider": User.objects.create_user("nobody"),
    }
    Membership.objects.create(user=users["lead"], tenant=vision, role="lead")
    Membership.objects.create(user=users["researcher"], tenant=vision, role="researcher")
    Membership.objects.create(user=users["teammate"], tenant=vision, role="researcher")
    Membership.objects.create(user=users["other_team"], tenant=nlp, role="researcher")
    keys = {role: token_issue(user=user, name="test")[1] for role, user in users.items()}
    for node in nodes:
        keys[f"agent:{node.name}"] = token_issue(node=node)[1]
    return World(nodes=nodes, vision=vision, nlp=nlp, users=users, keys=keys)


def job_body(tenant: str = "vision", **spec: Any) -> dict[str, Any]:
    return {"tenant": tenant, "name": spec.pop("name", "train"), "gpus": spec.pop("gpus", 4),
            **spec}


def submit(world: World, who: str = "researcher", **spec: Any) -> dict[str, Any]:
    response = world.client(who).post("/api/v1/jobs/", job_body(**spec), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.fixture
def reclaim(world: World) -> dict[str, Any]:
    """vision's researcher borrows 16 GPUs with a checkpointable gang (and runs a job of
    16, its guarantee, beside it); nlp's researcher asks for its guarantee: the gang is
    asked to stop for nlp's head (a reclaim reservation; vision keeps its guarantee, at
    the share nlp has once its job runs). The job ids, and ``asked``: the second tick's
    instant."""
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    solo = submit(world, gpus=16)["id"]
    gang = submit(world, gpus=16, gpus_per_node=8, checkpointable=True,
                  checkpoint_time_s=60)["id"]
    assert not loop.step(now=now_s()).error
    for job_id in (solo, gang):
        for alloc in Allocation.objects.filter(job_id=job_id, end__isnull=True):
            start = world.client(f"agent:{alloc.node.name}").post(
                f"/api/v1/agent/jobs/{job_id}/start/", {}, format="json")
            assert start.status_code == 200
    head = submit(world, who="other_team", tenant="nlp", gpus=16)["id"]
    asked = now_s() + timedelta(seconds=1)  # the API's writes are stamped with the clock
    assert not loop.step(now=asked).error
    return {"solo": solo, "gang": gang, "head": head, "asked": asked}
