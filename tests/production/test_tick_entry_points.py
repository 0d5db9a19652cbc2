"""The entry points of the tick: the Celery task, the early-tick request, run_scheduler."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command

from scheduler_app import tasks
from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Lease

from .conftest import agent, leader, state_of, submit

pytestmark = pytest.mark.django_db

S = JobState


@pytest.fixture
def enqueued(monkeypatch, settings):
    """Pretend a broker is configured; record enqueued ticks instead of sending them."""
    settings.CELERY_BROKER_URL = "memory://"
    cache.delete(tasks.EARLY_TICK_KEY)
    calls: list[int] = []
    monkeypatch.setattr(tasks.scheduler_tick, "apply_async", lambda *a, **k: calls.append(1))
    return calls


def test_without_a_broker_an_early_tick_request_is_a_no_op(settings, monkeypatch):
    settings.CELERY_BROKER_URL = ""
    monkeypatch.setattr(tasks.scheduler_tick, "apply_async", lambda *a, **k: pytest.fail())
    assert tasks.request_early_tick() is False


def test_early_tick_requests_are_debounced_to_one_pending(enqueued):
    assert [tasks.request_early_tick() for _ in range(3)] == [True, False, False]
    assert len(enqueued) == 1
    cache.delete(tasks.EARLY_TICK_KEY)  # what the tick itself does when it starts
    assert tasks.request_early_tick() is True


@pytest.mark.django_db(transaction=True)
def test_a_submit_and_an_exit_ask_for_an_early_tick_but_the_schedulers_rows_do_not(
    cluster, enqueued
):
    job = submit(cluster["vision"], gpus=4)
    assert len(enqueued) == 1  # the Admitted row, after commit
    cache.delete(tasks.EARLY_TICK_KEY)
    leader().step()  # the scheduler's own Placed row asks for nothing
    assert state_of(job) == S.PLACING and len(enqueued) == 1
    agent(job, S.RUNNING, Reason.STARTED, at_s=10)  # a start frees nothing: no request
    agent(job, S.COMPLETED, Reason.COMPLETED, at_s=11)
    assert len(enqueued) == 2


def test_the_celery_task_runs_one_leader_step(cluster, monkeypatch):
    monkeypatch.setattr(tasks, "_loop", None)
    job = submit(cluster["vision"], gpus=4)
    line = tasks.scheduler_tick.apply().get()
    assert "leader=1" in line and "decisions=1" in line
    assert state_of(job) == S.PLACING
    assert "decisions=0" in tasks.scheduler_tick.apply().get()  # idempotent: nothing new


def test_run_scheduler_once_places_logs_one_line_and_releases_the_lease(cluster):
    job = submit(cluster["vision"], gpus=4)
    out = StringIO()
    call_command("run_scheduler", "--once", "--holder", "embedded", verbosity=2, stdout=out)
    line = out.getvalue().strip()
    assert line.startswith("tick_id=1.1 holder=embedded leader=1"), line
    assert "decisions=1" in line and "duration_ms=" in line
    assert state_of(job) == S.PLACING
    assert Lease.objects.get().holder == ""  # released: a standby may lead at once
