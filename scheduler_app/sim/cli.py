"""The simulator's command line, shared by ``manage.py simulate`` and ``python -m
scheduler_app.sim`` so both behave the same (arguments, messages, exit codes)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TextIO

from scheduler_app.workloads.io import output_problem, write_files

from .scenario import ScenarioError, load_scenario
from .scratch import in_scratch

ENGINES = ("memory", "db")
POLICIES = ("full", "fifo", "priority-kill")


class SimulateError(Exception):
    """A failure to report as one line and a non-zero exit (no result written)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario file (YAML, or JSON by its .json suffix)")
    parser.add_argument("--out", required=True, help="where to write the result JSON")
    parser.add_argument("--engine", choices=ENGINES, default="memory")
    parser.add_argument("--policy", choices=POLICIES, default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def run_simulation(scenario_path: str, out: str, *, engine: str = "memory",
                   policy: str = "full", seed: int = 0, quiet: bool = False,
                   stderr: TextIO | None = None, protected: Collection[Path] = ()) -> dict:
    """Load, simulate, write ``out``. Raises SimulateError with a one-line message.

    ``out`` is checked before the run, not after it: a file in a directory that exists
    and may be written, not the scenario itself and none of ``protected`` (the configured
    database's files, which an answer must never replace).

    ``engine="db"`` runs through the production path (``db_engine.simulate_db``) on a
    scratch database made for the run and dropped after it (``scratch.py``), never on the
    configured one: it needs Django set up (``manage.py simulate``).
    """
    from .engine import simulate
    from .result import build_result, dump_result

    if engine not in ENGINES:
        raise SimulateError(f"--engine: must be one of {', '.join(ENGINES)}")
    if engine == "db" and not _django_ready():
        raise SimulateError("--engine db runs through Django's models: use "
                            "`python manage.py simulate SCENARIO --engine db --out R.json`")
    if policy not in POLICIES:
        raise SimulateError(f"--policy: must be one of {', '.join(POLICIES)}")
    _check_out(out, scenario_path, protected)
    try:
        scenario = load_scenario(scenario_path)
    except ScenarioError as exc:
        raise SimulateError(str(exc)) from exc
    if engine == "db" and scenario.carries_in():
        raise SimulateError("--engine db: this scenario starts with jobs already running or "
                            "queued at t=0 (running:, queued:), which only the memory engine "
                            "restores")
    if engine == "db" and not in_scratch():
        return _run_in_a_scratch_database(scenario_path, out, policy=policy, seed=seed,
                                          quiet=quiet)
    progress, close = _progress_bar(scenario.until_s, quiet, stderr or sys.stderr)
    try:
        if engine == "db":
            from .db_engine import DbEngineError, simulate_db

            try:
                outcome = simulate_db(scenario, policy=policy, seed=seed, progress=progress)
                _log_rebuilds_the_tables()
            except DbEngineError as exc:
                raise SimulateError(str(exc)) from exc
        else:
            outcome = simulate(scenario, policy=policy, seed=seed, progress=progress)
        if progress is not None:  # (the last quiet ticks up to the horizon are skipped)
            progress(scenario.until_s)
    finally:
        close()
    result = build_result(outcome)
    text = dump_result(result)
    try:
        write_files([(Path(out), text)])  # never a half-written result, nor a .tmp left
    except OSError as exc:
        raise SimulateError(f"--out: cannot write {out} ({exc.strerror or exc})") from exc
    return result


def _check_out(out: str, scenario_path: str, protected: Collection[Path]) -> None:
    problem = output_problem(out, protected)
    if problem is None and Path(out).resolve() == Path(scenario_path).resolve():
        problem = "is the scenario file; give another file name"
    if problem:
        raise SimulateError(f"--out {out or repr(out)}: {problem}")


def _run_in_a_scratch_database(scenario_path: str, out: str, *, policy: str, seed: int,
                                quiet: bool) -> dict:
    """The db engine in a child process on a scratch database (see scratch.py); the child
    writes ``out``, and this process reads it back."""
    import json

    from django.conf import settings

    from .scratch import ScratchError, run_in_scratch

    argv = [str(Path(scenario_path).resolve()), "--engine", "db", "--policy", policy,
            "--seed", str(seed), "--out", str(Path(out).resolve())]
    try:
        code = run_in_scratch(settings.DATABASES["default"], argv, quiet=quiet)
    except ScratchError as exc:
        raise SimulateError(str(exc)) from exc
    if code:
        raise SimulateError(f"--engine db: the run on the scratch database failed (exit "
                            f"{code}, message above); it was dropped, no result written")
    return json.loads(Path(out).read_text(encoding="utf-8"))


def _log_rebuilds_the_tables() -> None:
    """The scratch database is dropped after the run: check there, before it goes, that
    its log rebuilds its tables (what ``manage.py replay --verify`` checks)."""
    from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log

    from .db_engine import DbEngineError

    mismatches = compare_with_tables(rebuild_from_log())
    if mismatches:
        raise DbEngineError(f"the run's log does not rebuild its tables: "
                            f"{len(mismatches)} mismatch(es), the first: {mismatches[0]}")


def _django_ready() -> bool:
    try:
        from django.apps import apps
    except ImportError:
        return False
    return apps.ready


def _progress_bar(until_s: int, quiet: bool, stream: TextIO
                  ) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    """A tqdm bar redrawn in place on a terminal; elsewhere (a log, a pipe) a line at each
    tenth of the horizon, so that a captured log is not one line of carriage returns."""
    if quiet:
        return None, lambda: None
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return _progress_lines(until_s, stream), lambda: None
    from tqdm import tqdm

    bar = tqdm(total=until_s, unit="sim-s", file=stream, mininterval=0.5, leave=False,
               dynamic_ncols=True)
    shown = [0]

    def update(now: int) -> None:
        if now > shown[0]:
            bar.update(now - shown[0])
            shown[0] = now

    return update, bar.close


def _progress_lines(until_s: int, stream: TextIO) -> Callable[[int], None]:
    shown = [-1]

    def update(now: int) -> None:
        tenth = min(10, now * 10 // until_s) if until_s > 0 else 10
        if tenth > shown[0]:
            shown[0] = tenth
            print(f"simulated {tenth * 10}% ({min(now, until_s)} of {until_s} s)",
                  file=stream, flush=True)

    return update


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_app.sim",
                                     description="Simulate a scenario file.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        result = run_simulation(args.scenario, args.out, engine=args.engine,
                                policy=args.policy, seed=args.seed, quiet=args.quiet)
    except SimulateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(summary_line(result), file=sys.stderr)
    return 0


def summary_line(result: dict) -> str:
    m = result["metrics"]
    return (f"{result['scenario']}: {len(result['jobs'])} jobs, "
            f"utilization {m['utilization']}, mean wait {m['mean_wait_s']} s, "
            f"preemptions {m['preemptions']}, ticks {m['ticks']} "
            f"(p99 {m['tick_ms_p99']} ms)")
