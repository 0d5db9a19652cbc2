"""The result file: per-job records, top-level preemptions and metrics (SCENARIOS.md).

The engine fills :class:`JobRecord`s as the run goes; :func:`build_result` turns them into
the public JSON shape and :func:`compute_metrics` applies the contract's definitions.
Everything here is integer arithmetic except the final ratios, which are rounded to a
fixed number of digits so that two runs of the same scenario give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Digits kept for ratios and means; tick timings are measured, so they keep fewer.
FLOAT_DIGITS = 6
TICK_MS_DIGITS = 3

RUN_ENDS = frozenset({"COMPLETED", "PREEMPTED", "FAILED", "CANCELLED", "NODE_FAILED", "RUNNING"})


@dataclass(slots=True)
class RunRecord:
    """One stay on GPUs: from PLACING to leaving the holding states (or ``until_s``)."""

    start_s: int
    alloc: dict[str, int]  # node -> GPUs held
    end_s: int | None = None
    end: str = "RUNNING"

    @property
    def gpus(self) -> int:
        return sum(self.alloc.values())


@dataclass(slots=True)
class JobRecord:
    job_id: str
    tenant: str
    submit_s: int
    gpus: int
    runtime_s: int
    state: str | None = None  # None: not submitted by the end of the run
    transitions: list[tuple[int, str, str]] = field(default_factory=list)  # (at, to, reason)
    runs: list[RunRecord] = field(default_factory=list)
    end_s: int | None = None  # reached a final state
    preemptions: int = 0
    lost_to_preemption_gpu_s: int = 0
    lost_to_failure_gpu_s: int = 0
    start_estimates: list[tuple[int, int | None]] = field(default_factory=list)
    pending_reasons: list[tuple[int, str]] = field(default_factory=list)
    entitled: bool = False  # entitled when submitted (entitled_wait_p95_s)

    @property
    def first_start_s(self) -> int | None:
        return self.runs[0].start_s if self.runs else None

    @property
    def gpu_s_lost(self) -> int:
        return self.lost_to_preemption_gpu_s + self.lost_to_failure_gpu_s

    def note_estimate(self, at_s: int, start_s: int | None) -> None:
        if not self.start_estimates or self.start_estimates[-1][1] != start_s:
            self.start_estimates.append((at_s, start_s))

    def note_reason(self, at_s: int, reason: str) -> None:
        if not self.pending_reasons or self.pending_reasons[-1][1] != reason:
            self.pending_reasons.append((at_s, reason))


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    at_s: int
    victim: str
    for_job: str | None
    cost_s: int | None
    est_gpu_s_lost: int | None
    why: str


@dataclass(slots=True)
class SimOutcome:
    """Everything a finished simulation hands to the result writer."""

    scenario: str
    policy: str
    seed: int
    until_s: int
    end_s: int  # the run's end: when the last job ended, or until_s, whichever is first
    capacity_gpus: int
    jobs: list[JobRecord]
    preemptions: list[PreemptionRecord]
    tick_ms: Sequence[float]


# ---------------------------------------------------------------------------------------
# Metrics


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile: the smallest sample with at least pct% of samples <= it.

    Always one of the samples (no interpolation), so integer waits give integer
    percentiles and the value is stable across platforms. None for no samples.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def job_wait_s(job: JobRecord, run_end_s: int) -> int | None:
    """Wait of one job, or None when it does not count.

    First start minus submit. A job that never started waits until it left the queue for
    good (cancelled) or until the end of the run. Jobs not submitted by the end of the run,
    and jobs refused at submission (FAILED without ever starting: NeverFits), never waited
    for GPUs and do not count.
    """
    if job.state is None or job.submit_s > run_end_s:
        return None
    if job.first_start_s is not None:
        return job.first_start_s - job.submit_s
    if job.state == "FAILED":
        return None
    end = job.end_s if job.end_s is not None else run_end_s
    return min(end, run_end_s) - job.submit_s


def bounded_slowdown(jct_s: int, runtime_s: int) -> float:
    """A completed job's completion time over its run time, the run time bounded below by
    10 s (the contract's mean bounded slowdown)."""
    return jct_s / max(runtime_s, 10)


def gpu_s_held(job: JobRecord, run_end_s: int) -> int:
    """The GPU-seconds ``job``'s runs held within the run, from t=0 to ``run_end_s``: a
    run carried in (a what-if's running job, started before t=0) counts from t=0, as the
    capacity does (counted from its start, an exported what-if gave a utilization of
    1.02: 2026-12-07)."""
    total = 0
    for run in job.runs:
        end = run.end_s if run.end_s is not None else run_end_s
        end = min(end, run_end_s)
        start = max(run.start_s, 0)
        if end > start:
            total += (end - start) * run.gpus
    return total


def compute_metrics(outcome: SimOutcome) -> dict[str, Any]:
    end = outcome.end_s
    waits: list[int] = []
    entitled_waits: list[int] = []
    jcts: list[int] = []
    slowdowns: list[float] = []
    held = 0
    lost_preempt = 0
    preemptions = 0
    for job in outcome.jobs:
        held += gpu_s_held(job, end)
        lost_preempt += job.lost_to_preemption_gpu_s
        preemptions += job.preemptions
        wait = job_wait_s(job, end)
        if wait is not None:
            waits.append(wait)
            if job.entitled:
                entitled_waits.append(wait)
        if job.state == "COMPLETED" and job.end_s is not None:
            jct = job.end_s - job.submit_s
            jcts.append(jct)
            slowdowns.append(bounded_slowdown(jct, job.runtime_s))
    capacity_s = outcome.capacity_gpus * end
    ticks = outcome.tick_ms
    return {
        "utilization": _round(held / capacity_s) if capacity_s > 0 else None,
        "mean_wait_s": _mean(waits),
        "p95_wait_s": percentile(waits, 95),
        "gpu_hours_lost_to_preemption": _round(lost_preempt / 3600.0),
        "preemptions": preemptions,
        "entitled_wait_p95_s": percentile(entitled_waits, 95),
        "mean_jct_s": _mean(jcts),
        "mean_bounded_slowdown": _mean(slowdowns),
        "ticks": len(ticks),
        "tick_ms_p50": _round_ms(percentile(ticks, 50)),
        "tick_ms_p99": _round_ms(percentile(ticks, 99)),
        "tick_ms_max": _round_ms(max(ticks) if ticks else None),
    }


def _mean(values: Sequence[float]) -> float | None:
    if not values:
        return None
    # math.fsum: exact, so the order of summation cannot change the last digit.
    return _round(math.fsum(values) / len(values))


def _round(value: float) -> float:
    rounded = round(value, FLOAT_DIGITS)
    return 0.0 if rounded == 0 else rounded  # never -0.0


def _round_ms(value: float | None) -> float | None:
    return None if value is None else round(value, TICK_MS_DIGITS)


# ---------------------------------------------------------------------------------------
# The JSON document


def job_to_json(job: JobRecord) -> dict[str, Any]:
    return {
        "state": job.state,
        "transitions": [{"at_s": at, "to": to, "reason": why} for at, to, why in job.transitions],
        "runs": [
            {
                "start_s": run.start_s,
                "end_s": run.end_s,
                "alloc": dict(sorted(run.alloc.items())),
                "end": run.end,
            }
            for run in job.runs
        ],
        "first_start_s": job.first_start_s,
        "end_s": job.end_s,
        "preemptions": job.preemptions,
        "gpu_s_lost": job.gpu_s_lost,
        "start_estimates": [{"at_s": at, "start_s": s} for at, s in job.start_estimates],
        "pending_reasons": [{"at_s": at, "reason": r} for at, r in job.pending_reasons],
    }


def preemption_to_json(p: PreemptionRecord) -> dict[str, Any]:
    return {
        "at_s": p.at_s,
        "victim": p.victim,
        "for": p.for_job,
        "cost_s": p.cost_s,
        "est_gpu_s_lost": p.est_gpu_s_lost,
        "why": p.why,
    }


def build_result(outcome: SimOutcome) -> dict[str, Any]:
    return {
        "scenario": outcome.scenario,
        "policy": outcome.policy,
        "seed": outcome.seed,
        "until_s": outcome.until_s,
        "end_s": outcome.end_s,
        "jobs": {job.job_id: job_to_json(job) for job in sorted(outcome.jobs,
                                                                 key=lambda j: j.job_id)},
        "preemptions": [preemption_to_json(p) for p in outcome.preemptions],
        "metrics": compute_metrics(outcome),
    }


def dump_result(result: dict[str, Any]) -> str:
    """Serialise with sorted keys, one job and one preemption a line.

    Valid JSON that diffs well and stays small at 100,000 jobs (no deep indentation).
    """
    lines = ["{"]
    top = sorted(result)
    for i, key in enumerate(top):
        comma = "," if i < len(top) - 1 else ""
        value = result[key]
        if key == "jobs":
            lines.append(f"{json.dumps(key)}: {{")
            lines.extend(_items((f"{json.dumps(k)}: {_compact(v)}" for k, v in value.items())))
            lines.append("}" + comma)
        elif key == "preemptions":
            lines.append(f"{json.dumps(key)}: [")
            lines.extend(_items(_compact(v) for v in value))
            lines.append("]" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {_compact(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _items(rendered: Iterable[str]) -> list[str]:
    out = list(rendered)
    return [line + ("," if i < len(out) - 1 else "") for i, line in enumerate(out)]


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), allow_nan=False)
