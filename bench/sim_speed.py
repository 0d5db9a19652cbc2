"""Simulator speed: simulated seconds per wall second on the 120-day Helios window.

    python -m bench.sim_speed [--from-day 0 --days 120] [--policy full] [--max-wall-s 600]

Imports the window (scheduler_app.workloads.helios), runs it through the memory engine as
``manage.py simulate`` does (views on: pending reasons and start estimates sampled after
every tick), and divides the simulated span reached by the wall time of the run (import
and validation excluded, reported apart). Its ``full`` metrics are kept so that
``bench.policies`` need not run ``full`` again on the same window.
"""

from __future__ import annotations

import argparse
import time
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
from bench._helios_run import helios_scenario, run_policy

NAME = "sim_speed"


def run(*, from_day: int, days: int, policy: str, max_wall_s: float | None,
        trace: str | None = None, quota: str | None = None) -> dict[str, Any]:
    started = time.monotonic()
    log(f"{NAME}: importing Helios days {from_day}-{from_day + days - 1}...")
    scenario, window = helios_scenario(from_day, days, trace=trace, quota=quota)
    load_s = time.monotonic() - started
    log(f"{NAME}: {window['jobs']} jobs; simulating ({policy})...")
    rep = run_policy(scenario, policy, max_wall_s=max_wall_s)
    return {"window": window, "import_and_validate_s": round(load_s, 1), **rep.as_dict(),
            "max_rss_mib": max_rss_mib()}


def section(res: dict[str, Any], m: dict[str, Any], date: str) -> str:
    w = res["window"]
    status = "complete" if res["complete"] else f"**incomplete**: {res['error']}"
    met = res["metrics"] or {}
    return "\n".join([
        "## Simulator speed on the Helios window",
        "",
        f"{date}; {machine_line(m)}.",
        "",
        f"Window: Helios Venus days {w['from_day']}-{w['from_day'] + w['days'] - 1} "
        f"({w['jobs']:,} jobs, {w['gpus']:,} GPUs, {w['teams']} teams, "
        f"{w['quota_events']} quota changes), until_s {w['until_s']:,}; policy "
        f"`{res['policy']}`, memory engine, views on. Run: {status}"
        + ("." if res["complete"] else
           f"; it reached day {res['simulated_s'] / 86400:.1f} of the window, so the speed "
           "below is over those days only (the trace's first week is nearly empty)."),
        "",
        table(["simulated s", "wall s", "simulated s / wall s", "ticks", "tick p50 ms",
               "tick p99 ms", "import + validate s", "peak RSS MiB"],
              [[res["simulated_s"], res["wall_s"], res["sim_s_per_wall_s"], met.get("ticks"),
                met.get("tick_ms_p50"), met.get("tick_ms_p99"), res["import_and_validate_s"],
                res["max_rss_mib"]]]),
        "",
        f"Reproduce: `.venv/bin/python -m bench.sim_speed --from-day {w['from_day']} "
        f"--days {w['days']}` (raw: `bench/results/sim_speed.json`).",
    ])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-day", type=int, default=0)
    ap.add_argument("--days", type=int, default=120)
    ap.add_argument("--policy", default="full", choices=("full", "fifo", "priority-kill"))
    ap.add_argument("--max-wall-s", type=float, default=600.0)
    ap.add_argument("--trace", default=None, help="default: ../shared/traces")
    ap.add_argument("--quota", default=None, help="default: ../shared/traces")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--doc", default=None)
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args(argv)
    m = machine()
    if not a.no_pin:
        pin_one_core()
    res = run(from_day=a.from_day, days=a.days, policy=a.policy, max_wall_s=a.max_wall_s,
              trace=a.trace, quota=a.quota)
    path = write_results(NAME, res, Path(a.results_dir) if a.results_dir else None)
    update_doc_section(NAME, section(res, m, now_utc()), Path(a.doc) if a.doc else None)
    log(f"{NAME}: {res['sim_s_per_wall_s']} simulated s per wall s "
        f"({'complete' if res['complete'] else res['error']}); wrote {path}")
    return res


if __name__ == "__main__":
    main()
