"""The replay reads only what the projection rules use, and reads it right.

On PostgreSQL the replay fetches a checkpoint's pointer alone, as text, when it is a JSON
string, and the whole detail otherwise; elsewhere it always fetches the whole detail.
Either way the rebuilt projection must be the services' (``replay --verify`` clean) for
every shape of checkpoint row, and a projection gone wrong must still be reported.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Job
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from tests.foundation.factories import T0, NodeFactory, TenantFactory, job_in_state, move

pytestmark = pytest.mark.django_db

S = JobState


@pytest.fixture
def running() -> Job:
    return job_in_state(S.RUNNING, tenant=TenantFactory(), node=NodeFactory())


@pytest.mark.parametrize(
    ("details", "pointer"),
    [
        ([{"resume_pointer": "s3://ckpt/1"}, {"resume_pointer": "s3://ckpt/2"}], "s3://ckpt/2"),
        # a checkpoint without a pointer keeps the last one
        ([{"resume_pointer": "s3://ckpt/1"}, {}], "s3://ckpt/1"),
        # not a string: the services keep its text, and so must the replay
        ([{"resume_pointer": 7}], "7"),
        ([{"resume_pointer": "gs://b/é \"quoted\"\n", "step": 900}], "gs://b/é \"quoted\"\n"),
    ],
)
def test_every_shape_of_checkpoint_row_replays_to_the_services_pointer(
    running, details, pointer
):
    for i, detail in enumerate(details):
        move(running, S.RUNNING, Reason.CHECKPOINTED, at=T0 + timedelta(hours=1, minutes=i),
             detail=detail)
    running.refresh_from_db()
    assert running.resume_pointer == pointer
    rebuilt = rebuild_from_log()
    assert rebuilt.jobs[running.pk].resume_pointer == pointer
    assert rebuilt.jobs[running.pk].last_checkpoint_at == T0 + timedelta(
        hours=1, minutes=len(details) - 1
    )
    assert compare_with_tables(rebuilt) == []


def test_a_projection_gone_wrong_is_still_reported(running):
    move(running, S.RUNNING, Reason.CHECKPOINTED, at=T0 + timedelta(hours=1),
         detail={"resume_pointer": "s3://ckpt/1"})
    Job.objects.filter(pk=running.pk).update(resume_pointer="s3://elsewhere", retry_count=3)
    found = {m.what: (m.from_log, m.in_tables) for m in compare_with_tables(rebuild_from_log())}
    assert found == {
        f"job {running.pk} resume_pointer": ("s3://ckpt/1", "s3://elsewhere"),
        f"job {running.pk} retry_count": (0, 3),
    }
