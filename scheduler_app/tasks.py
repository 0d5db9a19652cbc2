"""Celery tasks of the production path: the scheduler tick and the early-tick request.

``scheduler_tick`` is thin: one :meth:`LeaderLoop.step` of this worker process's loop. It
is idempotent: a step by a standby does nothing, and two steps in a row by the leader
simply tick twice (the core decides from the current state, the log fences the writes).
Beat runs it every ``SCHEDULER_TICK_INTERVAL_S`` (settings.CELERY_BEAT_SCHEDULE).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from scheduler_app.services.leader import LeaderLoop

log = logging.getLogger("scheduler_app.tick")

EARLY_TICK_KEY = "scheduler:early-tick-pending"
#: At most one early tick pending: later requests within this window are dropped.
EARLY_TICK_DEBOUNCE_S = 1

_loop: LeaderLoop | None = None
_loop_lock = threading.Lock()


def worker_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def leader_loop() -> LeaderLoop:
    """This process's loop (one per worker process: its in-memory state lives here)."""
    global _loop
    if _loop is None:
        _loop = LeaderLoop(holder=worker_holder(), ttl_s=settings.SCHEDULER_LEASE_TTL_S)
    return _loop


@shared_task(name="scheduler_app.scheduler_tick", ignore_result=True)
def scheduler_tick() -> str:
    cache.delete(EARLY_TICK_KEY)  # a request arriving from now on needs a new tick
    if not _loop_lock.acquire(blocking=False):
        return "busy"  # a step is already running in this process: it is the tick
    try:
        report = leader_loop().step()
    finally:
        _loop_lock.release()
    log.info("tick %s", report.line())
    return report.line()


def request_early_tick() -> bool:
    """Ask for a tick now (after a submit, cancel or exit). Call it after commit only.

    Debounced: the cache key is added only if absent, so at most one early tick is
    pending. Without a broker it does nothing: the embedded loop (``run_scheduler``)
    ticks on its own. Returns whether a tick was enqueued.
    """
    if not settings.CELERY_BROKER_URL:
        return False
    if not cache.add(EARLY_TICK_KEY, 1, timeout=EARLY_TICK_DEBOUNCE_S):
        return False
    try:
        scheduler_tick.apply_async()
    except Exception:  # noqa: BLE001 - broker down: the beat tick will come anyway
        cache.delete(EARLY_TICK_KEY)
        log.warning("early tick not enqueued (broker unreachable)", exc_info=True)
        return False
    return True
