"""What if: the live cluster played forward twice, as it is and with an operator's changes.

Django-free: it takes a :class:`Snapshot` of the live state (read by
``selectors.whatif.live_snapshot``, in one read-only transaction) and works on plain data.

1. :func:`snapshot_scenario` writes the snapshot as a scenario in the public contract,
   with the carried-in state extension (docs/scenarios.md): the nodes by name, the jobs
   running at t=0 with their GPUs, the jobs queued then in their order, the teams'
   decayed usage, the production settings. ``--export-scenario`` writes exactly this, so
   ``manage.py simulate`` on the file gives the baseline again.
2. :func:`apply_changes` turns ``--set-quota``, ``--add-nodes``, ``--drain``,
   ``--undrain``, ``--up``, ``--cancel`` and ``--setting`` into the same scenario, changed;
   every malformed or unknown value is a :class:`WhatIfError` naming its flag, and a change
   that does nothing or leaves capacity below the guarantees a warning.
3. :func:`run_whatif` simulates both in the memory engine and compares them per team and
   per job (:func:`compare`).

What a plan can know of the future is the declared limits, so that is what it assumes
(:data:`ASSUMPTIONS`, printed with every answer): a running job runs until its declared
limit (``max_runtime_s``), a queued job runs for its limit once it starts, a job without
one runs past the horizon, and nothing new is submitted. The live plan is carried: jobs
being preempted hold their GPUs until they stop, the claims and reservations the leader
made are kept.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler_app.core.types import SETTINGS, SchedulerConfig
from scheduler_app.scheduler_config import env_name
from scheduler_app.scheduler_config import parse as parse_setting
from scheduler_app.workloads.io import write_files

from .parallel import MAX_WORKERS, InvalidScenario, default_workers, run_scenarios
from .result import percentile
from .scenario import MAX_GPUS, MAX_NODES_PER_POD, Scenario

DEFAULT_HOURS = 24.0
#: a horizon longer than this is not a what-if but a guess
MAX_HOURS = 24.0 * 14
#: one second: the shortest horizon (the page took 15 min until 2026-12-07, the command 1 s)
MIN_HOURS = 1 / 3600
#: points of each team's GPUs-held series over the horizon (the page's chart)
SERIES_POINTS = 97
#: the jobs whose start moves the most, in the printed table
TOP_MOVED = 10

ASSUMPTIONS = (
    "running jobs run until their declared limit (max_runtime_s, counted from the run's "
    "placement, as the scheduler counts it) and complete there, so jobs waiting for them "
    "to complete (afterok) start then; a job that declares none runs past the horizon. "
    "(Live, a job still running at its limit fails (TimeLimit), and what waits for it to "
    "complete is cancelled)",
    "a queued job runs for its declared limit once it starts (none: past the horizon)",
    "a job works for exactly its declared limit, so one the plan preempts, whose restart "
    "spends restart_s reloading, reaches its limit before its work is done and fails "
    "there (TimeLimit: the 'failed' column)",
    "nothing new is submitted; jobs being preempted at the snapshot hold their GPUs until "
    "they stop (their checkpoint written checkpoint_time_s after the request; one that "
    "cannot checkpoint at once), and the live plan is kept: the published reservations "
    "and the GPUs claimed for the jobs those preemptions make room for",
    "a team's wait: first start minus submit, over the jobs queued at the snapshot; a job "
    "that does not start within the horizon counts up to the end of the horizon (so a "
    "wait can be longer than the horizon for a job submitted before the snapshot), one "
    "the run ends without a start (its dependency failed) does not count, nor does a job "
    "running at the snapshot that the run preempts or requeues (its new wait is not in "
    "the table; its preemptions and GPU-hours lost are)",
)
#: Settings a what-if takes but cannot show the effect of: the runs tick without a wall
#: clock, record starts rather than estimates, and their agents confirm a start at once.
#: A change of one is warned of, not refused (a run may be exported and shared with it).
NOT_SIMULATED = {
    "tick_budget_s": "the runs tick without a wall clock (the simulator bounds a tick by "
                     "tick_work_budget instead)",
    "estimate_budget_s": "the runs tick without a wall clock, and estimates decide nothing",
    "estimate_lookahead": "estimates decide nothing (the runs record starts)",
    "estimate_plans_per_tick": "estimates decide nothing (the runs record starts)",
    "placing_timeout_s": "the runs' agents confirm a start at once",
}
#: a start that moves less than this is not listed among the jobs that move most
MOVED_AT_LEAST_S = 60

ProgressFn = Callable[[float, str], None]


class WhatIfError(ValueError):
    """A bad flag or value: ``str(err)`` is one line that names the flag."""


class GuaranteesPastCluster(WhatIfError):
    """The changes' guarantees add up to more than the cluster: a judgement of all the
    quotas together (the page checks each change alone first, and this one only then)."""


# ---------------------------------------------------------------------------------------
# The snapshot (filled by selectors.whatif from the live database)


@dataclass(frozen=True, slots=True)
class NodeSnap:
    name: str
    pod: str
    gpus: int
    gpu_type: str | None = None
    rail: int = 0
    health: str = "healthy"  # healthy | draining | down


@dataclass(frozen=True, slots=True)
class TenantSnap:
    name: str
    guaranteed_gpus: int
    borrow_limit_gpus: int
    usage_gpu_s: float  # decayed usage at the snapshot instant
    max_gpus_per_user: int | None = None  # the team limits (issue 19): null, none
    default_runtime_s: int | None = None
    max_runtime_s: int | None = None


@dataclass(frozen=True, slots=True)
class JobSnap:
    """A live job, its instants in seconds relative to the snapshot (<= 0)."""

    id: str
    tenant: str
    running: bool  # False: waiting in its queue
    submit_s: int
    gpus: int
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    priority: int = 0
    max_runtime_s: int | None = None
    checkpointable: bool = False
    checkpoint_interval_s: int | None = None
    checkpoint_time_s: int | None = None
    restart_s: int = 0
    preemptible: bool = False
    interactive: bool = False
    min_gpus: int | None = None
    preemption_times_s: tuple[int, ...] = ()
    started_s: int | None = None  # running: when its current run started
    alloc: tuple[tuple[str, tuple[int, ...]], ...] = ()  # running: (node, GPU indices)
    last_checkpoint_s: int | None = None
    owner: str | None = None  # the submitter, for the team's per-user cap
    #: the jobs of the snapshot it still waits for, (id, when); a job it depended on that
    #: has ended met the dependency (one that never can had cancelled it)
    depends_on: tuple[tuple[str, str], ...] = ()
    #: a task of an array: (array id, index, count, max_running)
    array: tuple[str, int, int, int | None] | None = None
    #: running and being preempted (PREEMPT_REQUESTED, CHECKPOINTING): when it was asked
    preempt_requested_s: int | None = None
    preempted_for: str | None = None  # the job the preemption makes room for
    checkpointing: bool = False  # it acknowledged (CHECKPOINTING)

    @property
    def name(self) -> str:
        """As every other list shows it: a task ``<array>_<index>``, else the id."""
        return self.id if self.array is None else f"{self.array[0]}_{self.array[1]}"


@dataclass(frozen=True, slots=True)
class ReservationSnap:
    """A reservation the leader published: its instants relative to the snapshot."""

    job: str
    start_s: int
    alloc: tuple[tuple[str, tuple[int, ...]], ...]
    basis: str = ""
    after_job: str | None = None
    planned_at_s: int | None = None
    checked_at_s: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimSnap:
    """A reclaim claim under way: the nodes promised to a waiting head while its victims
    (jobs being preempted) checkpoint and exit."""

    job: str
    gpus: int
    nodes: tuple[str, ...]
    victims: tuple[str, ...]
    at_s: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_at: str  # ISO 8601, UTC
    nodes: tuple[NodeSnap, ...]
    tenants: tuple[TenantSnap, ...]
    jobs: tuple[JobSnap, ...]  # queue order: by id (the core's tie-break, as in production)
    settings: Mapping[str, Any]  # SchedulerConfig field -> value, the production config
    read_s: float = 0.0  # wall time of the read
    #: the leader's published reservations, in its order, and the reclaim claims under way
    reservations: tuple[ReservationSnap, ...] = ()
    claims: tuple[ClaimSnap, ...] = ()
    #: jobs asked about (``--cancel``'s values) that have ended: value -> (job id, state)
    ended: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: whose ``settings`` these are (the running scheduler's, or the asking process's)
    settings_from: str = ""
    #: settings the asking process reads otherwise than the scheduler: one line each
    settings_notes: tuple[str, ...] = ()


#: the change flags, in the order the answer lists them
CHANGE_FLAGS = ("set_quota", "add_nodes", "drain", "undrain", "up", "cancel", "setting")


@dataclass(frozen=True, slots=True)
class Changes:
    """The operator's changes, as given on the command line (or the page's form)."""

    set_quota: tuple[str, ...] = ()  # TEAM=GUARANTEE[:BORROW]
    add_nodes: tuple[str, ...] = ()  # POD=N
    drain: tuple[str, ...] = ()  # NODE
    cancel: tuple[str, ...] = ()  # JOB, <array>_<index> or <array>_*
    setting: tuple[str, ...] = ()  # NAME=VALUE
    # (after the others: the page builds a Changes from its fields in this order)
    undrain: tuple[str, ...] = ()  # NODE (draining at the snapshot)
    up: tuple[str, ...] = ()  # NODE (down at the snapshot)

    def words(self) -> list[str]:
        return [f"--{flag.replace('_', '-')} {value}" for flag in CHANGE_FLAGS
                for value in getattr(self, flag)]

    def empty(self) -> bool:
        return not self.words()


# ---------------------------------------------------------------------------------------
# Snapshot -> scenario


def settings_of(config: SchedulerConfig) -> dict[str, Any]:
    """The production settings as a scenario's ``settings`` (every one but the policy; a
    setting left unset, the simulator's work budget, keeps the simulator's default)."""
    return {s.name: getattr(config, s.name) for s in SETTINGS
            if getattr(config, s.name) is not None}


def snapshot_scenario(snap: Snapshot, hours: float = DEFAULT_HOURS) -> dict[str, Any]:
    """The snapshot as scenario data (the contract, with the carried-in extension)."""
    until_s = horizon_s(hours)
    past = until_s + 1  # the runtime of a job without a declared limit: past the horizon
    pods: dict[str, list[dict[str, Any]]] = {}
    for n in sorted(snap.nodes, key=lambda n: n.name):
        node: dict[str, Any] = {"name": n.name, "gpus": n.gpus}
        if n.gpu_type:
            node["gpu_type"] = n.gpu_type
        if n.rail:
            node["rail"] = n.rail
        pods.setdefault(n.pod, []).append(node)
    jobs = [_job_data(j, past) for j in snap.jobs]
    queued = {j.id for j in snap.jobs if not j.running}
    leaving = {j.id for j in snap.jobs if j.running and j.preempt_requested_s is not None}
    names = {n.name for n in snap.nodes}
    ids = {j.id for j in snap.jobs}
    for data in jobs:  # (a preemption for a job that has ended since makes room for none)
        stop = data.get("running", {}).get("preempting", {})
        if stop.get("for") is not None and stop["for"] not in ids:
            del stop["for"]
    events: list[dict[str, Any]] = []
    for n in sorted(snap.nodes, key=lambda n: n.name):
        if n.health == "draining":
            events.append({"at_s": 0, "node_drain": n.name})
        elif n.health == "down":
            events.append({"at_s": 0, "node_down": n.name})
    out = {
        "name": "whatif-" + snap.taken_at.replace(":", "").replace("+0000", "Z"),
        "until_s": until_s,
        "settings": dict(sorted(snap.settings.items())),
        "cluster": {"pods": [{"name": pod, "nodes": nodes} for pod, nodes in sorted(pods.items())]},
        "tenants": [_tenant_data(t) for t in sorted(snap.tenants, key=lambda t: t.name)],
        "jobs": jobs,
        "events": events,
    }
    # the live plan: the reservations of jobs still queued on nodes the snapshot has, and
    # the claims of queued heads with their victims still being preempted (a plan the
    # core would drop on its restore is left out, as the contract refuses it)
    reservations = [_reservation_data(r) for r in snap.reservations
                    if r.job in queued and all(n in names for n, _ in r.alloc)]
    claims = [{"job": c.job, "gpus": c.gpus, "nodes": list(c.nodes),
               "victims": [v for v in c.victims if v in leaving], "at_s": min(0, c.at_s)}
              for c in snap.claims if c.job in queued and all(n in names for n in c.nodes)]
    if reservations:
        out["reservations"] = reservations
    if claims:
        out["claims"] = claims
    return out


def _reservation_data(r: ReservationSnap) -> dict[str, Any]:
    out: dict[str, Any] = {"job": r.job, "start_s": max(0, r.start_s),
                           "alloc": {node: list(ix) for node, ix in r.alloc}}
    if r.basis:
        out["basis"] = r.basis
    if r.after_job is not None:
        out["after_job"] = r.after_job
    for key in ("planned_at_s", "checked_at_s"):
        value = getattr(r, key)
        if value is not None:
            out[key] = min(0, value)
    return out


def horizon_s(hours: float) -> int:
    return max(1, int(round(hours * 3600)))


def _tenant_data(t: TenantSnap) -> dict[str, Any]:
    out: dict[str, Any] = {"name": t.name, "guaranteed_gpus": t.guaranteed_gpus,
                           "borrow_limit_gpus": t.borrow_limit_gpus,
                           "initial_usage_gpu_s": t.usage_gpu_s}
    for key in ("max_gpus_per_user", "default_runtime_s", "max_runtime_s"):
        if getattr(t, key) is not None:
            out[key] = getattr(t, key)
    return out


def _job_data(j: JobSnap, past: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": j.id, "tenant": j.tenant, "submit_at_s": min(0, j.submit_s),
                           "gpus": j.gpus}
    if j.owner is not None:
        out["owner"] = j.owner
    if j.array is not None:
        array_id, index, count, max_running = j.array
        out["array_task"] = {"array": array_id, "index": index, "count": count,
                             "max_running": max_running}
    for key in ("gpus_per_node", "gpu_type", "max_runtime_s", "checkpoint_interval_s",
                "checkpoint_time_s", "min_gpus"):
        value = getattr(j, key)
        if value is not None:
            out[key] = value
    for key in ("checkpointable", "preemptible", "interactive"):
        if getattr(j, key):
            out[key] = True
    if j.priority:
        out["priority"] = j.priority
    if j.restart_s:
        out["restart_s"] = j.restart_s
    if not j.checkpointable:  # the contract refuses checkpoint fields on such a job
        out.pop("checkpoint_interval_s", None)
        out.pop("checkpoint_time_s", None)
    if j.preemption_times_s:
        out["preemption_times_s"] = list(j.preemption_times_s)
    limit = j.max_runtime_s
    if not j.running:
        out["queued"] = True
        out["runtime_s"] = limit if limit is not None else past
        if j.depends_on:  # a running job's were met
            out["depends_on"] = [{"job": a, "when": w} for a, w in j.depends_on]
        return out
    started = min(0, j.started_s if j.started_s is not None else 0)
    out["submit_at_s"] = min(out["submit_at_s"], started)
    elapsed = -started
    # it ends at its limit: the work left is what the limit leaves of this run (at least
    # a second: a run past its limit is stopped by the core's timer at t=0 anyway)
    left = max(1, started + limit) if limit is not None else past
    out["runtime_s"] = elapsed + left
    running: dict[str, Any] = {"started_at_s": started,
                               "alloc": {node: list(ix) for node, ix in j.alloc}}
    if j.checkpointable and j.last_checkpoint_s is not None:
        running["last_checkpoint_s"] = max(out["submit_at_s"], min(0, j.last_checkpoint_s))
    if j.preempt_requested_s is not None:  # being preempted: it holds its GPUs till it stops
        stop: dict[str, Any] = {"requested_at_s": max(started, min(0, j.preempt_requested_s))}
        if j.preempted_for is not None:
            stop["for"] = j.preempted_for
        if j.checkpointing and j.checkpointable:
            stop["acknowledged"] = True
        running["preempting"] = stop
    out["running"] = running
    return out


# ---------------------------------------------------------------------------------------
# Changes


def apply_changes(data: Mapping[str, Any], changes: Changes, *,
                  ended: Mapping[str, tuple[str, str]] | None = None,
                  warnings: list[str] | None = None) -> dict[str, Any]:
    """The scenario data with the operator's changes made at t=0. Raises WhatIfError
    naming the flag of the first bad value. ``ended``: the values of ``--cancel`` that
    name a job that has ended (value -> (job id, state)), to say so. ``warnings``, when
    given, gets a line for each change that does nothing and for capacity left below the
    guarantees (:func:`capacity_warnings`)."""
    notes: list[str] = [] if warnings is None else warnings
    out = copy.deepcopy(dict(data))
    tenants = {t["name"]: t for t in out["tenants"]}
    pods = {p["name"]: p for p in out["cluster"]["pods"]}
    nodes = {n["name"] for p in pods.values() for n in p["nodes"]}
    jobs = {j["id"]: j for j in out["jobs"]}
    health = _health_at_start(out)
    was = {name: t["guaranteed_gpus"] for name, t in tenants.items()}
    quota_by: dict[str, tuple[str, tuple[int, int | None]]] = {}  # team -> (flag value, quota)
    for value in changes.set_quota:
        team, guaranteed, borrow = _quota(value, tenants)
        again = team in quota_by
        first = quota_by.setdefault(team, (value, (guaranteed, borrow)))
        if first[1] != (guaranteed, borrow):  # two answers for one team: which one?
            raise WhatIfError(f"--set-quota {value}: team {team} is already given "
                              f"--set-quota {first[0]}")
        if again:
            # the same quota again ("pretrain=064" after "pretrain=64"): applied once, and
            # compared with the snapshot's, not with the first copy's (it said "has that
            # quota already" of a team whose live quota was another: 2026-12-07)
            continue
        if (guaranteed == tenants[team]["guaranteed_gpus"]
                and borrow in (None, tenants[team]["borrow_limit_gpus"])):
            notes.append(f"--set-quota {value}: team {team} has that quota already "
                         f"({guaranteed}:{tenants[team]['borrow_limit_gpus']}); the change "
                         "does nothing")
        tenants[team]["guaranteed_gpus"] = guaranteed
        if borrow is not None:
            tenants[team]["borrow_limit_gpus"] = borrow
    added_by: dict[str, tuple[str, str]] = {}  # pod -> (flag value, count as written)
    added: dict[str, str] = {}  # node the what-if adds -> its --add-nodes value
    for value in changes.add_nodes:
        pod, count = _pair(value, "--add-nodes", "POD=N")
        if pod not in pods:
            raise WhatIfError(f"--add-nodes {value}: unknown pod {pod}; pods: "
                              + ", ".join(sorted(pods)))
        # two counts for one pod: add up, or the last? (the same value twice counts once,
        # so pod-a=2 twice added 2 and pod-a=2 with pod-a=3 added 5 until 2026-12-07)
        written = count.lstrip("+0") or "0"
        first = added_by.setdefault(pod, (value, written))
        if first[1] != written:
            raise WhatIfError(f"--add-nodes {value}: pod {pod} is already given "
                              f"--add-nodes {first[0]}; give a pod one count")
        if first[0] != value:
            continue  # the same count written otherwise ("pod-a = 2"): counts once
        room = MAX_NODES_PER_POD - len(pods[pod]["nodes"])
        if room < 1:
            raise WhatIfError(f"--add-nodes {value}: pod {pod} already has "
                              f"{MAX_NODES_PER_POD} nodes, the most a pod may have")
        n = _count(count, f"--add-nodes {value}", minimum=1, maximum=room)
        like = pods[pod]["nodes"][-1]
        for i in range(n):
            name = _new_node_name(pod, i, nodes)
            nodes.add(name)
            added[name] = value
            health[name] = "healthy"
            pods[pod]["nodes"].append({**like, "name": name})
    # a node given to two of the node flags: which one? (as two quotas for one team)
    named: dict[str, str] = {}
    for flag in ("drain", "undrain", "up"):
        for value in getattr(changes, flag):
            other = named.setdefault(value, flag)
            if other != flag:
                raise WhatIfError(f"--{flag} {value}: {value} is already given --{other} "
                                  f"{value}; give a node one of --drain, --undrain, --up")
    # the node flags, each from the node's health at the snapshot
    for flag, event, wants in (("drain", "node_drain", None), ("undrain", "node_undrain",
                                                               "draining"),
                               ("up", "node_up", "down")):
        for value in getattr(changes, flag):
            if value not in nodes:
                close = difflib.get_close_matches(value, list(nodes), n=1, cutoff=0.6)
                hint = (f" ({value} is a pod: --{flag} takes a node's name, once per node)"
                        if value in pods else
                        f" (--{flag} takes one node: give --{flag} once per node)"
                        if "," in value else f" (did you mean {close[0]}?)" if close else "")
                raise WhatIfError(f"--{flag} {value}: unknown node{hint}")
            now = health[value]
            if wants is None and now != "healthy":  # --drain: does nothing
                notes.append(f"--drain {value}: {value} is {now} already; the change does "
                             "nothing")
                continue
            if wants is None and value in added:  # added drained: adds nothing
                notes.append(f"--drain {value}: {value} is a node --add-nodes {added[value]} "
                             "adds; added drained, it takes no job, as if not added")
            if wants is not None and now != wants:
                raise WhatIfError(f"--{flag} {value}: {value} is not {_NODE_WORDS[wants]} "
                                  f"(it is {now}); --{flag} takes a node that is")
            out["events"].append({"at_s": 0, event: value})
            health[value] = "draining" if flag == "drain" else "healthy"
    cancelled: list[str] = []
    for value in changes.cancel:
        for job_id in _cancelled(value, jobs, ended or {}):
            if job_id not in cancelled:
                cancelled.append(job_id)
                out["events"].append({"at_s": 0, "cancel": job_id})
    settings = out.setdefault("settings", {})
    by_name = {s.name: s for s in SETTINGS}
    by_variable = {env_name(s): s for s in SETTINGS}  # as production names them
    setting_by: dict[str, tuple[str, Any]] = {}  # name -> (flag value, parsed)
    for value in changes.setting:
        name, raw = _pair(value, "--setting", "NAME=VALUE")
        setting = by_name.get(name) or by_variable.get(name.upper())
        if setting is None:
            raise WhatIfError(f"--setting {value}: unknown setting {name}; settings: "
                              + ", ".join(sorted(by_name)))
        name = setting.name
        try:
            parsed = parse_setting(setting, raw, f"--setting {name}")
        except ValueError as exc:
            raise WhatIfError(str(exc)) from None
        again = name in setting_by
        first = setting_by.setdefault(name, (value, parsed))
        if first[1] != parsed:
            raise WhatIfError(f"--setting {value}: {name} is already given "
                              f"--setting {first[0]}")
        if again:
            continue  # the same value again, written otherwise: applied once (as above)
        if parsed is not None and settings.get(name) == parsed:
            notes.append(f"--setting {value}: {name} is {_num(parsed)} already; the change "
                         "does nothing")
        elif name in NOT_SIMULATED:
            notes.append(f"--setting {value}: the what-if cannot show what {name} changes: "
                         f"{NOT_SIMULATED[name]}")
        if parsed is None:
            settings.pop(name, None)
        else:
            settings[name] = parsed
    # the live rule (services.cluster): the guarantees fit the cluster's GPUs, every node
    # counted whatever its health (drained and down nodes come back); capacity below them
    # today is a warning, not a refusal
    cluster = sum(n["gpus"] for p in pods.values() for n in p["nodes"])
    total = sum(t["guaranteed_gpus"] for t in tenants.values())
    if total > cluster:
        # the flags that raised a guarantee are the ones to change (a lowered or unchanged
        # one is not the cause)
        raised = [f"--set-quota {v}" for team, (v, (g, _b)) in quota_by.items() if g > was[team]]
        flag = ", ".join(raised) or "the snapshot"
        raise GuaranteesPastCluster(f"{flag}: the guarantees would add up to {total} GPUs; "
                                    f"the cluster has {cluster}")
    notes += capacity_warnings(out, health)
    return out


_NODE_WORDS = {"draining": "drained", "down": "down"}


def _health_at_start(data: Mapping[str, Any]) -> dict[str, str]:
    """Each node's health at t=0 as the scenario data says (its events at 0)."""
    health = {n["name"]: "healthy" for p in data["cluster"]["pods"] for n in p["nodes"]}
    moves = {"node_drain": "draining", "node_down": "down", "node_up": "healthy",
             "node_undrain": "healthy"}
    for ev in data.get("events", ()):
        if ev.get("at_s") == 0:
            for kind, to in moves.items():
                if kind in ev:
                    health[ev[kind]] = to
    return health


def capacity_warnings(data: Mapping[str, Any], health: Mapping[str, str]) -> list[str]:
    """A line when the GPUs the scheduler may place batch jobs on (the healthy nodes',
    less the interactive slice) are fewer than the teams' guarantees: then some team
    cannot get its guarantee, and the scheduler preempts to honour the others."""
    total = sum(t["guaranteed_gpus"] for t in data["tenants"])
    usable = sum(n["gpus"] for p in data["cluster"]["pods"] for n in p["nodes"]
                 if health.get(n["name"]) == "healthy")
    slice_ = int(data.get("settings", {}).get("interactive_reserved_gpus") or 0)
    if usable < total:
        return [f"capacity below the guarantees: {usable} GPUs are schedulable (on nodes "
                f"healthy, not drained or down), fewer than the {total} the teams are "
                "guaranteed"]
    if slice_ and usable - slice_ < total:
        batch = max(0, usable - slice_)
        return [f"capacity below the guarantees: of the {usable} schedulable GPUs, "
                f"interactive_reserved_gpus={slice_} keeps {min(slice_, usable)} for "
                f"interactive jobs; batch jobs can use {batch}, fewer than the {total} the "
                "teams are guaranteed"]
    return []


#: ``--cancel``'s forms: a job's number, a task's ``<array>_<index>``, ``<array>_*``
_TASK = re.compile(r"([0-9]+)_([0-9]+|\*)")


def _cancelled(value: str, jobs: Mapping[str, Mapping[str, Any]],
               ended: Mapping[str, tuple[str, str]]) -> list[str]:
    """The job ids ``--cancel value`` takes out: a job by its number, a task of an array
    by its name (``8_3``, as gpuq shows it) or every task of an array running or queued
    (``8_*``, as ``gpuq cancel 8_*``)."""
    where = f"--cancel {value}"
    if value in ended:
        job_id, state = ended[value]
        what = f"job {job_id}" if value == job_id else f"task {value} (job {job_id})"
        raise WhatIfError(f"{where}: {what} has ended ({state})")
    task = _TASK.fullmatch(value) if value.isascii() else None
    if task is None:
        if value in jobs:
            return [value]
        if not (value.isascii() and value.isdigit()):  # (the snapshot's ids: pks)
            raise WhatIfError(f"{where}: not a job id (a job's number, or an array task's "
                              "<array>_<index>, as gpuq queue shows them; <array>_* for "
                              "every task)")
        raise WhatIfError(f"{where}: no such job running or queued")
    array, index = task.groups()
    tasks = [j["id"] for j in jobs.values() if (j.get("array_task") or {}).get("array") == array
             and (index == "*" or str(j["array_task"]["index"]) == index)]
    if not tasks:
        what = f"no task of array {array}" if index == "*" else "no such task"
        raise WhatIfError(f"{where}: {what} running or queued")
    return tasks


def _pair(value: str, flag: str, form: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise WhatIfError(f"{flag} {value!r}: must be {form}")
    return name.strip(), rest.strip()


def _count(text: str, where: str, *, minimum: int, maximum: int, what: str = "") -> int:
    # ASCII digits only: int() also reads "1_0" and other scripts' digits, which an
    # operator did not mean to type
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise WhatIfError(f"{where}: {text!r} is not a whole number")
    n = int(text)
    if not minimum <= n <= maximum:
        raise WhatIfError(f"{where}: {what or 'must be'} from {minimum} to {maximum}")
    return n


def _quota(value: str, tenants: Mapping[str, Any]) -> tuple[str, int, int | None]:
    team, rest = _pair(value, "--set-quota", "TEAM=GUARANTEE[:BORROW]")
    if team not in tenants:
        raise WhatIfError(f"--set-quota {value}: unknown team {team}; teams: "
                          + ", ".join(sorted(tenants)))
    guaranteed, sep, borrow = rest.partition(":")
    where = f"--set-quota {value}"
    g = _count(guaranteed, where, minimum=0, maximum=MAX_GPUS,
               what="the guarantee must be")
    b = (_count(borrow, where, minimum=0, maximum=MAX_GPUS, what="the borrow limit must be")
         if sep else None)
    return team, g, b


def _new_node_name(pod: str, i: int, taken: set[str]) -> str:
    k = i
    while True:
        name = f"{pod}-whatif-{k:03d}"
        if name not in taken:
            return name
        k += 1


# ---------------------------------------------------------------------------------------
# The two runs and their comparison


@dataclass(slots=True)
class WhatIf:
    """Both runs compared: what the command prints and ``--json`` writes."""

    taken_at: str
    horizon_s: int
    changes: list[str]
    assumptions: list[str]
    tenants: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    series: dict[str, Any]
    timings_s: dict[str, float] = field(default_factory=dict)
    #: processes the two runs took (1: one after the other)
    workers: int = 1
    #: the jobs ``--cancel`` took out at t=0, running or queued: {"id", "name", "tenant",
    #: "running"}
    cancelled: list[dict[str, Any]] = field(default_factory=list)
    #: changes that do nothing, capacity left below the guarantees: one line each
    warnings: list[str] = field(default_factory=list)
    #: whose settings the runs use, and those not at their defaults (name -> value)
    settings_from: str = ""
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_whatif(snap: Snapshot, changes: Changes, *, hours: float = DEFAULT_HOURS,
               progress: ProgressFn | None = None, workers: int | None = None
               ) -> tuple[WhatIf, dict[str, Any]]:
    """Both runs. Returns the comparison and the baseline scenario data (what
    ``--export-scenario`` writes). Raises WhatIfError for a bad flag.

    ``workers``: 2 runs the baseline and the changed run side by side in two processes
    (``sim.parallel``), 1 one after the other here; None: 2 where two cores are usable.
    The answer is the same either way."""
    import time

    check_hours(hours)
    if workers is None:
        workers = default_workers()
    if not 1 <= workers <= MAX_WORKERS:
        raise WhatIfError(f"--workers {workers}: must be 1 or {MAX_WORKERS}")
    started = time.perf_counter()
    base_data = snapshot_scenario(snap, hours)
    warnings: list[str] = []
    what_data = apply_changes(base_data, changes, ended=snap.ended, warnings=warnings)
    built = time.perf_counter()
    # (a task or a whole array named by --cancel: the job ids it took out)
    cancelled = {ev["cancel"] for ev in what_data["events"] if "cancel" in ev}
    # each run validates its own scenario (side by side: in its child, which also
    # summarizes its result there, so the parent neither validates nor receives every
    # job's record)
    try:
        summaries = run_scenarios(
            (base_data, what_data), _run_progress(progress, workers), workers=workers,
            summarize=functools.partial(summarize_run, excluded=tuple(sorted(cancelled))))
    except InvalidScenario as exc:  # a live state the contract cannot hold: say where
        what = ("the snapshot", "the changes")[exc.index]
        raise WhatIfError(f"{what}: {exc.message}") from exc
    ran = time.perf_counter()
    out = compare(summaries[0], summaries[1], excluded=cancelled)
    running = {j.id: j for j in snap.jobs}
    out.cancelled = [{"id": job_id, "name": running[job_id].name,
                      "tenant": running[job_id].tenant, "running": running[job_id].running}
                     for job_id in sorted(cancelled, key=_id_key)]
    out.warnings = [*snap.settings_notes, *warnings]
    out.settings_from = snap.settings_from
    defaults = settings_of(SchedulerConfig())
    out.settings = {name: value for name, value in sorted(snap.settings.items())
                    if defaults.get(name) != value}
    out.taken_at = snap.taken_at
    out.changes = changes.words()
    out.timings_s = {"snapshot": round(snap.read_s, 3), "build": round(built - started, 3),
                     "runs": round(ran - built, 3)}
    out.workers = workers
    if progress is not None:
        progress(1.0, "done")
    return out, base_data


def _run_progress(progress: ProgressFn | None, workers: int) -> list[Callable[[float], None]]:
    """Each run's progress callback (its fraction done) as the caller's one bar: one run
    after the other fills the first half then the second; side by side, the bar is their
    mean ("both runs")."""
    done = [0.0, 0.0]
    labels = ("baseline", "what if")

    def one(index: int) -> Callable[[float], None]:
        def report(fraction: float) -> None:
            if progress is None:
                return
            done[index] = fraction
            if workers > 1:
                progress(sum(done) / 2 * 0.98, "both runs")
            else:
                progress((index + fraction) / 2 * 0.98, labels[index])
        return report

    return [one(0), one(1)]


def team_stats(result: Mapping[str, Any], scenario: Scenario, *,
               excluded: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """Per team, from a result document: waits of the jobs queued at t=0, GPUs held on
    average over the horizon, preemptions and GPU-hours lost (work redone or reloaded)."""
    until = scenario.until_s
    skip = set(excluded)
    jobs = result["jobs"]
    stats: dict[str, dict[str, Any]] = {}
    waits: dict[str, list[int]] = {}
    for t in scenario.tenants:
        stats[t.name] = {"waiting": 0, "started": 0, "ended": 0, "gpu_s": 0, "preemptions": 0,
                         "gpu_s_lost": 0, "failed": 0}
        waits[t.name] = []
    for j in scenario.jobs:
        rec = jobs[j.id]
        row = stats[j.spec.tenant]
        for run in rec["runs"]:
            start = max(0, run["start_s"])
            end = until if run["end_s"] is None else min(until, run["end_s"])
            if end > start:
                row["gpu_s"] += (end - start) * sum(run["alloc"].values())
        row["preemptions"] += rec["preemptions"]
        row["gpu_s_lost"] += rec["gpu_s_lost"]
        if rec["state"] == "FAILED":  # (the run stops at the horizon: failed within it)
            row["failed"] += 1
        if j.running is not None or j.id in skip:
            continue
        row["waiting"] += 1
        first = rec["first_start_s"]
        if first is not None:
            row["started"] += 1
        elif rec["state"] in ENDED_UNSTARTED:
            row["ended"] += 1
            continue  # it does not wait: the run ended it (a dependency that failed)
        waits[j.spec.tenant].append((first if first is not None else until) - j.spec.submit_s)
    out: dict[str, dict[str, Any]] = {}
    for name, row in stats.items():
        w = waits[name]
        out[name] = {
            "waiting": row["waiting"],
            "started": row["started"],
            "ended": row["ended"],
            "mean_wait_s": round(math.fsum(w) / len(w), 1) if w else None,
            "p95_wait_s": percentile(w, 95),
            "gpus_held": round(row["gpu_s"] / until, 2),
            "preemptions": row["preemptions"],
            "gpu_hours_lost": round(row["gpu_s_lost"] / 3600.0, 2),
            "failed": row["failed"],
        }
    return out


def job_starts(result: Mapping[str, Any], scenario: Scenario) -> dict[str, int | None]:
    """Job id -> seconds from the snapshot to its first start after it, for the jobs
    queued at t=0 (None: not within the horizon)."""
    jobs = result["jobs"]
    return {j.id: jobs[j.id]["first_start_s"] for j in scenario.jobs if j.running is None}


def job_ends(result: Mapping[str, Any], scenario: Scenario) -> dict[str, str]:
    """Job id -> its final state, for the jobs queued at t=0 that the run ended without a
    start (cancelled: a dependency that can no longer be met, or ``--cancel``)."""
    jobs = result["jobs"]
    return {j.id: jobs[j.id]["state"] for j in scenario.jobs
            if j.running is None and jobs[j.id]["first_start_s"] is None
            and jobs[j.id]["state"] in ENDED_UNSTARTED}


_TEAM_FIELDS = ("mean_wait_s", "p95_wait_s", "gpus_held", "preemptions", "gpu_hours_lost",
                "started", "ended", "failed")
#: the final states a queued job can reach without a start: it no longer waits
ENDED_UNSTARTED = frozenset({"CANCELLED", "FAILED"})


def summarize_run(result: Mapping[str, Any], scenario: Scenario, *,
                  excluded: Iterable[str] = ()) -> dict[str, Any]:
    """What the comparison reads of one run (made where the run ran: a few megabytes
    instead of every job's record): per team its figures and GPUs held over the horizon,
    the starts of the jobs queued at t=0 with their teams and sizes. Both scenarios hold
    the same teams and jobs (a change edits them, a cancel is an event), so either run's
    is read as the baseline's."""
    return {
        "until_s": scenario.until_s,
        "tenants": [t.name for t in scenario.tenants],
        "teams": team_stats(result, scenario, excluded=excluded),
        "starts": job_starts(result, scenario),
        "ends": job_ends(result, scenario),
        "sizes": {j.id: (j.spec.tenant, j.spec.gpus) for j in scenario.jobs
                  if j.running is None},
        "names": {j.id: job_name(j.id, j.spec.array_id, j.spec.array_index)
                  for j in scenario.jobs if j.running is None},
        "series": held_series(result, scenario),
    }


def job_name(job_id: str, array_id: str | None, index: int | None) -> str:
    """A job as every other list names it: a task of an array ``<array>_<index>``."""
    return job_id if array_id is None else f"{array_id}_{index}"


def compare(before: Mapping[str, Any], after: Mapping[str, Any], *,
            excluded: Iterable[str] = ()) -> WhatIf:
    """The two runs' summaries (``summarize_run``) side by side."""
    skip = set(excluded)
    b_stats, a_stats = before["teams"], after["teams"]
    tenants = []
    for name in before["tenants"]:
        row: dict[str, Any] = {"name": name, "waiting": b_stats[name]["waiting"]}
        for key in _TEAM_FIELDS:
            row[f"baseline_{key}"] = b_stats[name][key]
            row[f"whatif_{key}"] = a_stats[name][key]
        tenants.append(row)
    b_starts, a_starts = before["starts"], after["starts"]
    until = before["until_s"]
    sizes = before["sizes"]
    names = before.get("names", {})
    jobs = []
    b_ends, a_ends = before.get("ends", {}), after.get("ends", {})
    for job_id, b in b_starts.items():
        a = a_starts.get(job_id)
        b_end, a_end = b_ends.get(job_id), a_ends.get(job_id)
        # a cancelled job did not move: it left (the table says so, apart); nor did one
        # a run ended without a start (it has no start to move)
        left = job_id in skip or b_end is not None or a_end is not None
        moved = None if left else (until if a is None else a) - (until if b is None else b)
        tenant, gpus = sizes[job_id]
        jobs.append({"id": job_id, "name": names.get(job_id, job_id), "tenant": tenant,
                     "gpus": gpus, "baseline_start_in_s": b, "whatif_start_in_s": a,
                     "cancelled": job_id in skip, "moved_s": moved,
                     # one run starts it within the horizon, the other not: the move is
                     # at least moved_s (counted to the end of the horizon)
                     "moved_lower_bound": bool(moved) and (a is None) != (b is None),
                     "baseline_ended": None if job_id in skip else b_end,
                     "whatif_ended": None if job_id in skip else a_end})
    jobs.sort(key=lambda j: (-abs(j["moved_s"] or 0), _id_key(j["id"])))
    return WhatIf(taken_at="", horizon_s=until, changes=[], assumptions=list(ASSUMPTIONS),
                  tenants=tenants, jobs=jobs,
                  series={"step_s": _step(until),
                          "baseline": before["series"], "whatif": after["series"]})


def _id_key(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)


def _step(until: int) -> int:
    return max(1, math.ceil(until / (SERIES_POINTS - 1)))


def held_series(result: Mapping[str, Any], scenario: Scenario) -> dict[str, list[int]]:
    """Per team, the GPUs it holds at 0, step, 2 step, ... up to the horizon."""
    until = scenario.until_s
    step = _step(until)
    points = until // step + 1
    tenant_of = {j.id: j.spec.tenant for j in scenario.jobs}
    deltas: dict[str, list[int]] = {t.name: [0] * (points + 1) for t in scenario.tenants}
    for job_id, rec in result["jobs"].items():
        d = deltas[tenant_of[job_id]]
        for run in rec["runs"]:
            gpus = sum(run["alloc"].values())
            start = max(0, run["start_s"])
            end = until + 1 if run["end_s"] is None else run["end_s"]
            first = -(-start // step)  # the first sample at or after the start
            last = -(-end // step)  # samples from here on are after the end
            if first < min(last, points):
                d[first] += gpus
                d[min(last, points)] -= gpus
    out: dict[str, list[int]] = {}
    for name, d in deltas.items():
        acc, values = 0, []
        for k in range(points):
            acc += d[k]
            values.append(acc)
        out[name] = values
    return out


# ---------------------------------------------------------------------------------------
# Output


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def check_hours(hours: float) -> None:
    """The horizon's range, the command's and the page's: one second to MAX_HOURS."""
    if not (math.isfinite(hours) and MIN_HOURS <= hours <= MAX_HOURS):
        # (as given: 336.0001 read "--hours 336: must be ... to 336")
        raise WhatIfError(f"--hours {hours:.15g}: must be from one second (1/3600) to "
                          f"{MAX_HOURS:g}")


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def render_table(w: WhatIf, *, top: int = TOP_MOVED) -> str:
    lines = [f"What if, from the live state at {w.taken_at}, {w.horizon_s / 3600:g} h ahead",
             "  changes: " + (", ".join(w.changes) or "none (both runs are the baseline)")]
    if w.warnings:
        lines.append("  warnings:")
        lines += [f"    ! {line}" for line in w.warnings]
    if w.settings_from:
        lines.append(f"  settings: {w.settings_from}; " + (
            "not at their defaults: " + ", ".join(f"{k}={_num(v)}" for k, v in w.settings.items())
            if w.settings else "all at their defaults"))
    lines.append("  assumes:")
    lines += [f"    - {a}" for a in w.assumptions]
    lines.append("")
    pair = "before  after"
    head = (f"{'team':<16} {'waiting':>7} | {'mean wait h':>13} | {'p95 wait h':>13} | "
            f"{'mean GPUs held':>15} | {'preemptions':>11} | {'GPU-h lost':>13} | "
            f"{'failed':>11}")
    lines += [head, f"{'':<16} {'':>7} | {pair:>13} | {pair:>13} | "
                    f"{'before    after':>15} | {'before after':>11} | {pair:>13} | "
                    f"{'before after':>11}",
              "-" * len(head)]
    for t in w.tenants:
        lines.append(
            f"{t['name']:<16} {t['waiting']:>7} | "
            f"{_h(t['baseline_mean_wait_s']):>6} {_h(t['whatif_mean_wait_s']):>6} | "
            f"{_h(t['baseline_p95_wait_s']):>6} {_h(t['whatif_p95_wait_s']):>6} | "
            f"{_num(t['baseline_gpus_held']):>7} {_num(t['whatif_gpus_held']):>7} | "
            f"{t['baseline_preemptions']:>5} {t['whatif_preemptions']:>5} | "
            f"{_num(t['baseline_gpu_hours_lost']):>6} {_num(t['whatif_gpu_hours_lost']):>6} | "
            f"{t.get('baseline_failed', 0):>5} {t.get('whatif_failed', 0):>5}")
    if any(t[f"{run}_mean_wait_s"] is None for t in w.tenants for run in ("baseline", "whatif")):
        # (the moved jobs' "-" is "not within the horizon": said with their list)
        lines.append("(mean and p95 wait: - = nothing to count: no job of the team queued "
                     "at the snapshot, or only jobs the run ended unstarted)")
    moved = moved_most(w.jobs, top)
    lines.append("")
    if w.cancelled:
        lines.append("Cancelled at t=0 by --cancel (left out of the waits): "
                     + ", ".join(cancelled_words(w.cancelled)))
    ended = ended_unstarted(w.jobs)
    if ended:
        lines.append("Queued jobs a run ended without a start (left out of that run's "
                     "waits; a dependency that can no longer be met):")
        for j in ended:
            lines.append(f"  {j.get('name', j['id']):>10} {j['tenant']:<16} before: "
                         f"{fate(j, 'baseline')}, after: {fate(j, 'whatif')}")
    if not moved:
        lines.append("No queued job's start moves by a minute or more.")
        return "\n".join(lines) + "\n"
    lines.append(f"The jobs whose start moves the most (start in h from now; - = not "
                 f"within {w.horizon_s / 3600:g} h; >+x or <-x: moved at least x, one run "
                 "starts it within the horizon, the other not):")
    lines.append(f"  {'job':>10} {'team':<16} {'GPUs':>5} {'before':>7} {'after':>7} "
                 f"{'moved h':>8}")
    for j in moved:
        lines.append(f"  {j.get('name', j['id']):>10} {j['tenant']:<16} {j['gpus']:>5} "
                     f"{_h(j['baseline_start_in_s']):>7} {_h(j['whatif_start_in_s']):>7} "
                     f"{moved_words(j):>8}")
    return "\n".join(lines) + "\n"


def moved_most(jobs: Iterable[Mapping[str, Any]], top: int = TOP_MOVED
               ) -> list[Mapping[str, Any]]:
    """The compared jobs whose start moves the most (``WhatIf.jobs`` is in that order),
    leaving out moves under a minute (the table would show them as +0.00)."""
    return [j for j in jobs
            if j["moved_s"] is not None and abs(j["moved_s"]) >= MOVED_AT_LEAST_S][:top]


def moved_words(job: Mapping[str, Any]) -> str:
    """A job's move in hours, "+1.50"; a lower bound (``moved_lower_bound``: one run
    starts it within the horizon, the other not) as ">+23.77" or "<-22.00"."""
    moved = job["moved_s"] / 3600
    if not job.get("moved_lower_bound"):
        return f"{moved:+.2f}"
    return f"{'>' if moved > 0 else '<'}{moved:+.2f}"


#: more tasks of one array than this are said as a count ("3,000 tasks of array 64")
CANCELLED_TASKS_LISTED = 3


def cancelled_words(cancelled: Iterable[Mapping[str, Any]]) -> list[str]:
    """``WhatIf.cancelled`` as the table and the page show it: "7 (running)", a task by its
    name, "8_3 (queued)"; more than :data:`CANCELLED_TASKS_LISTED` tasks of one array as
    "3,000 tasks of array 64 (64 running, 2,936 queued)" where the first task was (``--cancel
    64_*`` printed all 3,000 on one line, about 40 KB; an operator's session, 2026-12-07)."""
    items = list(cancelled)
    arrays: dict[str, list[Mapping[str, Any]]] = {}
    for c in items:
        name = str(c.get("name", c["id"]))
        if "_" in name:
            arrays.setdefault(name.split("_", 1)[0], []).append(c)
    out: list[str] = []
    said: set[str] = set()
    for c in items:
        name = str(c.get("name", c["id"]))
        array = name.split("_", 1)[0] if "_" in name else None
        tasks = arrays.get(array or "", [])
        if array is None or len(tasks) <= CANCELLED_TASKS_LISTED:
            out.append(f"{name} ({'running' if c['running'] else 'queued'})")
        elif array not in said:
            said.add(array)
            running = sum(1 for t in tasks if t["running"])
            parts = [f"{n:,} {what}" for n, what in ((running, "running"),
                                                      (len(tasks) - running, "queued")) if n]
            out.append(f"{len(tasks):,} tasks of array {array} ({', '.join(parts)})")
    return out


def ended_unstarted(jobs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The compared jobs that a run ended without a start (a job recorded before
    ``baseline_ended`` was kept has neither key)."""
    return [j for j in jobs if j.get("baseline_ended") or j.get("whatif_ended")]


def fate(job: Mapping[str, Any], run: str) -> str:
    """What ``run`` (baseline | whatif) did with a queued job, in words."""
    ended = job.get(f"{run}_ended")
    if ended:
        return ended.lower()
    start = job[f"{run}_start_in_s"]
    return "not started" if start is None else f"starts in {_h(start)} h"


def scenario_text(data: Mapping[str, Any], path: str | Path) -> str:
    """Scenario data as YAML, or JSON by a ``.json`` suffix (as ``simulate`` reads)."""
    if Path(path).suffix.lower() == ".json":
        return json.dumps(data, indent=1, sort_keys=False) + "\n"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: 100k jobs
    return yaml.dump(dict(data), Dumper=dumper, sort_keys=False, default_flow_style=None,
                     width=100)


def dump_scenario(data: Mapping[str, Any], path: str | Path) -> None:
    """Write scenario data (:func:`scenario_text`) whole or not at all."""
    write_files([(Path(path), scenario_text(data, path))])


def parse_changes(set_quota: Sequence[str] = (), add_nodes: Sequence[str] = (),
                  drain: Sequence[str] = (), cancel: Sequence[str] = (),
                  setting: Sequence[str] = (), undrain: Sequence[str] = (),
                  up: Sequence[str] = ()) -> Changes:
    """The command line's change flags, stripped. An empty value is refused (a flag given
    nothing is a mistake, not "no change"); a value given twice counts once."""
    forms = {"set_quota": "TEAM=GUARANTEE[:BORROW]", "add_nodes": "POD=N", "drain": "NODE",
             "cancel": "JOB", "setting": "NAME=VALUE", "undrain": "NODE", "up": "NODE"}

    def clean(flag: str, values: Sequence[str]) -> tuple[str, ...]:
        out: list[str] = []
        for v in values:
            v = (v or "").strip()
            if not v:
                raise WhatIfError(f"--{flag.replace('_', '-')} '': must be {forms[flag]}")
            if v not in out:
                out.append(v)
        return tuple(out)

    return Changes(clean("set_quota", set_quota), clean("add_nodes", add_nodes),
                   clean("drain", drain), clean("cancel", cancel), clean("setting", setting),
                   clean("undrain", undrain), clean("up", up))
