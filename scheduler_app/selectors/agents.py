"""What a node's agent is told: start these jobs, stop those, keep running the rest.

One query over the node's open allocations (``alloc_open_by_node``) plus, for the jobs
being preempted, their latest PREEMPT_REQUESTED row (for the grace deadline).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Max

from scheduler_app.core.scheduler import capped_grace
from scheduler_app.core.states import JobState
from scheduler_app.models import Allocation, Node, Transition
from scheduler_app.scheduler_config import scheduler_config

S = JobState
STOPPING = (S.PREEMPT_REQUESTED, S.CHECKPOINTING)
RUNNING = (S.RUNNING, *STOPPING)


def grace_s(checkpoint_time_s: int | None) -> int:
    """The grace window the scheduler grants a job that declared ``checkpoint_time_s``: the
    core's rule and the operator's settings (the default grace, and its cap)."""
    return capped_grace(checkpoint_time_s, scheduler_config())


def agent_assignments(*, node: Node) -> dict[str, Any]:
    """``{"start": [...], "preempt": [...], "running": [...]}`` for ``node``'s agent.

    - ``start``: jobs PLACING with GPUs here, and multi-node jobs already RUNNING (another
      node confirmed first): ``job_id``, ``run`` (the placement's key: an agent already
      running that placement ignores the entry), ``name``, ``command``, ``gpus``
      (``{node: [indices]}`` for this node only), ``nodes`` (every node of the gang, for
      the rendezvous), ``resume_pointer``, ``env`` (CUDA_VISIBLE_DEVICES and SCHED_*; a
      task of a job array also ARRAY_INDEX, ARRAY_COUNT and SCHED_ARRAY_ID).
      The agent starts each, then calls ``agent_confirm_start``.
    - ``preempt``: jobs asked to stop: ``job_id``, ``state``, ``grace_deadline`` (ISO
      8601): checkpoint (``agent_ack_preempt``, ``agent_report_checkpoint``) and exit
      (``agent_report_exit(outcome="preempted")``) before it, or be killed at it.
    - ``running``: ids of the jobs the node should be running (RUNNING or being
      preempted); anything else it finds running is an orphan to stop.
    """
    allocs = list(
        Allocation.objects.filter(node=node, end__isnull=True)
        .select_related("job")
        .order_by("job_id")
    )
    jobs = {a.job_id: a.job for a in allocs}
    mine = {a.job_id: sorted(a.gpu_indices) for a in allocs}
    placed_at = {a.job_id: a.start for a in allocs}
    # A gang's nodes confirm one by one: the first confirmation makes the job RUNNING, and
    # the nodes that have not started their part yet must still be told to. So a
    # multi-node job stays in ``start`` while it runs, with its placement's ``run`` key;
    # an agent that already runs that placement ignores the entry.
    candidates = [pk for pk, job in jobs.items() if job.state in (S.PLACING, S.RUNNING)]
    gangs: dict[int, list[str]] = {}
    for job_id, name in (
        Allocation.objects.filter(job_id__in=candidates, end__isnull=True)
        .order_by("node__name")
        .values_list("job_id", "node__name")
    ):
        gangs.setdefault(job_id, []).append(name)
    placing = [pk for pk in candidates
               if jobs[pk].state == S.PLACING or len(gangs.get(pk, ())) > 1]
    stopping = [pk for pk, job in jobs.items() if job.state in STOPPING]
    asked = dict(
        Transition.objects.filter(job_id__in=stopping, to_state=S.PREEMPT_REQUESTED)
        .exclude(from_state=S.PREEMPT_REQUESTED)
        .values("job_id")
        .annotate(at=Max("at"))
        .values_list("job_id", "at")
    )
    start = []
    for pk in placing:
        job = jobs[pk]
        indices = mine[pk]
        env = {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in indices),
            "SCHED_JOB_ID": str(pk),
            "SCHED_NODES": ",".join(gangs.get(pk, [node.name])),
            "SCHED_JOB_GPUS": str(job.gpus),
        }
        if job.resume_pointer:
            env["SCHED_RESUME_POINTER"] = job.resume_pointer
        if job.array_id is not None:
            # a task of a job array (Slurm's SLURM_ARRAY_TASK_ID, _COUNT, _JOB_ID)
            env["ARRAY_INDEX"] = str(job.array_index)
            env["ARRAY_COUNT"] = str(job.array_count)
            env["SCHED_ARRAY_ID"] = str(job.array_id)
        start.append({
            "job_id": pk,
            "name": job.name,
            "command": job.command,
            "gpus": {node.name: indices},
            "nodes": gangs.get(pk, [node.name]),
            "resume_pointer": job.resume_pointer,
            "env": env,
            "run": placed_at[pk].isoformat(),  # the placement: same on every node of it
        })
    preempt = []
    for pk in stopping:
        job = jobs[pk]
        grace = grace_s(job.checkpoint_time_s)
        at = asked.get(pk)
        preempt.append({
            "job_id": pk,
            "state": job.state,
            "grace_deadline": (at + timedelta(seconds=grace)).isoformat() if at else None,
        })
    running = [pk for pk, job in jobs.items() if job.state in RUNNING]
    return {"start": start, "preempt": preempt, "running": running}
