"""`manage.py run_scheduler`: the tick loop in-process (embedded mode, no broker needed).

Every ``--interval`` seconds one LeaderLoop step: a standby waits for the lease, the
leader ticks and persists. One structured log line per step (logger
``scheduler_app.tick``, with the tick id; also on stdout with ``-v 2``, and ``-v 3`` adds a
line when each step starts) and the step's
metrics (``observability.step_observed``; ``--metrics-port`` serves them when no
multiprocess directory is shared with the web server). SIGINT/SIGTERM finish the current
step, release the lease (a standby takes over at once) and exit.

A long-running process must drop database connections that broke or aged (Django does it
around each web request, Celery around each task): done before every step, so a
connection lost mid-tick costs that one tick only.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections, connection

from scheduler_app.observability import process_dead, serve_metrics, step_observed
from scheduler_app.services.leader import LeaderLoop

log = logging.getLogger("scheduler_app.tick")


class Command(BaseCommand):
    help = "Run the scheduler tick loop in this process (embedded mode)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval", type=float, default=float(settings.SCHEDULER_TICK_INTERVAL_S),
            help="seconds between ticks (default: SCHEDULER_TICK_INTERVAL_S, 5)",
        )
        parser.add_argument("--once", action="store_true", help="one step, then exit")
        parser.add_argument(
            "--holder", default=f"{socket.gethostname()}:{os.getpid()}",
            help="this scheduler's name in the leader lease (default host:pid)",
        )
        parser.add_argument(
            "--metrics-port", type=int, default=settings.SCHEDULER_METRICS_PORT,
            help="serve this process's Prometheus metrics on this port (default: "
                 "SCHEDULER_METRICS_PORT; not needed when PROMETHEUS_MULTIPROC_DIR is "
                 "shared with the web server's /metrics)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["metrics_port"]:
            serve_metrics(options["metrics_port"])
        loop = LeaderLoop(holder=options["holder"], ttl_s=settings.SCHEDULER_LEASE_TTL_S)
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %s: stopping after this step", signum)
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                if not connection.in_atomic_block:  # (a test's transaction: leave it)
                    close_old_connections()
                if options["verbosity"] >= 3:
                    self.stdout.write("step starts")
                    self.stdout.flush()
                report = step_observed(loop)
                if options["verbosity"] >= 2:
                    self.stdout.write(report.line())
                    self.stdout.flush()
                if options["once"] or stop.wait(options["interval"]):
                    break
        finally:
            try:
                if not connection.in_atomic_block:
                    close_old_connections()
                loop.release()
            except Exception:  # noqa: BLE001 - e.g. the database is gone: the lease expires
                log.warning("could not release the lease", exc_info=True)
            process_dead(os.getpid())
            for sig, handler in previous.items():
                signal.signal(sig, handler)
