"""``manage.py simulate SCENARIO --out RESULT.json [--engine memory|db]``: a thin shell over
scheduler_app.sim.cli. ``--engine db`` runs the scenario through the models, the log, the
services and the leader on a scratch database it makes and drops (sim/db_engine.py,
sim/scratch.py); the configured database is never written."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.management.outputs import configured_database_files
from scheduler_app.sim.cli import SimulateError, add_arguments, run_simulation, summary_line
from scheduler_app.sim.scratch import in_scratch


class Command(BaseCommand):
    help = "Run a scenario through the scheduler in virtual time and write the result JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: object, **options: object) -> None:
        try:
            result = run_simulation(
                str(options["scenario"]), str(options["out"]),
                engine=str(options["engine"]), policy=str(options["policy"]),
                seed=int(options["seed"]),  # type: ignore[call-overload]
                quiet=bool(options["quiet"]),
                protected=configured_database_files(),
            )
        except SimulateError as exc:
            raise CommandError(str(exc)) from exc
        # the scratch child's parent prints the summary, once
        if not options["quiet"] and not in_scratch():
            self.stderr.write(summary_line(result))
            if options["engine"] == "db":
                self.stderr.write("(on a scratch database, dropped after the run; its log "
                                  "rebuilt its tables)")
