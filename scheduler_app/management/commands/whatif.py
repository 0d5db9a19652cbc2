"""``manage.py whatif [--set-quota TEAM=G[:B]] [--add-nodes POD=N] [--drain NODE]
[--undrain NODE] [--up NODE] [--cancel JOB] [--setting NAME=VALUE] [--hours H]
[--json FILE] [--export-scenario FILE]``:
the live state played forward twice in the memory engine, as it is and with the changes
(``sim/whatif.py``; the snapshot: ``selectors/whatif.py``). Reads the database in one
read-only transaction and writes nothing to it. A bad flag exits 2 with one line naming
it, as argparse does for its own errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError

from scheduler_app.management.outputs import configured_database_files
from scheduler_app.selectors.whatif import live_snapshot
from scheduler_app.sim.parallel import RunFailed
from scheduler_app.sim.whatif import (
    DEFAULT_HOURS,
    WhatIfError,
    parse_changes,
    render_table,
    run_whatif,
    scenario_text,
    write_files,
)
from scheduler_app.workloads.io import output_problem, sqlite_file


class Command(BaseCommand):
    help = ("Play the live cluster forward twice (as it is, and with the changes) and "
            "compare the teams' waits, GPUs held and preemptions.")

    def add_arguments(self, parser: CommandParser) -> None:
        add = parser.add_argument
        add("--set-quota", action="append", default=[], metavar="TEAM=GUARANTEE[:BORROW]",
            help="a team's guarantee (and borrow limit), repeatable")
        add("--add-nodes", action="append", default=[], metavar="POD=N",
            help="N more nodes like the pod's last one, repeatable")
        add("--drain", action="append", default=[], metavar="NODE", help="repeatable")
        add("--undrain", action="append", default=[], metavar="NODE",
            help="a node draining now back in use, repeatable")
        add("--up", action="append", default=[], metavar="NODE",
            help="a node down now back up, repeatable")
        add("--cancel", action="append", default=[], metavar="JOB",
            help="a running or queued job: its id, a task's <array>_<index>, or "
                 "<array>_* for every task of an array; repeatable")
        add("--setting", action="append", default=[], metavar="NAME=VALUE",
            help="any scheduler setting (SCHEDULER_<NAME>), repeatable")
        add("--hours", type=float, default=DEFAULT_HOURS, help="horizon (default 24)")
        add("--json", metavar="FILE", help="write the comparison as JSON")
        add("--export-scenario", metavar="FILE",
            help="write the snapshot as a scenario file (YAML; JSON by a .json suffix) "
                 "that `manage.py simulate` runs")
        add("--workers", type=int, default=None, metavar="N",
            help="1: the two runs one after the other; 2: side by side in two processes "
                 "(default: 2 when two cores are usable)")
        add("--quiet", action="store_true", help="no progress on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            changes = parse_changes(options["set_quota"], options["add_nodes"],
                                    options["drain"], options["cancel"], options["setting"],
                                    options["undrain"], options["up"])
        except WhatIfError as exc:
            self._bad(str(exc))
        outputs = self._outputs(options)  # checked before the runs, not after them
        self._terminal = self.stderr.isatty()  # asked once: progress comes every tick
        progress = None if options["quiet"] else self._progress
        snap = self._snapshot(changes.cancel)  # (to say which of them have ended)
        try:
            result, scenario = run_whatif(snap, changes, hours=options["hours"],
                                          progress=progress, workers=options["workers"])
        except WhatIfError as exc:
            self._bad(str(exc))
        except RunFailed as exc:  # a run's process failed: say which, no traceback
            self.stderr.write(f"whatif: error: {exc}")
            sys.exit(1)
        if not options["quiet"] and self._terminal:
            self.stderr.write("")  # end the bar's line
        self.stdout.write(render_table(result), ending="")
        texts = {"json": lambda: json.dumps(result.to_json(), indent=1) + "\n",
                 "export_scenario": lambda: scenario_text(scenario, outputs["export_scenario"])}
        try:
            write_files([(path, texts[flag]()) for flag, path in outputs.items()])
        except OSError as exc:  # (checked before the runs; the disk may have filled since)
            self.stderr.write(f"whatif: error: {exc.filename}: {exc.strerror}; "
                              "nothing was written")
            sys.exit(1)
        if not options["quiet"]:
            t = result.timings_s
            self.stderr.write(f"snapshot {t['snapshot']:.2f} s, scenarios {t['build']:.2f} s, "
                              f"two runs {t['runs']:.2f} s "
                              f"({'side by side' if result.workers > 1 else 'one process'})")

    def _outputs(self, options: dict[str, Any]) -> dict[str, Path]:
        """``--json`` and ``--export-scenario`` as paths, each one a file the command may
        write: in a directory that exists and it may write to, not a directory itself, not
        the other flag's file, and never the configured database (or its journal files),
        which a what-if promises to leave as it was."""
        out: dict[str, Path] = {}
        for flag in ("json", "export_scenario"):
            value = options[flag]
            if value is None:
                continue
            name = f"--{flag.replace('_', '-')}"
            if not value.strip():
                self._bad(f"{name} '': must be a file name")
            path = Path(value)
            where = path.resolve()
            problem = output_problem(path)
            if problem:
                self._bad(f"{name} {value}: {problem}")
            if where in configured_database_files():
                self._bad(f"{name} {value}: is the live database; a what-if never writes it")
            for other, taken in out.items():
                if taken.resolve() == where:
                    self._bad(f"{name} {value}: is also --{other.replace('_', '-')}'s file")
            out[flag] = path
        return out

    def _snapshot(self, about: tuple[str, ...]) -> Any:
        """The live state; one line and status 1 if there is none to read: a SQLite file
        that is not there (connecting would make an empty one: a mistyped path made a
        file and ended in a traceback, an operator's session, 2026-12-07), or a database
        not migrated."""
        path = sqlite_file(settings.DATABASES["default"])
        if path is not None and not path.exists():
            self._fail(f"the database {path} does not exist: there is no live state to "
                       "play forward (DATABASE_URL)")
        try:
            return live_snapshot(about=about)
        except DatabaseError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self._fail(f"cannot read the live state: {first} (is the database migrated? "
                       "manage.py migrate)")

    def _fail(self, message: str) -> None:
        self.stderr.write(f"whatif: error: {message}")
        sys.exit(1)

    def _bad(self, message: str) -> None:
        self.stderr.write(f"whatif: error: {message}")
        sys.exit(2)

    _shown: tuple[str, int] | None = None
    _terminal = False

    def _progress(self, fraction: float, label: str) -> None:
        """A bar redrawn in place on a terminal, a percent at a time; elsewhere (a log, a
        pipe) a line at each tenth, so that a captured log is not one line of hundreds of
        carriage returns."""
        terminal = self._terminal
        percent = int(fraction * 100)
        if not terminal:
            percent -= percent % 10
        if (label, percent) == self._shown:
            return  # not once per simulated instant
        self._shown = (label, percent)
        if terminal:
            self.stderr.write(f"\r{label:<9} {percent:3d}%", ending="")
        else:
            self.stderr.write(f"{label} {percent}%")
        self.stderr.flush()
