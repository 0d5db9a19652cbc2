"""What a victim really lost, read from its rows (selectors.preemption_loss.stop_loss)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Transition
from scheduler_app.selectors.preemption_loss import stop_loss

T0 = datetime(2026, 12, 7, tzinfo=UTC)
S, R = JobState, Reason


def rows(*spec: tuple[int, Reason, JobState]) -> list[Transition]:
    return [Transition(pk=i + 1, at=T0 + timedelta(seconds=at), reason=reason.value,
                       to_state=to.value) for i, (at, reason, to) in enumerate(spec)]


PLACED = (0, R.PLACED, S.PLACING)
STARTED = (10, R.STARTED, S.RUNNING)
ASKED = (500, R.PREEMPT_REQUESTED, S.PREEMPT_REQUESTED)


@pytest.mark.parametrize("name, spec, want", [
    ("checkpoint written when asked, then stopped",
     [PLACED, STARTED, (300, R.CHECKPOINTED, S.RUNNING), ASKED,
      (520, R.CHECKPOINTED, S.PREEMPT_REQUESTED), (525, R.PREEMPTED, S.PREEMPTED)], (525, 520, 5)),
    ("stopped at once: the work since its last checkpoint",
     [PLACED, STARTED, (300, R.CHECKPOINTED, S.RUNNING), ASKED,
      (505, R.NO_CHECKPOINT, S.PREEMPTED)], (505, 300, 205)),
    ("no checkpoint in this run: the whole run since it started",
     [PLACED, STARTED, ASKED, (620, R.GRACE_EXPIRED, S.PREEMPTED)], (620, None, 610)),
    ("a checkpoint of an earlier run does not count",
     [PLACED, STARTED, (300, R.CHECKPOINTED, S.RUNNING), (400, R.PLACED, S.PLACING),
      (410, R.STARTED, S.RUNNING), ASKED, (620, R.GRACE_EXPIRED, S.PREEMPTED)],
     (620, None, 210)),
    ("still stopping", [PLACED, STARTED, ASKED], None),
    ("completed in its grace window", [PLACED, STARTED, ASKED, (530, R.COMPLETED, S.COMPLETED)],
     None),
])
def test_stop_loss(name, spec, want):
    log = rows(*spec)
    request = next(r.pk for r in log if r.reason == R.PREEMPT_REQUESTED)
    got = stop_loss(log, request)
    if want is None:
        assert got is None, name
        return
    stopped, checkpoint, lost = want
    assert got is not None, name
    assert got.stopped_at == T0 + timedelta(seconds=stopped)
    assert got.checkpoint_at == (None if checkpoint is None
                                 else T0 + timedelta(seconds=checkpoint))
    assert got.work_lost_s == lost
