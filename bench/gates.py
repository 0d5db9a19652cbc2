"""What dependencies and job arrays cost the core (issue 19: "the tick's bound still holds";
"dependencies must not make the tick scan the queue").

    python -m bench.gates [--queued 20000 --parked 100000 --nodes 2048 --ticks 40]

Two states on the same cluster (``--nodes`` nodes of 8 GPUs, 30 teams), both with every
GPU held and ``--queued`` ordinary jobs waiting on the heaps:

- *plain*: nothing else;
- *gated*: plus ``--parked`` jobs off the heaps: half wait for running jobs to end
  (``depends_on``), half are tasks of arrays of 5,000 past their ``max_running`` of 8.

Each state is ticked ``--ticks`` times through the whole tick (the fixed-point shortcut is
bypassed, so every tick walks the heaps and plans), and the CPU time of each tick is
recorded: the gated tick must cost what the plain one does. Then the events: the CPU time
per job of submitting a dependent and an array task against a plain job, and of the one
event that lets 10,000 dependents through at once (their job completes).

Writes bench/results/gates.json and its section of docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path
from typing import Any

from bench._common import (
    log,
    machine,
    machine_line,
    now_utc,
    pin_one_core,
    table,
    update_doc_section,
    write_results,
)
from scheduler_app.core.scheduler import Scheduler
from scheduler_app.core.tick import Tick
from scheduler_app.core.types import JobSpec, NodeSpec, SchedulerConfig, TenantSpec

NAME = "gates"
TEAMS = 30
ARRAY_SIZE = 5_000


def cpu() -> float:
    return time.thread_time()


def build(nodes: int, queued: int, parked: int) -> tuple[Scheduler, list[str]]:
    """Every GPU held by a running 8-GPU job; ``queued`` jobs on the heaps; ``parked``
    jobs off them. Returns the scheduler and the running jobs' ids."""
    node_specs = [NodeSpec(f"pod-{i // 256}-{i % 256:03d}", f"pod-{i // 256}", 8)
                  for i in range(nodes)]
    per_team = nodes * 8 // TEAMS
    tenants = [TenantSpec(f"team-{t:02d}", per_team, nodes * 8) for t in range(TEAMS)]
    s = Scheduler(node_specs, tenants, SchedulerConfig(), now=0)
    seq = 0

    def spec(job_id: str, team: int, gpus: int, **kw: Any) -> JobSpec:
        nonlocal seq
        seq += 1
        # a limit of protected_borrow_max_s: these jobs cannot be preempted, and borrow
        return JobSpec(id=job_id, seq=seq, tenant=f"team-{team:02d}", gpus=gpus, submit_s=0,
                       max_runtime_s=7_200, **kw)

    running = []
    for i in range(nodes):
        s.submit(spec(f"r{i}", i % TEAMS, 8), 0)
        running.append(f"r{i}")
    s.tick(0)
    for job_id in running:
        s.confirm_start(job_id, 0)
    for i in range(queued):
        s.submit(spec(f"q{i}", i % TEAMS, (1, 2, 4, 8, 16, 64)[i % 6]), 1)
    for i in range(parked // 2):
        awaited = running[i % len(running)]
        s.submit(spec(f"d{i}", i % TEAMS, 8, depends_on=((awaited, "ok"),)), 1)
    tasks = parked - parked // 2
    for a in range((tasks + ARRAY_SIZE - 1) // ARRAY_SIZE):
        count = min(ARRAY_SIZE, tasks - a * ARRAY_SIZE)
        for k in range(count):
            s.submit(spec(f"a{a}_{k}", a % TEAMS, 1, array_id=f"a{a}", array_index=k,
                          array_count=count, array_max_running=8), 1)
    return s, running


def tick_cpu_ms(s: Scheduler, ticks: int, start: int) -> list[float]:
    out = []
    for k in range(ticks):
        now = start + 5 * k
        s.now = now
        t0 = cpu()
        Tick(s, now, None).run()  # the whole tick: no fixed-point shortcut
        out.append((cpu() - t0) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    return {"p50_ms": statistics.median(ordered), "p90_ms": pct(0.9), "p99_ms": pct(0.99),
            "max_ms": ordered[-1]}


def submit_cost_us(n: int) -> dict[str, float]:
    """CPU µs per submit of a plain job, a dependent and an array task, on a small
    cluster (the submit path alone)."""
    out = {}
    for kind in ("plain job", "dependent", "array task"):
        s = Scheduler([NodeSpec(f"n{i:03d}", "p", 8) for i in range(16)],
                      [TenantSpec("team", 128, 0)], SchedulerConfig(), now=0)
        s.submit(JobSpec(id="up", seq=0, tenant="team", gpus=8, submit_s=0), 0)
        t0 = cpu()
        for i in range(n):
            kw: dict[str, Any] = {}
            if kind == "dependent":
                kw = {"depends_on": (("up", "ok"),)}
            elif kind == "array task":
                kw = {"array_id": "a", "array_index": i, "array_count": n,
                      "array_max_running": 8}
            s.submit(JobSpec(id=f"j{i}", seq=i + 1, tenant="team", gpus=1, submit_s=0,
                             max_runtime_s=600, **kw), 0)
        out[kind] = (cpu() - t0) / n * 1e6
    return out


def release_cost_ms(n: int) -> float:
    """CPU ms of the one event that lets ``n`` dependents through (their job completes)."""
    s = Scheduler([NodeSpec(f"n{i:03d}", "p", 8) for i in range(16)],
                  [TenantSpec("team", 128, 0)], SchedulerConfig(), now=0)
    s.submit(JobSpec(id="up", seq=0, tenant="team", gpus=8, submit_s=0), 0)
    s.tick(0)
    s.confirm_start("up", 0)
    for i in range(n):
        s.submit(JobSpec(id=f"j{i}", seq=i + 1, tenant="team", gpus=1, submit_s=0,
                         max_runtime_s=600, depends_on=(("up", "ok"),)), 0)
    t0 = cpu()
    s.job_exited("up", 1, "completed")
    spent = (cpu() - t0) * 1000
    assert len(s.queues) == n
    return spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--queued", type=int, default=20_000)
    ap.add_argument("--parked", type=int, default=100_000)
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite PERFORMANCE.md")
    ap.add_argument("--doc", default=None, help="PERFORMANCE.md to update")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--release", type=int, default=10_000,
                    help="dependents one event lets through, and submits timed per kind")
    args = ap.parse_args(argv)
    if not args.no_pin:
        pin_one_core()
    rows: dict[str, Any] = {}
    states = {}
    for label, parked in (("plain", 0), ("gated", args.parked)):
        t0 = time.perf_counter()
        states[label], _ = build(args.nodes, args.queued, parked)
        log(f"{label}: built in {time.perf_counter() - t0:.1f} s "
            f"({len(states[label].queues):,} on the heaps, "
            f"{len(states[label].gates.parked):,} parked)")
    # as the leader and the simulator do (collector.FreezeAsItGrows): the long-lived
    # state out of the cyclic collector's passes, so they do not land in a tick
    gc.collect()
    gc.freeze()
    # the two states tick in turn, so a busy moment of the shared machine falls on both
    times: dict[str, list[float]] = {label: [] for label in states}
    for k in range(args.ticks):
        for label, s in states.items():
            times[label] += tick_cpu_ms(s, 1, start=10 + 5 * k)
    for label, s in states.items():
        rows[label] = {"on_heaps": len(s.queues), "parked": len(s.gates.parked),
                       **summary(times[label])}
        log(f"{label}: tick CPU p50 {rows[label]['p50_ms']:.1f} ms, "
            f"p90 {rows[label]['p90_ms']:.1f} ms, max {rows[label]['max_ms']:.1f} ms")
    del states
    submit = submit_cost_us(args.release)
    release = release_cost_ms(args.release)
    results = {"date": now_utc(), "machine": machine(), "args": vars(args), "ticks": rows,
               "submit_cpu_us_per_job": submit, "release_dependents_cpu_ms": release}
    write_results(NAME, results, Path(args.results_dir) if args.results_dir else None)
    md = [f"## Dependencies and arrays in the core ({NAME})", "",
          f"`python -m bench.gates` ({results['date']}; {machine_line(results['machine'])}). "
          f"{args.nodes:,} nodes of 8 GPUs, every GPU held, {args.queued:,} jobs waiting on "
          "the heaps; *gated* adds "
          f"{args.parked:,} jobs off them (half waiting on `depends_on`, half array tasks "
          "past `max_running`). CPU time of the whole tick (no fixed-point shortcut), "
          f"{args.ticks} ticks each:", "",
          table(["state", "on the heaps", "parked", "tick p50 ms", "p90 ms", "p99 ms",
                 "max ms"],
                [[k, v["on_heaps"], v["parked"], v["p50_ms"], v["p90_ms"], v["p99_ms"],
                  v["max_ms"]] for k, v in rows.items()]), "",
          "The first tick of each state plans every reservation afresh: it is the max. The "
          "two states tick in turn, so the machine's load falls on both.", "",
          "Events, CPU time:", "",
          table(["event", "cost"],
                [[f"submit: {k}", f"{v:.1f} µs/job"] for k, v in submit.items()]
                + [[f"a job completes and lets {args.release:,} dependents through",
                    f"{release:.1f} ms"]])]
    if not args.no_doc:
        update_doc_section(NAME, "\n".join(md), Path(args.doc) if args.doc else None)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
