"""The submit path's shortcuts give exactly what DRF gives: the fast validation of plainly
valid bodies (``api.fastvalid``) and the job summaries (``api.jobs.job_summary``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.api.fastvalid import fast_validated, plan
from scheduler_app.api.jobs import BatchIn, JobOut, JobSpecIn, SubmitIn, job_summary
from scheduler_app.core.states import JobState
from scheduler_app.models import Job
from tests.foundation.factories import T0, job_in_state

FIELDS = [name for name, *_ in plan(SubmitIn)]

values = st.one_of(
    st.integers(min_value=-(2**33), max_value=2**33),
    st.sampled_from([0, 1, 8, 2**15 - 1, 2**15, 2**31 - 1, 2**31, 366 * 86400,
                     366 * 86400 + 1, -1]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=12),
    st.sampled_from(["train", " train", "train ", "", "   ", "a\x00b", "x" * 201, "\ud800",
                     "team-a", "team a", "H100", "ümlaut"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
bodies = st.dictionaries(st.sampled_from([*FIELDS, "extra", "id"]), values, max_size=10)


def plainly_valid(i: int) -> dict[str, Any]:
    return {"name": f"sweep-{i}", "gpus": 1 + i % 8, "max_runtime_s": 600 + i,
            "checkpointable": i % 2 == 0, "command": "python train.py", "priority": i % 3}


def drf(serializer_class, data: Any) -> dict[str, Any] | None:
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        return None
    return serializer.validated_data


def plain(data: Any) -> Any:
    """OrderedDicts and lists of them as dicts, to compare."""
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies)
def test_a_single_submit_body_validates_as_drf_validates_it(body):
    fast = fast_validated(SubmitIn, body)
    slow = drf(SubmitIn, body)
    if fast is not None:
        assert slow is not None and plain(slow) == fast
    # (None: DRF judges it, with its own messages)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.one_of(bodies, st.builds(plainly_valid, st.integers(0, 99))),
                     max_size=4),
       tenant=values, key=values)
def test_a_batch_body_validates_as_drf_validates_it(jobs, tenant, key):
    body: dict[str, Any] = {"jobs": jobs, "tenant": tenant, "idempotency_key": key}
    fast = fast_validated(BatchIn, body)
    slow = drf(BatchIn, body)
    if fast is not None:
        assert slow is not None and plain(slow) == fast


def test_plainly_valid_bodies_take_the_fast_path():
    single = {"tenant": "vision", **plainly_valid(3)}
    assert fast_validated(SubmitIn, single) == plain(drf(SubmitIn, single))
    batch = {"tenant": "vision", "jobs": [plainly_valid(i) for i in range(1000)]}
    fast = fast_validated(BatchIn, batch)
    assert fast is not None and len(fast["jobs"]) == 1000
    assert fast == plain(drf(BatchIn, batch))


@pytest.mark.parametrize("bad", [
    {"gpus": "8"}, {"gpus": True}, {"name": ""}, {"name": "a\x00"},
    {"max_runtime_s": 366 * 86400 + 1}, {"checkpointable": 1}, {"gpus_per_node": 2**15},
    {"name": None}, {"priority": 2.0},
])
def test_anything_drf_refuses_is_left_to_drf(bad):
    body = {"tenant": "vision", **plainly_valid(1), **bad}
    assert drf(SubmitIn, body) is None
    assert fast_validated(SubmitIn, body) is None
    batch = {"tenant": "vision", "jobs": [plainly_valid(0), {**plainly_valid(1), **bad}]}
    assert fast_validated(BatchIn, batch) is None


def test_text_drf_would_trim_is_left_to_drf():
    body = {"tenant": "vision", **plainly_valid(1), "name": " padded "}
    assert fast_validated(SubmitIn, body) is None
    assert drf(SubmitIn, body)["name"] == "padded"


def test_a_key_that_is_no_field_is_left_to_drf_which_refuses_it():
    body = {"tenant": "vision", **plainly_valid(1), "max_runtime": 60}
    assert fast_validated(SubmitIn, body) is None and drf(SubmitIn, body) is None
    batch = {"tenant": "t", "jobs": [plainly_valid(0), {**plainly_valid(1), "gpu": 2}]}
    assert fast_validated(BatchIn, batch) is None and drf(BatchIn, batch) is None


def test_too_many_or_no_jobs_are_left_to_drf():
    assert fast_validated(BatchIn, {"tenant": "t", "jobs": []}) is None
    many = {"tenant": "t", "jobs": [plainly_valid(i) for i in range(1001)]}
    assert fast_validated(BatchIn, many) is None and drf(BatchIn, many) is None


def test_the_job_spec_serializer_is_planned_whole():
    assert [name for name, *_ in plan(JobSpecIn)] == list(JobSpecIn().fields)


@pytest.mark.django_db
@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING, JobState.COMPLETED])
def test_the_job_summary_is_the_serializers(world, state):
    job = job_in_state(state, tenant=world.vision, node=world.nodes[0], gpus=4)
    Job.objects.filter(pk=job.pk).update(owner=world.users["researcher"],
                                         estimate_start_at=T0 + timedelta(hours=1),
                                         idempotency_key="k-1", gpu_type="H100",
                                         gpus_per_node=4)
    job = Job.objects.select_related("tenant", "owner").get(pk=job.pk)
    assert job_summary(job) == JobOut(job).data
    job.owner = None
    assert job_summary(job) == JobOut(job).data
