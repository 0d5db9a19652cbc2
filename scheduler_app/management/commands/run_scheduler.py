"""`manage.py run_scheduler`: the tick loop in-process (embedded mode, no broker needed).

Every ``--interval`` seconds one LeaderLoop step: a standby waits for the lease, the
leader ticks and persists. One structured log line per step (logger
``scheduler_app.tick``; also on stdout with ``-v 2``). SIGINT/SIGTERM finish the current
step, release the lease (a standby takes over at once) and exit.
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

    def handle(self, *args: Any, **options: Any) -> None:
        loop = LeaderLoop(holder=options["holder"], ttl_s=settings.SCHEDULER_LEASE_TTL_S)
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %s: stopping after this step", signum)
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                report = loop.step()
                line = report.line()
                log.info("tick %s", line)
                if options["verbosity"] >= 2:
                    self.stdout.write(line)
                if options["once"] or stop.wait(options["interval"]):
                    break
        finally:
            loop.release()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
