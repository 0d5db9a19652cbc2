"""Run every benchmark, one after the other, each in its own process (clean memory numbers).

    python -m bench.run_all            # full sizes: about 15 minutes of one core
    python -m bench.run_all --quick    # small sizes, a smoke run of a minute or two;
                                       # writes to bench/results/quick/, not to the docs

Full sizes: the 100,000-job busy day (tick latency, memory), the 120-day Helios window
(simulator speed, policies) and, contended, one busy day and week of it (see FULL). Each
run has a wall budget (``--max-wall-s``) after which it stops and reports what it
measured, so the whole suite stays within the shared machine's budget.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench._common import REPO, RESULTS_DIR, log

#: The whole suite takes about 15 minutes of one core on the benchmark machine (19:30 UTC,
#: 2026-11-29). The policies reuse sim_speed's ``full`` run of the 120-day window and run
#: ``fifo`` and ``priority-kill`` over the same window (about 3 minutes together).
#: As imported, the window never queues (the whole idle cluster may be borrowed and mean
#: demand is about half of it), so the policies also run on a contended copy: the same
#: jobs on half the GPUs and half the guarantees (``--capacity-scale 0.5``).
FULL: dict[str, list[str]] = {
    "tick_latency": ["--max-wall-s", "300", "--naive-every", "40"],
    "memory": [],
    "gates": [],
    "sim_speed": ["--max-wall-s", "300"],
    "policies": ["--from-day", "0", "--days", "120", "--reuse-full", "--max-wall-s", "600"],
    # one busy day (111), and the contended week around it (about 12 minutes of one core)
    "policies_contended": ["--from-day", "111", "--days", "1", "--capacity-scale", "0.5",
                           "--max-wall-s", "120"],
    "policies_week_contended": ["--from-day", "102", "--days", "7", "--capacity-scale", "0.5",
                                "--name", "policies_week_x0.5", "--max-wall-s", "600"],
}
QUICK_DIR = RESULTS_DIR / "quick"
QUICK: dict[str, list[str]] = {
    "tick_latency": ["--jobs", "3000", "--nodes", "64", "--teams", "8", "--hours", "0.5",
                     "--naive-samples", "2", "--naive-every", "200", "--max-wall-s", "60"],
    "memory": ["--jobs", "10000", "--nodes", "256", "--teams", "10"],
    "gates": ["--nodes", "256", "--queued", "2000", "--parked", "10000", "--ticks", "10"],
    "sim_speed": ["--from-day", "30", "--days", "2", "--max-wall-s", "60"],
    "policies": ["--from-day", "30", "--days", "2", "--reuse-full", "--max-wall-s", "60",
                 "--img", str(QUICK_DIR / "policies_helios.png")],
    "policies_contended": ["--from-day", "30", "--days", "1", "--capacity-scale", "0.5",
                           "--max-wall-s", "60",
                           "--img", str(QUICK_DIR / "policies_x0.5_helios.png")],
    "policies_week_contended": ["--from-day", "30", "--days", "2", "--capacity-scale", "0.5",
                                "--name", "policies_week_x0.5", "--max-wall-s", "60",
                                "--img", str(QUICK_DIR / "policies_week_x0.5_helios.png")],
}


def module_of(name: str) -> str:
    """The script a plan entry runs (``policies_contended`` is ``bench.policies``)."""
    for script in ("policies", "tick_latency"):
        if name.startswith(script):
            return f"bench.{script}"
    return f"bench.{name}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated subset, e.g. memory,policies")
    a = ap.parse_args(argv)
    plan = QUICK if a.quick else FULL
    names = [n.strip() for n in a.only.split(",")] if a.only else list(plan)
    failed = []
    for name in names:
        if name not in plan:
            ap.error(f"--only: unknown benchmark {name!r}; known: {', '.join(plan)}")
        args = list(plan[name])
        if a.quick:
            QUICK_DIR.mkdir(parents=True, exist_ok=True)
            args += ["--results-dir", str(QUICK_DIR), "--doc", str(QUICK_DIR / "PERFORMANCE.md")]
        log(f"run_all: {name} {' '.join(args)}")
        started = time.monotonic()
        rc = subprocess.call([sys.executable, "-m", module_of(name), *args], cwd=REPO)
        log(f"run_all: {name} exit {rc} after {time.monotonic() - started:.0f} s")
        if rc:
            failed.append(name)
    if failed:
        log(f"run_all: failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
