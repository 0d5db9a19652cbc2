"""Ask for an early tick when something the scheduler waits on was committed.

Listens to ``transition_committed`` (sent after commit, never for a rolled-back change):
a job admitted to the queue, cancelled or exited frees or needs GPUs, and a node's health
or a tenant's quota changes what fits, so the leader should not wait for the next beat.
The scheduler's own rows do not ask (it just ticked, or is about to).
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Transition

from .signals import transition_committed

#: Reasons that change what the next tick can do.
WAKES_THE_SCHEDULER = frozenset(
    {Reason.ADMITTED, Reason.CANCELLED, Reason.COMPLETED, Reason.EXIT_FAILED,
     Reason.PREEMPTED, Reason.NO_CHECKPOINT}
)


def wakes_the_scheduler(row: Transition) -> bool:
    if row.actor == Actor.SCHEDULER:
        return False
    if row.kind != Transition.Kind.JOB:
        return True  # node health or tenant quota
    return row.reason in WAKES_THE_SCHEDULER or row.to_state == JobState.CANCELLED


@receiver(transition_committed, dispatch_uid="scheduler_app.early_tick")
def on_transition_committed(sender: Any, transition: Transition, **kwargs: Any) -> None:
    if wakes_the_scheduler(transition):
        from scheduler_app.tasks import request_early_tick  # Celery only when needed

        request_early_tick()
