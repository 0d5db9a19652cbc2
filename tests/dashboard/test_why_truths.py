"""What "why it waits" says must be true: found by a user session (2026-12-07), which was
told "at the latest" of a borrower's plan, "would fit now" of a size no nodes could hold,
and "a higher priority" for a job its team's quota held, and read "1 GPUs are free"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.models import Job, Node, Pod, Reservation, Tenant
from scheduler_app.selectors.why import why_pending
from scheduler_app.services import job_submit
from tests.foundation.factories import NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


@pytest.fixture
def team():
    pod = Pod.objects.create(name="pod-a")
    for i in range(8):
        NodeFactory(name=f"pod-a-n{i}", pod=pod)
    return TenantFactory(name="evals", guaranteed_gpus=32, borrow_limit_gpus=64)


def free(*gpus: int) -> None:
    """The nodes' free GPUs, in name order; the nodes not given have none."""
    for i in range(8):
        Node.objects.filter(name=f"pod-a-n{i}").update(free_gpus=gpus[i] if i < len(gpus)
                                                       else 0)


def waiting(team, reason: str, **spec) -> Job:
    job = job_submit(tenant=team, name="j", **{"gpus": 8, **spec})
    Job.objects.filter(pk=job.pk).update(pending_reason=reason)
    return Job.objects.select_related("tenant").get(pk=job.pk)


@pytest.mark.parametrize("kind, bound", [("reserved", True), ("borrowed", False)])
def test_a_reservation_in_the_way_is_a_bound_only_when_its_estimate_is(team, kind, bound):
    held = waiting(team, "Reservation", gpus=16, max_runtime_s=600)
    Job.objects.filter(pk=held.pk).update(estimate_start_at=NOW + timedelta(minutes=30),
                                          estimate_kind=kind)
    job = waiting(team, "Reservation", max_runtime_s=7200)
    Job.objects.filter(pk=job.pk).update(pending_blocker=held.pk)
    job.refresh_from_db()
    headline = why_pending(job=job, now=NOW).headline
    assert f"GPUs are reserved for job {held.pk}" in headline
    assert ("starts at the latest 06:30 UTC" in headline) is bound
    assert ("planned to start 06:30 UTC on borrowed quota (a plan, not a bound"
            in headline) is not bound


def test_a_smaller_size_is_offered_only_if_the_free_gpus_hold_it(team):
    # the team may hold 48 more, but the cluster has 5 GPUs free and no whole node
    Tenant.objects.filter(pk=team.pk).update(held_gpus=48)
    free(5)
    job = waiting(team, "QuotaLimit", gpus=64, gpus_per_node=8, checkpointable=True)
    answer = why_pending(job=job, now=NOW)
    assert "would fit now" not in answer.next_step
    assert "It starts when the team's running jobs free 16 GPUs" in answer.next_step
    # with 6 free nodes' worth in the team's room and 2 whole nodes free: 16 fits
    free(5, 8, 8)
    assert why_pending(job=job, now=NOW).next_step == (
        "Asking for 16 GPUs (8 per node) would fit now.")


def reserve(job: Job, kind: str, nodes: dict[str, list[int]], start: datetime | None,
            position: int) -> None:
    Reservation.objects.create(
        position=position, job=job, kind=kind, start_at=start,
        gpus=sum(len(ix) for ix in nodes.values()), nodes=sorted(nodes),
        plan={"alloc": nodes} if kind == "reservation" else {"at_s": 0},
        published_at=NOW)


def test_a_smaller_size_is_not_offered_on_gpus_a_reservation_or_claim_holds(team):
    # "Asking for 8 GPUs (8 per node) would fit now" was told to six jobs while the only
    # node with 8 free was reserved, and four jobs of that shape waited for it with reason
    # Reservation (a check of the estimates on the demo, 2026-12-07)
    free(8, 6)
    held = waiting(team, "Reservation", gpus=16, gpus_per_node=8, max_runtime_s=600)
    reserve(held, "reservation", {"pod-a-n0": list(range(8))}, NOW + timedelta(minutes=30), 0)
    job = waiting(team, "Resources", gpus=16, gpus_per_node=8, max_runtime_s=3600)
    assert "would fit now" not in why_pending(job=job, now=NOW).next_step
    # a size that ends (by its own limit) before the reserved start may use them
    short = waiting(team, "Resources", gpus=16, gpus_per_node=8, max_runtime_s=900)
    assert why_pending(job=short, now=NOW).next_step == (
        "Asking for 8 GPUs (8 per node) would fit now.")
    # a node promised to a reclaiming head is the head's, whatever the job's limit
    Reservation.objects.all().delete()
    reserve(held, "reclaim", {"pod-a-n0": list(range(8))}, NOW + timedelta(seconds=30), 0)
    assert "would fit now" not in why_pending(job=short, now=NOW).next_step
    # the job's own reservation holds nothing back from it
    Reservation.objects.all().delete()
    reserve(job, "reservation", {"pod-a-n0": list(range(8))}, NOW + timedelta(minutes=30), 0)
    assert why_pending(job=job, now=NOW).next_step == (
        "Asking for 8 GPUs (8 per node) would fit now.")


def test_the_teams_jobs_ahead_take_its_quota_first(team):
    # the 3rd and 4th of a team's queue were told "free 1 GPU" while the two ahead of
    # them needed 24 (an operator's session, 2026-12-07)
    Tenant.objects.filter(pk=team.pk).update(held_gpus=90)
    free(8)  # a smaller size would fit the first, but not past the jobs ahead
    for gpus in (8, 16):
        waiting(team, "QuotaLimit", gpus=gpus, priority=1, checkpointable=True)
    job = waiting(team, "QuotaLimit", checkpointable=True)
    job.tenant.refresh_from_db()
    assert why_pending(job=job, now=NOW).next_step == (
        "It starts when the team's running jobs free 26 GPUs: the 2 jobs of the team ahead "
        "of it in its queue take 24 GPUs of the team's quota first; an operator can also "
        "raise the team's borrow limit.")
    first = Job.objects.select_related("tenant").get(tenant=team, gpus=8, priority=1)
    assert why_pending(job=first, now=NOW).next_step == (
        "Asking for 6 GPUs would fit now.")


def test_a_quota_headline_names_the_jobs_ahead_when_they_are_what_it_waits_for(team):
    # "holds 56 GPUs of its 96 ...; this job's 32 would take it to 88" read as room: the
    # job ahead takes 24 of the rest first (an operator's session, 2026-12-07)
    Tenant.objects.filter(pk=team.pk).update(held_gpus=56)
    waiting(team, "QuotaLimit", gpus=24, priority=1, checkpointable=True)
    job = waiting(team, "QuotaLimit", gpus=32, checkpointable=True)
    job.tenant.refresh_from_db()
    answer = why_pending(job=job, now=NOW)
    assert answer.headline == (
        "Team evals holds 56 GPUs of its 96 (32 guaranteed + 64 borrow limit), and the job "
        "of the team ahead of it in its queue takes 24 GPUs of the rest first; this job's "
        "32 would take it to 112.")
    assert "ahead of it in its queue takes 24 GPUs" in answer.next_step


def test_priority_does_not_promise_what_the_teams_quota_holds_back(team):
    Tenant.objects.filter(pk=team.pk).update(held_gpus=96)
    job = waiting(team, "Priority")
    job.tenant.refresh_from_db()
    step = why_pending(job=job, now=NOW).next_step
    assert "a higher priority" not in step
    assert step == ("Team evals also holds 96 GPUs of the 96 it may hold (32 guaranteed + "
                    "64 borrow limit): it starts when the team's running jobs free 8 GPUs, "
                    "whatever its priority.")


@pytest.mark.parametrize("reason, gpus, words", [
    ("Resources", (1,), "It needs 16 GPUs; 1 GPU is free on healthy nodes."),
    ("Resources", (), "It needs 16 GPUs; no GPU is free on healthy nodes."),
    ("Topology", (4, 4), "It needs 16 GPUs (8 per node): 8 GPUs are free, but no node "
                               "has 8 free."),
    ("Topology", (8, 4), "It needs 16 GPUs (8 per node): 12 GPUs are free, but only "
                               "1 node has 8 free."),
])
def test_the_counts_are_written_in_good_english(team, reason, gpus, words):
    free(*gpus)
    shape = {"gpus_per_node": 8} if reason == "Topology" else {}
    job = waiting(team, reason, gpus=16, **shape)
    assert why_pending(job=job, now=NOW).headline == words


@pytest.mark.parametrize("head_gpus, words", [
    (16, "1 borrowing job is being stopped to give it 8 GPUs of the 16 it needs (the rest "
         "is free already)."),
    (8, "1 borrowing job is being stopped to give it 8 GPUs."),
])
def test_preempting_says_what_the_victims_free_of_what_the_job_needs(team, head_gpus, words):
    from scheduler_app.core.states import JobState, Reason
    from scheduler_app.core.types import Actor
    from scheduler_app.services import job_transition

    other = TenantFactory(name="vision", guaranteed_gpus=0, borrow_limit_gpus=64)
    victim = job_submit(tenant=other, name="v", gpus=8, checkpointable=True)
    job = waiting(team, "Preempting", gpus=head_gpus)
    for to, reason, extra in ((JobState.PLACING, Reason.PLACED, {"alloc": {"pod-a-n0": list(
            range(8))}}), (JobState.RUNNING, Reason.STARTED, {}),
            (JobState.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED,
             {"detail": {"for": str(job.pk), "grace_s": 60}})):
        job_transition(job_id=victim.pk, to_state=to, reason=reason, actor=Actor.SCHEDULER,
                       at=NOW - timedelta(seconds=30), **extra)
    assert why_pending(job=job, now=NOW).headline == words


def test_a_planned_start_on_another_day_says_which(team):
    # "planned start expected 13:06 UTC" was read at 13:12 as already past: it was 13:06
    # the next day (a researcher's session, 2026-12-07)
    job = waiting(team, "Resources", max_runtime_s=600)
    for later, words in ((timedelta(hours=7), "13:00 UTC"),
                         (timedelta(hours=31), "13:00 UTC tomorrow"),
                         (timedelta(days=3, hours=7), "13:00 UTC on 2026-12-10")):
        Job.objects.filter(pk=job.pk).update(estimate_start_at=NOW + later,
                                              estimate_kind="projected")
        job.refresh_from_db()
        evidence = why_pending(job=job, now=NOW).evidence
        assert f"planned start expected {words}" in evidence, evidence
