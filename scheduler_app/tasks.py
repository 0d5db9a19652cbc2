"""Celery tasks of the production path: the scheduler tick and the early-tick request.

``scheduler_tick`` is thin: one :meth:`LeaderLoop.step` of this worker process's loop
(through ``observability.step_observed``: its log line and metrics). It is idempotent: a
step by a standby does nothing, and two steps in a row by the leader simply tick twice
(the core decides from the current state, the log fences the writes). Beat runs it every
``SCHEDULER_TICK_INTERVAL_S`` (settings.CELERY_BEAT_SCHEDULE).

Run the worker with one process per host for this task (``--concurrency 1`` or
``--pool solo``): each worker process has its own loop and its own holder name, so with
several processes an early tick delivered to a standby process does nothing.

Beat's ticks go to the shared queue, which every tick worker reads: a standby that takes
one forwards it, once, to the leader's own queue (Celery's ``worker_direct`` queue of the
worker named in the lease's holder, ``<nodename>:<pid>``). Without that the leader ran
only the ticks it happened to take: about every other one with one standby.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_process_shutdown, worker_shutdown
from celery.utils import worker_direct
from django.conf import settings
from django.core.cache import cache

from scheduler_app.breaker import CircuitBreaker, cache_breaker
from scheduler_app.observability import (
    early_tick_counted,
    process_dead,
    serve_metrics,
    step_observed,
)
from scheduler_app.selectors.leader import scheduler_status
from scheduler_app.services.leader import LeaderLoop
from scheduler_app.services.transitions import now_s

log = logging.getLogger("scheduler_app.tick")

EARLY_TICK_KEY = "scheduler:early-tick-pending"
#: At most one early tick pending: later requests within this window are dropped.
EARLY_TICK_DEBOUNCE_S = 1
EARLY_TICK_EXPIRES_S = 30
#: The early tick's publish gives the broker this long (seconds) to accept the connection,
#: and as long for each command after it. A web request that committed must not wait
#: for a broker that is down (connection refused: at once) or frozen (accepts, never
#: answers: this long), docs/operations.md.
EARLY_TICK_PUBLISH_TIMEOUT_S = 0.1
#: After a failed publish, early ticks are not asked for this long: one request pays the
#: timeout, the others skip the broker (the beat tick still comes every
#: SCHEDULER_TICK_INTERVAL_S once the broker is back).
EARLY_TICK_BREAKER_S = 10.0


#: This process's breaker for the early-tick publish.
early_tick_breaker = CircuitBreaker(EARLY_TICK_BREAKER_S)

_loop: LeaderLoop | None = None
_loop_lock = threading.Lock()


#: A worker's lease holder name: its Celery node name and its process id.
WORKER_HOLDER = re.compile(r"^(?P<node>[^@:\s]+@[^:\s]+):(?P<pid>\d+)$")


def worker_holder(nodename: str | None = None) -> str:
    """``<nodename>:<pid>`` (``celery@host:4242``): the lease says which worker's queue
    reaches the leader. ``host:pid`` outside a worker (an eager call)."""
    return f"{nodename or socket.gethostname()}:{os.getpid()}"


def leader_node(holder: str) -> str | None:
    """The Celery node name in a lease holder's name; None for a holder that is not a
    worker (``run_scheduler``'s)."""
    found = WORKER_HOLDER.match(holder)
    return found.group("node") if found else None


def leader_loop(nodename: str | None = None) -> LeaderLoop:
    """This process's loop (one per worker process: its in-memory state lives here)."""
    global _loop
    if _loop is None:
        _loop = LeaderLoop(holder=worker_holder(nodename),
                           ttl_s=settings.SCHEDULER_LEASE_TTL_S)
        if settings.SCHEDULER_METRICS_PORT:
            serve_metrics(settings.SCHEDULER_METRICS_PORT)  # this process records them
    return _loop


@shared_task(name="scheduler_app.scheduler_tick", ignore_result=True, bind=True)
def scheduler_tick(self, forwarded: bool = False) -> str:
    cache.delete(EARLY_TICK_KEY)  # a request arriving from now on needs a new tick
    if not _loop_lock.acquire(blocking=False):
        return "busy"  # a step is already running in this process: it is the tick
    try:
        loop = leader_loop(self.request.hostname)
        report = step_observed(loop)
    finally:
        _loop_lock.release()
    if not report.leader and not report.error and not forwarded:
        return forward_to_leader(loop.holder) or report.line()
    return report.line()


def forward_to_leader(own_holder: str) -> str | None:
    """A standby took a tick: send it, once, to the leader's own queue (a forwarded tick
    is never forwarded again, so a tick lost in a change of leader makes no loop). None
    when there is no worker to send it to: no live lease, or a leader that is not a
    Celery worker (``run_scheduler`` ticks on its own)."""
    status = scheduler_status(now=now_s())
    holder = status.holder
    node = leader_node(holder) if status.running else None
    if node is None or holder == own_holder:
        return None
    interval = float(settings.SCHEDULER_TICK_INTERVAL_S)
    try:
        # expires: a tick for a leader that died meanwhile is dropped, not run late
        scheduler_tick.apply_async(kwargs={"forwarded": True}, queue=worker_direct(node),
                                   expires=interval, retry=False)
    except Exception:  # noqa: BLE001 - the broker went away: the next beat tick comes
        log.warning("could not forward a tick to the leader %s", holder, exc_info=True)
        return None
    return f"standby: tick forwarded to the leader {holder}"


def request_early_tick() -> bool:
    """Ask for a tick now (after a submit, cancel or exit). Call it after commit only.

    Debounced: the cache key is added only if absent, so at most one early tick is
    pending. Without a broker it does nothing: the embedded loop (``run_scheduler``)
    ticks on its own. Never blocks for long: the publish times out after
    :data:`EARLY_TICK_PUBLISH_TIMEOUT_S` and, after a failure, the breaker skips it for
    :data:`EARLY_TICK_BREAKER_S` (the cache's, after a failure of the cache: the
    debounce key lives there). Returns whether a tick was enqueued.
    """
    if not settings.CELERY_BROKER_URL:
        early_tick_counted("no_broker")
        return False
    if not early_tick_breaker.allow() or not cache_breaker.allow():
        early_tick_counted("breaker_open")
        return False
    try:
        added = cache.add(EARLY_TICK_KEY, 1, timeout=EARLY_TICK_DEBOUNCE_S)
    except Exception:  # noqa: BLE001 - the cache is down: no debounce, so no early tick
        cache_breaker.record(ok=False)
        early_tick_counted("cache_error")
        log.warning("early tick not asked for (cache unreachable)", exc_info=True)
        return False
    cache_breaker.record(ok=True)
    if not added:
        early_tick_counted("debounced")
        return False
    try:
        publish_early_tick()
    except Exception:  # noqa: BLE001 - broker down: the beat tick will come anyway
        early_tick_breaker.record(ok=False)
        _forget_pending()
        early_tick_counted("broker_error")
        log.warning("early tick not enqueued (broker unreachable); not asking again for "
                    "%.0f s", EARLY_TICK_BREAKER_S, exc_info=True)
        return False
    early_tick_breaker.record(ok=True)
    early_tick_counted("enqueued")
    return True


def publish_early_tick() -> None:
    """Send one tick message, on a connection of its own with short timeouts and no
    retries: neither kombu's (it retries a connection for ``broker_connection_timeout``,
    4 s, even with ``retry=False``, which governs the publish only) nor redis-py's. The
    worker's and beat's connections keep Celery's defaults, which must wait for a
    broker to come back. A tick still queued after a few intervals is stale: the beat
    ticks cover it."""
    with bounded_connection(EARLY_TICK_PUBLISH_TIMEOUT_S) as connection:
        scheduler_tick.apply_async(retry=False, expires=EARLY_TICK_EXPIRES_S,
                                   connection=connection)


def bounded_connection(timeout: float) -> Any:
    """A broker connection for one publish from a web request: one attempt, ``timeout``
    seconds to connect and as long for each command (see :func:`publish_early_tick`).
    A broker that is down or frozen raises within about ``timeout``, never hangs."""
    return scheduler_tick.app.connection_for_write(
        settings.CELERY_BROKER_URL,
        connect_timeout=timeout,
        transport_options={
            "max_retries": 0,  # kombu: one connection attempt
            "socket_connect_timeout": timeout,  # redis-py: the TCP connect
            "socket_timeout": timeout,  # redis-py: each command (a frozen broker)
            "retry_on_timeout": False,
        },
    )


def _forget_pending() -> None:
    """The tick was not enqueued: let the next request ask again (if the cache answers)."""
    try:
        cache.delete(EARLY_TICK_KEY)
    except Exception:  # noqa: BLE001 - the key expires by itself in a second
        cache_breaker.record(ok=False)
        log.debug("could not clear the early-tick key", exc_info=True)


def on_early_tick_wanted(sender: object = None, **kwargs: object) -> None:
    """Receiver of ``services.signals.early_tick_wanted`` (connected in
    ``SchedulerAppConfig.ready``)."""
    request_early_tick()


@worker_process_shutdown.connect
@worker_shutdown.connect
def release_on_shutdown(**kwargs: object) -> None:
    """A worker process stopping cleanly gives the lease up (a standby leads at once
    instead of after the lease expires) and, in multiprocess metrics mode, drops its live
    gauges. Prefork children get worker_process_shutdown, a solo worker worker_shutdown."""
    if _loop is not None:
        try:
            _loop.release()
        except Exception:  # noqa: BLE001 - the lease simply expires
            log.warning("could not release the lease at shutdown", exc_info=True)
    process_dead(os.getpid())
