"""The demo's simulated node agents, and a trickle of demo jobs.

Until real agents run on real nodes, :class:`SimulatedAgents` plays every node of the
demo cluster through the same agent services a real agent calls
(``services.agents``): it reads each node's assignments (``selectors.agents``), confirms
the starts, reports checkpoints, acknowledges preemption requests (checkpoint, then exit),
and reports each job's exit once its run time has passed. :class:`Trickle` submits a
job now and then through ``services.jobs.job_submit``, as researchers would.

How long a job "runs": ``--demo-seconds N`` in its command if present (the trickle's jobs
carry one), else a share of its time limit (30 to 90 %, fixed per job), else
``default_run_s``. A resumed job runs only what was left at its last checkpoint: the
resume pointer records the seconds of work it holds (``demo://job-7/t=340``). A few jobs
fail (exit code 1), fixed per job id, so the demo shows failures too.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q

from scheduler_app.core.states import JobState
from scheduler_app.models import Allocation, Job, Membership, Node, Tenant
from scheduler_app.selectors.agents import agent_assignments
from scheduler_app.services.agents import (
    agent_ack_preempt,
    agent_confirm_start,
    agent_heartbeat,
    agent_register,
    agent_report_checkpoint,
    agent_report_exit,
    is_replayed,
)
from scheduler_app.services.errors import ServiceError
from scheduler_app.services.jobs import job_submit
from scheduler_app.services.transitions import now_s

log = logging.getLogger("dashboard.demo")

S = JobState
_RUN = re.compile(r"--demo-seconds[ =](\d+)")
_DONE = re.compile(r"/t=(\d+)$")


def _spread(job_id: int, low: float, high: float) -> float:
    """A number in [low, high) fixed per job (the demo replays the same way)."""
    return low + (high - low) * random.Random(job_id * 7919).random()


def planned_run_s(job: Job, *, default_run_s: int) -> int:
    """The seconds of work the job needs in all (see the module docstring)."""
    m = _RUN.search(job.command or "")
    if m:
        return int(m.group(1))
    if job.max_runtime_s:
        return max(1, int(job.max_runtime_s * _spread(job.pk, 0.3, 0.9)))
    return default_run_s


def work_done_s(resume_pointer: str) -> int:
    m = _DONE.search(resume_pointer or "")
    return int(m.group(1)) if m else 0


def fails(job: Job) -> bool:
    """One job in twenty fails, the same ones every time."""
    return _spread(job.pk, 0, 1) < 0.05


@dataclass
class _Run:
    """What the agent knows of a job it started: when, and the work it had already."""

    started: datetime
    done_before: int
    last_checkpoint: datetime
    acked_at: datetime | None = None


@dataclass
class SimulatedAgents:
    """Plays every node's agent. ``step(now)`` does one round; call it every second or so.

    ``start_delay_s``: how long a start takes before the agent confirms it (so PLACING
    shows); ``checkpoint_write_s``: how long a requested checkpoint takes (capped by the
    job's own checkpoint time); ``checkpoint_every_s``: the most time between two
    checkpoints of a running job (its own interval if shorter); ``heartbeat_s``: how often
    each node says it is alive (0: never, nodes then stay exempt from the timeout).
    ``skip_nodes``: nodes a real agent runs (``manage.py demo_real_agents``): left alone.
    """

    default_run_s: int = 900
    start_delay_s: int = 3
    checkpoint_write_s: int = 5
    checkpoint_every_s: int = 60
    heartbeat_s: int = 5
    skip_nodes: frozenset[str] = frozenset()
    runs: dict[int, _Run] = field(default_factory=dict)
    placing_seen: dict[int, datetime] = field(default_factory=dict)
    last_heartbeat: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def register_all(self, now: datetime | None = None) -> list[Node]:
        """Register every known node again, as agents do when they start: a node marked
        down (its agent was silent) comes back; a draining node stays draining."""
        nodes = list(Node.objects.select_related("pod").exclude(name__in=self.skip_nodes)
                     .order_by("name"))
        return [
            agent_register(name=n.name, pod=n.pod.name, gpus=n.gpu_count, gpu_type=n.gpu_type,
                           rail=n.rail, at=now)
            for n in nodes
        ]

    def step(self, now: datetime | None = None) -> dict[str, int]:
        """One round over the nodes that hold jobs; returns what it reported."""
        now = now or now_s()
        self.counts = {}
        if self.heartbeat_s and (
            self.last_heartbeat is None
            or now - self.last_heartbeat >= timedelta(seconds=self.heartbeat_s)
        ):
            for node in (Node.objects.exclude(health="down").exclude(name__in=self.skip_nodes)
                         .order_by("name")):
                agent_heartbeat(node=node, at=now)
            self.last_heartbeat = now
        busy = (
            Node.objects.filter(
                pk__in=Allocation.objects.filter(end__isnull=True).values("node_id")
            )
            .exclude(health="down")
            .exclude(name__in=self.skip_nodes)
            .order_by("name")
        )
        handled: set[int] = set()
        for node in busy:
            todo = agent_assignments(node=node)
            for item in todo["start"]:
                if item["job_id"] not in handled:
                    handled.add(item["job_id"])
                    self._start(node, item, now)
            for item in todo["preempt"]:
                if item["job_id"] not in handled:
                    handled.add(item["job_id"])
                    self._stop(node, item, now)
            for job_id in todo["running"]:
                if job_id not in handled:
                    handled.add(job_id)
                    self._run(node, job_id, now)
        # forget jobs no node runs any more (finished, cancelled, requeued by a node failure)
        for job_id in list(self.runs):
            if job_id not in handled:
                del self.runs[job_id]
        for job_id in list(self.placing_seen):
            if job_id not in handled:
                del self.placing_seen[job_id]
        return self.counts

    # ------------------------------------------------------------------ each job
    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _call(self, what: str, fn: Any, **kwargs: Any) -> bool:
        """One agent call; a refusal (the job moved meanwhile) is logged, not raised."""
        try:
            row = fn(**kwargs)
        except ServiceError as error:
            log.info("demo agent: %s refused: %s", what, error)
            return False
        if not is_replayed(row):  # not a gang's repeated report
            self._count(what)
        return True

    def _start(self, node: Node, item: dict[str, Any], now: datetime) -> None:
        job_id = item["job_id"]
        if job_id in self.runs:
            if Job.objects.filter(pk=job_id, state=S.RUNNING).exists():
                self._run(node, job_id, now)  # a gang another node confirmed: it runs
                return
            # a run this agent knew, requeued and placed again between two rounds (a node
            # of its gang went down): a new start, not the old run (the job sat in PLACING
            # until the placing timeout; found by an operator's session, 2026-12-07)
            del self.runs[job_id]
        seen = self.placing_seen.setdefault(job_id, now)
        if now - seen < timedelta(seconds=self.start_delay_s):
            return
        job = Job.objects.get(pk=job_id)
        if self._call("start", agent_confirm_start, node=node, job=job, at=now):
            done = work_done_s(item.get("resume_pointer") or "")
            self.runs[job_id] = _Run(started=now, done_before=done, last_checkpoint=now)
            self.placing_seen.pop(job_id, None)

    def _run(self, node: Node, job_id: int, now: datetime) -> None:
        job = Job.objects.get(pk=job_id)
        if job.state != S.RUNNING:
            return
        run = self.runs.get(job_id)
        if run is None:  # started before this agent (a restart of the demo): adopt it
            begun = job.started_at or now
            run = _Run(started=begun, done_before=work_done_s(job.resume_pointer),
                       last_checkpoint=job.last_checkpoint_at or begun)
            self.runs[job_id] = run
        elapsed = int((now - run.started).total_seconds())
        done = run.done_before + elapsed
        need = planned_run_s(job, default_run_s=self.default_run_s)
        if done >= need or (fails(job) and elapsed >= need // 3):
            outcome = "failed" if fails(job) else "completed"
            code = 1 if outcome == "failed" else 0
            if self._call(outcome, agent_report_exit, node=node, job=job, outcome=outcome,
                          exit_code=code, at=now):
                self.runs.pop(job_id, None)
            return
        every = min(job.checkpoint_interval_s or self.checkpoint_every_s,
                    self.checkpoint_every_s)
        if job.checkpointable and now - run.last_checkpoint >= timedelta(seconds=every):
            self._checkpoint(node, job, done, now)
            run.last_checkpoint = now

    def _checkpoint(self, node: Node, job: Job, done: int, now: datetime) -> bool:
        return self._call("checkpoint", agent_report_checkpoint, node=node, job=job,
                          resume_pointer=f"demo://job-{job.pk}/t={done}", checkpoint_at=now)

    def _stop(self, node: Node, item: dict[str, Any], now: datetime) -> None:
        """Asked to stop: a checkpointable job acknowledges, writes its checkpoint and
        exits; one that cannot checkpoint exits at once."""
        job = Job.objects.get(pk=item["job_id"])
        run = self.runs.get(job.pk)
        if run is None:
            begun = job.started_at or now
            run = _Run(started=begun, done_before=work_done_s(job.resume_pointer),
                       last_checkpoint=job.last_checkpoint_at or begun)
            self.runs[job.pk] = run
        if job.state == S.PREEMPT_REQUESTED:
            if not job.checkpointable:
                if self._call("preempted", agent_report_exit, node=node, job=job,
                              outcome="preempted", at=now):
                    self.runs.pop(job.pk, None)
                return
            if self._call("ack", agent_ack_preempt, node=node, job=job, at=now):
                run.acked_at = now
            return
        if job.state == S.CHECKPOINTING:
            acked = run.acked_at or now
            write_s = min(job.checkpoint_time_s or self.checkpoint_write_s,
                          self.checkpoint_write_s)
            if now - acked < timedelta(seconds=write_s):
                return
            done = run.done_before + int((now - run.started).total_seconds())
            if self._checkpoint(node, job, done, now) and self._call(
                "preempted", agent_report_exit, node=node, job=job, outcome="preempted",
                at=now,
            ):
                self.runs.pop(job.pk, None)


# --------------------------------------------------------------------------- the trickle
#: (name, GPUs, GPUs per node, checkpointable, time limit s, run s): the shapes of a day
CATALOGUE: tuple[tuple[str, int, int | None, bool, int | None, int], ...] = (
    ("notebook-eval", 1, None, False, 900, 120),
    ("lr-sweep", 2, None, True, 1200, 240),
    ("tokenizer-bench", 4, None, False, 600, 90),
    ("finetune", 8, 8, True, 1800, 300),
    ("ablation", 8, 8, True, 2400, 420),
    ("pretrain-shard", 16, 8, True, 3600, 600),
    ("rl-rollouts", 24, 8, True, 3600, 480),
    ("scale-test", 32, 8, True, 2400, 360),
    ("moe-pretrain", 64, 8, True, 5400, 900),
)


@dataclass
class Trickle:
    """Submits a demo job every ``every_s`` seconds (random team, researcher, shape),
    keeping at most ``max_queued`` jobs waiting so the queue stays readable."""

    every_s: int = 15
    max_queued: int = 40
    seed: int = 0
    last: datetime | None = None
    rng: random.Random = field(init=False)
    submitted: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def step(self, now: datetime | None = None) -> Job | None:
        now = now or now_s()
        if self.last is not None and now - self.last < timedelta(seconds=self.every_s):
            return None
        self.last = now
        if Job.objects.filter(state=S.QUEUED).count() >= self.max_queued:
            return None
        tenants = list(Tenant.objects.order_by("name"))
        if not tenants:
            return None
        tenant = self.rng.choice(tenants)
        name, gpus, per_node, ckpt, limit, run_s = self.rng.choice(CATALOGUE)
        if gpus > tenant.quota_limit_gpus:
            gpus, per_node = 8, 8
        owners = list(
            get_user_model().objects.filter(
                Q(memberships__tenant=tenant) & Q(memberships__role=Membership.Role.RESEARCHER)
            ).order_by("username")
        )
        owner = self.rng.choice(owners) if owners else None
        run_s = int(run_s * self.rng.uniform(0.6, 1.2))
        try:
            job = job_submit(
                tenant=tenant, owner=owner, name=f"{name}-{self.rng.randrange(1000):03d}",
                command=f"python train.py --config {name}.yaml --demo-seconds {run_s}",
                gpus=gpus, gpus_per_node=per_node, checkpointable=ckpt,
                checkpoint_interval_s=300 if ckpt else None,
                checkpoint_time_s=30 if ckpt else None, restart_s=30 if ckpt else 0,
                max_runtime_s=limit, priority=self.rng.choice((0, 0, 0, 1)), at=now,
            )
        except (ServiceError, ValueError) as error:
            log.info("demo trickle: submit refused: %s", error)
            return None
        self.submitted += 1
        return job


__all__ = ["CATALOGUE", "SimulatedAgents", "Trickle", "planned_run_s", "work_done_s"]
