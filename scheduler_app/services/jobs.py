"""Job services: submit (one job, or a batch), and cancel. All go through
``services.transitions``."""

from __future__ import annotations

import bisect
import re
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from scheduler_app.core.states import FINAL_STATES, JobState, Reason
from scheduler_app.core.types import (
    DEPENDENCY_KINDS,
    MAX_ARRAY_TASKS,
    Actor,
    may_borrow,
    may_not_borrow_words,
)
from scheduler_app.models import Job, Node, Tenant, Transition
from scheduler_app.scheduler_config import scheduler_config
from scheduler_app.selectors.jobs import job_visibility
from scheduler_app.selectors.redaction import Sees

from .copy_insert import new_instances
from .errors import Conflict, Invalid, NotFound
from .transitions import (
    Move,
    admit_new_job,
    admit_new_jobs,
    append_lock,
    apply_moves_locked,
    job_transition,
    now_s,
)


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
    depends_on: Sequence[Mapping[str, Any]] = (),
    at: datetime | None = None,
    actor: Actor = Actor.USER,
    capacity: ClusterShape | None = None,
    sees: Sees | None = None,
) -> Job:
    """Create a job and admit it: (none) -> SUBMITTED -> QUEUED, all in one transaction.

    ``depends_on``: the jobs it waits for, ``[{"job": id, "when": "ok"|"any"|"notok"}]``
    (``when`` defaults to ok). Each must exist and be one ``owner`` may see (``sees``:
    the caller's rule, default the API's for ``owner``; no owner, no check), else
    ``Invalid`` names ``depends_on[k].job`` and nothing is written.

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
    spec["depends_on"] = _single_dependencies(depends_on, owner=owner, sees=sees)
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
        "min_gpus", "preemptible", "interactive", "depends_on",
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
    sees: Sees | None = None,
) -> list[Job]:
    """Submit up to :data:`MAX_BATCH` jobs all or nothing, in one transaction, in order.

    Every spec is validated first; any bad field raises ``Invalid`` naming it
    ``jobs[i].field`` (``errors`` holds them all) and nothing is written. With an
    ``idempotency_key`` the jobs get the keys ``<key>#0``, ``<key>#1``, ...: submitting the
    same batch again returns the first batch's jobs and writes nothing.

    A spec's ``depends_on`` may name existing jobs (``{"job": id, "when": ...}``, checked
    as :func:`job_submit` checks them) and other jobs of the batch by their index
    (``{"index": 2, "when": "ok"}``); a cycle among them is refused, naming
    ``jobs[i].depends_on`` of its first job. (A batch item cannot be an array: an array
    makes up to 10,000 jobs, a batch at most 1,000, and one transaction takes both.)
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
            problems.update(spec_problems(spec, tenant))
        for name, message in problems.items():
            errors[f"jobs[{i}].{name}"] = message
        if spec is not None:
            prepared.append(spec)
    dependencies: dict[str, list[Dependency]] = {}
    bad_dependencies: dict[str, str] = {}
    for i, raw in enumerate(specs):
        if isinstance(raw, dict) and raw.get("depends_on"):
            field = f"jobs[{i}].depends_on"
            dependencies[field], problems = parse_dependencies(
                raw["depends_on"], field=field, batch_size=len(specs), own_index=i)
            bad_dependencies.update(problems)
    bad_dependencies.update(awaited_errors(dependencies, owner=owner, sees=sees))
    bad_dependencies.update(cycle_errors({i: dependencies.get(f"jobs[{i}].depends_on", [])
                                          for i in range(len(specs))}))
    errors.update(bad_dependencies)
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, errors=errors,
                      codes=dict.fromkeys(bad_dependencies, BAD_DEPENDENCY))
    by_index = [dependencies.get(f"jobs[{i}].depends_on", []) for i in range(len(specs))]
    link = None
    for spec, deps in zip(prepared, by_index, strict=True):
        spec["depends_on"] = [[value, when] for kind, value, when in deps if kind == "job"]
    if any(kind == "index" for deps in by_index for kind, _v, _w in deps):
        def link(jobs: list[Job]) -> list[str]:
            # the batch's own jobs by key, in the order given (indices become keys)
            for job, deps in zip(jobs, by_index, strict=True):
                job.depends_on = [[jobs[value].pk if kind == "index" else value, when]
                                  for kind, value, when in deps]
            return ["depends_on"]
    at = at or now_s()
    actor_name = owner.get_username() if owner is not None else ""
    jobs, refusals = _new_jobs(tenant, owner, prepared, at=at, fits=capacity or ClusterShape())
    return _admit_or_replay(jobs, refusals, tenant=tenant, owner=owner,
                            idempotency_key=idempotency_key, actor=actor, at=at,
                            actor_name=actor_name, link=link)


def _admit_or_replay(jobs: list[Job], refusals: Any, *, tenant: Tenant,
                     owner: AbstractBaseUser | None, idempotency_key: str, actor: Actor,
                     at: datetime, actor_name: str,
                     link: Callable[[list[Job]], list[str]]) -> list[Job]:
    """Admit a batch's (or an array's) new jobs in one durable transaction; if their keys
    are taken already, the jobs the first request made, marked as replayed."""
    try:
        # no look-up first: the unique keys refuse a second batch (IntegrityError below)
        with transaction.atomic(durable=True):
            return admit_new_jobs(jobs, refusals=refusals, actor=actor, at=at,
                                  actor_name=actor_name, link=link)
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
    spec.pop("depends_on", None)  # checked with the whole batch (parse_dependencies)
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
        shape = (job.gpus, job.min_gpus, job.gpus_per_node, job.gpu_type,
                 job_may_borrow(job))
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


def spec_problems(spec: dict[str, Any], tenant: Tenant) -> dict[str, str]:
    """What is wrong with one job's spec, field -> message: :func:`validate_job_spec`'s
    problems, or else a limit over the team's ``max_runtime_s`` (a batch's jobs and an
    array's spec are checked so, every problem named at once)."""
    try:
        validate_job_spec(spec)
    except ValidationError as error:
        return {f: " ".join(m) for f, m in error.message_dict.items()}
    problem = over_team_max_runtime(spec, tenant)
    return {"max_runtime_s": problem} if problem else {}


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
    """Cancel a job that is not final (its GPUs go back to the nodes). ``why`` is
    printable text, as a name is (``Invalid`` on ``why`` otherwise)."""
    _check_why(why)
    return job_transition(
        job_id=job_id,
        to_state=JobState.CANCELLED,
        reason=Reason.CANCELLED,
        actor=actor,
        actor_name=actor_name,
        at=at,
        detail={"why": why} if why else None,
    )


def _check_why(why: str) -> None:
    if unprintable(why or ""):
        # a right-to-left override or a line break in the log's why (names refused them)
        raise Invalid(f"A cancel's why is {UNPRINTABLE_WORDS}.", field="why")


def array_cancel(
    *,
    array_id: int,
    actor: Actor = Actor.USER,
    actor_name: str = "",
    at: datetime | None = None,
    why: str = "",
) -> list[Transition]:
    """Cancel every task of job array ``array_id`` that is not final, in one durable
    transaction (all of them or none), each logged as :func:`job_cancel` logs one (reason
    Cancelled, the ``why``). ``NotFound`` if there is no such array; ``Conflict`` if every
    task is final already (as cancelling a final job is)."""
    _check_why(why)
    at = at or now_s()
    detail = {"why": why, "array": array_id} if why else {"array": array_id}
    with transaction.atomic(durable=True), append_lock():
        # read under the append lock: no other writer moves a task until the commit, so
        # the states read are the ones the moves start from
        tasks = list(Job.objects.filter(array_id=array_id).order_by("pk")
                     .values_list("pk", "state"))
        if not tasks:
            raise NotFound(f"No job array {array_id}.", field="array_id")
        final = {state.value for state in FINAL_STATES}
        moves = [Move(job_id=pk, from_state=JobState(state), to_state=JobState.CANCELLED,
                      reason=Reason.CANCELLED, at=at, detail=dict(detail))
                 for pk, state in tasks if state not in final]
        if not moves:
            raise Conflict(f"Every task of array {array_id} has ended already: nothing to "
                           "cancel.", code="array_final")
        return apply_moves_locked(moves, actor=actor, actor_name=actor_name)


def array_submit(
    *,
    tenant: Tenant,
    owner: AbstractBaseUser | None,
    name: str,
    gpus: int,
    count: int,
    max_running: int | None = None,
    depends_on: Sequence[Mapping[str, Any]] = (),
    idempotency_key: str = "",
    at: datetime | None = None,
    actor: Actor = Actor.USER,
    capacity: ClusterShape | None = None,
    sees: Sees | None = None,
    **fields: Any,
) -> list[Job]:
    """Submit a job array: ``count`` tasks (1 to :data:`MAX_ARRAY_TASKS`) of the same
    spec (``fields``: :func:`job_submit`'s job fields), at most ``max_running`` of them
    running at once (None: no cap), all or nothing, in one transaction, as a batch is
    (the same bulk insert: an array of 10,000 tasks costs what a batch of 10,000 jobs
    does). Task ``i`` has ``array_index`` i; they share ``array_id``, the id of task 0
    (shown as ``<array_id>_<i>``), and ``depends_on`` (each task waits for the same
    jobs, checked as :func:`job_submit` checks them). Bad input raises ``Invalid``
    naming ``array.count``, ``array.max_running`` or the job field. With an
    ``idempotency_key`` task i gets ``<key>#<i>``, as a batch's jobs do: a retry returns
    the first submission's tasks."""
    errors: dict[str, str] = {}
    if isinstance(count, bool) or not isinstance(count, int) or not \
            1 <= count <= MAX_ARRAY_TASKS:
        errors["array.count"] = f"An array has 1 to {MAX_ARRAY_TASKS:,} tasks."
    if max_running is not None and (isinstance(max_running, bool) or
                                    not isinstance(max_running, int) or max_running < 1):
        errors["array.max_running"] = ("At least 1 task must be allowed to run at once (or "
                                       "leave it empty for no cap).")
    if len(idempotency_key) > 128 - len(f"#{MAX_ARRAY_TASKS}"):
        errors["idempotency_key"] = "At most 123 characters for an array."
    unknown = sorted(set(fields) - BATCH_FIELDS)
    if unknown:
        errors.update({f: "Not a job field." for f in unknown})
    spec: dict[str, Any] = {**_SPEC_DEFAULTS, **fields, "name": name, "gpus": gpus,
                            "idempotency_key": ""}
    spec["gpu_type"] = spec["gpu_type"] or ""
    if not unknown:
        errors.update(spec_problems(spec, tenant))
    codes: dict[str, str] = {}
    try:
        spec["depends_on"] = _single_dependencies(depends_on, owner=owner, sees=sees)
    except Invalid as error:
        errors.update(error.errors)
        codes = dict.fromkeys(error.errors, BAD_DEPENDENCY)
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, errors=errors, codes=codes)
    at = at or now_s()
    actor_name = owner.get_username() if owner is not None else ""
    specs = [{**spec, "array_index": i, "array_count": count,
              "array_max_running": max_running,
              "idempotency_key": f"{idempotency_key}#{i}" if idempotency_key else ""}
             for i in range(count)]
    jobs, refusals = _new_jobs(tenant, owner, specs, at=at, fits=capacity or ClusterShape())

    def link(jobs: list[Job]) -> list[str]:
        for job in jobs:
            job.array_id = jobs[0].pk  # task 0 names the array
        return ["array_id"]

    return _admit_or_replay(jobs, refusals, tenant=tenant, owner=owner,
                            idempotency_key=idempotency_key, actor=actor, at=at,
                            actor_name=actor_name, link=link)


# ---------------------------------------------------------------- dependencies
#: The code of every refused dependency (a single job's, a batch's, an array's).
BAD_DEPENDENCY = "bad_dependency"
#: The most jobs one job may wait for: a bound on its row and on the submit's look-up.
MAX_DEPENDENCIES = 100
#: The largest job id a dependency may name (bigint keys; more is a typo, not a job: the
#: database could not even be asked about it).
JOB_ID_MAX = 2**62

#: One parsed dependency: ("job", an existing job's id, when) or ("index", a job of the
#: same batch, when).
Dependency = tuple[str, int, str]


def parse_dependencies(
    raw: object, *, field: str = "depends_on", batch_size: int | None = None,
    own_index: int | None = None,
) -> tuple[list[Dependency], dict[str, str]]:
    """``depends_on`` as given (a list of ``{"job": id}`` or, in a batch, ``{"index": i}``,
    each with an optional ``when``, default ok) as :data:`Dependency` tuples, and the
    problems, keyed by the path of the bad value (``depends_on[1].when``). The same job
    twice is refused: ok and notok on one job could never both be met, and any other pair
    says what one of them says."""
    if raw is None:
        return [], {}
    if not isinstance(raw, list | tuple):
        return [], {field: "A list of {\"job\": id, \"when\": \"ok\"} objects."}
    if len(raw) > MAX_DEPENDENCIES:
        return [], {field: f"At most {MAX_DEPENDENCIES} dependencies, got {len(raw)}."}
    out: list[Dependency] = []
    errors: dict[str, str] = {}
    seen: dict[tuple[str, int], int] = {}
    for k, item in enumerate(raw):
        at = f"{field}[{k}]"
        if not isinstance(item, Mapping):
            errors[at] = "Each dependency is an object: {\"job\": id, \"when\": \"ok\"}."
            continue
        extra = sorted(set(item) - {"job", "index", "when"})
        if extra:
            errors[f"{at}.{extra[0]}"] = "Not a dependency field: job (or index), when."
            continue
        when = item.get("when", "ok")
        if when not in DEPENDENCY_KINDS:
            errors[f"{at}.when"] = unknown_kind_words(when)
        has_job, has_index = item.get("job") is not None, item.get("index") is not None
        if has_job == has_index:
            errors[at] = ("Name the job it waits for: job (an existing job's id) or, in a "
                          "batch, index (a job of the same batch), not both.")
            continue
        kind = "job" if has_job else "index"
        value = item[kind]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors[f"{at}.{kind}"] = "Must be a job's id (a whole number)." if has_job \
                else "Must be the index of a job of the batch (0 for the first)."
            continue
        if has_job and value > JOB_ID_MAX:
            errors[f"{at}.job"] = f"No job {value}: job ids go up to {JOB_ID_MAX}."
            continue
        if kind == "index":
            if batch_size is None:
                errors[f"{at}.index"] = ("index names a job of the same batch: a single "
                                         "submit has none (name an existing job by its id).")
                continue
            if value >= batch_size:
                errors[f"{at}.index"] = (f"No job {value} in this batch: indices go from 0 "
                                         f"to {batch_size - 1}.")
                continue
            if value == own_index:
                errors[f"{at}.index"] = "A job cannot depend on itself."
                continue
        if (kind, value) in seen:
            errors[at] = (f"Depends on {'job' if has_job else 'batch job'} {value} twice "
                          f"({field}[{seen[(kind, value)]}] already): name each job once.")
            continue
        seen[(kind, value)] = k
        if f"{at}.when" not in errors:
            out.append((kind, value, when))
    return out, errors


def unknown_kind_words(when: object) -> str:
    """The refusal of a dependency kind that is none of DEPENDENCY_KINDS (the API's
    ``when`` field says the same: api.fields.DependencyKindField)."""
    return (f"Unknown kind {when!r}: one of {', '.join(DEPENDENCY_KINDS)} (done with "
            "success, ended whatever the outcome, failed or cancelled).")


def awaited_errors(dependencies: dict[str, list[Dependency]], *,
                   owner: AbstractBaseUser | None, sees: Sees | None) -> dict[str, str]:
    """The problems of the existing jobs ``dependencies`` name ({field: its parsed
    dependencies}), keyed ``<field>[k].job``: a job that does not exist, or that the
    submitter may not see (``sees``; default the API's rule for ``owner``; no owner and no
    rule: no check). One query for all of them."""
    ids = {value for deps in dependencies.values() for kind, value, _w in deps
           if kind == "job"}
    if not ids:
        return {}
    found = {pk: (tenant_id, owner_id, state) for pk, tenant_id, owner_id, state in
             Job.objects.filter(pk__in=ids).values_list("pk", "tenant_id", "owner_id", "state")}
    if sees is None and owner is not None:
        sees = job_visibility(owner)
    errors: dict[str, str] = {}
    for field, deps in dependencies.items():
        for k, (kind, value, when) in enumerate(deps):
            if kind != "job":
                continue
            if value not in found:
                errors[f"{field}[{k}].job"] = f"No job {value}: a job may wait only for a job "\
                                              "that exists."
            elif sees is not None and not sees(*found[value][:2]):
                errors[f"{field}[{k}].job"] = (
                    f"Job {value} is not yours to see, so no job of yours may wait for it: "
                    "researchers see their own jobs, leads every job of the teams they lead.")
            elif (state := found[value][2]) in _NEVER_MET.get(when, ()):
                # accepted, it was cancelled at the next tick (DependencyNeverSatisfied): a
                # pipeline read a 201 for a job that could never start (2026-12-07)
                errors[f"{field}[{k}].job"] = (
                    f"Job {value} has ended {state}, so a job waiting for it to "
                    f"{_AWAITED_WORDS[when]} could never start.")
    return errors


#: the final states in which a dependency of each kind can never be met any more
_NEVER_MET = {"ok": (JobState.FAILED.value, JobState.CANCELLED.value),
              "notok": (JobState.COMPLETED.value,)}
_AWAITED_WORDS = {"ok": "complete (afterok)", "notok": "fail or be cancelled (afternotok)"}


def cycle_errors(graph: dict[int, list[Dependency]]) -> dict[str, str]:
    """A cycle among a batch's jobs (``graph``: index -> its parsed dependencies; only
    ``index`` ones link jobs of the batch), keyed ``jobs[i].depends_on`` of the cycle's
    lowest index: none of its jobs could ever start. Existing jobs cannot close a cycle
    (they depend on nothing new). Iterative: a chain of 1,000 is no recursion limit."""
    edges = {i: sorted({v for kind, v, _w in deps if kind == "index"})
             for i, deps in graph.items()}
    done: set[int] = set()
    errors: dict[str, str] = {}
    for start in sorted(edges):
        if start in done:
            continue
        path: list[int] = [start]
        on_path = {start}
        stack = [iter(edges[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                stack.pop()
                continue
            if nxt in on_path:
                cycle = path[path.index(nxt):]
                first = min(cycle)
                at = cycle.index(first)
                ordered = [*cycle[at:], *cycle[:at], first]
                errors.setdefault(
                    f"jobs[{first}].depends_on",
                    "These jobs of the batch wait for each other in a cycle, so none could "
                    "ever start: " + " -> ".join(f"jobs[{i}]" for i in ordered) + ".")
                continue
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(edges[nxt]))
    return errors


def _single_dependencies(raw: Sequence[Mapping[str, Any]], *,
                         owner: AbstractBaseUser | None, sees: Sees | None) -> list[list]:
    """A single job's (or an array's) ``depends_on`` checked, as stored on the row:
    ``[[job id, when], ...]``; ``Invalid`` naming every bad one."""
    deps, errors = parse_dependencies(list(raw) if raw else [])
    if not errors:
        errors = awaited_errors({"depends_on": deps}, owner=owner, sees=sees)
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, code=BAD_DEPENDENCY, errors=errors)
    return [[value, when] for _kind, value, when in deps]


#: The longest duration a job spec may give: a year. A larger value is a unit mistake
#: (milliseconds for seconds), not a plan.
MAX_DURATION_S = 366 * 24 * 3600

#: The spec's durations, in seconds.
DURATION_FIELDS = ("checkpoint_interval_s", "checkpoint_time_s", "max_runtime_s", "restart_s")


#: What a job's name (or a cancel's why) may not hold: control characters (C0, DEL, C1:
#: tabs and line breaks among them), the text-direction controls (bidirectional
#: embeddings, overrides, isolates and marks) and the invisible ones (zero-width space,
#: non-joiner and joiner, word joiner and the invisible operators, the byte order mark,
#: the soft hyphen, the Mongolian vowel separator), which break gpuq queue's columns.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f"
                          "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
#: The refusal of such a text.
UNPRINTABLE_WORDS = ("printable text: no tabs, line breaks, control, invisible (zero-width, "
                     "soft hyphen) or text-direction characters, and no combining mark "
                     "first")


def unprintable(text: str) -> bool:
    """Does ``text`` hold a character of :data:`_UNPRINTABLE`, or start with a combining
    mark (it joins whatever a terminal printed before it)?"""
    return bool(_UNPRINTABLE.search(text)) or (
        bool(text) and unicodedata.category(text[0]).startswith("M"))


#: The most bytes a job's command may take in UTF-8. The node agent passes the command
#: as one environment string (``SCHED_JOB_COMMAND=<command>``) and as the job's
#: arguments (each a part of it, or the whole after ``/bin/sh -c``), and Linux refuses to
#: exec a single argument or environment string of 128 KiB or more (MAX_ARG_STRLEN,
#: E2BIG): this bound keeps both, and the command twice in the whole argv + environment,
#: well below what the kernel takes. 100,000 ASCII characters fit; 70,000 'ÿ' (2 bytes
#: each) or 50,000 CJK characters (3 bytes each) do not.
COMMAND_MAX_BYTES = 128_000


def command_problem(command: object) -> str:
    """Why a node could not exec ``command`` ('' if it can)."""
    if not isinstance(command, str):
        return ""  # the type is checked elsewhere
    if len(command) * 4 <= COMMAND_MAX_BYTES:
        return ""  # no encoding needed: 4 bytes a character at most
    size = len(command.encode("utf-8", errors="surrogatepass"))
    if size <= COMMAND_MAX_BYTES:
        return ""
    return (f"At most {COMMAND_MAX_BYTES:,} bytes in UTF-8 (this one is {size:,}): a node "
            "cannot start a longer command (Linux limits each argument and environment "
            "string to 128 KiB). Put a long script in a file and run the file.")


def validate_job_spec(spec: dict[str, Any]) -> None:
    """Raise ValidationError naming each bad field. Durations are whole seconds, at most
    :data:`MAX_DURATION_S` (366 days)."""
    errors: dict[str, str] = {}
    gpus = spec["gpus"]
    if not spec["name"] or len(spec["name"]) > 200:
        errors["name"] = "Give the job a name of 1 to 200 characters."
    elif unprintable(spec["name"]):
        # a tab broke gpuq's columns, a right-to-left override reorders what a terminal
        # shows (found by trying the product, 2026-12-07), a zero-width space hides
        errors["name"] = f"A name is {UNPRINTABLE_WORDS}."
    problem = command_problem(spec["command"])
    if problem:
        errors["command"] = problem
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
    elif (min_gpus is not None and isinstance(per_node, int) and per_node > 0
          and min_gpus % per_node):
        # placement shrinks a shaped gang by whole nodes: 12 of 8 a node would be 16
        errors["min_gpus"] = (f"With {per_node} GPUs per node the elastic minimum is a "
                              f"whole number of nodes: a multiple of {per_node}.")
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


#: The words of a never_fits sentence about an elastic job's full size (field ``gpus``).
_FULL_SIZE = "at its full size"


def never_fits(job: Job, tenant: Tenant, *, capacity: ClusterShape | None = None) -> str:
    """Why ``job`` can never run, or "" if it might. Counts every node whatever its health
    (a down node may come back). Elastic jobs need only their minimum to start, but their
    full size (``gpus``) may not be more than the cluster could ever give them, as a
    job that is not elastic may not (2147483647 GPUs with min_gpus 1 was admitted, and
    why_pending spoke of it). Otherwise the same rules as the core's admission
    (``Scheduler._never_fits``), so the two agree on every job the services admit."""
    need = job.min_gpus or job.gpus
    sizes = (capacity or ClusterShape()).sizes(job.gpu_type)
    for asked, words in ((need, ""), (job.gpus, f" {_FULL_SIZE}")):
        why = _never_fits_cluster(job, asked, sizes, words)
        if why:
            return why
    if (need > tenant.guaranteed_gpus and tenant.borrow_limit_gpus > 0
            and not job_may_borrow(job)):
        return may_not_borrow_words(need, tenant.name, tenant.guaranteed_gpus,
                                    scheduler_config())
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


def job_may_borrow(job: Job) -> bool:
    """The core's ``may_borrow`` for a job row (its limit as admitted: the team's default
    fills in a missing one)."""
    return may_borrow(bool(getattr(job, "checkpointable", False)),
                      bool(getattr(job, "preemptible", False)),
                      getattr(job, "max_runtime_s", None), scheduler_config())


def _never_fits_cluster(job: Job, need: int, sizes: list[int], words: str) -> str:
    """Why ``need`` GPUs of ``job``'s type and shape never fit the nodes of ``sizes``."""
    total, largest = sum(sizes), (sizes[-1] if sizes else 0)
    kind = f"{job.gpu_type} GPUs" if job.gpu_type else "GPUs"
    if need > total:
        return f"needs {need} {kind}{words}; the cluster has {total}"
    if job.gpus_per_node:
        per_node = job.gpus_per_node
        if per_node > largest:
            return f"needs {per_node} {kind} per node; the largest node has {largest}"
        nodes_needed = -(-need // per_node)
        wide = len(sizes) - bisect.bisect_left(sizes, per_node)
        if nodes_needed > wide:
            return (f"needs {nodes_needed} nodes with {per_node} {kind} each{words}; the "
                    f"cluster has {wide}")
    return ""


def never_fits_field(why: str, spec: Mapping[str, Any]) -> str:
    """The field at fault in a :func:`never_fits` sentence (it names the limit it hit),
    for ``spec`` (the job's fields)."""
    if _FULL_SIZE in why:
        return "gpus"  # an elastic job's full size: its minimum fits
    if "per node" in why or "nodes with" in why:
        return "gpus_per_node"
    if "max_gpus_per_user" in why and not spec.get("min_gpus"):
        return "gpus"
    if spec.get("min_gpus"):
        return "min_gpus"
    return "gpus"
