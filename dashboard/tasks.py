"""The dashboard's Celery task: a what-if run on a worker (``dashboard.whatif_runs``)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="dashboard.whatif_run", ignore_result=True)
def whatif_run(run_id: str) -> None:
    from .whatif_runs import execute

    execute(run_id)
