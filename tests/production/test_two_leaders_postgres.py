"""Two schedulers ticking at once on PostgreSQL: only the lease holder's decisions land."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from scheduler_app.core.types import Actor
from scheduler_app.models import Node, Transition
from tests.foundation.test_replay import replay_verify

from .conftest import at, leader, submit

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def step_together(loops, now):
    barrier = threading.Barrier(len(loops))
    reports = [None] * len(loops)

    def run(i):
        try:
            barrier.wait()
            reports[i] = loops[i].step(now=now)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(loops))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reports


def test_two_loops_ticking_at_once_only_the_lease_holder_writes(cluster):
    loops = [leader("leader-a"), leader("leader-b")]
    for i in range(6):
        submit(cluster["vision" if i % 2 else "nlp"], gpus=4, at_s=i, max_runtime_s=3600)
    for tick, now_s in enumerate((5, 10, 15)):
        reports = step_together(loops, at(now_s))
        assert all(not r.error for r in reports), reports
        leaders = [r.holder for r in reports if r.leader]
        assert len(leaders) == 1, reports
        if tick == 0:
            winner = leaders[0]
        assert leaders == [winner]  # the holder renews; the standby keeps waiting
        submit(cluster["vision"], gpus=4, at_s=now_s + 1, max_runtime_s=3600)
    writers = set(
        Transition.objects.filter(actor=Actor.SCHEDULER).values_list("actor_name", flat=True)
    )
    assert writers == {winner}
    assert sum(Node.objects.values_list("free_gpus", flat=True)) == 32 - 8 * 4
    ok, output = replay_verify()
    assert ok, output
