"""Job services: submit (one job, or a batch), and cancel. All go through
``services.transitions``."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Tenant, Transition

from .copy_insert import new_instances
from .errors import Invalid
from .transitions import admit_new_job, admit_new_jobs, job_transition, now_s


def job_submit(
    *,
    tenant: Tenant,
    name: str,
    gpus: int,
    owner: AbstractBaseUser | None = None,
    command: str = "",
    gpus_per_node: int | None = None,
    gpu_type: str = "",
    priority: int = 0,
    checkpointable: bool = False,
    checkpoint_interval_s: int | None = None,
    checkpoint_time_s: int | None = None,
    restart_s: int = 0,
    max_runtime_s: int | None = None,
    min_gpus: int | None = None,
    preemptible: bool = False,
    interactive: bool = False,
    idempotency_key: str = "",
    at: datetime | None = None,
    actor: Actor = Actor.USER,
    capacity: ClusterShape | None = None,
) -> Job:
    """Create a job and admit it: (none) -> SUBMITTED -> QUEUED, all in one transaction.

    A job that can never run (more GPUs, or GPUs per node, than the cluster has of its
    type; or more than its team's guarantee plus borrow limit) goes SUBMITTED -> FAILED
    with reason NeverFits and the arithmetic in ``detail["why"]``. Invalid input raises
    ValidationError keyed by the field. The same owner submitting again with the same
    idempotency key (keys are per tenant and owner) gets the first job and nothing is
    written. ``capacity``: the cluster's
    shape if the caller read it already (the API checks the same rule first).
    """
    spec: dict[str, Any] = {
        "name": name,
        "command": command,
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "gpu_type": gpu_type or "",
        "priority": priority,
        "checkpointable": checkpointable,
        "checkpoint_interval_s": checkpoint_interval_s,
        "checkpoint_time_s": checkpoint_time_s,
        "restart_s": restart_s,
        "max_runtime_s": max_runtime_s,
        "min_gpus": min_gpus,
        "preemptible": preemptible,
        "interactive": interactive,
        "idempotency_key": idempotency_key or "",
    }
    validate_job_spec(spec)
    problem = over_team_max_runtime(spec, tenant)
    if problem:
        raise Invalid(problem, field="max_runtime_s", code="over_team_max_runtime")
    at = at or now_s()
    actor_name = owner.get_username() if owner is not None else ""
    key = spec["idempotency_key"]
    (job,), (refusal,) = _new_jobs(tenant, owner, [spec], at=at,
                                   fits=capacity or ClusterShape())
    try:
        # no look-up first: the unique key refuses a second job (IntegrityError below);
        # a transaction of its own (one round trip on PostgreSQL)
        return admit_new_job(job, refusal=refusal, actor=actor, at=at, actor_name=actor_name)
    except IntegrityError:
        # The key was used before (a retry), or a concurrent submission with it committed
        # first: return that job; nothing of this one was written.
        existing = _job_with_key(tenant, owner, key)
        if existing is None:
            raise
        existing.replayed = True  # type: ignore[attr-defined]  # read by submit_replayed
        return existing


#: The most jobs one batch may submit (one transaction holds the log's append lock).
MAX_BATCH = 1000

#: What a batch spec may set: job_submit's job fields.
BATCH_FIELDS = frozenset(
    {
        "name", "command", "gpus", "gpus_per_node", "gpu_type", "priority", "checkpointable",
        "checkpoint_interval_s", "checkpoint_time_s", "restart_s", "max_runtime_s",
        "min_gpus", "preemptible", "interactive",
    }
)
_SPEC_DEFAULTS: dict[str, Any] = {
    "command": "", "gpus_per_node": None, "gpu_type": "", "priority": 0,
    "checkpointable": False, "checkpoint_interval_s": None, "checkpoint_time_s": None,
    "restart_s": 0, "max_runtime_s": None, "min_gpus": None, "preemptible": False,
    "interactive": False,
}


def jobs_submit_batch(
    *,
    tenant: Tenant,
    owner: AbstractBaseUser | None,
    specs: list[dict[str, Any]],
    idempotency_key: str = "",
    at: datetime | None = None,
    actor: Actor = Actor.USER,
    capacity: ClusterShape | None = None,
) -> list[Job]:
    """Submit up to :data:`MAX_BATCH` jobs all or nothing, in one transaction, in order.

    Every spec is validated first; any bad field raises ``Invalid`` naming it
    ``jobs[i].field`` (``errors`` holds them all) and nothing is written. With an
    ``idempotency_key`` the jobs get the keys ``<key>#0``, ``<key>#1``, ...: submitting the
    same batch again returns the first batch's jobs and writes nothing.
    """
    if not isinstance(specs, list) or not specs:
        raise Invalid("A batch needs at least one job.", field="jobs", code="empty")
    if len(specs) > MAX_BATCH:
        raise Invalid(f"At most {MAX_BATCH} jobs per batch, got {len(specs)}.",
                      field="jobs", code="too_many")
    if len(idempotency_key) > 128 - len(f"#{MAX_BATCH}"):
        raise Invalid("At most 123 characters.", field="idempotency_key")
    prepared: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    for i, raw in enumerate(specs):
        spec, problems = _batch_spec(raw)
        if spec is not None:
            spec["idempotency_key"] = f"{idempotency_key}#{i}" if idempotency_key else ""
            try:
                validate_job_spec(spec)
            except ValidationError as error:
                problems.update({f: " ".join(m) for f, m in error.message_dict.items()})
            else:
                problem = over_team_max_runtime(spec, tenant)
                if problem:
                    problems["max_runtime_s"] = problem
        for name, message in problems.items():
            errors[f"jobs[{i}].{name}"] = message
        if spec is not None:
            prepared.append(spec)
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, errors=errors)
    at = at or now_s()
    actor_name = owner.get_username() if owner is not None else ""
    jobs, refusals = _new_jobs(tenant, owner, prepared, at=at, fits=capacity or ClusterShape())
    try:
        # no look-up first: the unique keys refuse a second batch (IntegrityError below)
        with transaction.atomic(durable=True):
            return admit_new_jobs(jobs, refusals=refusals, actor=actor, at=at,
                                  actor_name=actor_name)
    except IntegrityError:
        existing = batch_jobs_with_key(tenant, idempotency_key, owner=owner)
        if existing is None:
            raise
        for job in existing:
            job.replayed = True  # type: ignore[attr-defined]  # read by submit_replayed
        return existing


def submit_replayed(job: Job) -> bool:
    """Did ``job_submit`` / ``jobs_submit_batch`` return ``job`` from an earlier submission
    with the same idempotency key (and write nothing)?"""
    return bool(getattr(job, "replayed", False))


def _batch_spec(raw: object) -> tuple[dict[str, Any] | None, dict[str, str]]:
    if not isinstance(raw, dict):
        return None, {"spec": "Each job is an object of job fields."}
    unknown = sorted(set(raw) - BATCH_FIELDS)
    if unknown:
        return None, {name: "Not a job field." for name in unknown}
    if "name" not in raw or "gpus" not in raw:
        return None, {
            name: "Required." for name in ("name", "gpus") if name not in raw
        }
    spec = {**_SPEC_DEFAULTS, **raw}
    spec["gpu_type"] = spec["gpu_type"] or ""
    problems: dict[str, str] = {}
    for name in ("name", "command", "gpu_type"):
        if not isinstance(spec[name], str):
            problems[name] = "Must be text."
    for name in ("checkpointable", "preemptible", "interactive"):
        if not isinstance(spec[name], bool):
            problems[name] = "Must be true or false."
    if isinstance(spec["priority"], bool) or not isinstance(spec["priority"], int):
        problems["priority"] = "Must be an integer."
    if problems:
        return None, problems
    return spec, {}


def batch_jobs_with_key(tenant: Tenant, key: str, jobs: QuerySet[Job] | None = None, *,
                        owner: AbstractBaseUser | None) -> list[Job] | None:
    """The jobs a batch ``owner`` submitted with ``key`` made (their keys ``<key>#<i>``),
    in order; None if there are none. The prefix alone would also match another batch
    whose key starts with ``<key>#`` (``sweep#1`` makes ``sweep#1#0``): only digits may
    follow. Keys are per owner: a teammate's batch with the same key is not this one."""
    if not key:
        return None
    prefix = f"{key}#"
    found = (jobs if jobs is not None else Job.objects).filter(
        tenant=tenant, owner=owner, idempotency_key__startswith=prefix).order_by("pk")
    mine = [job for job in found if job.idempotency_key[len(prefix):].isdigit()]
    return mine or None


def _new_jobs(
    tenant: Tenant,
    owner: AbstractBaseUser | None,
    specs: list[dict[str, Any]],
    *,
    at: datetime,
    fits: ClusterShape,
) -> tuple[list[Job], list[str]]:
    """Unsaved jobs for validated specs, and why each can never run ('' if it may): for
    ``transitions.admit_new_job(s)``, which insert them in a few statements whatever
    their number."""
    owner_id = owner.pk if owner is not None else None
    jobs = new_instances(Job, ({"tenant_id": tenant.pk, "owner_id": owner_id,
                                "state": JobState.SUBMITTED.value, "submitted_at": at,
                                **spec, **team_default(spec, tenant)}
                               for spec in specs))
    tenant_field, owner_field = Job._meta.get_field("tenant"), Job._meta.get_field("owner")
    refusals: dict[tuple, str] = {}  # a sweep has one or two shapes
    out = []
    for job in jobs:
        # the caller reads them: no query per job for either (the ids are set already)
        tenant_field.set_cached_value(job, tenant)
        owner_field.set_cached_value(job, owner)
        # (one owner for the whole call: the per-user cap is the same for every job)
        shape = (job.gpus, job.min_gpus, job.gpus_per_node, job.gpu_type)
        if shape not in refusals:
            refusals[shape] = never_fits(job, tenant, capacity=fits)
        out.append(refusals[shape])
    return jobs, out


def team_default(spec: dict[str, Any], tenant: Tenant) -> dict[str, Any]:
    """The fields a job that declares no limit gets from its team's ``default_runtime_s``
    (its limit, and a note that it came from there): with a limit it can backfill and be
    planned. Empty when it declares one, or the team has no default. (The core gives the
    same default to what it admits: the simulator's memory engine relies on it.)"""
    if spec.get("max_runtime_s") is None and tenant.default_runtime_s is not None:
        return {"max_runtime_s": tenant.default_runtime_s, "runtime_from_team_default": True}
    return {}


def over_team_max_runtime(spec: dict[str, Any], tenant: Tenant) -> str:
    """Why ``spec``'s declared limit is refused ('' if it is not): longer than its team's
    ``max_runtime_s``. A job that declares none gets the team's default, which is never
    longer (``services.cluster`` checks it)."""
    asked, longest = spec.get("max_runtime_s"), tenant.max_runtime_s
    if longest is None or not isinstance(asked, int) or asked <= longest:
        return ""
    return (f"Team {tenant.name} allows a time limit of at most {longest:,} s "
            f"(max_runtime_s); this job asks for {asked:,} s.")


def _job_with_key(tenant: Tenant, owner: AbstractBaseUser | None, key: str) -> Job | None:
    """The job ``owner`` submitted to ``tenant`` with ``key`` (keys are per owner)."""
    if not key:
        return None
    return Job.objects.filter(tenant=tenant, owner=owner, idempotency_key=key).first()


def job_cancel(
    *,
    job_id: int,
    actor: Actor = Actor.USER,
    actor_name: str = "",
    at: datetime | None = None,
    why: str = "",
) -> Transition:
    """Cancel a job that is not final (its GPUs go back to the nodes)."""
    return job_transition(
        job_id=job_id,
        to_state=JobState.CANCELLED,
        reason=Reason.CANCELLED,
        actor=actor,
        actor_name=actor_name,
        at=at,
        detail={"why": why} if why else None,
    )


#: The longest duration a job spec may give: a year. A larger value is a unit mistake
#: (milliseconds for seconds), not a plan.
MAX_DURATION_S = 366 * 24 * 3600

#: The spec's durations, in seconds.
DURATION_FIELDS = ("checkpoint_interval_s", "checkpoint_time_s", "max_runtime_s", "restart_s")


def validate_job_spec(spec: dict[str, Any]) -> None:
    """Raise ValidationError naming each bad field. Durations are whole seconds, at most
    :data:`MAX_DURATION_S` (366 days)."""
    errors: dict[str, str] = {}
    gpus = spec["gpus"]
    if not spec["name"] or len(spec["name"]) > 200:
        errors["name"] = "Give the job a name of 1 to 200 characters."
    if not isinstance(gpus, int) or gpus < 1:
        errors["gpus"] = "A job needs at least 1 GPU."
    per_node = spec["gpus_per_node"]
    if per_node is not None:
        if not isinstance(per_node, int) or per_node < 1:
            errors["gpus_per_node"] = "GPUs per node must be at least 1."
        elif "gpus" not in errors and gpus % per_node:
            errors["gpus_per_node"] = f"{gpus} GPUs cannot be split into nodes of {per_node}."
    min_gpus = spec["min_gpus"]
    if min_gpus is not None and (
        not isinstance(min_gpus, int) or min_gpus < 1 or ("gpus" not in errors and min_gpus > gpus)
    ):
        errors["min_gpus"] = "The elastic minimum must be between 1 and the job's GPUs."
    for field in ("checkpoint_interval_s", "checkpoint_time_s", "max_runtime_s"):
        value = spec[field]
        if value is not None and (not isinstance(value, int) or value < 1):
            errors[field] = "Must be a positive number of seconds, or empty."
    if not isinstance(spec["restart_s"], int) or spec["restart_s"] < 0:
        errors["restart_s"] = "Must be zero or a positive number of seconds."
    for field in DURATION_FIELDS:
        value = spec[field]
        if field not in errors and isinstance(value, int) and value > MAX_DURATION_S:
            errors[field] = (f"At most {MAX_DURATION_S} seconds (366 days): durations are in "
                             "seconds.")
    if len(spec["idempotency_key"]) > 128:
        errors["idempotency_key"] = "At most 128 characters."
    if errors:
        raise ValidationError(errors)


class ClusterShape:
    """The cluster's GPU types and node sizes, read in one query when first needed (a
    batch, and the API's checks before it, read them once).

    ``max_age_s`` > 0: a shape this process read less than that many seconds ago will
    do (the API passes ``API_CACHE_S``: every submit asks, nodes change rarely). A node
    saved in this process (registered, its GPUs changed) forgets it at once; a node
    registered by another process is counted within ``max_age_s``."""

    def __init__(self, *, max_age_s: float = 0.0) -> None:
        self._by_type: dict[str, list[int]] | None = None
        self._max_age_s = max_age_s

    def _load(self) -> dict[str, list[int]]:
        global _SHAPE_CACHE
        if self._by_type is None:
            cached = _SHAPE_CACHE
            if self._max_age_s > 0 and cached is not None and shape_clock() < cached[0]:
                self._by_type = cached[1]
                return self._by_type
            by_type: dict[str, list[int]] = {"": []}
            for gpu_type, count in Node.objects.order_by().values_list("gpu_type", "gpu_count"):
                by_type[""].append(count)
                if gpu_type:
                    by_type.setdefault(gpu_type, []).append(count)
            self._by_type = {t: sorted(sizes) for t, sizes in by_type.items()}
            if self._max_age_s > 0:
                _SHAPE_CACHE = (shape_clock() + self._max_age_s, self._by_type)
        return self._by_type

    def gpu_types(self) -> list[str]:
        """The cluster's GPU types (not the empty "any type"), sorted."""
        return sorted(t for t in self._load() if t)

    def sizes(self, gpu_type: str) -> list[int]:
        """GPUs of each node of ``gpu_type`` ("" any type), sorted."""
        return self._load().get(gpu_type, [])


#: The shape the last ``ClusterShape(max_age_s=...)`` read, with its expiry
#: (``shape_clock()``), shared by the threads of this process; never mutated.
_SHAPE_CACHE: tuple[float, dict[str, list[int]]] | None = None
#: The clock of that expiry (tests move it).
shape_clock: Callable[[], float] = time.monotonic
#: Node fields saved that leave its shape as it was.
_NOT_SHAPE = frozenset({"health", "last_heartbeat", "free_gpus"})


def forget_cluster_shape() -> None:
    """Drop the cached shape: the next ``ClusterShape(max_age_s=...)`` reads it."""
    global _SHAPE_CACHE
    _SHAPE_CACHE = None


@receiver(post_save, sender=Node, dispatch_uid="scheduler_app.services.jobs.shape_save")
@receiver(post_delete, sender=Node, dispatch_uid="scheduler_app.services.jobs.shape_delete")
def _node_changed(update_fields: Any = None, **kwargs: Any) -> None:
    if update_fields is not None and set(update_fields) <= _NOT_SHAPE:
        return
    forget_cluster_shape()


def never_fits(job: Job, tenant: Tenant, *, capacity: ClusterShape | None = None) -> str:
    """Why ``job`` can never run, or "" if it might. Counts every node whatever its health
    (a down node may come back). Elastic jobs need only their minimum. The same rules as
    the core's admission (``Scheduler._never_fits``), so the two agree on every job."""
    need = job.min_gpus or job.gpus
    sizes = (capacity or ClusterShape()).sizes(job.gpu_type)
    total, largest = sum(sizes), (sizes[-1] if sizes else 0)
    kind = f"{job.gpu_type} GPUs" if job.gpu_type else "GPUs"
    if need > total:
        return f"needs {need} {kind}; the cluster has {total}"
    if job.gpus_per_node:
        per_node = job.gpus_per_node
        if per_node > largest:
            return f"needs {per_node} {kind} per node; the largest node has {largest}"
        nodes_needed = -(-need // per_node)
        wide = len(sizes) - bisect.bisect_left(sizes, per_node)
        if nodes_needed > wide:
            return (
                f"needs {nodes_needed} nodes with {per_node} {kind} each; the cluster has {wide}"
            )
    if need > tenant.quota_limit_gpus:
        return (
            f"needs {need} GPUs; team {tenant.name} may hold at most "
            f"{tenant.guaranteed_gpus} guaranteed + {tenant.borrow_limit_gpus} borrowed "
            f"= {tenant.quota_limit_gpus}"
        )
    cap = tenant.max_gpus_per_user
    if cap is not None and getattr(job, "owner_id", None) is not None and need > cap:
        return (f"needs {need} GPUs; one owner of team {tenant.name} may hold at most {cap} "
                "(max_gpus_per_user)")
    return ""
