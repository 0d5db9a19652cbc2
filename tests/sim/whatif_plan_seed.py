"""A live cluster with the leader's plan under way, for the what-if's baseline tests: made
through the services and ticked by the real leader (``LeaderLoop``), so the preemption
request, its claim, the reservation and the start estimates are what production writes.

40 GPUs, pod-a: n1..n5 (8 each):
n1 and n3 are A100s, the others H100s.
- bor (guarantee 0, borrows): B1 on n1, checkpointable (120 s to checkpoint): the victim;
- ent (guarantee 16): E, 16 GPUs (8 a node), queued: entitled, n3 idle is not enough, so
  the leader asks B1 to stop and claims n1 and n3 for E (no agent answers: B1 is still
  PREEMPT_REQUESTED at the snapshot);
- big (guarantee 16, borrows 16): R on n2 reaches its limit in 10 min, R2 holds n4; H, 16 GPUs,
  queued: the leader reserves n5 (idle) and n2 for H, starting when R ends;
- oth (guarantee 0, much used: behind big in fair share): O, 8 GPUs, submitted
  after that tick, 2 h: it cannot go on n5 without delaying H, so it waits.

Returns the job ids and the leader's start estimates (epoch seconds).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Pod, Tenant
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.leader import LeaderLoop

HOUR = 3600


def _running(tenant: Tenant, name: str, node: str, *, ago_s: int, limit_s: int,
             now: datetime, **spec: object) -> Job:
    at = now - timedelta(seconds=ago_s)
    job = job_submit(tenant=tenant, name=name, gpus=8, max_runtime_s=limit_s,
                     at=at - timedelta(seconds=60), actor=Actor.USER, **spec)  # type: ignore[arg-type]
    job_transition(job_id=job.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=at, alloc={node: list(range(8))})
    job_transition(job_id=job.pk, to_state=JobState.RUNNING, reason=Reason.STARTED,
                   actor=Actor.AGENT, at=at)
    return job


def seed() -> dict[str, object]:
    now = datetime.now(UTC)
    pod = Pod.objects.create(name="pod-a")
    for i in range(1, 6):  # n1 and n3 are E's type only
        Node.objects.create(name=f"n{i}", pod=pod, gpu_count=8, free_gpus=8,
                            gpu_type="A100" if i in (1, 3) else "H100")
    bor = Tenant.objects.create(name="bor", guaranteed_gpus=0, borrow_limit_gpus=40)
    ent = Tenant.objects.create(name="ent", guaranteed_gpus=16, borrow_limit_gpus=0)
    big = Tenant.objects.create(name="big", guaranteed_gpus=16, borrow_limit_gpus=16)
    oth = Tenant.objects.create(name="oth", guaranteed_gpus=0, borrow_limit_gpus=40,
                                usage_gpu_s=1e7, usage_at=now)  # behind big in fair share
    ids: dict[str, int] = {}
    ids["B1"] = _running(bor, "B1", "n1", ago_s=HOUR // 2, limit_s=4 * HOUR, now=now,
                         gpu_type="A100", checkpointable=True, checkpoint_interval_s=600,
                         checkpoint_time_s=120).pk
    ids["R"] = _running(big, "R", "n2", ago_s=50 * 60, limit_s=HOUR, now=now).pk
    ids["R2"] = _running(big, "R2", "n4", ago_s=600, limit_s=4 * HOUR, now=now).pk
    done = _running(oth, "done", "n5", ago_s=HOUR, limit_s=HOUR, now=now)
    job_transition(job_id=done.pk, to_state=JobState.COMPLETED, reason=Reason.COMPLETED,
                   actor=Actor.AGENT, at=now - timedelta(seconds=60))
    ids["done"] = done.pk  # ended: a what-if's --cancel of it says so
    ids["E"] = job_submit(tenant=ent, name="E", gpus=16, gpus_per_node=8, gpu_type="A100",
                          max_runtime_s=HOUR, at=now - timedelta(seconds=30)).pk
    ids["H"] = job_submit(tenant=big, name="H", gpus=16, gpus_per_node=8, gpu_type="H100",
                          max_runtime_s=HOUR, at=now - timedelta(seconds=20)).pk
    loop = LeaderLoop(holder="whatif-plan-seed", ttl_s=60, heartbeat_timeout_s=0)
    first = loop.step(now=now)
    assert not first.error, first.error
    ids["O"] = job_submit(tenant=oth, name="O", gpus=8, gpu_type="H100", max_runtime_s=2 * HOUR,
                          at=now + timedelta(seconds=1)).pk
    loop.release()
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=ids.values())}
    return {"ids": ids,
            "states": {k: jobs[pk].state for k, pk in ids.items()},
            "estimates": {k: jobs[pk].estimate_start_at.timestamp()
                          for k, pk in ids.items() if jobs[pk].estimate_start_at}}
