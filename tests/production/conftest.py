"""A small cluster and helpers for the production-path tests."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Pod
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.leader import LeaderLoop
from tests.foundation.factories import T0, NodeFactory, TenantFactory

from .procs import started_procs


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def cluster():
    """Two pods of two 8-GPU nodes; teams "vision" (16 + 16 borrow) and "nlp" (16 + 0)."""
    pods = [Pod.objects.create(name=f"pod{i}") for i in range(2)]
    nodes = [NodeFactory(name=f"n{i}", pod=pods[i // 2]) for i in range(4)]
    vision = TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)
    nlp = TenantFactory(name="nlp", guaranteed_gpus=16, borrow_limit_gpus=0)
    return {"nodes": nodes, "vision": vision, "nlp": nlp}


def submit(tenant, gpus: int, at_s: int = 0, **kwargs) -> Job:
    return job_submit(tenant=tenant, name=f"job-{gpus}", gpus=gpus, at=at(at_s), **kwargs)


def agent(job: Job, to: JobState, reason: Reason, at_s: int, **kwargs) -> None:
    job_transition(
        job_id=job.pk, to_state=to, reason=reason, actor=Actor.AGENT, at=at(at_s), **kwargs
    )


def state_of(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def leader(holder: str = "leader-a") -> LeaderLoop:
    return LeaderLoop(holder=holder, ttl_s=15)


@pytest.fixture
def procs(tmp_path):
    """Real subprocesses (workers, beat, loops) started by a test, all stopped after it."""
    with started_procs(tmp_path) as started:
        yield started


@pytest.fixture
def no_early_ticks_from_this_process(settings):
    """The test process's own submits ask for no tick: in CI it has a broker (the shared
    Redis) that no worker of ours listens on. Subprocesses get their own settings."""
    settings.CELERY_BROKER_URL = ""
