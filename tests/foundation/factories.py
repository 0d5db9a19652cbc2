"""factory-boy factories for the foundation models, and builders that reach any job state
through the real services (jobs are never created behind the services' back)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.db import transaction

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Pod, Tenant
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.transitions import append_first

T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")


class PodFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pod

    name = factory.Sequence(lambda n: f"pod{n}")


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node{n:03d}")
    pod = factory.SubFactory(PodFactory)
    gpu_type = "H100"
    gpu_count = 8
    free_gpus = factory.LazyAttribute(lambda node: node.gpu_count)


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"team{n}")
    guaranteed_gpus = 16
    borrow_limit_gpus = 16


def submitted_job(tenant: Tenant, *, gpus: int = 4, at: datetime = T0) -> Job:
    """A job left in SUBMITTED (job_submit always moves on), with its first log row."""
    with transaction.atomic(durable=True):
        job = Job.objects.create(tenant=tenant, name="held-at-submit", gpus=gpus, submitted_at=at)
        append_first(job, actor=Actor.USER, at=at)
    return job


def move(job: Job, to: JobState, reason: Reason, *, at: datetime, **kwargs: object) -> None:
    actor = Actor.AGENT if to in (JobState.RUNNING, JobState.COMPLETED) else Actor.SCHEDULER
    job_transition(job_id=job.pk, to_state=to, reason=reason, actor=actor, at=at, **kwargs)


#: A legal path from QUEUED to each state: (to, reason) steps. PLACING steps get an alloc.
PATHS: dict[JobState, list[tuple[JobState, Reason]]] = {
    JobState.QUEUED: [],
    JobState.PLACING: [(JobState.PLACING, Reason.PLACED)],
    JobState.RUNNING: [(JobState.PLACING, Reason.PLACED), (JobState.RUNNING, Reason.STARTED)],
    JobState.PREEMPT_REQUESTED: [
        (JobState.PLACING, Reason.PLACED),
        (JobState.RUNNING, Reason.STARTED),
        (JobState.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED),
    ],
    JobState.CHECKPOINTING: [
        (JobState.PLACING, Reason.PLACED),
        (JobState.RUNNING, Reason.STARTED),
        (JobState.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED),
        (JobState.CHECKPOINTING, Reason.CHECKPOINT_STARTED),
    ],
    JobState.PREEMPTED: [
        (JobState.PLACING, Reason.PLACED),
        (JobState.RUNNING, Reason.STARTED),
        (JobState.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED),
        (JobState.PREEMPTED, Reason.NO_CHECKPOINT),
    ],
    JobState.COMPLETED: [
        (JobState.PLACING, Reason.PLACED),
        (JobState.RUNNING, Reason.STARTED),
        (JobState.COMPLETED, Reason.COMPLETED),
    ],
    JobState.FAILED: [
        (JobState.PLACING, Reason.PLACED),
        (JobState.RUNNING, Reason.STARTED),
        (JobState.FAILED, Reason.EXIT_FAILED),
    ],
    JobState.CANCELLED: [(JobState.CANCELLED, Reason.CANCELLED)],
}


def job_in_state(
    state: JobState, *, tenant: Tenant, node: Node, gpus: int = 4, at: datetime = T0,
    **spec: Any,
) -> Job:
    """A job brought to ``state`` by legal transitions; when it holds GPUs they are
    GPUs 0..gpus-1 of ``node``. ``spec``: more of the job's fields."""
    if state == JobState.SUBMITTED:
        return submitted_job(tenant, gpus=gpus, at=at)
    job = job_submit(tenant=tenant, name=f"to-{state.lower()}", gpus=gpus, at=at, **spec)
    for step, (to, reason) in enumerate(PATHS[state], start=1):
        extra = {"alloc": {node.name: list(range(gpus))}} if to == JobState.PLACING else {}
        move(job, to, reason, at=at + timedelta(seconds=60 * step), **extra)
    job.refresh_from_db()
    return job


def sign_in(client, username: str, password: str) -> bool:
    """Sign in through the login form, as a person does: the path the sign-in throttle
    guards (django-axes refuses ``Client.login``, which authenticates without a request).
    True if the form let them in."""
    client.get("/login/")  # the csrftoken cookie, for a client that enforces CSRF
    token = client.cookies.get("csrftoken")
    response = client.post("/login/", {"username": username, "password": password,
                                       "csrfmiddlewaretoken": token.value if token else ""})
    return response.status_code == 302
