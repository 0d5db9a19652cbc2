"""Plumbing shared by the benchmarks: the machine, one core, results JSON, PERFORMANCE.md.

Each benchmark writes ``bench/results/<name>.json`` (the numbers, the parameters, the
machine, the date) and replaces its own section of ``docs/PERFORMANCE.md`` (between
``<!-- bench:<name> -->`` markers), so re-running one benchmark never touches another's.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler_app import core

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
PERF_DOC = REPO / "docs" / "PERFORMANCE.md"
IMG_DIR = REPO / "docs" / "img"

DOC_HEADER = """# Performance

Measured by the scripts in `bench/` (not part of the test suite). Each section below is
written by its script, with the machine and the date it ran on; the raw numbers are in
`bench/results/<name>.json`. Reproduce everything with

    .venv/bin/python -m bench.run_all            # full sizes (about 20 min of one core)
    .venv/bin/python -m bench.run_all --quick    # small sizes, into bench/results/quick/

or one benchmark with `.venv/bin/python -m bench.<name> --help`. Every benchmark pins itself
to one core and has a wall budget (`--max-wall-s`): a run that exceeds it stops and the
section says so, with the numbers it did measure.

Targets (issues 3 and 4):

- `tick_latency`: the 100,000-job synthetic busy day over 2 simulated hours: tick p99
  <= 100 ms, max <= 2 s; the naive tick on the same states, as a ratio.
- `memory`: the same 100,000 jobs submitted: core state <= 1 GiB.
- `sim_speed`: Helios days 0-119: simulated seconds per wall second (reported).
- `policies`: Helios days 0-119 under `full`, `fifo`, `priority-kill`: `full` loses at
  most half the GPU-hours `priority-kill` loses to preemption, and its entitled p95 wait
  stays within the 120 s grace of `priority-kill`'s.

The workloads are described in [workloads.md](workloads.md).
"""


def pin_one_core() -> int | None:
    """Run on one CPU (the machine is shared): the last one the process may use."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[-1]})
    return cpus[-1]


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    try:
        # --all: the machine's CPUs, not the one this benchmark pinned itself to
        out = subprocess.run(["nproc", "--all"], capture_output=True, text=True).stdout
        nproc = int(out.strip())
    except (OSError, ValueError):
        nproc = os.cpu_count() or 0
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "nproc": nproc,
        "load_average_1_5_15": load,  # the machine may be shared: wall times suffer
        "cpu_model": cpu,
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        # the core's modules: compiled by mypyc (make core) or the Python sources
        "core": "compiled" if core.COMPILED else "python",
    }


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def max_rss_mib() -> float:
    """Peak resident set of this process (Linux reports ru_maxrss in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def write_results(name: str, data: dict[str, Any], results_dir: Path | None = None) -> Path:
    out_dir = results_dir or RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    payload = {"benchmark": name, "date": now_utc(), "machine": machine(), **data}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def machine_line(m: dict[str, Any] | None = None) -> str:
    m = m or machine()
    load = m.get("load_average_1_5_15")
    shared = f", load average {load[0]} / {load[1]} / {load[2]} (1/5/15 min)" if load else ""
    cores = m.get("cores_used", 1)  # a benchmark that runs side by side says how many
    used = "one core used" if cores == 1 else f"{cores} cores used, one a process"
    return (f"{m['cpu_model']}, nproc {m['nproc']} ({used}), "
            f"{m['memory_gib']} GiB RAM, Python {m['python']}{shared}"
            f"{', core ' + m['core'] if 'core' in m else ''}")


def update_doc_section(name: str, markdown: str, doc: Path | None = None) -> Path:
    """Replace (or append) the section of PERFORMANCE.md written by benchmark ``name``."""
    doc = doc or PERF_DOC
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = doc.read_text(encoding="utf-8") if doc.exists() else DOC_HEADER
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")
    return doc


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):  # 3 significant digits, or whole numbers past 1,000
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def settle(limit: float = 1.5, wait_s: float = 150.0) -> None:
    """Wait (at most ``wait_s``) for the 1-minute load average to fall under ``limit``:
    work just ended (a benchmark before this one, a bulk load) still counts in it for a
    minute or two, and the docs read the figure to say whether anything else was running."""
    deadline = time.time() + wait_s
    while os.getloadavg()[0] >= limit and time.time() < deadline:
        time.sleep(5)


def create_database(pg_url: str, name: str, *, replace: bool = False) -> str:
    """Create database ``name`` on the server of ``pg_url`` (dropping one of that name
    first if ``replace``); returns its URL. For benchmarks that need their own database."""
    import psycopg  # only the PostgreSQL benchmarks need it

    with psycopg.connect(pg_url, autocommit=True) as conn:
        if replace:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _db = pg_url.rpartition("/")
    return f"{base}/{name}"


def drop_database(pg_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
