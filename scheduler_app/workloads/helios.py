"""The SenseTime Helios "Venus" trace as a scenario: real arrivals, sizes, run times and quotas.

Pure Python (no Django): bench scripts and the ``import_trace`` command both call
:func:`import_helios`. The trace has no teams and no checkpoints, so this module adds both,
by rules stated here and in docs/workloads.md, and deterministically (no randomness at all):

- **Window**: jobs whose arrival lies in ``[from_day, from_day + days)`` days of the trace;
  submit times are shifted so the window opens at 0. The default, days 0-119
  (arrival < 10,368,000 s), is the development window; later days are kept for evaluation.
- **Cluster**: the largest daily ``total`` of the quota file over the window's days, in
  8-GPU nodes, split evenly into pods of at most 32 nodes (1,064 GPUs: 133 nodes, 5 pods).
- **Teams**: one tenant per quota column (``vcEwI``, ...), guarantee = its quota on the
  window's first day; every later change of a quota inside the window is a ``set_quota``
  event at that day's midnight. Borrow limit = the cluster minus the guarantee (a team may
  use any idle GPU). A team with zero quota has guarantee 0 and can only borrow.
- **Team of a job**: ``u = first 8 bytes of sha256(job_id) / 2**64`` (uniform in [0, 1),
  stable across runs, machines and Python versions) located in the cumulative quota
  distribution of the job's arrival day, teams in file column order. So each team gets jobs
  in proportion to its quota that day; a team with zero quota that day gets none.
  Trace days past the quota file's last row use its last row.
- **Checkpoints**: a job whose service time exceeds one hour is checkpointable: every
  30 minutes, 60 s to write one when asked, 2 minutes to restart. Shorter jobs are not
  checkpointable (restart 0 s, never preempted).
- **Declared limit**: ``max_runtime_s`` = service x 1.5 rounded up to the minute, capped at
  48 h, but never below service + restart time (a resumed run must be able to finish, so a
  job the trace capped at 48 h declares 48 h + 2 min).
- **Shape**: ``gpus_per_node: 8`` for multiples of 8 GPUs (whole nodes), none otherwise.
- Job ids are the trace's (``363167#0``); file order (arrival order) is the seq tie-break.
- **Capacity scale** (optional, default 1): the cluster and every guarantee times a factor
  (cluster rounded up to whole nodes, guarantees down to whole GPUs); team assignment
  still follows the unscaled quotas. 0.5 makes the window contended (see HeliosParams).
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAY_S = 86_400
GPUS_PER_NODE = 8
MAX_NODES_PER_POD = 32
TRACE_FILE = "helios_venus_gpu_jobs.csv"
QUOTA_FILE = "helios_venus_vc_gpu_quota_daily.csv"


@dataclass(frozen=True, slots=True)
class CheckpointModel:
    """How a replayed job checkpoints: the trace does not say, so this is the documented guess."""

    min_service_s: int = 3600  # jobs longer than this are checkpointable
    interval_s: int = 1800
    checkpoint_time_s: int = 60
    restart_s: int = 120
    limit_factor: float = 1.5  # declared max runtime = service x this, rounded up to a minute
    limit_cap_s: int = 48 * 3600

    def checkpointable(self, service_s: int) -> bool:
        return service_s > self.min_service_s

    def fields(self, service_s: int) -> dict[str, Any]:
        """The job's checkpoint and limit fields for a trace service time."""
        restart = self.restart_s if self.checkpointable(service_s) else 0
        limit = min(math.ceil(service_s * self.limit_factor / 60) * 60, self.limit_cap_s)
        out: dict[str, Any] = {"max_runtime_s": max(limit, service_s + restart)}
        if self.checkpointable(service_s):
            out.update({
                "checkpointable": True,
                "checkpoint_interval_s": self.interval_s,
                "checkpoint_time_s": self.checkpoint_time_s,
                "restart_s": restart,
            })
        return out


@dataclass(frozen=True, slots=True)
class HeliosParams:
    from_day: int = 0
    days: int = 120
    #: Simulated time after the window's last arrival (48 h: the longest service time), so
    #: the last jobs can finish.
    drain_s: int = 2 * DAY_S
    checkpoints: CheckpointModel = CheckpointModel()
    #: Cluster and guarantees scaled by this factor (1.0: as in the quota file). With the
    #: whole idle cluster to borrow from, the real window never queues (mean demand ~455
    #: GPUs on 1,064); 0.5 gives the same jobs half the GPUs, so teams contend and borrowed
    #: GPUs get reclaimed: the regime in which policies differ.
    capacity_scale: float = 1.0
    #: Arrivals divided by this factor (1.0: as in the trace): the same jobs arrive faster,
    #: so the cluster carries more than the trace's own load (2.2 to 2.7 make the Venus
    #: windows carry about 1.1 to 1.2 times their capacity; see docs/workloads.md).
    arrival_compression: float = 1.0
    #: A cluster of this many 8-GPU nodes instead of the quota file's largest total (the
    #: Helios artifact's own window uses 136); guarantees stay as in the quota file.
    cluster_nodes: int | None = None
    #: Nodes per pod (the artifact's cluster is one pool: a pod as large as the cluster).
    nodes_per_pod: int = MAX_NODES_PER_POD
    #: Jobs larger than this many GPUs ask for this many (the artifact caps at 512).
    max_job_gpus: int | None = None

    def __post_init__(self) -> None:
        if self.from_day < 0:
            raise ValueError("from_day: must be a non-negative integer")
        if self.days < 1:
            raise ValueError("days: must be a positive integer")
        if self.drain_s < 0:
            raise ValueError("drain_s: must be a non-negative integer")
        if not 0.0 < self.capacity_scale <= 1.0:
            raise ValueError("capacity_scale: must be in (0, 1]")
        if not 1.0 <= self.arrival_compression <= 100.0:
            raise ValueError("arrival_compression: must be in [1, 100]")
        if self.cluster_nodes is not None and self.cluster_nodes < 1:
            raise ValueError("cluster_nodes: must be a positive integer")
        if self.nodes_per_pod < 1:
            raise ValueError("nodes_per_pod: must be a positive integer")
        if self.max_job_gpus is not None and self.max_job_gpus < 1:
            raise ValueError("max_job_gpus: must be a positive integer")

    @property
    def start_s(self) -> int:
        return self.from_day * DAY_S

    @property
    def end_s(self) -> int:
        return (self.from_day + self.days) * DAY_S


@dataclass(frozen=True, slots=True)
class QuotaTable:
    """The daily quota file: team names in column order, one row of quotas per day."""

    teams: tuple[str, ...]
    days: tuple[tuple[int, ...], ...]  # days[d][i]: quota of teams[i] on day d
    totals: tuple[int, ...]

    def row(self, day: int) -> tuple[int, ...]:
        return self.days[min(max(day, 0), len(self.days) - 1)]

    def total(self, day: int) -> int:
        return self.totals[min(max(day, 0), len(self.totals) - 1)]


def shared_dir() -> Path:
    """``$SCHED_SHARED_DIR`` if that is set, else ``../shared`` beside the repository
    (this file is 3 levels down): a clone elsewhere names it (docs/workloads.md)."""
    shared = os.environ.get("SCHED_SHARED_DIR", "").strip()
    if shared:
        return Path(shared).expanduser()
    return Path(__file__).resolve().parents[2].parent / "shared"


def default_trace_dir() -> Path:
    """The Helios trace and quota table: ``traces/`` of :func:`shared_dir`."""
    return shared_dir() / "traces"


def read_quota(path: str | Path) -> QuotaTable:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        if header[0] != "date" or header[-1] != "total":
            raise ValueError(f"{path}: expected columns date, <teams...>, total")
        teams = tuple(header[1:-1])
        days: list[tuple[int, ...]] = []
        totals: list[int] = []
        for line_no, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                quotas = tuple(int(x) for x in row[1:-1])
                total = int(row[-1])
            except ValueError as exc:
                raise ValueError(f"{path}:{line_no}: not an integer quota ({exc})") from exc
            if len(quotas) != len(teams):
                raise ValueError(f"{path}:{line_no}: expected {len(teams)} quotas")
            days.append(quotas)
            totals.append(total)
    if not days:
        raise ValueError(f"{path}: no days")
    return QuotaTable(teams=teams, days=tuple(days), totals=tuple(totals))


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    arrival_s: int
    service_s: int
    gpus: int


def read_trace(path: str | Path, *, start_s: int = 0,
               end_s: int | None = None) -> Iterator[TraceJob]:
    """Trace rows with ``start_s <= arrival < end_s``, in file (arrival) order."""
    with open(path, newline="", encoding="utf-8") as fh:
        for line_no, row in enumerate(csv.DictReader(fh), start=2):
            try:
                arrival = int(float(row["arrival_s"]))
                service = max(1, math.ceil(float(row["service_sec"])))
                gpus = int(row["gpu_count"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{line_no}: malformed row ({exc})") from exc
            if arrival < start_s or (end_s is not None and arrival >= end_s):
                continue
            if gpus < 1:
                continue
            yield TraceJob(row["job_id"], arrival, service, gpus)


def stable_unit(job_id: str) -> float:
    """A number in [0, 1) fixed by the job id alone (sha256, not Python's salted hash)."""
    digest = hashlib.sha256(job_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_team(job_id: str, teams: tuple[str, ...], quotas: tuple[int, ...]) -> str:
    """The team whose slice of the cumulative quota distribution holds ``stable_unit(job_id)``."""
    cumulative: list[int] = []
    running = 0
    for q in quotas:
        running += q
        cumulative.append(running)
    if running <= 0:
        raise ValueError("no team has quota that day")
    point = stable_unit(job_id) * running
    return teams[bisect.bisect_right(cumulative, point)]


def cluster_pods(total_gpus: int, nodes_per_pod: int = MAX_NODES_PER_POD
                 ) -> list[dict[str, Any]]:
    """Whole 8-GPU nodes covering ``total_gpus``, split evenly into pods of at most
    ``nodes_per_pod`` nodes (32 by default)."""
    nodes = math.ceil(total_gpus / GPUS_PER_NODE)
    count = math.ceil(nodes / nodes_per_pod)
    base, extra = divmod(nodes, count)
    return [
        {"name": f"pod-{i}", "nodes": base + (1 if i < extra else 0),
         "gpus_per_node": GPUS_PER_NODE}
        for i in range(count)
    ]


def import_helios(
    params: HeliosParams | None = None,
    *,
    trace: str | Path | None = None,
    quota: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The scenario (a dict in the SCENARIOS.md format) for a window of the Helios trace."""
    p = params or HeliosParams()
    trace = Path(trace) if trace else default_trace_dir() / TRACE_FILE
    quota = Path(quota) if quota else default_trace_dir() / QUOTA_FILE
    table = read_quota(quota)
    window_days = range(p.from_day, p.from_day + p.days)
    cluster_gpus = math.ceil(max(table.total(d) for d in window_days) * p.capacity_scale)
    if p.cluster_nodes is not None:
        cluster_gpus = p.cluster_nodes * GPUS_PER_NODE
    pods = cluster_pods(cluster_gpus, p.nodes_per_pod)
    cluster_gpus = sum(pod["nodes"] for pod in pods) * GPUS_PER_NODE

    def guarantee(quota: int) -> int:
        return int(quota * p.capacity_scale)  # floor: guarantees never exceed the quotas

    if any(sum(guarantee(q) for q in table.row(d)) > cluster_gpus for d in window_days):
        raise ValueError(f"cluster_nodes: {cluster_gpus} GPUs cannot hold the window's "
                         "guarantees (they add up to more on some day)")

    first = [guarantee(q) for q in table.row(p.from_day)]
    tenants = [
        {"name": team, "guaranteed_gpus": first[i], "borrow_limit_gpus": cluster_gpus - first[i]}
        for i, team in enumerate(table.teams)
    ]
    events = []
    for day in window_days[1:]:
        before = [guarantee(q) for q in table.row(day - 1)]
        after = [guarantee(q) for q in table.row(day)]
        at_s = int((day - p.from_day) * DAY_S / p.arrival_compression)
        # cuts before raises: the guarantees never add up to more than the cluster, even
        # between two events of one instant (a scenario that would is refused)
        changed = sorted((after[i] > before[i], i) for i in range(len(table.teams))
                         if after[i] != before[i])
        for _raise, i in changed:
            events.append({"at_s": at_s, "set_quota": {
                "tenant": table.teams[i], "guaranteed_gpus": after[i],
                "borrow_limit_gpus": cluster_gpus - after[i]}})

    jobs = []
    for tj in read_trace(trace, start_s=p.start_s, end_s=p.end_s):
        day = tj.arrival_s // DAY_S
        gpus = tj.gpus if p.max_job_gpus is None else min(tj.gpus, p.max_job_gpus)
        job: dict[str, Any] = {
            "id": tj.job_id,
            "tenant": assign_team(tj.job_id, table.teams, table.row(day)),
            # integer seconds: a compressed arrival is rounded down
            "submit_at_s": int((tj.arrival_s - p.start_s) / p.arrival_compression),
            "gpus": gpus,
            "runtime_s": tj.service_s,
        }
        if gpus % GPUS_PER_NODE == 0:
            job["gpus_per_node"] = GPUS_PER_NODE
        job.update(p.checkpoints.fields(tj.service_s))
        jobs.append(job)
        if progress and len(jobs) % 20_000 == 0:
            progress(f"read {len(jobs)} jobs")
    if progress:
        progress(f"read {len(jobs)} jobs in days {p.from_day}-{p.from_day + p.days - 1}")
    last_day = p.from_day + p.days - 1
    scaled = "" if p.capacity_scale == 1.0 else f"-x{p.capacity_scale:g}"
    if p.arrival_compression != 1.0:
        scaled += f"-c{p.arrival_compression:g}"
    return {
        "name": f"helios-venus-d{p.from_day}-{last_day}{scaled}",
        "until_s": math.ceil(p.days * DAY_S / p.arrival_compression) + p.drain_s,
        "settings": {},
        "cluster": {"pods": pods},
        "tenants": tenants,
        "jobs": jobs,
        "events": events,
    }
