"""Tick latency on the 100,000-job busy day, beside the naive tick on the same states.

    python -m bench.tick_latency [--jobs 100000 --nodes 2048 --teams 30 --hours 2]
                                 [--naive-samples 4] [--max-wall-s 600] [--policy full]
                                 [--workload busy-day|adversarial]

Runs the synthetic workload (scheduler_app.workloads.synthetic) for its two simulated hours
through the simulator's memory engine, timing every tick (the engine times
``Scheduler.tick`` alone). Before every ``--naive-every``-th tick (at most
``--naive-samples`` times) it snapshots the queued jobs and free GPUs and times the naive
tick (bench/naive_tick.py) on them: the same state the indexed tick then sees.
``--workload adversarial`` runs ``workloads.synthetic.ADVERSARIAL`` instead (no backlog,
every arrival in the first hour, 8 pods of 256 nodes, guarantees adding up to 94 %,
sizes 1 to 2,048; ``--jobs`` still sets the count), into its own results file and section.
Targets: p99 <= 100 ms on both workloads, max within the 2 s budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import threading
import time
from collections.abc import Callable
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
from bench.naive_tick import naive_tick, snapshot
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import percentile
from scheduler_app.sim.scenario import Scenario, validate_scenario
from scheduler_app.workloads import SyntheticParams, generate
from scheduler_app.workloads.synthetic import ADVERSARIAL

NAME = "tick_latency"
P99_TARGET_MS = 100.0
MAX_TARGET_MS = 2000.0


class _OutOfTime(Exception):
    pass


class MeasuredSimulation(Simulation):
    """The memory engine, plus queue sizes per tick and naive ticks at sampled instants."""

    def __init__(self, scenario: Scenario, *, policy: str, naive_every: int, naive_samples: int,
                 naive_deadline_s: float, max_wall_s: float | None) -> None:
        super().__init__(scenario, policy=policy, views=False)
        # the tick as production runs it: with the look-ahead's estimates (phase 4), which
        # a simulation that records no estimates would leave out
        self.sched.look_ahead = True
        self._naive_every = naive_every
        self._naive_left = naive_samples
        self._naive_deadline_s = naive_deadline_s
        self._wall_deadline = None if max_wall_s is None else time.monotonic() + max_wall_s
        self.samples: list[dict[str, Any]] = []
        self.queued: list[int] = []
        self.running: list[int] = []
        self.last_now = 0

    def _tick(self, now: int) -> None:
        if self._wall_deadline is not None and time.monotonic() > self._wall_deadline:
            raise _OutOfTime
        naive = None
        if self._naive_left and (len(self.tick_ms) + 1) % self._naive_every == 0:
            self._naive_left -= 1
            naive_started = time.monotonic()
            snap = snapshot(self.sched)
            naive = naive_tick(snap, deadline_s=self._naive_deadline_s)
            if self._wall_deadline is not None:  # the baseline's time is not the run's
                self._wall_deadline += time.monotonic() - naive_started
            log(f"  t={now}s: naive tick on {len(snap.jobs)} queued x {len(snap.free)} nodes: "
                f"{naive.seconds:.2f} s{'' if naive.complete else ' (extrapolated)'}")
        super()._tick(now)
        self.last_now = now
        queued = len(self.sched.queues)
        running = sum(len(h) for h in self.sched.holders.values())
        self.queued.append(queued)
        self.running.append(running)
        if naive is not None:
            self.samples.append({
                "at_s": now, "queued": queued, "running": running,
                "heaps": _heap_count(self.sched.queues),
                "indexed_ms": round(self.tick_ms[-1], 3), "naive_ms": round(naive.ms, 1),
                "naive_complete": naive.complete, "naive_examined": naive.examined,
                "ratio": round(naive.ms / max(self.tick_ms[-1], 1e-6), 1),
            })


def _run_deep(fn: Callable[[], Any]) -> Any:
    """Call ``fn`` in a thread with a deep stack and recursion limit.

    The engine drains the agents' reactions recursively (``_apply`` -> ``_react`` ->
    ``_apply``), one level per reaction, so a tick that places thousands of jobs at once
    (the 80,000-job backlog at t=0) passes the default limit of 1,000 (RecursionError).
    Reported to the simulator's owner; this keeps the engine's code and order untouched.
    """
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000_000)
    threading.stack_size(1024 * 2**20)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["exc"] = exc

    try:
        worker = threading.Thread(target=target, name="simulation")
        worker.start()
        worker.join()
    finally:
        threading.stack_size(0)
        sys.setrecursionlimit(old_limit)
    if "exc" in box:
        raise box["exc"]
    return box.get("out")


def _heap_count(queues: Any) -> int | None:
    """Non-empty (tenant, size class) heaps; None if the core's queue API has moved on."""
    for name in ("heap_keys", "keys"):
        method = getattr(queues, name, None)
        if callable(method):
            return sum(1 for key in method() if queues.count(key) > 0)
    return None


def run(*, jobs: int, nodes: int, teams: int, hours: float, seed: int, policy: str,
        naive_every: int, naive_samples: int, naive_deadline_s: float,
        max_wall_s: float | None, workload: str = "busy-day") -> dict[str, Any]:
    if workload == "adversarial":
        params = dataclasses.replace(ADVERSARIAL, jobs=jobs, seed=seed)
    else:
        params = SyntheticParams(jobs=jobs, nodes=nodes, teams=teams, hours=hours, seed=seed)
    log(f"{NAME}: generating {jobs} jobs on {nodes} nodes...")
    scenario = validate_scenario(generate(params))
    until = scenario.until_s
    sim = MeasuredSimulation(scenario, policy=policy, naive_every=naive_every,
                             naive_samples=naive_samples, naive_deadline_s=naive_deadline_s,
                             max_wall_s=max_wall_s)
    log(f"{NAME}: simulating {until} s ({policy})...")
    started = time.monotonic()
    error = None
    stopped = False
    try:
        _run_deep(sim.run)
    except _OutOfTime:
        stopped = True
        log(f"{NAME}: wall budget spent at t={sim.last_now}s; reporting what ran")
    except Exception as exc:  # noqa: BLE001 - a core bug must not lose the measurements
        error = f"{type(exc).__name__}: {exc}"
        log(f"{NAME}: the run failed at t={sim.last_now}s: {error}")
    wall = time.monotonic() - started
    ticks = sim.tick_ms
    ratios = [s["ratio"] for s in sim.samples]
    naive_ms = [s["naive_ms"] for s in sim.samples]
    paired_ms = [s["indexed_ms"] for s in sim.samples]
    return {
        "params": {"workload": workload, "jobs": params.jobs, "nodes": params.nodes,
                   "nodes_per_pod": params.nodes_per_pod, "gpus": params.total_gpus,
                   "teams": params.teams, "hours": params.hours, "seed": seed,
                   "policy": policy, "backlog_fraction": params.backlog_fraction,
                   "arrival_span_s": params.arrival_span_s,
                   "guarantee_fraction": params.guarantee_fraction,
                   "tick_work_budget": scenario.config(policy).tick_work_budget},
        "simulated_s": sim.last_now,
        "complete": not stopped and error is None,
        "error": error,
        "wall_s": round(wall, 1),
        "ticks": len(ticks),
        "tick_ms_p50": _r(percentile(ticks, 50)),
        "tick_ms_p99": _r(percentile(ticks, 99)),
        "tick_ms_max": _r(max(ticks) if ticks else None),
        "tick_ms_mean": _r(statistics.fmean(ticks) if ticks else None),
        "tick_cpu_ms_p50": _r(percentile(sim.tick_cpu_ms, 50)),
        "tick_cpu_ms_p99": _r(percentile(sim.tick_cpu_ms, 99)),
        "tick_cpu_ms_max": _r(max(sim.tick_cpu_ms) if sim.tick_cpu_ms else None),
        "queued_max": max(sim.queued, default=0),
        "queued_mean": round(statistics.fmean(sim.queued)) if sim.queued else 0,
        "running_max": max(sim.running, default=0),
        "running_mean": round(statistics.fmean(sim.running)) if sim.running else 0,
        "naive_samples": sim.samples,
        "naive_ms_mean": _r(statistics.fmean(naive_ms) if naive_ms else None),
        "indexed_ms_mean_on_samples": _r(statistics.fmean(paired_ms) if paired_ms else None),
        "naive_over_indexed_median": _r(statistics.median(ratios) if ratios else None),
        "p99_target_met": (percentile(ticks, 99) or 0) <= P99_TARGET_MS if ticks else None,
        "max_target_met": (max(ticks) <= MAX_TARGET_MS) if ticks else None,
        "max_rss_mib": max_rss_mib(),
    }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def section(res: dict[str, Any], m: dict[str, Any], date: str, name: str = NAME) -> str:
    p = res["params"]
    status = "complete" if res["complete"] else (
        f"**incomplete**: {res['error']}" if res["error"]
        else f"**incomplete**: stopped by the wall budget at t={res['simulated_s']} s")
    lines = [
        f"## Tick latency at {p['jobs']:,} jobs" + ("" if name == NAME else f" ({name})"),
        "",
        f"{date}; {machine_line(m)}.",
        "",
        (f"Workload: `make_workload --jobs {p['jobs']} --nodes {p['nodes']} --teams {p['teams']} "
         f"--hours {p['hours']} --seed {p['seed']}` ({p['gpus']:,} GPUs)"
         if p.get("workload", "busy-day") == "busy-day" else
         f"Workload: `workloads.synthetic.ADVERSARIAL`, {p['jobs']:,} jobs, seed {p['seed']}: "
         f"no backlog, every arrival in the first {p['arrival_span_s']:,} s of "
         f"{p['hours']:g} h, {p['nodes']:,} nodes in pods of {p['nodes_per_pod']} "
         f"({p['gpus']:,} GPUs), {p['teams']} teams whose guarantees add up to "
         f"{p['guarantee_fraction']:.0%} of the cluster, sizes 1 to 2,048 GPUs")
        + f", policy `{p['policy']}`, "
        f"simulator work budget {p['tick_work_budget']} jobs examined per tick. "
        f"Run: {status}; {res['simulated_s']:,} simulated s in {res['wall_s']:,} s wall.",
        "",
        table(["ticks", "p50 ms", "p99 ms", "max ms", "mean ms", "queued (max / mean)",
               "running jobs (max / mean)"],
              [[res["ticks"], res["tick_ms_p50"], res["tick_ms_p99"], res["tick_ms_max"],
                res["tick_ms_mean"], f"{res['queued_max']:,} / {res['queued_mean']:,}",
                f"{res['running_max']:,} / {res['running_mean']:,}"]]),
        "",
        f"CPU time of the same ticks (this thread only; the machine's load average was "
        f"{m.get('load_average_1_5_15')} at the end, so wall time includes waits for a core): "
        f"p50 {res['tick_cpu_ms_p50']} ms, p99 {res['tick_cpu_ms_p99']} ms, "
        f"max {res['tick_cpu_ms_max']} ms.",
        "",
        f"Targets: p99 <= {P99_TARGET_MS:.0f} ms: **{_yn(res['p99_target_met'])}**; "
        f"max <= 2 s budget: **{_yn(res['max_target_met'])}**.",
        "",
        "Naive tick (every queued job against every node, first fit; `bench/naive_tick.py`) "
        "timed on the same state just before the indexed tick of the same instant:",
        "",
        table(["at s", "queued", "heaps", "naive ms", "indexed ms", "naive / indexed"],
              [[s["at_s"], s["queued"], s.get("heaps"),
                f"{s['naive_ms']:,.0f}" + ("" if s["naive_complete"] else " (extrap.)"),
                s["indexed_ms"], s["ratio"]] for s in res["naive_samples"]]),
        "",
        f"Median ratio naive / indexed: **{_x(res['naive_over_indexed_median'])}**. "
        f"Peak RSS of the benchmark process: {res['max_rss_mib']:,} MiB.",
        "",
        f"Reproduce: `.venv/bin/python -m bench.tick_latency {res.get('argv', '')}` "
        f"(raw numbers: `bench/results/{name}.json`).",
    ]
    return "\n".join(lines)


def _x(v: float | None) -> str:
    if v is None:
        return "not measured"
    return f"{v:,.1f}x" if v < 10 else f"{v:,.0f}x"


def _yn(v: bool | None) -> str:
    return "not measured" if v is None else ("met" if v else "NOT met")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--teams", type=int, default=30)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", default="full", choices=("full", "fifo", "priority-kill"))
    ap.add_argument("--naive-samples", type=int, default=4, help="naive ticks timed at most")
    ap.add_argument("--naive-every", type=int, default=150,
                    help="time the naive tick before every Nth tick")
    ap.add_argument("--naive-deadline-s", type=float, default=15.0,
                    help="stop one naive tick after this long and extrapolate")
    ap.add_argument("--max-wall-s", type=float, default=300.0,
                    help="stop the run after this much wall time (naive ticks excluded)")
    ap.add_argument("--workload", default="busy-day", choices=("busy-day", "adversarial"),
                    help="adversarial: workloads.synthetic.ADVERSARIAL (its own nodes, pods "
                         "and teams; --jobs and --seed still apply)")
    ap.add_argument("--name", default=None,
                    help="results file and PERFORMANCE.md section (a second experiment)")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--doc", default=None, help="PERFORMANCE.md to update")
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args(argv)
    if a.name is None:
        a.name = NAME if a.workload == "busy-day" else f"{NAME}_{a.workload.replace('-', '_')}"
    if not a.no_pin:
        pin_one_core()
    res = {"argv": " ".join(argv if argv is not None else sys.argv[1:])}
    res |= run(jobs=a.jobs, nodes=a.nodes, teams=a.teams, hours=a.hours, seed=a.seed,
              policy=a.policy, naive_every=a.naive_every, naive_samples=a.naive_samples,
              naive_deadline_s=a.naive_deadline_s, max_wall_s=a.max_wall_s,
              workload=a.workload)
    from pathlib import Path

    path = write_results(a.name, res, Path(a.results_dir) if a.results_dir else None)
    update_doc_section(a.name, section(res, machine(), now_utc(), a.name),
                       Path(a.doc) if a.doc else None)
    log(f"{NAME}: p50 {res['tick_ms_p50']} ms, p99 {res['tick_ms_p99']} ms, "
        f"max {res['tick_ms_max']} ms over {res['ticks']} ticks; naive/indexed "
        f"{res['naive_over_indexed_median']}x; wrote {path}")
    return res


if __name__ == "__main__":
    main()
