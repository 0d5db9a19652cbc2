"""What the leader reads: the log above its watermark, the new jobs' specs, and the live
state it builds its core from (``services.leader``).

Reads only. The hot ones (the catch-up every tick, the build after a restart under a
backlog) read tuples, not model instances, and on PostgreSQL go through psycopg's binary
protocol (``selectors.binary``); the ORM path serves SQLite and is the reference the fast
path is tested against (``tests/production/test_leader_catch_up_read.py``).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import Max

from scheduler_app.core.states import FINAL_STATES, HOLDING_STATES, JobState
from scheduler_app.models import Allocation, Job, Lease, Node, Reservation, Tenant, Transition
from scheduler_app.services.transitions import LOG_APPEND_LOCK_KEY

from .binary import fetch_binary

S = JobState

#: The Job columns a JobSpec is made of, in ``services.leader.spec_of``'s order
#: (``tenant__name``: the tenant's name): the build and the catch-up read them as tuples,
#: without model instances.
SPEC_COLUMNS = (
    "pk", "tenant__name", "gpus", "submitted_at", "gpus_per_node", "gpu_type", "priority",
    "max_runtime_s", "checkpointable", "checkpoint_interval_s", "checkpoint_time_s",
    "restart_s", "preemptible", "interactive", "min_gpus", "owner",
    # a JSON list (PostgreSQL's binary reader decodes it as the ORM does), then the array
    "depends_on", "array_id", "array_index", "array_count", "array_max_running",
)
#: index of ``depends_on`` in a spec row
DEPENDS_AT = SPEC_COLUMNS.index("depends_on")


class LogRow(NamedTuple):
    """A Transition row as the leader follows it (the fields it reads, by the model's
    names), read as a tuple: no model instance per row. On PostgreSQL every empty
    ``detail`` is one shared dict: read it, never change it."""

    pk: int
    kind: str
    job_id: int | None
    node_id: int | None
    tenant_id: int | None
    from_state: str | None
    to_state: str
    reason: str
    at: datetime
    detail: dict[str, Any]


def log_rows_since(watermark: int) -> list[LogRow]:
    """The log rows above ``watermark``, in seq order."""
    if connection.vendor == "postgresql":
        return _pg_log_rows(watermark)
    return _orm_log_rows(watermark)


def job_specs(ids: Collection[int]) -> dict[int, tuple]:
    """job id -> the values of its :data:`SPEC_COLUMNS`, for the jobs ``ids``."""
    if connection.vendor == "postgresql":
        return _pg_job_specs(ids)
    return _orm_job_specs(ids)


def _orm_log_rows(watermark: int) -> list[LogRow]:
    """The rows through the ORM: the path elsewhere than PostgreSQL, and the reference of
    :func:`_pg_log_rows`."""
    return [
        LogRow._make(values) for values in Transition.objects.filter(id__gt=watermark)
        .order_by("id").values_list(*LogRow._fields)
    ]


def _orm_job_specs(ids: Collection[int]) -> dict[int, tuple]:
    """The specs through the ORM: the path elsewhere than PostgreSQL, and the reference
    of :func:`_pg_job_specs`."""
    return {
        values[0]: values
        for values in Job.objects.filter(pk__in=ids).values_list(*SPEC_COLUMNS)
    }


#: The detail of every row whose detail is empty, on PostgreSQL (no dict a row).
_NO_DETAIL: dict[str, Any] = {}


def _pg_log_rows(watermark: int) -> list[LogRow]:
    """The rows on PostgreSQL, read with psycopg's binary protocol: its C loaders turn
    the timestamps into datetimes, where Django's text loader for them is Python (under
    a burst of submits, thousands of rows a tick, the most of the catch-up's time). An
    empty detail, most rows, comes as NULL: no JSON to decode, the shared
    :data:`_NO_DETAIL` stands for it. The others come as text, decoded as the ORM does
    (a JSON ``null`` stays None, it is not an empty detail)."""
    no_detail, loads = _NO_DETAIL, json.loads
    return [
        LogRow(seq, kind, job, node, tenant, frm, to, reason, at,
               no_detail if detail is None else loads(detail))
        for seq, kind, job, node, tenant, frm, to, reason, at, detail
        in fetch_binary(_pg_log_select(), [watermark])
    ]


def _pg_job_specs(ids: Collection[int]) -> dict[int, tuple]:
    """The specs on PostgreSQL: one array parameter, whatever the number of jobs (an IN
    list of thousands of parameters costs Django time to compile, and psycopg cannot keep
    its parse), read binary as the log rows are."""
    if not ids:
        return {}
    return {values[0]: values for values in fetch_binary(_pg_spec_select(), [list(ids)])}


@cache
def _pg_log_select() -> str:
    """The SELECT of :func:`_pg_log_rows`: :class:`LogRow`'s fields, above a seq."""
    opts = Transition._meta
    qn = connection.ops.quote_name
    columns = [qn(opts.pk.column if name == "pk" else opts.get_field(name).column)
               for name in LogRow._fields]
    columns[-1] = f"NULLIF({columns[-1]}, '{{}}'::jsonb)::text"  # the detail: NULL when empty
    seq = qn(opts.pk.column)
    return (f"SELECT {', '.join(columns)} FROM {qn(opts.db_table)} "
            f"WHERE {seq} > %s ORDER BY {seq}")


def _pg_spec_from() -> tuple[str, str]:
    """:data:`SPEC_COLUMNS` as SQL, and the join they are read from (``j``, the jobs;
    ``t``, their tenants): the selects of the specs and of the live jobs share them."""
    job, tenant = Job._meta, Tenant._meta
    qn = connection.ops.quote_name

    def column(name: str) -> str:
        if name == "tenant__name":
            return f"t.{qn(tenant.get_field('name').column)}"
        return f"j.{qn(job.pk.column if name == 'pk' else job.get_field(name).column)}"

    return (", ".join(column(name) for name in SPEC_COLUMNS),
            f"{qn(job.db_table)} j JOIN {qn(tenant.db_table)} t "
            f"ON t.{qn(tenant.pk.column)} = j.{qn(job.get_field('tenant').column)}")


@cache
def _pg_spec_select() -> str:
    """The SELECT of :func:`_pg_job_specs`: :data:`SPEC_COLUMNS`, of the jobs in an
    array."""
    columns, joined = _pg_spec_from()
    pk = connection.ops.quote_name(Job._meta.pk.column)
    return f"SELECT {columns} FROM {joined} WHERE j.{pk} = ANY(%s)"


#: What the build reads of each live job besides its spec, in :meth:`LeaderLoop.build`'s
#: order.
RESTORE_COLUMNS = (
    "state", "started_at", "last_checkpoint_at", "resume_pointer", "preemption_times",
    "retry_count",
)


def live_job_rows() -> list[tuple]:
    """Every job not final, by id: the values of :data:`SPEC_COLUMNS` then of
    :data:`RESTORE_COLUMNS`, what the build restores from. Tuples, not model instances; on
    PostgreSQL read binary, as the catch-up reads (100,000 queued jobs after a restart
    under a backlog are three timestamps each)."""
    if connection.vendor == "postgresql":
        return _pg_live_job_rows()
    return _orm_live_job_rows()


def open_allocations() -> list[tuple[int, str, list[int]]]:
    """(job id, node name, GPU indices) of every open allocation, by job and node."""
    if connection.vendor == "postgresql":
        return _pg_open_allocations()
    return _orm_open_allocations()


def _orm_live_job_rows() -> list[tuple]:
    """Through the ORM: the path elsewhere than PostgreSQL, and the reference of
    :func:`_pg_live_job_rows`."""
    return list(Job.objects.exclude(state__in=[s.value for s in FINAL_STATES]).order_by("id")
                .values_list(*SPEC_COLUMNS, *RESTORE_COLUMNS))


def _orm_open_allocations() -> list[tuple[int, str, list[int]]]:
    return list(Allocation.objects.filter(end__isnull=True).order_by("job_id", "node__name")
                .values_list("job_id", "node__name", "gpu_indices"))


#: The preemption times of a job never preempted, on PostgreSQL (one list for them all:
#: the build only reads it).
_NO_PREEMPTIONS: list[int] = []


def _pg_live_job_rows() -> list[tuple]:
    """:func:`live_job_rows` read binary. An empty ``preemption_times``, most jobs, comes
    as NULL (no JSON to decode); the others as text, decoded as the ORM does."""
    none, loads = _NO_PREEMPTIONS, json.loads
    return [(*row[:-2], none if row[-2] is None else loads(row[-2]), row[-1])
            for row in fetch_binary(_pg_live_select(), [[s.value for s in FINAL_STATES]])]


def _pg_open_allocations() -> list[tuple[int, str, list[int]]]:
    loads = json.loads
    return [(job, node, loads(indices))
            for job, node, indices in fetch_binary(_pg_allocations_select(), [])]


@cache
def _pg_live_select() -> str:
    """The SELECT of :func:`_pg_live_job_rows`: the spec select's columns and the
    restore columns, of the jobs whose state is not in an array, by id."""
    job = Job._meta
    qn = connection.ops.quote_name
    restore = [f"j.{qn(job.get_field(name).column)}" for name in RESTORE_COLUMNS]
    assert RESTORE_COLUMNS[-2] == "preemption_times"  # NULL when empty, as text
    restore[-2] = f"NULLIF({restore[-2]}, '[]'::jsonb)::text"
    columns, joined = _pg_spec_from()
    return (f"SELECT {columns}, {', '.join(restore)} FROM {joined} "
            f"WHERE NOT (j.{qn(job.get_field('state').column)} = ANY(%s)) "
            f"ORDER BY j.{qn(job.pk.column)}")


@cache
def _pg_allocations_select() -> str:
    """The SELECT of :func:`_pg_open_allocations`."""
    alloc, node = Allocation._meta, Node._meta
    qn = connection.ops.quote_name

    def column(name: str) -> str:
        return qn(alloc.get_field(name).column)

    return (f"SELECT a.{column('job')}, n.{qn(node.get_field('name').column)}, "
            f"a.{column('gpu_indices')}::text "
            f"FROM {qn(alloc.db_table)} a JOIN {qn(node.db_table)} n "
            f"ON n.{qn(node.pk.column)} = a.{column('node')} "
            f"WHERE a.{column('end')} IS NULL "
            f"ORDER BY a.{column('job')}, n.{qn(node.get_field('name').column)}")



def last_move_at(to_state: JobState, job_ids: list[int]) -> dict[int, datetime]:
    """The instant of the latest move of each of ``job_ids`` (holding jobs) into
    ``to_state`` from another state: the run start (PLACING) and the preemption request of
    the current run. Reads the jobs' rows by the job index, not the whole log."""
    rows = (
        Transition.objects.filter(job_id__in=job_ids, to_state=to_state.value)
        .exclude(from_state=to_state.value)
        .values("job_id")
        .annotate(at=Max("at"))
        .values_list("job_id", "at")
    )
    return dict(rows) if job_ids else {}


def last_preempt_requests(job_ids: list[int]) -> dict[int, Transition]:
    """The PREEMPT_REQUESTED row of each of ``job_ids`` (jobs being preempted now): its
    latest."""
    if not job_ids:
        return {}
    rows = (
        Transition.objects.filter(job_id__in=job_ids, to_state=S.PREEMPT_REQUESTED.value)
        .exclude(from_state=S.PREEMPT_REQUESTED.value)
        .order_by("job_id", "id")
    )
    return {row.job_id: row for row in rows}  # later rows overwrite earlier ones


_STOPPING = frozenset({S.PREEMPT_REQUESTED.value, S.CHECKPOINTING.value})
_HOLDING = frozenset(state.value for state in HOLDING_STATES)


@dataclass(slots=True)
class BuildSnapshot:
    """What the leader builds its core from, read at one instant of the log."""

    #: the highest seq committed when it was read: the catch-up follows from there
    watermark: int
    #: (name, pod name, GPUs, GPU type, rail, health, free GPUs) of every node, by name
    nodes: list[tuple[str, str, int, str, int, str, int]]
    tenants: list[Tenant]  # by name
    #: every job not final, by id: :data:`SPEC_COLUMNS` then :data:`RESTORE_COLUMNS`
    jobs: list[tuple]
    #: (job id, node name, GPU indices) of every open allocation
    allocations: list[tuple[int, str, list[int]]]
    #: job id -> when its current run was placed, for the jobs holding GPUs
    placed: dict[int, datetime]
    #: job id -> its latest PREEMPT_REQUESTED row, for the jobs being preempted
    asked: dict[int, Transition]
    #: (job id, kind, start, GPUs, nodes, basis, plan, victims) of the published reservations, in
    #: their order (the last leader's promises, kept by the next)
    reservations: list[tuple[Any, ...]]


def build_snapshot() -> BuildSnapshot:
    """The live state, read in one transaction. On PostgreSQL it holds the log's append
    lock while it reads, so no append commits in between: the snapshot and its watermark
    agree (SQLite has one writer)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOG_APPEND_LOCK_KEY])
        watermark = Transition.objects.aggregate(m=Max("id"))["m"] or 0
        nodes = list(Node.objects.order_by("name").values_list(
            "name", "pod__name", "gpu_count", "gpu_type", "rail", "health", "free_gpus"))
        tenants = list(Tenant.objects.order_by("name"))
        jobs = live_job_rows()
        allocations = open_allocations()
        state = len(SPEC_COLUMNS)
        holding = [row[0] for row in jobs if row[state] in _HOLDING]
        placed = last_move_at(S.PLACING, holding)
        asked = last_preempt_requests([row[0] for row in jobs if row[state] in _STOPPING])
        reservations = list(Reservation.objects.order_by("position").values_list(
            "job_id", "kind", "start_at", "gpus", "nodes", "basis", "plan", "victims"))
    return BuildSnapshot(watermark, nodes, tenants, jobs, allocations, placed, asked,
                         reservations)


def awaited_final_jobs(ids: Collection[int]) -> list[tuple]:
    """The values of :data:`SPEC_COLUMNS` then the state of the jobs ``ids`` that are
    final, by id: jobs that others wait for and that ended before this leader could see
    them end (the build reads only the live jobs; a dependent admitted after its awaited
    job ended). The core must know how they ended to decide for their dependents. Few:
    only the ids the live or new jobs name that the core does not hold."""
    if not ids:
        return []
    return list(Job.objects.filter(pk__in=ids, state__in=[s.value for s in FINAL_STATES])
                .order_by("id").values_list(*SPEC_COLUMNS, "state"))


def node_names(ids: Collection[int]) -> dict[int, str]:
    """node id -> name, for the nodes ``ids`` (the catch-up's node rows)."""
    return dict(Node.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}


def tenant_names(ids: Collection[int]) -> dict[int, str]:
    """tenant id -> name, for the tenants ``ids`` (the catch-up's tenant rows)."""
    return dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}


def nodes_named(names: Collection[str]) -> dict[str, Node]:
    """name -> Node, for the nodes ``names`` (the few a build takes out of scheduling)."""
    return {n.name: n for n in Node.objects.filter(name__in=names)} if names else {}


@dataclass(frozen=True, slots=True)
class SchedulerStatus:
    """Whether a scheduler leads now, read from its lease (one query): the processes'
    own gauges cannot say it after a crash (a killed leader's ``scheduler_leader``
    series stays at 1), and a submit is accepted whether or not anything will place it."""

    holder: str  # "" when the lease was released or never taken
    expires_at: datetime | None
    now: datetime

    @property
    def running(self) -> bool:
        return bool(self.holder) and self.expires_at is not None and self.expires_at > self.now

    @property
    def expires_in_s(self) -> float | None:
        """Seconds until the lease expires (negative: expired that long ago); None: never
        taken."""
        if self.expires_at is None:
            return None
        return (self.expires_at - self.now).total_seconds()


def scheduler_status(*, now: datetime) -> SchedulerStatus:
    from scheduler_app.services.lease import LEADER_LEASE

    row = Lease.objects.filter(name=LEADER_LEASE).values_list("holder", "expires_at").first()
    holder, expires_at = row if row is not None else ("", None)
    return SchedulerStatus(holder=holder or "", expires_at=expires_at, now=now)
