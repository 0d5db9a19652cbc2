"""REST API throughput: single submits and batches of 1,000, over HTTP, while the tick runs.

    python -m bench.api_throughput [--repeat 3] [--seconds 20] [--clients 8] [--batch-clients 2]
                                   [--workers 2] [--threads 1] [--worker-class gthread]
                                   [--phases single,batch] [--results-dir DIR]
                                   [--pg-url postgres://...]

Creates a PostgreSQL database of its own (``sched_bench_api``, dropped at the end unless
``--keep``), migrates it, seeds a cluster (``--nodes`` 8-GPU nodes registered through the
agent service, ``--tenants`` teams, one researcher per client with an API token), then
starts, as separate processes on this machine:

- gunicorn serving the app (``--workers`` processes of ``--threads`` threads, gthread:
  keep-alive), with ``API_THROTTLE_USER=`` (no per-user limit) and ``DEBUG=false``;
- ``manage.py run_scheduler --interval 1``: the leader ticking every second, following
  every submitted job from the log and placing what fits;
- the clients (the standard library's ``http.client``, one keep-alive connection per
  process: a lean client, so that the machine's CPU goes to the server): ``--clients``
  processes posting
  single jobs to ``POST /api/v1/jobs/`` (each with an ``Idempotency-Key``, as a pipeline
  sends) for ``--seconds``, then ``--batch-clients`` processes posting batches of
  ``--batch-size`` jobs to ``POST /api/v1/jobs/batch/`` for ``--seconds``.

Measures jobs per second (successful submits over the phase's wall time) and the latency
of each request (p50, p99), the ticks during each phase, the load average, the CPU each
process group used per request (from /proc: clients, gunicorn, the scheduler, the
PostgreSQL backends of the bench's database, the whole machine) and how often submits
queued at the log's append lock (pg_stat_activity, sampled every 50 ms). Targets
(issue 6): at least 500 single submits per second (Slurm's sustained rate), at least 5,000
jobs per second in batches. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import (
    REPO,
    create_database,
    drop_database,
    log,
    machine,
    now_utc,
    settle,
    table,
    update_doc_section,
    write_results,
)

NAME = "api_throughput"
TARGETS = {"single_per_s": 500.0, "batch_jobs_per_s": 5000.0}
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
DB_NAME = "sched_bench_api"
PYTHON = sys.executable


# ------------------------------------------------------------------ the database
def seed(*, nodes: int, tenants: int, clients: int) -> list[tuple[str, str]]:
    """The cluster, the teams, one researcher per client: [(tenant, token key)]."""
    from django.contrib.auth import get_user_model

    from scheduler_app.api.tokens import token_issue
    from scheduler_app.models import Membership
    from scheduler_app.services.agents import agent_register
    from scheduler_app.services.cluster import tenant_create

    per_pod = 16
    for i in range(nodes):
        agent_register(name=f"n{i:04d}", pod=f"pod{i // per_pod}", gpus=8, gpu_type="H100")
    gpus = nodes * 8
    teams = [
        tenant_create(name=f"team{t:02d}", guaranteed_gpus=gpus // tenants,
                      borrow_limit_gpus=gpus // 2, actor_name="bench")
        for t in range(tenants)
    ]
    User = get_user_model()
    out = []
    for c in range(clients):
        team = teams[c % len(teams)]
        user = User.objects.create_user(f"pipeline{c:02d}")
        Membership.objects.create(user=user, tenant=team, role="researcher")
        out.append((team.name, token_issue(user=user, name="bench")[1]))
    return out


# ------------------------------------------------------------------ the clients
def job_spec(i: int, tag: str) -> dict[str, Any]:
    """A sweep's job: mostly 1 GPU, some 8 (a whole node), runtimes of minutes to hours."""
    gpus = 8 if i % 10 == 0 else 1
    return {"name": f"sweep-{tag}-{i}", "gpus": gpus, "max_runtime_s": 600 + (i % 7) * 900,
            "checkpointable": i % 3 == 0, "command": "python train.py --lr 3e-4"}


def _connect(base: str) -> Any:
    """A keep-alive HTTP/1.1 connection to ``base`` (http://host:port)."""
    import http.client

    host, _, port = base.removeprefix("http://").partition(":")
    return http.client.HTTPConnection(host, int(port or 80), timeout=300)


def _post(conn: Any, path: str, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` on the kept-alive ``conn``; the status. The response is read to the
    end (the connection is reused); a connection the server closed is reopened by the
    next request."""
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    return response.status


def _cpu_s() -> float:
    """This process's CPU seconds (user + system)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _client(base: str, key: str, start_at: float, deadline: float, path: str,
            bodies: Any, timeout_s: float) -> dict[str, Any]:
    """Post ``bodies`` (an iterator of (body bytes, idempotency key, jobs)) to ``path``
    until ``deadline`` (time.time()), over one keep-alive connection (``http.client``,
    the standard library's: a lean client, so the machine's CPU goes to the server);
    returns the latency (ms) of each 201 and the errors by status."""
    conn = _connect(base)
    conn.timeout = timeout_s
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
               "Accept": "application/json", "Idempotency-Key": ""}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    jobs = 0
    while time.time() < start_at:
        time.sleep(0.001)
    first = time.time()
    cpu0 = _cpu_s()
    perf = time.perf_counter
    while time.time() < deadline:
        body, idem, n = next(bodies)
        headers["Idempotency-Key"] = idem
        t0 = perf()
        try:
            status: int | str = _post(conn, path, body, headers)
        except Exception as error:  # noqa: BLE001 - counted (OSError, HTTPException)
            status = type(error).__name__
            conn.close()
            conn = _connect(base)
            conn.timeout = timeout_s
        ms = (perf() - t0) * 1000
        if status == 201:
            latencies.append(ms)
            jobs += n
        else:
            errors[str(status)] = errors.get(str(status), 0) + 1
    cpu = _cpu_s() - cpu0
    conn.close()
    return {"latencies_ms": latencies, "jobs": jobs, "errors": errors, "first": first,
            "last": time.time(), "cpu_s": cpu}


def client_single(args: tuple[str, str, str, float, float]) -> dict[str, Any]:
    """Post single submits until ``deadline`` (time.time()); returns latencies (ms)."""
    import json

    base, tenant, key, start_at, deadline = args
    tag = uuid.uuid4().hex[:8]

    def bodies() -> Any:
        i = 0
        while True:
            body = json.dumps({"tenant": tenant, **job_spec(i, tag)}).encode()
            yield body, f"{tag}-{i}", 1
            i += 1

    return _client(base, key, start_at, deadline, "/api/v1/jobs/", bodies(), 60)


def client_batch(args: tuple[str, str, str, float, float, int]) -> dict[str, Any]:
    """Post batches of ``size`` jobs until ``deadline``; returns per-request latencies."""
    import json

    base, tenant, key, start_at, deadline, size = args
    tag = uuid.uuid4().hex[:8]

    def bodies() -> Any:
        b = 0
        while True:
            body = json.dumps({"tenant": tenant, "jobs": [job_spec(b * size + i, tag)
                                                          for i in range(size)]}).encode()
            yield body, f"{tag}-b{b}", size
            b += 1

    return _client(base, key, start_at, deadline, "/api/v1/jobs/batch/", bodies(), 300)


def calibrate() -> float:
    """Seconds for a 10-million-step Python loop here and now: how much CPU this shared
    machine gives a process at the moment (an idle modern core: about 0.4 s)."""
    started = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return round(time.perf_counter() - started, 2)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class _Sampler:
    """Samples taken in a thread while the ``with`` block runs (``_run`` appends them to
    ``samples`` until ``_stop`` is set)."""

    def __init__(self) -> None:
        self.samples: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class LoadSampler(_Sampler):
    """The 1-minute load average, sampled every second in a thread."""

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append(os.getloadavg()[0])


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, from /proc; None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def proc_tree(pid: int) -> list[int]:
    """``pid`` and its children (gunicorn's master and workers)."""
    out = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle (all cores, every process)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


class CpuMeter:
    """CPU seconds per process group over a phase, read from /proc (Linux; the servers
    run on this machine): gunicorn (master and workers), the scheduler, PostgreSQL's
    backends serving the bench's database, PostgreSQL's background processes (WAL
    writer, checkpointer...: shared with anything else using the server), and the whole
    machine. The clients measure their own (getrusage). A process that ended during the
    phase (a database connection closed) is not counted: a lower bound."""

    def __init__(self, pg_url: str, gunicorn_pid: int, scheduler_pid: int) -> None:
        self.pg_url, self.gunicorn_pid, self.scheduler_pid = pg_url, gunicorn_pid, scheduler_pid

    def _pg_pids(self) -> tuple[list[int], list[int]]:
        import psycopg

        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            rows = conn.execute("SELECT pid, datname, backend_type FROM pg_stat_activity "
                                "WHERE pid <> pg_backend_pid()").fetchall()
        ours = [pid for pid, db, kind in rows if db == DB_NAME and kind == "client backend"]
        background = [pid for pid, db, kind in rows if kind != "client backend"]
        return ours, background

    def snapshot(self) -> dict[str, dict[int, float]]:
        ours, background = self._pg_pids()
        groups = {"gunicorn": proc_tree(self.gunicorn_pid),
                  "scheduler": proc_tree(self.scheduler_pid),
                  "postgres_backends": ours, "postgres_background": background}
        snap = {name: {pid: cpu for pid in pids if (cpu := proc_cpu_s(pid)) is not None}
                for name, pids in groups.items()}
        snap["machine"] = {0: machine_busy_s()}
        return snap

    @staticmethod
    def since(before: dict[str, dict[int, float]],
              after: dict[str, dict[int, float]]) -> dict[str, float]:
        """CPU seconds of each group between two snapshots (a process that started
        meanwhile counts from zero)."""
        return {name: round(sum(cpu - before[name].get(pid, 0.0) for pid, cpu in now.items()),
                            2)
                for name, now in after.items()}


class LockSampler(_Sampler):
    """What the bench database's backends wait for, sampled every ``every_s`` in a
    thread (pg_stat_activity): how many wait for the log's append lock (an advisory
    lock) and how many are busy. A queue at that lock in most samples means it is what
    limits the submit rate."""

    def __init__(self, pg_url: str, every_s: float = 0.05) -> None:
        super().__init__()  # samples: (waiting on the append lock, active)
        self.pg_url, self.every_s = pg_url, every_s

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            while not self._stop.wait(self.every_s):
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock' "
                    "AND wait_event = 'advisory'), count(*) FILTER (WHERE state = 'active') "
                    "FROM pg_stat_activity WHERE datname = %s", [DB_NAME]).fetchone()
                self.samples.append((int(row[0]), int(row[1])))

    def summary(self) -> dict[str, Any]:
        n = len(self.samples)
        if not n:
            return {}
        return {
            "samples": n,
            "waiting_mean": round(sum(w for w, _a in self.samples) / n, 2),
            "share_with_a_queue": round(sum(1 for w, _a in self.samples if w) / n, 2),
            "active_mean": round(sum(a for _w, a in self.samples) / n, 2),
        }


def run_phase(kind: str, *, base: str, users: list[tuple[str, str]], clients: int,
              seconds: float, batch_size: int, ticks: TickLog,
              meter: CpuMeter | None = None) -> dict[str, Any]:
    start_at = time.time() + 1.0  # every client starts at once
    deadline = start_at + seconds
    if kind == "single":
        fn: Any = client_single
        work = [(base, *users[c % len(users)], start_at, deadline) for c in range(clients)]
    else:
        fn = client_batch
        work = [(base, *users[c % len(users)], start_at, deadline, batch_size)
                for c in range(clients)]
    ticks_before = ticks.mark()
    locks = LockSampler(meter.pg_url) if meter else None
    with LoadSampler() as load, mp.get_context("spawn").Pool(clients) as pool:
        pending = pool.map_async(fn, work)
        # the clients start together at start_at; measure from then to their end
        time.sleep(max(0.0, start_at - time.time()))
        cpu_before = meter.snapshot() if meter else None
        if locks:
            with locks:
                results = pending.get()
        else:
            results = pending.get()
        cpu_after = meter.snapshot() if meter else None
    first = min(r["first"] for r in results)
    last = max(r["last"] for r in results)
    latencies = [ms for r in results for ms in r["latencies_ms"]]
    jobs = sum(r["jobs"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for status, n in r["errors"].items():
            errors[status] = errors.get(status, 0) + n
    wall = last - first
    tick_ms = ticks.since(ticks_before)
    cpu: dict[str, float] = {"clients": round(sum(r["cpu_s"] for r in results), 2)}
    if cpu_before is not None and cpu_after is not None:
        cpu.update(CpuMeter.since(cpu_before, cpu_after))
    requests_done = len(latencies) + sum(errors.values())
    return {
        "clients": clients,
        "wall_s": round(wall, 2),
        "requests": len(latencies),
        "jobs": jobs,
        "jobs_per_s": round(jobs / wall, 1) if wall > 0 else 0.0,
        "requests_per_s": round(len(latencies) / wall, 2) if wall > 0 else 0.0,
        "p50_ms": round(percentile(latencies, 50) or 0, 1),
        "p99_ms": round(percentile(latencies, 99) or 0, 1),
        "max_ms": round(max(latencies), 1) if latencies else None,
        "errors": errors,
        "load_avg_1m_mean": round(statistics.mean(load.samples), 2) if load.samples else None,
        "load_avg_1m_max": round(max(load.samples), 2) if load.samples else None,
        "ticks": len(tick_ms),
        "tick_p50_ms": round(statistics.median(tick_ms), 1) if tick_ms else None,
        "tick_max_ms": round(max(tick_ms), 1) if tick_ms else None,
        # CPU seconds over the phase by process group, and per request (ms); "machine"
        # is every process on the machine, ours and anything else running
        "cpu_s": cpu,
        "cpu_ms_per_request": {name: round(sec * 1000 / requests_done, 2) if requests_done
                               else None for name, sec in cpu.items()},
        # backends waiting for the log's append lock (pg_stat_activity, every 50 ms)
        "append_lock": locks.summary() if locks else {},
    }


# ------------------------------------------------------------------ the servers
class TickLog:
    """The run_scheduler log (``-v 2``: one line per step): ticks and their durations."""

    LINE = re.compile(r"tick_id=(\S+) .*duration_ms=([\d.]+)(.*)")

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[tuple[str, float, str]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(errors="replace").splitlines():
            m = self.LINE.search(line)
            if m and m.group(1) != "-":
                out.append((m.group(1), float(m.group(2)), m.group(3)))
        return out

    def mark(self) -> int:
        return len(self.lines())

    def since(self, mark: int) -> list[float]:
        return [ms for _id, ms, _rest in self.lines()[mark:]]

    def errors(self) -> list[str]:
        return [rest.strip() for _id, _ms, rest in self.lines() if "error=" in rest]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base: str, key: str, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        conn = _connect(base)
        conn.timeout = 5
        try:
            conn.request("GET", "/api/v1/me/", headers={"Authorization": f"Bearer {key}"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                return
        except Exception:  # noqa: BLE001, S110 - not up yet
            pass
        finally:
            conn.close()
        time.sleep(0.5)
    raise RuntimeError(f"gunicorn did not answer at {base} within {timeout_s} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------ the doc
def markdown(res: dict[str, Any], command: str) -> str:
    m, p = res["machine"], res["params"]
    single, batch = res["single"], res["batch"]

    def verdict(value: float, target: float) -> str:
        return "met" if value >= target else "**NOT met**"

    rows = [
        ("single submits (`POST /jobs/`)", f"{single['clients']} clients",
         f"{single['jobs_per_s']:,.0f} jobs/s", single["p50_ms"], single["p99_ms"],
         ">= 500 jobs/s", verdict(single["jobs_per_s"], TARGETS["single_per_s"])),
        (f"batches of {p['batch_size']:,} (`POST /jobs/batch/`)",
         f"{batch['clients']} clients",
         f"{batch['jobs_per_s']:,.0f} jobs/s", batch["p50_ms"], batch["p99_ms"],
         ">= 5,000 jobs/s", verdict(batch["jobs_per_s"], TARGETS["batch_jobs_per_s"])),
    ]
    phases = [
        (name, ph["requests"], ph["jobs"], ph["wall_s"], ph["max_ms"],
         ", ".join(f"{k}: {v}" for k, v in ph["errors"].items()) or "none",
         ph["ticks"], ph["tick_p50_ms"], ph["tick_max_ms"], ph["load_avg_1m_mean"],
         ph["load_avg_1m_max"])
        for name, ph in (("single", single), ("batch", batch))
    ]
    groups = ("clients", "gunicorn", "scheduler", "postgres_backends")

    def ours(ph: dict[str, Any]) -> float:
        return sum(ph.get("cpu_ms_per_request", {}).get(g) or 0.0 for g in groups)

    cpu_rows = [
        (name, *(ph.get("cpu_ms_per_request", {}).get(g) for g in groups), ours(ph),
         ph.get("cpu_ms_per_request", {}).get("machine"),
         ph.get("append_lock", {}).get("share_with_a_queue"),
         ph.get("append_lock", {}).get("waiting_mean"))
        for name, ph in (("single (per request)", single), ("batch (per request)", batch))
    ]
    cost = ours(single)
    workers = f"{p['workers']} workers x {p['threads']} thread" + ("s" if p["threads"] > 1
                                                                    else "")
    return "\n".join([
        "## REST API throughput",
        "",
        f"{res['date']}; {m['cpu_model']}, nproc {m['nproc']} ("
        + ("**shared**: other workers' tests and benchmarks ran at the same time; "
           if res["load_before"] >= 1.5 else "nothing else running; ")
        + f"load average before the run "
        f"{res['load_before']:.2f}), {m['memory_gib']} GiB RAM, Python {m['python']}, "
        f"PostgreSQL {res['postgres']} on the same machine. For scale: a 10-million-step "
        f"Python loop took {res['loop_s_before']} s just before the run and "
        f"{res['loop_s_after']} s just after.",
        "",
        f"Setup: gunicorn {res['gunicorn']} ({workers}, "
        f"{res.get('worker_class', 'gthread')}, keep-alive, "
        f"{'C' if res.get('http_parser') == 'fast' else 'Python'} HTTP parser) serving the "
        f"app with "
        f"`DEBUG=false` and `API_THROTTLE_USER=` "
        f"(no limit); `manage.py run_scheduler --interval 1` ticking beside it (the leader "
        f"follows every submitted job from the log and places what fits); the clients are "
        f"{res.get('client', '`requests` sessions')} on kept-alive connections, one "
        f"process each, on the same machine, each with its own pipeline user and token. "
        f"A database of its own "
        f"(`{DB_NAME}`), migrated and seeded with {p['nodes']} nodes x 8 GPUs and "
        f"{p['tenants']} teams, dropped after. Each phase runs {p['seconds']:.0f} s; single "
        "submits carry an `Idempotency-Key`, as a retrying pipeline sends them; batches one "
        "key per batch. Jobs: 1 GPU (every tenth 8), runtime limits of 10 min to 1.7 h.",
        "",
        table(["what", "clients", "throughput", "p50 ms", "p99 ms", "target", ""], rows),
        "",
        *([runs_line(res["runs"]), ""] if res.get("runs") else []),
        table(["phase", "requests", "jobs", "wall s", "max ms", "errors", "ticks",
               "tick p50 ms", "tick max ms", "load avg (mean)", "load avg (max)"], phases),
        "",
        "CPU per request, ms, by process (from /proc over the phase; PostgreSQL: the "
        "backends of the bench's database; the whole machine counts every process, the "
        "other workers' too), and the log's append lock (pg_stat_activity every 50 ms: "
        "the share of samples with a submit waiting for it, and the mean number waiting):",
        "",
        table(["phase", "clients", "gunicorn", "scheduler", "PostgreSQL", "all of the "
               "bench's", "whole machine", "lock queued (share)", "lock waiters (mean)"],
              cpu_rows),
        "",
        f"What a submit costs (statements counted on this database, as a web process "
        f"sends them): a single submit {res['queries_per_submit']}, a transaction of its "
        f"own (`transitions.admit_new_job`): one statement takes the log's append lock and "
        f"inserts the job and its two log rows (data-modifying `WITH`s), prepared once per "
        f"connection and bound server-side, so a submit is one round trip and the server "
        f"neither parses nor plans it again; an idempotency key is checked by its unique "
        f"index, not looked up first. The token, the tenant with the caller's role and the "
        f"cluster's GPU types and node sizes for the never-fits check are read once per "
        f"`API_CACHE_S` seconds (default 5) per web process, one statement each "
        f"(docs/api.md, Authentication: how fast a revoke is seen). A batch of "
        f"{p['batch_size']:,}: {res['queries_per_batch']} and two `COPY`s (the jobs, and "
        f"their {2 * p['batch_size']:,} log rows), whatever its size. Before the profiling "
        f"passes of this section: 17 statements per single submit and 7,011 per batch, "
        f"then 8, then 5 (BEGIN, the lock, two INSERTs, COMMIT). Bodies that are plainly "
        f"valid are checked by a plan of the serializers' own checks (`api/fastvalid.py`; "
        f"anything doubtful goes to DRF for its messages), responses are built without a "
        f"serializer per job, token-authenticated API requests step over the browser's "
        f"session, CSRF, authentication and messages middleware (`api/middleware.py`), "
        f"and gunicorn parses HTTP with its C parser (`gunicorn_h1c`). The tick writes its "
        f"decisions holding the log's append lock, so a submit arriving meanwhile waits "
        f"for it: the slowest requests are the ones that met the ticks placing or "
        f"following thousands of jobs.",
        "",
        f"Where the time goes. A single submit cost {cost:.1f} ms of CPU across the "
        f"bench's processes (table above): at that cost two idle cores would serve about "
        f"{2000 / cost if cost else 0:,.0f} per second; the cores are never both busy all "
        f"the time (each request also waits for its commit's WAL flush). The web process's "
        f"share, measured apart by `python -m bench.submit_cost` (in-process, no HTTP; "
        f"instructions counted under callgrind, the same from run to run), is in the "
        f"summary above. The CPU time of the same work follows the host's speed, which "
        f"varies over a day (the 10-million-step loop: {loop_range(res)} in these runs): "
        f"compare runs by the loop's figure. The clients are the standard library's HTTP "
        f"client on kept-alive connections. With several threads per gunicorn worker the "
        f"append lock's holder also waits for its process's interpreter lock, which "
        f"stretches the lock's hold: one thread per worker. Batches pay the lock and the "
        f"round trips once per 1,000 jobs: pipelines should batch (docs/api.md).",
        "",
        *([res["note"], ""] if res.get("note") else []),
        f"Reproduce: `{command}` (needs PostgreSQL; raw numbers: "
        f"`bench/results/{NAME}.json`).",
    ])


def runs_line(runs: list[dict[str, Any]]) -> str:
    """Every run of a ``--repeat`` result, in order, with the loop figure around it."""
    parts = [
        f"{r['date'][11:16]} UTC: {r.get('single', 0):,.0f} single submits/s, "
        f"{r.get('batch', 0):,.0f} jobs/s in batches (loop {r['loop_s_before']}-"
        f"{r['loop_s_after']} s)"
        for r in runs
    ]
    return (f"{len(runs)} runs, each on a fresh database and fresh servers, one after the "
            f"other; the tables show each phase's median run: " + "; ".join(parts) + ".")


def count_queries(tenant: str, key: str, batch_size: int) -> tuple[int, int]:
    """Queries one single submit and one batch cost, through Django's test client."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="127.0.0.1")
    tag = uuid.uuid4().hex[:8]
    client.post("/api/v1/jobs/", {"tenant": tenant, **job_spec(1, tag)},
                content_type="application/json")  # warm: the token's last_used_at
    with CaptureQueriesContext(connection) as single:
        r = client.post("/api/v1/jobs/", {"tenant": tenant, **job_spec(2, tag)},
                        content_type="application/json", HTTP_IDEMPOTENCY_KEY=f"{tag}-q")
        assert r.status_code == 201, r.content
    body = {"tenant": tenant, "jobs": [job_spec(i, tag) for i in range(batch_size)]}
    with CaptureQueriesContext(connection) as batch:
        r = client.post("/api/v1/jobs/batch/", body, content_type="application/json",
                        HTTP_IDEMPOTENCY_KEY=f"{tag}-qb")
        assert r.status_code == 201, r.content
    return len(single.captured_queries), len(batch.captured_queries)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    ap.add_argument("--clients", type=int, default=8, help="single-submit client processes")
    ap.add_argument("--batch-clients", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2,
                    help="gunicorn worker processes (about as many as cores)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per gunicorn worker (one: see docs/api.md, Throughput)")
    ap.add_argument("--worker-class", default="gthread", help="gunicorn's --worker-class")
    ap.add_argument("--http-parser", default="fast", choices=["fast", "python"],
                    help="gunicorn's HTTP parser: its C one (gunicorn_h1c) or pure Python")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs, each on a fresh database and servers: the doc shows each "
                         "phase's median run and lists them all")
    ap.add_argument("--phases", default="single,batch",
                    help="which phases to run (the doc needs both)")
    ap.add_argument("--results-dir", default=None,
                    help="where to write api_throughput.json (default bench/results/)")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--pg-url", default=DEFAULT_PG,
                    help="a PostgreSQL maintenance database to create the bench one from")
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards")
    ap.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    ap.add_argument("--note", default="", help="a sentence for the doc section")
    ap.add_argument("--doc-only", action="store_true",
                    help="rewrite the doc section from bench/results/api_throughput.json "
                         "(with --note), measuring nothing")
    a = ap.parse_args(argv)
    if a.doc_only:
        import json

        from bench._common import RESULTS_DIR

        res = json.loads((RESULTS_DIR / f"{NAME}.json").read_text())
        if a.note:
            res["note"] = a.note  # the measurement (its date, its machine) stays as it was
            (RESULTS_DIR / f"{NAME}.json").write_text(json.dumps(res, indent=2) + "\n",
                                                      encoding="utf-8")
        update_doc_section(NAME, markdown(res, res["command"]))
        return res
    command = "python -m bench.api_throughput " + " ".join(argv if argv is not None
                                                            else sys.argv[1:])
    phases = {p.strip() for p in a.phases.split(",") if p.strip()}
    if not phases <= {"single", "batch"}:
        ap.error("--phases: single, batch or both")
    if a.repeat < 1:
        ap.error("--repeat: at least 1")
    runs = []
    for i in range(a.repeat):
        if a.repeat > 1:
            log(f"{NAME}: run {i + 1} of {a.repeat}")
        runs.append(run_once(a, phases, command))
    res = runs[0] if len(runs) == 1 else median_run(runs, phases)
    path = write_results(NAME, res, Path(a.results_dir) if a.results_dir else None)
    log(f"{NAME}: wrote {path}")
    if phases != {"single", "batch"}:
        log(f"{NAME}: not both phases: PERFORMANCE.md left as it was")
    elif not a.no_doc:
        update_doc_section(NAME, markdown(res, command))
    return res


def median_run(runs: list[dict[str, Any]], phases: set[str]) -> dict[str, Any]:
    """The result of several runs: each phase's run of median throughput (the table
    shows it), every run's throughput and loop figures beside it (``runs``). The host's
    CPU speed varies from minute to minute; one run is not the machine's figure."""
    out = dict(runs[-1])
    for phase in phases:
        ordered = sorted(runs, key=lambda r: r[phase]["jobs_per_s"])
        out[phase] = ordered[(len(ordered) - 1) // 2][phase]
    out["runs"] = [
        {"date": r["date"], "loop_s_before": r["loop_s_before"], "loop_s_after": r["loop_s_after"],
         **{phase: r[phase]["jobs_per_s"] for phase in sorted(phases)}}
        for r in runs
    ]
    return out


def loop_range(res: dict[str, Any]) -> str:
    """The 10-million-step loop's times over the runs behind ``res`` (the host's speed)."""
    loops = [r[k] for r in res.get("runs", [res]) for k in ("loop_s_before", "loop_s_after")]
    return f"{min(loops)} to {max(loops)} s"


def run_once(a: argparse.Namespace, phases: set[str], command: str) -> dict[str, Any]:
    """One run: a fresh database, the servers, the phases; the result without writing."""
    settle()
    load_before = os.getloadavg()[0]
    url = create_database(a.pg_url, DB_NAME, replace=True)
    log(f"{NAME}: database {DB_NAME}")
    env = {
        **os.environ,
        "DATABASE_URL": url, "DEBUG": "false", "CELERY_BROKER_URL": "",
        "DJANGO_SETTINGS_MODULE": "scheduler_app.settings", "API_THROTTLE_USER": "",
        "LOG_LEVEL": "WARNING", "SCHEDULER_HEARTBEAT_TIMEOUT_S": "0",
    }
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "DEBUG", "CELERY_BROKER_URL",
                                           "DJANGO_SETTINGS_MODULE", "API_THROTTLE_USER",
                                           "SCHEDULER_HEARTBEAT_TIMEOUT_S")})
    procs: list[subprocess.Popen] = []
    tmp = Path(f"/tmp/{NAME}_{os.getpid()}")
    tmp.mkdir(exist_ok=True)
    logs = contextlib.ExitStack()
    try:
        import django

        django.setup()
        import gunicorn
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        users = seed(nodes=a.nodes, tenants=a.tenants,
                     clients=max(a.clients, a.batch_clients) + 1)
        queries = count_queries(*users[-1], a.batch_size)
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            postgres = cursor.fetchone()[0].split()[0]
        connection.close()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        procs.append(subprocess.Popen(
            [PYTHON, "-m", "gunicorn", "scheduler_app.wsgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", str(a.workers),
             "--worker-class", a.worker_class, "--threads", str(a.threads),
             "--keep-alive", "30", "--log-level", "warning", "--http-parser", a.http_parser],
            cwd=REPO, env=env, stderr=subprocess.STDOUT,
            stdout=logs.enter_context(open(tmp / "gunicorn.log", "w"))))  # noqa: SIM115
        ticks = TickLog(tmp / "scheduler.log")
        procs.append(subprocess.Popen(
            [PYTHON, "manage.py", "run_scheduler", "--interval", "1", "-v", "2"],
            cwd=REPO, env=env, stderr=subprocess.STDOUT,
            stdout=logs.enter_context(open(ticks.path, "w"))))  # noqa: SIM115 - closed by logs
        wait_ready(base, users[0][1])
        meter = CpuMeter(a.pg_url, procs[0].pid, procs[1].pid)
        loop_before = calibrate()
        single = batch = None
        if "single" in phases:
            log(f"{NAME}: gunicorn at {base}; single submits, {a.clients} clients, "
                f"{a.seconds:.0f} s...")
            single = run_phase("single", base=base, users=users, clients=a.clients,
                               seconds=a.seconds, batch_size=1, ticks=ticks, meter=meter)
            log(f"{NAME}: single {single}")
        if "batch" in phases:
            log(f"{NAME}: batches of {a.batch_size}, {a.batch_clients} clients...")
            batch = run_phase("batch", base=base, users=users, clients=a.batch_clients,
                              seconds=a.seconds, batch_size=a.batch_size, ticks=ticks,
                              meter=meter)
            log(f"{NAME}: batch {batch}")
        tick_errors = ticks.errors()
        loop_after = calibrate()
    finally:
        for proc in procs:
            stop(proc)
        logs.close()
        if not a.keep:
            from django.db import connections

            connections.close_all()
            drop_database(a.pg_url, DB_NAME)
    res = {
        "date": now_utc(), "machine": machine(), "postgres": postgres,
        "gunicorn": gunicorn.__version__, "worker_class": a.worker_class,
        "http_parser": a.http_parser,
        "client": f"the standard library's `http.client` (Python {sys.version.split()[0]})",
        "params": {"seconds": a.seconds, "clients": a.clients,
                   "batch_clients": a.batch_clients, "batch_size": a.batch_size,
                   "workers": a.workers, "threads": a.threads, "nodes": a.nodes,
                   "tenants": a.tenants},
        "load_before": load_before, "loop_s_before": loop_before, "loop_s_after": loop_after,
        "queries_per_submit": queries[0], "queries_per_batch": queries[1],
        "single": single, "batch": batch, "tick_errors": tick_errors[:10],
        "targets": TARGETS, "note": a.note, "command": command,
    }
    return res


if __name__ == "__main__":
    main()
