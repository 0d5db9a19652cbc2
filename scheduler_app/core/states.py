"""The job state machine: the one table every state change is checked against.

Pure Python (no Django). The services layer, the in-memory scheduler and the simulator
all call :func:`check_transition`; nothing else decides whether a move is legal.
"""

from __future__ import annotations

from enum import StrEnum

from mypy_extensions import mypyc_attr


class JobState(StrEnum):
    SUBMITTED = "SUBMITTED"
    QUEUED = "QUEUED"
    PLACING = "PLACING"
    RUNNING = "RUNNING"
    PREEMPT_REQUESTED = "PREEMPT_REQUESTED"
    CHECKPOINTING = "CHECKPOINTING"
    PREEMPTED = "PREEMPTED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


S = JobState

FINAL_STATES: frozenset[JobState] = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED})

#: States in which a job holds GPUs (an allocation exists and counts against nodes).
HOLDING_STATES: frozenset[JobState] = frozenset(
    {S.PLACING, S.RUNNING, S.PREEMPT_REQUESTED, S.CHECKPOINTING}
)

#: States in which a job waits for the scheduler.
WAITING_STATES: frozenset[JobState] = frozenset({S.SUBMITTED, S.QUEUED, S.PREEMPTED})

# The table of DESIGN.md, as (from, to) pairs. Comments say which rule admits the move.
_ALLOWED: frozenset[tuple[JobState, JobState]] = frozenset(
    {
        # the happy path
        (S.SUBMITTED, S.QUEUED),
        (S.QUEUED, S.PLACING),
        (S.PLACING, S.RUNNING),
        (S.RUNNING, S.COMPLETED),
        (S.RUNNING, S.FAILED),
        # the grace protocol
        (S.RUNNING, S.PREEMPT_REQUESTED),
        (S.PREEMPT_REQUESTED, S.CHECKPOINTING),
        (S.CHECKPOINTING, S.PREEMPTED),
        (S.PREEMPTED, S.QUEUED),
        # cannot checkpoint (exits at once) or grace window expired (killed)
        (S.PREEMPT_REQUESTED, S.PREEMPTED),
        # finished or crashed while being asked to stop
        (S.PREEMPT_REQUESTED, S.COMPLETED),
        (S.PREEMPT_REQUESTED, S.FAILED),
        (S.CHECKPOINTING, S.COMPLETED),
        (S.CHECKPOINTING, S.FAILED),
        # node died, or the agent never confirmed the start: back to the queue
        (S.PLACING, S.QUEUED),
        (S.RUNNING, S.QUEUED),
        (S.PREEMPT_REQUESTED, S.QUEUED),
        (S.CHECKPOINTING, S.QUEUED),
        # retry budget spent, max runtime reached, or can never fit
        (S.PLACING, S.FAILED),
        (S.SUBMITTED, S.FAILED),
        (S.QUEUED, S.FAILED),
        # in-state updates that must be in the log so the projection can be rebuilt:
        # a reported checkpoint (time, resume pointer) or an elastic shrink (allocation)
        (S.RUNNING, S.RUNNING),
        (S.PREEMPT_REQUESTED, S.PREEMPT_REQUESTED),
        (S.CHECKPOINTING, S.CHECKPOINTING),
    }
    # user or operator: any non-final state may be cancelled
    | {(s, S.CANCELLED) for s in JobState if s not in FINAL_STATES}
)


def illegal_transition_words(job_id: object, from_state: str, to_state: str) -> str:
    """What :class:`IllegalTransition` says: the job, both states and what is allowed."""
    if from_state in FINAL_STATES:
        why = f"{from_state} is final"
    else:
        allowed = ", ".join(sorted(allowed_targets(JobState(from_state))))
        why = f"from {from_state} a job may go to: {allowed}"
    return f"job {job_id}: illegal transition {from_state} -> {to_state} ({why})"


# Not a native class when compiled, and subclasses must not call its __init__ (a compiled
# method refuses a Python subclass's instance as self): the services' TransitionConflict
# does neither; it did, and every refused job move (cancelling an ended job among them)
# was a 500 with the compiled core until 2026-12-07 (the tests ran the sources; see
# tests/sim/test_compiled_core.py)
@mypyc_attr(native_class=False)
class IllegalTransition(ValueError):
    """A move the state machine refuses. The message names the job and both states."""

    def __init__(self, job_id: object, from_state: JobState | str, to_state: JobState | str):
        self.job_id = job_id
        self.from_state = str(from_state)
        self.to_state = str(to_state)
        super().__init__(illegal_transition_words(job_id, self.from_state, self.to_state))


def is_allowed(from_state: JobState | str, to_state: JobState | str) -> bool:
    try:
        return (JobState(from_state), JobState(to_state)) in _ALLOWED
    except ValueError:  # not a state at all
        return False


def allowed_targets(from_state: JobState) -> frozenset[JobState]:
    return frozenset(t for (f, t) in _ALLOWED if f == from_state)


def check_transition(job_id: object, from_state: JobState | str, to_state: JobState | str) -> None:
    """Raise :class:`IllegalTransition` unless ``from_state -> to_state`` is in the table."""
    if not is_allowed(from_state, to_state):
        raise IllegalTransition(job_id, from_state, to_state)


def all_pairs() -> list[tuple[JobState, JobState]]:
    """Every (from, to) pair of states, allowed or not, in a stable order (for table tests)."""
    return [(f, t) for f in JobState for t in JobState]


class Reason(StrEnum):
    """Why a transition happened: the reason code stored on every Transition row."""

    SUBMITTED = "Submitted"  # (none) -> SUBMITTED, the first row of every job
    ADMITTED = "Admitted"  # SUBMITTED -> QUEUED: validated, in its tenant's queue
    PLACED = "Placed"  # QUEUED -> PLACING: the tick found the whole gang
    BACKFILLED = "Backfilled"  # QUEUED -> PLACING: placed around a reservation
    STARTED = "Started"  # PLACING -> RUNNING: the agent confirmed
    COMPLETED = "Completed"  # -> COMPLETED: exit code 0
    EXIT_FAILED = "ExitFailed"  # -> FAILED: non-zero exit
    TIME_LIMIT = "TimeLimit"  # -> FAILED: the run reached its max runtime
    NEVER_FITS = "NeverFits"  # -> FAILED: larger than the cluster or guarantee + borrow
    RETRIES_EXHAUSTED = "RetriesExhausted"  # -> FAILED: node failures spent the retry budget
    PREEMPT_REQUESTED = "PreemptRequested"  # RUNNING -> PREEMPT_REQUESTED: chosen as victim
    CHECKPOINT_STARTED = "CheckpointStarted"  # -> CHECKPOINTING: the job acknowledged
    PREEMPTED = "Preempted"  # -> PREEMPTED: exited after checkpointing
    NO_CHECKPOINT = "NoCheckpoint"  # PREEMPT_REQUESTED -> PREEMPTED: cannot checkpoint
    GRACE_EXPIRED = "GraceExpired"  # -> PREEMPTED: killed at the end of the grace window
    REQUEUED = "Requeued"  # PREEMPTED -> QUEUED: waits again with its resume pointer
    NODE_FAILED = "NodeFailed"  # -> QUEUED: a node of the allocation went down
    PLACING_TIMEOUT = "PlacingTimeout"  # PLACING -> QUEUED: the agent never confirmed
    CHECKPOINTED = "Checkpointed"  # self-transition: a checkpoint was reported
    SHRUNK = "Shrunk"  # self-transition: an elastic job lost GPUs to a node failure
    CANCELLED = "Cancelled"  # -> CANCELLED: by a user or an operator
    #: -> CANCELLED: a job it depends on ended so that the dependency can never be met
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"
    QUOTA_CHANGED = "QuotaChanged"  # tenant quota change (logged by the services layer)
    NODE_HEALTH = "NodeHealth"  # node drained/undrained/down/up (logged by services)


class PendingReason(StrEnum):
    """Why a queued job is not running, like squeue's REASON column."""

    NONE = "None"  # not looked at yet (just submitted, or the tick budget ran out)
    PRIORITY = "Priority"
    RESOURCES = "Resources"
    QUOTA_LIMIT = "QuotaLimit"
    QUOTA_RESERVED = "QuotaReserved"
    USER_LIMIT = "UserLimit"
    RESERVATION = "Reservation"
    TOPOLOGY = "Topology"
    NODE_DOWN = "NodeDown"
    GPU_TYPE = "GpuType"
    PREEMPTING = "Preempting"
    INTERACTIVE_TIER_FULL = "InteractiveTierFull"
    DEPENDENCY = "Dependency"  # waits for jobs it depends on to end (off the queues)
    ARRAY_LIMIT = "ArrayLimit"  # its array runs max_running tasks already (off the queues)


PENDING_SENTENCES: dict[PendingReason, str] = {
    PendingReason.NONE: "Not looked at by the scheduler yet.",
    PendingReason.PRIORITY: "Waiting behind jobs that rank higher (fair share, priority, age).",
    PendingReason.RESOURCES: "Not enough free GPUs in the cluster right now.",
    PendingReason.QUOTA_LIMIT: (
        "Starting it would take the team past its guarantee plus borrow limit."
    ),
    PendingReason.QUOTA_RESERVED: (
        "Its team's remaining quota is held for a job of the team with a reservation (kept "
        "once made, as a promise, even past jobs that rank higher since), and this one "
        "would not end (by its declared limit) before that job's planned start."
    ),
    PendingReason.USER_LIMIT: (
        "Its owner already holds as many GPUs as the team lets one person hold at once "
        "(the team's max_gpus_per_user); it starts when the owner's running jobs free enough."
    ),
    PendingReason.RESERVATION: (
        "GPUs are reserved for another job (a reservation is kept once made, as a promise, "
        "even past jobs that rank higher since) and this one would delay it."
    ),
    PendingReason.TOPOLOGY: (
        "Enough GPUs are free, but not in the shape the job asked for (GPUs per node, pods)."
    ),
    # the core says NodeDown only when the job would fit with the idle GPUs of the down
    # or draining nodes: say so, not that every node it could use is gone (one of 48
    # draining read as if the cluster were down)
    PendingReason.NODE_DOWN: (
        "The healthy nodes lack the free GPUs it needs; it would fit if the nodes that are "
        "down or draining were back."
    ),
    PendingReason.GPU_TYPE: "Not enough GPUs of the requested type are free.",
    PendingReason.PREEMPTING: "Borrowed GPUs are being reclaimed for it; waiting for them.",
    PendingReason.INTERACTIVE_TIER_FULL: "The interactive slice is fully used.",
    PendingReason.DEPENDENCY: (
        "It waits for the jobs it depends on to end as it requires; until then it holds "
        "and reserves no GPUs."
    ),
    PendingReason.ARRAY_LIMIT: (
        "Its array already has as many tasks running as its max_running allows; it starts "
        "when one of them ends."
    ),
}
