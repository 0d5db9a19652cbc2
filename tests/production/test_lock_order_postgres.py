"""Lock order on PostgreSQL: every writer takes the log's append lock before its row locks.

The leader's persistence holds the append lock and then locks the job, node and tenant
rows its decisions touch. A writer that locked one of those rows first and then waited
for the append lock would deadlock with it (PostgreSQL would abort one of the two after
``deadlock_timeout``). Each test holds the append lock the way a tick does, lets a
service start and wait, then writes a placement touching that service's row: both must
commit, one after the other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from scheduler_app.core.states import JobState, Reason
from scheduler_app.models import Node, Tenant
from scheduler_app.services import job_cancel, job_submit
from scheduler_app.services.agents import agent_register
from scheduler_app.services.cluster import node_drain, tenant_set_quota
from scheduler_app.services.transitions import Move, append_lock, apply_moves_locked
from tests.foundation.factories import T0, NodeFactory, TenantFactory, job_in_state
from tests.foundation.test_replay import replay_verify

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def waiting_for_the_append_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                       "AND NOT granted")
        return cursor.fetchone()[0]


def run(call: Callable[[], object], results: dict[str, object], name: str) -> None:
    try:
        results[name] = call()
    except Exception as error:  # noqa: BLE001 - the outcome is what the test inspects
        results[name] = error
    finally:
        connection.close()  # each thread has its own connection


@pytest.fixture
def placing() -> dict:
    """A queued job of team "vision" that the tick places on node n0."""
    tenant = TenantFactory(name="vision", guaranteed_gpus=8, borrow_limit_gpus=0)
    node = NodeFactory(name="n0", gpu_count=8)
    job = job_in_state(JobState.QUEUED, tenant=tenant, node=node)
    return {"job": job, "node": node, "tenant": tenant}


SERVICES: dict[str, Callable[[dict], object]] = {
    "agent or user on the job": lambda p: job_cancel(job_id=p["job"].pk, at=T0),
    "operator draining the node": lambda p: node_drain(node=p["node"], actor_name="ops", at=T0),
    "operator setting the quota": lambda p: tenant_set_quota(
        tenant=p["tenant"], guaranteed_gpus=8, borrow_limit_gpus=0, actor_name="ops", at=T0
    ),
    # one query string: the lock, then the job and its rows (transitions.admit_new_job)
    "pipeline submitting a job": lambda p: job_submit(
        tenant=p["tenant"], name="late", gpus=1, idempotency_key="late", at=T0,
    ),
    "agent registering the node": lambda p: agent_register(
        name="n0", pod=p["node"].pod.name, gpus=8, gpu_type=p["node"].gpu_type,
        rail=p["node"].rail, at=T0,
    ),
}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_service_waiting_on_a_tick_holds_no_row_the_tick_needs(placing, service):
    results: dict[str, object] = {}
    tick_holds_lock = threading.Event()

    def tick() -> object:
        with transaction.atomic(durable=True), append_lock():
            tick_holds_lock.set()
            deadline = time.monotonic() + 20
            while not waiting_for_the_append_lock():  # the service is queued behind us
                assert time.monotonic() < deadline, "the service never waited"
                time.sleep(0.02)
            return apply_moves_locked([
                Move(job_id=placing["job"].pk, from_state=JobState.QUEUED,
                     to_state=JobState.PLACING, reason=Reason.PLACED, at=T0,
                     alloc={"n0": [0, 1, 2, 3]}),
            ], actor="scheduler", actor_name="leader", tick_id="1.1")

    ticker = threading.Thread(target=run, args=(tick, results, "tick"))
    ticker.start()
    assert tick_holds_lock.wait(20)
    other = threading.Thread(
        target=run, args=(lambda: SERVICES[service](placing), results, "service")
    )
    other.start()
    ticker.join(60)
    other.join(60)
    assert not isinstance(results["tick"], Exception), results
    assert not isinstance(results["service"], Exception), results
    # the placement committed first, then the service (a cancel gives the GPUs back)
    free = 8 if service == "agent or user on the job" else 4
    assert Node.objects.get(name="n0").free_gpus == free
    assert Tenant.objects.get(name="vision").held_gpus == 8 - free
    ok, output = replay_verify()
    assert ok, output
