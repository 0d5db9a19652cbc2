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
