"""``manage.py import_trace``: a window of the Helios Venus trace as a scenario file."""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.management.outputs import check_out
from scheduler_app.workloads import HeliosParams, import_helios, write_scenario
from scheduler_app.workloads.helios import QUOTA_FILE, TRACE_FILE, default_trace_dir


class Command(BaseCommand):
    help = "Import a window of days of the Helios trace as a scenario file (YAML or .json)."

    def add_arguments(self, parser: CommandParser) -> None:
        d = HeliosParams()
        parser.add_argument("--out", required=True, help="scenario file to write (.yaml or .json)")
        parser.add_argument("--from-day", type=int, default=d.from_day)
        parser.add_argument("--days", type=int, default=d.days)
        parser.add_argument("--trace", default=str(default_trace_dir() / TRACE_FILE))
        parser.add_argument("--quota", default=str(default_trace_dir() / QUOTA_FILE))
        parser.add_argument("--capacity-scale", type=float, default=d.capacity_scale,
                            help="cluster and guarantees times this (0.5: a contended window)")

    def handle(self, *args: Any, **opts: Any) -> None:
        check_out(opts["out"], makes_parents=True)  # before the work, not after it
        started = time.monotonic()
        try:
            params = HeliosParams(from_day=opts["from_day"], days=opts["days"],
                                  capacity_scale=opts["capacity_scale"])
            scenario = import_helios(
                params, trace=opts["trace"], quota=opts["quota"],
                progress=lambda msg: print(msg, file=sys.stderr),
            )
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        print(f"writing {opts['out']}...", file=sys.stderr)
        path = write_scenario(scenario, opts["out"])
        print(f"done in {time.monotonic() - started:.1f} s", file=sys.stderr)
        self.stdout.write(f"{path}: {len(scenario['jobs'])} jobs, "
                          f"{len(scenario['tenants'])} teams, until_s {scenario['until_s']}")
