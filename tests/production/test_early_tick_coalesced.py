"""The rows of one commit ask for one early tick, not one per row: a batch of jobs (two
rows each) makes one request (with a broker, each request is a round trip to the cache)."""

from __future__ import annotations

import pytest

from scheduler_app import tasks
from scheduler_app.services.jobs import jobs_submit_batch

from .conftest import submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def requests(monkeypatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(tasks, "request_early_tick", lambda: calls.append(1) or True)
    return calls


def test_a_batch_asks_for_one_early_tick(cluster, requests):
    jobs = jobs_submit_batch(tenant=cluster["vision"], owner=None,
                             specs=[{"name": f"j{i}", "gpus": 1} for i in range(60)])
    assert len(jobs) == 60 and len(requests) == 1


def test_each_single_submit_still_asks(cluster, requests):
    submit(cluster["vision"], gpus=1)
    submit(cluster["vision"], gpus=1)
    assert len(requests) == 2
