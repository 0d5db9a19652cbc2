"""Jobs: submit (one, a batch of up to 1,000, or a job array of up to 10,000 tasks, all or
nothing), list, detail, cancel (one job, or every task of an array)."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db import connection
from django.db.models import Count, QuerySet
from django_filters.utils import translate_validation
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import generics, serializers, status
from rest_framework.exceptions import (
    MethodNotAllowed,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.core.records import ESTIMATE_KIND_SENTENCES, UPPER_BOUND_KINDS
from scheduler_app.core.states import PENDING_SENTENCES, JobState, PendingReason, Reason
from scheduler_app.core.types import (
    DEPENDENCY_KINDS,
    MAX_ARRAY_TASKS,
    SIZE_CLASS_LABELS,
    Actor,
    join_words,
    may_borrow,
    size_class,
)
from scheduler_app.models import Allocation, Job, Membership, Tenant, Transition
from scheduler_app.scheduler_config import scheduler_config
from scheduler_app.selectors.jobs import (
    job_history,
    job_queue_position,
    queue_deadline,
    run_started_at,
)
from scheduler_app.selectors.preemption_loss import stop_loss
from scheduler_app.selectors.redaction import OtherJobs
from scheduler_app.selectors.why import _plain as plain_instants
from scheduler_app.selectors.why import why_pending
from scheduler_app.services import array_cancel, array_submit, job_cancel, job_submit
from scheduler_app.services.jobs import (
    JOB_ID_MAX,
    MAX_DEPENDENCIES,
    batch_jobs_with_key,
    jobs_submit_batch,
    submit_replayed,
)

from . import access, cache
from .errors import ApiConflict
from .fastvalid import validated
from .fields import (
    INT_MAX,
    SMALL_MAX,
    DependencyKindField,
    KnownFieldsOnly,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSlugField,
    seconds,
)
from .filters import JobFilter
from .pagination import IdCursorPagination
from .submit import (
    Refusals,
    array_differences,
    full_spec,
    same_dependencies,
    spec_differences,
    spec_errors,
)

MAX_BATCH = 1000
IDEMPOTENCY_HEADER = "Idempotency-Key"

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    name=IDEMPOTENCY_HEADER,
    location=OpenApiParameter.HEADER,
    required=False,
    type=str,
    description=(
        "A key you choose (at most 128 characters), yours in each tenant: your retried "
        "request with the same key returns the job(s) it made the first time (200) instead "
        "of making new ones; a teammate's key of the same name is theirs. The same as the "
        "body's idempotency_key."
    ),
)


# ---------------------------------------------------------------- input
#: Job ids the API takes (bigint keys; more is a typo, not a job).
ID_MAX = JOB_ID_MAX

_WHEN_HELP = ("When the dependency is met: ok (the job COMPLETED, Slurm's afterok), any "
              "(it ended in any way, afterany), notok (it FAILED or was CANCELLED, "
              "afternotok). Default ok. A dependency that can no longer be met (ok on a job "
              "that failed, notok on one that completed) is refused at submit (400 "
              "bad_dependency), and one that stops being met later cancels this job "
              "(DependencyNeverSatisfied).")


class DependencyIn(KnownFieldsOnly):
    """A job this one waits for: an existing job (``job``) or, in a batch, another job of
    the same batch (``index``)."""

    job = StrictIntegerField(required=False, min_value=1, max_value=ID_MAX,
                             help_text="The id of an existing job you may see.")
    index = StrictIntegerField(
        required=False, min_value=0, max_value=MAX_BATCH - 1,
        help_text="Batches only: the position (0 first) of another job of the same batch.")
    when = DependencyKindField(choices=list(DEPENDENCY_KINDS), default="ok",
                               help_text=_WHEN_HELP)


class JobSpecIn(KnownFieldsOnly):
    """What a job asks for. The services check the rules (docs/api.md, "Bad input")."""

    name = StrictCharField(max_length=200, help_text="1 to 200 characters.")
    command = StrictCharField(
        required=False, allow_blank=True, max_length=100_000, default="",
        help_text="What the node agent runs.",
    )
    gpus = StrictIntegerField(
        min_value=1, max_value=INT_MAX,
        error_messages={"min_value": "A job needs at least 1 GPU."},
        help_text="GPUs of the whole gang, at least 1, at most the team's guarantee plus "
                  "borrow limit and the cluster's GPUs (of gpu_type).",
    )
    gpus_per_node = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=SMALL_MAX, default=None,
        error_messages={"min_value": "GPUs per node must be at least 1."},
        help_text="The gang's shape: GPUs on each node; must divide gpus. Null: any split.",
    )
    gpu_type = StrictCharField(
        required=False, allow_blank=True, max_length=32, default="",
        help_text="One of the cluster's GPU types (e.g. H100). Empty: any type.",
    )
    priority = StrictIntegerField(
        required=False, default=0, min_value=-INT_MAX, max_value=INT_MAX,
        help_text="Higher first, within the team's queue.",
    )
    checkpointable = StrictBooleanField(required=False, default=False)
    checkpoint_interval_s = seconds(minimum=1, default=None,
                                    help_text="How often it checkpoints, seconds.")
    checkpoint_time_s = seconds(minimum=1, default=None,
                                help_text="Seconds it needs to checkpoint when asked to stop.")
    restart_s = seconds(minimum=0, allow_null=False, default=0,
                        help_text="Seconds it needs to resume from a checkpoint.")
    max_runtime_s = seconds(
        minimum=1, default=None,
        help_text="Limit per run, seconds: the run FAILS (TimeLimit) at it. Jobs with a "
                  "limit may backfill. Null: no limit.",
    )
    min_gpus = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=INT_MAX, default=None,
        error_messages={"min_value": "The elastic minimum must be between 1 and the job's "
                                     "GPUs."},
        help_text="Elastic jobs run (and shrink) down to this many GPUs. Null: not elastic.",
    )
    preemptible = StrictBooleanField(required=False, default=False)
    interactive = StrictBooleanField(required=False, default=False)
    depends_on = DependencyIn(
        many=True, required=False, default=list, max_length=MAX_DEPENDENCIES,
        help_text=f"Up to {MAX_DEPENDENCIES} jobs it waits for: it stays QUEUED (pending "
                  "reason Dependency, holding and reserving no GPUs) until each has ended "
                  "as its 'when' requires. A job you may not see, one that does not exist, "
                  "the same job twice, or a cycle in a batch is refused (400).")


class SubmitIn(JobSpecIn):
    tenant = StrictSlugField(max_length=64, help_text="The team's name.")
    idempotency_key = StrictCharField(
        required=False, allow_blank=True, max_length=128, default="",
        help_text="See the Idempotency-Key header.",
    )


class BatchIn(KnownFieldsOnly):
    tenant = StrictSlugField(max_length=64)
    idempotency_key = StrictCharField(
        required=False, allow_blank=True, max_length=123, default="",
        help_text="One key for the whole batch (at most 123 characters): job i gets the key "
                  "<key>#<i>.",
    )
    jobs = JobSpecIn(many=True, max_length=MAX_BATCH, min_length=1,
                     help_text=f"1 to {MAX_BATCH} job specs, all submitted or none.")


class ArrayIn(KnownFieldsOnly):
    count = StrictIntegerField(
        min_value=1, max_value=MAX_ARRAY_TASKS,
        error_messages={"min_value": f"An array has 1 to {MAX_ARRAY_TASKS:,} tasks.",
                        "max_value": f"An array has 1 to {MAX_ARRAY_TASKS:,} tasks."},
        help_text=f"Tasks to make, 1 to {MAX_ARRAY_TASKS:,}: indices 0 to count - 1.")
    max_running = StrictIntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=INT_MAX,
        error_messages={"min_value": "At least 1 task must be allowed to run at once (or "
                                     "leave it out for no cap)."},
        help_text="At most this many tasks run at once; the others wait with pending reason "
                  "ArrayLimit. Null: no cap.")


class ArraySubmitIn(SubmitIn):
    idempotency_key = StrictCharField(
        required=False, allow_blank=True, max_length=123, default="",
        help_text="One key for the whole array (at most 123 characters): task i gets the "
                  "key <key>#<i>.",
    )
    array = ArrayIn(help_text="The array: how many tasks, how many may run at once.")


# ---------------------------------------------------------------- output
class TransitionOut(serializers.ModelSerializer):
    seq = serializers.IntegerField(source="pk")

    class Meta:
        model = Transition
        fields = ["seq", "at", "from_state", "to_state", "reason", "actor", "actor_name",
                  "detail"]


class QueuePositionOut(serializers.Serializer):
    tenant = serializers.IntegerField(
        allow_null=True, help_text="1-based position in the team's queue.")
    cluster = serializers.IntegerField(
        allow_null=True, help_text="1-based rank across the cluster, in the tick's order.")
    deadline_at = serializers.DateTimeField(
        allow_null=True,
        help_text="Where it orders in its team's queue among jobs of its priority (earlier "
                  "first): its submit time plus the scheduler's queue_stretch times its "
                  "declared limit times its GPUs (the offset at most 7 days; no limit counts "
                  "as 7 days).")


class EstimateOut(serializers.Serializer):
    start_at = serializers.DateTimeField(allow_null=True)
    basis = serializers.CharField(
        help_text="How it was planned (the reservation's arithmetic), or why there is none; "
                  "instants as clock times (\"from 07:00 UTC\"), as gpuq why and the job page "
                  "say them.")
    kind = serializers.ChoiceField(
        choices=[(k, k) for k in ESTIMATE_KIND_SENTENCES], allow_blank=True,
        help_text="What the estimate is worth: " + "; ".join(
            f"{k}: {v}" for k, v in ESTIMATE_KIND_SENTENCES.items()) + ".")
    upper_bound = serializers.BooleanField(
        help_text="True when start_at is a bound (at the latest, if the declared limits "
                  "hold): kinds reserved and reclaim.")


class PreemptionOut(serializers.Serializer):
    seq = serializers.IntegerField()
    at = serializers.DateTimeField()
    for_job = serializers.IntegerField(
        allow_null=True, help_text="The job it made room for, if you may see it (else null; "
                                   "the sentences say \"a job of team X\").")
    why = serializers.CharField(help_text="Why this job was chosen, in words.")
    cost_s = serializers.FloatField(
        allow_null=True,
        help_text="The estimate the scheduler weighed when it chose the job: the seconds "
                  "since its last checkpoint then, plus its declared restart. What it "
                  "really lost is work_lost_s, once it stopped.")
    est_gpu_s_lost = serializers.FloatField(allow_null=True,
                                            help_text="cost_s times the job's GPUs.")
    stopped_at = serializers.DateTimeField(
        allow_null=True, help_text="When it stopped (PREEMPTED); null while it is still "
                                   "stopping, or if it ended otherwise in its grace window.")
    checkpoint_at = serializers.DateTimeField(
        allow_null=True, help_text="The last checkpoint of the run it stopped; null when "
                                   "that run wrote none (it lost the whole run).")
    work_lost_s = serializers.IntegerField(
        allow_null=True, help_text="Seconds of work it really lost: from checkpoint_at (or "
                                   "the run's start) to stopped_at; null until it stopped.")
    detail = serializers.DictField(help_text="The whole arithmetic, as logged.")


class DependencyOut(serializers.Serializer):
    job = serializers.IntegerField(help_text="The job it waits for.")
    when = serializers.ChoiceField(choices=list(DEPENDENCY_KINDS), help_text=_WHEN_HELP)


class JobOut(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.name")
    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    size_class = serializers.SerializerMethodField()
    depends_on = serializers.SerializerMethodField()
    array_id = serializers.IntegerField(
        allow_null=True, read_only=True,
        help_text="A task of a job array: the array's id (its task 0's id); null otherwise.")
    array_task = serializers.CharField(
        allow_null=True, read_only=True,
        help_text="A task's name, <array_id>_<array_index> (as Slurm writes 12_3); null "
                  "outside an array.")
    started_at = serializers.SerializerMethodField(
        help_text="When its current run started; null while it waits (QUEUED, PLACING), "
                  "as Slurm resets StartTime on a requeue: a requeued job's earlier runs "
                  "are in its history.")

    class Meta:
        model = Job
        fields = ["id", "tenant", "owner", "name", "gpus", "gpus_per_node", "gpu_type",
                  "size_class", "priority", "state", "pending_reason", "submitted_at",
                  "started_at", "finished_at", "estimate_start_at", "idempotency_key",
                  "depends_on", "array_id", "array_index", "array_count",
                  "array_max_running", "array_task"]

    @extend_schema_field(serializers.ChoiceField(choices=SIZE_CLASS_LABELS))
    def get_size_class(self, job: Job) -> str:
        return SIZE_CLASS_LABELS[size_class(job.gpus)]

    @extend_schema_field(DependencyOut(many=True))
    def get_depends_on(self, job: Job) -> list[dict[str, Any]]:
        return dependencies_out(job)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_started_at(self, job: Job) -> str | None:
        return _when(run_started_at(job))




def dependencies_out(job: Job) -> list[dict[str, Any]]:
    """``[{"job": id, "when": kind}, ...]``, as given at submit."""
    return [{"job": pk, "when": when} for pk, when in job.depends_on or ()]


_WHEN = serializers.DateTimeField()


def job_summary(job: Job) -> dict[str, Any]:
    """``JobOut(job).data``, without building a serializer per job: what the submit
    responses and the list pages return, for 1 to 1,000 jobs at a time (DRF builds and
    runs a field object per value; this is a dict). A test holds the two equal."""
    owner = job.owner
    return {
        "id": job.pk,
        "tenant": job.tenant.name,
        "owner": owner.username if owner is not None else None,
        "name": job.name,
        "gpus": job.gpus,
        "gpus_per_node": job.gpus_per_node,
        "gpu_type": job.gpu_type,
        "size_class": SIZE_CLASS_LABELS[size_class(job.gpus)],
        "priority": job.priority,
        "state": job.state,
        "pending_reason": job.pending_reason,
        "submitted_at": _when(job.submitted_at),
        "started_at": _when(run_started_at(job)),
        "finished_at": _when(job.finished_at),
        "estimate_start_at": _when(job.estimate_start_at),
        "idempotency_key": job.idempotency_key,
        "depends_on": dependencies_out(job) if job.depends_on else [],
        "array_id": job.array_id,
        "array_index": job.array_index,
        "array_count": job.array_count,
        "array_max_running": job.array_max_running,
        "array_task": job.array_task,
    }


def _when(value: Any) -> str | None:
    return None if value is None else _when_text(value)


@lru_cache(maxsize=256)
def _when_text(value: datetime) -> str:
    # a batch's jobs share their submission time: DRF's formatting (the time zone, then
    # isoformat) once per distinct value, not once per job
    return _WHEN.to_representation(value)


class WhyPendingOut(serializers.Serializer):
    reason = serializers.CharField(help_text="The scheduler's pending reason.")
    headline = serializers.CharField(help_text="The one thing that keeps it waiting, in "
                                     "numbers.")
    evidence = serializers.ListField(child=serializers.CharField(),
                                     help_text="The figures behind it (free GPUs per pod, "
                                     "the planned start and its basis, ...).")
    next_step = serializers.CharField(allow_blank=True,
                                      help_text="What would start it sooner, if anything.")


class JobDetailOut(JobOut):
    pending_sentence = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField()
    estimate = serializers.SerializerMethodField()
    allocation = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()
    preemptions = serializers.SerializerMethodField()
    why_pending = serializers.SerializerMethodField()
    may_borrow = serializers.SerializerMethodField(
        help_text="May the job run on GPUs past its team's guarantee (borrowed idle GPUs)? "
                  "Only a job that can be preempted may: checkpointable, preemptible, or "
                  "declaring a time limit of at most borrow_max_runtime_s.")
    borrow_max_runtime_s = serializers.SerializerMethodField(
        help_text="The longest time limit with which a job that is neither checkpointable "
                  "nor preemptible may borrow (the scheduler's protected_borrow_max_s); null: "
                  "such a job never borrows.")
    max_runtime_from = serializers.SerializerMethodField(
        help_text="Where max_runtime_s came from: 'job' (declared at submit), 'team_default' "
                  "(the job declared none and got its team's default_runtime_s), or null "
                  "(no limit).")

    class Meta(JobOut.Meta):
        fields = [*JobOut.Meta.fields, "command", "checkpointable", "checkpoint_interval_s",
                  "checkpoint_time_s", "restart_s", "max_runtime_s", "max_runtime_from",
                  "min_gpus",
                  "preemptible", "interactive", "last_checkpoint_at", "resume_pointer",
                  "retry_count", "pending_sentence", "queue_position", "estimate",
                  "allocation", "history", "preemptions", "why_pending", "may_borrow",
                  "borrow_max_runtime_s"]

    @extend_schema_field(serializers.BooleanField())
    def get_may_borrow(self, job: Job) -> bool:
        return may_borrow(job.checkpointable, job.preemptible, job.max_runtime_s,
                          scheduler_config())

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_borrow_max_runtime_s(self, job: Job) -> int | None:
        return scheduler_config().protected_borrow_max_s or None

    @extend_schema_field(serializers.ChoiceField(choices=["job", "team_default"],
                                                 allow_null=True))
    def get_max_runtime_from(self, job: Job) -> str | None:
        if job.max_runtime_s is None:
            return None
        return "team_default" if job.runtime_from_team_default else "job"

    @extend_schema_field(serializers.CharField())
    def get_pending_sentence(self, job: Job) -> str:
        if job.state != JobState.QUEUED:
            return ""
        return PENDING_SENTENCES.get(PendingReason(job.pending_reason), "")

    @extend_schema_field(QueuePositionOut)
    def get_queue_position(self, job: Job) -> dict[str, Any]:
        if job.state != JobState.QUEUED:
            return {"tenant": None, "cluster": None, "deadline_at": None}
        in_tenant, in_cluster = job_queue_position(job=job)
        deadline = serializers.DateTimeField().to_representation(queue_deadline(job=job))
        return {"tenant": in_tenant, "cluster": in_cluster, "deadline_at": deadline}

    @extend_schema_field(EstimateOut(allow_null=True))
    def get_estimate(self, job: Job) -> dict[str, Any] | None:
        if job.state != JobState.QUEUED:
            return None
        kind = job.estimate_kind or ""
        # instants as clock times, as gpuq why and the job page say them (the core writes
        # t=<epoch seconds>: gpuq show printed them raw)
        basis = plain_instants(self._others(job).text(job.estimate_basis or ""))
        return {"start_at": job.estimate_start_at, "basis": basis,
                "kind": kind, "upper_bound": kind in UPPER_BOUND_KINDS}

    @extend_schema_field(
        serializers.DictField(child=serializers.ListField(child=serializers.IntegerField()),
                              help_text="Node name -> GPU indices held now.")
    )
    def get_allocation(self, job: Job) -> dict[str, list[int]]:
        rows = Allocation.objects.filter(job=job, end__isnull=True).select_related("node")
        return {a.node.name: sorted(a.gpu_indices) for a in sorted(rows, key=lambda a: a.node.name)}

    @extend_schema_field(TransitionOut(many=True))
    def get_history(self, job: Job) -> list[dict]:
        rows = self._history(job)
        others = self._others(job)
        out = TransitionOut(rows, many=True).data
        for item, row in zip(out, rows, strict=True):
            item["detail"] = others.detail(row.detail)
        return out

    @extend_schema_field(PreemptionOut(many=True))
    def get_preemptions(self, job: Job) -> list[dict]:
        others = self._others(job)
        rows = self._history(job)
        out = []
        for row in rows:
            if row.reason != Reason.PREEMPT_REQUESTED or row.from_state == row.to_state:
                continue
            d = others.detail(row.detail)
            lost = stop_loss(rows, row.pk)
            out.append({
                "stopped_at": lost.stopped_at if lost else None,
                "checkpoint_at": lost.checkpoint_at if lost else None,
                "work_lost_s": lost.work_lost_s if lost else None,
                "seq": row.pk, "at": row.at,
                "for_job": others.job_id((row.detail or {}).get("for")),
                "why": str(d.get("words") or d.get("why") or ""),
                "cost_s": d.get("cost_s"), "est_gpu_s_lost": d.get("est_gpu_s_lost"),
                "detail": d,
            })
        return PreemptionOut(out, many=True).data

    @extend_schema_field(WhyPendingOut(allow_null=True))
    def get_why_pending(self, job: Job) -> dict[str, Any] | None:
        """Why a queued job waits, in one place (the dashboard's job page says the same);
        null when it does not wait."""
        answer = why_pending(job=job, others=self._others(job))
        return None if answer is None else answer.as_dict()

    def _history(self, job: Job) -> list[Transition]:
        cached = getattr(job, "_api_history", None)
        if cached is None:
            cached = list(job_history(job=job))
            job._api_history = cached
        return cached

    def _others(self, job: Job) -> OtherJobs:
        """The other jobs this job's rows and estimate name, as the caller may see them
        (``context["user"]``): "a job of team X" for the others' (one query)."""
        cached = getattr(job, "_api_others", None)
        if cached is None:
            cached = access.other_jobs(self.context["user"]).learn(
                texts=[job.estimate_basis or ""],
                details=[row.detail for row in self._history(job) if row.detail])
            job._api_others = cached
        return cached


class BatchOut(serializers.Serializer):
    tenant = serializers.CharField()
    count = serializers.IntegerField()
    jobs = JobOut(many=True)


class ArrayOut(BatchOut):
    """A batch's answer, with the array's id: the tasks, by index."""

    array_id = serializers.IntegerField(help_text="The array's id: its task 0's id.")


class ArrayCancelOut(BatchOut):
    """The tasks it cancelled (the others had ended already), by id."""

    array_id = serializers.IntegerField()


class ArrayDetailOut(serializers.Serializer):
    array_id = serializers.IntegerField()
    tenant = serializers.CharField()
    owner = serializers.CharField(allow_null=True)
    name = serializers.CharField()
    count = serializers.IntegerField(help_text="Tasks in the array.")
    max_running = serializers.IntegerField(allow_null=True)
    states = serializers.DictField(child=serializers.IntegerField(),
                                   help_text="State -> how many tasks are in it.")
    depends_on = DependencyOut(many=True)


# ---------------------------------------------------------------- helpers
def _tenant_or_400(name: str, field: str = "tenant", *, user: Any = None) -> Tenant:
    """The tenant named ``name``; with ``user``, also their role in it (``api_role``, None
    if they are not a member), in the same query, read at most every ``API_CACHE_S``
    seconds per process and user (``api.cache``)."""
    if user is None or not user.pk:
        tenant = Tenant.objects.filter(name=name).first()
        if tenant is None:
            raise _no_tenant(name, field)
        return tenant
    fields = Tenant._meta.concrete_fields
    hit = cache.TENANT_ROLES.get((user.pk, name))
    if hit is None:
        with connection.cursor() as cursor:
            cursor.execute(_tenant_role_sql(), [user.pk, name])
            row = cursor.fetchone()
        if row is None:
            raise _no_tenant(name, field)
        hit = (cache.converted(fields, list(row[:-1])), row[-1])
        cache.TENANT_ROLES.put((user.pk, name), hit)
    values, role = hit
    tenant = cache.instance(Tenant, fields, values)
    tenant.api_role = role  # type: ignore[attr-defined]
    return tenant


def _no_tenant(name: str, field: str) -> ValidationError:
    return ValidationError({field: [f"No tenant named {name!r}: GET /api/v1/tenants/ "
                                    "lists them."]})


_TENANT_ROLE_SQL: str | None = None


def _tenant_role_sql() -> str:
    """A tenant by name with the caller's role in it (``api_role``), as fixed SQL: every
    submit asks, and compiling the equivalent queryset cost more than running it."""
    global _TENANT_ROLE_SQL
    if _TENANT_ROLE_SQL is None:
        qn = connection.ops.quote_name
        t, m = Tenant._meta, Membership._meta
        columns = ", ".join(f"t.{qn(f.column)}" for f in t.concrete_fields)
        _TENANT_ROLE_SQL = (
            f"SELECT {columns}, m.{qn(m.get_field('role').column)} AS api_role "
            f"FROM {qn(t.db_table)} t LEFT JOIN {qn(m.db_table)} m "
            f"ON m.{qn(m.get_field('tenant').column)} = t.{qn(t.pk.column)} "
            f"AND m.{qn(m.get_field('user').column)} = %s "
            f"WHERE t.{qn(t.get_field('name').column)} = %s"
        )
    return _TENANT_ROLE_SQL


def _check_may_submit(request: Request, tenant: Tenant) -> None:
    role = getattr(tenant, "api_role", None)
    if role is None and not access.can_submit_to(request.user, tenant):
        raise PermissionDenied(f"You are not a member of tenant {tenant.name!r}: you may "
                               "submit only to your own tenants.")


def _idempotency_key(request: Request, body_key: str) -> str:
    header = request.headers.get(IDEMPOTENCY_HEADER, "")
    if header and not (header.isascii() and header.isprintable()):
        # a server reads header bytes as Latin-1: "ключ" sent as UTF-8 would be kept
        # garbled, and the same key in the body would then make a second job
        raise ValidationError({"idempotency_key": [
            f"The {IDEMPOTENCY_HEADER} header must be printable ASCII: send a key with "
            "other characters in the body's idempotency_key."]})
    if header and body_key and header != body_key:
        raise ValidationError({"idempotency_key": [
            f"The {IDEMPOTENCY_HEADER} header and the body's idempotency_key differ: send one."
        ]})
    key = header or body_key
    if "\x00" in key:
        raise ValidationError({"idempotency_key": ["Must not contain NUL characters."]})
    if len(key) > 128:
        raise ValidationError({"idempotency_key": ["At most 128 characters."]})
    return key


def visible_jobs(request: Request) -> QuerySet[Job]:
    return Job.objects.filter(access.visible_jobs(request.user))


def job_for(request: Request, pk: int) -> Job:
    """The job, or 404 if there is none; 403 (not 404) if it is someone else's."""
    job = Job.objects.select_related("tenant", "owner").filter(pk=pk).first()
    if job is None:  # (Django's words were "No Job matches the given query.")
        raise NotFound(f"No job {pk}.")
    if not access.can_see_job(request.user, job):
        # whose it is stays unsaid: the id alone must not tell a job's team
        raise PermissionDenied(f"Job {pk} is not yours to see: researchers see their own "
                               "jobs, leads every job of the teams they lead.")
    return job


# ---------------------------------------------------------------- views
class JobListCreate(generics.GenericAPIView):
    permission_classes = [access.IsUser]
    serializer_class = JobOut
    pagination_class = IdCursorPagination
    filterset_class = JobFilter

    def get_queryset(self) -> QuerySet[Job]:
        if getattr(self, "swagger_fake_view", False):
            return Job.objects.none()  # schema generation: no user
        return visible_jobs(self.request).select_related("tenant", "owner")

    @extend_schema(
        operation_id="jobs_list",
        summary="List jobs you may see, newest first",
        description="Researchers see their own jobs, leads every job of their tenants, "
                    "operators all. Filters combine; asking for a tenant you are not a "
                    "member of is refused (403).",
        responses={200: JobOut(many=True)},
    )
    def get(self, request: Request) -> Response:
        # the parameters first (a typo, one given twice), then whose jobs they name: the
        # 403 below reads one value, and ?tenant=mine&tenant=theirs was a 403 where
        # ?tenant=theirs&tenant=mine listed the last one's jobs. The filter set checked here
        # filters the list below (filter_queryset would build and check it again)
        params = self.filterset_class(request.query_params, queryset=self.get_queryset(),
                                      request=request)
        if not params.is_valid():
            raise translate_validation(params.errors)
        tenant = request.query_params.get("tenant")
        if tenant:
            found = Tenant.objects.filter(name=tenant).first()
            if found is None:
                # a typo must not read as "no jobs" (teams are no secret: GET /tenants/)
                raise ValidationError({"tenant": [
                    f"No tenant named {tenant!r}: see GET /api/v1/tenants/."]})
            if not access.can_list_tenant_jobs(request.user, found):
                raise PermissionDenied(f"You are not a member of tenant {tenant!r}.")
        array = request.query_params.get("array", "")
        if array.isdigit() and int(array) <= ID_MAX:
            # an array not yours is a 403, one that does not exist a 400 naming the
            # parameter, as for a tenant (an empty list read as "no tasks": 2026-12-07);
            # a malformed one is the filter's own 400
            first = Job.objects.filter(pk=int(array), array_id=int(array)).first()
            if first is None:
                raise ValidationError({"array": [f"No job array {int(array)}: an array's "
                                                 "id is its task 0's id."]})
            if not access.can_see_job(request.user, first):
                raise PermissionDenied(f"Job array {int(array)} is not yours to see.")
        owner = request.query_params.get("owner")
        if owner and not access.is_operator(request.user) and owner != request.user.username \
                and not access.leads_any(request.user):
            raise PermissionDenied("Researchers see only their own jobs: leave owner out or "
                                   "use your own username.")
        page = self.paginate_queryset(params.qs)
        return self.get_paginated_response([job_summary(job) for job in page])

    @extend_schema(
        operation_id="jobs_submit",
        summary="Submit a job",
        description="Creates the job and admits it to its tenant's queue (SUBMITTED -> "
                    "QUEUED) in one transaction, and returns its summary (Location: its "
                    "detail). A job that can never run (larger than the "
                    "cluster, or than the tenant's guarantee plus borrow limit; an unknown "
                    "GPU type) is refused with 400 and nothing is written. With an "
                    "idempotency key, a retry returns the first job with 200.",
        parameters=[IDEMPOTENCY_PARAMETER],
        request=SubmitIn,
        responses={201: JobOut, 200: OpenApiResponse(JobOut, "A retry: the job the same "
                   "idempotency key made before.")},
    )
    def post(self, request: Request) -> Response:
        data = validated(SubmitIn, request.data)
        tenant = _tenant_or_400(data["tenant"], user=request.user)
        _check_may_submit(request, tenant)
        spec = full_spec({**data, "idempotency_key": _idempotency_key(
            request, data["idempotency_key"])})
        refusals = Refusals(tenant, request.user.pk)
        errors = spec_errors(spec, refusals)
        if errors:
            replay = _replayed(tenant, request.user, spec)  # a retry of one admitted: 200
            if replay is not None:
                return _replay_response(replay)
            raise ValidationError({field: [message] for field, message in errors.items()})
        # No look-up of the key itself first (a query per submit): the service finds a key
        # taken when it inserts, and returns that job. A batch's or an array's use of it
        # (their jobs are keyed <key>#<i>) is looked up, for keyed submits only.
        _key_free_of_many(tenant, request.user, spec["idempotency_key"])
        depends_on = data.get("depends_on") or []
        job = job_submit(tenant=tenant, owner=request.user, actor=Actor.USER,
                         capacity=refusals.shape, depends_on=depends_on,
                         sees=_sees(request), **spec)
        if submit_replayed(job):
            # 409 if it asked for another
            replay = _replayed(tenant, request.user, spec, depends_on=depends_on)
            assert replay is not None
            return _replay_response(replay)
        job.tenant, job.owner = tenant, request.user
        # the summary, not the detail: the detail's queue position costs COUNTs over the
        # whole queue, which a pipeline submitting thousands of jobs should not pay for
        return Response(job_summary(job), status=status.HTTP_201_CREATED,
                        headers={"Location": f"/api/v1/jobs/{job.pk}/"})


def _replay_response(job: Job) -> Response:
    return Response(job_summary(job), status=status.HTTP_200_OK,
                    headers={"Idempotent-Replayed": "true",
                             "Location": f"/api/v1/jobs/{job.pk}/"})


def _sees(request: Request) -> Any:
    """The caller's view of other jobs (``access.sees``), for the services' dependency
    check: the roles read once per request."""
    user = request.user
    return lambda tenant_id, owner_id: access.sees(user, tenant_id, owner_id)


def _replayed(tenant: Tenant, owner: Any, spec: dict[str, Any],
              depends_on: list[dict[str, Any]] | None = None) -> Job | None:
    """The job an earlier request of ``owner`` with this key made (None: no key, or none
    yet; keys are per owner). A key reused for a different spec is a client bug: 409,
    not a silent wrong answer."""
    key = spec["idempotency_key"]
    if not key:
        return None
    job = Job.objects.select_related("tenant", "owner").filter(
        tenant=tenant, owner=owner, idempotency_key=key).first()
    if job is None:
        return None
    differ = spec_differences(job, spec)
    if not same_dependencies(job, depends_on):
        differ.append("depends_on")
    if differ:
        raise ApiConflict(
            f"Idempotency key {key!r} was used for job {job.pk} with a different spec "
            f"({_differ_words(differ)}): use a new key for a new job.",
            code="idempotency_key_reused", field="idempotency_key")
    return job


def _differ_words(fields: list[str]) -> str:
    """``gpus and max_runtime_s differ``: what a reused key's request changed."""
    shown = fields[:5] + ([f"{len(fields) - 5} more"] if len(fields) > 5 else [])
    return f"{join_words(shown)} {'differ' if len(fields) > 1 else 'differs'}"


def _many_jobs_request(request: Request, serializer: type[serializers.Serializer],
                       what: str) -> tuple[dict[str, Any], Tenant, str]:
    """A batch's or an array's body checked, its tenant one the caller may submit to, and
    its idempotency key: at most 123 characters, since job ``i`` gets ``<key>#<i>``."""
    data = validated(serializer, request.data)
    tenant = _tenant_or_400(data["tenant"], user=request.user)
    _check_may_submit(request, tenant)
    key = _idempotency_key(request, data["idempotency_key"])
    if len(key) > 123:
        raise ValidationError({"idempotency_key": [f"At most 123 characters for {what}."]})
    _key_free_of_single(tenant, request.user, key, what)
    return data, tenant, key


def _key_free_of_many(tenant: Tenant, owner: Any, key: str) -> None:
    """One key, one request: 409 if a batch or an array of ``owner`` took ``key`` (its
    jobs are keyed ``<key>#<i>``, so the single job's own key is free and a retry of the
    wrong kind would make a new job)."""
    jobs = batch_jobs_with_key(tenant, key, owner=owner) if key else None
    if jobs is None:
        return
    what = (f"array {jobs[0].array_id} ({len(jobs)} tasks)" if jobs[0].array_id is not None
            else f"a batch of {len(jobs)} jobs (job {jobs[0].pk} first)")
    raise ApiConflict(f"Idempotency key {key!r} was used for {what}: use a new key for a "
                      "new job.", code="idempotency_key_reused", field="idempotency_key")


def _key_free_of_single(tenant: Tenant, owner: Any, key: str, what: str) -> None:
    """The other way round: 409 if a single submit of ``owner`` took ``key`` itself. A
    job of a batch or an array keyed ``key`` (``sweep#1`` of the batch ``sweep``) is not
    one: the batch ``sweep#1`` stays a batch of its own (docs/api.md)."""
    if not key:
        return
    job = (Job.objects.filter(tenant=tenant, owner=owner, idempotency_key=key)
           .only("pk", "array_id").first())
    if job is None or job.array_id is not None:
        return
    head, sep, tail = key.rpartition("#")
    if sep and head and tail.isdigit() and Job.objects.filter(
            tenant=tenant, owner=owner, idempotency_key=f"{head}#0").exists():
        return  # (a batch's job: its first job, <head>#0, is there too)
    raise ApiConflict(f"Idempotency key {key!r} was used for job {job.pk}: use a new key "
                      f"for {what}.", code="idempotency_key_reused", field="idempotency_key")


class JobBatchSubmit(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="jobs_submit_batch",
        summary=f"Submit up to {MAX_BATCH} jobs at once, all or nothing",
        description="One transaction: every job is admitted, or (any spec bad) none is and "
                    "the errors name jobs[i].field. With an idempotency key, a retry "
                    "returns the jobs the first request made (200).",
        parameters=[IDEMPOTENCY_PARAMETER],
        request=BatchIn,
        responses={201: BatchOut, 200: OpenApiResponse(BatchOut, "A retry.")},
    )
    def post(self, request: Request) -> Response:
        data, tenant, key = _many_jobs_request(request, BatchIn, "a batch")
        specs = [full_spec(s) for s in data["jobs"]]
        refusals = Refusals(tenant, request.user.pk)
        errors: dict[str, list[str]] = {}
        for i, spec in enumerate(specs):
            for field, message in spec_errors(spec, refusals).items():
                errors[f"jobs[{i}].{field}"] = [message]
        if errors:
            replay = _batch_replayed(tenant, request.user, key, specs)  # a retry of one
            if replay is not None:
                return _batch_replay_response(tenant, replay)
            raise ValidationError(errors)
        # No look-up of the key first: the service finds the keys taken when it inserts.
        # (depends_on is the services' to check: existence, visibility, cycles, indices)
        jobs = jobs_submit_batch(tenant=tenant, owner=request.user,
                                 specs=[{**{k: v for k, v in spec.items()
                                            if k != "idempotency_key"},
                                         **({"depends_on": raw["depends_on"]}
                                            if raw.get("depends_on") else {})}
                                        for spec, raw in zip(specs, data["jobs"], strict=True)],
                                 idempotency_key=key, capacity=refusals.shape,
                                 sees=_sees(request))
        if jobs and submit_replayed(jobs[0]):
            replay = _batch_replayed(tenant, request.user, key, specs)  # 409: other jobs
            assert replay is not None
            return _batch_replay_response(tenant, replay)
        for job in jobs:  # the response names them without a query per job
            job.tenant = tenant
        out = {"tenant": tenant.name, "count": len(jobs),
               "jobs": [job_summary(job) for job in jobs]}
        return Response(out, status=status.HTTP_201_CREATED)


def _batch_replay_response(tenant: Tenant, jobs: list[Job]) -> Response:
    out = {"tenant": tenant.name, "count": len(jobs), "jobs": [job_summary(j) for j in jobs]}
    return Response(out, status=status.HTTP_200_OK, headers={"Idempotent-Replayed": "true"})


def _batch_replayed(tenant: Tenant, owner: Any, key: str, specs: list[dict[str, Any]]
                    ) -> list[Job] | None:
    """The jobs an earlier batch of ``owner`` with this key made (jobs_submit_batch keys
    job i "<key>#<i>"), or None. 409 if that batch asked for something else."""
    if not key:
        return None
    jobs = batch_jobs_with_key(tenant, key, Job.objects.select_related("tenant", "owner"),
                               owner=owner)
    if jobs is None:
        return None
    mine = [{**spec, "idempotency_key": f"{key}#{i}"} for i, spec in enumerate(specs)]
    by_key = {job.idempotency_key: job for job in jobs}
    if jobs[0].array_id is not None:
        # the same jobs as an array's tasks would run max_running at a time: another
        # request (found by trying the product, 2026-12-07: answered 200 with the tasks)
        raise ApiConflict(
            f"Idempotency key {key!r} was used for array {jobs[0].array_id} ({len(jobs)} "
            "tasks): use a new key for a new batch.", code="idempotency_key_reused",
            field="idempotency_key")
    # the number of jobs, else the first job that differs, by its fields
    differ = [] if len(jobs) == len(mine) else [f"the number of jobs ({len(mine)})"]
    for i, spec in enumerate(mine if not differ else ()):
        job = by_key.get(spec["idempotency_key"])
        differ = ([f"jobs[{i}]"] if job is None else
                  [f"jobs[{i}].{name}" for name in spec_differences(job, spec)])
        if differ:
            break
    if differ:
        raise ApiConflict(
            f"Idempotency key {key!r} was used for a different batch ({len(jobs)} jobs; "
            f"{_differ_words(differ)}): use a new key for a new batch.",
            code="idempotency_key_reused", field="idempotency_key")
    return [by_key[spec["idempotency_key"]] for spec in mine]


class JobDetail(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="jobs_retrieve",
        summary="A job: state, pending reason, queue position, estimate, allocation, history",
        responses={200: JobDetailOut},
    )
    def get(self, request: Request, pk: int) -> Response:
        job = job_for(request, pk)
        return Response(JobDetailOut(job, context={"user": request.user}).data)

    def http_method_not_allowed(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        # say what to do instead: DRF's 'Method "DELETE" not allowed.' did not (a
        # pipeline author's session, 2026-12-07)
        instead = (f"cancel a job with POST /api/v1/jobs/{kwargs.get('pk')}/cancel/"
                   if request.method == "DELETE" else
                   "a submitted job cannot be changed: cancel it and submit it again")
        raise MethodNotAllowed(request.method, f'Method "{request.method}" not allowed: '
                                               f"{instead}.")


class CancelIn(KnownFieldsOnly):
    why = StrictCharField(required=False, allow_blank=True, max_length=500, default="",
                                help_text="Recorded in the log.")


class JobCancel(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="jobs_cancel",
        summary="Cancel a job that is not final",
        description="The owner, the tenant's leads and operators may. A final job "
                    "(COMPLETED, FAILED, CANCELLED) cannot be cancelled: 409.",
        request=CancelIn,
        responses={200: JobDetailOut},
    )
    def post(self, request: Request, pk: int) -> Response:
        job = job_for(request, pk)
        data = CancelIn(data=request.data)
        data.is_valid(raise_exception=True)
        job_cancel(
            job_id=job.pk,
            actor=Actor.OPERATOR if access.is_operator(request.user) else Actor.USER,
            actor_name=request.user.get_username(),
            why=data.validated_data["why"],
        )
        job.refresh_from_db()
        return Response(JobDetailOut(job, context={"user": request.user}).data)



# ---------------------------------------------------------------- job arrays
class ArraySubmit(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="arrays_submit",
        summary=f"Submit a job array: up to {MAX_ARRAY_TASKS:,} tasks of one spec",
        description="One transaction, as a batch: array.count tasks (indices 0 to count - "
                    "1) sharing array_id (the id of task 0), each named <array_id>_<index>; "
                    "at most array.max_running run at once (the others wait, pending reason "
                    "ArrayLimit). The node agent gives each task ARRAY_INDEX and "
                    "ARRAY_COUNT. The answer is a batch's, with array_id. With an "
                    "idempotency key, a retry returns the tasks the first request made "
                    "(200).",
        parameters=[IDEMPOTENCY_PARAMETER],
        request=ArraySubmitIn,
        responses={201: ArrayOut, 200: OpenApiResponse(ArrayOut, "A retry.")},
    )
    def post(self, request: Request) -> Response:
        data, tenant, key = _many_jobs_request(request, ArraySubmitIn, "an array")
        spec = full_spec({**data, "idempotency_key": ""})
        array = data["array"]
        refusals = Refusals(tenant, request.user.pk)
        errors = spec_errors(spec, refusals)
        if errors:
            replay = _array_replayed(tenant, request.user, key, spec, array)
            if replay is not None:
                return _array_response(tenant, replay, status.HTTP_200_OK)
            raise ValidationError({field: [message] for field, message in errors.items()})
        fields = {k: v for k, v in spec.items() if k not in ("idempotency_key", "name", "gpus")}
        jobs = array_submit(tenant=tenant, owner=request.user, name=spec["name"],
                            gpus=spec["gpus"], count=array["count"],
                            max_running=array.get("max_running"),
                            depends_on=data.get("depends_on") or [], idempotency_key=key,
                            capacity=refusals.shape, sees=_sees(request), **fields)
        if submit_replayed(jobs[0]):
            replay = _array_replayed(tenant, request.user, key, spec, array)  # 409: another
            assert replay is not None
            return _array_response(tenant, replay, status.HTTP_200_OK)
        for job in jobs:  # the response names them without a query per job
            job.tenant = tenant
        return _array_response(tenant, jobs, status.HTTP_201_CREATED)


def _array_response(tenant: Tenant, jobs: list[Job], code: int) -> Response:
    out = {"tenant": tenant.name, "array_id": jobs[0].array_id, "count": len(jobs),
           "jobs": [job_summary(job) for job in jobs]}
    headers = {"Idempotent-Replayed": "true"} if code == status.HTTP_200_OK else {}
    headers["Location"] = f"/api/v1/arrays/{jobs[0].array_id}/"
    return Response(out, status=code, headers=headers)


def _array_replayed(tenant: Tenant, owner: Any, key: str, spec: dict[str, Any],
                    array: dict[str, Any]) -> list[Job] | None:
    """The tasks an earlier array of ``owner`` with this key made (task i has the key
    "<key>#<i>"), or None. 409 if that request asked for something else."""
    if not key:
        return None
    jobs = batch_jobs_with_key(tenant, key, Job.objects.select_related("tenant", "owner"),
                               owner=owner)
    if jobs is None:
        return None
    differ = array_differences(jobs, spec, array["count"], array.get("max_running"))
    if differ:
        what = (f"array {jobs[0].array_id} ({len(jobs)} tasks; {_differ_words(differ)})"
                if jobs[0].array_id is not None else f"a batch of {len(jobs)} jobs")
        raise ApiConflict(
            f"Idempotency key {key!r} was used for {what}: use a new key for a new array.",
            code="idempotency_key_reused", field="idempotency_key")
    return sorted(jobs, key=lambda job: job.array_index or 0)


def array_for(request: Request, array_id: int) -> Job:
    """Task 0 of array ``array_id`` (its id is the array's): 404 if there is no such
    array, 403 if it is not the caller's to see (every task has the same team and
    owner)."""
    job = job_for(request, array_id)
    if job.array_id != job.pk:
        raise NotFound(f"Job {array_id} is not a job array (an array's id is its task 0's "
                       "id).")
    return job


class ArrayDetail(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="arrays_retrieve",
        summary="A job array: its size, cap and how many tasks are in each state",
        description="The tasks themselves: GET /api/v1/jobs/?array=<id>.",
        responses={200: ArrayDetailOut},
    )
    def get(self, request: Request, pk: int) -> Response:
        first = array_for(request, pk)
        states = dict(Job.objects.filter(array_id=pk).order_by().values("state")
                      .annotate(n=Count("id")).values_list("state", "n"))
        return Response({
            "array_id": pk, "tenant": first.tenant.name,
            "owner": first.owner.username if first.owner is not None else None,
            "name": first.name, "count": first.array_count,
            "max_running": first.array_max_running,
            "states": {state: states[state] for state in sorted(states)},
            "depends_on": dependencies_out(first),
        })


class ArrayCancel(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(
        operation_id="arrays_cancel",
        summary="Cancel every task of a job array that has not ended",
        description="One transaction: every task not final is cancelled (each logged as a "
                    "job's cancel is), or none. Who may cancel one task may cancel the "
                    "array. Every task final already: 409. One task alone: "
                    "POST /api/v1/jobs/<id>/cancel/.",
        request=CancelIn,
        responses={200: ArrayCancelOut},
    )
    def post(self, request: Request, pk: int) -> Response:
        first = array_for(request, pk)
        data = CancelIn(data=request.data)
        data.is_valid(raise_exception=True)
        rows = array_cancel(
            array_id=pk,
            actor=Actor.OPERATOR if access.is_operator(request.user) else Actor.USER,
            actor_name=request.user.get_username(),
            why=data.validated_data["why"],
        )
        jobs = list(Job.objects.filter(pk__in=[row.job_id for row in rows]).order_by("pk"))
        for job in jobs:
            job.tenant, job.owner = first.tenant, first.owner
        return Response({"tenant": first.tenant.name, "array_id": pk, "count": len(jobs),
                         "jobs": [job_summary(job) for job in jobs]})
