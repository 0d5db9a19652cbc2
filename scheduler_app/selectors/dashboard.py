"""Reads for the dashboard's pages.

Every function here costs a fixed number of queries, whatever the number of jobs: lists
are sliced or paginated before anything per row is read, and what a row needs (queue
position, allocation, the last preemption) is read for the whole page at once. The
dashboard's query-count tests hold each page to a bound with 10,000 jobs in the table.

Who may see what follows the API's rules (docs/api.md, "Who may do what"): operators see
everything; a lead every job of the tenants they lead; a researcher the jobs they
submitted to their tenants; everyone signed in sees tenants, nodes, node and quota rows
of the log, and the shape (tenant, GPUs) of jobs they may not see, never their names.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q, QuerySet

from scheduler_app.core.states import (
    FINAL_STATES,
    HOLDING_STATES,
    PENDING_SENTENCES,
    JobState,
    PendingReason,
    Reason,
)
from scheduler_app.core.types import NodeHealth
from scheduler_app.models import (
    Allocation,
    Job,
    Membership,
    Node,
    Pod,
    Reservation,
    Tenant,
    Transition,
)

from .jobs import job_history, job_queue_position, queue_order, run_started_at
from .leader import last_move_at
from .preemption_loss import LOSS_REASONS, StopLoss, stop_loss
from .redaction import OtherJobs
from .why import why_pending

S = JobState
LEAD = Membership.Role.LEAD.value


# --------------------------------------------------------------------------- who looks
@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in person and what they may see."""

    user_id: int | None
    operator: bool
    roles: dict[int, str] = field(default_factory=dict)  # tenant id -> role

    @property
    def led(self) -> frozenset[int]:
        return frozenset(t for t, role in self.roles.items() if role == LEAD)

    @property
    def member_of(self) -> frozenset[int]:
        return frozenset(self.roles)

    @property
    def is_lead(self) -> bool:
        return bool(self.led)

    def sees_job(self, tenant_id: int, owner_id: int | None) -> bool:
        if self.operator:
            return True
        role = self.roles.get(tenant_id)
        return role == LEAD or (role is not None and owner_id == self.user_id)

    def others(self) -> OtherJobs:
        """Names the jobs this viewer may not see as "a job of team X" (the core's
        sentences and the log's details name other jobs by id)."""
        return OtherJobs(None if self.operator else self.sees_job)

    def jobs_q(self) -> Q:
        """The jobs this viewer may see, as a filter."""
        if self.operator:
            return Q()
        return Q(tenant_id__in=sorted(self.led)) | Q(
            owner_id=self.user_id, tenant_id__in=sorted(self.member_of)
        )


def viewer_for(user: Any) -> Viewer:
    """One query: the user's memberships."""
    if not getattr(user, "is_authenticated", False):
        return Viewer(user_id=None, operator=False)
    roles = dict(Membership.objects.filter(user_id=user.pk).values_list("tenant_id", "role"))
    return Viewer(user_id=user.pk, operator=bool(user.is_staff), roles=roles)


# --------------------------------------------------------------------------- job lists
ACTIVE_STATES = tuple(s.value for s in JobState if s not in FINAL_STATES)
FINISHED_STATES = tuple(s.value for s in FINAL_STATES)
STATE_GROUPS: dict[str, tuple[str, ...] | None] = {
    "active": ACTIVE_STATES,
    "finished": FINISHED_STATES,
    "all": None,
}


def jobs_visible(
    *,
    viewer: Viewer,
    group: str = "active",
    tenant_id: int | None = None,
    mine: bool = False,
    array_id: int | None = None,
) -> QuerySet[Job]:
    """The jobs of the list page, newest first (not evaluated: the caller paginates); an
    array's tasks (``array_id``) by index instead."""
    jobs = Job.objects.filter(viewer.jobs_q())
    if array_id is not None:
        jobs = jobs.filter(array_id=array_id)
    states = STATE_GROUPS.get(group)
    if states is not None:
        jobs = jobs.filter(state__in=states)
    if tenant_id is not None:
        jobs = jobs.filter(tenant_id=tenant_id)
    if mine:
        jobs = jobs.filter(owner_id=viewer.user_id)
    order = ("array_index", "id") if array_id is not None else ("-id",)
    return jobs.select_related("tenant", "owner").order_by(*order)


def queue_positions(jobs: Iterable[Job]) -> dict[int, tuple[int, int]]:
    """{job id: (position in its tenant's queue, rank across the cluster)} for the QUEUED
    ones among ``jobs``, in two queries whatever their number.

    The same definition as ``selectors.jobs.job_queue_position`` (which costs three
    queries per job; a test compares the two on every queued job): inside a
    tenant, priority (higher first), deadline (submit time + ``queue_stretch`` x the
    declared limit x the GPUs), id; across the cluster, tenants in the order of the last tick's
    ``share_rank`` (unranked tenants after every ranked one), and jobs of tenants of equal
    rank interleaved by the same (priority, deadline, id) order.
    """
    wanted = {job.pk for job in jobs if job.state == S.QUEUED}
    if not wanted:
        return {}
    out: dict[int, tuple[int, int]] = {}
    in_tenant: dict[int, int] = defaultdict(int)
    for rank, (pk, tenant_id) in enumerate(queue_order(), start=1):
        in_tenant[tenant_id] += 1
        if pk in wanted:
            out[pk] = (in_tenant[tenant_id], rank)
    return out


def job_ids_by_position(jobs: QuerySet[Job]) -> list[int]:
    """The ids of ``jobs``, the queued ones first in the order they will start (the
    cluster's queue order), then the others newest first. Three queries, ids only: the
    caller paginates the list and reads one page of jobs."""
    ids = list(jobs.order_by("-id").values_list("pk", flat=True))
    present = set(ids)
    queued = [pk for pk, _t in queue_order() if pk in present]
    first = set(queued)
    return queued + [pk for pk in ids if pk not in first]


def open_allocations(job_ids: Iterable[int]) -> dict[int, dict[str, list[int]]]:
    """{job id: {node name: [GPU indices]}} of the jobs' open allocations (one query)."""
    out: dict[int, dict[str, list[int]]] = {}
    ids = sorted(set(job_ids))
    if not ids:
        return out
    for job_id, node, indices in (
        Allocation.objects.filter(job_id__in=ids, end__isnull=True)
        .order_by("job_id", "node__name")
        .values_list("job_id", "node__name", "gpu_indices")
    ):
        out.setdefault(job_id, {})[node] = sorted(indices)
    return out


@dataclass(frozen=True, slots=True)
class Preemption:
    """Why a job was chosen as a victim and what it cost, from its PreemptRequested row."""

    at: datetime
    for_job_id: int | None  # the job it made room for (None: not the viewer's to see)
    words: str  # its own arithmetic: "evicted 17: last checkpoint 5 min ago + ..."
    why: str  # the plan: "to start 42 (16 GPUs) on ...: evicted 17, 0.7 GPU-h lost, ..."
    cost_s: int | None
    gpu_h_lost: float | None
    weighed: list[str]
    #: the job it made room for, in words, when the viewer may not see it: "a job of team X"
    for_words: str = ""
    #: what it really lost once it stopped (None: not stopped yet, or ended otherwise);
    #: ``cost_s`` and ``gpu_h_lost`` are the estimate weighed when it was chosen
    stop: StopLoss | None = None
    gpus: int = 0  # the job's GPUs

    @property
    def work_gpu_h_lost(self) -> float | None:
        """The GPU-hours of work it really lost (None: not stopped yet)."""
        return None if self.stop is None else self.stop.work_lost_s * self.gpus / 3600.0


def _preemption(row: Transition, stop: StopLoss | None = None, gpus: int = 0) -> Preemption:
    """From a PreemptRequested row whose detail was redacted for the viewer already;
    ``stop``: what followed it (:func:`preemption_loss.stop_loss`)."""
    detail = row.detail or {}
    for_id = detail.get("for")
    lost = detail.get("est_gpu_s_lost")
    visible = isinstance(for_id, str) and for_id.isdigit()
    return Preemption(
        at=row.at,
        for_job_id=int(for_id) if visible else None,
        for_words="" if visible or not isinstance(for_id, str) else for_id,
        words=str(detail.get("words", "")),
        why=str(detail.get("why", "")),
        cost_s=detail.get("cost_s"),
        gpu_h_lost=lost / 3600.0 if isinstance(lost, int | float) else None,
        weighed=[str(w) for w in detail.get("weighed", [])],
        stop=stop,
        gpus=gpus,
    )


def last_preemptions(jobs: Iterable[Job], others: OtherJobs) -> dict[int, Preemption]:
    """{job id: its latest preemption} for the jobs that were ever asked to stop (one
    query, over their PreemptRequested rows only; one more for the jobs they name)."""
    gpus = {j.pk: j.gpus for j in jobs if j.preemption_times or j.state in _STOPPING}
    if not gpus:
        return {}
    rows: dict[int, list[Transition]] = {}
    for row in Transition.objects.filter(job_id__in=sorted(gpus), reason__in=LOSS_REASONS
                                         ).order_by("id"):
        rows.setdefault(row.job_id, []).append(row)
    asked = {job_id: [r for r in mine if r.reason == Reason.PREEMPT_REQUESTED][-1]
             for job_id, mine in rows.items()
             if any(r.reason == Reason.PREEMPT_REQUESTED for r in mine)}
    redact(list(asked.values()), others)
    return {job_id: _preemption(row, stop_loss(rows[job_id], row.pk), gpus[job_id])
            for job_id, row in asked.items()}


def redact(rows: list[Transition], others: OtherJobs) -> list[Transition]:
    """The rows with their details as ``others``' viewer may read them (in memory only:
    the log is never written here)."""
    others.learn(details=[row.detail for row in rows if row.detail])
    for row in rows:
        if row.detail:
            row.detail = others.detail(row.detail)
    return rows


_STOPPING = frozenset({S.PREEMPT_REQUESTED.value, S.CHECKPOINTING.value, S.PREEMPTED.value})


@dataclass(slots=True)
class JobRow:
    """A job with what its list row shows."""

    job: Job
    position: tuple[int, int] | None
    alloc: dict[str, list[int]]
    preemption: Preemption | None
    estimate_basis: str = ""  # as the viewer may read it
    placed_at: datetime | None = None  # when its current run was placed (holding jobs)

    @property
    def pending_sentence(self) -> str:
        return pending_sentence(self.job)

    @property
    def ends_by(self) -> datetime | None:
        return ends_by(self.job, self.placed_at)


def granted_grace(job: Job) -> tuple[int, bool]:
    """(the seconds it is given to write its checkpoint when asked to stop, whether the
    cluster's cap cut its declared time): what the scheduler grants
    (``core.scheduler.capped_grace``), not a default written into the page."""
    from scheduler_app.core.scheduler import capped_grace
    from scheduler_app.scheduler_config import scheduler_config

    config = scheduler_config()
    declared = job.checkpoint_time_s
    return (capped_grace(declared, config),
            bool(declared) and declared > config.max_grace_period_s)


def ends_by(job: Job, placed_at: datetime | None) -> datetime | None:
    """When a started job stops at the latest: its run's placement plus its declared time
    limit, as the scheduler counts it (``TimeLimit``, and the plans on the cluster page).
    None: not started, or no limit. From ``started_at`` (the agent's confirmation), it
    said a few seconds later than the plans did (a team lead's session, 2026-12-07)."""
    if job.started_at is None or not job.max_runtime_s:
        return None
    return (placed_at or job.started_at) + timedelta(seconds=job.max_runtime_s)


def placed_at(history: Sequence[Transition]) -> datetime | None:
    """When the job's latest run was placed: its last move into PLACING (from the log)."""
    return next((row.at for row in reversed(history)
                 if row.to_state == S.PLACING and row.from_state != S.PLACING), None)


def job_rows(jobs: Sequence[Job], *, viewer: Viewer) -> list[JobRow]:
    """Rows for a page of jobs: seven queries at most, whatever the page holds."""
    positions = queue_positions(jobs)
    allocs = open_allocations(j.pk for j in jobs if j.state in _HOLDING)
    others = viewer.others().learn(texts=[j.estimate_basis for j in jobs if j.estimate_basis])
    preemptions = last_preemptions(jobs, others)
    placed = last_move_at(S.PLACING, sorted(allocs)) if allocs else {}
    return [
        JobRow(
            job=j,
            position=positions.get(j.pk),
            alloc=allocs.get(j.pk, {}),
            preemption=preemptions.get(j.pk),
            estimate_basis=others.text(j.estimate_basis),
            placed_at=placed.get(j.pk),
        )
        for j in jobs
    ]


_HOLDING = frozenset(s.value for s in HOLDING_STATES)


def pending_sentence(job: Job) -> str:
    if job.state != S.QUEUED:
        return ""
    try:
        return PENDING_SENTENCES[PendingReason(job.pending_reason)]
    except ValueError:
        return job.pending_reason


# --------------------------------------------------------------------------- one job
@dataclass(slots=True)
class JobDetail:
    job: Job
    history: list[Transition]
    position: tuple[int | None, int | None]
    alloc: dict[str, list[int]]
    preemptions: list[Preemption]
    #: job id -> (name, tenant) of the jobs its preemptions made room for, when visible
    for_jobs: dict[int, Job]
    estimate_basis: str = ""  # as the viewer may read it
    #: the tail of a failed job's log, as its node's agent last sent it (else empty)
    log_tail: dict[str, Any] = field(default_factory=dict)
    #: why a queued job waits, in one place (None: it does not wait)
    why: Any = None
    #: the jobs it waits for, in the order given (empty: none)
    dependencies: list[Awaited] = field(default_factory=list)
    #: its array, when it is a task (None: a plain job)
    array: ArraySummary | None = None
    #: the log row's detail when it was cancelled because a dependency can never be met
    never_satisfied: dict[str, Any] | None = None

    @property
    def ends_by(self) -> datetime | None:
        return ends_by(self.job, placed_at(self.history))

    @property
    def grace(self) -> tuple[int, bool]:
        return granted_grace(self.job)

    @property
    def started_at(self) -> datetime | None:
        return run_started_at(self.job)


#: What each dependency kind waits for, as the job page says it ("after #12 completes").
DEPENDENCY_WORDS = {"ok": "completes", "any": "ends", "notok": "fails or is cancelled"}


@dataclass(slots=True)
class Awaited:
    """A job that another waits for, as the waiting job's viewer may see it."""

    job_id: int
    when: str
    job: Job | None  # None: gone, or not the viewer's to see
    others_words: str = ""  # "a job of team X" when not visible

    @property
    def words(self) -> str:
        return DEPENDENCY_WORDS.get(self.when, "ends")

    @property
    def met(self) -> bool | None:
        """True met, False never met any more, None not yet (or unknown)."""
        if self.job is None or self.job.state not in FINISHED_STATES:
            return None
        from scheduler_app.core.types import DEPENDENCY_KINDS

        return JobState(self.job.state) in DEPENDENCY_KINDS.get(self.when, frozenset())


def dependencies_of(job: Job, viewer: Viewer) -> list[Awaited]:
    """The jobs ``job`` waits for, each with its state if the viewer may see it: one
    query (none for a job without dependencies)."""
    deps = [(int(pk), str(when)) for pk, when in job.depends_on or ()]
    if not deps:
        return []
    found = Job.objects.filter(pk__in=[pk for pk, _w in deps]).select_related("tenant").in_bulk()
    out = []
    for pk, when in deps:
        other = found.get(pk)
        if other is not None and not viewer.sees_job(other.tenant_id, other.owner_id):
            out.append(Awaited(pk, when, None, f"a job of team {other.tenant.name}"))
        else:
            out.append(Awaited(pk, when, other, "" if other else f"job {pk} (gone)"))
    return out


@dataclass(slots=True)
class ArraySummary:
    """A job array as a task's page shows it."""

    array_id: int
    count: int
    max_running: int | None
    states: dict[str, int]  # tasks per state, in the state machine's order

    @property
    def live(self) -> int:
        """Tasks that have not ended (what cancelling the array would cancel)."""
        return sum(n for state, n in self.states.items() if state not in FINISHED_STATES)

    @property
    def holding(self) -> int:
        """Tasks that hold GPUs now (placing, running, stopping)."""
        return sum(n for state, n in self.states.items() if state in _HOLDING)


def array_summary(task: Job) -> ArraySummary:
    """The array of ``task`` (any of its tasks: they share the size and cap), with its
    tasks per state: one query (the partial index on array_id)."""
    counts = dict(Job.objects.filter(array_id=task.array_id).order_by().values("state")
                  .annotate(n=Count("id")).values_list("state", "n"))
    return ArraySummary(array_id=int(task.array_id or 0), count=task.array_count or 0,
                        max_running=task.array_max_running,
                        states={s.value: counts[s.value] for s in JobState if s.value in counts})


def job_detail(*, job: Job, viewer: Viewer) -> JobDetail:
    """The job page: its history, queue position, allocation and preemptions. The other
    jobs its rows and estimate name are "a job of team X" when the viewer may not see
    them."""
    others = viewer.others().learn(texts=[job.estimate_basis or ""])
    history = redact(list(job_history(job=job)), others)
    preemptions = [_preemption(r, stop_loss(history, r.pk), job.gpus)
                   for r in history if r.reason == Reason.PREEMPT_REQUESTED]
    targets = {p.for_job_id for p in preemptions if p.for_job_id is not None}
    for_jobs = {
        j.pk: j
        for j in Job.objects.filter(pk__in=sorted(targets)).select_related("tenant")
        if viewer.sees_job(j.tenant_id, j.owner_id)
    } if targets else {}
    return JobDetail(
        job=job,
        history=history,
        position=job_queue_position(job=job),
        alloc=open_allocations([job.pk]).get(job.pk, {}) if job.state in _HOLDING else {},
        preemptions=preemptions,
        for_jobs=for_jobs,
        estimate_basis=others.text(job.estimate_basis or ""),
        log_tail=failed_log_tail(job),
        why=why_pending(job=job, others=others),
        dependencies=dependencies_of(job, viewer),
        array=array_summary(job) if job.array_id is not None else None,
        never_satisfied=next((r.detail for r in reversed(history)
                              if r.reason == Reason.DEPENDENCY_NEVER_SATISFIED), None),
    )


#: Lines of each stream the job page shows of a failed job's log.
LOG_TAIL_LINES = 40


def failed_log_tail(job: Job) -> dict[str, Any]:
    """The last lines of a failed job's stdout and stderr, as its node's agent last sent
    them (the API's ``/jobs/<id>/log/``; kept in the cache, no query): "failed with exit
    code 1" alone sent everyone to the node. Empty for a job that did not fail or whose
    agent sent nothing."""
    if job.state != S.FAILED:
        return {}
    from scheduler_app.api.agent_logs import job_log_tail  # the API reads it the same way

    tail = job_log_tail(job=job)
    if not (tail.get("stdout") or tail.get("stderr")):
        return {}

    def last(text: str) -> str:
        return "\n".join(text.rstrip("\n").splitlines()[-LOG_TAIL_LINES:])

    return {"node": tail.get("node"), "at": tail.get("at"),
            "stdout": last(tail.get("stdout") or ""), "stderr": last(tail.get("stderr") or "")}


# --------------------------------------------------------------------------- usage
@dataclass(frozen=True, slots=True)
class UsageSeries:
    """GPUs held by each tenant, sampled every ``step_s`` over the window."""

    times: list[datetime]
    held: dict[str, list[int]]  # tenant name -> GPUs held at each time
    guaranteed: dict[str, int]
    #: tenant name -> the most GPUs it held at any instant of the window, from every
    #: allocation opened and closed (not from the samples: a peak between two samples
    #: was missed, and 160 GPUs held for ten minutes read as 98)
    peak: dict[str, int] = field(default_factory=dict)


#: The windows the usage chart offers: name -> (span, sampling step), in seconds.
USAGE_WINDOWS: dict[str, tuple[int, int]] = {
    "hour": (3600, 60),
    "day": (86400, 900),
    "week": (7 * 86400, 7200),
}


def usage_default_window(*, now: datetime) -> str:
    """The shortest window that holds every allocation of the last day (one query): on a
    cluster that started an hour ago, a day's axis was flat for 23 hours."""
    first = Allocation.objects.filter(
        Q(end__isnull=True) | Q(end__gt=now - timedelta(days=1))).aggregate(t=Min("start"))["t"]
    if first is not None and first >= now - timedelta(hours=1):
        return "hour"
    return "day"


def usage_series(*, now: datetime, hours: float = 24, step_s: int = 900) -> UsageSeries:
    """GPUs held per tenant over the last ``hours``, from the allocations (the log's
    projection: an allocation opens on placement and closes when the job stops holding).
    The samples fall on round clock times (every ``step_s`` since the epoch: 14:00, 14:15,
    not 13:47, 14:02), the last at ``now``. Two queries: the tenants and the allocations
    that overlap the window."""
    since = now - timedelta(seconds=hours * 3600)
    tenants = list(Tenant.objects.order_by("name").values_list("pk", "name", "guaranteed_gpus"))
    first = -(-int(since.timestamp()) // step_s) * step_s  # the first round instant
    times = [datetime.fromtimestamp(t, tz=now.tzinfo or UTC)
             for t in range(first, int(now.timestamp()), step_s)]
    if not times or times[-1] != now:
        times.append(now)
    events: dict[int, list[tuple[datetime, int]]] = defaultdict(list)
    for tenant_id, start, end, indices in (
        Allocation.objects.filter(start__lte=now)
        .filter(Q(end__isnull=True) | Q(end__gt=since))
        .values_list("job__tenant_id", "start", "end", "gpu_indices")
        .order_by()
    ):
        gpus = len(indices)
        events[tenant_id].append((max(start, since), gpus))
        if end is not None and end <= now:
            events[tenant_id].append((end, -gpus))
    held: dict[str, list[int]] = {}
    peak: dict[str, int] = {}
    for pk, name, _g in tenants:
        # releases before starts at the same instant: a job handing its GPUs to the next
        # one at 14:00 is not both holding them
        changes = sorted(events.get(pk, []))
        at = [c[0] for c in changes]
        running, sums = 0, []
        for _when, delta in changes:
            running += delta
            sums.append(running)
        # GPUs held at t: the running sum after every change at or before t
        held[name] = [sums[i - 1] if (i := bisect.bisect_right(at, t)) else 0 for t in times]
        peak[name] = max(sums + [0])
    return UsageSeries(times=times, held=held, guaranteed={n: g for _pk, n, g in tenants},
                       peak=peak)


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A team took GPUs back: ``taker`` (an entitled team) preempted ``victim``'s jobs."""

    taker: str
    victim: str
    jobs: int
    gpus: int


def reclaims(*, now: datetime, hours: int = 24, limit: int = 2000) -> list[Reclaim]:
    """Preemptions of the last ``hours``, summed by (taker, victim) team. Two queries:
    the PreemptRequested rows (the latest ``limit``) and the tenants of the jobs they
    made room for."""
    rows = list(
        Transition.objects.filter(
            reason=Reason.PREEMPT_REQUESTED.value, at__gte=now - timedelta(hours=hours)
        )
        .order_by("-id")
        .values_list("job__tenant__name", "job__gpus", "detail")[:limit]
    )
    heads = {
        int(d["for"]) for _v, _g, d in rows
        if isinstance(d, dict) and str(d.get("for", "")).isdigit()
    }
    taker_of = dict(
        Job.objects.filter(pk__in=sorted(heads)).values_list("pk", "tenant__name")
    ) if heads else {}
    sums: dict[tuple[str, str], list[int]] = {}
    for victim, gpus, detail in rows:
        head = str((detail or {}).get("for", ""))
        taker = taker_of.get(int(head)) if head.isdigit() else None
        if taker is None:
            continue
        acc = sums.setdefault((taker, victim), [0, 0])
        acc[0] += 1
        acc[1] += gpus
    return [Reclaim(t, v, n, g) for (t, v), (n, g) in sorted(sums.items())]


# --------------------------------------------------------------------------- the map
def gpu_types() -> list[str]:
    """The GPU types the cluster has, each once (one query). ``order_by`` replaces the
    model's ordering by name: DISTINCT over (gpu_type, name) gave one entry per node."""
    return [t for t in Node.objects.order_by("gpu_type").values_list("gpu_type", flat=True)
            .distinct() if t]


@dataclass(frozen=True, slots=True)
class Cell:
    """One GPU: who holds it (None: free)."""

    index: int
    tenant: str | None = None
    job_id: int | None = None  # None when free or when the viewer may not see the job
    job_name: str = ""


@dataclass(slots=True)
class NodeMap:
    node: Node
    cells: list[Cell]

    @property
    def used(self) -> int:
        return sum(1 for c in self.cells if c.tenant is not None)

    @property
    def by_tenant(self) -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for c in self.cells:
            if c.tenant is not None:
                counts[c.tenant] = counts.get(c.tenant, 0) + 1
        return sorted(counts.items())


@dataclass(slots=True)
class PodMap:
    pod: Pod
    nodes: list[NodeMap]

    @property
    def gpus(self) -> int:
        return sum(n.node.gpu_count for n in self.nodes)

    @property
    def used(self) -> int:
        return sum(n.used for n in self.nodes)


def cluster_map(*, viewer: Viewer) -> list[PodMap]:
    """Pods, their nodes, and each GPU coloured by the tenant holding it. Three queries:
    pods, nodes, open allocations (with the holding job's tenant, owner and name)."""
    held: dict[int, dict[int, Cell]] = defaultdict(dict)
    for node_id, indices, job_id, name, tenant_id, tenant, owner_id in (
        Allocation.objects.filter(end__isnull=True)
        .values_list(
            "node_id", "gpu_indices", "job_id", "job__name", "job__tenant_id",
            "job__tenant__name", "job__owner_id",
        )
        .order_by()
    ):
        visible = viewer.sees_job(tenant_id, owner_id)
        for i in indices:
            held[node_id][i] = Cell(
                i, tenant, job_id if visible else None, name if visible else ""
            )
    nodes: dict[int, list[NodeMap]] = defaultdict(list)
    for node in Node.objects.order_by("name"):
        cells = [held[node.pk].get(i, Cell(i)) for i in range(node.gpu_count)]
        nodes[node.pod_id].append(NodeMap(node, cells))
    return [PodMap(pod, nodes.get(pod.pk, [])) for pod in Pod.objects.order_by("name")]


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A row of the operator's node table: the node and how many jobs hold GPUs on it."""

    node: Node
    jobs: int


def node_rows(node_ids: Iterable[int] | None = None) -> list[NodeRow]:
    """Every node (or the ones named) with its pod and the number of jobs on it: two
    queries, the nodes and their open allocations counted by node."""
    nodes = Node.objects.select_related("pod").order_by("name")
    if node_ids is not None:
        nodes = nodes.filter(pk__in=sorted(node_ids))
    listed = list(nodes)
    counts = dict(
        Allocation.objects.filter(end__isnull=True, node__in=[n.pk for n in listed])
        .values("node_id").annotate(n=Count("job_id", distinct=True)).order_by()
        .values_list("node_id", "n")
    ) if listed else {}
    return [NodeRow(n, counts.get(n.pk, 0)) for n in listed]


@dataclass(frozen=True, slots=True)
class NodeJob:
    """A job holding GPUs on a node, as the viewer may see it (``job`` None: another
    team's job, shown by its team only)."""

    job: Job | None
    tenant: str
    gpus: list[int]


@dataclass(frozen=True, slots=True)
class NodePanel:
    node: Node
    jobs: list[NodeJob]
    #: the log row that took the node out of scheduling (drained or marked down), while
    #: it is out: who, when and why (a lead whose job waited with NodeDown could not see
    #: why the node was out; an operator's session, 2026-12-07)
    out_since: Transition | None = None

    @property
    def used(self) -> int:
        return sum(len(j.gpus) for j in self.jobs)


def node_panel(*, node: Node, viewer: Viewer) -> NodePanel:
    """What the map's panel shows for one node: the jobs on it and their GPUs (one query,
    the node's open allocations with their jobs)."""
    jobs = []
    for alloc in (Allocation.objects.filter(node=node, end__isnull=True)
                  .select_related("job__tenant").order_by("job_id")):
        job = alloc.job
        visible = viewer.sees_job(job.tenant_id, job.owner_id)
        jobs.append(NodeJob(job if visible else None, job.tenant.name,
                            sorted(alloc.gpu_indices)))
    out_since = None
    if node.health != NodeHealth.HEALTHY:
        out_since = (Transition.objects.filter(node=node, to_state=node.health)
                     .order_by("-id").first())
    return NodePanel(node, jobs, out_since)


# --------------------------------------------------------------------------- reservations
@dataclass(slots=True)
class Backfilled:
    job: Job | None  # None when the viewer may not see it
    tenant: str
    gpus: int
    ends_by: datetime | None  # start of its run + its declared limit
    #: it holds some of the GPUs the reservation holds now (the published plan's)
    on_reserved: bool = False
    #: ... and ends by its limit before the reserved start (a backfill's promise)
    ends_before: bool = False


@dataclass(slots=True)
class Planned:
    job: Job
    visible: bool
    start_at: datetime
    ends_by: datetime | None  # start + declared limit (None: no limit)
    basis: str
    backfilled: list[Backfilled]


def reservations(*, viewer: Viewer, limit: int = 12) -> list[Planned]:
    """The planned starts the last tick published, earliest first, with the kind of each
    estimate (``reserved``: GPUs are held for it; the others are projections). Each comes
    with the running jobs backfilled around it (placed with reason Backfilled and
    ``detail["around"]`` naming it): those that use some of its reserved GPUs end by their
    declared limit before it starts, the others use none of them, both read against the
    GPUs the plan holds now (the published Reservation row), not the plan the job was
    placed around. Four queries."""
    planned = list(
        Job.objects.filter(state=S.QUEUED, estimate_start_at__isnull=False)
        .select_related("tenant")
        .order_by("estimate_start_at", "id")[:limit]
    )
    if not planned:
        return []
    around: dict[int, list[Backfilled]] = defaultdict(list)
    wanted = {str(j.pk) for j in planned}
    # the GPUs each plan holds now: a backfill's own record is of the plan it was placed
    # around then, which may have moved since (it named GPUs the plan no longer held and
    # an end after its new start "before this start": 2026-12-07)
    held: dict[int, set[tuple[str, int]]] = {
        job_id: {(n, i) for n, ix in ((plan or {}).get("alloc") or {}).items() for i in ix}
        for job_id, plan in Reservation.objects.filter(
            kind=Reservation.Kind.RESERVATION, job_id__in=[j.pk for j in planned])
        .values_list("job_id", "plan")}
    # the latest placement of each job holding GPUs now: backfilled around which job?
    latest: dict[int, Transition] = {}
    for row in (
        Transition.objects.filter(to_state=S.PLACING, job__state__in=sorted(_HOLDING))
        .select_related("job__tenant")
        .order_by("id")
    ):
        latest[row.job_id] = row
    backfills = [row for row in latest.values() if row.reason == Reason.BACKFILLED]
    gpus_of = open_allocations(row.job_id for row in backfills)
    start_of = {j.pk: j.estimate_start_at for j in planned}
    for row in backfills:
        detail = row.detail or {}
        job = row.job
        ends = row.at + timedelta(seconds=job.max_runtime_s) if job.max_runtime_s else None
        mine = {(n, i) for n, ix in gpus_of.get(job.pk, {}).items() for i in ix}
        for target in (int(t) for t in detail.get("around", []) if str(t) in wanted):
            on = not mine.isdisjoint(held.get(target, ()))
            start = start_of[target]
            around[target].append(Backfilled(
                job=job if viewer.sees_job(job.tenant_id, job.owner_id) else None,
                tenant=job.tenant.name, gpus=job.gpus, ends_by=ends, on_reserved=on,
                ends_before=on and ends is not None and start is not None and ends <= start,
            ))
    out = []
    # a plan's basis names the jobs it waits on: "a job of team X" for the others'
    others = viewer.others().learn(texts=[job.estimate_basis for job in planned])
    for job in planned:
        start = job.estimate_start_at
        assert start is not None
        out.append(Planned(
            job=job,
            visible=viewer.sees_job(job.tenant_id, job.owner_id),
            start_at=start,
            ends_by=start + timedelta(seconds=job.max_runtime_s) if job.max_runtime_s else None,
            basis=others.text(job.estimate_basis),
            backfilled=sorted(around.get(job.pk, []), key=lambda b: (b.ends_by is None,
                                                                     b.ends_by or start)),
        ))
    return out


# --------------------------------------------------------------------------- the feed
def transitions_feed(*, viewer: Viewer, limit: int = 25) -> list[Transition]:
    """The latest rows of the log the viewer may see, newest first (one query): their
    jobs' rows (every job's for operators) and every node and quota row."""
    rows = Transition.objects.select_related("job__tenant", "node", "tenant")
    if not viewer.operator:
        visible = Job.objects.filter(viewer.jobs_q()).values("pk")
        rows = rows.filter(~Q(kind=Transition.Kind.JOB) | Q(job__in=visible))
    # the viewer's jobs' rows name other jobs (the one a preemption made room for)
    return redact(list(rows.order_by("-id")[:limit]), viewer.others())


__all__ = [
    "Backfilled",
    "Cell",
    "JobDetail",
    "JobRow",
    "NodeJob",
    "NodeMap",
    "NodePanel",
    "NodeRow",
    "Planned",
    "PodMap",
    "Preemption",
    "Reclaim",
    "USAGE_WINDOWS",
    "UsageSeries",
    "Viewer",
    "cluster_map",
    "ends_by",
    "failed_log_tail",
    "gpu_types",
    "job_detail",
    "job_rows",
    "job_ids_by_position",
    "jobs_visible",
    "last_preemptions",
    "node_panel",
    "node_rows",
    "open_allocations",
    "pending_sentence",
    "queue_positions",
    "reclaims",
    "reservations",
    "transitions_feed",
    "usage_default_window",
    "usage_series",
    "viewer_for",
]
