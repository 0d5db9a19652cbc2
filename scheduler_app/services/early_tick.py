"""Ask for an early tick when something the scheduler waits on was committed.

Listens to ``transition_committed`` (sent after commit, never for a rolled-back change):
a job admitted to the queue, cancelled or exited frees or needs GPUs, and a node's health
or a tenant's quota changes what fits, so the leader should not wait for the next beat.
The scheduler's own rows do not ask (it just ticked, or is about to). Rows committed
together and announced inside :func:`coalesced` (a batch of 1,000 jobs: 2,000 rows) ask
once, not once per row (with a broker, each request costs a round trip to the cache).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.dispatch import receiver

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Transition

from .signals import early_tick_wanted, transition_committed

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


#: Inside coalesced(): [whether a row asked]; None outside.
_WANTED: ContextVar[list[bool] | None] = ContextVar("early_tick_wanted", default=None)


@contextmanager
def coalesced() -> Iterator[None]:
    """Announce the rows of one commit inside: at most one early tick is asked for, at
    the end (the tick that follows sees them all: they committed together)."""
    wanted = [False]
    token = _WANTED.set(wanted)
    try:
        yield
    finally:
        _WANTED.reset(token)
    if wanted[0]:
        _request()


@receiver(transition_committed, dispatch_uid="scheduler_app.early_tick")
def on_transition_committed(sender: Any, transition: Transition, **kwargs: Any) -> None:
    if wakes_the_scheduler(transition):
        wanted = _WANTED.get()
        if wanted is not None:
            wanted[0] = True
        else:
            _request()


def _request() -> None:
    # the Celery edge listens (tasks.on_early_tick_wanted, connected when the app is
    # ready): the services never import it
    early_tick_wanted.send(sender=None)
