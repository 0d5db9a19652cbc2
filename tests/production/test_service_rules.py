"""Rules every edge gets from the services (the API, the dashboard and the simulator call
the same functions): durations of at most 366 days, and a checkpoint neither from the
future (past 60 s of clock skew) nor from before the run that reports it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Job, Transition
from scheduler_app.services import job_submit
from scheduler_app.services.agents import (
    CLOCK_SKEW,
    agent_report_checkpoint,
    agent_report_exit,
)
from scheduler_app.services.errors import Invalid
from scheduler_app.services.jobs import DURATION_FIELDS, MAX_DURATION_S, jobs_submit_batch
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import NodeFactory, TenantFactory, job_in_state

pytestmark = pytest.mark.django_db

S = JobState


@pytest.fixture
def tenant():
    NodeFactory()
    return TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)


@pytest.mark.parametrize("field", DURATION_FIELDS)
def test_a_duration_past_366_days_is_refused_at_submit(tenant, field):
    with pytest.raises(ValidationError) as refused:
        job_submit(tenant=tenant, name="ms-not-s", gpus=1, **{field: MAX_DURATION_S + 1})
    assert field in refused.value.message_dict
    assert "366 days" in refused.value.message_dict[field][0]
    assert not Job.objects.exists() and not Transition.objects.exists()


@pytest.mark.parametrize("field", DURATION_FIELDS)
def test_a_duration_of_366_days_is_accepted(tenant, field):
    job = job_submit(tenant=tenant, name="a-year", gpus=1, **{field: MAX_DURATION_S})
    assert job.state == S.QUEUED and getattr(job, field) == MAX_DURATION_S


def test_a_batch_names_the_job_whose_duration_is_absurd(tenant):
    specs = [{"name": "ok", "gpus": 1, "max_runtime_s": 3600},
             {"name": "ms", "gpus": 1, "max_runtime_s": 3_600_000_000}]
    with pytest.raises(Invalid) as refused:
        jobs_submit_batch(tenant=tenant, owner=None, specs=specs)
    assert set(refused.value.errors) == {"jobs[1].max_runtime_s"}
    assert not Job.objects.exists()


@pytest.fixture
def running(tenant):
    """A job RUNNING on a node, its run confirmed in virtual time (job_in_state's T0)."""
    node = NodeFactory()
    job = job_in_state(S.RUNNING, tenant=tenant, node=node, gpus=4)
    assert job.started_at is not None
    return node, job


def test_a_checkpoint_from_the_future_is_refused(running):
    node, job = running
    rows = Transition.objects.count()
    with pytest.raises(Invalid) as refused:
        agent_report_checkpoint(node=node, job=job, resume_pointer="s3://ck/1",
                                checkpoint_at=now_s() + CLOCK_SKEW + timedelta(seconds=5))
    assert (refused.value.field, refused.value.code) == ("checkpoint_at", "in_future")
    assert Transition.objects.count() == rows


def test_a_checkpoint_within_the_clock_skew_is_taken_as_written_now(tenant):
    # a node's clock a little ahead: the row is dated now, not in the future, where it
    # sat after the job's exit in its history (found by trying the product, 2026-12-07)
    node = NodeFactory()
    # job_in_state moves a minute a step: confirmed two minutes after its ``at``
    job = job_in_state(S.RUNNING, tenant=tenant, node=node, gpus=4,
                       at=now_s() - timedelta(minutes=5))
    before = now_s()
    ahead = before + CLOCK_SKEW - timedelta(seconds=5)
    row = agent_report_checkpoint(node=node, job=job, resume_pointer="s3://ck/2",
                                  checkpoint_at=ahead)
    assert row.reason == Reason.CHECKPOINTED and before <= row.at <= now_s()
    exit_row = agent_report_exit(node=node, job=job, outcome="completed", exit_code=0)
    assert row.at <= exit_row.at
    past = now_s() - timedelta(seconds=30)
    job = job_in_state(S.RUNNING, tenant=tenant, node=NodeFactory(), gpus=4,
                       at=now_s() - timedelta(minutes=5))
    row = agent_report_checkpoint(node=job.allocations.first().node, job=job,
                                  resume_pointer="s3://ck/3", checkpoint_at=past)
    assert row.at == past  # a time in the past is the agent's word


def test_a_checkpoint_from_before_the_run_started_is_refused(running):
    node, job = running
    rows = Transition.objects.count()
    with pytest.raises(Invalid) as refused:
        agent_report_checkpoint(node=node, job=job, resume_pointer="s3://ck/0",
                                checkpoint_at=job.started_at - timedelta(seconds=1))
    assert (refused.value.field, refused.value.code) == ("checkpoint_at", "before_start")
    assert Transition.objects.count() == rows


def test_virtual_times_of_the_simulator_pass_both_rules(tenant):
    # the db simulator's instants are seconds after the Unix epoch: always in the past
    node = NodeFactory()
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=3600)
    job = job_in_state(S.RUNNING, tenant=tenant, node=node, gpus=4, at=start)
    row = agent_report_checkpoint(node=node, job=job, resume_pointer="ck",
                                  checkpoint_at=job.started_at + timedelta(seconds=30))
    assert row.reason == Reason.CHECKPOINTED
    job.refresh_from_db()
    assert job.last_checkpoint_at == row.at
