"""What one submit costs the web process and PostgreSQL, in-process, without HTTP.

    python -m bench.submit_cost [--n 2000] [--batch SIZE | --array COUNT] [--calls]
                                [--profile N] [--instructions] [--pg-url postgres://...]
                                [--keep]
    python -m bench.submit_cost --array-vs-batch [--pg-url postgres://...]

The throughput benchmark (``bench.api_throughput``) measures the whole machine: eight
clients, two gunicorn workers, the leader and PostgreSQL sharing two cores, where the CPU
time of the same request varies by half from run to run. This one isolates the app's
share, to compare two versions of the code: it seeds a database of its own
(``sched_bench_cost``, as the throughput bench does), then calls the WSGI application
directly, ``--n`` times in a row, with the request a pipeline sends (``POST /api/v1/jobs/``,
a bearer token, an ``Idempotency-Key``, a JSON body; with ``--batch SIZE``,
``POST /api/v1/jobs/batch/`` with SIZE jobs), and reports per request:

- the web process's CPU (user and kernel, ``os.times``) and wall time, and the CPU of its
  PostgreSQL backend (from /proc);
- the statements it sends (Django's query capture, over a sample) and its round trips;
- with ``--calls``, the Python function calls (``cProfile``): a count, not a time, so the
  same from run to run; with ``--profile N``, the N functions with the most own time.

With ``--instructions`` it also counts the web process's instructions per submit: it runs
itself twice more under ``valgrind --tool=callgrind`` on the same database (``--n 100``
and ``--n 300`` after the same warm-up, or 2 and 6 batches) and divides the difference: a
count that is the same from run to run whatever else the machine is doing (a few
minutes: valgrind runs Python about fifty times slower). Not part of the test suite;
docs/PERFORMANCE.md ("REST API throughput") quotes it.

With ``--array COUNT`` each request is a job array of COUNT tasks (``POST
/api/v1/arrays/``). ``--array-vs-batch`` answers issue 19's bound, "an array of 10,000
tasks costs no more to submit than a batch of 10,000 jobs": it runs an array of 10,000
tasks (3 of them, after one to warm up) and batches of 1,000 jobs (the most one batch
takes: 30, after one), each in a fresh database, and reports both per 10,000 jobs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import create_database, drop_database, log

DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
DB_NAME = "sched_bench_cost"
#: Submits whose statements are counted.
SAMPLE = 5

#: The tenant and token a run seeded, for --reuse.
SEEDED = Path("/tmp/sched_bench_cost.json")


def backend_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of PostgreSQL backend ``pid`` (same machine)."""
    from bench.api_throughput import proc_cpu_s

    return proc_cpu_s(pid) or 0.0


def environ(body: bytes, key: str, idem: str, path: str) -> dict[str, Any]:
    """The WSGI environ of a pipeline's submit, as gunicorn builds it."""
    return {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SCRIPT_NAME": "",
        "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1",
        "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {key}", "HTTP_ACCEPT": "application/json",
        "HTTP_IDEMPOTENCY_KEY": idem, "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr, "wsgi.multithread": False,
        "wsgi.multiprocess": True, "wsgi.run_once": False, "wsgi.version": (1, 0),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="submits to time")
    ap.add_argument("--warm", type=int, default=50, help="submits before timing")
    ap.add_argument("--batch", type=int, default=0, metavar="SIZE",
                    help="submit batches of SIZE jobs (POST /jobs/batch/) instead of single "
                         "jobs: every figure is then per batch")
    ap.add_argument("--array", type=int, default=0, metavar="COUNT",
                    help="submit job arrays of COUNT tasks (POST /arrays/) instead: every "
                         "figure is then per array")
    ap.add_argument("--array-vs-batch", action="store_true",
                    help="an array of 10,000 tasks against batches of 1,000 jobs, per "
                         "10,000 jobs (two runs of this benchmark)")
    ap.add_argument("--calls", action="store_true", help="count Python calls (cProfile)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print the N functions with the most own time (cProfile)")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per submit under callgrind")
    ap.add_argument("--pg-url", default=DEFAULT_PG)
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards")
    ap.add_argument("--reuse", action="store_true",
                    help="use the database and token a --keep run left (no migrate, no seed)")
    a = ap.parse_args(argv)
    if a.array_vs_batch:
        return array_vs_batch(a.pg_url)

    if a.reuse:
        base, _, _db = a.pg_url.rpartition("/")
        url = f"{base}/{DB_NAME}"
    else:
        url = create_database(a.pg_url, DB_NAME, replace=True)
    os.environ.update({"DATABASE_URL": url, "DEBUG": "false", "CELERY_BROKER_URL": "",
                       "DJANGO_SETTINGS_MODULE": "scheduler_app.settings",
                       "API_THROTTLE_USER": "", "LOG_LEVEL": "WARNING"})
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from bench.api_throughput import job_spec, seed

        if a.reuse:
            tenant, key = json.loads(SEEDED.read_text())
        else:
            call_command("migrate", verbosity=0)
            tenant, key = seed(nodes=64, tenants=4, clients=1)[0]
            SEEDED.write_text(json.dumps([tenant, key]))
        from scheduler_app.wsgi import application as app  # as gunicorn loads it
        tag = uuid.uuid4().hex[:8]
        counter = iter(range(10**9))

        def submit() -> None:
            i = next(counter)
            if a.array:
                path = "/api/v1/arrays/"
                body = json.dumps({"tenant": tenant, **job_spec(i, tag),
                                   "array": {"count": a.array, "max_running": 64}}).encode()
            elif a.batch:
                path = "/api/v1/jobs/batch/"
                body = json.dumps({"tenant": tenant, "jobs": [
                    job_spec(i * a.batch + j, tag) for j in range(a.batch)]}).encode()
            else:
                path = "/api/v1/jobs/"
                body = json.dumps({"tenant": tenant, **job_spec(i, tag)}).encode()
            statuses: list[str] = []
            chunks = app(environ(body, key, f"{tag}-{i}", path),
                         lambda status, headers, exc_info=None: statuses.append(status))
            b"".join(chunks)
            if not statuses[0].startswith("201"):
                raise RuntimeError(f"submit answered {statuses[0]}")

        for _ in range(a.warm):
            submit()
        with CaptureQueriesContext(connection) as captured:
            for _ in range(SAMPLE):
                submit()
        statements = [q["sql"].split(" ", 1)[0].upper() for q in captured.captured_queries]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]

        res: dict[str, Any] = {"n": a.n, "batch": a.batch, "array": a.array,
                               "statements_per_submit": len(statements) / SAMPLE,
                               "statement_kinds": sorted(set(statements))}
        if a.n:
            pg0, t0, wall0 = backend_cpu_s(pid), os.times(), time.perf_counter()
            for _ in range(a.n):
                submit()
            wall = time.perf_counter() - wall0
            t1, pg = os.times(), backend_cpu_s(pid) - pg0
            user, system = t1.user - t0.user, t1.system - t0.system
            res.update({"web_cpu_ms": round((user + system) * 1000 / a.n, 3),
                        "web_kernel_ms": round(system * 1000 / a.n, 3),
                        "wall_ms": round(wall * 1000 / a.n, 3),
                        "postgres_cpu_ms": round(pg * 1000 / a.n, 3)})
        if a.calls or a.profile:
            n = max(200, min(a.n, 1000)) if not (a.batch or a.array) else max(5, min(a.n, 20))
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(n):
                submit()
            profiler.disable()
            stats = pstats.Stats(profiler)
            res["python_calls_per_submit"] = round(stats.total_calls / n, 1)  # type: ignore[attr-defined]
            if a.profile:
                out = io.StringIO()
                stats.stream = out  # type: ignore[attr-defined]
                stats.sort_stats("tottime").print_stats(a.profile)
                print(out.getvalue())
        if a.instructions:
            connection.close()
            lo, hi = (2, 6) if a.batch or a.array else (100, 300)
            counts = {n: instructions(n, a) for n in (lo, hi)}
            res["web_instructions_per_submit"] = round((counts[hi] - counts[lo]) / (hi - lo))
        log(f"submit_cost: {json.dumps(res)}")
        return res
    finally:
        from django.db import connections

        connections.close_all()
        if not (a.keep or a.reuse):
            drop_database(a.pg_url, DB_NAME)


def array_vs_batch(pg_url: str) -> dict[str, Any]:
    """An array of 10,000 tasks against 10 batches of 1,000 jobs: web CPU, PostgreSQL
    CPU, wall time and statements per 10,000 jobs, each in a process and database of its
    own (the same seed)."""
    runs = {"array_10000": (["--array", "10000", "--n", "3", "--warm", "1"], 1),
            "batches_of_1000": (["--batch", "1000", "--n", "30", "--warm", "1"], 10)}
    out: dict[str, Any] = {}
    for name, (args, per) in runs.items():
        done = subprocess.run(
            [sys.executable, "-m", "bench.submit_cost", *args, "--pg-url", pg_url],
            check=True, capture_output=True, text=True)
        line = next(x for x in reversed(done.stdout.splitlines() + done.stderr.splitlines())
                    if "submit_cost: {" in x)
        res = json.loads(line.split("submit_cost: ", 1)[1])
        out[name] = {key: round(res[key] * per, 1) for key in
                     ("web_cpu_ms", "postgres_cpu_ms", "wall_ms", "statements_per_submit")}
    out["per"] = "10,000 jobs"
    log(f"submit_cost array vs batch: {json.dumps(out)}")
    return out


def instructions(n: int, a: argparse.Namespace) -> int:
    """Instructions this harness executes with ``--n n`` on the kept database, under
    callgrind (startup, warm-up and ``n`` submits)."""
    out = Path(f"/tmp/submit_cost.callgrind.{n}")
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         sys.executable, "-m", "bench.submit_cost", "--reuse", "--n", str(n),
         "--warm", str(a.warm), "--batch", str(a.batch), "--array", str(a.array),
         "--pg-url", a.pg_url],
        check=True, capture_output=True, cwd=Path(__file__).resolve().parent.parent,
    )
    for line in out.read_text().splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


if __name__ == "__main__":
    main()
