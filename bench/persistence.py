"""The production path on PostgreSQL: replay, leader cold start, tick with persistence.

    python -m bench.persistence [--jobs 100000 --transitions 1000000] [--ticks 100]
                                [--pg-url postgres://postgres@127.0.0.1:5432/postgres]
                                [--live-share 0.14] [--name persistence]
                                [--keep] [--reuse DATABASE [--replay-only N]]

Creates a database of its own (``sched_bench_persistence_<pid>``), migrates it, fills it
with a week of history generated in memory and loaded with COPY (2,048 nodes of 8 GPUs,
30 teams, ``--jobs`` jobs, about ``--transitions`` log rows: submits, placements, starts,
checkpoints, preemptions, requeues, completions; at the end about 13% of the jobs queued
and the cluster about 85% busy), then measures, and drops the database (``--keep`` keeps
it). ``--live-share 1 --name persistence_live`` leaves every job alive at the end (about
99,000 queued): a restart under a backlog, in a section and results file of its own.
``--reuse`` measures again on a database kept by ``--keep`` (no generating, no loading;
the ticks of every run add to it), and ``--replay-only N`` then times the replay alone,
N times (to work on it). Not part of the test suite. Targets (issue 5):

- replaying the log (``selectors.replay.rebuild_from_log``, what ``replay --verify``
  runs) into per-job state: at most 5 s for 1,000,000 transitions of 100,000 jobs;
- cold start of a leader to its first tick (``LeaderLoop.step`` with no state: lease,
  build from the tables, the core's tick, persistence of its decisions): at most 2 s;
- a tick with persistence at 100,000 jobs, between ticks new submits, agent
  confirmations and exits through the services (the leader follows them from the log):
  p99 at most 500 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from datetime import datetime, timedelta
from typing import Any

from bench._common import (
    create_database,
    drop_database,
    log,
    machine,
    machine_line,
    now_utc,
    pin_one_core,
    settle,
    table,
    update_doc_section,
    write_results,
)

NAME = "persistence"
#: The share of the generated jobs still alive at the end (queued, or running while the
#: cluster has GPUs for them), and how many of those are meant to be queued: a week's log
#: leaves about a tenth of its jobs alive; ``--live-share 1`` is a restart under a backlog.
LIVE_SHARE = 0.14
QUEUED_OF_LIVE = 0.10 / 0.14
TARGETS = {"replay_s": 5.0, "cold_start_s": 2.0, "tick_p99_ms": 500.0}
NODES, GPUS_PER_NODE, PODS, TEAMS = 2048, 8, 16, 30
SIZES = (1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 16, 32, 64)
CHECKPOINT_EVERY_S = 600


# ------------------------------------------------------------------ the history
class History:
    """A week of the cluster, generated job by job; rows sorted by time at the end."""

    def __init__(self, *, jobs: int, transitions: int, end: datetime, seed: int,
                 live_share: float = LIVE_SHARE) -> None:
        self.rng = random.Random(seed)
        # a job's fate: queued at the end, running at the end (while GPUs last), or done
        self.queued_below = live_share * QUEUED_OF_LIVE
        self.live_below = live_share
        self.end = end
        self.n_jobs = jobs
        # checkpoints per run, tuned so the log lands near ``transitions`` rows
        self.checkpoints_mean = max(0.0, transitions / jobs - 6.6)
        self.rows: list[tuple] = []  # (at, job, step, from, to, reason, detail, actor)
        self.jobs: list[dict[str, Any]] = []
        self.allocs: list[tuple] = []  # (job, node index, indices, start, end)
        self.free = [list(range(GPUS_PER_NODE)) for _ in range(NODES)]  # at the end
        self.busy_target = int(NODES * GPUS_PER_NODE * 0.85)
        self.busy = 0

    def row(self, job: dict, at: datetime, frm: str | None, to: str, reason: str,
            detail: dict | None = None, actor: str = "scheduler") -> datetime:
        job["_step"] += 1
        self.rows.append((at, job["id"], job["_step"], frm, to, reason, detail or {}, actor))
        return at

    def generate(self) -> None:
        rng, end = self.rng, self.end
        start = end - timedelta(days=7)
        for i in range(self.n_jobs):
            gpus = rng.choice(SIZES)
            job: dict[str, Any] = {
                "id": i + 1, "tenant": rng.randrange(TEAMS), "gpus": gpus, "_step": 0,
                "checkpointable": rng.random() < 0.7, "preemption_times": [],
                "started_at": None, "finished_at": None, "last_checkpoint_at": None,
                "resume_pointer": "",
            }
            fate = rng.random()
            if fate < self.queued_below:
                job["fate"] = "queued"
                submit = end - timedelta(seconds=rng.uniform(60, 2 * 86400))
            elif fate < self.live_below:
                job["fate"] = "running"
                submit = end - timedelta(seconds=rng.uniform(3600, 6 * 3600))
            else:
                job["fate"] = "done"
                submit = start + timedelta(seconds=rng.uniform(0, 5.5 * 86400))
            job["submitted_at"] = submit
            self.jobs.append(job)
            self.life(job, submit)

    def life(self, job: dict, t: datetime) -> None:
        rng = self.rng
        self.row(job, t, None, "SUBMITTED", "Submitted", actor="user")
        self.row(job, t, "SUBMITTED", "QUEUED", "Admitted", actor="user")
        state = "QUEUED"
        preemptions = 1 if rng.random() < 0.35 else 0
        if job["fate"] == "queued":
            preemptions = 1 if rng.random() < 0.3 else 0
        runs = preemptions + (0 if job["fate"] == "queued" else 1)
        for run in range(runs):
            last = run == runs - 1
            holding_at_end = last and job["fate"] == "running"
            t += timedelta(seconds=rng.expovariate(1 / 600) + 1)
            alloc = self.place(job, keep=holding_at_end)
            if alloc is None:  # the cluster is full at the end: this one waits instead
                job["fate"] = "queued"
                return
            detail = {"alloc": {f"n{n:04d}": ix for n, ix in alloc}}
            placed = self.row(job, t, state, "PLACING", "Placed", detail)
            t += timedelta(seconds=rng.uniform(5, 60))
            job["started_at"] = self.row(job, t, "PLACING", "RUNNING", "Started", actor="agent")
            state = "RUNNING"
            for k in range(int(rng.expovariate(1 / (self.checkpoints_mean + 1e-9)))
                           if self.checkpoints_mean else 0):
                t += timedelta(seconds=CHECKPOINT_EVERY_S)
                pointer = f"ckpt://{job['id']}/{run}-{k}"
                self.row(job, t, "RUNNING", "RUNNING", "Checkpointed",
                         {"resume_pointer": pointer}, actor="agent")
                job["last_checkpoint_at"], job["resume_pointer"] = t, pointer
            if holding_at_end:
                self.hold(job, alloc, placed, None)
                job["state"] = "RUNNING"
                return
            t += timedelta(seconds=rng.uniform(60, 900))
            # preempted (a queued job's every run was): the grace protocol, then the queue
            if not last or job["fate"] == "queued":
                self.row(job, t, "RUNNING", "PREEMPT_REQUESTED", "PreemptRequested",
                         {"for": str(rng.randint(1, self.n_jobs)), "est_gpu_s_lost": 600})
                self.row(job, t + timedelta(seconds=2), "PREEMPT_REQUESTED", "CHECKPOINTING",
                         "CheckpointStarted", actor="agent")
                t += timedelta(seconds=60)
                self.row(job, t, "CHECKPOINTING", "PREEMPTED", "Preempted", actor="agent")
                # counted when the job stops, as the services' projection counts it
                job["preemption_times"].append(int(t.timestamp()))
                self.hold(job, alloc, placed, t)
                self.row(job, t, "PREEMPTED", "QUEUED", "Requeued",
                         {"resume_pointer": job["resume_pointer"] or None})
                state = "QUEUED"
                continue
            outcome = ("COMPLETED", "Completed") if rng.random() < 0.95 else ("FAILED",
                                                                              "ExitFailed")
            job["finished_at"] = self.row(job, t, "RUNNING", *outcome, actor="agent")
            self.hold(job, alloc, placed, t)
            job["state"] = outcome[0]
            return
        job["state"] = "QUEUED"

    def place(self, job: dict, *, keep: bool) -> list[tuple[int, list[int]]] | None:
        """GPUs for one run. A run still going at the end takes really free GPUs (packed
        node by node); a finished one any GPUs (the past is not checked for overlaps)."""
        gpus, rng = job["gpus"], self.rng
        if not keep:
            if gpus <= GPUS_PER_NODE:
                return [(rng.randrange(NODES), list(range(gpus)))]
            return [(n, list(range(GPUS_PER_NODE)))
                    for n in rng.sample(range(NODES), gpus // GPUS_PER_NODE)]
        if self.busy + gpus > self.busy_target:
            return None
        out: list[tuple[int, list[int]]] = []
        if gpus <= GPUS_PER_NODE:
            node = next((n for n in range(NODES) if len(self.free[n]) >= gpus), None)
            if node is None:
                return None
            out = [(node, self.free[node][:gpus])]
        else:
            whole = [n for n in range(NODES) if len(self.free[n]) == GPUS_PER_NODE]
            if len(whole) < gpus // GPUS_PER_NODE:
                return None
            out = [(n, list(range(GPUS_PER_NODE))) for n in whole[: gpus // GPUS_PER_NODE]]
        for node, ix in out:
            self.free[node] = [g for g in self.free[node] if g not in ix]
        self.busy += gpus
        return out

    def hold(self, job: dict, alloc: list, start: datetime, end: datetime | None) -> None:
        for node, ix in alloc:
            self.allocs.append((job["id"], node, ix, start, end))


# ------------------------------------------------------------------ loading
def copy_rows(table_name: str, model: Any, rows: list[dict[str, Any]]) -> None:
    """COPY ``rows`` (dicts by attname) into ``model``'s table; columns the generator does
    not know (the model moves on) get their field default."""
    from django.db import connection

    fields = model._meta.concrete_fields
    names = [f.attname for f in fields]
    defaults = {f.attname: f.get_default() for f in fields}
    cols = ", ".join(f'"{c}"' for c in names)
    raw = connection.connection
    with raw.cursor() as cursor, cursor.copy(f'COPY "{table_name}" ({cols}) FROM STDIN') as cp:
        for r in rows:
            values = []
            for name in names:
                v = r.get(name, defaults[name])
                if isinstance(v, dict | list):
                    v = json.dumps(v)
                values.append(v)
            cp.write_row(values)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT setval(pg_get_serial_sequence('\"{table_name}\"', 'id'), "
                       f"(SELECT COALESCE(MAX(id), 1) FROM \"{table_name}\"))")


def load(history: History) -> dict[str, int]:
    from django.db import connection

    from scheduler_app.models import Allocation, Job, Node, Pod, Tenant, Transition

    copy_rows(Pod._meta.db_table, Pod, [{"id": p + 1, "name": f"pod{p:02d}"} for p in range(PODS)])
    used = [GPUS_PER_NODE - len(f) for f in history.free]
    copy_rows(Node._meta.db_table, Node, [
        {"id": n + 1, "name": f"n{n:04d}", "pod_id": n * PODS // NODES + 1, "rail": n % 8,
         "gpu_type": "H100", "gpu_count": GPUS_PER_NODE,
         "free_gpus": GPUS_PER_NODE - used[n], "health": "healthy", "last_heartbeat": None}
        for n in range(NODES)
    ])
    held = [0] * TEAMS
    for job in history.jobs:
        if job.get("state") == "RUNNING":
            held[job["tenant"]] += job["gpus"]
    guarantee = NODES * GPUS_PER_NODE // TEAMS
    copy_rows(Tenant._meta.db_table, Tenant, [
        {"id": t + 1, "name": f"team{t:02d}", "guaranteed_gpus": guarantee,
         "borrow_limit_gpus": guarantee, "usage_gpu_s": 0.0, "usage_at": None,
         "held_gpus": held[t]}
        for t in range(TEAMS)
    ])
    copy_rows(Job._meta.db_table, Job, [
        {"id": j["id"], "tenant_id": j["tenant"] + 1, "owner_id": None, "name": f"job-{j['id']}",
         "command": "", "gpus": j["gpus"], "gpus_per_node": None, "gpu_type": "",
         "priority": 0, "checkpointable": j["checkpointable"],
         "checkpoint_interval_s": CHECKPOINT_EVERY_S if j["checkpointable"] else None,
         "checkpoint_time_s": None, "restart_s": 60, "max_runtime_s": 86400,
         "min_gpus": None, "preemptible": False, "interactive": False, "idempotency_key": "",
         "state": j.get("state", "QUEUED"), "pending_reason": "None",
         "submitted_at": j["submitted_at"], "started_at": j["started_at"],
         "finished_at": j["finished_at"], "last_checkpoint_at": j["last_checkpoint_at"],
         "resume_pointer": j["resume_pointer"], "preemption_times": j["preemption_times"],
         "retry_count": 0}
        for j in history.jobs
    ])
    copy_rows(Allocation._meta.db_table, Allocation, [
        {"id": i + 1, "job_id": job, "node_id": node + 1, "gpu_indices": ix, "start": start,
         "end": stop, "preemptible": False}
        for i, (job, node, ix, start, stop) in enumerate(history.allocs)
    ])
    history.rows.sort(key=lambda r: (r[0], r[1], r[2]))
    copy_rows(Transition._meta.db_table, Transition, [
        {"id": seq, "kind": "job", "job_id": job, "node_id": None, "tenant_id": None,
         "from_state": frm, "to_state": to, "at": at, "reason": reason, "detail": detail,
         "actor": actor, "actor_name": "bench" if actor == "scheduler" else "",
         "tick_id": ""}
        for seq, (at, job, _step, frm, to, reason, detail, actor) in enumerate(history.rows, 1)
    ])
    derive_tenant_usage()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"jobs": len(history.jobs), "transitions": len(history.rows),
            "allocations": len(history.allocs),
            "queued": sum(1 for j in history.jobs if j.get("state", "QUEUED") == "QUEUED"),
            "running": sum(1 for j in history.jobs if j.get("state") == "RUNNING"),
            "busy_gpus": history.busy}


def derive_tenant_usage() -> None:
    """The teams' decayed usage as the services would have accrued it along the log (the
    generator does not model it): replayed once, written to the Tenant rows, so that
    ``replay --verify`` is clean on the generated data before the run and after it."""
    from scheduler_app.models import Tenant
    from scheduler_app.selectors.replay import rebuild_from_log
    from scheduler_app.services.leader import from_epoch

    for tenant_id, usage in rebuild_from_log().tenants.items():
        Tenant.objects.filter(pk=tenant_id).update(
            usage_gpu_s=usage.usage,
            usage_at=None if usage.since_s is None else from_epoch(usage.since_s),
            held_gpus=usage.held,
        )


def load_average() -> float:
    """The machine's 1-minute load average (it is shared: other work runs beside us)."""
    return round(os.getloadavg()[0], 2)


# ------------------------------------------------------------------ measurements
def measure(*, ticks: int, seed: int) -> dict[str, Any]:
    from django.db import connection

    from scheduler_app.core.states import JobState
    from scheduler_app.core.types import Actor
    from scheduler_app.models import Job, Tenant
    from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
    from scheduler_app.services import job_submit, job_transition
    from scheduler_app.services.leader import LeaderLoop
    from scheduler_app.services.transitions import now_s

    statements = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[0] += 1
        return execute(sql, params, many, context)

    out: dict[str, Any] = {"load_average": {"start": load_average()}}
    log(f"{NAME}: replaying the log...")
    t0, c0 = time.perf_counter(), time.process_time()
    rebuilt = rebuild_from_log()
    out["replay_s"] = round(time.perf_counter() - t0, 3)
    out["replay_cpu_s"] = round(time.process_time() - c0, 3)
    out["replay_rows"] = rebuilt.rows
    out["replay_log_errors"] = len(rebuilt.log_errors)
    del rebuilt
    out["load_average"]["after_replay"] = load_average()

    log(f"{NAME}: leader build alone, then a cold start to the first tick...")
    t0, c0 = time.perf_counter(), time.process_time()
    LeaderLoop(holder="bench-build").build(now_s())
    out["build_s"] = round(time.perf_counter() - t0, 3)
    out["build_cpu_s"] = round(time.process_time() - c0, 3)
    connection.close()
    loop = LeaderLoop(holder="bench", ttl_s=3600)
    t0, c0 = time.perf_counter(), time.process_time()
    with connection.execute_wrapper(count):
        first = loop.step()
    out["cold_start_s"] = round(time.perf_counter() - t0, 3)
    out["cold_start_cpu_s"] = round(time.process_time() - c0, 3)
    out["cold_start_statements"] = statements[0]
    if first.error:
        raise SystemExit(f"the first tick failed: {first.error}")
    out["cold_start_decisions"] = first.decisions
    out["cold_start_core_tick_ms"] = first.stats.get("tick_ms")
    out["load_average"]["after_cold_start"] = load_average()

    log(f"{NAME}: {ticks} ticks with work between them...")
    rng = random.Random(seed)
    tenants = list(Tenant.objects.order_by("name"))
    durations, core_ms, decisions, followed, rebuilt = [], [], [], [], 0
    per_tick: list[int] = []
    for _ in range(ticks):
        for _i in range(20):
            job_submit(tenant=rng.choice(tenants), name="bench", gpus=rng.choice(SIZES),
                       checkpointable=True, checkpoint_interval_s=CHECKPOINT_EVERY_S,
                       max_runtime_s=86400)
        placing = Job.objects.filter(state=JobState.PLACING).values_list("id", flat=True)
        for job_id in placing.order_by("id")[:50]:  # agents confirm up to 50 starts a tick
            job_transition(job_id=job_id, to_state=JobState.RUNNING, reason="Started",
                           actor=Actor.AGENT)
        running = list(Job.objects.filter(state=JobState.RUNNING).values_list("id", flat=True)
                       .order_by("?")[:10])
        for job_id in running:
            job_transition(job_id=job_id, to_state=JobState.COMPLETED, reason="Completed",
                           actor=Actor.AGENT)
        time.sleep(1.0)  # the clock moves: whole-second instants, like the beat's ticks
        statements[0] = 0
        with connection.execute_wrapper(count):
            report = loop.step()
        per_tick.append(statements[0])
        if report.error:
            raise SystemExit(f"a tick failed: {report.error}")
        durations.append(report.duration_ms)
        core_ms.append(float(report.stats.get("tick_ms", 0.0)))
        decisions.append(report.decisions)
        followed.append(report.caught_up)
        rebuilt += int(report.rebuilt)
    durations_sorted = sorted(durations)
    out["ticks"] = {
        "n": len(durations),
        "p50_ms": round(statistics.median(durations), 1),
        "p99_ms": round(durations_sorted[p99_rank(len(durations)) - 1], 1),
        "max_ms": round(max(durations), 1),
        "core_p50_ms": round(statistics.median(core_ms), 1),
        "core_max_ms": round(max(core_ms), 1),
        "decisions_mean": round(statistics.mean(decisions), 1),
        "followed_mean": round(statistics.mean(followed), 1),
        "rebuilt": rebuilt,
        "statements_mean": round(statistics.mean(per_tick), 1),
        "statements_max": max(per_tick),
        "all_ms": [round(d, 1) for d in durations],
    }
    out["load_average"]["after_ticks"] = load_average()

    log(f"{NAME}: replay --verify after the run...")
    t0 = time.perf_counter()
    mismatches = compare_with_tables(rebuild_from_log())
    out["verify_s"] = round(time.perf_counter() - t0, 3)
    out["verify_mismatches"] = len(mismatches)
    out["verify_first"] = [str(m) for m in mismatches[:5]]
    return out


def p99_rank(n: int) -> int:
    """The p99's rank among ``n`` values, ascending from 1 (nearest rank): the slowest of
    up to 100 ticks, the second slowest of 101 to 200."""
    return max(1, math.ceil(0.99 * n))


def measure_replay(times: int) -> dict[str, Any]:
    """The replay alone, ``times`` times: each wall and CPU time, and the best."""
    from scheduler_app.selectors.replay import rebuild_from_log

    runs = []
    for _ in range(times):
        load = load_average()
        t0, c0 = time.perf_counter(), time.process_time()
        rebuilt = rebuild_from_log()
        runs.append({"replay_s": round(time.perf_counter() - t0, 3),
                     "replay_cpu_s": round(time.process_time() - c0, 3),
                     "replay_rows": rebuilt.rows, "replay_log_errors": len(rebuilt.log_errors),
                     "load_average": load})
        del rebuilt
        log(f"{NAME}: {json.dumps(runs[-1])}")
    return {"runs": runs, "best_replay_s": min(r["replay_s"] for r in runs),
            "best_replay_cpu_s": min(r["replay_cpu_s"] for r in runs)}


def count_data() -> dict[str, Any]:
    """What ``load`` reports, counted from the tables of a reused database."""
    from django.db.models import F, Sum

    from scheduler_app.models import Allocation, Job, Node, Transition

    busy = Node.objects.aggregate(busy=Sum(F("gpu_count") - F("free_gpus")))["busy"] or 0
    return {"jobs": Job.objects.count(), "transitions": Transition.objects.count(),
            "allocations": Allocation.objects.count(),
            "queued": Job.objects.filter(state="QUEUED").count(),
            "running": Job.objects.filter(state="RUNNING").count(), "busy_gpus": busy}


# ------------------------------------------------------------------ main
def markdown(res: dict[str, Any]) -> str:
    d, m = res["data"], res["measured"]
    live_share = res.get("live_share", LIVE_SHARE)
    ticks = m["ticks"]
    load = m.get("load_average", {})

    def verdict(value: float, target: float) -> str:
        return "met" if value <= target else "**NOT met**"

    def cpu(key: str) -> str:
        return f"{m[key]:.2f} s" if key in m else "-"

    rows = [
        ("replay the log (rebuild_from_log)", f"{m['replay_rows']:,} rows",
         f"{m['replay_s']:.2f} s", cpu("replay_cpu_s"), "<= 5 s",
         verdict(m["replay_s"], TARGETS["replay_s"])),
        ("leader build alone", f"{d['queued'] + d['running']:,} live jobs",
         f"{m['build_s']:.2f} s", cpu("build_cpu_s"), "-", "-"),
        ("cold start to the first tick",
         f"{m['cold_start_decisions']:,} decisions, {m.get('cold_start_statements', '-')} "
         "statements",
         f"{m['cold_start_s']:.2f} s", cpu("cold_start_cpu_s"), "<= 2 s",
         verdict(m["cold_start_s"], TARGETS["cold_start_s"])),
        ("tick with persistence, p50", f"{ticks['n']} ticks", f"{ticks['p50_ms']:,.0f} ms",
         "-", "-", "-"),
        ("tick with persistence, p99", f"{ticks['decisions_mean']} decisions/tick",
         f"{ticks['p99_ms']:,.0f} ms", "-", "<= 500 ms",
         verdict(ticks["p99_ms"], TARGETS["tick_p99_ms"])),
    ]
    worst = sorted(ticks["all_ms"], reverse=True)
    loads = ", ".join(f"{load[k]:.1f} {k.replace('_', ' ')}" for k in
                      ("start", "after_replay", "after_cold_start", "after_ticks") if k in load)
    return "\n".join([
        "## Production path (PostgreSQL)" + (
            "" if res.get("name", NAME) == NAME
            else f", {d['queued'] + d['running']:,} live jobs"),
        "",
        f"{res['date']}; {machine_line(res['machine'])}; PostgreSQL "
        f"{res['postgres']} on the same machine. "
        + ("**The machine was shared** (2 cores, other test runs and benchmarks at the "
           "same time): treat the numbers as upper bounds. "
           if max(load.values(), default=0) >= 1.5 else
           "Nothing else ran on the machine (2 cores; PostgreSQL and the bench only). ")
        + f"1-minute load average during the run: {loads or 'not recorded'}. The CPU column "
        "is this process's own CPU time, less sensitive to the neighbours than the wall "
        "time.",
        "",
        f"Data: {d['jobs']:,} jobs, {d['transitions']:,} transitions, "
        f"{d['allocations']:,} allocations on {NODES:,} nodes x {GPUS_PER_NODE} GPUs, "
        f"{TEAMS} teams; at the end {d['queued']:,} queued and {d['running']:,} running "
        f"({d['busy_gpus']:,} GPUs busy). Generated in memory (a week of submits, "
        "placements, checkpoints, preemptions, completions"
        + (f"; {live_share:.0%} of the jobs alive at the end, queued or running while "
           "GPUs last: a restart under a backlog" if live_share != LIVE_SHARE else "")
        + f") and loaded with COPY in "
        f"{res['load_s']:.0f} s into a database created for the run and dropped after; "
        "the teams' decayed usage is derived from the log, so the tables agree with it.",
        "",
        table(["what", "size", "measured", "CPU", "target", ""], rows),
        "",
        f"The tick: between ticks 20 submits, the agents' confirmations of the last "
        f"placements (at most 50) and 10 exits, through the services; the leader follows "
        f"{ticks['followed_mean']} rows per tick from the log and writes its decisions "
        f"and what it publishes in {ticks.get('statements_mean', '-')} statements per tick "
        f"(max {ticks.get('statements_max', '-')}, whatever the number of decisions). The "
        f"core's own part of the tick (its `tick_ms`): p50 {ticks['core_p50_ms']:,.0f} ms, "
        f"max {ticks['core_max_ms']:,.0f} ms; the rest is the lease, catching up and "
        f"writing. {p99_line(ticks['n'], worst)}",
        "",
        f"After the run, `replay --verify` (rebuild plus comparison with every table): "
        f"{m.get('verify_mismatches', '-')} mismatches, in {m.get('verify_s', 0):.1f} s.",
        "",
        f"Reproduce: `.venv/bin/{res.get('command', 'python -m bench.persistence')}` (needs "
        f"PostgreSQL; `--pg-url`, default `{DEFAULT_PG}`; raw numbers: "
        f"`bench/results/{res.get('name', NAME)}.json`).",
    ])


def p99_line(n: int, worst: list[float]) -> str:
    """Which tick the p99 is, and the slowest ones around it (``worst``: slowest first)."""
    rank = n - p99_rank(n) + 1  # from the slowest
    if rank == 1:
        return (f"With {n} ticks the p99 is the slowest one; the next slowest: "
                f"{', '.join(f'{v:,.0f}' for v in worst[1:4])} ms.")
    nth = {2: "second", 3: "third"}.get(rank, f"{rank}th")
    return (f"With {n} ticks the p99 is the {nth} slowest one; the slowest: "
            f"{', '.join(f'{v:,.0f}' for v in worst[:rank + 2])} ms.")


DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--transitions", type=int, default=1_000_000)
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pg-url", default=DEFAULT_PG,
                        help="a PostgreSQL maintenance database to create the bench one from")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", metavar="DATABASE",
                        help="measure on a database kept by --keep (never dropped; neither "
                             "results file nor doc written)")
    parser.add_argument("--replay-only", type=int, metavar="N", default=0,
                        help="with --reuse: time the replay alone, N times, and stop")
    parser.add_argument("--live-share", type=float, default=LIVE_SHARE,
                        help="share of the jobs alive at the end (queued or running; 1: a "
                             "restart under a backlog)")
    parser.add_argument("--name", default=NAME,
                        help="results file and PERFORMANCE.md section (a variant's own)")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args(argv)
    if not 0 <= args.live_share <= 1:
        parser.error("--live-share: between 0 and 1")
    if args.replay_only and not args.reuse:
        parser.error("--replay-only needs --reuse")

    settle()
    pin_one_core()
    name = args.reuse or f"sched_bench_persistence_{os.getpid()}"
    url = (args.pg_url.rpartition("/")[0] + f"/{name}" if args.reuse
           else create_database(args.pg_url, name))
    log(f"{NAME}: database {name}")
    # no node agents here: nodes never heartbeat, so the silent-node timeout is off
    os.environ.update(DATABASE_URL=url, DEBUG="false", CELERY_BROKER_URL="",
                      DJANGO_SETTINGS_MODULE="scheduler_app.settings", CONN_MAX_AGE="0",
                      SCHEDULER_HEARTBEAT_TIMEOUT_S="0")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from scheduler_app.services.transitions import now_s

        if args.replay_only:
            log(f"{NAME}: {json.dumps(measure_replay(args.replay_only))}")
            return
        call_command("migrate", verbosity=0)
        t0 = time.perf_counter()
        if args.reuse:
            data = count_data()
            log(f"{NAME}: reusing {data}")
        else:
            log(f"{NAME}: generating {args.jobs:,} jobs...")
            history = History(jobs=args.jobs, transitions=args.transitions, end=now_s(),
                              seed=args.seed, live_share=args.live_share)
            history.generate()
            data = load(history)
            del history
        load_s = time.perf_counter() - t0
        log(f"{NAME}: loaded {data} in {load_s:.0f} s")
        settle()  # the load (and the autovacuum after it) still counts in the load average
        measured = measure(ticks=args.ticks, seed=args.seed)
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            postgres = cursor.fetchone()[0].split()[0]
        connection.close()
    finally:
        if args.keep or args.reuse:
            log(f"{NAME}: database {name} kept (reuse it with --reuse {name})")
        else:
            drop_database(args.pg_url, name)
    res = {"date": now_utc(), "machine": machine(), "postgres": postgres, "data": data,
           "load_s": round(load_s, 1), "measured": measured, "targets": TARGETS,
           "name": args.name, "live_share": args.live_share,
           "command": " ".join(["python -m bench.persistence",
                                *(argv if argv is not None else sys.argv[1:])])}
    if args.reuse:  # the results and the doc describe a fresh database
        log(f"{NAME}: {json.dumps(measured)}")
        return
    path = write_results(args.name, res)
    log(f"{NAME}: {json.dumps(measured)} -> {path}")
    if not args.no_doc:
        update_doc_section(args.name, markdown(res))


if __name__ == "__main__":
    main()
