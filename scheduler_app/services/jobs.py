"""Job services: submit and cancel. Both go through ``services.transitions``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max, Sum

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Tenant, Transition

from .transitions import append_first, apply_locked, job_transition, now_s


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
) -> Job:
    """Create a job and admit it: (none) -> SUBMITTED -> QUEUED, all in one transaction.

    A job that can never run (more GPUs, or GPUs per node, than the cluster has of its
    type; or more than its team's guarantee plus borrow limit) goes SUBMITTED -> FAILED
    with reason NeverFits and the arithmetic in ``detail["why"]``. Invalid input raises
    ValidationError keyed by the field. Submitting again with the same idempotency key
    (per tenant) returns the first job and writes nothing.
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
    at = at or now_s()
    actor_name = owner.get_username() if owner is not None else ""
    key = spec["idempotency_key"]
    try:
        with transaction.atomic(durable=True):
            existing = _job_with_key(tenant, key)
            if existing is not None:
                return existing
            job = Job.objects.create(
                tenant=tenant, owner=owner, state=JobState.SUBMITTED, submitted_at=at, **spec
            )
            append_first(job, actor=actor, at=at, actor_name=actor_name)
            why = never_fits(job, tenant)
            apply_locked(
                job,
                to_state=JobState.FAILED if why else JobState.QUEUED,
                reason=Reason.NEVER_FITS if why else Reason.ADMITTED,
                actor=actor,
                at=at,
                detail={"why": why} if why else None,
                actor_name=actor_name,
            )
            return job
    except IntegrityError:
        # Two submissions with the same key raced and the other one committed first.
        existing = _job_with_key(tenant, key)
        if existing is None:
            raise
        return existing


def _job_with_key(tenant: Tenant, key: str) -> Job | None:
    if not key:
        return None
    return Job.objects.filter(tenant=tenant, idempotency_key=key).first()


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


def validate_job_spec(spec: dict[str, Any]) -> None:
    """Raise ValidationError naming each bad field."""
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
    if len(spec["idempotency_key"]) > 128:
        errors["idempotency_key"] = "At most 128 characters."
    if errors:
        raise ValidationError(errors)


def never_fits(job: Job, tenant: Tenant) -> str:
    """Why ``job`` can never run, or "" if it might. Counts every node whatever its health
    (a down node may come back). Elastic jobs need only their minimum."""
    need = job.min_gpus or job.gpus
    nodes = Node.objects.all()
    if job.gpu_type:
        nodes = nodes.filter(gpu_type=job.gpu_type)
    totals = nodes.aggregate(total=Sum("gpu_count"), largest=Max("gpu_count"))
    total, largest = totals["total"] or 0, totals["largest"] or 0
    kind = f"{job.gpu_type} GPUs" if job.gpu_type else "GPUs"
    if need > total:
        return f"needs {need} {kind}; the cluster has {total}"
    if job.gpus_per_node and job.gpus_per_node > largest:
        return f"needs {job.gpus_per_node} {kind} per node; the largest node has {largest}"
    if need > tenant.quota_limit_gpus:
        return (
            f"needs {need} GPUs; team {tenant.name} may hold at most "
            f"{tenant.guaranteed_gpus} guaranteed + {tenant.borrow_limit_gpus} borrowed "
            f"= {tenant.quota_limit_gpus}"
        )
    return ""
