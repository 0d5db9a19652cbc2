"""``manage.py demo_agents``: simulated node agents and a trickle of jobs, for the demo.

Plays every node of the cluster through the agent services (confirm starts, report
checkpoints, acknowledge preemption requests, report exits after each job's run time; see
``dashboard.demo``) and submits a demo job every few seconds, so the dashboard shows a
living cluster. It does not tick: run the scheduler beside it (``manage.py run_scheduler``),
or pass ``--tick`` to step a leader loop here too (the lease keeps a single leader).

    python manage.py demo_agents                 # agents + a job every 15 s, until Ctrl-C
    python manage.py demo_agents --tick          # ... and the scheduler loop in-process
    python manage.py demo_agents --no-trickle --for 60

A database error in a round (SQLite's "database is locked" while a bulk submit holds
its one write lock, a lost connection) is written to standard error and the loop goes
on: the next round tries again (a heartbeat not sent is sent then). It ended the
process, and 30 s later the scheduler marked the silent nodes down.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, close_old_connections, connection

from dashboard.demo import SimulatedAgents, Trickle
from scheduler_app.services.leader import LeaderLoop

log = logging.getLogger("dashboard.demo")
T = TypeVar("T")


class Command(BaseCommand):
    help = "Simulated node agents and a trickle of demo jobs (the demo's living cluster)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=1.0,
                            help="seconds between two rounds of the agents (default 1)")
        parser.add_argument("--every", type=int, default=15,
                            help="submit a demo job every N seconds (default 15)")
        parser.add_argument("--no-trickle", action="store_true", help="submit no jobs")
        parser.add_argument("--max-queued", type=int, default=40,
                            help="submit nothing while this many jobs wait (default 40)")
        parser.add_argument("--seed", type=int, default=0, help="the trickle's random seed")
        parser.add_argument("--default-run-s", type=int, default=900,
                            help="run time of a job with no limit and no --demo-seconds")
        parser.add_argument("--no-heartbeat", action="store_true",
                            help="send no heartbeats (nodes stay exempt from the timeout)")
        parser.add_argument("--tick", action="store_true",
                            help="also step a scheduler leader loop every --tick-interval s")
        parser.add_argument("--tick-interval", type=float,
                            default=float(settings.SCHEDULER_TICK_INTERVAL_S))
        parser.add_argument("--for", dest="duration", type=float, default=0,
                            help="stop after this many seconds (default: run until stopped)")
        parser.add_argument("--once", action="store_true", help="one round, then exit")
        parser.add_argument("--skip-nodes", default="",
                            help="comma-separated nodes real agents run (demo_real_agents)")

    def handle(self, *args: Any, **options: Any) -> None:
        agents = SimulatedAgents(
            default_run_s=options["default_run_s"],
            heartbeat_s=0 if options["no_heartbeat"] else 5,
            skip_nodes=frozenset(n for n in options["skip_nodes"].split(",") if n),
        )
        trickle = None if options["no_trickle"] else Trickle(
            every_s=options["every"], max_queued=options["max_queued"], seed=options["seed"])
        loop = LeaderLoop(holder=f"demo-{socket.gethostname()}:{os.getpid()}",
                          ttl_s=settings.SCHEDULER_LEASE_TTL_S) if options["tick"] else None
        registered = agents.register_all()
        self.stdout.write(f"demo agents: playing {len(registered)} nodes"
                          + ("" if trickle is None else f", a job every {trickle.every_s} s")
                          + (", ticking" if loop else "; run the scheduler beside this"))
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        started = time.monotonic()
        last_tick = 0.0
        try:
            while True:
                if not connection.in_atomic_block:
                    close_old_connections()
                if loop is not None and time.monotonic() - last_tick >= options["tick_interval"]:
                    report = self._survive("tick", loop.step)
                    last_tick = time.monotonic()
                    if report is not None and report.error:
                        self.stderr.write(f"tick: {report.error}")
                done = self._survive("agents", agents.step) or {}
                job = self._survive("trickle", trickle.step) if trickle is not None else None
                if options["verbosity"] >= 2 and (done or job):
                    extra = f" submitted #{job.pk} {job.name} ({job.gpus} GPUs)" if job else ""
                    self.stdout.write(f"agents: {done}{extra}")
                if options["once"]:
                    break
                if options["duration"] and time.monotonic() - started >= options["duration"]:
                    break
                if stop.wait(options["interval"]):
                    break
        finally:
            if loop is not None:
                self._survive("lease release", loop.release)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _survive(self, what: str, step: Callable[[], T]) -> T | None:
        """``step()``, or None when a database error ended it: said on standard error and
        in the log; the loop's next round tries again."""
        try:
            return step()
        except DatabaseError as error:
            log.warning("demo agents: %s: database error, retried at the next round: %s",
                        what, error)
            self.stderr.write(f"demo agents: {what}: database error, retried at the next "
                              f"round: {error}")
            return None
