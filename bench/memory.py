"""Peak memory of the core state at 100,000 jobs.

    python -m bench.memory [--jobs 100000 --nodes 2048 --teams 30] [--ticks 1]

tracemalloc from the scenario's validation (which builds the 100,000 ``JobSpec``s the core
keeps) through building the ``Scheduler``, submitting every job and running ``--ticks``
ticks after the last submission (the first places thousands of jobs); plus ru_maxrss.
Target (issue 3): at most 1 GiB.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench._common import (
    log,
    machine,
    machine_line,
    max_rss_mib,
    now_utc,
    pin_one_core,
    table,
    update_doc_section,
    write_results,
)
from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads import SyntheticParams, generate

NAME = "memory"
TARGET_MIB = 1024.0
MIB = 2**20


def run(*, jobs: int, nodes: int, teams: int, seed: int, ticks: int) -> dict[str, Any]:
    from scheduler_app.core.scheduler import Scheduler

    log(f"{NAME}: generating {jobs} jobs...")
    raw = generate(SyntheticParams(jobs=jobs, nodes=nodes, teams=teams, seed=seed))
    gc.collect()
    rss_before = max_rss_mib()
    tracemalloc.start()
    started = time.monotonic()
    scenario = validate_scenario(raw)
    specs_mib = tracemalloc.get_traced_memory()[0] / MIB
    base = tracemalloc.get_traced_memory()[0]
    sched = Scheduler(nodes=scenario.node_specs(), tenants=scenario.tenant_specs(),
                      config=scenario.config("full"), now=0)
    queued = 0
    last = 0
    for jd in scenario.jobs:  # file order is submit order
        last = jd.spec.submit_s
        decisions = sched.submit(jd.spec, last)
        queued += sum(1 for d in decisions if str(d.to_state) == "QUEUED")
    submitted_mib = (tracemalloc.get_traced_memory()[0] - base) / MIB
    log(f"{NAME}: {queued} queued; ticking...")
    placed = 0
    error = None
    try:
        for _ in range(ticks):
            result = sched.tick(last)
            placed += sum(1 for d in result.decisions if str(d.to_state) == "PLACING")
    except Exception as exc:  # noqa: BLE001 - a core bug must not lose the submit numbers
        error = f"{type(exc).__name__}: {exc}"
        log(f"{NAME}: the tick failed: {error}")
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "params": {"jobs": jobs, "nodes": nodes, "teams": teams, "seed": seed, "ticks": ticks},
        "queued": queued,
        "placed_by_ticks": placed,
        "error": error,
        "scenario_defs_mib": round(specs_mib, 1),
        "scheduler_after_submit_mib": round(submitted_mib, 1),
        "traced_current_mib": round(current / MIB, 1),
        "traced_peak_mib": round(peak / MIB, 1),
        "max_rss_before_mib": rss_before,
        "max_rss_mib": max_rss_mib(),
        "wall_s_traced": round(time.monotonic() - started, 1),
        "target_met": peak / MIB <= TARGET_MIB,
    }


def section(res: dict[str, Any], m: dict[str, Any], date: str) -> str:
    p = res["params"]
    return "\n".join([
        f"## Memory of the core state at {p['jobs']:,} jobs",
        "",
        f"{date}; {machine_line(m)}.",
        "",
        f"Workload: the synthetic busy day (`--jobs {p['jobs']} --nodes {p['nodes']} "
        f"--teams {p['teams']} --seed {p['seed']}`), every job submitted with no "
        f"tick in between ({res['queued']:,} queued), then {p['ticks']} tick(s) placing "
        f"{res['placed_by_ticks']:,} jobs"
        + (f" (**the tick failed**: {res['error']})" if res.get("error") else "")
        + ". tracemalloc counts Python allocations from "
        "validating the scenario (the `JobSpec`s the core keeps) to the end of the ticks.",
        "",
        table(["scenario defs MiB", "+ Scheduler after submit MiB", "traced current MiB",
               "traced peak MiB", "process ru_maxrss MiB"],
              [[res["scenario_defs_mib"], res["scheduler_after_submit_mib"],
                res["traced_current_mib"], res["traced_peak_mib"], res["max_rss_mib"]]]),
        "",
        f"Target: traced peak <= 1 GiB: **{'met' if res['target_met'] else 'NOT met'}**. "
        f"(ru_maxrss is the whole process, including the generator's "
        f"{res['max_rss_before_mib']:,} MiB of scenario dicts before tracing started.)",
        "",
        "Reproduce: `.venv/bin/python -m bench.memory` (raw: `bench/results/memory.json`).",
    ])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--teams", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ticks", type=int, default=1)
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--doc", default=None)
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args(argv)
    m = machine()
    if not a.no_pin:
        pin_one_core()
    res = run(jobs=a.jobs, nodes=a.nodes, teams=a.teams, seed=a.seed, ticks=a.ticks)
    path = write_results(NAME, res, Path(a.results_dir) if a.results_dir else None)
    update_doc_section(NAME, section(res, m, now_utc()), Path(a.doc) if a.doc else None)
    log(f"{NAME}: traced peak {res['traced_peak_mib']} MiB, ru_maxrss {res['max_rss_mib']} MiB;"
        f" wrote {path}")
    return res


if __name__ == "__main__":
    main()
