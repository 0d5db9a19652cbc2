"""The "What if" page with a broker: the run goes to a real Celery worker on Redis that
consumes the what-if queue, and the worker records its answer in the page's table.

The worker is a subprocess on the test database (PostgreSQL), on our database number of
the shared Redis (procs.SHARED_REDIS_DB) and a queue of this test's own.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.models import WhatIfRun
from scheduler_app.celery import app
from scheduler_app.models import Transition
from tests.sim.whatif_seed import seed

from .procs import CELERY, SHARED_REDIS_DB, poll, shared_redis_base

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_page_sends_the_run_to_a_worker_that_answers_it(procs, settings, monkeypatch):
    seed()
    broker = f"redis://{shared_redis_base()}/{SHARED_REDIS_DB}"
    queue = f"{procs.queue}-whatif"
    worker = procs.start(
        "worker[whatif]",
        [CELERY, "-A", "scheduler_app.celery:app", "worker", "--pool", "solo",
         "--without-mingle", "--without-gossip", "--without-heartbeat", "-Q", queue,
         "-n", f"whatif-{procs.queue}@%h", "--loglevel", "INFO"],
        procs.celery_env(broker, CELERY_WHATIF_QUEUE=queue))
    worker.wait_for(lambda line: "ready." in line, 60)
    # this process publishes as the web process would, to the test's queue
    settings.CELERY_BROKER_URL = broker
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    settings.CELERY_WHATIF_QUEUE = queue
    operator = get_user_model().objects.create_user("op", password="pw-whatif-1",
                                                    is_staff=True)
    client = Client()
    client.force_login(operator)
    logged = Transition.objects.count()

    response = client.post("/operator/whatif/", {"set_quota": "alpha=16", "hours": "6"})

    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert not run.in_thread
    finished = poll(lambda: WhatIfRun.objects.filter(pk=run.pk, finished_at__isnull=False)
                    .first(), 120, every=0.2, what="the worker's answer")
    assert finished.status == "done", (finished.error, worker.tail())
    done = finished
    alpha = next(t for t in done.result["tenants"] if t["name"] == "alpha")
    assert alpha["whatif_mean_wait_s"] < alpha["baseline_mean_wait_s"]
    assert done.result["horizon_s"] == 6 * 3600
    worker.wait_for(lambda line: "dashboard.whatif_run" in line and "succeeded" in line, 10)
    page = client.get(response["Location"]).content.decode()
    assert 'id="whatif-table"' in page and "hx-trigger=" not in page
    assert Transition.objects.count() == logged  # the run wrote nothing of the scheduler's
