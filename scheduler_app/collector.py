"""The cyclic garbage collector, paused around bulk builds of long-lived state."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector while a block makes hundreds of thousands of
    long-lived objects and no reference cycle (the replay's projection, the leader's
    build): each allocation-triggered pass would walk every object made so far, which
    costs a build of 100,000 live jobs about half its time. Restores the collector as it
    was (a caller may have paused it already)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class FreezeAsItGrows:
    """``gc.freeze()`` each time a long-lived state (the core's, hundreds of thousands of
    objects) has grown past ``factor`` times its size at the last freeze plus ``slack``.

    The collector's full passes walk every object not frozen; a state that grows by tens
    of thousands of jobs between freezes makes each pass longer, inside the ticks. Frozen
    objects are still freed by reference counting when dropped; only a reference cycle
    among them waits for the next ``gc.unfreeze()`` (the state's owner calls it when it
    drops the state)."""

    def __init__(self, *, factor: float, slack: int) -> None:
        self.factor, self.slack = factor, slack
        self.frozen_at = 0

    def freeze(self, size: int) -> None:
        """Freeze the state, now of ``size`` (after a build)."""
        gc.freeze()
        self.frozen_at = size

    def grown(self, size: int) -> bool:
        """Freeze if the state of ``size`` has grown enough since the last freeze."""
        if size < self.factor * self.frozen_at + self.slack:
            return False
        self.freeze(size)
        return True
