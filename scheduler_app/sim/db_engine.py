"""The db engine: the same scenario through the production path, on the configured database.

The memory engine (``engine.Simulation``) drives a ``Scheduler``; here it drives a
:class:`DbScheduler` instead, which stands where the Scheduler stands and answers the same
calls through the production code:

- a submission is ``services.jobs.job_submit``; a cancel ``job_cancel``; a quota change
  ``services.cluster.tenant_set_quota``; node events ``node_mark_down / node_mark_up /
  node_drain / node_undrain``;
- the simulated node agents act through ``services.agents``: ``agent_confirm_start``,
  ``agent_report_checkpoint``, ``agent_ack_preempt``, ``agent_report_exit``, each from a
  node of the job's allocation (the first by name);
- the tick is ``LeaderLoop.step``: lease, catch-up from the Transition log, the core's
  tick, decisions persisted through ``apply_locked`` in one fenced transaction;
- after every event the leader follows the log at once (``LeaderLoop.follow``) and
  persists what the core decided in reaction (a requeue after a preempted exit, the
  node-failure moves after a node row), as the memory engine applies every event at once.

What each call returns is read back from the log: the job rows appended since the last
call, as ``Decision``s. So everything the result file says comes from the database.

Time is simulated: virtual second ``t`` is the instant ``t`` seconds after the Unix epoch
(1970-01-01T00:00:00Z), passed explicitly to every service (``at=``), so the core sees the
same integers as in memory. Jobs are named in the core by their scenario ids and ordered
by file position (``ScenarioKeys``), as in memory: the core breaks some ties by id.

The database must hold no jobs, nodes, tenants or log rows: ``manage.py simulate --engine
db`` runs this in a scratch database it makes and drops (``scratch.py``), and checks before
dropping it that its log rebuilds its tables. The early-tick signal is disconnected during
the run (a real Celery worker must not tick the simulation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from scheduler_app.core.scheduler import TickResult
from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import (
    TENANT_LIMITS,
    Actor,
    Decision,
    JobSpec,
    NodeSpec,
    SchedulerConfig,
    TenantSpec,
)
from scheduler_app.models import Allocation, Job, Node, Pod, Tenant, Transition
from scheduler_app.services import agents, cluster
from scheduler_app.services.errors import Conflict
from scheduler_app.services.jobs import array_submit, job_cancel, job_submit
from scheduler_app.services.leader import JobKeys, LeaderLoop, epoch, from_epoch
from scheduler_app.services.signals import transition_committed

from .engine import ProgressFn, Simulation
from .result import SimOutcome
from .scenario import Scenario

SIM_HOLDER = "simulator"
SIM_LEASE = "simulator-db"
#: The simulated leader never loses its lease: virtual time may jump far between ticks.
SIM_LEASE_TTL_S = 100 * 365 * 86400


class DbEngineError(RuntimeError):
    """The production path refused or failed a step of the simulation."""


class ScenarioKeys(JobKeys):
    """Core job ids = scenario ids, seq = file order (see the module docstring)."""

    def __init__(self) -> None:
        self._id_of: dict[int, str] = {}
        self._pk_of: dict[str, int] = {}
        self._seq_of: dict[int, int] = {}

    def add(self, pk: int, core_id: str, seq: int) -> None:
        self._id_of[pk], self._pk_of[core_id], self._seq_of[pk] = core_id, pk, seq

    def core_id(self, pk: int) -> str:
        return self._id_of[pk]

    def pk(self, core_id: str) -> int:
        return self._pk_of[core_id]

    def seq(self, pk: int) -> int:
        return self._seq_of[pk]


def at(now: int) -> datetime:
    return from_epoch(now)


class DbScheduler:
    """The Scheduler's event methods, answered by the services and the leader."""

    def __init__(
        self,
        nodes: Iterable[NodeSpec],
        tenants: Iterable[TenantSpec],
        config: SchedulerConfig,
        now: int = 0,
    ) -> None:
        self.keys = ScenarioKeys()
        with transaction.atomic():
            for spec in nodes:
                pod, _ = Pod.objects.get_or_create(name=spec.pod)
                Node.objects.create(
                    name=spec.name, pod=pod, rail=spec.rail, gpu_type=spec.gpu_type or "",
                    gpu_count=spec.gpus, free_gpus=spec.gpus, health=spec.health.value,
                )
        for t in tenants:
            # logged, with the usage it carries in: replay --verify rebuilds usage from it
            cluster.tenant_create(
                name=t.name, guaranteed_gpus=t.guaranteed_gpus,
                borrow_limit_gpus=t.borrow_limit_gpus, usage_gpu_s=t.usage_gpu_s,
                usage_at=at(t.usage_at_s), actor_name=SIM_HOLDER, at=at(now),
                limits={key: getattr(t, key) for key in TENANT_LIMITS},
            )
        self.nodes = {n.name: n for n in Node.objects.all()}
        self.tenants = {t.name: t for t in Tenant.objects.all()}
        self.owners: dict[str, Any] = {}  # a scenario's owner name -> its user
        self.loop = LeaderLoop(
            holder=SIM_HOLDER, lease_name=SIM_LEASE, ttl_s=SIM_LEASE_TTL_S, config=config,
            clock=None, keys=self.keys, heartbeat_timeout_s=0,
        )
        self.last_seq = Transition.objects.aggregate(m=Max("id"))["m"] or 0
        self._built = False
        self._leader(self.loop.follow(at(now)))  # builds the core before any event
        self._built = True

    # ------------------------------------------------------------------ events
    def submit(self, spec: JobSpec, now: int) -> list[Decision]:
        fields: dict[str, Any] = dict(
            tenant=self.tenants[spec.tenant], gpus=spec.gpus, owner=self._owner(spec.owner),
            gpus_per_node=spec.gpus_per_node, gpu_type=spec.gpu_type or "",
            priority=spec.priority, checkpointable=spec.checkpointable,
            checkpoint_interval_s=spec.checkpoint_interval_s,
            checkpoint_time_s=spec.checkpoint_time_s, restart_s=spec.restart_s,
            max_runtime_s=spec.max_runtime_s, min_gpus=spec.min_gpus,
            preemptible=spec.preemptible, interactive=spec.interactive, at=at(now),
            # the scenario states who waits for whom, across owners and teams: the
            # simulation submits as an operator would, who sees every job
            depends_on=[{"job": self.keys.pk(a), "when": w} for a, w in spec.depends_on],
            sees=lambda *_: True,
        )
        if spec.array_id is not None:
            return self._submit_array(spec, now, fields)
        try:
            job = job_submit(name=spec.id, **fields)
        except ValidationError as error:
            raise DbEngineError(f"job {spec.id}: job_submit refused it: {error}") from error
        self.keys.add(job.pk, spec.id, spec.seq)
        return self._after(now)

    def _submit_array(self, spec: JobSpec, now: int, fields: dict[str, Any]
                      ) -> list[Decision]:
        """One ``array_submit`` makes every task, as in production, when the scenario's
        first task comes (its tasks are consecutive in the file, submitted at one
        instant); the other tasks are already in."""
        if spec.array_index != 0:
            return []
        try:
            jobs = array_submit(name=spec.array_id, count=spec.array_count,
                                max_running=spec.array_max_running, **fields)
        except ValidationError as error:
            raise DbEngineError(f"array {spec.array_id}: array_submit refused it: "
                                f"{error}") from error
        for i, job in enumerate(jobs):
            self.keys.add(job.pk, f"{spec.array_id}_{i}", spec.seq + i)
        return self._after(now)

    def _owner(self, name: str | None) -> Any:
        """The user a scenario's owner name stands for, made at its first job (the core
        counts a user's GPUs by the user's id, as in production)."""
        if name is None:
            return None
        if name not in self.owners:
            self.owners[name], _ = get_user_model().objects.get_or_create(username=name)
        return self.owners[name]

    def cancel(self, job_id: str, now: int) -> list[Decision]:
        job_cancel(job_id=self.keys.pk(job_id), actor=Actor.OPERATOR, actor_name=SIM_HOLDER,
                   at=at(now), why="scenario event")
        return self._after(now)

    def set_quota(self, tenant: str, guaranteed_gpus: int, borrow_limit_gpus: int | None,
                  now: int) -> list[Decision]:
        team = self.tenants[tenant]
        borrow = team.borrow_limit_gpus if borrow_limit_gpus is None else borrow_limit_gpus
        cluster.tenant_set_quota(tenant=team, guaranteed_gpus=guaranteed_gpus,
                                 borrow_limit_gpus=borrow, actor_name=SIM_HOLDER, at=at(now))
        return self._after(now)

    def node_down(self, name: str, now: int) -> list[Decision]:
        return self._node(cluster.node_mark_down, name, now, why="scenario event")

    def node_up(self, name: str, now: int) -> list[Decision]:
        return self._node(cluster.node_mark_up, name, now)

    def node_drain(self, name: str, now: int) -> list[Decision]:
        return self._node(cluster.node_drain, name, now)

    def node_undrain(self, name: str, now: int) -> list[Decision]:
        return self._node(cluster.node_undrain, name, now)

    def _node(self, service: Callable[..., Transition], name: str, now: int,
              **kwargs: Any) -> list[Decision]:
        try:
            service(node=self.nodes[name], actor_name=SIM_HOLDER, at=at(now), **kwargs)
        except Conflict:
            return []  # e.g. drain a node that is down: the core ignores it too
        return self._after(now)

    # ------------------------------------------------------------------ the agents
    def confirm_start(self, job_id: str, now: int) -> list[Decision]:
        node, job = self._agent_of(job_id)
        agents.agent_confirm_start(node=node, job=job, at=at(now))
        return self._after(now)

    def report_checkpoint(self, job_id: str, now: int, resume_pointer: Any) -> list[Decision]:
        node, job = self._agent_of(job_id)
        agents.agent_report_checkpoint(node=node, job=job, resume_pointer=str(resume_pointer),
                                       checkpoint_at=at(now))
        return self._after(now)

    def ack_preempt(self, job_id: str, now: int) -> list[Decision]:
        node, job = self._agent_of(job_id)
        agents.agent_ack_preempt(node=node, job=job, at=at(now))
        return self._after(now)

    def job_exited(self, job_id: str, now: int, outcome: str) -> list[Decision]:
        node, job = self._agent_of(job_id)
        agents.agent_report_exit(node=node, job=job, outcome=outcome,
                                 exit_code=0 if outcome == "completed" else None, at=at(now))
        return self._after(now)

    def _agent_of(self, job_id: str) -> tuple[Node, Job]:
        """The job, and the agent that speaks for it: its allocation's first node."""
        pk = self.keys.pk(job_id)
        first = (
            Allocation.objects.filter(job_id=pk, end__isnull=True)
            .select_related("node", "job")
            .order_by("node__name")
            .first()
        )
        if first is None:
            raise DbEngineError(f"job {job_id}: an agent event for a job that holds no GPUs")
        return first.node, first.job

    # ------------------------------------------------------------------ the tick
    def tick(self, now: int, clock: Callable[[], float] | None = None) -> TickResult:
        report = self.loop.step(at(now))
        self._leader(report)
        result = self.loop.last_result
        assert result is not None
        return TickResult(self._new_decisions(), report.stats, result.pending_reasons,
                          result.start_estimates)

    @property
    def jobs(self) -> dict[str, Any]:
        """The leader's core job records (the engine sizes its memory housekeeping by them)."""
        sched = self.loop.scheduler
        return sched.jobs if sched is not None else {}

    def next_deadline(self) -> int | None:
        sched = self.loop.scheduler
        if sched is None:
            raise DbEngineError("the leader lost its state")
        return sched.next_deadline()

    # ------------------------------------------------------------------ plumbing
    def _after(self, now: int) -> list[Decision]:
        self._leader(self.loop.follow(at(now)))
        return self._new_decisions()

    def _leader(self, report: Any) -> None:
        # a rebuild after the first step would mean the state was dropped: not equivalent
        if not report.leader or report.error or (report.rebuilt and self._built):
            raise DbEngineError(f"the leader step went wrong: {report.line()}")

    def _new_decisions(self) -> list[Decision]:
        rows = list(
            Transition.objects.filter(id__gt=self.last_seq).order_by("id").values_list(
                "id", "kind", "job_id", "from_state", "to_state", "reason", "at", "detail"
            )
        )
        if rows:
            self.last_seq = rows[-1][0]
        out = []
        for _seq, kind, job_pk, frm, to, reason, when, detail in rows:
            if kind != Transition.Kind.JOB:
                continue
            alloc = detail.get("alloc")
            out.append(Decision(
                job_id=self.keys.core_id(job_pk),
                from_state=JobState(frm) if frm else None,
                to_state=JobState(to),
                reason=Reason(reason),
                at_s=epoch(when),
                alloc={n: tuple(ix) for n, ix in alloc.items()} if alloc else None,
                detail=detail,
            ))
        return out


# ---------------------------------------------------------------------- running it
def database_contents() -> dict[str, int]:
    """What is in the way of a simulation (it needs an empty database)."""
    counts = {
        "jobs": Job.objects.count(),
        "nodes": Node.objects.count(),
        "tenants": Tenant.objects.count(),
        "log rows": Transition.objects.count(),
    }
    return {what: n for what, n in counts.items() if n}


@contextlib.contextmanager
def no_early_ticks() -> Iterator[None]:
    """The services ask Celery for an early tick after each commit; a simulation ticks
    itself and must not wake a real worker."""
    from scheduler_app.services.early_tick import on_transition_committed

    uid = "scheduler_app.early_tick"
    transition_committed.disconnect(dispatch_uid=uid)
    try:
        yield
    finally:
        transition_committed.connect(on_transition_committed, dispatch_uid=uid)


def simulate_db(scenario: Scenario, *, policy: str = "full", seed: int = 0,
                progress: ProgressFn | None = None) -> SimOutcome:
    """Run ``scenario`` through the production path on the current database, which must
    be empty (a scratch one: ``manage.py simulate --engine db`` makes it)."""
    found = database_contents()
    if found:
        what = ", ".join(f"{n} {name}" for name, n in found.items())
        raise DbEngineError(
            f"the database is not empty ({what}): --engine db runs on an empty database; "
            "`manage.py simulate --engine db` makes an empty scratch database for it"
        )
    with no_early_ticks():
        sim = Simulation(scenario, policy=policy, seed=seed, progress=progress,
                         scheduler_factory=DbScheduler)
        return sim.run()


__all__ = ["DbEngineError", "DbScheduler", "ScenarioKeys", "database_contents", "simulate_db"]
