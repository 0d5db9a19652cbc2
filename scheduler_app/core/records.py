"""The records the scheduler keeps per job and per tick, shared by ``scheduler.py`` (which
owns them) and ``tick.py`` (which reads and updates them during a tick).

A module of its own so the dependency runs one way: ``scheduler`` imports ``tick``, and
both import this; ``tick`` never imports ``scheduler`` (a test checks the import graph).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .states import JobState, PendingReason
from .types import Allocation, Decision, JobSpec, written_init

DAY_S = 86400


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """When a waiting job starts, by the plan, and what the promise is worth.

    ``kind``:

    - ``reserved``: GPUs are reserved for it; it starts then *at the latest*, if every
      running job uses its whole declared limit (jobs that end earlier make it earlier);
    - ``borrowed``: GPUs are reserved for it, but it would start beyond its team's
      guarantee: a team taking its guarantee back may start on those GPUs first (the
      tick's rule 2), so the time is a plan, not a bound;
    - ``reclaim``: borrowed GPUs are being reclaimed for it; it starts when its victims'
      grace windows have ended, at the latest;
    - ``quota``: it waits for its own team's quota; it holds its place in that quota, not
      GPUs: the time is when the team's running jobs reach their declared limits, and it
      starts then if GPUs are free (other teams may use them meanwhile);
    - ``projected``: planned behind the reserved jobs but not reserved itself; jobs that
      start meanwhile may delay it;
    - ``started``: it was placed.
    """

    start_s: int
    basis: str  # a human sentence: which release makes it fit
    kind: str = "reserved"

    def __init__(self, start_s: int, basis: str, kind: str = "reserved") -> None:
        self.start_s = start_s  # type: ignore[misc]
        self.basis = basis  # type: ignore[misc]
        self.kind = kind  # type: ignore[misc]

    @property
    def upper_bound(self) -> bool:
        """True when the start is a bound ("at the latest, if declared limits hold")."""
        return self.kind in UPPER_BOUND_KINDS


written_init(StartEstimate)


UPPER_BOUND_KINDS = frozenset({"reserved", "reclaim", "started"})

#: What each kind of estimate promises, in the words the API, the dashboard and gpuq use.
ESTIMATE_KIND_SENTENCES: dict[str, str] = {
    "reserved": "GPUs are reserved for it: it starts then at the latest, if every running "
                "job uses its whole declared limit (earlier if they end sooner)",
    "borrowed": "GPUs are reserved for it, but it would run on borrowed quota: a team "
                "taking its guarantee back may start on them first, and then it starts "
                "later",
    "reclaim": "borrowed GPUs are being reclaimed for it: it starts at the latest when the "
               "victims' grace windows end",
    "quota": "it waits for its team's quota and holds its place in it, not GPUs: it can "
             "start when the team's declared limits leave room, if GPUs are free then",
    "projected": "planned behind the reserved jobs but not reserved itself: jobs that "
                 "start meanwhile may delay it",
}


@dataclass(slots=True)
class JobRecord:
    """A job's spec and its mutable runtime. Owned by the Scheduler; read through JobView."""

    spec: JobSpec
    state: JobState | None = None
    alloc: Allocation | None = None
    run_id: int = 0  # bumped at every placement; timers of an older run are stale
    run_start_s: int | None = None  # placement instant of the current run
    confirmed_s: int | None = None
    last_checkpoint_s: int | None = None
    resume_pointer: Any = None
    preemption_times: list[int] = field(default_factory=list)
    retries: int = 0
    pending_reason: PendingReason = PendingReason.NONE
    estimate: StartEstimate | None = None
    preempt_id: int = 0  # bumped at every PREEMPT_REQUESTED; grace timers check it
    grace_deadline_s: int | None = None
    preempted_for: str | None = None
    end_s: int | None = None

    def preemptions_last_day(self, now: int) -> int:
        return sum(1 for t in self.preemption_times if t > now - DAY_S)

    def preemptions_against_cap(self, now: int, cap: int) -> int:
        """What the cap compares: the preemptions of the last day, except that once any
        rolling day held ``cap`` of them the job stays at the cap for good (the seed: "a
        job past the cap is protected until it completes"; from borrowing heads, not from
        a team taking its guarantee back: ``preemption._protected``)."""
        times = self.preemption_times  # appended in time order
        if not times:
            return 0
        recent = self.preemptions_last_day(now)
        if cap > 0 and any(
            times[i + cap - 1] - times[i] < DAY_S for i in range(len(times) - cap + 1)
        ):
            return max(cap, recent)
        return recent


@dataclass(slots=True)
class ReclaimClaim:
    """Nodes promised to an entitled head while its victims checkpoint and exit."""

    head_id: str
    tenant: str
    gpus: int
    nodes: frozenset[str]
    victims: set[str]
    at_s: int
    why: str


@dataclass(frozen=True, slots=True)
class TickResult:
    decisions: list[Decision]
    stats: dict[str, Any]
    #: pending reason of every job the tick examined and left waiting
    pending_reasons: dict[str, PendingReason] = field(default_factory=dict)
    #: start estimates the tick (re)planned; None = not planned (cannot be promised)
    start_estimates: dict[str, StartEstimate | None] = field(default_factory=dict)
    #: for each job the tick left waiting with reason Reservation: the job whose
    #: reservation its first fit would delay (the first booked of those in its way)
    blockers: dict[str, str] = field(default_factory=dict)

    def __init__(self, decisions: list[Decision], stats: dict[str, Any],
                 pending_reasons: dict[str, PendingReason] | None = None,
                 start_estimates: dict[str, StartEstimate | None] | None = None,
                 blockers: dict[str, str] | None = None) -> None:
        # (None: a new dict, as the fields' default_factory)
        self.decisions = decisions  # type: ignore[misc]
        self.stats = stats  # type: ignore[misc]
        self.pending_reasons = {} if pending_reasons is None else pending_reasons  # type: ignore[misc]
        self.start_estimates = {} if start_estimates is None else start_estimates  # type: ignore[misc]
        self.blockers = {} if blockers is None else blockers  # type: ignore[misc]


written_init(TickResult)


