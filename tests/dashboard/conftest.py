"""A small cluster with a user for every role and jobs in the states the pages show,
all reached through the real services and the leader (nothing written behind them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from scheduler_app.models import Job, Membership, Node, Pod, Tenant
from scheduler_app.services import job_submit
from scheduler_app.services.agents import agent_confirm_start
from scheduler_app.services.leader import LeaderLoop
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import NodeFactory, TenantFactory

PASSWORD = "pw-for-dashboard-tests"
ROLES = ("operator", "lead", "researcher", "teammate", "other_team", "outsider")


@dataclass
class World:
    nodes: list[Node]
    vision: Tenant
    nlp: Tenant
    users: dict[str, Any]
    jobs: dict[str, Job]
    base: datetime  # the instant the story starts (two hours ago)

    def client(self, who: str | None) -> Client:
        client = Client()
        if who is not None:
            client.force_login(self.users[who])
        return client

    def at(self, seconds: int) -> datetime:
        return self.base + timedelta(seconds=seconds)


def confirm_placed(job: Job, at: datetime) -> None:
    """The agent of the job's first node confirms its start (PLACING -> RUNNING)."""
    job.refresh_from_db()
    node = job.allocations.filter(end__isnull=True).order_by("node__name").first().node
    agent_confirm_start(node=node, job=job, at=at)


def make_users(vision: Tenant, nlp: Tenant) -> dict[str, Any]:
    User = get_user_model()
    users = {
        "operator": User.objects.create_user("op", password=PASSWORD, is_staff=True),
        "lead": User.objects.create_user("vision-lead", password=PASSWORD),
        "researcher": User.objects.create_user("vision-r1", password=PASSWORD),
        "teammate": User.objects.create_user("vision-r2", password=PASSWORD),
        "other_team": User.objects.create_user("nlp-r1", password=PASSWORD),
        "outsider": User.objects.create_user("nobody", password=PASSWORD),
    }
    Membership.objects.create(user=users["lead"], tenant=vision, role="lead")
    Membership.objects.create(user=users["researcher"], tenant=vision, role="researcher")
    Membership.objects.create(user=users["teammate"], tenant=vision, role="researcher")
    Membership.objects.create(user=users["other_team"], tenant=nlp, role="researcher")
    return users


@pytest.fixture
def world(db) -> World:
    """Two pods of two 8-GPU H100 nodes (n0..n3, 32 GPUs); vision (16 guaranteed + 16
    borrow) and nlp (16 + 0). vision borrows: its researcher runs two 16-GPU checkpointable
    jobs; then nlp's researcher submits 16 GPUs, entitled, and the leader asks the cheaper
    vision job to stop (at 3,605 s; it is killed at the end of its 60 s grace window, its
    run never checkpointed). The teammate has a job queued behind."""
    return build_world()


@pytest.fixture
def stopping_world(db) -> World:
    """The world's story up to the preemption request (3,605 s): vit-huge is still in its
    grace window, no later tick has run, and sweep-a is not submitted."""
    return build_world(until_s=3605)


def build_world(until_s: int | None = None) -> World:
    base = now_s() - timedelta(hours=2)
    pods = [Pod.objects.create(name=f"pod{i}") for i in range(2)]
    nodes = [NodeFactory(name=f"n{i}", pod=pods[i // 2]) for i in range(4)]
    vision = TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16,
                           usage_at=base)
    nlp = TenantFactory(name="nlp", guaranteed_gpus=16, borrow_limit_gpus=0, usage_at=base)
    users = make_users(vision, nlp)
    world = World(nodes, vision, nlp, users, {}, base)
    loop = LeaderLoop(holder="test-leader", ttl_s=15, heartbeat_timeout_s=0)

    def submit(tenant: Tenant, who: str, name: str, gpus: int, at_s: int, **spec: Any) -> Job:
        return job_submit(tenant=tenant, owner=users[who], name=name, gpus=gpus,
                          at=world.at(at_s), **spec)

    ckpt = {"checkpointable": True, "checkpoint_interval_s": 600, "checkpoint_time_s": 60,
            "max_runtime_s": 4 * 3600}
    first = submit(vision, "researcher", "vit-huge", 16, 0, gpus_per_node=8, **ckpt)
    second = submit(vision, "researcher", "vit-small", 16, 60, gpus_per_node=8, **ckpt)
    loop.step(now=world.at(70))
    confirm_placed(first, world.at(80))
    confirm_placed(second, world.at(90))
    loop.step(now=world.at(100))
    wanted = submit(nlp, "other_team", "bert-large", 16, 3600, gpus_per_node=8,
                    max_runtime_s=3600)
    loop.step(now=world.at(3605))
    world.jobs = {"first": first, "second": second, "wanted": wanted}
    if until_s is None:
        world.jobs["queued"] = submit(vision, "teammate", "sweep-a", 8, 3700,
                                      max_runtime_s=1800)
        loop.step(now=world.at(3710))
    for job in world.jobs.values():
        job.refresh_from_db()
    world.loop = loop  # type: ignore[attr-defined]
    return world
