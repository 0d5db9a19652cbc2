"""What one transition does to a job's projected fields: the rules, written once.

Pure functions over a small record, shared by the service that writes the projection
(``services.transitions``) and by the replay that rebuilds it from the log
(``selectors.replay``), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from scheduler_app.core.states import HOLDING_STATES, JobState, Reason

#: node name -> sorted GPU indices on it (the core's Allocation, with lists for JSON).
AllocMap = dict[str, list[int]]


@dataclass(slots=True)
class JobProjection:
    """The fields of a Job row that the Transition log determines."""

    state: JobState | None = None
    alloc: AllocMap = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_checkpoint_at: datetime | None = None
    resume_pointer: str = ""
    preemption_times: list[int] = field(default_factory=list)
    retry_count: int = 0


#: Job columns that mirror a JobProjection field of the same name (besides state, and the
#: allocation, which lives in Allocation rows).
JOB_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(JobProjection) if f.name not in ("state", "alloc")
)


def normalise_alloc(alloc: dict[str, Any]) -> AllocMap:
    """Sorted by node name, indices sorted: the one serialised form of an allocation."""
    return {node: sorted(int(i) for i in alloc[node]) for node in sorted(alloc)}


def gives_alloc(from_state: JobState | None, to_state: JobState, reason: Reason | str) -> bool:
    """True when the transition must carry a (new) allocation in ``detail["alloc"]``."""
    placing = from_state == JobState.QUEUED and to_state == JobState.PLACING
    return placing or str(reason) == Reason.SHRUNK


def apply_transition(
    proj: JobProjection,
    *,
    to_state: JobState,
    reason: Reason | str,
    at: datetime,
    detail: dict[str, Any],
    checkpointable: bool,
) -> None:
    """Move ``proj`` through one (already validated) transition, in place.

    Rules: a job holds its allocation while in HOLDING_STATES and gets it on
    QUEUED -> PLACING (replaced on Shrunk); a run starts when the agent confirms
    (PLACING -> RUNNING); final states set the finish time; Checkpointed records the
    checkpoint time and resume pointer; each preemption is timestamped for the daily cap
    when the job stops (PREEMPTED); a node failure sends a job that cannot checkpoint back
    from scratch and spends one retry.
    """
    from_state = proj.state
    reason = str(reason)
    if gives_alloc(from_state, to_state, reason):
        proj.alloc = normalise_alloc(detail["alloc"])
    elif to_state not in HOLDING_STATES:
        proj.alloc = {}
    if from_state == JobState.PLACING and to_state == JobState.RUNNING:
        proj.started_at = at
    if to_state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        proj.finished_at = at
    if reason == Reason.CHECKPOINTED:
        proj.last_checkpoint_at = at
        proj.resume_pointer = str(detail.get("resume_pointer", proj.resume_pointer))
    if to_state == JobState.PREEMPTED:
        # Counted when the job actually stops, as the core counts it: a request overtaken
        # by a completion or a node failure costs the job nothing.
        proj.preemption_times = [*proj.preemption_times, int(at.timestamp())]
    if to_state == JobState.QUEUED and reason == Reason.NODE_FAILED and not checkpointable:
        proj.retry_count += 1
    proj.state = to_state

