"""The what-if snapshot keeps what makes jobs wait besides GPUs and quota: dependencies on
jobs still in the system, array caps, owners under a per-user cap and the team limits;
played forward, the dependent waits for its job and the array keeps its cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Node, Pod, Tenant
from scheduler_app.selectors.whatif import live_snapshot
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.jobs import array_submit
from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.sim.whatif import snapshot_scenario

from .helpers import run

pytestmark = pytest.mark.django_db(transaction=True)
HOUR = 3600


def test_a_snapshot_keeps_dependencies_arrays_owners_and_team_limits(django_user_model):
    now = datetime.now(UTC).replace(microsecond=0)
    pod = Pod.objects.create(name="pod-a")
    for name in ("a1", "a2"):
        Node.objects.create(name=name, pod=pod, gpu_count=8, free_gpus=8, gpu_type="H100")
    team = Tenant.objects.create(name="team", guaranteed_gpus=16, borrow_limit_gpus=0,
                                 max_gpus_per_user=8, default_runtime_s=HOUR,
                                 max_runtime_s=4 * HOUR)
    ann = django_user_model.objects.create(username="ann")
    ago = now - timedelta(seconds=600)
    up = job_submit(tenant=team, name="up", gpus=8, max_runtime_s=HOUR, owner=ann, at=ago)
    job_transition(job_id=up.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=ago, alloc={"a1": list(range(8))})
    job_transition(job_id=up.pk, to_state=JobState.RUNNING, reason=Reason.STARTED,
                   actor=Actor.AGENT, at=ago)
    done = job_submit(tenant=team, name="done", gpus=1, max_runtime_s=60, at=ago)
    job_transition(job_id=done.pk, to_state=JobState.CANCELLED, reason=Reason.CANCELLED,
                   actor=Actor.USER, at=ago)
    down = job_submit(tenant=team, name="down", gpus=4, max_runtime_s=600, at=ago,
                      depends_on=[{"job": up.pk, "when": "ok"},
                                  {"job": done.pk, "when": "any"}])
    tasks = array_submit(tenant=team, owner=None, name="sweep", gpus=2, count=4,
                         max_running=1, max_runtime_s=300, at=ago)

    snap = live_snapshot(now)
    by_id = {j.id: j for j in snap.jobs}
    assert by_id[str(up.pk)].owner == f"user-{ann.pk}"
    # the cancelled job is not in the system: only the dependency on "up" is left
    assert by_id[str(down.pk)].depends_on == ((str(up.pk), "ok"),)
    first = tasks[0].pk
    assert by_id[str(tasks[2].pk)].array == (str(first), 2, 4, 1)
    (tenant,) = snap.tenants
    assert (tenant.max_gpus_per_user, tenant.default_runtime_s, tenant.max_runtime_s) == (
        8, HOUR, 4 * HOUR)

    data = snapshot_scenario(snap, hours=3)
    scenario = validate_scenario(data)
    result = run(scenario)
    jobs = result["jobs"]
    up_end = 3000  # its 1 h limit, 600 s of it run by the snapshot
    assert jobs[str(down.pk)]["first_start_s"] >= up_end
    assert {p["reason"] for p in jobs[str(down.pk)]["pending_reasons"]} == {"Dependency"}
    spans = [(r["start_s"], r["end_s"]) for t in tasks for r in jobs[str(t.pk)]["runs"]]
    assert len(spans) == 4
    assert all(sum(1 for a, b in spans if a <= t < b) <= 1 for t, _ in spans)


def test_a_running_jobs_limit_counts_from_its_placement_as_the_scheduler_counts_it():
    """The snapshot dated a RUNNING job's run from the agent's confirmation (started_at),
    30 s after its placement: the what-if ended it, and started what waited for it, 30 s
    after the leader had failed it at its limit (found by a user session, 2026-12-07).
    The core's timer runs from the placement (QUEUED -> PLACING)."""
    now = datetime.now(UTC).replace(microsecond=0)
    pod = Pod.objects.create(name="pod-a")
    Node.objects.create(name="a1", pod=pod, gpu_count=8, free_gpus=8, gpu_type="H100")
    team = Tenant.objects.create(name="team", guaranteed_gpus=8, borrow_limit_gpus=0)
    placed, confirmed = now - timedelta(seconds=600), now - timedelta(seconds=570)
    up = job_submit(tenant=team, name="up", gpus=8, max_runtime_s=HOUR, at=placed)
    job_transition(job_id=up.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=placed, alloc={"a1": list(range(8))})
    job_transition(job_id=up.pk, to_state=JobState.RUNNING, reason=Reason.STARTED,
                   actor=Actor.AGENT, at=confirmed)
    down = job_submit(tenant=team, name="down", gpus=8, max_runtime_s=600, at=placed,
                      depends_on=[{"job": up.pk, "when": "ok"}])

    snap = live_snapshot(now)
    assert {j.id: j.started_s for j in snap.jobs}[str(up.pk)] == -600
    jobs = run(validate_scenario(snapshot_scenario(snap, hours=2)))["jobs"]
    assert jobs[str(up.pk)]["runs"][-1]["end_s"] == HOUR - 600  # at its limit, from placement
    assert jobs[str(down.pk)]["first_start_s"] == HOUR - 600
