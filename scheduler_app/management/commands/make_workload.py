"""``manage.py make_workload``: write the seeded synthetic busy-day scenario (docs/workloads.md)."""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.management.outputs import check_out
from scheduler_app.workloads import SyntheticParams, generate, write_scenario


class Command(BaseCommand):
    help = "Generate the synthetic workload (the seed's mix) as a scenario file (YAML or .json)."

    def add_arguments(self, parser: CommandParser) -> None:
        d = SyntheticParams()
        parser.add_argument("--out", required=True, help="scenario file to write (.yaml or .json)")
        parser.add_argument("--jobs", type=int, default=d.jobs)
        parser.add_argument("--nodes", type=int, default=d.nodes, help="8-GPU nodes")
        parser.add_argument("--teams", type=int, default=d.teams)
        parser.add_argument("--seed", type=int, default=d.seed)
        parser.add_argument("--hours", type=float, default=d.hours,
                            help="simulated window (until_s) and span of the late arrivals")

    def handle(self, *args: Any, **opts: Any) -> None:
        check_out(opts["out"], makes_parents=True)  # before the work, not after it
        try:
            params = SyntheticParams(jobs=opts["jobs"], nodes=opts["nodes"], teams=opts["teams"],
                                     seed=opts["seed"], hours=opts["hours"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        started = time.monotonic()
        print(f"generating {params.jobs} jobs on {params.nodes} nodes...", file=sys.stderr)
        scenario = generate(params)
        print(f"writing {opts['out']}...", file=sys.stderr)
        path = write_scenario(scenario, opts["out"])
        print(f"done in {time.monotonic() - started:.1f} s", file=sys.stderr)
        self.stdout.write(f"{path}: {len(scenario['jobs'])} jobs, "
                          f"{params.total_gpus} GPUs, {params.teams} teams")
