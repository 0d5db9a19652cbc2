"""Scenario files: load YAML or JSON, validate every field, build frozen definitions.

The format is the public contract of ``SCENARIOS.md`` (restated in ``docs/simulator.md``).
Every problem is reported as one :class:`ScenarioError` whose message starts with the path
of the offending field (``jobs[3].gpus: must be a positive integer``), so an operator can
fix a 100,000-job file from one line of output.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scheduler_app.core.types import (
    DEPENDENCY_KINDS,
    MAX_ARRAY_TASKS,
    MAX_GPUS,
    SETTINGS,
    JobSpec,
    NodeSpec,
    SchedulerConfig,
    TenantSpec,
)

#: Anything later than this (ten years) is a typo, not a scenario.
MAX_TIME_S = 10 * 365 * 86400
MAX_NODES_PER_POD = 100_000
MAX_PRIORITY = 1_000_000_000

#: The simulator bounds a tick by work, not wall time, so its results are reproducible.
DEFAULT_TICK_WORK_BUDGET = 500

EVENT_KINDS = ("node_down", "node_up", "node_drain", "node_undrain", "cancel", "set_quota")


class ScenarioError(ValueError):
    """A malformed scenario. ``str(err)`` is one line naming the field path."""


# ---------------------------------------------------------------------------------------
# Definitions (frozen: a scenario never changes once loaded)


@dataclass(frozen=True, slots=True)
class NodeDef:
    """A node listed by name (the extension for a live cluster, whose nodes are not named
    ``<pod>-000``): its own GPU count, type and rail."""

    name: str
    gpus: int
    gpu_type: str | None = None
    rail: int = 0


@dataclass(frozen=True, slots=True)
class PodDef:
    name: str
    nodes: int
    gpus_per_node: int
    gpu_type: str | None = None
    #: the nodes one by one, when the pod lists them (then ``nodes`` is their number and
    #: ``gpus_per_node`` the largest of their GPU counts)
    listed: tuple[NodeDef, ...] | None = None

    def node_names(self) -> tuple[str, ...]:
        if self.listed is not None:
            return tuple(n.name for n in self.listed)
        # Zero-padded to at least 3 digits (pod-a-000); wider pods pad wider so that the
        # names still sort in node order (pod-a-0999 < pod-a-1000).
        width = max(3, len(str(self.nodes - 1)))
        return tuple(f"{self.name}-{i:0{width}d}" for i in range(self.nodes))

    def node_defs(self) -> tuple[NodeDef, ...]:
        if self.listed is not None:
            return self.listed
        return tuple(NodeDef(name, self.gpus_per_node, self.gpu_type)
                     for name in self.node_names())

    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.node_defs())


@dataclass(frozen=True, slots=True)
class TenantDef:
    name: str
    guaranteed_gpus: int
    borrow_limit_gpus: int = 0
    initial_usage_gpu_s: float = 0.0
    max_gpus_per_user: int | None = None  # GPUs one owner may hold at once
    default_runtime_s: int | None = None  # the limit of a job that declares none
    max_runtime_s: int | None = None  # the largest limit a job may declare

    def to_spec(self) -> TenantSpec:
        return TenantSpec(
            name=self.name,
            guaranteed_gpus=self.guaranteed_gpus,
            borrow_limit_gpus=self.borrow_limit_gpus,
            usage_gpu_s=float(self.initial_usage_gpu_s),
            usage_at_s=0,
            max_gpus_per_user=self.max_gpus_per_user,
            default_runtime_s=self.default_runtime_s,
            max_runtime_s=self.max_runtime_s,
        )


@dataclass(frozen=True, slots=True)
class RunningDef:
    """A job already running at t=0 (the carried-in state extension, docs/scenarios.md)."""

    started_at_s: int  # when its current run started (<= 0)
    alloc: tuple[tuple[str, tuple[int, ...]], ...]  # (node, GPU indices), by node name
    progress_s: int  # useful work done by t=0
    last_checkpoint_s: int | None = None  # when its last checkpoint was written (<= 0)
    #: being preempted at t=0: when it was asked to stop (<= 0; None: not asked)
    preempt_requested_s: int | None = None
    preempted_for: str | None = None  # the job the preemption makes room for
    checkpointing: bool = False  # it acknowledged: writing its checkpoint (CHECKPOINTING)


@dataclass(frozen=True, slots=True)
class ReservationDef:
    """A reservation the live scheduler published for a queued job (the carried-in
    extension): the GPUs it holds for it and when the job starts on them."""

    job: str
    start_s: int  # >= 0
    alloc: tuple[tuple[str, tuple[int, ...]], ...]
    basis: str = ""
    after_job: str | None = None
    planned_at_s: int | None = None  # <= 0
    checked_at_s: int | None = None  # <= 0


@dataclass(frozen=True, slots=True)
class ClaimDef:
    """A reclaim claim under way at t=0 (the carried-in extension): the nodes promised to
    a queued head while its victims, being preempted, checkpoint and exit."""

    job: str  # the head
    gpus: int
    nodes: tuple[str, ...]
    victims: tuple[str, ...]
    at_s: int  # <= 0


@dataclass(frozen=True, slots=True)
class JobDef:
    """A job of the scenario: what it asks the scheduler for, and how it really behaves."""

    spec: JobSpec  # what the scheduler sees (seq = position in the file)
    runtime_s: int  # simulated truth: useful work needed to finish
    ignores_preempt: bool = False  # simulated misbehaviour
    fails_after_s: int | None = None  # simulated truth: each run exits failed this late
    running: RunningDef | None = None  # running at t=0 (carried in)
    queued: bool = False  # waiting in its queue at t=0 (carried in)
    preemption_times_s: tuple[int, ...] = ()  # preemptions before t=0 (the per-day cap)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def carried_in(self) -> bool:
        """In the system at t=0: restored then as running or queued, not submitted."""
        return self.running is not None or self.queued


@dataclass(frozen=True, slots=True)
class EventDef:
    """One scenario event. ``target`` is a node name, a job id or a tenant name."""

    index: int  # position in the file: the order of events sharing an instant
    at_s: int
    kind: str  # one of EVENT_KINDS
    target: str
    guaranteed_gpus: int | None = None  # set_quota only; None: unchanged
    borrow_limit_gpus: int | None = None  # set_quota only; None: unchanged


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    until_s: int
    settings: tuple[tuple[str, Any], ...]  # sorted (key, value) pairs as given
    pods: tuple[PodDef, ...]
    tenants: tuple[TenantDef, ...]
    jobs: tuple[JobDef, ...]
    events: tuple[EventDef, ...]
    #: the carried-in plans, in the live scheduler's order (docs/scenarios.md)
    reservations: tuple[ReservationDef, ...] = ()
    claims: tuple[ClaimDef, ...] = ()

    def node_specs(self) -> list[NodeSpec]:
        return [
            NodeSpec(name=n.name, pod=pod.name, gpus=n.gpus, gpu_type=n.gpu_type, rail=n.rail)
            for pod in self.pods
            for n in pod.node_defs()
        ]

    def tenant_specs(self) -> list[TenantSpec]:
        return [t.to_spec() for t in self.tenants]

    def total_gpus(self) -> int:
        return sum(p.total_gpus() for p in self.pods)

    def carries_in(self) -> bool:
        """Some job is already in the system at t=0 (the carried-in state extension)."""
        return any(j.carried_in for j in self.jobs)

    def config(self, policy: str = "full") -> SchedulerConfig:
        values: dict[str, Any] = {"tick_work_budget": DEFAULT_TICK_WORK_BUDGET}
        values.update(dict(self.settings))
        values["policy"] = policy
        return SchedulerConfig(**values)


# ---------------------------------------------------------------------------------------
# Loading


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (YAML, or JSON by its ``.json`` suffix)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    return parse_scenario(text, json_format=path.suffix.lower() == ".json", source=str(path))


def parse_scenario(text: str, *, json_format: bool = False, source: str = "scenario") -> Scenario:
    if json_format:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(
                f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
            ) from exc
    else:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x on 100k jobs
        try:
            data = yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ScenarioError(f"{source}: not valid YAML{where}: {problem}") from exc
    return validate_scenario(data)


# ---------------------------------------------------------------------------------------
# Validation helpers. Each takes the field path for its message.

_TOP_KEYS = ("name", "until_s", "settings", "cluster", "tenants", "jobs", "events",
             "reservations", "claims")
#: the settings a scenario may give, with their minimums: the core's one table (production
#: reads the same table from SCHEDULER_<NAME> variables)
#: name -> (minimum, maximum)
_SETTINGS_INT = {st.name: (int(st.minimum), int(st.maximum)) for st in SETTINGS
                 if not st.is_float}
_SETTINGS_FLOAT = {st.name: (st.minimum, st.maximum) for st in SETTINGS if st.is_float}
_POD_KEYS = ("name", "nodes", "gpus_per_node", "gpu_type")
_NODE_KEYS = ("name", "gpus", "gpu_type", "rail")
_RUNNING_KEYS = ("started_at_s", "alloc", "progress_s", "last_checkpoint_s", "preempting")
_PREEMPTING_KEYS = ("requested_at_s", "for", "acknowledged")
_RESERVATION_KEYS = ("job", "start_s", "alloc", "basis", "after_job", "planned_at_s",
                     "checked_at_s")
_CLAIM_KEYS = ("job", "gpus", "nodes", "victims", "at_s")
_TENANT_KEYS = ("name", "guaranteed_gpus", "borrow_limit_gpus", "initial_usage_gpu_s",
                "max_gpus_per_user", "default_runtime_s", "max_runtime_s")
_JOB_KEYS = (
    "id", "tenant", "submit_at_s", "gpus", "gpus_per_node", "gpu_type", "priority",
    "runtime_s", "max_runtime_s", "checkpointable", "checkpoint_interval_s",
    "checkpoint_time_s", "restart_s", "preemptible", "interactive", "min_gpus",
    "ignores_preempt", "running", "queued", "preemption_times_s", "owner",
    "fails_after_s", "depends_on", "array", "array_task",
)
_ARRAY_TASK_KEYS = ("array", "index", "count", "max_running")
_DEPENDENCY_KEYS = ("job", "when")
_ARRAY_KEYS = ("count", "max_running")
_QUOTA_KEYS = ("tenant", "guaranteed_gpus", "borrow_limit_gpus")


def _fail(path: str, message: str) -> ScenarioError:
    return ScenarioError(f"{path}: {message}")


def _mapping(value: Any, path: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "must be a mapping")
    for key in value:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise _fail(where, f"unknown key; allowed: {', '.join(sorted(allowed))}")
    return value


def _required(data: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in data or data[key] is None:
        raise _fail(path, "required")
    return data[key]


def _int(value: Any, path: str, *, minimum: int, maximum: int) -> int:
    # bool is an int in Python; a scenario that says `gpus: true` is wrong, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, _int_words(minimum))
    if value < minimum:
        raise _fail(path, _int_words(minimum))
    if value > maximum:
        raise _fail(path, f"must be at most {maximum}")
    return value


def _int_words(minimum: int) -> str:
    if minimum == 1:
        return "must be a positive integer"
    if minimum == 0:
        return "must be a non-negative integer"
    return f"must be an integer >= {minimum}"


def _opt_int(data: Mapping[str, Any], key: str, path: str, *, minimum: int, maximum: int,
             default: int | None = None) -> int | None:
    value = data.get(key)
    if value is None:
        return default
    return _int(value, f"{path}.{key}", minimum=minimum, maximum=maximum)


def _time(value: Any, path: str, *, minimum: int = 0) -> int:
    return _int(value, path, minimum=minimum, maximum=MAX_TIME_S)


def _bool(data: Mapping[str, Any], key: str, path: str) -> bool:
    value = data.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _fail(f"{path}.{key}", "must be true or false")
    return value


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, "must be a non-empty string")
    if value != value.strip() or any(c.isspace() for c in value):
        raise _fail(path, "must not contain spaces")
    return value


def unknown_node(name: object, nodes: Sequence[str] | Mapping[str, Any]) -> str:
    """"unknown node X" with the first few of the scenario's own node names: a pod of N
    nodes names them ``<pod>-000``..., a listed pod (an exported live cluster) as listed."""
    names = list(nodes)
    shown = ", ".join(names[:3]) + (f", ... ({len(names)} nodes)" if len(names) > 3 else "")
    return f"unknown node {name} (the scenario's nodes: {shown})"


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, "must be a list")
    return value


# ---------------------------------------------------------------------------------------
# The validator


def validate_scenario(data: Any) -> Scenario:
    if not isinstance(data, Mapping):
        raise ScenarioError("scenario: must be a mapping with name, until_s, cluster, tenants, "
                            "jobs")
    top = _mapping(data, "", _TOP_KEYS)
    name = _name(_required(top, "name", "name"), "name")
    until_s = _time(_required(top, "until_s", "until_s"), "until_s", minimum=1)
    settings = _settings(top.get("settings"))
    pods = _pods(_required(top, "cluster", "cluster"))
    gpu_types = {n.gpu_type for p in pods for n in p.node_defs() if n.gpu_type is not None}
    node_gpus: dict[str, int] = {}
    for pod in pods:
        for node in pod.node_defs():
            if node.name in node_gpus:
                raise _fail(f"cluster.pods[{pods.index(pod)}].name",
                            f"node name {node.name} is taken")
            node_gpus[node.name] = node.gpus
    tenants = _tenants(_required(top, "tenants", "tenants"))
    tenant_names = {t.name for t in tenants}
    jobs = _jobs(top.get("jobs") or [], tenant_names, gpu_types, node_gpus)
    _time_limits_within({t.name: t for t in tenants}, jobs)
    events = _events(top.get("events") or [], node_gpus, _cancel_targets(jobs), tenant_names)
    _guarantees_within(sum(p.total_gpus() for p in pods), tenants, events)
    by_id = {j.id: j for j in jobs}
    _preempted_for_known(jobs, by_id)
    return Scenario(
        name=name,
        until_s=until_s,
        settings=settings,
        pods=pods,
        tenants=tenants,
        jobs=jobs,
        events=events,
        reservations=_reservations(top.get("reservations"), by_id, node_gpus),
        claims=_claims(top.get("claims"), by_id, node_gpus),
    )


def _settings(raw: Any) -> tuple[tuple[str, Any], ...]:
    if raw is None:
        return ()
    known = {f.name for f in dataclasses.fields(SchedulerConfig)}
    allowed = tuple(k for k in (*_SETTINGS_INT, *_SETTINGS_FLOAT) if k in known)
    data = _mapping(raw, "settings", allowed)
    out: list[tuple[str, Any]] = []
    for key in sorted(data):
        value = data[key]
        path = f"settings.{key}"
        if key in _SETTINGS_FLOAT:
            low, high = _SETTINGS_FLOAT[key]
            # (NaN compares false with everything: the finite test must come first)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or not low <= value <= high):
                raise _fail(path, f"must be a number from {low:g} to {high:g}")
            out.append((key, float(value)))
        else:
            low_int, high_int = _SETTINGS_INT[key]
            out.append((key, _int(value, path, minimum=low_int, maximum=high_int)))
    return tuple(out)


def _pods(raw: Any) -> tuple[PodDef, ...]:
    cluster = _mapping(raw, "cluster", ("pods",))
    pods_raw = _list(_required(cluster, "pods", "cluster.pods"), "cluster.pods")
    if not pods_raw:
        raise _fail("cluster.pods", "must list at least one pod")
    pods: list[PodDef] = []
    seen: set[str] = set()
    for i, item in enumerate(pods_raw):
        path = f"cluster.pods[{i}]"
        data = _mapping(item, path, _POD_KEYS)
        name = _name(_required(data, "name", f"{path}.name"), f"{path}.name")
        if name in seen:
            raise _fail(f"{path}.name", f"duplicate pod name {name}")
        seen.add(name)
        gpu_type = data.get("gpu_type")
        if gpu_type is not None:
            gpu_type = _name(gpu_type, f"{path}.gpu_type")
        raw_nodes = _required(data, "nodes", f"{path}.nodes")
        if isinstance(raw_nodes, list):
            listed = _listed_nodes(raw_nodes, f"{path}.nodes", gpu_type)
            pods.append(PodDef(name=name, nodes=len(listed),
                               gpus_per_node=max(n.gpus for n in listed), gpu_type=gpu_type,
                               listed=listed))
            continue
        nodes = _int(raw_nodes, f"{path}.nodes", minimum=1, maximum=MAX_NODES_PER_POD)
        per_node = _int(_required(data, "gpus_per_node", f"{path}.gpus_per_node"),
                        f"{path}.gpus_per_node", minimum=1, maximum=64)
        pods.append(PodDef(name=name, nodes=nodes, gpus_per_node=per_node, gpu_type=gpu_type))
    return tuple(pods)


def _listed_nodes(items: list[Any], path: str, pod_type: str | None) -> tuple[NodeDef, ...]:
    """A pod's nodes one by one (extension): ``[{name, gpus, gpu_type, rail}]``; a node
    without a type has the pod's."""
    if not items:
        raise _fail(path, "must list at least one node")
    if len(items) > MAX_NODES_PER_POD:
        raise _fail(path, f"must list at most {MAX_NODES_PER_POD} nodes")
    out: list[NodeDef] = []
    for i, item in enumerate(items):
        npath = f"{path}[{i}]"
        data = _mapping(item, npath, _NODE_KEYS)
        name = _name(_required(data, "name", f"{npath}.name"), f"{npath}.name")
        gpus = _int(_required(data, "gpus", f"{npath}.gpus"), f"{npath}.gpus",
                    minimum=1, maximum=64)
        gpu_type = data.get("gpu_type")
        gpu_type = pod_type if gpu_type is None else _name(gpu_type, f"{npath}.gpu_type")
        rail = _opt_int(data, "rail", npath, minimum=0, maximum=1024, default=0)
        out.append(NodeDef(name, gpus, gpu_type, rail or 0))
    return tuple(out)


def _tenants(raw: Any) -> tuple[TenantDef, ...]:
    items = _list(raw, "tenants")
    if not items:
        raise _fail("tenants", "must list at least one tenant")
    tenants: list[TenantDef] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        path = f"tenants[{i}]"
        data = _mapping(item, path, _TENANT_KEYS)
        name = _name(_required(data, "name", f"{path}.name"), f"{path}.name")
        if name in seen:
            raise _fail(f"{path}.name", f"duplicate tenant name {name}")
        seen.add(name)
        guaranteed = _int(_required(data, "guaranteed_gpus", f"{path}.guaranteed_gpus"),
                          f"{path}.guaranteed_gpus", minimum=0, maximum=MAX_GPUS)
        borrow = _opt_int(data, "borrow_limit_gpus", path, minimum=0, maximum=MAX_GPUS, default=0)
        usage = data.get("initial_usage_gpu_s", 0)
        if usage is None:
            usage = 0
        if isinstance(usage, bool) or not isinstance(usage, int | float) or usage < 0:
            raise _fail(f"{path}.initial_usage_gpu_s", "must be a non-negative number")
        per_user = _opt_int(data, "max_gpus_per_user", path, minimum=1, maximum=MAX_GPUS)
        default = _opt_int(data, "default_runtime_s", path, minimum=1, maximum=MAX_TIME_S)
        longest = _opt_int(data, "max_runtime_s", path, minimum=1, maximum=MAX_TIME_S)
        if default is not None and longest is not None and default > longest:
            # the default is a limit its jobs get: it must be one they may declare
            raise _fail(f"{path}.default_runtime_s",
                        f"must be at most the team's max_runtime_s ({longest})")
        tenants.append(TenantDef(name, guaranteed, borrow or 0, float(usage), per_user,
                                 default, longest))
    return tuple(tenants)


def _guarantees_within(cluster_gpus: int, tenants: Sequence[TenantDef],
                       events: Sequence[EventDef]) -> None:
    """The guarantees add up to at most the cluster's GPUs, at the start and after every
    quota change in the order the run applies them (a guarantee the cluster cannot hold
    would make the scheduler preempt to honour it)."""
    total = sum(t.guaranteed_gpus for t in tenants)
    if total > cluster_gpus:
        # The whole sum is what must fit: a running sum named the tenant where it first
        # overflowed, however innocent (an exported scenario with one team raised blamed
        # a team after it, with a partial total). One guarantee past the cluster on its
        # own is the one to name.
        alone = [i for i, t in enumerate(tenants) if t.guaranteed_gpus > cluster_gpus]
        if len(alone) == 1:
            i = alone[0]
            raise _fail(f"tenants[{i}].guaranteed_gpus",
                        f"{tenants[i].guaranteed_gpus} GPUs is more than the cluster's "
                        f"{cluster_gpus} on its own (the guarantees add up to {total} GPUs)")
        raise _fail("tenants", f"the guarantees add up to {total} GPUs; the cluster has "
                    f"{cluster_gpus}")
    guaranteed = {t.name: t.guaranteed_gpus for t in tenants}
    for ev in sorted(events, key=lambda e: (e.at_s, e.index)):
        if ev.kind != "set_quota" or ev.guaranteed_gpus is None:
            continue
        guaranteed[ev.target] = ev.guaranteed_gpus
        total = sum(guaranteed.values())
        if total > cluster_gpus:
            raise _fail(f"events[{ev.index}].set_quota.guaranteed_gpus",
                        f"the guarantees would add up to {total} GPUs; the cluster has "
                        f"{cluster_gpus}")


def _time_limits_within(tenants: Mapping[str, TenantDef], jobs: Sequence[JobDef]) -> None:
    """A job may not declare a limit longer than its team's ``max_runtime_s``: production
    refuses it at submit (a 400 naming the field), so a scenario with one is invalid."""
    for i, job in enumerate(jobs):
        if job.carried_in:
            continue  # admitted already: a limit lowered since applies to new jobs only
        longest = tenants[job.spec.tenant].max_runtime_s
        declared = job.spec.max_runtime_s
        if longest is not None and declared is not None and declared > longest:
            raise _fail(f"jobs[{i}].max_runtime_s",
                        f"{declared} is more than team {job.spec.tenant}'s max_runtime_s "
                        f"({longest}); such a job is refused at submit")


def _jobs(raw: Any, tenant_names: set[str], gpu_types: set[str],
          node_gpus: Mapping[str, int]) -> tuple[JobDef, ...]:
    items = _list(raw, "jobs")
    jobs: list[JobDef] = []
    seen: set[str] = set()
    taken: dict[tuple[str, int], str] = {}  # (node, GPU index) -> the running job on it
    raw_deps: list[tuple[str, Any]] = []  # (path, depends_on as given) of each job
    for i, item in enumerate(items):
        jobs.append(_job(item, f"jobs[{i}]", i, tenant_names, gpu_types, seen, node_gpus,
                         taken))
        raw_deps.append((f"jobs[{i}]", item.get("depends_on")))
    if not any((j.spec.array_count and j.spec.array_id is None) or raw
               for j, (_, raw) in zip(jobs, raw_deps, strict=True)):
        return tuple(jobs)
    return _with_arrays_and_dependencies(jobs, raw_deps)


def _with_arrays_and_dependencies(jobs: list[JobDef], raw_deps: list[tuple[str, Any]]
                                  ) -> tuple[JobDef, ...]:
    """Expand each array into its tasks ``<id>_0 .. <id>_<count-1>`` (their own jobs, in
    the file's place of the array; ``seq`` renumbered in that order) and resolve every
    ``depends_on``: a job id, or an array's id for all its tasks. Refused: an unknown job,
    a job depending on itself, a job submitted after it (so no cycle)."""
    tasks: dict[str, list[str]] = {}
    expanded: list[tuple[JobDef, int]] = []  # (job, index of its raw entry)
    names = {j.id for j in jobs}
    for k, j in enumerate(jobs):
        count = j.spec.array_count
        if not count or j.spec.array_id is not None:  # a plain job, or a carried-in task
            expanded.append((j, k))
            continue
        ids = [f"{j.id}_{i}" for i in range(count)]
        for task_id in ids:
            if task_id in names:
                raise _fail(f"{raw_deps[k][0]}.array", f"its task {task_id} has the id of "
                            "another job")
        tasks[j.id] = ids
        for i, task_id in enumerate(ids):
            spec = dataclasses.replace(j.spec, id=task_id, array_id=j.id, array_index=i)
            expanded.append((dataclasses.replace(j, spec=spec), k))
    resolved: dict[int, tuple[tuple[str, str], ...]] = {}
    task_ids = {t for ids in tasks.values() for t in ids}
    for k, (path, raw) in enumerate(raw_deps):
        if raw:
            resolved[k] = _dependencies(raw, f"{path}.depends_on", names, tasks, task_ids)
    out: list[JobDef] = []
    for seq, (j, k) in enumerate(expanded):
        deps = resolved.get(k, ())
        if any(a == j.id or a == j.spec.array_id for a, _ in deps):
            raise _fail(f"{raw_deps[k][0]}.depends_on", "a job cannot depend on itself")
        out.append(dataclasses.replace(j, spec=dataclasses.replace(j.spec, seq=seq,
                                                                    depends_on=deps)))
    _submitted_first(out, {j.id: raw_deps[k][0] for j, k in expanded})
    return tuple(out)


def _submitted_first(jobs: Sequence[JobDef], paths: Mapping[str, str]) -> None:
    """Every job a job depends on is submitted before it (earlier, or at the same instant
    earlier in the file), as production requires: a dependency names an existing job. So
    no cycle can be written either."""
    order = {j.id: (j.spec.submit_s, j.spec.seq) for j in jobs}
    carried = {j.id for j in jobs if j.carried_in}
    for j in jobs:
        for awaited, _when in j.spec.depends_on:
            # jobs already in the system at t=0 were admitted: in any order (a batch's
            # jobs may wait for later ones of the batch)
            if order[awaited] > order[j.id] and not (j.id in carried and awaited in carried):
                raise _fail(f"{paths[j.id]}.depends_on",
                            f"job {awaited} is submitted after {j.id}: a job may only "
                            "depend on jobs submitted before it (earlier, or at the same "
                            "instant earlier in the file)")


def _dependencies(raw: Any, path: str, names: set[str], tasks: Mapping[str, list[str]],
                  task_ids: set[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for i, item in enumerate(_list(raw, path)):
        ipath = f"{path}[{i}]"
        data = _mapping(item, ipath, _DEPENDENCY_KEYS)
        target = _name(_required(data, "job", f"{ipath}.job"), f"{ipath}.job")
        when = _required(data, "when", f"{ipath}.when")
        if when not in DEPENDENCY_KINDS:
            raise _fail(f"{ipath}.when", "must be one of " + ", ".join(DEPENDENCY_KINDS))
        if target in tasks:  # an array: every task
            out += [(t, when) for t in tasks[target]]
        elif target in names or target in task_ids:
            out.append((target, when))
        else:
            raise _fail(f"{ipath}.job", f"unknown job {target}")
    return tuple(dict.fromkeys(out))  # the same pair twice is one dependency


def _cancel_targets(jobs: Sequence[JobDef]) -> dict[str, int]:
    """What a ``cancel`` event may name, with the instant it is submitted: a job, or an
    array (all its tasks)."""
    out = {j.id: j.spec.submit_s for j in jobs}
    for j in jobs:
        if j.spec.array_id is not None:
            out.setdefault(j.spec.array_id, j.spec.submit_s)
    return out


def _job(item: Any, path: str, seq: int, tenant_names: set[str], gpu_types: set[str],
         seen: set[str], node_gpus: Mapping[str, int],
         taken: dict[tuple[str, int], str]) -> JobDef:
    data = _mapping(item, path, _JOB_KEYS)
    raw_id = _required(data, "id", f"{path}.id")
    job_id = _name(raw_id, f"{path}.id")
    if job_id in seen:
        raise _fail(f"{path}.id", f"duplicate job id {job_id}")
    seen.add(job_id)
    tenant = _name(_required(data, "tenant", f"{path}.tenant"), f"{path}.tenant")
    if tenant not in tenant_names:
        raise _fail(f"{path}.tenant", f"unknown tenant {tenant}; known: "
                    + ", ".join(sorted(tenant_names)))
    # Negative only for a job already in the system at t=0, running or queued (the
    # carried-in state extension): anywhere else a negative instant is a typo.
    carried = data.get("running") is not None or data.get("queued") is True
    submit = _time(_required(data, "submit_at_s", f"{path}.submit_at_s"), f"{path}.submit_at_s",
                   minimum=-MAX_TIME_S if carried else 0)
    gpus = _int(_required(data, "gpus", f"{path}.gpus"), f"{path}.gpus",
                minimum=1, maximum=MAX_GPUS)
    shape = _opt_int(data, "gpus_per_node", path, minimum=1, maximum=64)
    if shape is not None and gpus % shape:
        raise _fail(f"{path}.gpus_per_node", f"must divide gpus ({gpus})")
    gpu_type = data.get("gpu_type")
    if gpu_type is not None:
        gpu_type = _name(gpu_type, f"{path}.gpu_type")
        if gpu_type not in gpu_types:
            known = ", ".join(sorted(gpu_types)) or "none declared"
            raise _fail(f"{path}.gpu_type", f"no pod has GPUs of type {gpu_type} ({known})")
    priority = _opt_int(data, "priority", path, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY,
                        default=0)
    runtime = _time(_required(data, "runtime_s", f"{path}.runtime_s"), f"{path}.runtime_s",
                    minimum=1)
    max_runtime = _opt_int(data, "max_runtime_s", path, minimum=1, maximum=MAX_TIME_S)
    checkpointable = _bool(data, "checkpointable", path)
    interval = _opt_int(data, "checkpoint_interval_s", path, minimum=1, maximum=MAX_TIME_S)
    ckpt_time = _opt_int(data, "checkpoint_time_s", path, minimum=0, maximum=MAX_TIME_S)
    if not checkpointable:
        for key, value in (("checkpoint_interval_s", interval), ("checkpoint_time_s", ckpt_time)):
            if value is not None:
                raise _fail(f"{path}.{key}", "set only for a checkpointable job "
                            "(checkpointable: true)")
    restart = _opt_int(data, "restart_s", path, minimum=0, maximum=MAX_TIME_S, default=0)
    min_gpus = _opt_int(data, "min_gpus", path, minimum=1, maximum=MAX_GPUS)
    if min_gpus is not None:
        if min_gpus > gpus:
            raise _fail(f"{path}.min_gpus", f"must be at most gpus ({gpus})")
        if shape is not None and min_gpus % shape:
            raise _fail(f"{path}.min_gpus", f"must be a multiple of gpus_per_node ({shape})")
    spec = JobSpec(
        id=job_id,
        seq=seq,
        tenant=tenant,
        gpus=gpus,
        submit_s=submit,
        gpus_per_node=shape,
        gpu_type=gpu_type,
        priority=priority or 0,
        max_runtime_s=max_runtime,
        checkpointable=checkpointable,
        checkpoint_interval_s=interval,
        checkpoint_time_s=ckpt_time,
        restart_s=restart or 0,
        preemptible=_bool(data, "preemptible", path),
        interactive=_bool(data, "interactive", path),
        min_gpus=min_gpus,
    )
    ignores = _bool(data, "ignores_preempt", path)
    owner = data.get("owner")
    if owner is not None:
        spec = dataclasses.replace(spec, owner=_name(owner, f"{path}.owner"))
    fails_after = _opt_int(data, "fails_after_s", path, minimum=1, maximum=MAX_TIME_S)
    if data.get("array") is not None:
        if carried:
            raise _fail(f"{path}.array", "not for a job running or queued at t=0 (list its "
                        "tasks as jobs of their own)")
        arr = _mapping(data["array"], f"{path}.array", _ARRAY_KEYS)
        count = _int(_required(arr, "count", f"{path}.array.count"), f"{path}.array.count",
                     minimum=1, maximum=MAX_ARRAY_TASKS)
        cap = _opt_int(arr, "max_running", f"{path}.array", minimum=1, maximum=MAX_ARRAY_TASKS)
        spec = dataclasses.replace(spec, array_count=count, array_max_running=cap)
    if data.get("array_task") is not None:
        spec = _array_task(data["array_task"], f"{path}.array_task", spec, carried,
                           data.get("array") is not None)
    if data.get("depends_on") is not None and carried and data.get("running") is not None:
        raise _fail(f"{path}.depends_on", "not for a job running at t=0 (it has started)")
    queued = _bool(data, "queued", path)
    if queued and submit > 0:
        raise _fail(f"{path}.queued", "only for a job submitted by t=0 (submit_at_s <= 0)")
    running = None
    if data.get("running") is not None:
        if queued:
            raise _fail(f"{path}.queued", "a job is queued or running at t=0, not both")
        running = _running(data["running"], f"{path}.running", spec, runtime, node_gpus, taken)
    times: tuple[int, ...] = ()
    if data.get("preemption_times_s") is not None:
        tpath = f"{path}.preemption_times_s"
        times = tuple(_int(t, f"{tpath}[{k}]", minimum=-MAX_TIME_S, maximum=0)
                      for k, t in enumerate(_list(data["preemption_times_s"], tpath)))
        if list(times) != sorted(times):
            raise _fail(tpath, "must be in time order")
    return JobDef(spec=spec, runtime_s=runtime, ignores_preempt=ignores,
                  fails_after_s=fails_after, running=running, queued=queued,
                  preemption_times_s=times)


def _array_task(raw: Any, path: str, spec: JobSpec, carried: bool, array: bool) -> JobSpec:
    """A task of an array already in the system at t=0 (the carried-in extension):
    ``{array, index, count, max_running}``, the array's fields as a task has them."""
    if not carried:
        raise _fail(path, "only for a job running or queued at t=0 (use array to make "
                    "the tasks of a new array)")
    if array:
        raise _fail(path, "a job is an array or a task of one, not both")
    data = _mapping(raw, path, _ARRAY_TASK_KEYS)
    array_id = _name(_required(data, "array", f"{path}.array"), f"{path}.array")
    count = _int(_required(data, "count", f"{path}.count"), f"{path}.count", minimum=1,
                 maximum=MAX_ARRAY_TASKS)
    index = _int(_required(data, "index", f"{path}.index"), f"{path}.index", minimum=0,
                 maximum=count - 1)
    cap = _opt_int(data, "max_running", path, minimum=1, maximum=MAX_ARRAY_TASKS)
    return dataclasses.replace(spec, array_id=array_id, array_index=index, array_count=count,
                               array_max_running=cap)


def _running(raw: Any, path: str, spec: JobSpec, runtime_s: int, node_gpus: Mapping[str, int],
             taken: dict[tuple[str, int], str]) -> RunningDef:
    """A job running at t=0 (extension): when its run started, the GPUs it holds (a list
    of indices per node, or a count: the lowest indices no earlier job holds), its progress
    and its last checkpoint."""
    data = _mapping(raw, path, _RUNNING_KEYS)
    started = _int(_required(data, "started_at_s", f"{path}.started_at_s"),
                   f"{path}.started_at_s", minimum=-MAX_TIME_S, maximum=0)
    if started < spec.submit_s:
        raise _fail(f"{path}.started_at_s", f"before the job is submitted ({spec.submit_s})")
    apath = f"{path}.alloc"
    raw_alloc = _required(data, "alloc", apath)
    if not isinstance(raw_alloc, Mapping) or not raw_alloc:
        raise _fail(apath, "must map node names to GPU indices (or a GPU count)")
    alloc: list[tuple[str, tuple[int, ...]]] = []
    for node in sorted(raw_alloc, key=str):
        npath = f"{apath}.{node}"
        if node not in node_gpus:
            raise _fail(npath, unknown_node(node, node_gpus))
        size = node_gpus[node]
        value = raw_alloc[node]
        if isinstance(value, list):
            indices = tuple(sorted(_int(ix, f"{npath}[{k}]", minimum=0, maximum=size - 1)
                                   for k, ix in enumerate(value)))
            if not indices or len(set(indices)) != len(indices):
                raise _fail(npath, "must list distinct GPU indices")
        else:
            count = _int(value, npath, minimum=1, maximum=size)
            free = [ix for ix in range(size) if (node, ix) not in taken]
            if len(free) < count:
                raise _fail(npath, f"{count} GPUs asked, {len(free)} left free on {node}")
            indices = tuple(free[:count])
        for ix in indices:
            other = taken.get((node, ix))
            if other is not None:
                raise _fail(npath, f"GPU {ix} of {node} is held by job {other} already")
            taken[(node, ix)] = spec.id
        alloc.append((str(node), indices))
    held = sum(len(ix) for _, ix in alloc)
    low = spec.least_gpus
    if not low <= held <= spec.gpus:
        want = f"{spec.gpus}" if low == spec.gpus else f"{low} to {spec.gpus}"
        raise _fail(apath, f"holds {held} GPUs; the job runs on {want}")
    progress = _opt_int(data, "progress_s", path, minimum=0, maximum=MAX_TIME_S,
                        default=-started)
    assert progress is not None
    if progress >= runtime_s:
        raise _fail(f"{path}.progress_s", f"must be less than runtime_s ({runtime_s}): a "
                    "job that has done its work is not running")
    checkpoint = None
    if data.get("last_checkpoint_s") is not None:
        cpath = f"{path}.last_checkpoint_s"
        if not spec.checkpointable:
            raise _fail(cpath, "set only for a checkpointable job (checkpointable: true)")
        checkpoint = _int(data["last_checkpoint_s"], cpath, minimum=spec.submit_s, maximum=0)
    asked, for_job, acked = None, None, False
    if data.get("preempting") is not None:
        ppath = f"{path}.preempting"
        stop = _mapping(data["preempting"], ppath, _PREEMPTING_KEYS)
        asked = _int(_required(stop, "requested_at_s", f"{ppath}.requested_at_s"),
                     f"{ppath}.requested_at_s", minimum=-MAX_TIME_S, maximum=0)
        if asked < started:
            raise _fail(f"{ppath}.requested_at_s",
                        f"before its run started ({started})")
        if stop.get("for") is not None:
            for_job = _name(stop["for"], f"{ppath}.for")
        acked = _bool(stop, "acknowledged", ppath)
        if acked and not spec.checkpointable:
            raise _fail(f"{ppath}.acknowledged", "only a checkpointable job acknowledges "
                        "(one that cannot checkpoint exits when asked)")
    return RunningDef(started, tuple(alloc), progress, checkpoint, asked, for_job, acked)


def _preempted_for_known(jobs: Sequence[JobDef], by_id: Mapping[str, JobDef]) -> None:
    for i, j in enumerate(jobs):
        run = j.running
        if run is not None and run.preempted_for is not None \
                and run.preempted_for not in by_id:
            raise _fail(f"jobs[{i}].running.preempting.for", f"unknown job {run.preempted_for}")


def _plans(raw: Any, key: str, allowed: tuple[str, ...], by_id: Mapping[str, JobDef]
           ) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """The items of a carried-in plan list (``reservations``, ``claims``): (path, mapping,
    job), each for a different job queued at t=0."""
    if raw is None:
        return
    seen: set[str] = set()
    what = key[:-1]
    for i, item in enumerate(_list(raw, key)):
        path = f"{key}[{i}]"
        data = _mapping(item, path, allowed)
        jpath = f"{path}.job"
        job_id = _name(_required(data, "job", jpath), jpath)
        job = by_id.get(job_id)
        if job is None:
            raise _fail(jpath, f"unknown job {job_id}")
        if not job.queued:
            raise _fail(jpath, f"job {job_id} is not queued at t=0 (queued: true)")
        if job_id in seen:
            raise _fail(jpath, f"job {job_id} has a {what} already")
        seen.add(job_id)
        yield path, data, job_id


def _reservations(raw: Any, by_id: Mapping[str, JobDef],
                  node_gpus: Mapping[str, int]) -> tuple[ReservationDef, ...]:
    """The reservations the live scheduler published (extension), in its order: each for
    a queued carried-in job, on known nodes' GPUs, starting at or after t=0."""
    out: list[ReservationDef] = []
    for path, data, job in _plans(raw, "reservations", _RESERVATION_KEYS, by_id):
        start = _time(_required(data, "start_s", f"{path}.start_s"), f"{path}.start_s")
        alloc = _indices(_required(data, "alloc", f"{path}.alloc"), f"{path}.alloc",
                         node_gpus)
        basis = data.get("basis") or ""
        if not isinstance(basis, str):
            raise _fail(f"{path}.basis", "must be a string")
        after = data.get("after_job")
        if after is not None:
            after = _name(after, f"{path}.after_job")
            if after not in by_id:
                raise _fail(f"{path}.after_job", f"unknown job {after}")
        planned = _opt_int(data, "planned_at_s", path, minimum=-MAX_TIME_S, maximum=0)
        checked = _opt_int(data, "checked_at_s", path, minimum=-MAX_TIME_S, maximum=0)
        out.append(ReservationDef(job, start, alloc, basis, after, planned, checked))
    return tuple(out)


def _indices(raw: Any, path: str,
             node_gpus: Mapping[str, int]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise _fail(path, "must map node names to lists of GPU indices")
    out: list[tuple[str, tuple[int, ...]]] = []
    for node in sorted(raw, key=str):
        npath = f"{path}.{node}"
        if node not in node_gpus:
            raise _fail(npath, unknown_node(node, node_gpus))
        indices = tuple(sorted(_int(ix, f"{npath}[{k}]", minimum=0,
                                    maximum=node_gpus[node] - 1)
                               for k, ix in enumerate(_list(raw[node], npath))))
        if not indices or len(set(indices)) != len(indices):
            raise _fail(npath, "must list distinct GPU indices")
        out.append((str(node), indices))
    return tuple(out)


def _claims(raw: Any, by_id: Mapping[str, JobDef],
            node_gpus: Mapping[str, int]) -> tuple[ClaimDef, ...]:
    """The reclaim claims under way at t=0 (extension): each for a queued carried-in
    head, on known nodes, its victims jobs being preempted at t=0."""
    out: list[ClaimDef] = []
    for path, data, job in _plans(raw, "claims", _CLAIM_KEYS, by_id):
        gpus = _int(_required(data, "gpus", f"{path}.gpus"), f"{path}.gpus", minimum=1,
                    maximum=MAX_GPUS)
        nodes: list[str] = []
        for k, node in enumerate(_list(_required(data, "nodes", f"{path}.nodes"),
                                       f"{path}.nodes")):
            if node not in node_gpus:
                raise _fail(f"{path}.nodes[{k}]", unknown_node(node, node_gpus))
            nodes.append(node)
        victims: list[str] = []
        for k, victim in enumerate(_list(_required(data, "victims", f"{path}.victims"),
                                         f"{path}.victims")):
            vpath = f"{path}.victims[{k}]"
            victim = _name(victim, vpath)
            vjob = by_id.get(victim)
            if vjob is None:
                raise _fail(vpath, f"unknown job {victim}")
            if vjob.running is None or vjob.running.preempt_requested_s is None:
                raise _fail(vpath, f"job {victim} is not being preempted at t=0 "
                            "(running.preempting)")
            victims.append(victim)
        at = _int(_required(data, "at_s", f"{path}.at_s"), f"{path}.at_s",
                  minimum=-MAX_TIME_S, maximum=0)
        out.append(ClaimDef(job, gpus, tuple(nodes), tuple(victims), at))
    return tuple(out)


def _events(raw: Any, node_gpus: Mapping[str, int], jobs: Mapping[str, int],
            tenant_names: set[str]) -> tuple[EventDef, ...]:
    items = _list(raw, "events")
    events: list[EventDef] = []
    for i, item in enumerate(items):
        path = f"events[{i}]"
        data = _mapping(item, path, ("at_s", *EVENT_KINDS))
        at_s = _time(_required(data, "at_s", f"{path}.at_s"), f"{path}.at_s")
        kinds = [k for k in EVENT_KINDS if k in data]
        if len(kinds) != 1:
            raise _fail(path, "must have at_s and exactly one of: " + ", ".join(EVENT_KINDS))
        kind = kinds[0]
        kpath = f"{path}.{kind}"
        if kind == "set_quota":
            quota = _mapping(data[kind], kpath, _QUOTA_KEYS)
            tenant = _name(_required(quota, "tenant", f"{kpath}.tenant"), f"{kpath}.tenant")
            if tenant not in tenant_names:
                raise _fail(f"{kpath}.tenant", f"unknown tenant {tenant}")
            guaranteed = _opt_int(quota, "guaranteed_gpus", kpath, minimum=0, maximum=MAX_GPUS)
            borrow = _opt_int(quota, "borrow_limit_gpus", kpath, minimum=0, maximum=MAX_GPUS)
            if guaranteed is None and borrow is None:
                raise _fail(kpath, "must set guaranteed_gpus or borrow_limit_gpus")
            events.append(EventDef(i, at_s, kind, tenant, guaranteed, borrow))
            continue
        target = _name(data[kind], kpath)
        if kind == "cancel":
            submit_s = jobs.get(target)
            if submit_s is None:
                raise _fail(kpath, f"unknown job {target}")
            if at_s < submit_s:
                raise _fail(f"{path}.at_s", f"before job {target} is submitted "
                            f"(at {submit_s})")
        elif target not in node_gpus:
            raise _fail(kpath, unknown_node(target, node_gpus))
        events.append(EventDef(i, at_s, kind, target))
    return tuple(events)
