"""``gpuq why``: why a job waits, from its detail, in words.

The API's detail carries the explanation (``pending_reason``, ``pending_sentence``,
``queue_position``, ``estimate`` with its ``basis``). :func:`explanation_fields` takes
those and also any other field whose name says it explains a wait (``pending_*``,
``why*``, ``*explanation*``, ``blocked*``, ``waiting*``): a field the API adds later (a
"why pending" explanation) is shown without a new version of gpuq.

What would make the job start sooner (:func:`hints`) is the client's own advice, per
pending reason, from the job's own fields: it changes nothing and promises nothing.
Where only the server knows the answer (whether a job may borrow past its team's
guarantee, and the time limit that would let it), the advice reads the API's
``may_borrow`` and ``borrow_max_runtime_s``.
"""

from __future__ import annotations

import re
from typing import Any

from .fields import BY_API
from .timefmt import format_duration

#: The explanation the API gives today, in the order shown.
KNOWN = ("state", "pending_reason", "pending_sentence", "queue_position", "estimate")
_EXPLAINS = re.compile(r"^(pending_|why|blocked|waiting)|explanation")


def explanation_fields(job: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``job`` that explain its wait: the known ones, then the others the
    API gives whose names say they explain it."""
    out = {key: job.get(key) for key in KNOWN if key in job}
    for key, value in job.items():
        if key not in out and _EXPLAINS.search(key):
            out[key] = value
    return out


def _flag(api: str) -> str:
    return BY_API[api].flag


#: What each dependency kind waits for, in words.
_AWAITS = {"ok": "completes", "any": "ends", "notok": "fails or is cancelled"}
_NEVER = {"ok": "fails or is cancelled", "notok": "completes"}


def hints(job: dict[str, Any], tenant: dict[str, Any] | None = None,
          awaited: list[tuple[dict[str, Any], dict[str, Any] | None]] | None = None
          ) -> list[str]:
    """What might make ``job`` (a QUEUED job's detail) start sooner. ``awaited``: for a
    job that waits on dependencies, each ``{"job", "when"}`` with that job's detail as
    read now (None: not readable)."""
    reason = job.get("pending_reason") or "None"
    gpus = job.get("gpus") or 0
    out: list[str] = []
    if reason == "None":
        out.append("Nothing yet: the scheduler looks at it at its next tick (seconds).")
    elif reason == "Priority":
        held, limit = (tenant or {}).get("current_gpus"), (tenant or {}).get("quota_limit_gpus")
        if held is not None and limit is not None and held + gpus > limit:
            # the server's why says the same: priority orders the team's own jobs, and the
            # quota would hold this one back even at their head
            out.append(f"Team {tenant.get('name')} holds {held} of the {limit} GPUs it may "
                       f"hold: {gpus} more do not fit, so a higher {_flag('priority')} would "
                       "not start it sooner; it starts when the team's running jobs free "
                       "enough.")
        else:
            out.append(f"A higher {_flag('priority')} moves it ahead of your team's other "
                       "jobs (not ahead of other teams: fair share orders the teams).")
        out.append("Your team's fair share improves as its recent usage decays "
                   "(gpuq share shows the order).")
    elif reason in ("Resources", "Reservation"):
        if job.get("max_runtime_s") is None:
            out.append(f"A time limit ({_flag('max_runtime_s')}) lets it backfill into GPUs "
                       "that are free until the reservation starts.")
        if job.get("min_gpus") is None and gpus > 1:
            out.append(f"Elastic ({_flag('min_gpus')}) lets it start on fewer GPUs.")
        if gpus > 1:
            out.append(f"Fewer GPUs ({_flag('gpus')}) fit sooner.")
    elif reason == "QuotaLimit" and _may_not_borrow(job):
        out += _guarantee_hints(job, tenant)
    elif reason == "QuotaLimit":
        limit = (tenant or {}).get("quota_limit_gpus")
        if tenant and limit is not None and (job.get("min_gpus") or gpus) > limit:
            # more than the team may hold at all (a quota cut since): no end frees enough,
            # as the server's why says (this said "when running jobs free enough")
            out.append(f"Team {tenant.get('name')} may hold {limit} GPUs at most (guarantee "
                       "plus borrow limit): no running job's end makes room; an operator "
                       "can raise the team's limits.")
        elif tenant:
            out.append(f"Team {tenant.get('name')} holds {tenant.get('current_gpus')} of "
                       f"the {tenant.get('quota_limit_gpus')} GPUs it may hold (guarantee "
                       "plus borrow limit): it starts when the team's running jobs free "
                       "enough.")
        out.append(f"Fewer GPUs ({_flag('gpus')}), or cancelling another of the team's "
                   "jobs, makes room.")
    elif reason == "QuotaReserved":
        out += _quota_reserved_hints(job)
    elif reason == "UserLimit":
        if tenant and tenant.get("max_gpus_per_user") is not None:
            out.append(f"Team {tenant.get('name')} lets one person hold at most "
                       f"{tenant.get('max_gpus_per_user')} GPUs at once: it starts when your "
                       "running jobs free enough.")
        out.append(f"Fewer GPUs ({_flag('gpus')}), or cancelling another of your jobs in "
                   "the team, makes room.")
    elif reason == "Topology":
        if job.get("gpus_per_node"):
            out.append(f"Without {_flag('gpus_per_node')} (or with a smaller one) the gang "
                       "may be split across more nodes.")
        out.append("GPUs are free but scattered: a smaller gang fits sooner.")
    elif reason == "GpuType":
        out.append(f"Without {_flag('gpu_type')} it may run on any type.")
    elif reason == "NodeDown":
        out.append("Nothing on your side: it starts when the nodes it needs are back "
                   "(operators drain and repair them).")
    elif reason == "Preempting":
        out.append("Nothing: borrowed GPUs are being reclaimed for it; it starts when "
                   "their jobs have checkpointed and stopped.")
    elif reason == "InteractiveTierFull":
        out.append(f"Without {_flag('interactive')} it waits in the batch queue instead.")
    elif reason == "Dependency":
        out += _dependency_hints(job, awaited)
    elif reason == "ArrayLimit":
        array, cap = job.get("array_id"), job.get("array_max_running")
        out.append(f"Nothing to change: array {array} runs at most {cap} of its "
                   f"{job.get('array_count')} tasks at once (max_running, fixed at submit); "
                   "this task starts when one of the running ones ends.")
        out.append(f"Cancelling a running task of the array makes room (gpuq queue --array "
                   f"{array} lists them; gpuq cancel {array}_N cancels one).")
    return out


def _may_not_borrow(job: dict[str, Any]) -> bool:
    """The API says the job may not borrow past its team's guarantee (``may_borrow``: it
    cannot be preempted, and its time limit, none or too long, does not let it). Read,
    not recomputed: the limit that would do is a server setting."""
    return job.get("may_borrow") is False


def _guarantee_hints(job: dict[str, Any], tenant: dict[str, Any] | None) -> list[str]:
    """QuotaLimit for a job that may not borrow: its team's guarantee is its limit, and
    what lets it borrow is what the server's answer names. "Fewer GPUs" and the team's
    guarantee plus borrow limit, advised here before, were not its limit (a researcher's
    session)."""
    most = job.get("borrow_max_runtime_s")
    team = f"team {job.get('tenant') or (tenant or {}).get('name')}"
    guaranteed = (tenant or {}).get("guaranteed_gpus")
    limit = f"{team}'s guarantee" + (f" of {guaranteed} GPUs" if guaranteed is not None
                                     else "")
    need = job.get("min_gpus") or job.get("gpus") or 0
    if guaranteed is not None and need > guaranteed:
        wait = "no running job's end makes room"
    else:
        wait = "it starts when the team's running jobs free enough of that guarantee"
    time = (f", or with a {_flag('max_runtime_s')} of at most {format_duration(most)}"
            if isinstance(most, int) and most > 0 else "")
    return [f"It cannot be preempted (neither {_flag('checkpointable')} nor "
            f"{_flag('preemptible')}), so it may hold only {limit}, not borrow past it: "
            f"{wait}.",
            f"Submitted again with {_flag('checkpointable')} or {_flag('preemptible')}"
            f"{time}, it may borrow idle GPUs (a job's flags are fixed at submit: cancel "
            "this one).",
            "Cancelling another of the team's running jobs makes room within the "
            "guarantee."]


def _quota_reserved_hints(job: dict[str, Any]) -> list[str]:
    """QuotaReserved: a job of its own team, ahead of it, holds the team's remaining quota
    for its planned start. The scheduler lets this one start first only if the quota
    holds both at once, or if it ends, by its time limit, before that start
    (scheduler_app/core/tick.py ``_quota_allows``); else it waits for that job."""
    team = f"team {job.get('tenant')}" if job.get("tenant") else "its team"
    return [f"A job of {team} ahead of it holds the team's remaining quota for its planned "
            "start (kept once made): this one may start before it only if its time limit "
            f"({_flag('max_runtime_s')}) ends it by that start, or if the team's quota holds "
            f"both jobs at once (fewer GPUs, {_flag('gpus')}, help only then).",
            "Otherwise it waits until that job has started, then for room in the team's "
            "quota (a job's flags are fixed at submit: cancel it and submit it again to "
            "change them)."]


def _dependency_hints(job: dict[str, Any],
                      awaited: list[tuple[dict[str, Any], dict[str, Any] | None]] | None
                      ) -> list[str]:
    out: list[str] = []
    for dep, other in awaited or []:
        when = dep.get("when") or "ok"
        name = f"job {dep.get('job')}"
        if other is None:
            out.append(f"It starts once {name} {_AWAITS.get(when, 'ends')} (you may not "
                       "read that job now).")
            continue
        if other.get("array_task"):
            name = f"job {dep.get('job')} (task {other['array_task']})"
        state = other.get("state")
        if state in ("COMPLETED", "FAILED", "CANCELLED"):
            out.append(f"{name[0].upper()}{name[1:]} has ended ({state}): this part is met, "
                       "the scheduler releases it at its next tick.")
        else:
            out.append(f"It starts once {name} {_AWAITS.get(when, 'ends')}: it is {state} "
                       f"now (gpuq why {dep.get('job')}).")
            if when in _NEVER:
                out.append(f"If {name} {_NEVER[when]} instead, this job is cancelled "
                           "(DependencyNeverSatisfied).")
    if len(job.get("depends_on") or []) > len(awaited or []):
        out.append(f"(only the first {len(awaited or [])} of its "
                   f"{len(job.get('depends_on') or [])} dependencies are shown)")
    out.append("It holds and reserves no GPUs meanwhile: nothing to change on your side.")
    return out
