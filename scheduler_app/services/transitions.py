"""The one service that changes a job's state.

``job_transition`` validates a move against the core's table, locks the job row, appends
the Transition row and updates the projection (Job fields, Allocation rows, Node.free_gpus,
tenant held GPUs and usage) in one durable transaction. An illegal move raises
``TransitionConflict`` (both a ``services.errors.Conflict`` and the core's
``IllegalTransition``) and writes nothing. Side effects (signals) run only after commit.
Nothing else in the code base writes Job.state.

Node and tenant rows (cluster events) are appended by ``services.cluster`` and
``services.agents`` through :func:`append_cluster_row`, under the same append lock.
New jobs enter through :func:`admit_new_jobs` (the two first rows of each, in bulk), and
a transaction that appends many rows takes the append lock once with :func:`append_lock`.
The leader writes a tick's decisions with :func:`apply_moves_locked`: the same rows and
projection as one :func:`apply_locked` per move, in a constant number of statements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from types import SimpleNamespace
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from scheduler_app.core.states import (
    HOLDING_STATES,
    JobState,
    PendingReason,
    Reason,
    is_allowed,
)
from scheduler_app.core.types import Actor, alloc_gpus
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition

from .bulk import update_from_values
from .copy_insert import insert_new, new_instances, take_keys
from .errors import TransitionConflict
from .projection import (
    JOB_COLUMNS,
    AllocMap,
    JobProjection,
    apply_transition,
    gives_alloc,
    normalise_alloc,
)
from .signals import transition_committed
from .usage import accrued, half_life_s

#: Key of the PostgreSQL advisory lock that serialises appends to the log, so that seq
#: order is commit order (a reader tailing by seq never skips a late-committing row).
LOG_APPEND_LOCK_KEY = 0x5C4ED

#: Set inside :func:`append_lock`: this transaction holds the append lock already.
_LOCK_HELD: ContextVar[bool] = ContextVar("log_append_lock_held", default=False)


class AllocationError(ValueError):
    """The allocation a transition carries is missing, malformed or not free."""


def now_s() -> datetime:
    """The current time, in whole seconds (the project's time unit)."""
    return timezone.now().replace(microsecond=0)


def job_transition(
    *,
    job_id: int,
    to_state: JobState | str,
    reason: Reason | str,
    actor: Actor | str,
    at: datetime | None = None,
    detail: dict[str, Any] | None = None,
    alloc: dict[str, Any] | None = None,
    tick_id: str | int | None = None,
    actor_name: str = "",
) -> Transition:
    """Apply one transition to job ``job_id`` and return its Transition row.

    ``alloc`` (node name -> GPU indices) is required on QUEUED -> PLACING and on a Shrunk
    self-transition (the new, whole allocation), and refused elsewhere.
    """
    # the append lock before the job's row lock, in the order the leader takes them (the
    # other order deadlocks with a tick moving the same job)
    with transaction.atomic(durable=True), append_lock():
        job = Job.objects.select_for_update().get(pk=job_id)
        return apply_locked(
            job,
            to_state=JobState(to_state),
            reason=Reason(reason),
            actor=Actor(actor),
            at=at or now_s(),
            detail=detail,
            alloc=alloc,
            tick_id=tick_id,
            actor_name=actor_name,
        )


def apply_locked(
    job: Job,
    *,
    to_state: JobState,
    reason: Reason,
    actor: Actor,
    at: datetime,
    detail: dict[str, Any] | None = None,
    alloc: dict[str, Any] | None = None,
    tick_id: str | int | None = None,
    actor_name: str = "",
) -> Transition:
    """Apply a transition to ``job``, already locked inside the caller's transaction.

    For services composing several moves in one transaction (``job_submit``); everything
    else calls :func:`job_transition`.
    """
    from_state = JobState(job.state)
    if not is_allowed(from_state, to_state):
        raise TransitionConflict(job.pk, from_state, to_state)
    detail = dict(detail or {})
    if gives_alloc(from_state, to_state, reason):
        if not alloc:
            raise AllocationError(
                f"job {job.pk}: {from_state} -> {to_state} ({reason}) needs an allocation"
            )
        detail["alloc"] = normalise_alloc(alloc)
    elif alloc:
        raise AllocationError(
            f"job {job.pk}: {from_state} -> {to_state} ({reason}) does not take an allocation"
        )
    _serialise_log_appends()
    row = _append_log(
        job,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        actor=actor,
        at=at,
        detail=detail,
        tick_id=tick_id,
        actor_name=actor_name,
    )
    _update_projection(job, row)
    _announce_after_commit(row)
    return row


class StaleMove(RuntimeError):
    """A move's job is no longer in the state its caller saw (a concurrent write landed)."""


@dataclass(frozen=True, slots=True)
class Move:
    """One job move for :func:`apply_moves_locked`: ``from_state`` is the state the caller
    believes the job is in (checked against the locked row)."""

    job_id: int
    from_state: JobState | None
    to_state: JobState
    reason: Reason
    at: datetime
    detail: dict[str, Any] = field(default_factory=dict)
    alloc: dict[str, Any] | None = None


@dataclass(slots=True)
class _OpenAlloc:
    """An allocation open in the simulation: an existing row (``pk``) or one to insert."""

    node: str
    indices: list[int]
    pk: int | None = None
    new: Allocation | None = None


def apply_moves_locked(
    moves: Sequence[Move],
    *,
    actor: Actor | str,
    actor_name: str = "",
    tick_id: str | int | None = None,
) -> list[Transition]:
    """Apply ``moves`` in order, inside the caller's transaction, which must hold the
    log's append lock (:func:`append_lock`) before calling. All or nothing: any refused
    move raises before anything is written.

    Exactly the rows and projection that one :func:`apply_locked` per move would write
    (same checks, same errors, log rows in the same seq order, allocations opened and
    closed in the same order), in a constant number of statements whatever the number of
    moves: one ``SELECT ... FOR UPDATE`` of every touched job (by id), the open
    allocations and nodes involved, the touched tenants (locked, by id); then one INSERT of
    the log rows, one UPDATE of the jobs, of the closed allocations, of the nodes' free
    GPUs and of the tenants, and one INSERT of the new allocations. The moves are first
    played in memory, against the locked rows, with the same rules
    (``projection.apply_transition``, the free-GPU check, the usage accrual).
    """
    if not moves:
        return []
    _serialise_log_appends()  # a no-op under append_lock(); else before any row lock
    pks = sorted({m.job_id for m in moves})
    jobs = {job.pk: job for job in Job.objects.select_for_update().filter(pk__in=pks)
            .order_by("pk")}
    missing = [pk for pk in pks if pk not in jobs]
    if missing:
        raise Job.DoesNotExist(f"job(s) {missing} do not exist")
    new_nodes = sorted({name for m in moves if m.alloc for name in m.alloc})
    # the open allocations of the touched jobs and of every node they move to
    holders: dict[str, dict[int, set[int]]] = {}  # node name -> job -> GPU indices
    open_of: dict[int, list[_OpenAlloc]] = {pk: [] for pk in pks}
    node_pk: dict[str, int] = {}
    touching = Q(job_id__in=pks) | Q(node__name__in=new_nodes) if new_nodes else Q(job_id__in=pks)
    for alloc_pk, job_id, node_id, name, indices in (
        Allocation.objects.filter(touching, end__isnull=True).order_by("pk")
        .values_list("pk", "job_id", "node_id", "node__name", "gpu_indices")
    ):
        node_pk[name] = node_id
        holders.setdefault(name, {}).setdefault(job_id, set()).update(indices)
        if job_id in open_of:
            open_of[job_id].append(_OpenAlloc(name, list(indices), pk=alloc_pk))
    nodes = {name: (pk, count) for pk, name, count in
             Node.objects.filter(name__in=new_nodes).values_list("pk", "name", "gpu_count")}
    node_pk.update({name: pk for name, (pk, _count) in nodes.items()})

    rows: list[Transition] = []
    closed: list[tuple[int, datetime]] = []  # existing allocation rows ended, by pk
    opened: list[Allocation] = []
    free_delta: dict[str, int] = {}
    held_moves: list[tuple[int, datetime, int]] = []  # (tenant, at, held GPUs delta)
    tick = "" if tick_id is None else str(tick_id)
    for m in moves:
        job = jobs[m.job_id]
        from_state = JobState(job.state)
        if m.from_state is None or from_state != m.from_state:
            raise StaleMove(f"job {job.pk} is {from_state}, the core moved it from "
                            f"{m.from_state}")
        to_state, reason = JobState(m.to_state), Reason(m.reason)
        if not is_allowed(from_state, to_state):
            raise TransitionConflict(job.pk, from_state, to_state)
        detail = dict(m.detail or {})
        if gives_alloc(from_state, to_state, reason):
            if not m.alloc:
                raise AllocationError(
                    f"job {job.pk}: {from_state} -> {to_state} ({reason}) needs an allocation"
                )
            detail["alloc"] = normalise_alloc(m.alloc)
        elif m.alloc:
            raise AllocationError(
                f"job {job.pk}: {from_state} -> {to_state} ({reason}) does not take an "
                "allocation"
            )
        rows.append(Transition(
            kind=Transition.Kind.JOB, job_id=job.pk, from_state=from_state.value,
            to_state=to_state.value, at=m.at, reason=reason.value, detail=detail,
            actor=Actor(actor).value, actor_name=actor_name, tick_id=tick,
        ))
        # the projection, as _update_projection does it against the rows written so far
        mine = open_of[job.pk]
        before = (normalise_alloc(_merged(mine)) if from_state in HOLDING_STATES else {})
        proj = JobProjection(state=from_state, alloc=before,
                             **{name: getattr(job, name) for name in JOB_COLUMNS})
        apply_transition(proj, to_state=to_state, reason=reason, at=m.at, detail=detail,
                         checkpointable=job.checkpointable)
        if proj.alloc != before:
            after = proj.alloc
            unknown = sorted(set(after) - set(nodes))
            if unknown:
                raise AllocationError(f"job {job.pk}: unknown node(s) {', '.join(unknown)}")
            _check_free_in(job, after, nodes, holders)
            delta = alloc_gpus(after) - alloc_gpus(before)
            if delta:
                held_moves.append((job.tenant_id, m.at, delta))
            for name, indices in before.items():
                free_delta[name] = free_delta.get(name, 0) + len(indices)
            for alloc in mine:  # every open allocation of the job ends, as in the service
                holders[alloc.node].pop(job.pk, None)
                if alloc.new is not None:
                    alloc.new.end = m.at
                else:
                    assert alloc.pk is not None
                    closed.append((alloc.pk, m.at))
            mine.clear()
            for name, indices in after.items():
                free_delta[name] = free_delta.get(name, 0) - len(indices)
                new = Allocation(job_id=job.pk, node_id=nodes[name][0], gpu_indices=indices,
                                 start=m.at, preemptible=job.preemptible)
                opened.append(new)
                mine.append(_OpenAlloc(name, indices, new=new))
                holders.setdefault(name, {})[job.pk] = set(indices)
        _write_projection(job, proj, to_state.value)

    Transition.objects.bulk_create(rows)  # ids in list order: seq order is move order
    job_fields = ["state", "pending_reason", "pending_blocker", "estimate_start_at",
                  "estimate_basis", "estimate_kind", *JOB_COLUMNS]
    update_from_values(Job, job_fields, [
        (pk, *(getattr(jobs[pk], name) for name in job_fields)) for pk in pks
    ])
    update_from_values(Allocation, ["end"], closed)
    Allocation.objects.bulk_create(opened)
    update_from_values(Node, ["free_gpus"], [
        (node_pk[name], delta) for name, delta in sorted(free_delta.items()) if delta
    ], add=["free_gpus"])
    _accrue_tenants_usage(held_moves)
    transaction.on_commit(lambda: _announce(rows))
    return rows


def _merged(allocs: list[_OpenAlloc]) -> dict[str, list[int]]:
    # by node name, a later row winning, as _open_alloc_map reads them (one row per node)
    return {alloc.node: alloc.indices for alloc in allocs}


def _check_free_in(job: Job, alloc: AllocMap, nodes: dict[str, tuple[int, int]],
                   holders: dict[str, dict[int, set[int]]]) -> None:
    """:func:`_check_free` against the simulated open allocations (``holders``)."""
    for name, indices in alloc.items():
        count = nodes[name][1]
        if not indices or len(set(indices)) != len(indices):
            raise AllocationError(f"job {job.pk}: bad GPU indices {indices} on {name}")
        out_of_range = [i for i in indices if not 0 <= i < count]
        if out_of_range:
            raise AllocationError(
                f"job {job.pk}: {name} has GPUs 0-{count - 1}, not {out_of_range}"
            )
        held: set[int] = set()
        for other, taken in holders.get(name, {}).items():
            if other != job.pk:
                held |= taken
        taken_now = sorted(held & set(indices))
        if taken_now:
            raise AllocationError(
                f"job {job.pk}: GPUs {taken_now} on {name} are already allocated"
            )


def _accrue_tenants_usage(held_moves: list[tuple[int, datetime, int]]) -> None:
    """:func:`_accrue_tenant_usage` for each (tenant, at, delta) in order, one read (the
    tenants locked by id) and one write."""
    if not held_moves:
        return
    tenants = {t.pk: t for t in Tenant.objects.select_for_update()
               .filter(pk__in={tenant_id for tenant_id, _at, _d in held_moves}).order_by("pk")}
    half_life = half_life_s()
    for tenant_id, at, delta in held_moves:
        tenant = tenants[tenant_id]
        since = int(tenant.usage_at.timestamp()) if tenant.usage_at else None
        usage, as_of = accrued(
            tenant.usage_gpu_s, since, tenant.held_gpus, int(at.timestamp()), half_life
        )
        tenant.usage_gpu_s = usage
        tenant.usage_at = datetime.fromtimestamp(as_of, tz=UTC)
        tenant.held_gpus += delta
    update_from_values(Tenant, ["usage_gpu_s", "usage_at", "held_gpus"], [
        (t.pk, t.usage_gpu_s, t.usage_at, t.held_gpus) for t in tenants.values()
    ])


def _announce(rows: list[Transition]) -> None:
    from .early_tick import coalesced  # (it imports the models this module loads)

    with coalesced():  # one commit: one early tick asked for, not one per row
        for row in rows:
            transition_committed.send(sender=Transition, transition=row)


def append_first(job: Job, *, actor: Actor, at: datetime, actor_name: str = "") -> Transition:
    """The first row of every job: (none) -> SUBMITTED. Only ``job_submit`` calls it."""
    _serialise_log_appends()
    row = _append_log(
        job,
        from_state=None,
        to_state=JobState.SUBMITTED,
        reason=Reason.SUBMITTED,
        actor=actor,
        at=at,
        detail={},
        tick_id=None,
        actor_name=actor_name,
    )
    _announce_after_commit(row)
    return row


def append_cluster_row(
    *,
    node: Node | None = None,
    tenant: Tenant | None = None,
    from_state: str | None,
    to_state: str,
    reason: Reason,
    actor: Actor,
    at: datetime,
    detail: dict[str, Any],
    actor_name: str = "",
) -> Transition:
    """Append a node row (``node`` given) or a tenant row (``tenant`` given). The caller
    holds the row's lock inside its durable transaction and updates the projection."""
    if (node is None) == (tenant is None):
        raise ValueError("a cluster row is about one node or one tenant")
    _serialise_log_appends()
    row = Transition.objects.create(
        kind=Transition.Kind.NODE if node is not None else Transition.Kind.TENANT,
        node=node,
        tenant=tenant,
        from_state=from_state,
        to_state=to_state,
        at=at,
        reason=reason.value,
        detail=detail,
        actor=actor.value,
        actor_name=actor_name,
    )
    _announce_after_commit(row)
    return row


def admit_new_jobs(
    jobs: list[Job],
    *,
    refusals: list[str],
    actor: Actor,
    at: datetime,
    actor_name: str = "",
    link: Callable[[list[Job]], Sequence[str]] | None = None,
) -> list[Job]:
    """Insert new (unsaved) ``jobs`` and their first two rows, inside the caller's durable
    transaction: (none) -> SUBMITTED, then SUBMITTED -> QUEUED (Admitted), or -> FAILED
    (NeverFits, ``{"why": refusals[i]}``) where ``refusals[i]`` is not empty.

    The same rows and projection as :func:`append_first` followed by :func:`apply_locked`
    (the projection through ``apply_transition``), in three statements whatever the
    number of jobs: the append lock, one INSERT of the jobs, one INSERT of the rows. An
    idempotency key already taken raises IntegrityError (the caller looks the job up).

    ``link(jobs)``, once the jobs have their keys, sets the fields that name other jobs
    of the call by key (a job array's ``array_id``, a batch's dependencies by index) and
    returns their names. On PostgreSQL the keys are taken first, so the INSERT writes
    them; elsewhere they are written after it (one UPDATE per 1,000 jobs), in the same
    transaction: no reader ever sees a job without them.
    """
    values = _admission(jobs, refusals=refusals, actor=actor, at=at, actor_name=actor_name)
    # The append lock first: inserting a job takes a key-share lock on its tenant's row,
    # which the leader locks (after the append lock) to accrue usage. One order, no
    # deadlock.
    with append_lock():
        if link is not None and take_keys(Job, jobs):
            link(jobs)
            link = None
        insert_new(Job, jobs)  # COPY for a batch on PostgreSQL; sets the primary keys
        if link is not None:
            fields = list(link(jobs))
            update_from_values(Job, fields, [(job.pk, *(getattr(job, f) for f in fields))
                                             for job in jobs])
        for i, job in enumerate(jobs):
            values[2 * i]["job_id"] = values[2 * i + 1]["job_id"] = job.pk
        rows = new_instances(Transition, values)
        insert_new(Transition, rows)  # seq order is list order
    transaction.on_commit(lambda: _announce(rows))
    return jobs


def admit_new_job(job: Job, *, refusal: str, actor: Actor, at: datetime,
                  actor_name: str = "") -> Job:
    """:func:`admit_new_jobs` for one job, as a transaction of its own (the caller must not
    be inside one: like ``transaction.atomic(durable=True)``).

    On PostgreSQL it is one statement, prepared once per connection: the append lock, the
    job and its two rows (:func:`_admission_sql`), an implicit transaction of its own
    (all of it or none, the lock released at its commit). The usual way, BEGIN, the lock,
    two INSERTs and COMMIT, is five round trips, and the append lock is held across three
    of them: single submits are the API's hottest write (docs/api.md, Throughput).
    """
    if connection.vendor != "postgresql":
        with transaction.atomic(durable=True):
            return admit_new_jobs([job], refusals=[refusal], actor=actor, at=at,
                                  actor_name=actor_name)[0]
    values = _admission([job], refusals=[refusal], actor=actor, at=at,
                        actor_name=actor_name)
    if connection.in_atomic_block:
        # only a test case's transaction gets past this (durable's own check); the
        # statement runs inside it, as it would inside a durable block
        with transaction.atomic(durable=True):
            rows = _insert_admission(job, values)
            transaction.on_commit(lambda: _announce(rows))
        return job
    rows = _insert_admission(job, values)  # committed when it returns
    _announce(rows)
    return job


def _admission(jobs: list[Job], *, refusals: list[str], actor: Actor, at: datetime,
               actor_name: str) -> list[dict[str, Any]]:
    """Set each new job's projection for its admission and return its two log rows'
    values (``job_id`` left to fill once the job has its key)."""
    if len(refusals) != len(jobs):
        raise ValueError("one refusal (or '') per job")
    if any(job.pk is not None for job in jobs):
        raise ValueError("admit_new_jobs takes new jobs only")
    values: list[dict[str, Any]] = []
    # the same for every job of the call (enum lookups cost more than the dicts)
    submitted = JobState.SUBMITTED.value
    common = {"kind": Transition.Kind.JOB.value, "job_id": None, "at": at,
              "actor": actor.value, "actor_name": actor_name, "tick_id": ""}
    first = {**common, "from_state": None, "to_state": submitted,
             "reason": Reason.SUBMITTED.value}
    for job, why in zip(jobs, refusals, strict=True):
        to_state, reason = (
            (JobState.FAILED, Reason.NEVER_FITS) if why else (JobState.QUEUED, Reason.ADMITTED)
        )
        proj = JobProjection(state=JobState.SUBMITTED)
        apply_transition(proj, to_state=to_state, reason=reason, at=at,
                         detail={"why": why} if why else {}, checkpointable=job.checkpointable)
        _write_projection(job, proj, to_state.value)
        values.append({**first, "detail": {}})
        values.append({**common, "from_state": submitted, "to_state": to_state.value,
                       "reason": reason.value, "detail": {"why": why} if why else {}})
    return values


def _insert_admission(job: Job, values: list[dict[str, Any]]) -> list[Transition]:
    """One statement (PostgreSQL): take the append lock, insert ``job`` and its log rows
    (``values``, in seq order); set the primary keys. An idempotency key already taken
    raises IntegrityError and nothing is written.

    The statement is prepared once per connection and then only bound and executed:
    parsing and planning a 28-column INSERT cost the server more than running it, and
    parameters sent apart from the text (server-side binding) cost less to send than
    quoted into it. Django's own cursors bind client-side and never prepare; this one
    cursor of psycopg's does both.
    """
    from psycopg.types.json import Jsonb

    job_fields, row_fields = _admission_fields()
    params: list[Any] = []
    params.extend(Jsonb(getattr(job, name)) if is_json else getattr(job, name)
                  for name, is_json, _default in job_fields)
    for row in values:
        params.extend(Jsonb(row.get(name, default)) if is_json else row.get(name, default)
                      for name, is_json, default in row_fields)
    with _prepared_cursor() as cursor:
        cursor.execute(_admission_sql(len(values)), params)
        keys = cursor.fetchall()  # in seq order
    job.pk = keys[0][1]
    rows = new_instances(Transition, values)
    for row, (seq, job_id) in zip(rows, keys, strict=True):
        row.pk, row.job_id = seq, job_id
    alias = connection.alias
    for obj in (job, *rows):
        obj._state.adding = False
        obj._state.db = alias
    return rows


@contextmanager
def _prepared_cursor() -> Iterator[Any]:
    """A psycopg cursor that binds server-side and prepares what it runs, inside Django's
    cursor wrapper (its database errors, query logging and execute wrappers)."""
    connection.ensure_connection()
    raw = connection.connection
    threshold = raw.prepare_threshold
    # psycopg prepares nothing on a connection whose threshold is None (Django's default):
    # lifted for this cursor's statement only, so that Django's cursors (client-side
    # binding, never prepared) and the project's OPTIONS stay as they were
    raw.prepare_threshold = 2**31 if threshold is None else threshold
    try:
        with connection._prepare_cursor(_prepared_cursor_class()(raw)) as cursor:
            yield cursor
    finally:
        raw.prepare_threshold = threshold


@cache
def _prepared_cursor_class() -> type:
    import psycopg

    class PreparedCursor(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            out = super().execute(query, params, prepare=True, **kwargs)
            # What Django's query log reads (``last_executed_query``): psycopg leaves it
            # unset when it runs a prepared statement, and reads it nowhere itself.
            self._query = SimpleNamespace(query=query.encode())
            return out

    return PreparedCursor


#: A column :func:`_insert_admission` writes: (attname, is JSON, default).
_Column = tuple[str, bool, Any]


@cache
def _admission_fields() -> tuple[list[_Column], list[_Column]]:
    """The columns :func:`_insert_admission` writes: every concrete field but the key,
    of the job and of a log row (whose job, node and tenant the statement sets)."""
    def column(f: Any) -> _Column:
        return f.attname, f.get_internal_type() == "JSONField", f.get_default()

    job_fields = [column(f) for f in Job._meta.concrete_fields if not f.primary_key]
    row_fields = [column(f) for f in Transition._meta.concrete_fields
                  if not f.primary_key and f.attname not in _ADMISSION_ROW_SET]
    return job_fields, row_fields


#: A job's log row's columns that :func:`_admission_sql` sets: the job's key from its
#: INSERT, and no node or tenant (a check constraint says so).
_ADMISSION_ROW_SET = {"job_id": "new_job.id", "node_id": "NULL", "tenant_id": "NULL"}


@cache
def _admission_sql(rows: int) -> str:
    """The lock, the job and its ``rows`` log rows, as one statement: data-modifying WITHs
    that each read the one before (the job's INSERT selects from the lock, the rows'
    from the job's), so the lock is held before either takes a key from its sequence;
    the rows are inserted sorted, so their seqs follow their order."""
    qn = connection.ops.quote_name
    job_fields, row_fields = _admission_fields()
    fields = {**{f.attname: f for f in Job._meta.concrete_fields},
              **{f"row.{f.attname}": f for f in Transition._meta.concrete_fields}}

    def typed(key: str) -> str:
        # parameters bound server-side need a type where the column does not give one;
        # text for strings, so that a value too long is refused, not cut (varchar(n))
        f = fields[key]
        text = f.get_internal_type() in ("CharField", "TextField", "SlugField")
        return f"%s::{'text' if text else f.db_type(connection)}"

    job_columns = ", ".join(qn(fields[name].column) for name, _j, _d in job_fields)
    row_columns = ", ".join(qn(fields[f"row.{name}"].column)
                            for name in [*_ADMISSION_ROW_SET, *(n for n, _j, _d in row_fields)])
    aliases = [f"c{i}" for i in range(len(row_fields))]
    typed_row = ", ".join(typed(f"row.{n}") for n, _j, _d in row_fields)
    values = ", ".join(f"({i}, {typed_row})" for i in range(rows))
    return (
        f"WITH lock AS MATERIALIZED (SELECT pg_advisory_xact_lock({int(LOG_APPEND_LOCK_KEY)})), "
        f"new_job AS (INSERT INTO {qn(Job._meta.db_table)} ({job_columns}) "
        f"SELECT {', '.join(typed(name) for name, _j, _d in job_fields)} FROM lock "
        f"RETURNING {qn(Job._meta.pk.column)} AS id) "
        f"INSERT INTO {qn(Transition._meta.db_table)} ({row_columns}) "
        f"SELECT {', '.join([*_ADMISSION_ROW_SET.values(), *(f'r.{a}' for a in aliases)])} "
        f"FROM new_job, (VALUES {values}) AS r(ord, {', '.join(aliases)}) ORDER BY r.ord "
        f"RETURNING {qn(Transition._meta.pk.column)}, "
        f"{qn(Transition._meta.get_field('job').column)}"
    )


@contextmanager
def append_lock() -> Iterator[None]:
    """Take the log's append lock once for a transaction that appends many rows (inside
    the caller's transaction: the lock lasts until it ends); appends inside the block do
    not ask for it again."""
    _serialise_log_appends()
    token = _LOCK_HELD.set(True)
    try:
        yield
    finally:
        _LOCK_HELD.reset(token)


def _announce_after_commit(row: Transition) -> None:
    transaction.on_commit(lambda: transition_committed.send(sender=Transition, transition=row))


def _serialise_log_appends() -> None:
    # SQLite has a single writer already (transactions BEGIN IMMEDIATE).
    if connection.vendor == "postgresql" and not _LOCK_HELD.get():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOG_APPEND_LOCK_KEY])


def _append_log(
    job: Job,
    *,
    from_state: JobState | None,
    to_state: JobState,
    reason: Reason,
    actor: Actor,
    at: datetime,
    detail: dict[str, Any],
    tick_id: str | int | None,
    actor_name: str,
) -> Transition:
    return Transition.objects.create(
        kind=Transition.Kind.JOB,
        job=job,
        from_state=from_state.value if from_state else None,
        to_state=to_state.value,
        at=at,
        reason=reason.value,
        detail=detail,
        actor=actor.value,
        actor_name=actor_name,
        tick_id="" if tick_id is None else str(tick_id),
    )


def _update_projection(job: Job, row: Transition) -> None:
    """Bring Job, Allocation, Node and Tenant rows in line with the appended ``row``."""
    held = JobState(job.state) in HOLDING_STATES
    proj = JobProjection(
        state=JobState(job.state),
        # open allocations belong to holding jobs only (replay --verify checks it)
        alloc=_open_alloc_map(job) if held else {},
        **{name: getattr(job, name) for name in JOB_COLUMNS},
    )
    before = proj.alloc
    apply_transition(
        proj,
        to_state=JobState(row.to_state),
        reason=row.reason,
        at=row.at,
        detail=row.detail,
        checkpointable=job.checkpointable,
    )
    if proj.alloc != before:
        _move_allocations(job, before, proj.alloc, row.at)

    _write_projection(job, proj, row.to_state)
    job.save(
        update_fields=[
            "state", "pending_reason", "pending_blocker", "estimate_start_at",
            "estimate_basis", "estimate_kind", *JOB_COLUMNS
        ]
    )


def _write_projection(job: Job, proj: JobProjection, to_state: str) -> None:
    """Set the job row's columns (unsaved) to ``proj``, the projection of its move to
    ``to_state``: one definition for the single and the bulk path."""
    if proj.state != job.state:
        # the tick sets a fresh pending reason and estimate for a queued job; old ones
        # would mislead
        job.pending_reason = PendingReason.NONE.value
        job.pending_blocker = None
        job.estimate_start_at = None
        job.estimate_basis = ""
        job.estimate_kind = ""
    job.state = to_state
    for name in JOB_COLUMNS:
        setattr(job, name, getattr(proj, name))


def _open_alloc_map(job: Job) -> AllocMap:
    rows = Allocation.objects.filter(job=job, end__isnull=True).select_related("node")
    return normalise_alloc({a.node.name: a.gpu_indices for a in rows})


def _move_allocations(job: Job, before: AllocMap, after: AllocMap, at: datetime) -> None:
    """End the job's open allocations and open ``after``: GPUs back to and from nodes,
    the tenant's held GPUs and usage accrued at ``at``."""
    nodes = Node.objects.in_bulk(sorted(set(before) | set(after)), field_name="name")
    missing = sorted(set(after) - set(nodes))
    if missing:
        raise AllocationError(f"job {job.pk}: unknown node(s) {', '.join(missing)}")
    _check_free(job, after, nodes)

    _accrue_tenant_usage(job.tenant_id, at, alloc_gpus(after) - alloc_gpus(before))
    for name, indices in before.items():
        Node.objects.filter(pk=nodes[name].pk).update(free_gpus=F("free_gpus") + len(indices))
    Allocation.objects.filter(job=job, end__isnull=True).update(end=at)
    for name, indices in after.items():
        Node.objects.filter(pk=nodes[name].pk).update(free_gpus=F("free_gpus") - len(indices))
    Allocation.objects.bulk_create(
        Allocation(
            job=job, node=nodes[name], gpu_indices=indices, start=at, preemptible=job.preemptible
        )
        for name, indices in after.items()
    )


def _check_free(job: Job, alloc: AllocMap, nodes: dict[str, Node]) -> None:
    """Every index exists on its node and no other job holds it (appends are serialised,
    so nothing can take it between this check and the insert)."""
    held: dict[int, set[int]] = {}
    others = Allocation.objects.filter(
        node__in=[nodes[name] for name in alloc], end__isnull=True
    ).exclude(job=job)
    for node_id, indices in others.values_list("node_id", "gpu_indices"):
        held.setdefault(node_id, set()).update(indices)
    for name, indices in alloc.items():
        node = nodes[name]
        if not indices or len(set(indices)) != len(indices):
            raise AllocationError(f"job {job.pk}: bad GPU indices {indices} on {name}")
        out_of_range = [i for i in indices if not 0 <= i < node.gpu_count]
        if out_of_range:
            raise AllocationError(
                f"job {job.pk}: {name} has GPUs 0-{node.gpu_count - 1}, not {out_of_range}"
            )
        taken = sorted(held.get(node.pk, set()) & set(indices))
        if taken:
            raise AllocationError(f"job {job.pk}: GPUs {taken} on {name} are already allocated")


def _accrue_tenant_usage(tenant_id: int, at: datetime, held_delta: int) -> None:
    if held_delta == 0:
        return
    tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
    since = int(tenant.usage_at.timestamp()) if tenant.usage_at else None
    usage, as_of = accrued(
        tenant.usage_gpu_s, since, tenant.held_gpus, int(at.timestamp()), half_life_s()
    )
    tenant.usage_gpu_s = usage
    tenant.usage_at = datetime.fromtimestamp(as_of, tz=UTC)
    tenant.held_gpus += held_delta
    tenant.save(update_fields=["usage_gpu_s", "usage_at", "held_gpus"])
