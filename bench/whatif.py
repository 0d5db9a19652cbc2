"""``manage.py whatif`` on a live state of 100,000 jobs on PostgreSQL, 24 h horizon.

    python -m bench.whatif [--jobs 100000] [--transitions 800000] [--hours 24] [--workers 1|2]
                           [--pg-url postgres://postgres@127.0.0.1:5432/postgres]
                           [--keep] [--reuse DATABASE] [--no-doc]

Creates a database of its own (``sched_bench_whatif_<pid>``), migrates it and loads the
history generator of ``bench.persistence`` with every job alive at the end
(``--live-share 1``: 2,048 nodes of 8 GPUs, 30 teams, the cluster about 85% busy and the
rest of the jobs queued), then times the command as an operator runs it, in this process
(``call_command``): the snapshot (one read-only transaction), both scenarios, the two
runs in the memory engine, the table and ``--json``. The change is a raised guarantee
and a drained node, so the two runs differ. Drops the database (``--keep`` keeps it).
Target (issue 17): at most 60 s, snapshot included.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import (
    create_database,
    drop_database,
    log,
    machine,
    machine_line,
    now_utc,
    settle,
    table,
    update_doc_section,
    write_results,
)

NAME = "whatif"
TARGET_S = 60.0
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
CHANGES = ("--set-quota", "team00=550:600", "--drain", "n0000")


def measure(hours: float, workers: int | None = None) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Count

    from scheduler_app.models import Job

    states = dict(Job.objects.values("state").annotate(n=Count("id"))
                  .values_list("state", "n"))
    connection.close()  # the command opens its own, as a fresh process would
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "whatif.json"
        stdout = io.StringIO()
        started = time.perf_counter()
        more = () if workers is None else ("--workers", str(workers))
        call_command("whatif", *CHANGES, *more, "--hours", str(hours), "--json", str(out),
                     "--quiet", stdout=stdout)
        wall = time.perf_counter() - started
        answer = json.loads(out.read_text())
    moved = sum(1 for j in answer["jobs"] if j["moved_s"])
    return {"wall_s": round(wall, 2), "parts_s": answer["timings_s"], "states": states,
            "queued_jobs_compared": len(answer["jobs"]), "jobs_moved": moved,
            "workers": answer.get("workers", 1),
            "table_lines": stdout.getvalue().count("\n")}


def markdown(res: dict[str, Any]) -> str:
    """The section: this run and every other ``whatif*`` results file (the sizes and
    horizons measured so far), one row each."""
    from bench._common import RESULTS_DIR

    runs = {res["name"]: res}
    for path in sorted(RESULTS_DIR.glob("whatif*.json")):
        other = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(other.get("benchmark", path.stem), other)
    rows = []
    for r in sorted(runs.values(), key=lambda r: (r["data"]["jobs"], r["hours"])):
        m, parts = r["measured"], r["measured"]["parts_s"]
        verdict = ("meets" if m["wall_s"] <= TARGET_S else "misses") if r["hours"] == 24 \
            and r["data"]["jobs"] == 100_000 else ""
        rows.append([f"{r['data']['jobs']:,} ({m['states'].get('QUEUED', 0):,} queued, "
                     f"{m['states'].get('RUNNING', 0):,} running)", f"{r['hours']:g} h",
                     m["wall_s"], parts["snapshot"], parts["build"], parts["runs"],
                     f"{m['jobs_moved']:,} of {m['queued_jobs_compared']:,}",
                     f"{TARGET_S:.0f} s ({verdict})" if verdict else "-",
                     f"`{r['command']}` ({r['date']})"])
    return "\n".join([
        "## What if on the live state",
        "",
        f"`manage.py whatif {' '.join(CHANGES)} --hours H --json FILE` on PostgreSQL "
        f"{res['postgres']}, timed as a whole in a process with Django set up; the parts "
        "are the command's own timings (`timings_s` in its JSON): the snapshot (one "
        "read-only transaction), building both scenarios, and the two runs in the memory "
        "engine. The live state is `bench.persistence`'s generator with every job alive "
        "(2,048 nodes of 8 GPUs, 30 teams of 546 + 546 GPUs, jobs of 1 to 64 GPUs, every "
        "job declaring a 24 h limit). Target (issue 17): 100,000 jobs, 24 h, at most "
        f"{TARGET_S:.0f} s, snapshot included.",
        "",
        table(["live jobs", "horizon", "whatif wall (s)", "snapshot (s)", "scenarios (s)",
               "two runs (s)", "queued jobs whose start moves", "target", "command"], rows),
        "",
        machine_line(res["machine"]),
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--transitions", type=int, default=800_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", metavar="DATABASE")
    parser.add_argument("--no-doc", action="store_true")
    parser.add_argument("--name", default=NAME)
    parser.add_argument("--workers", type=int, choices=(1, 2), default=None,
                        help="the command's --workers (default: its own, 2 on 2 cores)")
    args = parser.parse_args(argv)

    settle()
    name = args.reuse or f"sched_bench_whatif_{os.getpid()}"
    url = (args.pg_url.rpartition("/")[0] + f"/{name}" if args.reuse
           else create_database(args.pg_url, name))
    log(f"{NAME}: database {name}")
    os.environ.update(DATABASE_URL=url, DEBUG="false", CELERY_BROKER_URL="",
                      DJANGO_SETTINGS_MODULE="scheduler_app.settings", CONN_MAX_AGE="0")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from bench.persistence import History, count_data, load
        from scheduler_app.services.transitions import now_s

        call_command("migrate", verbosity=0)
        t0 = time.perf_counter()
        if args.reuse:
            data = count_data()
        else:
            log(f"{NAME}: generating {args.jobs:,} live jobs...")
            history = History(jobs=args.jobs, transitions=args.transitions, end=now_s(),
                              seed=args.seed, live_share=1.0)
            history.generate()
            data = load(history)
            del history
        load_s = time.perf_counter() - t0
        log(f"{NAME}: loaded {data} in {load_s:.0f} s")
        settle()
        measured = measure(args.hours, args.workers)
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            postgres = cursor.fetchone()[0].split()[0]
        connection.close()
    finally:
        if args.keep or args.reuse:
            log(f"{NAME}: database {name} kept")
        else:
            drop_database(args.pg_url, name)
    res = {"date": now_utc(), "machine": machine(), "postgres": postgres, "data": data,
           "load_s": round(load_s, 1), "measured": measured, "target_s": TARGET_S,
           "hours": args.hours, "name": args.name,
           "command": " ".join(["python -m bench.whatif",
                                *(argv if argv is not None else sys.argv[1:])])}
    log(f"{NAME}: {json.dumps(measured)}")
    if args.reuse:
        return
    path = write_results(args.name, res)
    log(f"{NAME}: -> {path}")
    if not args.no_doc:
        update_doc_section(args.name, markdown(res))


if __name__ == "__main__":
    main()
