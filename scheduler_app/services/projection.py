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
    return {node: sorted(map(int, alloc[node])) for node in sorted(alloc)}


def gives_alloc(from_state: JobState | None, to_state: JobState, reason: Reason | str) -> bool:
    """True when the transition must carry a (new) allocation in ``detail["alloc"]``."""
    placing = from_state == JobState.QUEUED and to_state == JobState.PLACING
    return placing or str(reason) == Reason.SHRUNK


#: Reasons whose rows ``apply_transition`` reads ``detail`` of, besides the placements
#: (QUEUED -> PLACING): a replay fetches the detail of those rows only.
READS_DETAIL = frozenset({Reason.SHRUNK.value, Reason.CHECKPOINTED.value})

# plain strings: the replay passes the log's text, the services JobState and Reason (both
# StrEnums, equal to their text); a set of values is hashed as text either way
_HOLDING = frozenset(str(s) for s in HOLDING_STATES)
_ENDED = frozenset(str(s) for s in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED))
_QUEUED, _PLACING, _RUNNING = JobState.QUEUED.value, JobState.PLACING.value, JobState.RUNNING.value
_PREEMPTED = JobState.PREEMPTED.value
_SHRUNK, _CHECKPOINTED = Reason.SHRUNK.value, Reason.CHECKPOINTED.value
_NODE_FAILED = Reason.NODE_FAILED.value


def apply_transition(
    proj: JobProjection,
    *,
    to_state: JobState | str,
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

    ``proj.alloc`` is replaced by a new dict only when the allocation changes (a replay
    tests it by identity first). The replay calls this once per log row: keep it lean.
    """
    from_state = proj.state
    to = str(to_state)
    if (from_state == _QUEUED and to == _PLACING) or reason == _SHRUNK:
        proj.alloc = normalise_alloc(detail["alloc"])
    elif proj.alloc and to not in _HOLDING:
        proj.alloc = {}
    if to == _RUNNING:
        if from_state == _PLACING:
            proj.started_at = at
    elif to in _ENDED:
        proj.finished_at = at
    elif to == _PREEMPTED:
        # Counted when the job actually stops, as the core counts it: a request overtaken
        # by a completion or a node failure costs the job nothing.
        proj.preemption_times = [*proj.preemption_times, int(at.timestamp())]
    elif to == _QUEUED and reason == _NODE_FAILED and not checkpointable:
        proj.retry_count += 1
    if reason == _CHECKPOINTED:
        proj.last_checkpoint_at = at
        proj.resume_pointer = str(detail.get("resume_pointer", proj.resume_pointer))
    proj.state = to_state  # type: ignore[assignment]  # the replay keeps the log's text
