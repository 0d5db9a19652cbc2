"""Fault injection at the doors around the core: what an operator or an attacker tries.

Each section is a fault of issue 16, tried the way it was found (docs/operations.md,
"Faults at the edges", says what happens in each):

- a broker that is dead, and one that is frozen (SIGSTOP): a private redis-server of the
  test's own, never the shared one;
- admin edits of what the log owns (a node's GPUs and health, a quota, the lease), and a
  row that no longer adds up (the leader leaves it out and schedules the rest);
- malformed input: JSON nested a thousand levels deep, NUL bytes in query parameters
  (PostgreSQL refuses them in text: a DataError, a 500), unknown fields (a typo of
  ``max_runtime_s`` made a job with no time limit), duplicate keys, oversized bodies:
  each a 4xx in the one error shape, nothing written.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connections
from django.forms.models import model_to_dict
from prometheus_client import REGISTRY

from scheduler_app import tasks
from scheduler_app.breaker import CircuitBreaker, cache_breaker
from scheduler_app.core.states import JobState
from scheduler_app.core.types import Actor
from scheduler_app.models import Allocation, Job, Lease, Node, Tenant, Transition
from scheduler_app.services.lease import LEADER_LEASE
from tests.api import conftest as api_fixtures
from tests.api.conftest import job_body
from tests.foundation.test_replay import replay_verify

from .conftest import at, leader, state_of, submit
from .procs import PrivateRedis, assert_consistent, poll

# the API tests' cluster, users and tokens (tests/api/conftest.py), and their clean caches
world = api_fixtures.world
_fresh_throttle_counters = api_fixtures._fresh_throttle_counters

S = JobState

#: What a request may cost when the broker is down or frozen (the issue's bound), over
#: what the same request costs with every server healthy: on a loaded machine a plain
#: submit alone may take longer than this, and the bound is on what the broker adds.
REQUEST_BUDGET_S = 0.2


def budget_s(client: Any, base: int = 100) -> float:
    """REQUEST_BUDGET_S over the slowest of three submits made now with every server
    healthy (the early tick already asked for: they publish nothing)."""
    return REQUEST_BUDGET_S + max(submit_timed(client, base + k) for k in range(3))


# ------------------------------------------------------------------ the broker
def early_ticks(outcome: str) -> int:
    value = REGISTRY.get_sample_value("scheduler_early_tick_requests_total",
                                      {"outcome": outcome})
    return int(value or 0)


@pytest.fixture
def broker(procs, settings, monkeypatch) -> PrivateRedis:
    """A redis-server of this test's own as the broker of this process's early ticks,
    with a breaker of half a second (ten in production) so the test sees it close."""
    redis = procs.private_redis()
    settings.CELERY_BROKER_URL = redis.url
    # the test settings had no broker: Celery ran tasks in this process (eager)
    conf = tasks.scheduler_tick.app.conf
    eager, conf.task_always_eager = conf.task_always_eager, False
    monkeypatch.setattr(tasks, "early_tick_breaker", CircuitBreaker(0.5))
    monkeypatch.setattr(cache_breaker, "cooldown_s", 0.5)
    cache_breaker.record(ok=True)
    cache.delete(tasks.EARLY_TICK_KEY)
    yield redis
    conf.task_always_eager = eager
    cache_breaker.record(ok=True)
    cache.delete(tasks.EARLY_TICK_KEY)


def timed(call: Any, *, limit_s: float = 10.0) -> tuple[float, Any]:
    """(seconds, result) of ``call()``, run in a thread: a request that hangs on a frozen
    broker fails the test after ``limit_s`` instead of hanging it."""
    def run() -> Any:
        try:
            return call()
        finally:
            connections.close_all()  # this thread's own connections (Django's are per thread)

    pool = ThreadPoolExecutor(max_workers=1)
    started = time.monotonic()
    future = pool.submit(run)
    try:
        result = future.result(timeout=limit_s)
    except FutureTimeout:
        pytest.fail(f"the request was still waiting after {limit_s} s")
    finally:
        pool.shutdown(wait=False)
    return time.monotonic() - started, result


def submit_timed(client: Any, i: int) -> float:
    """Seconds one API submit took; the job is committed whatever the broker does."""
    seconds, response = timed(lambda: client.post(
        "/api/v1/jobs/", job_body(name=f"j{i}", gpus=1), format="json"))
    assert response.status_code == 201, response.json()
    assert Job.objects.filter(pk=response.json()["id"], state=S.QUEUED).exists()
    return seconds


def cancel_timed(client: Any, job_id: int) -> float:
    seconds, response = timed(lambda: client.post(f"/api/v1/jobs/{job_id}/cancel/", {},
                                                  format="json"))
    assert response.status_code == 200, response.json()
    return seconds


@pytest.mark.django_db(transaction=True)  # the early tick is asked for after commit
def test_a_dead_broker_costs_a_submit_or_a_cancel_no_time(world, broker):
    client = world.client("researcher")
    submit_timed(client, 0)  # warm: the first publish imports the transport
    assert broker.queued() == 1
    budget = budget_s(client)
    cache.delete(tasks.EARLY_TICK_KEY)  # as if that tick had run: the next submit asks
    broker.stop()
    errors = early_ticks("broker_error")
    took = [submit_timed(client, i) for i in range(1, 6)]
    job = Job.objects.filter(state=S.QUEUED).order_by("-pk").first()
    cache.delete(tasks.EARLY_TICK_KEY)
    took.append(cancel_timed(client, job.pk))
    assert max(took) < budget, took
    # one request found the broker down and opened the breaker; the others skipped it
    assert early_ticks("broker_error") == errors + 1
    assert early_ticks("breaker_open") >= 1

    broker.start()
    time.sleep(0.6)  # the breaker's cooldown: the next request tries the broker again
    cache.delete(tasks.EARLY_TICK_KEY)
    assert submit_timed(client, 9) < budget
    assert broker.queued() == 1  # the fresh server holds the tick asked for


@pytest.mark.django_db(transaction=True)
def test_a_frozen_broker_costs_a_submit_at_most_its_timeout(world, broker):
    client = world.client("researcher")
    submit_timed(client, 0)
    budget = budget_s(client)
    cache.delete(tasks.EARLY_TICK_KEY)
    broker.freeze()  # accepts connections, answers nothing
    try:
        errors = early_ticks("broker_error")
        took = [submit_timed(client, i) for i in range(1, 6)]
        assert max(took) < budget, took
        assert early_ticks("broker_error") == errors + 1
        time.sleep(0.6)  # half open: one request tries again, and pays the timeout only
        cache.delete(tasks.EARLY_TICK_KEY)
        assert submit_timed(client, 7) < budget
        assert early_ticks("broker_error") == errors + 2
    finally:
        broker.thaw()


def test_the_breaker_skips_calls_for_a_cooldown_after_a_failure():
    now = [0.0]
    breaker = CircuitBreaker(10, clock=lambda: now[0])
    assert breaker.allow() and breaker.allow()  # closed
    breaker.record(ok=False)
    assert not breaker.allow() and breaker.is_open
    now[0] = 10.0
    assert breaker.allow()  # the cooldown is over: try again
    breaker.record(ok=False)
    now[0] = 15.0
    assert not breaker.allow()  # open again for a whole cooldown
    now[0] = 20.0
    assert breaker.allow()
    breaker.record(ok=True)
    assert breaker.allow() and not breaker.is_open


@pytest.mark.django_db(transaction=True)
def test_a_frozen_redis_that_is_also_the_cache_costs_a_request_at_most_its_timeout(
    world, broker, settings
):
    """docker/compose.yaml's deployment: one Redis for the broker and the cache (the
    API's throttles, the early-tick debounce), the cache with 100 ms timeouts. Frozen, it
    hung every request at the throttle; now the first request pays one timeout and
    the others skip the cache and the broker for the breaker's cooldown."""
    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": broker.url.replace("/0", "/1"),
        "OPTIONS": {"socket_timeout": 0.1, "socket_connect_timeout": 0.1},
    }}
    client = world.client("researcher")
    submit_timed(client, 0)
    budget = budget_s(client)
    broker.freeze()
    try:
        took = [submit_timed(client, i) for i in range(1, 6)]
        assert max(took) < budget, took
        assert cache_breaker.is_open
    finally:
        broker.thaw()
    time.sleep(0.6)
    cache.delete(tasks.EARLY_TICK_KEY)
    assert submit_timed(client, 9) < budget
    assert not cache_breaker.is_open  # closed again by the first call that worked


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_jobs_submitted_while_the_broker_is_dead_or_frozen_are_placed_once_it_returns(
    world, broker, procs
):
    """The worker and beat on the private broker, the web's submits in this process."""
    worker = procs.worker(broker.url, SCHEDULER_LEASE_TTL_S="3")
    procs.beat(broker.url, interval_s=1)
    client = world.client("researcher")
    submit_timed(client, 0)
    poll(lambda: Job.objects.filter(state=S.PLACING).exists(), 60, every=0.2,
         what="a first tick through the broker")
    budget = budget_s(client)
    broker.stop()
    took = [submit_timed(client, i) for i in range(1, 4)]
    broker.start()
    broker.freeze()
    try:
        took += [submit_timed(client, i) for i in range(4, 7)]
    finally:
        broker.thaw()
    assert max(took) < budget, took
    # the first, the three of the budget's measure and the six submitted meanwhile
    poll(lambda: Job.objects.filter(state=S.PLACING).count() == 10, 60, every=0.2,
         what="every job placed once the broker is back")
    worker.stop()
    assert_consistent()


# ------------------------------------------------------------------ admin edits
def admin_post(client: Any, url: str, data: dict[str, Any]) -> Any:
    return client.post(url, {k: "" if v is None else v for k, v in data.items()})


@pytest.mark.django_db
def test_the_admin_cannot_edit_what_the_log_owns(admin_client, cluster):
    """What an operator tried: a node's GPUs and health, a quota, the lease, each saved
    through its admin change form. Each is refused; the log and the tables still agree."""
    leader().step(now=at(0))  # a lease row to edit
    node = cluster["nodes"][0]
    edits = {
        f"/admin/scheduler_app/node/{node.pk}/change/":
            {**model_to_dict(node), "gpu_count": 2, "free_gpus": 2, "health": "down"},
        f"/admin/scheduler_app/tenant/{cluster['vision'].pk}/change/":
            {**model_to_dict(cluster["vision"]), "guaranteed_gpus": 999,
             "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0},
        f"/admin/scheduler_app/lease/{Lease.objects.get().pk}/change/":
            {"name": LEADER_LEASE, "holder": "x", "expires_at_0": "2099-01-01",
             "expires_at_1": "00:00:00"},
    }
    for url, data in edits.items():
        assert admin_client.get(url).status_code == 200, url  # shown, read-only
        assert admin_post(admin_client, url, data).status_code == 403, url
    for model in ("node", "pod", "lease", "job", "allocation"):
        assert admin_client.get(f"/admin/scheduler_app/{model}/add/").status_code == 403
    node.refresh_from_db()
    assert (node.gpu_count, node.health) == (8, "healthy")
    assert Tenant.objects.get(name="vision").guaranteed_gpus == 16
    assert Lease.objects.get().holder == "leader-a"
    ok, output = replay_verify()
    assert ok, output


def admin_action(client: Any, model: str, action: str, pks: list[int]) -> Any:
    return client.post(f"/admin/scheduler_app/{model}/",
                       {"action": action, "_selected_action": pks}, follow=True)


@pytest.mark.django_db(transaction=True)
def test_node_health_changes_in_the_admin_are_rows_of_the_log(admin_client, cluster):
    node = cluster["nodes"][0]
    for action, health in (("drain", "draining"), ("undrain", "healthy"),
                           ("mark_down", "down"), ("mark_up", "healthy")):
        response = admin_action(admin_client, "node", action, [node.pk])
        assert response.status_code == 200
        assert state_of_node(node) == health, action
    refused = admin_action(admin_client, "node", "undrain", [node.pk])  # healthy already
    assert "cannot undrain" in refused.content.decode()
    rows = Transition.objects.filter(kind="node", node=node).order_by("id")
    assert [r.detail["action"] for r in rows] == ["drain", "undrain", "down", "up"]
    assert {r.actor for r in rows} == {Actor.OPERATOR} and rows[0].actor_name == "admin"
    ok, output = replay_verify()
    assert ok, output


def state_of_node(node: Node) -> str:
    node.refresh_from_db()
    return node.health


@pytest.mark.django_db(transaction=True)
def test_a_quota_changed_in_the_admin_goes_through_the_quota_service(admin_client, cluster):
    vision = cluster["vision"]
    url = f"/admin/scheduler_app/tenant/{vision.pk}/quota/"
    assert admin_client.get(url).status_code == 200
    refused = admin_client.post(url, {"guaranteed_gpus": -1, "borrow_limit_gpus": 0})
    assert refused.status_code == 400
    assert not Transition.objects.filter(kind="tenant", detail__action="set_quota").exists()
    too_many = admin_client.post(url, {"guaranteed_gpus": 100_000, "borrow_limit_gpus": 0})
    assert too_many.status_code == 400  # the guarantees must fit the cluster's 32 GPUs
    assert "The guarantees would add up to 100,016 GPUs; the cluster has 32" in (
        too_many.content.decode())
    assert not Transition.objects.filter(kind="tenant", detail__action="set_quota").exists()
    response = admin_client.post(url, {"guaranteed_gpus": 8, "borrow_limit_gpus": 4})
    assert response.status_code == 302
    row = Transition.objects.get(kind="tenant", detail__action="set_quota")
    assert row.detail["after"] == {"guaranteed_gpus": 8, "borrow_limit_gpus": 4}
    assert row.actor_name == "admin"
    created = admin_client.post("/admin/scheduler_app/tenant/add/",
                                {"name": "audio", "guaranteed_gpus": 0, "borrow_limit_gpus": 8})
    assert created.status_code == 302
    assert Transition.objects.filter(kind="tenant", tenant__name="audio",
                                     detail__action="register").exists()
    ok, output = replay_verify()
    assert ok, output


@pytest.mark.django_db(transaction=True)
def test_a_lease_stuck_until_2099_keeps_no_scheduler_on_standby(cluster, caplog):
    """The lease edited by hand (holder x, expiry 2099): a scheduler takes it over at its
    next step, and logs it."""
    leader("leader-a").step(now=at(0))
    Lease.objects.update(holder="x", expires_at=datetime(2099, 1, 1, tzinfo=UTC))
    standby = leader("leader-b")
    job = submit(cluster["vision"], gpus=8, at_s=1)
    with caplog.at_level(logging.WARNING, logger="scheduler_app.leader"):
        report = standby.step(now=at(2))
    assert report.leader and not report.error, report
    assert state_of(job) == S.PLACING
    assert "further ahead than any holder" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_lease_release_frees_the_lease_for_the_next_tick_and_is_logged(cluster, caplog):
    holder = leader("leader-a")
    assert holder.step(now=at(0)).leader
    token = Lease.objects.get().fencing_token
    out = StringIO()
    with caplog.at_level(logging.WARNING, logger="scheduler_app.leader"):
        call_command("lease", "--release", "--by", "ops-alice", "--why", "stuck", stdout=out)
    assert "released lease scheduler-leader (was held by leader-a" in out.getvalue()
    assert "released by ops-alice" in caplog.text and "stuck" in caplog.text
    taker = leader("leader-b")
    report = taker.step(now=at(1))  # at once, not after the lease's 15 s
    assert report.leader and report.token == token + 1
    assert not holder.step(now=at(2)).leader  # the old holder stands by
    out = StringIO()
    call_command("lease", stdout=out)
    assert "held by leader-b" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_lease_is_released_from_the_admin_too(admin_client, cluster):
    leader("leader-a").step(now=at(0))
    admin_action(admin_client, "lease", "release", [Lease.objects.get().pk])
    lease = Lease.objects.get()
    assert (lease.holder, lease.expires_at) == ("", None)


# ------------------------------------------------------------------ a bad row
@pytest.mark.django_db(transaction=True)
def test_a_node_cut_below_its_jobs_gpus_is_drained_and_the_rest_keeps_scheduling(cluster):
    """``gpu_count`` cut to 2 under a job holding GPUs 0-7 there (as the admin allowed):
    every build failed (``ValueError: node n0: no GPU 2 (it has 2)``), so every tick."""
    loop = leader()
    big = submit(cluster["vision"], gpus=8, at_s=0)
    loop.step(now=at(1))
    (node_name,) = Allocation.objects.filter(job=big, end__isnull=True).values_list(
        "node__name", flat=True)
    Node.objects.filter(name=node_name).update(gpu_count=2, free_gpus=0)
    loop.drop()  # the next step rebuilds from the database, as a restarted leader does
    report = loop.step(now=at(2))
    assert not report.error and report.rebuilt and report.quarantined == 2, report
    assert "quarantined=2" in report.line()
    node = Node.objects.get(name=node_name)
    assert node.health == "draining"
    row = Transition.objects.filter(kind="node", node=node).latest("id")
    assert row.actor == Actor.SCHEDULER and row.detail["action"] == "drain"
    assert "holds GPU 2, 3, 4, 5, 6, 7 on node" in row.detail["why"]
    assert f"job {big.pk}" in loop.quarantined and f"node {node_name}" in loop.quarantined
    assert state_of(big) == S.PLACING  # left as it is: the operator decides
    others = [submit(cluster["nlp"], gpus=4, at_s=3) for _ in range(2)]
    for t in (4, 5):
        assert not loop.step(now=at(t)).error
    for job in others:
        assert state_of(job) == S.PLACING
        assert not Allocation.objects.filter(job=job, node=node).exists()
    # the same node undrained unrepaired: the leader rebuilds, finds it bad, drains it again
    from scheduler_app.services.cluster import node_undrain

    node_undrain(node=node, actor_name="ops", at=at(6))
    report = loop.step(now=at(7))
    assert report.rebuilt and not report.error
    assert Node.objects.get(name=node_name).health == "draining"


@pytest.mark.django_db(transaction=True)
def test_a_holding_job_without_its_allocation_is_left_out_and_the_rest_scheduled(cluster):
    """Its allocation closed behind the log's back: the build refused (NeedRebuild) at
    every tick; now the job is left out, logged, and the queue moves."""
    loop = leader()
    stuck = submit(cluster["vision"], gpus=8, at_s=0)
    loop.step(now=at(1))
    Allocation.objects.filter(job=stuck).update(end=at(1))
    loop.drop()
    waiting = submit(cluster["nlp"], gpus=8, at_s=2)
    report = loop.step(now=at(3))
    assert not report.error, report
    assert loop.quarantined[f"job {stuck.pk}"] == "it is PLACING without an open allocation"
    # the node it held: its free GPUs (none) no longer add up; the queue moves elsewhere
    (node,) = [k for k in loop.quarantined if k.startswith("node ")]
    assert Node.objects.get(name=node.split()[1]).health == "draining"
    assert state_of(waiting) == S.PLACING


def test_the_build_screen_names_a_gpu_given_twice_and_a_node_without_gpus():
    from scheduler_app.selectors.leader import SPEC_COLUMNS
    from scheduler_app.services.leader import screen_build

    nodes = [("a", "p", 8, "H100", 0, "healthy", 6), ("b", "p", 0, "H100", 0, "healthy", 0),
             ("c", "p", 8, "H100", 0, "healthy", 8)]
    spec = (None,) * (len(SPEC_COLUMNS) - 1)  # the columns screen_build does not read
    jobs = [(1, *spec, "RUNNING"), (2, *spec, "RUNNING"), (3, *spec, "QUEUED")]
    allocs = {1: {"a": (0, 1)}, 2: {"a": (1, 2)}, 3: {"c": (5,)}}
    bad_nodes, bad_jobs = screen_build(nodes, jobs, allocs)
    assert bad_jobs == {2: "job 2 holds GPU 1 on node a, which another job holds already"}
    assert bad_nodes == {"a": bad_jobs[2], "b": "it has 0 GPUs"}
    # a queued job's allocation is not held; a node whose free count is off is left out
    nodes[2] = ("c", "p", 8, "H100", 0, "healthy", 7)
    assert screen_build(nodes, jobs, allocs)[0]["c"] == (
        "the tables give it 7 free GPUs, but of its 8 GPUs its jobs hold 0")


# ------------------------------------------------------------------ malformed input
def errors_of(response: Any) -> list[dict[str, Any]]:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    assert set(body) == {"errors"} and body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "code", "message"}, error
    return body["errors"]


def raw_post(client: Any, url: str, body: str | bytes, **extra: Any) -> Any:
    client.raise_request_exception = False  # a 500 is an answer to assert on, not a crash
    return client.generic("POST", url, body, content_type="application/json", **extra)


NESTED = {
    "a value 1,000 levels deep": '{"tenant": "vision", "name": "x", "gpus": 1, "command": '
                                 + "[" * 1000 + "]" * 1000 + "}",
    "100,000 open brackets": "[" * 100_000,
    "objects 2,000 deep": '{"a":' * 2000 + "1" + "}" * 2000,
}


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/api/v1/jobs/batch/"])
@pytest.mark.parametrize("body", list(NESTED.values()), ids=list(NESTED))
def test_deeply_nested_json_is_a_400_not_a_recursion_error(world, url, body):
    response = raw_post(world.client("researcher"), url, body)
    assert response.status_code == 400
    assert errors_of(response)[0]["code"] == "parse_error"
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("url", [
    "/api/v1/jobs/?tenant=vi%00sion",
    "/api/v1/jobs/?owner=%00",
    "/api/v1/jobs/?state=QUEUED&tenant=x%00",
    "/api/v1/nodes/?gpu_type=H%00100",
    "/api/v1/cluster/transitions/?tenant=%00",
    "/api/v1/tenants/?x%00=1",
])
def test_a_nul_byte_in_an_api_query_is_a_400_naming_the_parameter(world, url):
    client = world.client("lead")
    client.raise_request_exception = False
    response = client.get(url)
    assert response.status_code == 400
    (error,) = errors_of(response)
    assert error["code"] == "null_characters_not_allowed"
    assert error["field"] in url


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/jobs/?team=vi%00sion", "/jobs/new/?team=%00",
                                 "/teams/?x=%00"])
def test_a_nul_byte_in_a_dashboard_query_is_the_400_page(world, client, url):
    client.force_login(world.users["lead"])
    client.raise_request_exception = False
    response = client.get(url)
    assert response.status_code == 400
    assert b"Null characters are not allowed." in response.content


def single(**extra: Any) -> dict[str, Any]:
    return {**job_body(gpus=1), **extra}


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "body", "field", "suggestion"), [
    ("/api/v1/jobs/", single(max_runtime=60), "max_runtime", "did you mean max_runtime_s?"),
    ("/api/v1/jobs/", single(gpu=8), "gpu", "did you mean gpus?"),
    ("/api/v1/jobs/", single(zzz=1), "zzz", "the fields are checkpoint_interval_s, "),
    ("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": [
        {"name": "a", "gpus": 1}, {"name": "b", "gpus": 1, "max_runtime": 60}]},
     "jobs[1].max_runtime", "did you mean max_runtime_s?"),
    ("/api/v1/jobs/batch/", {"tenant": "vision", "job": [{"name": "a", "gpus": 1}],
                             "jobs": [{"name": "a", "gpus": 1}]},
     "job", "did you mean jobs?"),
])
def test_an_unknown_field_is_refused_with_the_close_match(world, url, body, field, suggestion):
    response = world.client("researcher").post(url, body, format="json")
    assert response.status_code == 400
    errors = errors_of(response)
    assert [e["field"] for e in errors] == [field], errors
    assert errors[0]["code"] == "unknown_field" and suggestion in errors[0]["message"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_an_unknown_field_is_reported_with_the_others(world):
    response = world.client("researcher").post(
        "/api/v1/jobs/", single(gpus="8", max_runtime=60), format="json")
    assert response.status_code == 400
    assert {e["field"] for e in errors_of(response)} == {"gpus", "max_runtime"}


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "body", "key"), [
    ("/api/v1/jobs/", '{"tenant": "vision", "name": "a", "gpus": 1, "gpus": 8}', "gpus"),
    # the path of the object that has it (it said "max_runtime_s": found 2026-12-07)
    ("/api/v1/jobs/batch/", '{"tenant": "vision", "jobs": [{"name": "a", "gpus": 1}, '
                            '{"name": "a", "gpus": 1, "max_runtime_s": 60, '
                            '"max_runtime_s": null}]}', "jobs[1].max_runtime_s"),
    ("/api/v1/jobs/batch/", '{"tenant": "vision", "tenant": "nlp", "jobs": []}', "tenant"),
    ("/api/v1/jobs/", '{"tenant": "vision", "name": "a", "gpus": 1, "depends_on": '
                      '[{"job": 1}, {"job": 2, "when": "ok", "when": "any"}]}',
     "depends_on[1].when"),
])
def test_a_key_given_twice_is_refused(world, url, body, key):
    response = raw_post(world.client("researcher"), url, body)
    assert response.status_code == 400
    (error,) = errors_of(response)
    assert (error["field"], error["code"]) == (key, "duplicate_key")
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_number_of_thousands_of_digits_is_refused_in_the_clients_words(world):
    response = raw_post(world.client("researcher"), "/api/v1/jobs/",
                        '{"tenant": "vision", "name": "a", "gpus": 1' + "0" * 5000 + "}")
    assert response.status_code == 400
    (error,) = errors_of(response)
    assert "more than 4,300 digits" in error["message"]
    assert "sys.set_int_max_str_digits" not in error["message"]


def largest_spec(escaped: bool = False) -> dict[str, Any]:
    """A job spec with every text field at its longest (``escaped``: the command written
    as JSON ``\\uXXXX`` escapes, six bytes a character)."""
    from scheduler_app.api.jobs import JobSpecIn

    fields = JobSpecIn().fields
    return {"name": "n" * fields["name"].max_length,
            "command": ("\u00e9" if escaped else "c") * fields["command"].max_length,
            "gpus": 1, "gpu_type": "", "max_runtime_s": 366 * 86400}


def test_the_largest_batch_the_schema_allows_fits_the_limit():
    from django.conf import settings

    from scheduler_app.api.jobs import MAX_BATCH, BatchIn
    from scheduler_app.api.limits import largest_json
    from scheduler_app.guard import API_BODY_LIMIT, BATCH_PATH, body_limit_for

    largest = largest_json(BatchIn())
    assert largest >= MAX_BATCH * 100_000  # a thousand commands of 100,000 characters
    assert body_limit_for(BATCH_PATH) >= largest
    assert body_limit_for(BATCH_PATH) < 2 * largest  # and not much more
    assert body_limit_for(BATCH_PATH) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # the backstop
    body = json.dumps({"tenant": "t" * 64, **single(**largest_spec(escaped=True))})
    assert len(body.replace("\\\\", "\\")) <= API_BODY_LIMIT


@pytest.mark.django_db
def test_a_batch_larger_than_djangos_default_is_accepted(world):
    """3 MB: Django's 2.5 MB default answered it with its HTML 400 page."""
    jobs = [{"name": f"j{i}", "gpus": 1, "command": "x" * 3000} for i in range(1000)]
    body = json.dumps({"tenant": "vision", "jobs": jobs})
    assert len(body) > 2_621_440
    response = raw_post(world.client("researcher"), "/api/v1/jobs/batch/", body)
    assert response.status_code == 201, response.content[:300]
    assert Job.objects.count() == 1000


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "limit"), [("/api/v1/jobs/batch/", "batch"),
                                            ("/api/v1/jobs/", 1024 * 1024)])
def test_an_oversized_body_gets_the_json_error_shape(world, url, limit):
    from scheduler_app.guard import batch_body_limit

    size = (batch_body_limit() if limit == "batch" else limit) + 1
    # the guard reads Content-Length only: the body itself need not be that large
    response = raw_post(world.client("researcher"), url, "{}", CONTENT_LENGTH=str(size))
    assert response.status_code == 413
    (error,) = errors_of(response)
    assert error["code"] == "request_too_large" and f"{size:,} bytes" in error["message"]


@pytest.mark.django_db
def test_an_oversized_form_gets_the_400_page(world, client):
    client.force_login(world.users["lead"])
    response = client.generic("POST", "/jobs/new/", "a=1", CONTENT_LENGTH=str(3 * 2**20),
                              content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413
    assert b"this endpoint takes at most" in response.content
