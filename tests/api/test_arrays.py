"""Job arrays through the API and the services: one submit makes the tasks (named
``<array_id>_<index>``), they are listed, counted and cancelled together or one by one,
bad input is refused naming the field, the node agent's assignment gives each task its
index, the leader gives the core the array fields; and at most ``max_running`` tasks run at
once."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.core.types import MAX_ARRAY_TASKS
from scheduler_app.models import Allocation, Job, Transition
from scheduler_app.services.errors import Conflict, Invalid
from scheduler_app.services.jobs import array_cancel, array_submit
from scheduler_app.services.leader import LeaderLoop
from scheduler_app.services.transitions import now_s
from tests.foundation.test_replay import replay_verify

from .conftest import World, submit

pytestmark = pytest.mark.django_db



def errors_of(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def array_body(count: int = 4, max_running: int | None = None, **spec: Any) -> dict:
    array: dict[str, Any] = {"count": count}
    if max_running is not None:
        array["max_running"] = max_running
    return {"tenant": spec.pop("tenant", "vision"), "name": spec.pop("name", "sweep"),
            "gpus": spec.pop("gpus", 1), "array": array, **spec}


def post_array(world: World, who: str = "researcher", **kwargs: Any):
    return world.client(who).post("/api/v1/arrays/", array_body(**kwargs), format="json")


def make_array(world: World, who: str = "researcher", **kwargs: Any) -> dict[str, Any]:
    response = post_array(world, who, **kwargs)
    assert response.status_code == 201, response.json()
    return response.json()


def counts() -> tuple[int, int]:
    return Job.objects.count(), Transition.objects.count()


# ---------------------------------------------------------------- submit
def test_one_submit_makes_the_tasks_named_after_the_array(world):
    made = make_array(world, count=5, max_running=2)
    first = made["jobs"][0]["id"]
    assert (made["tenant"], made["array_id"], made["count"]) == ("vision", first, 5)
    assert [j["array_task"] for j in made["jobs"]] == [f"{first}_{k}" for k in range(5)]
    assert {(j["array_id"], j["array_count"], j["array_max_running"], j["name"], j["state"])
            for j in made["jobs"]} == {(first, 5, 2, "sweep", "QUEUED")}
    assert [j["array_index"] for j in made["jobs"]] == list(range(5))
    rows = Job.objects.filter(array_id=first)
    assert rows.count() == 5
    # each task has its own SUBMITTED and QUEUED rows
    for job in rows:
        assert list(job.transitions.values_list("to_state", flat=True)) == ["SUBMITTED",
                                                                             "QUEUED"]


def test_the_tasks_are_listed_together_and_counted_by_state(world):
    made = make_array(world, count=3)
    submit(world)  # not in the array
    make_array(world, count=2)  # another array
    listed = world.client("researcher").get(f"/api/v1/jobs/?array={made['array_id']}").json()
    assert sorted(j["array_task"] for j in listed["results"]) == sorted(
        j["array_task"] for j in made["jobs"])
    detail = world.client("researcher").get(f"/api/v1/arrays/{made['array_id']}/").json()
    assert detail == {"array_id": made["array_id"], "tenant": "vision", "owner": "vision-r1",
                      "name": "sweep", "count": 3, "max_running": None,
                      "states": {"QUEUED": 3}, "depends_on": []}
    # another's array is a 403 and no array a 400, not an empty list (2026-12-07)
    theirs = world.client("other_team").get(f"/api/v1/jobs/?array={made['array_id']}")
    assert theirs.status_code == 403
    none = world.client("researcher").get("/api/v1/jobs/?array=999999")
    assert none.status_code == 400 and none.json()["errors"][0]["field"] == "array"
    assert world.client("researcher").get("/api/v1/jobs/?array=x").status_code == 400


def test_every_task_waits_for_the_arrays_dependencies(world):
    prep = submit(world)["id"]
    made = make_array(world, count=3, depends_on=[{"job": prep, "when": "any"}])
    assert {str(j["depends_on"]) for j in made["jobs"]} == {
        str([{"job": prep, "when": "any"}])}


def test_a_retry_with_the_same_key_returns_the_same_tasks(world):
    client = world.client("researcher")
    first = client.post("/api/v1/arrays/", array_body(count=3), format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep-1")
    assert first.status_code == 201
    again = client.post("/api/v1/arrays/", array_body(count=3), format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep-1")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    other = client.post("/api/v1/arrays/", array_body(count=4), format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep-1")
    assert other.status_code == 409
    # what differs is named (a pipeline author could not tell)
    message = other.json()["errors"][0]["message"]
    assert "3 tasks; array.count differs" in message, message
    assert Job.objects.count() == 3


def test_an_arrays_key_is_no_batchs_key_and_a_batchs_no_arrays(world):
    # the same jobs as a batch run at once, as an array's tasks max_running at a time:
    # a batch sent with an array's key was answered 200 with the tasks (found by trying
    # the product, 2026-12-07); the other way round was already a 409
    client = world.client("researcher")
    body = array_body(count=2, max_running=1)
    made = client.post("/api/v1/arrays/", body, format="json", HTTP_IDEMPOTENCY_KEY="mix")
    assert made.status_code == 201
    spec = {k: v for k, v in body.items() if k not in ("tenant", "array")}
    batch = {"tenant": body["tenant"], "jobs": [spec, spec]}
    again = client.post("/api/v1/jobs/batch/", batch, format="json",
                        HTTP_IDEMPOTENCY_KEY="mix")
    assert again.status_code == 409, again.json()
    error = again.json()["errors"][0]
    assert error["code"] == "idempotency_key_reused" and error["field"] == "idempotency_key"
    assert f"array {made.json()['array_id']}" in error["message"]
    first = client.post("/api/v1/jobs/batch/", batch, format="json", HTTP_IDEMPOTENCY_KEY="mix2")
    assert first.status_code == 201
    assert client.post("/api/v1/arrays/", body, format="json",
                       HTTP_IDEMPOTENCY_KEY="mix2").status_code == 409
    assert Job.objects.count() == 4


def test_an_array_of_ten_thousand_tasks_is_one_submit(world):
    jobs = array_submit(tenant=world.vision, owner=world.users["researcher"], name="big",
                        gpus=1, count=MAX_ARRAY_TASKS, max_running=8)
    assert len(jobs) == MAX_ARRAY_TASKS
    first = jobs[0].pk
    assert Job.objects.filter(array_id=first).count() == MAX_ARRAY_TASKS
    last = Job.objects.get(array_id=first, array_index=MAX_ARRAY_TASKS - 1)
    assert last.array_task == f"{first}_{MAX_ARRAY_TASKS - 1}"
    assert Transition.objects.filter(job__array_id=first).count() == 2 * MAX_ARRAY_TASKS


# ---------------------------------------------------------------- refused
@pytest.mark.parametrize(("array", "field"), [
    ({"count": MAX_ARRAY_TASKS + 1}, "array.count"),
    ({"count": 0}, "array.count"),
    ({"count": 4, "max_running": 0}, "array.max_running"),
    ({"count": 4, "max_runnin": 2}, "array.max_runnin"),
    ({}, "array.count"),
])
def test_bad_array_input_is_refused_naming_the_field(world, array, field):
    before = counts()
    response = world.client("researcher").post(
        "/api/v1/arrays/", {"tenant": "vision", "name": "x", "gpus": 1, "array": array},
        format="json")
    assert response.status_code == 400
    assert set(errors_of(response)) == {field}
    assert counts() == before


def test_a_count_over_the_bound_says_the_bound(world):
    response = post_array(world, count=MAX_ARRAY_TASKS + 1)
    assert errors_of(response)["array.count"] == "An array has 1 to 10,000 tasks."


def test_the_services_refuse_the_same(world):
    with pytest.raises(Invalid) as err:
        array_submit(tenant=world.vision, owner=None, name="x", gpus=1,
                     count=MAX_ARRAY_TASKS + 1)
    assert err.value.field == "array.count"
    with pytest.raises(Invalid) as err:
        array_submit(tenant=world.vision, owner=None, name="x", gpus=1, count=3,
                     max_running=0)
    assert err.value.field == "array.max_running"
    with pytest.raises(Invalid) as err:
        array_submit(tenant=world.vision, owner=None, name="x", gpus=0, count=3)
    assert err.value.field == "gpus"
    assert Job.objects.count() == 0


def test_an_array_that_can_never_run_is_refused_like_a_job(world):
    response = post_array(world, gpus=64)
    assert response.status_code == 400 and set(errors_of(response)) == {"gpus"}


def test_a_batch_item_cannot_be_an_array(world):
    response = world.client("researcher").post("/api/v1/jobs/batch/", {
        "tenant": "vision", "jobs": [{"name": "x", "gpus": 1, "array": {"count": 2}}]},
        format="json")
    assert response.status_code == 400
    assert set(errors_of(response)) == {"jobs[0].array"}


def test_a_single_submit_takes_no_array(world):
    response = world.client("researcher").post("/api/v1/jobs/", {
        "tenant": "vision", "name": "x", "gpus": 1, "array": {"count": 2}}, format="json")
    assert response.status_code == 400 and set(errors_of(response)) == {"array"}
    assert "Unknown field" in errors_of(response)["array"]


# ---------------------------------------------------------------- cancel
def test_one_task_is_cancelled_like_any_job_and_the_rest_together(world):
    made = make_array(world, count=4)
    array_id, tasks = made["array_id"], [j["id"] for j in made["jobs"]]
    client = world.client("researcher")
    one = client.post(f"/api/v1/jobs/{tasks[2]}/cancel/", {}, format="json")
    assert one.status_code == 200 and one.json()["state"] == "CANCELLED"
    rest = client.post(f"/api/v1/arrays/{array_id}/cancel/", {"why": "bad sweep"},
                       format="json")
    assert rest.status_code == 200, rest.json()
    body = rest.json()
    assert (body["array_id"], body["count"]) == (array_id, 3)
    assert [j["id"] for j in body["jobs"]] == [tasks[0], tasks[1], tasks[3]]
    assert set(Job.objects.filter(array_id=array_id).values_list("state", flat=True)) == {
        "CANCELLED"}
    row = Transition.objects.filter(job_id=tasks[0]).last()
    assert (row.reason, row.actor, row.actor_name) == (Reason.CANCELLED, "user", "vision-r1")
    assert row.detail == {"why": "bad sweep", "array": array_id}
    again = client.post(f"/api/v1/arrays/{array_id}/cancel/", {}, format="json")
    assert again.status_code == 409
    ok, output = replay_verify()
    assert ok, output


def test_an_array_is_cancelled_by_whoever_may_cancel_its_tasks(world):
    made = make_array(world, count=2)
    array_id = made["array_id"]
    assert world.client("teammate").post(f"/api/v1/arrays/{array_id}/cancel/", {},
                                         format="json").status_code == 403
    assert world.client("other_team").get(f"/api/v1/arrays/{array_id}/").status_code == 403
    assert world.client("lead").post(f"/api/v1/arrays/{array_id}/cancel/", {},
                                     format="json").status_code == 200


def test_a_job_that_is_not_an_array_or_no_job_is_404(world):
    plain = submit(world)["id"]
    client = world.client("researcher")
    assert client.get(f"/api/v1/arrays/{plain}/").status_code == 404
    assert client.post(f"/api/v1/arrays/{plain}/cancel/", {}, format="json").status_code == 404
    assert client.get("/api/v1/arrays/999999/").status_code == 404
    made = make_array(world, count=2)
    second = made["jobs"][1]["id"]  # a task's own id is not the array's
    assert client.get(f"/api/v1/arrays/{second}/").status_code == 404


def test_array_cancel_is_all_or_nothing_and_refuses_a_finished_array(world):
    jobs = array_submit(tenant=world.vision, owner=None, name="x", gpus=1, count=3)
    rows = array_cancel(array_id=jobs[0].pk, actor_name="ops", why="stop")
    assert [r.job_id for r in rows] == [j.pk for j in jobs]
    with pytest.raises(Conflict):
        array_cancel(array_id=jobs[0].pk)


# ---------------------------------------------------------------- leader, agent
def test_the_leader_gives_the_core_the_array_fields(world):
    made = make_array(world, count=3, max_running=2)
    array_id = made["array_id"]
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error
    specs = [loop.scheduler.jobs[str(j["id"])].spec for j in made["jobs"]]
    assert [(s.array_id, s.array_index, s.array_count, s.array_max_running) for s in specs] \
        == [(str(array_id), k, 3, 2) for k in range(3)]
    later = make_array(world, count=2)  # through the catch-up
    assert not loop.step(now=now_s()).error
    assert loop.scheduler.jobs[str(later["jobs"][1]["id"])].spec.array_index == 1
    rebuilt = LeaderLoop(holder="test2", ttl_s=15, heartbeat_timeout_s=0)
    rebuilt.build(now_s())
    assert all(rebuilt.scheduler.jobs[k].spec == loop.scheduler.jobs[k].spec
               for k in rebuilt.scheduler.jobs)


def test_the_agent_is_told_each_tasks_index_and_the_arrays_size(world):
    made = make_array(world, count=2, gpus=8)
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error
    seen = {}
    for alloc in Allocation.objects.filter(job__array_id=made["array_id"], end__isnull=True):
        start = world.client(f"agent:{alloc.node.name}").get(
            "/api/v1/agent/assignments/").json()["start"]
        for item in start:
            seen[item["job_id"]] = item["env"]
    assert {pk: (env["ARRAY_INDEX"], env["ARRAY_COUNT"], env["SCHED_ARRAY_ID"])
            for pk, env in seen.items()} == {
        j["id"]: (str(j["array_index"]), "2", str(made["array_id"])) for j in made["jobs"]}


def test_a_plain_job_gets_no_array_environment(world):
    job = submit(world, gpus=8)["id"]
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error
    node = Allocation.objects.get(job_id=job, end__isnull=True).node.name
    (item,) = world.client(f"agent:{node}").get("/api/v1/agent/assignments/").json()["start"]
    assert "ARRAY_INDEX" not in item["env"] and "ARRAY_COUNT" not in item["env"]


# ---------------------------------------------------------------- why it waits, core
def test_a_task_waiting_for_its_arrays_cap_says_so(world):
    made = make_array(world, count=4, max_running=1)
    Job.objects.filter(pk=made["jobs"][3]["id"]).update(
        pending_reason=PendingReason.ARRAY_LIMIT.value)
    detail = world.client("researcher").get(f"/api/v1/jobs/{made['jobs'][3]['id']}/").json()
    why = detail["why_pending"]
    assert why["reason"] == "ArrayLimit"
    # waiting off the queues: no place in line
    assert (detail["queue_position"]["tenant"], detail["queue_position"]["cluster"]) == (
        None, None)
    from django.test import Client

    browser = Client()
    browser.force_login(world.users["researcher"])
    page = browser.get(f"/jobs/{made['jobs'][3]['id']}/").content.decode()
    assert "Not in line yet" in page and "until a running task of its array ends" in page
    # its slot is held by a task let into the queue, not running yet (it said "runs 0
    # of its 4 tasks, the most it allows at once": found by trying the product)
    assert why["headline"] == (f"Array {made['array_id']} has 1 of its 4 tasks running or "
                               "in the queue ahead of this one (0 running), the most it "
                               "allows at once (max_running 1).")
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error  # the first task starts; the others park
    assert Job.objects.get(pk=made["jobs"][0]["id"]).state == JobState.PLACING
    why = world.client("researcher").get(
        f"/api/v1/jobs/{made['jobs'][3]['id']}/").json()["why_pending"]
    assert why["headline"] == (f"Array {made['array_id']} runs 1 of its 4 tasks, the most "
                               "it allows at once (max_running 1).")


def test_at_most_max_running_tasks_of_an_array_run_at_once(world):
    made = make_array(world, count=5, max_running=2)
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error
    states = list(Job.objects.filter(array_id=made["array_id"]).order_by("array_index")
                  .values_list("state", "pending_reason"))
    assert sum(state == JobState.PLACING for state, _r in states) == 2
    assert {r for state, r in states if state == JobState.QUEUED} == {"ArrayLimit"}
