"""Which jobs' waits moved between two versions of the scheduler: each run saves its
jobs' waits from one ``full`` run of a Helios window (memory engine, views off), then the
two files are compared by job size and by team.

    python -m bench.wait_shift save FILE [--policy full] [--loaded]
    python -m bench.wait_shift compare BEFORE AFTER

Run ``save`` in a checkout of each version (``git worktree add``, then
``PYTHONPATH=<worktree> python -m bench.wait_shift save ...`` from it). Default window:
../shared/ANCHORS.md's (as ``bench.policies --anchor``); about 2 to 4 minutes a run.
docs/PERFORMANCE.md, "which jobs' waits grew", was written from it by hand.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench._common import log, pin_one_core, table
from scheduler_app.sim.result import JobRecord

SIZES = ((65, "65 GPUs or more"), (33, "33-64 GPUs"), (9, "9-32 GPUs"), (1, "1-8 GPUs"))


def waits(jobs: Iterable[JobRecord]) -> dict[str, dict[str, Any]]:
    """job id -> its team, GPUs, wait (first start - submit) and preemptions, for the jobs
    that started."""
    return {j.job_id: {"tenant": j.tenant, "gpus": j.gpus,
                       "wait_s": j.first_start_s - j.submit_s, "preemptions": j.preemptions}
            for j in jobs if j.first_start_s is not None}


def _size(gpus: int) -> str:
    return next(name for least, name in SIZES if gpus >= least)


def shift(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], by: str
          ) -> list[dict[str, Any]]:
    """One row per group (``by``: "size" or "tenant") of the jobs that started in both
    runs: count, mean wait before and after, the group's part of the change in the sum
    of waits, and the preemptions of its jobs before and after; largest part first."""
    groups: dict[str, list[float]] = {}
    for job_id, b in before.items():
        a = after.get(job_id)
        if a is None:
            continue
        key = _size(b["gpus"]) if by == "size" else b["tenant"]
        g = groups.setdefault(key, [0, 0.0, 0.0, 0, 0])
        g[0] += 1
        g[1] += b["wait_s"]
        g[2] += a["wait_s"]
        g[3] += b["preemptions"]
        g[4] += a["preemptions"]
    moved = sum(g[2] - g[1] for g in groups.values())
    rows = [{by: key, "count": int(n), "mean_wait_before_s": wb / n,
             "mean_wait_after_s": wa / n,
             "part_of_change": (wa - wb) / moved if moved else 0.0,
             "preemptions_before": int(pb), "preemptions_after": int(pa)}
            for key, (n, wb, wa, pb, pa) in groups.items()]
    return sorted(rows, key=lambda r: -r["part_of_change"])


def main(argv: list[str] | None = None) -> list[dict[str, Any]] | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    save = sub.add_parser("save", help="run a window and save its jobs' waits")
    save.add_argument("file", type=Path)
    save.add_argument("--policy", default="full")
    save.add_argument("--loaded", action="store_true", help="days 0-119 compressed 2.7x")
    cmp_ = sub.add_parser("compare", help="compare two saved runs")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "save":
        from bench._helios_run import helios_scenario
        from bench.policies import ANCHOR, LOADED
        from scheduler_app.sim.engine import Simulation

        pin_one_core()
        scenario, _info = helios_scenario(**(LOADED if a.loaded else ANCHOR))
        log(f"wait_shift: simulating {a.policy}...")
        outcome = Simulation(scenario, policy=a.policy, views=False).run()
        a.file.write_text(json.dumps(waits(outcome.jobs), sort_keys=True))
        log(f"wait_shift: {a.file} written")
        return None
    before = json.loads(a.before.read_text())
    after = json.loads(a.after.read_text())
    rows = []
    for by in ("size", "tenant"):
        part = shift(before, after, by)
        rows += part
        print(table([by, "jobs", "mean wait before s", "mean wait after s",
                     "part of the change", "preemptions before", "after"],
                    [[r[by], r["count"], round(r["mean_wait_before_s"]),
                      round(r["mean_wait_after_s"]), f"{100 * r['part_of_change']:.1f} %",
                      r["preemptions_before"], r["preemptions_after"]] for r in part]))
    return rows


if __name__ == "__main__":
    main()
