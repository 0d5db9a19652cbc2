"""job_submit: admission, NeverFits, validation errors named by field, idempotency keys."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Job, Transition
from scheduler_app.services import job_cancel, job_submit

from .factories import T0, NodeFactory, TenantFactory, UserFactory, job_in_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    """Two 8-GPU H100 nodes and one 4-GPU A100 node; a team with 8 + 8 GPUs."""
    NodeFactory.create_batch(2, gpu_count=8, gpu_type="H100")
    NodeFactory(gpu_count=4, gpu_type="A100")
    return TenantFactory(name="vision", guaranteed_gpus=8, borrow_limit_gpus=8)


def log_of(job: Job) -> list[tuple[str | None, str, str]]:
    return list(Transition.objects.filter(job=job).values_list("from_state", "to_state", "reason"))


def test_a_job_that_fits_is_submitted_then_queued(cluster):
    owner = UserFactory(username="ada")
    job = job_submit(tenant=cluster, owner=owner, name="train", gpus=16, gpus_per_node=8, at=T0,
                     max_runtime_s=3600)  # it borrows 8: a limit lets it
    assert job.state == JobState.QUEUED
    assert log_of(job) == [
        (None, "SUBMITTED", "Submitted"),
        ("SUBMITTED", "QUEUED", "Admitted"),
    ]
    assert Transition.objects.filter(job=job).first().actor_name == "ada"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"gpus": 24}, "needs 24 GPUs; the cluster has 20"),
        ({"gpus": 8, "gpu_type": "A100"}, "needs 8 A100 GPUs; the cluster has 4"),
        ({"gpus": 16, "gpu_type": "B200"}, "needs 16 B200 GPUs; the cluster has 0"),
        ({"gpus": 16, "gpus_per_node": 16}, "needs 16 GPUs per node; the largest node has 8"),
        (
            {"gpus": 20, "preemptible": True},
            "needs 20 GPUs; team vision may hold at most 8 guaranteed + 8 borrowed = 16",
        ),
        # nothing may preempt it and it declares no limit: it may not borrow (2026-12-07)
        (
            {"gpus": 12},
            "needs 12 GPUs; team vision is guaranteed 8, and a job that cannot be preempted "
            "(not checkpointable, not preemptible) borrows past that only with a time limit "
            "of at most 7200 s",
        ),
        # an elastic job's full size, as a job that is not elastic (2147483647 GPUs with
        # min_gpus 1 was admitted: 2026-12-07)
        ({"gpus": 32, "min_gpus": 8}, "needs 32 GPUs at its full size; the cluster has 20"),
        ({"gpus": 16, "gpus_per_node": 4, "min_gpus": 4},
         "needs 4 nodes with 4 GPUs each at its full size; the cluster has 3"),
    ],
)
def test_a_job_that_can_never_fit_fails_at_once_with_never_fits(cluster, spec, why):
    job = job_submit(tenant=cluster, name="too-big", at=T0, **spec)
    assert job.state == JobState.FAILED
    last = Transition.objects.filter(job=job).last()
    assert (last.from_state, last.reason, last.detail["why"]) == ("SUBMITTED", "NeverFits", why)


def test_an_elastic_job_needs_only_its_minimum_to_be_admitted(cluster):
    # its full size fits the cluster (not the team: it may grow when the team may)
    job = job_submit(tenant=cluster, name="sweep", gpus=20, min_gpus=8, at=T0)
    assert job.state == JobState.QUEUED


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": 12, "gpus_per_node": 8}, "gpus_per_node"),
        ({"gpus": 8, "gpus_per_node": 0}, "gpus_per_node"),
        ({"gpus": 8, "min_gpus": 9}, "min_gpus"),
        ({"gpus": 8, "max_runtime_s": 0}, "max_runtime_s"),
        ({"gpus": 8, "checkpoint_interval_s": -5}, "checkpoint_interval_s"),
        ({"gpus": 8, "restart_s": -1}, "restart_s"),
        ({"gpus": 8, "name": ""}, "name"),
    ],
)
def test_invalid_input_is_refused_naming_the_field_and_writes_nothing(cluster, spec, field):
    with pytest.raises(ValidationError) as refused:
        job_submit(tenant=cluster, **{"name": "bad", **spec})
    assert list(refused.value.message_dict) == [field]
    assert not Job.objects.exists() and not Transition.objects.exists()


def test_the_same_idempotency_key_returns_the_first_job_and_writes_nothing(cluster):
    first = job_submit(tenant=cluster, name="a", gpus=1, idempotency_key="k-1", at=T0)
    rows = Transition.objects.count()
    again = job_submit(tenant=cluster, name="a", gpus=1, idempotency_key="k-1", at=T0)
    assert again.pk == first.pk
    assert Transition.objects.count() == rows
    other_team = TenantFactory()
    elsewhere = job_submit(tenant=other_team, name="a", gpus=1, idempotency_key="k-1", at=T0)
    assert elsewhere.pk != first.pk


def test_cancel_frees_the_gpus_and_is_logged_with_the_reason(cluster):
    node = NodeFactory(gpu_count=8)
    job = job_in_state(JobState.RUNNING, tenant=cluster, node=node, gpus=8)
    row = job_cancel(job_id=job.pk, actor_name="ada", why="wrong config", at=T0)
    job.refresh_from_db()
    node.refresh_from_db()
    assert (job.state, job.finished_at, node.free_gpus) == (JobState.CANCELLED, T0, 8)
    assert (row.reason, row.detail) == (Reason.CANCELLED, {"why": "wrong config"})
