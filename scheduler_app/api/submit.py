"""Refuse at submit what can never run, before anything is written.

``job_submit`` itself admits a job that can never fit and fails it at once (a FAILED job
with reason NeverFits in the log, the arithmetic in its detail). An API client is better
served by a 400 naming the field, with no job created: so the API asks the same rule
(``services.jobs.never_fits``) first and submits only specs it passes. The tenant's
quota and the cluster's shape it checks against may be up to ``API_CACHE_S`` seconds old
(``api.cache``): a quota cut or a node shrunk in the meantime is caught by the leader's
admission (the core's own check, when it follows the job), which then fails the job in
the log with reason NeverFits.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.core.exceptions import ValidationError
from rest_framework.exceptions import ErrorDetail

from scheduler_app.models import Job, Tenant
from scheduler_app.services.jobs import (
    ClusterShape,
    never_fits,
    never_fits_field,
    over_team_max_runtime,
    validate_job_spec,
)

from . import cache

#: The spec fields the services take (``job_submit``'s keyword arguments).
SPEC_FIELDS = (
    "name", "command", "gpus", "gpus_per_node", "gpu_type", "priority", "checkpointable",
    "checkpoint_interval_s", "checkpoint_time_s", "restart_s", "max_runtime_s", "min_gpus",
    "preemptible", "interactive", "idempotency_key",
)


class Refusals:
    """Checks specs against the cluster and a tenant's quota, memoising per shape: a
    sweep of 1,000 specs usually has one or two distinct shapes."""

    def __init__(self, tenant: Tenant, owner_id: int | None = None) -> None:
        self.tenant = tenant
        self.owner_id = owner_id  # the submitter: the team's per-user cap applies
        #: the cluster's shape, read once (one query) and kept for API_CACHE_S seconds
        #: (api.cache); the submit services reuse it
        self.shape = ClusterShape(max_age_s=cache.ttl_s())
        self._seen: dict[tuple, dict[str, ErrorDetail]] = {}

    def of(self, spec: dict[str, Any]) -> dict[str, ErrorDetail]:
        """{field: message} for a spec that can never run; empty if it may."""
        gpu_type = spec.get("gpu_type") or ""
        types = self.shape.gpu_types()
        if gpu_type and gpu_type not in types:
            known = ", ".join(types) or "none yet"
            return {"gpu_type": ErrorDetail(
                f"Unknown GPU type {gpu_type!r}: the cluster has {known} (or leave it empty "
                "for any type).", code="unknown_gpu_type")}
        shape = (spec["gpus"], spec.get("min_gpus"), spec.get("gpus_per_node"), gpu_type,
                 bool(spec.get("checkpointable")), bool(spec.get("preemptible")),
                 spec.get("max_runtime_s"))
        if shape not in self._seen:
            self._seen[shape] = self._never_fits(spec)
        return self._seen[shape]

    def _never_fits(self, spec: dict[str, Any]) -> dict[str, ErrorDetail]:
        # what never_fits reads of a job (a model instance costs more to build)
        job = SimpleNamespace(
            gpus=spec["gpus"],
            min_gpus=spec.get("min_gpus"),
            gpus_per_node=spec.get("gpus_per_node"),
            gpu_type=spec.get("gpu_type") or "",
            owner_id=self.owner_id,
            checkpointable=bool(spec.get("checkpointable")),
            preemptible=bool(spec.get("preemptible")),
            # as admitted: the team's default limit for a job that declares none
            max_runtime_s=(spec.get("max_runtime_s") if spec.get("max_runtime_s") is not None
                           else self.tenant.default_runtime_s),
        )
        why = never_fits(job, self.tenant, capacity=self.shape)  # type: ignore[arg-type]
        if not why:
            return {}
        return {never_fits_field(why, spec): ErrorDetail(f"This job can never run: it {why}.",
                                                         code="never_fits")}


def full_spec(data: dict[str, Any]) -> dict[str, Any]:
    """The serializer's validated data as the services' spec dict (every key present)."""
    defaults: dict[str, Any] = {
        "command": "", "gpus_per_node": None, "gpu_type": "", "priority": 0,
        "checkpointable": False, "checkpoint_interval_s": None, "checkpoint_time_s": None,
        "restart_s": 0, "max_runtime_s": None, "min_gpus": None, "preemptible": False,
        "interactive": False, "idempotency_key": "",
    }
    return {name: data.get(name, defaults.get(name)) for name in SPEC_FIELDS}


def spec_errors(spec: dict[str, Any], refusals: Refusals) -> dict[str, ErrorDetail]:
    """Every reason to refuse ``spec``: the services' spec rules, then never-fits."""
    try:
        validate_job_spec(spec)
    except ValidationError as error:
        return {field: ErrorDetail(" ".join(messages), code="invalid")
                for field, messages in error.message_dict.items()}
    too_long = over_team_max_runtime(spec, refusals.tenant)
    if too_long:
        return {"max_runtime_s": ErrorDetail(too_long, code="over_team_max_runtime")}
    return refusals.of(spec)


def same_spec(job: Job, spec: dict[str, Any]) -> bool:
    """Does the existing ``job`` (found by idempotency key) ask for exactly ``spec``? A
    job given its team's default limit asked for none."""
    return not spec_differences(job, spec)


def spec_differences(job: Job, spec: dict[str, Any]) -> list[str]:
    """The fields in which ``spec`` asks for something else than ``job`` did, in the
    API's order: a 409 for a reused idempotency key names them (a pipeline author could
    not tell what differed)."""
    declared = {"max_runtime_s": None} if job.runtime_from_team_default else {}
    return [name for name in SPEC_FIELDS
            if declared.get(name, getattr(job, name)) != spec[name]]


def array_differences(tasks: list[Job], spec: dict[str, Any], count: int,
                      max_running: int | None) -> list[str]:
    """What an array request asks for that ``tasks`` (found by its idempotency key) are
    not: ``array.count``, ``array.max_running`` and the spec's fields; ``array`` if they
    are a batch's jobs."""
    first = tasks[0]
    if first.array_id is None:
        return ["array"]
    out = [] if len(tasks) == count else ["array.count"]
    if first.array_max_running != max_running:
        out.append("array.max_running")
    return out + spec_differences(first, {**spec, "idempotency_key": first.idempotency_key})


def same_dependencies(job: Job, depends_on: list[dict[str, Any]] | None) -> bool:
    """Does ``job`` wait for exactly ``depends_on`` (``[{"job", "when"}]``), in any order
    (every dependency must be met: a pipeline that builds the list from a set retried
    with another order and got a 409; a pipeline author's session, 2026-12-07)? None: not
    known, taken as the same."""
    if depends_on is None:
        return True  # (not known here: the first request was checked the same way)
    asked = sorted((str(d.get("job")), str(d.get("when", "ok"))) for d in depends_on)
    return sorted((str(j), str(w)) for j, w in job.depends_on or ()) == asked


def same_array(tasks: list[Job], spec: dict[str, Any], count: int,
               max_running: int | None) -> bool:
    """Are ``tasks`` (found by an array's idempotency key) the array ``spec``, ``count``
    and ``max_running`` ask for (and not a batch's jobs)?"""
    return not array_differences(tasks, spec, count, max_running)

