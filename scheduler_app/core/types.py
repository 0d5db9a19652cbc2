"""Small value types shared by every part of the core, the simulator and the services.

Integer seconds throughout (DESIGN.md: floating-point time makes runs irreproducible).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import SimpleNamespace
from typing import Any, TypeVar

from . import COMPILED
from .states import JobState, Reason

_C = TypeVar("_C", bound=type)

#: the classes whose ``__init__`` is written out (:func:`written_init`)
WRITTEN_INITS: list[type] = []


def written_init(cls: _C) -> _C:
    """Keep the ``__init__`` written in the class body of a dataclass made by the tick
    by the thousand (a release, a booked reservation, a team's load): compiled, it is a
    native function, where the one ``@dataclass`` writes is interpreted Python (about 5 %
    of a tick of the anchor window went to those).

    A frozen class's own assignments raise in the Python sources (frozen classes forbid
    them; compiled code writes its attributes directly), so there the written body runs
    on a scratch namespace and its values are set as ``@dataclass``'s own ``__init__``
    sets them (``object.__setattr__``). The written one stays ``__init__.__wrapped__``:
    tests/core/test_written_inits.py checks that it takes exactly the fields."""
    WRITTEN_INITS.append(cls)
    if COMPILED or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return cls
    written = cls.__dict__["__init__"]  # the class body's own
    names = [f.name for f in fields(cls)]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        scratch = SimpleNamespace()
        written(scratch, *args, **kwargs)
        for name in names:
            object.__setattr__(self, name, getattr(scratch, name))

    __init__.__wrapped__ = written  # type: ignore[attr-defined]
    setattr(cls, "__init__", __init__)  # noqa: B010 (mypy: a method cannot be assigned)
    return cls

#: Upper bounds (inclusive) of the size classes 1, 2-8, 9-64, 65-512, 513+.
SIZE_CLASS_BOUNDS: tuple[int, ...] = (1, 8, 64, 512)
SIZE_CLASS_LABELS: tuple[str, ...] = ("1", "2-8", "9-64", "65-512", "513+")


def size_class(gpus: int) -> int:
    """Index into SIZE_CLASS_LABELS for a job of ``gpus`` GPUs: the first class whose
    upper bound is at least ``gpus`` (a queue key of every queued job, so a bisect)."""
    return bisect_left(SIZE_CLASS_BOUNDS, gpus)


class NodeHealth(StrEnum):
    HEALTHY = "healthy"
    DRAINING = "draining"  # runs what it has, takes nothing new
    DOWN = "down"


class Actor(StrEnum):
    USER = "user"
    SCHEDULER = "scheduler"
    AGENT = "agent"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a job asked for. Immutable for the life of the job."""

    id: str
    seq: int  # total-order tie-break: the DB primary key, or the scenario's file order
    tenant: str
    gpus: int
    submit_s: int
    gpus_per_node: int | None = None  # shape; None: any split
    gpu_type: str | None = None  # None: any type
    priority: int = 0  # higher first, within a tenant
    max_runtime_s: int | None = None  # declared limit per run; None: cannot backfill
    checkpointable: bool = False
    checkpoint_interval_s: int | None = None
    checkpoint_time_s: int | None = None  # grace window when asked to stop
    restart_s: int = 0
    preemptible: bool = False  # opted into preemptible pricing
    interactive: bool = False
    min_gpus: int | None = None  # elastic: may run with as few as this
    #: who submitted it: the tenant's ``max_gpus_per_user`` caps what one owner holds at
    #: once (None: no owner, so no per-user cap applies)
    owner: str | None = None
    #: jobs it waits for: (job id, when) pairs, ``when`` one of DEPENDENCY_KINDS (Slurm's
    #: afterok, afterany, afternotok); every job named must be known to the scheduler
    #: when this one is submitted, so a cycle cannot be formed
    depends_on: tuple[tuple[str, str], ...] = ()
    #: a task of a job array: the array's id, this task's index, the number of tasks and
    #: how many of them may run at once (None: no cap)
    array_id: str | None = None
    array_index: int | None = None
    array_count: int | None = None
    array_max_running: int | None = None

    @property
    def size_class(self) -> int:
        return size_class(self.gpus)

    @property
    def elastic(self) -> bool:
        return self.min_gpus is not None and self.min_gpus < self.gpus

    @property
    def least_gpus(self) -> int:
        """The fewest GPUs it can start on: ``min_gpus`` if elastic, else ``gpus``."""
        return self.min_gpus if self.elastic and self.min_gpus else self.gpus


#: ``depends_on`` kinds and the final states that meet each: ``ok`` needs COMPLETED,
#: ``any`` any final state, ``notok`` FAILED or CANCELLED. A dependency on a job that ended
#: in another final state can never be met.
DEPENDENCY_KINDS: dict[str, frozenset[JobState]] = {
    "ok": frozenset({JobState.COMPLETED}),
    "any": frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}),
    "notok": frozenset({JobState.FAILED, JobState.CANCELLED}),
}

#: the most tasks one array may have (one submit makes them all)
MAX_ARRAY_TASKS = 10_000


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    pod: str
    gpus: int
    gpu_type: str | None = None
    rail: int = 0
    health: NodeHealth = NodeHealth.HEALTHY


@dataclass(slots=True)
class TenantSpec:
    name: str
    guaranteed_gpus: int
    borrow_limit_gpus: int = 0
    usage_gpu_s: float = 0.0  # decayed usage as of usage_at_s
    usage_at_s: int = 0
    #: GPUs one owner of the team may hold at once (None: no per-user cap); a job past it
    #: waits with pending reason UserLimit and holds no reservation
    max_gpus_per_user: int | None = None
    #: the declared limit of a job of the team that declares none (None: it keeps none),
    #: given at submit so that the job can backfill and be planned
    default_runtime_s: int | None = None
    #: the largest limit a job of the team may declare; the callers refuse more at submit
    #: (the core does not: a limit lowered later must not fail jobs already admitted)
    max_runtime_s: int | None = None


#: the most GPUs any count may name (a quota, a limit, a job, a scenario): one bound for
#: the live cluster and its what-if (the API took 10,000,000 where the what-if and the
#: scenario file refused past 1,000,000: an operator's session, 2026-12-07)
MAX_GPUS = 1_000_000
#: The TenantSpec fields beyond the quota that an operator may change (Scheduler.set_quota's
#: ``limits``; the services log them with the quota).
TENANT_LIMITS: tuple[str, ...] = ("max_gpus_per_user", "default_runtime_s", "max_runtime_s")


#: node name -> GPU indices on that node. Sorted by node name when serialised.
Allocation = dict[str, tuple[int, ...]]


def alloc_gpus(alloc: Mapping[str, Sized] | None) -> int:
    """GPUs held by an allocation (any mapping of node -> GPU indices; None holds none)."""
    return 0 if not alloc else sum(len(ix) for ix in alloc.values())


@dataclass(frozen=True, slots=True)
class Decision:
    """One transition the core made (and already applied to its in-memory state).

    The caller persists it (production: a Transition row through the services layer) or
    records it (simulator). ``alloc`` is set when the transition gives or changes GPUs.
    """

    job_id: str
    from_state: JobState | None
    to_state: JobState
    reason: Reason
    at_s: int
    alloc: Allocation | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __init__(self, job_id: str, from_state: JobState | None, to_state: JobState,
                 reason: Reason, at_s: int, alloc: Allocation | None = None,
                 detail: dict[str, Any] | None = None) -> None:
        self.job_id = job_id  # type: ignore[misc]
        self.from_state = from_state  # type: ignore[misc]
        self.to_state = to_state  # type: ignore[misc]
        self.reason = reason  # type: ignore[misc]
        self.at_s = at_s  # type: ignore[misc]
        self.alloc = alloc  # type: ignore[misc]
        self.detail = {} if detail is None else detail  # type: ignore[misc]  # (default_factory)


written_init(Decision)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the core. Defaults are the product's defaults (SCENARIOS.md settings)."""

    tick_interval_s: int = 5
    grace_period_s: int = 120  # grace for a job that declares no checkpoint time
    #: no grace window is longer, whatever a job declares (the kill timer, the victim's
    #: release in the plans and the head's estimate all use the capped window)
    max_grace_period_s: int = 600
    max_preemptions_per_job_per_day: int = 2
    #: a job that cannot be preempted (not checkpointable, not preemptible) borrows past
    #: its team's guarantee only if it declares a time limit of at most this: a team
    #: taking its guarantee back waits at most this long for such a borrower (0: such
    #: jobs never borrow)
    protected_borrow_max_s: int = 7200
    retry_budget: int = 2
    usage_half_life_s: int = 86400
    #: the fair-share order is computed from the usage at the last multiple of this many
    #: seconds (Slurm's PriorityCalcPeriod, 5 min there): decay alone reorders the teams
    #: at most this often, so quiet ticks in between stay quiet
    share_period_s: int = 60
    tick_budget_s: float = 2.0  # production: wall-time bound of one tick
    tick_work_budget: int | None = None  # simulator: jobs examined per tick (4,000)
    estimate_lookahead: int = 10  # queued jobs per tenant given a planned start
    #: look-ahead plans per tick; a round longer than this goes on at the next tick
    estimate_plans_per_tick: int = 2
    estimate_budget_s: float = 0.05  # production: wall-time bound of phase 4 per tick
    placing_timeout_s: int = 300  # PLACING -> QUEUED if the agent never confirms
    interactive_reserved_gpus: int = 0  # slice kept for interactive jobs
    max_preemption_searches_per_tick: int = 1
    #: a queued job's place among its team's jobs of the same priority: its submit time
    #: plus this many times its declared GPU-seconds, limit x GPUs (earliest deadline
    #: first; 0: submit order)
    queue_stretch: float = 1.0
    #: the highest-ranked jobs that wait for GPUs, each given a reservation that every
    #: job behind them must respect (Slurm's backfill plans many, ``bf_max_job_test``)
    reservation_depth: int = 16
    #: reservations planned afresh per tick; the others are kept from the last tick
    #: while they still hold (a reservation that no longer holds and finds no plan this
    #: tick leaves its job unreserved until the next)
    reservation_plans_per_tick: int = 8
    policy: str = "full"  # full | fifo | priority-kill


def may_borrow(checkpointable: bool, preemptible: bool, max_runtime_s: int | None,
               config: SchedulerConfig) -> bool:
    """May a job run on GPUs past its team's guarantee? Not if nothing could take them
    back in time: a job that cannot be preempted (neither checkpointable nor preemptible)
    borrows only with a declared limit of at most ``config.protected_borrow_max_s``. Plain
    values, so that the services and selectors ask the same question of a model row."""
    if checkpointable or preemptible:
        return True
    return max_runtime_s is not None and max_runtime_s <= config.protected_borrow_max_s


def join_words(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c`` ("" for none): the core's explanations and the
    selectors' sentences list things alike."""
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def may_not_borrow_words(need: int, tenant: str, guaranteed: int,
                         config: SchedulerConfig) -> str:
    """Why a job that may not borrow (:func:`may_borrow`) and needs more than its team's
    guarantee can never run: the core's admission and the services' submit say it alike."""
    return (f"needs {need} GPUs; team {tenant} is guaranteed {guaranteed}, and a job that "
            "cannot be preempted (not checkpointable, not preemptible) borrows past that "
            f"only with a time limit of at most {config.protected_borrow_max_s} s")


#: the largest whole-number setting (ten years of seconds; counts are far below it)
SETTING_MAX = 10 * 365 * 86400


@dataclass(frozen=True, slots=True)
class Setting:
    """One knob of :class:`SchedulerConfig` as operators and scenario files set it."""

    name: str
    minimum: float
    meaning: str
    is_float: bool = False
    #: may be left unset (None): the simulator's work budget, unused in production
    optional: bool = False
    #: the largest value taken: past it, a value is a typo or an attempt to overflow the
    #: arithmetic it feeds (a stretch of 1e308 made every queue key infinite)
    maximum: float = SETTING_MAX


#: Every SchedulerConfig field but ``policy`` (production always runs ``full``; the
#: simulator takes ``--policy``): scenario ``settings`` and production's
#: ``SCHEDULER_<NAME>`` environment variables read this one table.
SETTINGS: tuple[Setting, ...] = (
    Setting("tick_interval_s", 1, "seconds between two periodic ticks"),
    Setting("grace_period_s", 0,
            "grace window of a preemption victim that declares no checkpoint time"),
    Setting("max_grace_period_s", 0,
            "no grace window is longer, whatever a job declares (the kill timer, the plans "
            "and the head's estimate use the capped window)"),
    Setting("max_preemptions_per_job_per_day", 0,
            "preemptions a job may suffer in a rolling day; past it, only a team taking "
            "its guarantee back may preempt it, when no other job would do"),
    Setting("protected_borrow_max_s", 0,
            "a job that cannot be preempted (not checkpointable, not preemptible) borrows "
            "past its team's guarantee only with a time limit of at most this many "
            "seconds, so a team waits at most this long to take its guarantee back from "
            "it; 0: such jobs never borrow"),
    Setting("retry_budget", 0,
            "restarts after a node failure for a job that cannot checkpoint"),
    Setting("usage_half_life_s", 1, "half-life of a team's decayed GPU usage (fair share)"),
    Setting("share_period_s", 1,
            "the fair-share order is computed from the usage at the last multiple of this "
            "many seconds (Slurm's PriorityCalcPeriod)"),
    Setting("interactive_reserved_gpus", 0,
            "GPUs (whole nodes) kept for interactive jobs; batch jobs never run there"),
    Setting("tick_budget_s", 0.001, "wall time one tick may take (production)",
            is_float=True, maximum=3600.0),
    Setting("tick_work_budget", 1, "jobs one tick examines (the simulator's budget)",
            optional=True),
    Setting("reservation_depth", 0,
            "highest-ranked jobs waiting for GPUs that each get a reservation"),
    Setting("reservation_plans_per_tick", 0, "reservations planned afresh per tick"),
    Setting("estimate_lookahead", 0, "queued jobs per team given a start estimate"),
    Setting("estimate_plans_per_tick", 1, "look-ahead estimate plans per tick"),
    Setting("estimate_budget_s", 0.001,
            "wall time the estimates phase may take per tick (production)", is_float=True,
            maximum=3600.0),
    Setting("placing_timeout_s", 1,
            "a placed job whose agent never confirms the start goes back to the queue"),
    Setting("max_preemption_searches_per_tick", 0, "preemption searches per tick"),
    Setting("queue_stretch", 0,
            "a queued job's place among its team's jobs of the same priority is its submit "
            "time plus this many times its declared GPU-seconds, its limit times its GPUs "
            "(capped at 7 days; no limit counts as 7 days): smaller, shorter jobs first, "
            "every job still reaches the head; 0: submit order", is_float=True,
            maximum=1000.0),
)
