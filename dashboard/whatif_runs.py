"""The "What if" page's runs: start one, run it in the background, record its progress.

The run is ``sim.whatif.run_whatif`` on the live snapshot (``selectors.whatif``), the same
as ``manage.py whatif``. It goes to a Celery worker when a broker is configured
(``dashboard.tasks.whatif_run``), else to a thread of this process (the embedded mode,
``make demo``: no worker to send it to, and an eager task would hold the request for the
whole run). Its state lives in the dashboard's own table (``WhatIfRun``): the runs write
nothing else.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from scheduler_app.selectors.whatif import live_snapshot
from scheduler_app.sim.whatif import (
    Changes,
    GuaranteesPastCluster,
    WhatIfError,
    apply_changes,
    run_whatif,
    snapshot_scenario,
)

from .models import WhatIfRun

log = logging.getLogger("dashboard.whatif")

#: the change flags in the order of ``Changes``' fields (the run builds it positionally)
FLAGS = tuple(f.name for f in dataclasses.fields(Changes))
#: progress is written at most this often (a row update per simulated instant would be
#: thousands of writes a second)
PROGRESS_EVERY_S = 0.5
#: a run of this process's thread with no write for this long, and no thread running it,
#: died with the process that ran it (a restart mid-run). A live run's longest silent
#: stretch is building the two scenarios and validating them in the children: about 25 s
#: at 1,000,000 live jobs (docs/PERFORMANCE.md), so this leaves room for a slower host
LOST_AFTER_S = 120
#: seconds a broker has to take a run sent from the page (to connect, then per command)
PUBLISH_TIMEOUT_S = 2.0
LOST = "the server restarted during the run (no progress for {s} s and no thread runs it)"


def changes_of(changes: dict[str, list[str]]) -> Changes:
    return Changes(*(tuple(changes.get(f, [])) for f in FLAGS))


def problems(changes: dict[str, list[str]], *, hours: float) -> dict[str | None, list[str]]:
    """What the run would refuse in ``changes``, checked on the live state before a run
    starts, so that a typo is said at its box and never becomes a failed run: by flag,
    the run's own words (``sim.whatif.apply_changes``) for each change judged alone (every
    bad one named at once), then, if each passes, for them together (two quotas for one
    team, guarantees past the cluster); None: the snapshot itself. The snapshot keeps only
    the jobs ``--cancel`` names (a what-if of 100,000 jobs is not copied per change). A
    change the scenario contract refuses after all is still the run's error."""
    wanted = changes_of(changes)
    if wanted.empty():
        return {}
    snap = live_snapshot(about=wanted.cancel)
    named = set(wanted.cancel) | {v.partition("_")[0] for v in wanted.cancel if "_" in v}
    snap = dataclasses.replace(snap, jobs=tuple(
        j for j in snap.jobs if j.id in named or (j.array is not None and j.array[0] in named)))
    data = snapshot_scenario(snap, hours)
    out: dict[str | None, list[str]] = {}

    def check(these: Changes, *, alone: bool) -> None:
        try:
            apply_changes(data, these, ended=snap.ended)
        except WhatIfError as exc:
            if alone and isinstance(exc, GuaranteesPastCluster):
                return  # (the guarantees' sum is the quotas' together: alpha=20 and beta=20)
            flag = str(exc).partition(" ")[0].removeprefix("--").replace("-", "_")
            out.setdefault(flag if flag in FLAGS else None, []).append(str(exc))

    for flag in FLAGS:
        for value in getattr(wanted, flag):
            check(Changes(**{flag: (value,)}), alone=True)
    if not out:
        check(wanted, alone=False)
    return out


#: finished runs kept (the newest): older ones are deleted as a new one starts, so that
#: the table does not grow for ever (an answer is ~700 KB with 3,000 queued jobs)
KEEP_RUNS = 100


def start_run(*, changes: dict[str, list[str]], hours: float, user: Any) -> WhatIfRun:
    old = (WhatIfRun.objects.filter(finished_at__isnull=False).order_by("-created_at")
           .values_list("pk", flat=True)[KEEP_RUNS - 1:])
    WhatIfRun.objects.filter(pk__in=list(old)).delete()
    run = WhatIfRun.objects.create(created_by=user if user and user.is_authenticated else None,
                                   changes={f: list(changes.get(f, [])) for f in FLAGS},
                                   hours=hours, heartbeat_at=timezone.now(),
                                   in_thread=not settings.CELERY_BROKER_URL)
    if not run.in_thread:
        _send(run)
    else:
        threading.Thread(target=_in_thread, args=(run.pk,), name=f"whatif-{run.pk}",
                         daemon=True).start()
    return run


def _send(run: WhatIfRun) -> None:
    """The run to a worker, through a connection that gives a broker that is down or
    frozen PUBLISH_TIMEOUT_S (the request waits no longer). One the broker did not take
    is recorded failed, saying so: the request raised a 500 and left the run 'queued'
    for ever, its page polling a progress bar no worker would move (2026-12-07)."""
    from scheduler_app.tasks import bounded_connection

    from .tasks import whatif_run

    try:
        with bounded_connection(PUBLISH_TIMEOUT_S) as broker:
            whatif_run.apply_async((str(run.pk),), retry=False, connection=broker,
                                   queue=settings.CELERY_WHATIF_QUEUE)
    except Exception as exc:  # noqa: BLE001 - any failure to publish: the run is not sent
        log.warning("what-if %s not sent: the broker did not take it (%s)", run.pk, exc)
        _update(run, status=WhatIfRun.Status.FAILED, finished_at=timezone.now(),
                error=f"the broker did not take the run ({exc}); nothing ran. Start it "
                      "again once the broker is back (docs/operations.md, \"A dead "
                      "broker\")")


def _in_thread(run_id: Any) -> None:
    try:
        execute(run_id)
    finally:
        connection.close()  # this thread's own connection


def execute(run_id: Any) -> None:
    """Run the what-if ``run_id`` and record its answer (or its error)."""
    close_old_connections()
    run = WhatIfRun.objects.get(pk=run_id)
    if run.finished:
        return  # a task delivered twice
    _update(run, status=WhatIfRun.Status.RUNNING, stage="snapshot", progress=0.0)
    last = [0.0]

    def progress(fraction: float, stage: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            _update(run, progress=0.05 + 0.95 * fraction, stage=stage)

    changes = changes_of(run.changes)
    try:
        snap = live_snapshot(about=changes.cancel)  # (to say which of them have ended)
        _update(run, progress=0.05, stage="runs")
        answer, _scenario = run_whatif(snap, changes, hours=run.hours, progress=progress)
    except WhatIfError as exc:
        _update(run, status=WhatIfRun.Status.FAILED, error=str(exc),
                finished_at=timezone.now())
        return
    except Exception as exc:  # noqa: BLE001 - the page says it failed; the log says why
        log.exception("what-if %s failed", run_id)
        _update(run, status=WhatIfRun.Status.FAILED, error=f"the run failed: {exc}",
                finished_at=timezone.now())
        return
    _update(run, status=WhatIfRun.Status.DONE, progress=1.0, stage="done",
            result=answer.to_json(), finished_at=timezone.now())


def lost(run: WhatIfRun, *, now: Any = None) -> bool:
    """A run started in a thread of the web process, not finished, silent for
    LOST_AFTER_S, and no thread of this process runs it: the process that ran it is gone
    (the server restarted mid-run), and it would poll as running forever. A worker's run
    is left alone (a run waiting for a worker is not lost)."""
    if run.finished or not run.in_thread:
        return False
    beat = run.heartbeat_at or run.created_at
    if ((now or timezone.now()) - beat).total_seconds() < LOST_AFTER_S:
        return False
    return not any(t.name == f"whatif-{run.pk}" for t in threading.enumerate())


def mark_lost(run: WhatIfRun) -> bool:
    """Mark ``run`` failed if it is :func:`lost` (unless it wrote since it was read)."""
    if not lost(run):
        return False
    fields = {"status": WhatIfRun.Status.FAILED, "error": LOST.format(s=LOST_AFTER_S),
              "finished_at": timezone.now()}
    if not WhatIfRun.objects.filter(pk=run.pk, heartbeat_at=run.heartbeat_at,
                                    status=run.status).update(**fields):
        return False
    for name, value in fields.items():
        setattr(run, name, value)
    return True


def _update(run: WhatIfRun, **fields: Any) -> None:
    fields["heartbeat_at"] = timezone.now()
    for name, value in fields.items():
        setattr(run, name, value)
    WhatIfRun.objects.filter(pk=run.pk).update(**fields)
