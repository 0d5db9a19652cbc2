"""A small live cluster under contention for the what-if tests, made through the services
(``manage.py shell -c "from tests.sim.whatif_seed import seed; seed()"``).

48 GPUs, full at the snapshot:
- pod-a: a1..a4, pod-b: b1, b2 (8 GPUs each);
- alpha (guarantee 8, no borrowing) runs 8 GPUs on b2 and has three 8-GPU jobs queued:
  they wait for its own quota;
- beta (24 + 24) runs 16 GPUs on a1, a2 and has two 8-GPU jobs queued: they wait for GPUs;
- gamma (8 + 40) runs 24 GPUs on a3, a4, b1: it borrows 16, in one job nothing may
  preempt (it cannot checkpoint; its 2 h limit lets it borrow): beta, within its
  guarantee, would take a checkpointable one back at once (the reclaim search).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Pod, Tenant
from scheduler_app.services import job_submit, job_transition

HOUR = 3600


def _running(tenant: Tenant, name: str, nodes: list[str], *, ago_s: int, limit_s: int,
             now: datetime, **spec: object) -> Job:
    at = now - timedelta(seconds=ago_s)
    job = job_submit(tenant=tenant, name=name, gpus=8 * len(nodes), max_runtime_s=limit_s,
                     at=at - timedelta(seconds=60), actor=Actor.USER, **spec)  # type: ignore[arg-type]
    job_transition(job_id=job.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=at, alloc={n: list(range(8)) for n in nodes})
    job_transition(job_id=job.pk, to_state=JobState.RUNNING, reason=Reason.STARTED,
                   actor=Actor.AGENT, at=at)
    return job


def seed() -> dict[str, int]:
    now = datetime.now(UTC)
    for pod_name, names in (("pod-a", ["a1", "a2", "a3", "a4"]), ("pod-b", ["b1", "b2"])):
        pod = Pod.objects.create(name=pod_name)
        for name in names:
            Node.objects.create(name=name, pod=pod, gpu_count=8, free_gpus=8, gpu_type="H100")
    alpha = Tenant.objects.create(name="alpha", guaranteed_gpus=8, borrow_limit_gpus=0)
    beta = Tenant.objects.create(name="beta", guaranteed_gpus=24, borrow_limit_gpus=24)
    gamma = Tenant.objects.create(name="gamma", guaranteed_gpus=8, borrow_limit_gpus=40)
    ids: dict[str, int] = {}
    ids["alpha-run"] = _running(alpha, "alpha-run", ["b2"], ago_s=HOUR, limit_s=3 * HOUR,
                                now=now).pk
    ids["beta-run"] = _running(beta, "beta-run", ["a1", "a2"], ago_s=HOUR, limit_s=4 * HOUR,
                               now=now).pk
    ids["gamma-run"] = _running(gamma, "gamma-run", ["a3", "a4", "b1"], ago_s=HOUR // 2,
                                limit_s=2 * HOUR, now=now).pk
    for i in range(3):
        ids[f"alpha-q{i}"] = job_submit(tenant=alpha, name=f"alpha-q{i}", gpus=8,
                                        max_runtime_s=HOUR,
                                        at=now - timedelta(seconds=600 - i)).pk
    for i in range(2):
        ids[f"beta-q{i}"] = job_submit(tenant=beta, name=f"beta-q{i}", gpus=8,
                                       max_runtime_s=2 * HOUR,
                                       at=now - timedelta(seconds=300 - i)).pk
    return ids
