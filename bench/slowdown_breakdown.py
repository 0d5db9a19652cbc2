"""Which jobs make a window's mean bounded slowdown and mean wait: one ``full`` run
(memory engine, views off), its completed jobs grouped by GPUs and run time.

    python -m bench.slowdown_breakdown [--policy full] [--loaded]

Default window: ../shared/ANCHORS.md's (as ``bench.policies --anchor``). Prints a table
(about 10 minutes on one core for the anchor window); docs/PERFORMANCE.md, "which jobs make
the slowdown", was written from it by hand.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from bench._common import log, pin_one_core, table
from bench._helios_run import helios_scenario
from bench.policies import ANCHOR, LOADED
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import JobRecord, bounded_slowdown

SIZES = ((65, "65 GPUs or more"), (33, "33-64 GPUs"), (9, "9-32 GPUs"), (2, "2-8 GPUs"),
         (1, "1 GPU"))
RUNS = ((60, "run < 60 s"), (600, "run 60-600 s"), (None, "run 600 s or more"))


def _label(gpus: int, runtime_s: int) -> str:
    size = next(name for least, name in SIZES if gpus >= least)
    run = next(name for below, name in RUNS if below is None or runtime_s < below)
    return f"{size}, {run}"


def breakdown(jobs: Iterable[JobRecord]) -> list[dict[str, Any]]:
    """One row per (size, run time) group of the completed jobs, the largest share of the
    slowdown's sum first: count, mean bounded slowdown (the contract's definition), share
    of the sum, mean wait."""
    groups: dict[str, list[float]] = {}
    total = 0.0
    for job in jobs:
        if job.state != "COMPLETED" or job.end_s is None or job.first_start_s is None:
            continue
        slowdown = bounded_slowdown(job.end_s - job.submit_s, job.runtime_s)
        g = groups.setdefault(_label(job.gpus, job.runtime_s), [0, 0.0, 0.0])
        g[0] += 1
        g[1] += slowdown
        g[2] += job.first_start_s - job.submit_s
        total += slowdown
    rows = [{"jobs": label, "count": int(n), "mean_bounded_slowdown": s / n,
             "share_of_sum": s / total if total else 0.0, "mean_wait_s": w / n}
            for label, (n, s, w) in groups.items()]
    return sorted(rows, key=lambda r: -r["share_of_sum"])


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="full")
    ap.add_argument("--loaded", action="store_true", help="days 0-119 compressed 2.7x")
    a = ap.parse_args(argv)
    pin_one_core()
    scenario, _info = helios_scenario(**(LOADED if a.loaded else ANCHOR))
    log(f"slowdown_breakdown: simulating {a.policy}...")
    outcome = Simulation(scenario, policy=a.policy, views=False).run()
    rows = breakdown(outcome.jobs)
    print(table(["jobs", "count", "mean bounded slowdown", "share of the sum",
                 "mean wait s"],
                [[r["jobs"], r["count"], round(r["mean_bounded_slowdown"], 1),
                  f"{100 * r['share_of_sum']:.1f} %", round(r["mean_wait_s"])]
                 for r in rows]))
    return rows


if __name__ == "__main__":
    main()
