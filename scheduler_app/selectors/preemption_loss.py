"""What a preemption really cost its victim, read from the log once the victim stopped.

A PreemptRequested row records the *estimate* the scheduler weighed when it chose the job
(``cost_s``: the work since its last checkpoint then, plus its declared restart). A victim
asked to stop writes a checkpoint within its grace window, so what it loses is usually far
less: the work between the last checkpoint of that run and the moment it stopped. The
restart it declared comes on top when it resumes; it is not lost work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Transition

#: the rows that tell a run's start, its checkpoints and a preempted stop
LOSS_REASONS = (Reason.PLACED.value, Reason.STARTED.value, Reason.CHECKPOINTED.value,
                Reason.PREEMPT_REQUESTED.value, Reason.PREEMPTED.value,
                Reason.NO_CHECKPOINT.value, Reason.GRACE_EXPIRED.value)


@dataclass(frozen=True, slots=True)
class StopLoss:
    """A victim's stop: when, the last checkpoint of the run it stopped (None: none in
    that run, so it lost the whole run), and the seconds of work lost in between."""

    stopped_at: datetime
    checkpoint_at: datetime | None
    work_lost_s: int


def stop_loss(rows: Iterable[Transition], request_pk: int) -> StopLoss | None:
    """The stop that followed the PreemptRequested row ``request_pk``, from the job's rows
    in seq order (any of them; only :data:`LOSS_REASONS` are read). None while it has not
    stopped, or if it ended otherwise (completed or failed in its grace window)."""
    run_start: datetime | None = None
    checkpoint: datetime | None = None
    asked = False
    for row in rows:
        if row.pk == request_pk:
            asked = True
        if row.reason in (Reason.PLACED, Reason.STARTED):
            if asked:
                return None  # placed again without a preempted stop in between
            run_start, checkpoint = row.at, None
        elif row.reason == Reason.CHECKPOINTED:
            checkpoint = row.at
        elif asked and row.to_state == JobState.PREEMPTED:
            known = [t for t in (run_start, checkpoint) if t is not None]
            if not known:
                return None  # the run's start is not among the rows given
            return StopLoss(row.at, checkpoint,
                            max(0, int((row.at - max(known)).total_seconds())))
        elif asked and row.to_state in (JobState.COMPLETED, JobState.FAILED,
                                        JobState.CANCELLED):
            return None
    return None
