"""Rebuild the projection from the Transition log alone, and compare it with the tables.

The rebuild walks the log in seq order, in chunks, applying the same rules as the
service (``services.projection.apply_transition``); it reads the Job table only for the
immutable spec (checkpointable) and the Node table for capacity. Tenant usage is rebuilt
with the same accrual, in the same order, so it matches to the last bits.

Cluster rows are replayed too: a node's health is the ``to_state`` of its last node row
(a node without one is as it was born: healthy), a tenant's quota is the ``after`` of its
last tenant row (a tenant without one keeps the quota it was created with). A tenant
created through ``services.cluster.tenant_create`` has a first row (action ``register``)
that also gives the usage it carried in, the starting point of its usage replay. Each row
must start where the previous row of the same node or tenant ended, or it is reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter

from django.db import connection, transaction
from django.db.models import Case, Q, TextField, Value, When
from django.db.models.functions import Cast, Coalesce

from scheduler_app.collector import collector_paused
from scheduler_app.core.states import JobState, Reason, allowed_targets
from scheduler_app.core.types import TENANT_LIMITS, NodeHealth
from scheduler_app.models import Allocation, Job, Node, Tenant, Transition
from scheduler_app.selectors.binary import fetch_binary
from scheduler_app.services.projection import (
    JOB_COLUMNS,
    READS_DETAIL,
    AllocMap,
    JobProjection,
    apply_transition,
    normalise_alloc,
)
from scheduler_app.services.usage import accrued, half_life_s

CHUNK = 50_000
_HEALTHS = frozenset(h.value for h in NodeHealth)
QUOTA_KEYS = ("guaranteed_gpus", "borrow_limit_gpus")
#: the team limits logged with the quota, each only when set: a limit missing from a row
#: reads as null (no limit), so rows written before the limits existed read as they were
LIMIT_KEYS = TENANT_LIMITS


@dataclass(frozen=True, slots=True)
class Mismatch:
    what: str  # e.g. "job 12 state", "node n1 free_gpus", "log #40"
    from_log: object
    in_tables: object

    def __str__(self) -> str:
        return f"{self.what}: log says {self.from_log!r}, tables say {self.in_tables!r}"


@dataclass(slots=True)
class _TenantUsage:
    usage: float = 0.0
    since_s: int | None = None
    held: int = 0


@dataclass(slots=True)
class Rebuilt:
    jobs: dict[int, JobProjection] = field(default_factory=dict)
    node_used: dict[str, int] = field(default_factory=dict)
    tenants: dict[int, _TenantUsage] = field(default_factory=dict)
    #: node id -> health after its last node row
    node_health: dict[int, str] = field(default_factory=dict)
    #: tenant id -> {"guaranteed_gpus", "borrow_limit_gpus"} after its last tenant row
    tenant_quota: dict[int, dict[str, int]] = field(default_factory=dict)
    log_errors: list[Mismatch] = field(default_factory=list)
    rows: int = 0
    cluster_rows: int = 0


@contextmanager
def read_snapshot() -> Iterator[None]:
    """Run the enclosed reads in one snapshot of the database: the log and the tables as
    of one instant, whatever commits meanwhile. A replay that read the log, then the
    tables a moment later, saw on a live cluster the moves committed in between as
    mismatches (a job RUNNING in the tables, PLACING in the log it read before).

    PostgreSQL: one ``REPEATABLE READ, READ ONLY`` transaction (its snapshot is taken at
    its first query). SQLite: one deferred read transaction (in WAL mode its first read
    fixes what it sees; a deferred BEGIN, not the configured IMMEDIATE, so writers are
    not locked out meanwhile). Inside a transaction already (a test's), the enclosed
    reads use that one."""
    if connection.in_atomic_block:
        yield
        return
    connection.ensure_connection()
    sqlite = connection.vendor == "sqlite"
    mode = connection.transaction_mode if sqlite else None
    try:
        if sqlite:
            connection.transaction_mode = "DEFERRED"  # the atomic block's BEGIN reads it
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
    finally:
        if sqlite:
            connection.transaction_mode = mode


def rebuild_from_log(*, on_rows: Callable[[int], None] | None = None) -> Rebuilt:
    """Replay every Transition in seq order. ``on_rows(n)`` reports progress per chunk.

    Written for a million rows in seconds: tuples straight from the cursor (no model
    instances, no JSON decoding but for the rows whose detail the rules read), the
    per-row checks as set look-ups, and the projection rules (``apply_transition``)
    called with the log's text as it comes."""
    with collector_paused():
        return _rebuild(on_rows)


def _rebuild(on_rows: Callable[[int], None] | None) -> Rebuilt:
    spec = _job_specs()
    out = Rebuilt()
    half_life = half_life_s()
    jobs, tenants, node_used, errors = out.jobs, out.tenants, out.node_used, out.log_errors
    legal, loads, job_kind, node_kind = _LEGAL, _loads, _JOB, _NODE
    no_detail = _NO_DETAIL
    seen: dict[int, tuple[JobProjection, int, bool]] = {}  # one look-up a row
    for chunk in _log_chunks():
        for seq, kind, subject, from_state, to_state, reason, at, raw, pointer in chunk:
            if kind != job_kind:
                if kind == node_kind:
                    _replay_node_row(out, seq, subject, from_state, to_state)
                else:
                    _replay_tenant_row(out, seq, subject, loads(raw) if raw else {})
                continue
            entry = seen.get(subject)
            if entry is None:
                entry = seen[subject] = (JobProjection(), *spec[subject])
                jobs[subject] = entry[0]
            proj, tenant, checkpointable = entry
            if from_state != proj.state or (from_state, to_state) not in legal:
                _job_row_errors(errors, seq, subject, proj.state, from_state, to_state)
            before = proj.alloc
            if raw:
                detail = loads(raw)
            elif pointer is None:
                detail = no_detail
            else:  # a checkpoint: its pointer, sent as text
                detail = {"resume_pointer": pointer}
            apply_transition(proj, to_state=to_state, reason=reason, at=at, detail=detail,
                             checkpointable=checkpointable)
            after = proj.alloc
            if after is before or after == before:
                continue
            # the allocation changed: the tenant's usage accrues, the nodes' GPUs move
            usage = tenants.get(tenant)
            if usage is None:
                usage = tenants[tenant] = _TenantUsage()
            usage.usage, usage.since_s = accrued(
                usage.usage, usage.since_s, usage.held, int(at.timestamp()), half_life
            )
            if before:
                usage.held -= sum(map(len, before.values()))
                for name, indices in before.items():
                    node_used[name] = node_used.get(name, 0) - len(indices)
            if after:
                usage.held += sum(map(len, after.values()))
                for name, indices in after.items():
                    node_used[name] = node_used.get(name, 0) + len(indices)
        out.rows += len(chunk)
        if on_rows:
            on_rows(len(chunk))
    states = {state.value: state for state in JobState}
    for proj in jobs.values():
        # the log's text back to the core's type, as the services keep it
        if proj.state is not None:
            proj.state = states.get(proj.state, proj.state)
    return out


def _job_row_errors(
    errors: list[Mismatch], seq: int, job_id: int, state: str | None, from_state: str | None,
    to_state: str,
) -> None:
    """A job row that does not start where the job's last row ended, or an illegal move."""
    if from_state != state:
        errors.append(Mismatch(f"log #{seq} (job {job_id}) from_state", state, from_state))
    if (from_state, to_state) not in _LEGAL:
        errors.append(Mismatch(f"log #{seq} (job {job_id}) illegal move", "a legal move", to_state))


def _job_specs() -> dict[int, tuple[int, bool]]:
    """job id -> (tenant id, checkpointable): the immutable spec the rules read."""
    rows = Job.objects.values_list("pk", "tenant_id", "checkpointable")
    return {pk: (tenant_id, checkpointable) for pk, tenant_id, checkpointable in rows}


_scan_json = json.JSONDecoder().scan_once


def _loads(text: str) -> object:
    """``json.loads`` of a detail, without its Python layers for the usual text (a JSON
    value from its first character to its last, as the database writes it)."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)  # not JSON at its first character: json's own error
    if end != len(text):
        return json.loads(text)  # whitespace or more after the value: json's own word
    return value


#: (from, to) of every legal job row, as the log's text; the first row comes from null.
_LEGAL = frozenset(
    {(None, JobState.SUBMITTED.value)}
    | {(f.value, t.value) for f in JobState for t in allowed_targets(f)}
)
_JOB, _NODE = Transition.Kind.JOB.value, Transition.Kind.NODE.value
_NO_DETAIL: dict = {}


def _log_chunks() -> Iterator[list[tuple]]:
    """The log in seq order, in chunks of at most ``CHUNK`` rows: (seq, kind, subject (the
    job, node or tenant id, as the kind says), from, to, reason, at, detail as JSON text or
    None, resume pointer or None).
    The detail is sent only where it is read: cluster rows, placements and the reasons of
    ``projection.READS_DETAIL``; on PostgreSQL a checkpoint's string pointer comes alone,
    as text (no JSON to decode: most rows of a long log are checkpoints).

    On PostgreSQL (libpq 17 or later) the log is one statement, streamed in chunks: one
    snapshot, and the server reads and sends the next rows while this process applies
    the last ones. Elsewhere (SQLite, an older libpq) it is keyset-paginated, one
    statement a chunk."""
    if connection.vendor == "postgresql":
        if _pg_streams():
            yield from _pg_streamed_chunks()
        else:
            yield from _pg_keyset_chunks()
        return
    yield from _keyset_chunks()


def _keyset_chunks() -> Iterator[list[tuple]]:
    """The chunks through the ORM, keyset-paginated (no long-lived cursor, bounded
    memory); the whole detail of a checkpoint is sent, never its pointer alone."""
    detail = Case(
        When(
            ~Q(kind=_JOB)
            | Q(from_state=JobState.QUEUED.value, to_state=JobState.PLACING.value)
            | Q(reason__in=sorted(READS_DETAIL)),
            then=Cast("detail", TextField()),
        ),
        default=Value(None),
        output_field=TextField(),
    )
    no_pointer = Value(None, TextField())  # the whole detail is sent instead
    rows = (
        Transition.objects.annotate(
            subject=Coalesce("job_id", "node_id", "tenant_id"), raw=detail, pointer=no_pointer
        )
        .order_by("pk")
        .values_list("pk", "kind", "subject", "from_state", "to_state", "reason", "at", "raw",
                     "pointer")
    )
    last = 0
    while True:
        chunk = list(rows.filter(pk__gt=last)[:CHUNK])
        if not chunk:
            return
        yield chunk
        last = chunk[-1][0]


def _pg_streams() -> bool:
    """Whether psycopg can stream a result in chunks here (libpq 17 or later)."""
    import psycopg  # PostgreSQL only

    return psycopg.pq.version() >= 170000


def _pg_select() -> str:
    """The log's SELECT on PostgreSQL, in seq order, without a bound (the callers add
    theirs). A checkpoint whose pointer is a JSON string sends the pointer alone, as
    text, and no detail; the rows the rules read otherwise send their detail as text."""
    opts = Transition._meta
    qn = connection.ops.quote_name

    def col(name: str) -> str:
        return qn(opts.get_field(name).column)

    reads = ", ".join(f"'{reason}'" for reason in sorted(READS_DETAIL))
    detail, reason = col("detail"), col("reason")
    pointer = f"{detail} -> 'resume_pointer'"
    string_pointer = (f"{reason} = '{Reason.CHECKPOINTED.value}' "
                      f"AND jsonb_typeof({pointer}) = 'string'")
    return (
        f"SELECT {col('id')}, {col('kind')}, "
        f"COALESCE({col('job')}, {col('node')}, {col('tenant')}), "
        f"{col('from_state')}, {col('to_state')}, {reason}, {col('at')}, "
        f"CASE WHEN {string_pointer} THEN NULL "
        f"WHEN {col('kind')} <> '{_JOB}' OR {reason} IN ({reads}) "
        f"OR ({col('from_state')} = '{JobState.QUEUED.value}' "
        f"AND {col('to_state')} = '{JobState.PLACING.value}') "
        f"THEN {detail}::text END, "
        f"CASE WHEN {string_pointer} THEN {detail} ->> 'resume_pointer' END "
        f"FROM {qn(opts.db_table)}"
    )


def _pg_streamed_chunks() -> Iterator[list[tuple]]:
    """The chunks on PostgreSQL from one streamed statement, read with psycopg's binary
    protocol: its C loaders turn the timestamps into datetimes (Django's text loader for
    them is Python, a microsecond a row), and the rows come as plain tuples."""
    import psycopg  # PostgreSQL only

    sql = f"{_pg_select()} ORDER BY {connection.ops.quote_name('id')}"
    connection.ensure_connection()
    # a cursor of psycopg's own: Django's (client-side binding) cannot read binary
    with psycopg.Cursor(connection.connection) as cursor:
        rows = cursor.stream(sql, binary=True, size=CHUNK)
        try:
            while chunk := list(islice(rows, CHUNK)):
                yield chunk
        finally:
            rows.close()  # left early: psycopg cancels the rest of the statement, here


def _pg_keyset_chunks() -> Iterator[list[tuple]]:
    """The same chunks on PostgreSQL with a libpq that cannot stream in chunks: keyset
    pagination, one statement a chunk, binary as well."""
    sql = (f"{_pg_select()} WHERE {connection.ops.quote_name('id')} > %s "
           f"ORDER BY {connection.ops.quote_name('id')} LIMIT {CHUNK}")
    last = 0
    while chunk := fetch_binary(sql, [last]):
        yield chunk
        last = chunk[-1][0]


def _replay_node_row(
    out: Rebuilt, seq: int, node_id: int, from_state: str | None, to_state: str
) -> None:
    out.cluster_rows += 1
    # a node with no row yet is as it was born (healthy), or is registering (from null)
    before = out.node_health.get(node_id)
    expected = (None, NodeHealth.HEALTHY.value) if before is None else (before,)
    if from_state not in expected:
        out.log_errors.append(
            Mismatch(f"log #{seq} (node {node_id}) from_state", expected[-1], from_state)
        )
    if to_state not in _HEALTHS:
        out.log_errors.append(Mismatch(f"log #{seq} (node {node_id}) health", "a health", to_state))
    out.node_health[node_id] = to_state


def _replay_tenant_row(out: Rebuilt, seq: int, tenant_id: int, detail: dict) -> None:
    out.cluster_rows += 1
    before, after = detail.get("before"), detail.get("after")
    previous = out.tenant_quota.get(tenant_id)
    here = f"log #{seq} (tenant {tenant_id})"
    if not isinstance(after, dict) or not set(QUOTA_KEYS) <= set(after):
        out.log_errors.append(Mismatch(f"{here} after", "a quota", after))
        return
    if detail.get("action") == "register":
        # the team's first row: its quota and the usage it carried in, as of usage_at_s
        if previous is not None or tenant_id in out.tenants:
            out.log_errors.append(Mismatch(f"{here} register", "the first row", "a later row"))
        out.tenants[tenant_id] = _TenantUsage(
            usage=float(after.get("usage_gpu_s", 0.0)), since_s=after.get("usage_at_s")
        )
    elif previous is not None and _limits_filled(before) != _limits_filled(previous):
        out.log_errors.append(Mismatch(f"{here} before", previous, before))
    out.tenant_quota[tenant_id] = ({key: after[key] for key in QUOTA_KEYS}
                                   | {k: after[k] for k in LIMIT_KEYS if after.get(k) is not None})


def _limits_filled(quota: object) -> object:
    """``quota`` with every team limit it lacks as null (a limit not set is not logged)."""
    if not isinstance(quota, dict):
        return quota
    return {**dict.fromkeys(LIMIT_KEYS), **quota}


def compare_with_tables(rebuilt: Rebuilt) -> list[Mismatch]:
    """Every difference between the rebuilt projection and the tables, in a stable order."""
    found = list(rebuilt.log_errors)
    found += _compare_jobs(rebuilt)
    found += _compare_nodes(rebuilt)
    found += _compare_tenants(rebuilt)
    return found


_JOB_FIELDS = ("state", *JOB_COLUMNS)


def _compare_jobs(rebuilt: Rebuilt) -> list[Mismatch]:
    found: list[Mismatch] = []
    open_allocs: dict[int, dict[str, list[int]]] = {}
    for job_id, node_name, indices in Allocation.objects.filter(end__isnull=True).values_list(
        "job_id", "node__name", "gpu_indices"
    ):
        open_allocs.setdefault(job_id, {}).setdefault(node_name, []).extend(indices)
    expected_of = attrgetter(*_JOB_FIELDS)  # a tuple in _JOB_FIELDS' order
    no_alloc: AllocMap = {}
    for job_id, *row in Job.objects.order_by("pk").values_list("pk", *_JOB_FIELDS).iterator(
        chunk_size=CHUNK
    ):
        proj = rebuilt.jobs.get(job_id)
        if proj is None:
            found.append(Mismatch(f"job {job_id}", "no transitions", row[0]))
            continue
        expected = expected_of(proj)
        if expected != tuple(row):  # the usual case: one comparison (JobState == its text)
            for name, want, have in zip(_JOB_FIELDS, expected, row, strict=True):
                want = want.value if isinstance(want, JobState) else want
                if want != have:
                    found.append(Mismatch(f"job {job_id} {name}", want, have))
        held = open_allocs.pop(job_id, None)
        actual: AllocMap = no_alloc if held is None else normalise_alloc(held)
        if proj.alloc != actual:
            found.append(Mismatch(f"job {job_id} allocation", proj.alloc, actual))
    for job_id, alloc in sorted(open_allocs.items()):
        found.append(Mismatch(f"allocation of unknown job {job_id}", {}, alloc))
    return found


def _compare_nodes(rebuilt: Rebuilt) -> list[Mismatch]:
    found: list[Mismatch] = []
    for pk, name, gpu_count, free, health in Node.objects.order_by("name").values_list(
        "pk", "name", "gpu_count", "free_gpus", "health"
    ):
        expected = gpu_count - rebuilt.node_used.get(name, 0)
        if expected != free:
            found.append(Mismatch(f"node {name} free_gpus", expected, free))
        expected_health = rebuilt.node_health.get(pk, NodeHealth.HEALTHY.value)
        if expected_health != health:
            found.append(Mismatch(f"node {name} health", expected_health, health))
    return found


def _compare_tenants(rebuilt: Rebuilt) -> list[Mismatch]:
    found: list[Mismatch] = []
    for pk, name, held, usage, *limits in Tenant.objects.order_by("name").values_list(
        "pk", "name", "held_gpus", "usage_gpu_s", *QUOTA_KEYS, *LIMIT_KEYS
    ):
        quota = rebuilt.tenant_quota.get(pk)
        if quota is not None:
            for key, actual in zip((*QUOTA_KEYS, *LIMIT_KEYS), limits, strict=True):
                if quota.get(key) != actual:
                    found.append(Mismatch(f"tenant {name} {key}", quota.get(key), actual))
        expected = rebuilt.tenants.get(pk, _TenantUsage())
        if expected.held != held:
            found.append(Mismatch(f"tenant {name} held_gpus", expected.held, held))
        if not math.isclose(expected.usage, usage, rel_tol=1e-9, abs_tol=1e-6):
            found.append(Mismatch(f"tenant {name} usage_gpu_s", expected.usage, usage))
    return found
