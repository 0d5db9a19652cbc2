"""Jobs through the API: submit, idempotency, bad input, batch, list, detail, cancel."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler_app.core.states import PENDING_SENTENCES, JobState, PendingReason, Reason
from scheduler_app.models import Job, Node, Transition
from tests.foundation.factories import move

from .conftest import job_body, submit

pytestmark = pytest.mark.django_db


def errors_of(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


# ---------------------------------------------------------------- submit
def test_a_submitted_job_is_queued_with_its_history_and_owner(world):
    response = world.client("researcher").post(
        "/api/v1/jobs/", job_body(gpus=8, gpus_per_node=8, max_runtime_s=3600), format="json")
    assert response.status_code == 201
    summary = response.json()
    assert summary["state"] == "QUEUED"
    assert summary["owner"] == "vision-r1" and summary["tenant"] == "vision"
    assert summary["size_class"] == "2-8"
    assert response["Location"] == f"/api/v1/jobs/{summary['id']}/"
    job = world.client("researcher").get(response["Location"]).json()
    assert [(h["from_state"], h["to_state"]) for h in job["history"]] == [
        (None, "SUBMITTED"), ("SUBMITTED", "QUEUED")]
    row = Job.objects.get(pk=job["id"])
    # where it orders in its team: the submit second + queue_stretch (1) x its 3,600 s
    # limit x its 8 GPUs
    deadline = datetime.fromtimestamp(int(row.submitted_at.timestamp()) + 3600 * 8, tz=UTC)
    assert job["queue_position"] == {"tenant": 1, "cluster": 1,
                                     "deadline_at": deadline.isoformat().replace("+00:00", "Z")}
    assert job["pending_sentence"] == PENDING_SENTENCES[PendingReason.NONE]
    assert job["allocation"] == {}
    assert row.owner.username == "vision-r1" and row.max_runtime_s == 3600


def test_a_retried_submit_with_the_same_key_returns_the_first_job(world):
    client = world.client("researcher")
    body = job_body(gpus=2)
    first = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="run-7")
    again = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="run-7")
    assert first.status_code == 201 and again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.filter(idempotency_key="run-7").count() == 1
    # the body's key is the same key
    body_key = client.post("/api/v1/jobs/", {**body, "idempotency_key": "run-7"}, format="json")
    assert body_key.status_code == 200 and body_key.json()["id"] == first.json()["id"]


def test_a_key_reused_for_a_different_job_is_a_conflict_and_writes_nothing(world):
    client = world.client("researcher")
    client.post("/api/v1/jobs/", job_body(gpus=2, idempotency_key="k1"), format="json")
    rows = Transition.objects.count()
    response = client.post("/api/v1/jobs/", job_body(gpus=4, idempotency_key="k1"),
                           format="json")
    assert response.status_code == 409
    assert errors_of(response).keys() == {"idempotency_key"}
    # what differs is named (a pipeline author could not tell)
    assert "(gpus differs)" in errors_of(response)["idempotency_key"]
    assert Transition.objects.count() == rows
    two = client.post("/api/v1/jobs/", job_body(gpus=4, priority=3, idempotency_key="k1"),
                      format="json")
    assert "(gpus and priority differ)" in errors_of(two)["idempotency_key"]


def test_a_retry_is_answered_even_after_a_quota_change_would_refuse_its_spec(world):
    client = world.client("researcher")
    big = job_body(gpus=24, max_runtime_s=3600)  # (borrows: a limit lets it)
    first = client.post("/api/v1/jobs/", big, format="json",
                        HTTP_IDEMPOTENCY_KEY="big-1")
    assert first.status_code == 201
    world.vision.borrow_limit_gpus = 0  # 16: the 24-GPU job would never fit now
    world.vision.save()
    again = client.post("/api/v1/jobs/", big, format="json",
                        HTTP_IDEMPOTENCY_KEY="big-1")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    fresh = client.post("/api/v1/jobs/", big, format="json",
                        HTTP_IDEMPOTENCY_KEY="big-2")
    assert fresh.status_code == 400 and errors_of(fresh).keys() == {"gpus"}


def test_a_retried_batch_returns_the_first_batch_and_a_different_one_conflicts(world):
    client = world.client("researcher")
    jobs = [{"name": f"j{i}", "gpus": 1} for i in range(3)]
    first = client.post("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": jobs},
                        format="json", HTTP_IDEMPOTENCY_KEY="sweep-9")
    rows = Transition.objects.count()
    again = client.post("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": jobs},
                        format="json", HTTP_IDEMPOTENCY_KEY="sweep-9")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    other = client.post("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": jobs[:2]},
                        format="json", HTTP_IDEMPOTENCY_KEY="sweep-9")
    assert other.status_code == 409 and errors_of(other).keys() == {"idempotency_key"}
    assert Transition.objects.count() == rows


def test_a_submit_costs_a_few_queries_and_a_batch_no_more_per_job(
        world, django_assert_max_num_queries):
    client = world.client("researcher")
    client.get("/api/v1/me/")  # the token's last_used_at is written once a minute
    # token, tenant with the caller's role, the cluster's shape, BEGIN, the append lock,
    # the job, its two rows, COMMIT (SQLite: no lock)
    with django_assert_max_num_queries(9):
        assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                           HTTP_IDEMPOTENCY_KEY="q-1").status_code == 201
    counts = []
    # (both sizes past copy_insert.COPY_FROM_ROWS: the jobs and their log rows go in one
    # prepared INSERT each, after the keys are taken; a smaller batch takes bulk_create,
    # whose statements hold at most 999 values on SQLite)
    for size in (50, 500):
        with django_assert_max_num_queries(20) as queries:
            response = client.post(
                "/api/v1/jobs/batch/",
                {"tenant": "vision", "jobs": [{"name": f"b{i}", "gpus": 1} for i in range(size)]},
                format="json", HTTP_IDEMPOTENCY_KEY=f"qb-{size}")
            assert response.status_code == 201
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_header_and_body_keys_that_differ_are_refused(world):
    response = world.client("researcher").post(
        "/api/v1/jobs/", job_body(idempotency_key="a"), format="json",
        HTTP_IDEMPOTENCY_KEY="b")
    assert response.status_code == 400 and "idempotency_key" in errors_of(response)


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/jobs/batch/", "/api/v1/arrays/"])
def test_a_header_key_that_is_not_ascii_is_refused_and_the_body_takes_it(world, path):
    # WSGI reads header bytes as Latin-1: "ключ" was kept garbled, and the same key in the
    # body then made a second job (found by trying the product, 2026-12-07)
    body = job_body()
    if path.endswith("batch/"):
        body = {"tenant": body.pop("tenant"), "jobs": [body]}
    elif path.endswith("arrays/"):
        body = {**body, "array": {"count": 2}}
    client = world.client("researcher")
    utf8_as_latin1 = "ключ-🔑".encode().decode("latin-1")
    refused = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=utf8_as_latin1)
    assert refused.status_code == 400
    assert "must be printable ASCII" in errors_of(refused)["idempotency_key"]
    assert not Job.objects.exists()
    first = client.post(path, {**body, "idempotency_key": "ключ-🔑"}, format="json")
    again = client.post(path, {**body, "idempotency_key": "ключ-🔑"}, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert Job.objects.count() == (2 if path.endswith("arrays/") else 1)


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"gpus": 64}, "gpus", "the cluster has 32"),
        ({"gpus": 24, "tenant": "nlp"}, "gpus", "16 guaranteed + 0 borrowed"),
        ({"gpus": 8, "gpu_type": "B200"}, "gpu_type", "the cluster has H100"),
        ({"gpus": 12, "gpus_per_node": 8}, "gpus_per_node", "cannot be split"),
        ({"gpus": 16, "gpus_per_node": 16}, "gpus_per_node", "largest node has 8"),
        ({"gpus": 0}, "gpus", "at least 1"),
        # the same words for -3 as for 0 (it said ">= 0", which 0 is not: 2026-12-07)
        ({"gpus": -3}, "gpus", "A job needs at least 1 GPU."),
        ({"gpus_per_node": -8}, "gpus_per_node", "GPUs per node must be at least 1."),
        ({"min_gpus": -1}, "min_gpus", "between 1 and the job's GPUs"),
        ({"checkpoint_time_s": -1}, "checkpoint_time_s", "positive number of seconds"),
        ({"gpus": 4, "min_gpus": 8}, "min_gpus", "between 1 and the job's GPUs"),
        ({"max_runtime_s": -60}, "max_runtime_s", "positive number of seconds"),
        ({"max_runtime_s": 0}, "max_runtime_s", "positive number of seconds"),
        ({"max_runtime_s": 3600 * 24 * 400}, "max_runtime_s", "366 days"),
        ({"checkpoint_time_s": 10**12}, "checkpoint_time_s", "366 days"),
        ({"restart_s": -1}, "restart_s", "zero or a positive number of seconds"),
        ({"name": ""}, "name", "blank"),
        ({"name": "x" * 201}, "name", "200"),
        # a tab broke gpuq's columns; an override reorders a terminal (2026-12-07)
        ({"name": "tab\there"}, "name", "printable text"),
        ({"name": "run\u202egnp.exe"}, "name", "text-direction"),
        ({"name": "bell\x07"}, "name", "control"),
        # invisible characters hid in gpuq queue's columns (2026-12-07)
        ({"name": "w\u200b1"}, "name", "invisible"),
        ({"name": "w\u200d1"}, "name", "invisible"),
        ({"name": "w\u20601"}, "name", "invisible"),
        ({"name": "\ufeffw1"}, "name", "invisible"),
        ({"name": "w\xad1"}, "name", "soft hyphen"),
        ({"name": "\u0301w1"}, "name", "combining mark first"),
        # placement shrinks a shaped gang by whole nodes: 12 of 8 a node would be 16
        ({"gpus": 16, "gpus_per_node": 8, "min_gpus": 12}, "min_gpus", "a multiple of 8"),
        ({"tenant": "no-such-team"}, "tenant", "No tenant named"),
        ({"gpus": "four"}, "gpus", "valid integer"),
        ({"priority": 2**40}, "priority", "less than or equal"),
    ],
)
def test_bad_input_names_the_field_says_what_is_allowed_and_writes_nothing(
    world, spec, field, words
):
    client = world.client("other_team" if spec.get("tenant") == "nlp" else "researcher")
    jobs, rows = Job.objects.count(), Transition.objects.count()
    response = client.post("/api/v1/jobs/", job_body(**spec), format="json")
    assert response.status_code == 400, response.json()
    errors = errors_of(response)
    assert field in errors, errors
    assert words.lower() in errors[field].lower(), errors[field]
    assert (Job.objects.count(), Transition.objects.count()) == (jobs, rows)


def test_several_bad_fields_are_all_named_at_once(world):
    response = world.client("researcher").post(
        "/api/v1/jobs/", job_body(gpus=12, gpus_per_node=8, restart_s=-5, max_runtime_s=0),
        format="json")
    assert response.status_code == 400
    assert {"restart_s"} <= errors_of(response).keys()


def test_an_elastic_job_is_refused_when_its_minimum_cannot_fit(world):
    ok = world.client("researcher").post(
        "/api/v1/jobs/", job_body(gpus=32, min_gpus=16), format="json")
    assert ok.status_code == 201
    refused = world.client("researcher").post(
        "/api/v1/jobs/", job_body(gpus=32, min_gpus=40), format="json")
    assert refused.status_code == 400 and "min_gpus" in errors_of(refused)


@pytest.mark.parametrize(("spec", "message"), [
    ({"gpus": 2147483647, "min_gpus": 1},
     "This job can never run: it needs 2147483647 GPUs at its full size; the cluster has 32."),
    ({"gpus": 64, "min_gpus": 16}, "it needs 64 GPUs at its full size; the cluster has 32."),
])
def test_an_elastic_jobs_full_size_is_bounded_by_the_cluster(world, spec, message):
    """{"gpus": 2147483647, "min_gpus": 1} was admitted (never_fits checked only the
    minimum) and why_pending spoke of 2147483647 GPUs (found by a user gaming the
    scheduler, 2026-12-07): gpus gets the rule a job that is not elastic gets."""
    jobs = Job.objects.count()
    response = world.client("researcher").post("/api/v1/jobs/", job_body(**spec),
                                               format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["errors"][0]
    assert (error["field"], error["code"]) == ("gpus", "never_fits")
    assert message in error["message"]
    assert Job.objects.count() == jobs


def test_json_is_required(world):
    response = world.client("researcher").post(
        "/api/v1/jobs/", "tenant=vision&name=x&gpus=1",
        content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["errors"][0]["code"] == "unsupported_media_type"


# ---------------------------------------------------------------- batch
def test_a_batch_is_submitted_whole_in_order(world):
    specs = [{"name": f"sweep-{i}", "gpus": 1, "max_runtime_s": 600} for i in range(50)]
    response = world.client("researcher").post(
        "/api/v1/jobs/batch/", {"tenant": "vision", "jobs": specs}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["count"] == 50
    assert [j["name"] for j in body["jobs"]] == [f"sweep-{i}" for i in range(50)]
    assert {j["state"] for j in body["jobs"]} == {"QUEUED"}
    assert Job.objects.filter(tenant=world.vision).count() == 50


def test_one_bad_spec_refuses_the_whole_batch_naming_its_index(world):
    specs = [{"name": f"ok-{i}", "gpus": 1} for i in range(5)]
    specs[3] = {"name": "too-big", "gpus": 512}
    specs[4] = {"name": "bad-shape", "gpus": 6, "gpus_per_node": 4}
    response = world.client("researcher").post(
        "/api/v1/jobs/batch/", {"tenant": "vision", "jobs": specs}, format="json")
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"jobs[3].gpus", "jobs[4].gpus_per_node"}, errors
    assert "the cluster has 32" in errors["jobs[3].gpus"]
    assert Job.objects.count() == 0 and Transition.objects.count() == 0


def test_a_bad_field_type_in_a_batch_is_named_with_its_index(world):
    specs = [{"name": "a", "gpus": 1}, {"name": "b", "gpus": 1, "restart_s": -1}]
    response = world.client("researcher").post(
        "/api/v1/jobs/batch/", {"tenant": "vision", "jobs": specs}, format="json")
    assert response.status_code == 400
    assert set(errors_of(response)) == {"jobs[1].restart_s"}


@pytest.mark.parametrize("command", ["echo " + "\u00ff" * 70_000, "echo " + "\u65e5" * 50_000])
def test_a_command_a_node_cannot_exec_is_refused_on_every_submit_path(world, command):
    """70,000 'ÿ' (140,005 bytes in UTF-8) passed the 100,000-character limit, and the
    agent died of E2BIG exec'ing it (Linux's 128 KiB per argument), on every node the job
    was then placed on (found by a user session, 2026-12-07)."""
    client = world.client("researcher")
    paths = {
        "/api/v1/jobs/": job_body(gpus=1, command=command),
        "/api/v1/jobs/batch/": {"tenant": "vision", "jobs": [
            {"name": "ok", "gpus": 1, "command": "true"},
            {"name": "long", "gpus": 1, "command": command}]},
        "/api/v1/arrays/": {"array": {"count": 2}, **job_body(gpus=1, command=command)},
    }
    fields = {"/api/v1/jobs/": "command", "/api/v1/jobs/batch/": "jobs[1].command",
              "/api/v1/arrays/": "command"}
    for path, body in paths.items():
        response = client.post(path, body, format="json")
        assert response.status_code == 400, (path, response.json())
        errors = errors_of(response)
        assert "128,000 bytes in UTF-8" in errors[fields[path]], (path, errors)
    assert Job.objects.count() == 0
    # the longest ASCII command the schema takes still fits
    assert client.post("/api/v1/jobs/", job_body(gpus=1, command="x" * 100_000),
                       format="json").status_code == 201


def test_a_batch_holds_at_most_1000_jobs(world):
    specs = [{"name": "x", "gpus": 1}] * 1001
    response = world.client("researcher").post(
        "/api/v1/jobs/batch/", {"tenant": "vision", "jobs": specs}, format="json")
    assert response.status_code == 400
    assert "1000" in errors_of(response)["jobs"]
    assert Job.objects.count() == 0


def test_a_retried_batch_returns_the_first_batchs_jobs(world):
    client = world.client("researcher")
    body = {"tenant": "vision", "jobs": [{"name": f"s{i}", "gpus": 1} for i in range(3)]}
    first = client.post("/api/v1/jobs/batch/", body, format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep-42")
    again = client.post("/api/v1/jobs/batch/", body, format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep-42")
    assert first.status_code == 201 and again.status_code == 200
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert Job.objects.count() == 3
    different = client.post("/api/v1/jobs/batch/", {**body, "jobs": body["jobs"][:2]},
                            format="json", HTTP_IDEMPOTENCY_KEY="sweep-42")
    assert different.status_code == 409



def test_a_batch_key_that_extends_another_batchs_key_is_a_batch_of_its_own(world):
    # "sweep" makes sweep#0 and sweep#1; "sweep#1" makes sweep#1#0: a retry of either
    # must find its own jobs, not the other's too (which would be a false 409)
    client = world.client("researcher")
    body = {"tenant": "vision", "jobs": [{"name": f"s{i}", "gpus": 1} for i in range(2)]}
    first = client.post("/api/v1/jobs/batch/", body, format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep")
    other = client.post("/api/v1/jobs/batch/", {**body, "jobs": body["jobs"][:1]},
                        format="json", HTTP_IDEMPOTENCY_KEY="sweep#1")
    assert (first.status_code, other.status_code) == (201, 201)
    again = client.post("/api/v1/jobs/batch/", body, format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep")
    other_again = client.post("/api/v1/jobs/batch/", {**body, "jobs": body["jobs"][:1]},
                              format="json", HTTP_IDEMPOTENCY_KEY="sweep#1")
    assert (again.status_code, other_again.status_code) == (200, 200)
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert [j["id"] for j in other_again.json()["jobs"]] == [
        j["id"] for j in other.json()["jobs"]]
    assert Job.objects.count() == 3


def test_a_batch_key_reused_for_other_jobs_names_what_differs(world):
    client = world.client("researcher")
    body = {"tenant": "vision", "jobs": [{"name": f"s{i}", "gpus": 1} for i in range(2)]}
    assert client.post("/api/v1/jobs/batch/", body, format="json",
                       HTTP_IDEMPOTENCY_KEY="b").status_code == 201
    fewer = client.post("/api/v1/jobs/batch/", {**body, "jobs": body["jobs"][:1]},
                        format="json", HTTP_IDEMPOTENCY_KEY="b")
    assert fewer.status_code == 409
    assert "the number of jobs (1) differs" in errors_of(fewer)["idempotency_key"]
    other = client.post("/api/v1/jobs/batch/",
                        {**body, "jobs": [body["jobs"][0], {"name": "s1", "gpus": 2}]},
                        format="json", HTTP_IDEMPOTENCY_KEY="b")
    assert other.status_code == 409
    assert "jobs[1].gpus differs" in errors_of(other)["idempotency_key"]
    assert Job.objects.count() == 2


def test_a_batch_whose_first_key_a_single_submit_took_conflicts(world):
    client = world.client("researcher")
    single = client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                         HTTP_IDEMPOTENCY_KEY="sweep#0")
    body = {"tenant": "vision", "jobs": [{"name": f"s{i}", "gpus": 1} for i in range(2)]}
    batch = client.post("/api/v1/jobs/batch/", body, format="json",
                        HTTP_IDEMPOTENCY_KEY="sweep")
    assert (single.status_code, batch.status_code) == (201, 409)
    assert errors_of(batch).keys() == {"idempotency_key"}
    assert Job.objects.count() == 1


@pytest.mark.parametrize("many", ["batch", "array"])
def test_a_single_jobs_key_sent_with_a_batch_or_array_conflicts_and_the_other_way(world, many):
    # one key, one request: a job's key reused for a batch (or an array) made new jobs,
    # and a batch's key reused for a single job made a new one, since a batch keys its
    # jobs <key>#<i> (found by a researcher's session, 2026-12-07)
    client = world.client("researcher")
    path = "/api/v1/jobs/batch/" if many == "batch" else "/api/v1/arrays/"
    spec = {"name": "s", "gpus": 1}
    body = ({"tenant": "vision", "jobs": [spec, spec]} if many == "batch"
            else {"tenant": "vision", **spec, "array": {"count": 2}})
    single = client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                         HTTP_IDEMPOTENCY_KEY="run-1")
    assert single.status_code == 201
    clash = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert clash.status_code == 409, clash.json()
    error = clash.json()["errors"][0]
    assert error["code"] == "idempotency_key_reused" and error["field"] == "idempotency_key"
    assert f"job {single.json()['id']}" in error["message"]
    assert Job.objects.count() == 1

    made = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="run-2")
    assert made.status_code == 201
    again = client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                        HTTP_IDEMPOTENCY_KEY="run-2")
    assert again.status_code == 409, again.json()
    error = again.json()["errors"][0]
    assert error["code"] == "idempotency_key_reused" and error["field"] == "idempotency_key"
    assert ("a batch of 2 jobs" if many == "batch" else
            f"array {made.json()['array_id']} (2 tasks)") in error["message"]
    assert Job.objects.count() == 3
    # each kind's own retry is still a retry
    assert client.post(path, body, format="json",
                       HTTP_IDEMPOTENCY_KEY="run-2").status_code == 200
    assert client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                       HTTP_IDEMPOTENCY_KEY="run-1").status_code == 200
    assert Job.objects.count() == 3
    # a single job's key that ends in # and digits is still a single job's (it was taken
    # for a batch's job's, and the batch made new jobs: a review, 2026-12-07)
    single = client.post("/api/v1/jobs/", job_body(gpus=1), format="json",
                         HTTP_IDEMPOTENCY_KEY="run#1")
    assert single.status_code == 201
    clash = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="run#1")
    assert clash.status_code == 409, clash.json()
    assert f"job {single.json()['id']}" in clash.json()["errors"][0]["message"]
    assert Job.objects.count() == 4


# ---------------------------------------------------------------- list
def test_the_list_filters_by_state_size_class_owner_and_tenant(world):
    small = submit(world, gpus=1)
    big = submit(world, gpus=16)
    lead_job = submit(world, who="lead", gpus=2)
    client = world.client("lead")
    ids = lambda r: [j["id"] for j in r.json()["results"]]  # noqa: E731
    assert ids(client.get("/api/v1/jobs/?size_class=1")) == [small["id"]]
    assert ids(client.get("/api/v1/jobs/?size_class=9-64&size_class=1")) == [big["id"],
                                                                             small["id"]]
    assert ids(client.get("/api/v1/jobs/?owner=vision-lead")) == [lead_job["id"]]
    client.post(f"/api/v1/jobs/{small['id']}/cancel/", {}, format="json")
    assert ids(client.get("/api/v1/jobs/?state=CANCELLED")) == [small["id"]]
    assert ids(client.get("/api/v1/jobs/?state=QUEUED&tenant=vision")) == [lead_job["id"],
                                                                           big["id"]]
    bad = client.get("/api/v1/jobs/?state=LOST")
    assert bad.status_code == 400 and "state" in errors_of(bad)
    # the message says what is allowed ("Select a valid choice. LOST is not one of the
    # available choices." until 2026-12-07), on every list's choice filters
    assert errors_of(bad)["state"] == (
        "LOST is not one of: SUBMITTED, QUEUED, PLACING, RUNNING, PREEMPT_REQUESTED, "
        "CHECKPOINTING, PREEMPTED, COMPLETED, FAILED, CANCELLED.")
    nodes = world.client("operator").get("/api/v1/nodes/?health=sick")
    assert nodes.status_code == 400
    assert errors_of(nodes)["health"].startswith("sick is not one of: healthy")


@pytest.mark.parametrize(("url", "param", "message"), [
    ("/api/v1/cluster/transitions/?tenant=nope", "tenant",
     "No tenant named 'nope': see GET /api/v1/tenants/."),
    ("/api/v1/cluster/transitions/?node=nope", "node",
     "No node named 'nope': see GET /api/v1/nodes/."),
    ("/api/v1/nodes/?pod=nope", "pod", "No pod named 'nope': see GET /api/v1/nodes/."),
    ("/api/v1/nodes/?gpu_type=bogus", "gpu_type",
     "No node of GPU type 'bogus': see GET /api/v1/nodes/."),
    ("/api/v1/jobs/?owner=nope", "owner",
     "No user named 'nope': see the owner column of GET /api/v1/jobs/."),
])
def test_a_filter_naming_nothing_is_refused_not_an_empty_list(world, url, param, message):
    """A typo read as "nothing matches": a log consumer tailed an empty feed for
    ?tenant=nope (found 2026-12-07), where the jobs list refuses an unknown tenant."""
    client = world.client("operator")
    refused = client.get(url)
    assert refused.status_code == 400 and errors_of(refused) == {param: message}
    node = Node.objects.select_related("pod").first()
    for ok in ("/api/v1/cluster/transitions/?tenant=vision",
               f"/api/v1/cluster/transitions/?node={node.name}",
               f"/api/v1/nodes/?pod={node.pod.name}", f"/api/v1/nodes/?gpu_type={node.gpu_type}",
               "/api/v1/jobs/?owner=op"):
        assert client.get(ok).status_code == 200, ok


@pytest.mark.parametrize(("user", "url", "param", "message"), [
    ("operator", "/api/v1/jobs/?stat=QUEUED", "stat",
     "Unknown parameter 'stat': did you mean state?"),
    ("operator", "/api/v1/jobs/?tenant=vision&tenant=nlp", "tenant",
     "Given 2 times: give it once."),
    ("lead", "/api/v1/jobs/?tenant=vision&tenant=nlp", "tenant",
     "Given 2 times: give it once."),  # not a 403 for one of them, not the list of the other
    ("operator", "/api/v1/nodes/?heatlh=healthy", "heatlh",
     "Unknown parameter 'heatlh': did you mean health?"),
    ("operator", "/api/v1/nodes/?after=3", "after",
     "Unknown parameter 'after': the parameters are cursor, format, gpu_type, health, "
     "page_size, pod."),
    # a '%' in the client's input: django-filter formats each message (a 500 until fixed)
    ("operator", "/api/v1/jobs/?owner=%25s", "owner",
     "No user named '%s': see the owner column of GET /api/v1/jobs/."),
    ("operator", "/api/v1/jobs/?%25d=1", "%d",
     "Unknown parameter '%d': the parameters are array, cursor, format, owner, page_size, "
     "size_class, state, submitted_after, submitted_before, tenant."),
    ("operator", "/api/v1/cluster/transitions/?cursor=abc", "cursor",
     "Unknown parameter 'cursor': the parameters are after, format, job, kind, limit, node, "
     "tenant."),
])
def test_an_unknown_or_repeated_query_parameter_is_refused(world, user, url, param, message):
    """?stat=QUEUED (a typo) listed every job, and ?tenant=a&tenant=b the last one's: a
    pipeline that cancels what it lists would cancel everything (a pipeline author's
    session, 2026-12-07). Request bodies refuse unknown fields; query strings now too."""
    refused = world.client(user).get(url)
    assert refused.status_code == 400 and errors_of(refused) == {param: message}


def test_repeating_a_filter_that_takes_many_values_still_works(world):
    client = world.client("operator")
    assert client.get("/api/v1/jobs/?state=QUEUED&state=RUNNING").status_code == 200
    assert client.get("/api/v1/jobs/?state=QUEUED&page_size=5&format=json").status_code == 200
    assert client.get("/api/v1/nodes/?health=healthy&health=down").status_code == 200
    assert client.get("/api/v1/cluster/transitions/?after=0&limit=5&kind=job").status_code == 200


@pytest.mark.parametrize(("method", "url", "body", "message"), [
    ("get", "/api/v1/nodes/nope/", None, "No node named 'nope': see GET /api/v1/nodes/."),
    ("post", "/api/v1/nodes/nope/drain/", {"why": "fan"},
     "No node named 'nope': see GET /api/v1/nodes/."),
    ("get", "/api/v1/tenants/nope/", None,
     "No tenant named 'nope': see GET /api/v1/tenants/."),
    ("patch", "/api/v1/tenants/nope/quota/", {"guaranteed_gpus": 8},
     "No tenant named 'nope': see GET /api/v1/tenants/."),
])
def test_a_misspelt_name_in_the_path_is_a_404_that_says_what_was_looked_for(
        world, method, url, body, message):
    # Django's "No Node matches the given query." said neither (an operator's session,
    # 2026-12-07), where the filters name the parameter and the list
    rows = Transition.objects.count()
    answer = getattr(world.client("operator"), method)(url, body, format="json")
    assert answer.status_code == 404
    assert answer.json()["errors"] == [{"field": None, "code": "not_found", "message": message}]
    assert Transition.objects.count() == rows


def test_the_list_pages_by_cursor_without_repeats_or_gaps(world):
    client = world.client("researcher")
    client.post("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": [
        {"name": f"j{i}", "gpus": 1} for i in range(25)]}, format="json")
    seen: list[int] = []
    url = "/api/v1/jobs/?page_size=10"
    pages = 0
    while url:
        page = client.get(url).json()
        seen += [j["id"] for j in page["results"]]
        url = page["next"]
        pages += 1
        if pages == 2:  # a job arriving between pages neither shifts nor repeats rows
            submit(world, gpus=1)
    assert pages == 3
    assert seen == sorted(Job.objects.filter(name__startswith="j").values_list(
        "pk", flat=True), reverse=True)


def test_a_forged_cursor_is_a_400_naming_the_cursor(world):
    client = world.client("researcher")
    for cursor in ("cD1hYmM=", "a", "bz0tMQ=="):  # "p=abc", bad padding, "o=-1"
        response = client.get(f"/api/v1/jobs/?cursor={cursor}")
        assert response.status_code == 400 and "cursor" in errors_of(response), cursor


# ---------------------------------------------------------------- detail
def test_the_detail_shows_the_pending_reason_estimate_and_queue_positions(world):
    first = submit(world, gpus=8)
    second = submit(world, gpus=8, priority=5)
    Job.objects.filter(pk=first["id"]).update(pending_reason=PendingReason.RESOURCES.value)
    detail = world.client("researcher").get(f"/api/v1/jobs/{first['id']}/").json()
    assert detail["pending_reason"] == "Resources"
    assert detail["pending_sentence"] == PENDING_SENTENCES[PendingReason.RESOURCES]
    # higher priority goes first inside the tenant
    assert (detail["queue_position"]["tenant"], detail["queue_position"]["cluster"]) == (2, 2)
    assert world.client("researcher").get(
        f"/api/v1/jobs/{second['id']}/").json()["queue_position"]["tenant"] == 1
    assert detail["estimate"] == {"start_at": None, "basis": "", "kind": "", "upper_bound": False}


def test_a_shorter_job_sent_later_is_ahead_in_its_team_and_the_detail_says_by_when(world):
    long = submit(world, gpus=8, max_runtime_s=2 * 86400)
    short = submit(world, gpus=8, max_runtime_s=600)
    client = world.client("researcher")
    positions = {name: client.get(f"/api/v1/jobs/{job['id']}/").json()["queue_position"]
                 for name, job in (("long", long), ("short", short))}
    assert (positions["short"]["tenant"], positions["long"]["tenant"]) == (1, 2)
    assert positions["short"]["deadline_at"] < positions["long"]["deadline_at"]


def test_the_detail_of_a_placed_job_shows_its_allocation_and_no_queue_position(world):
    job = submit(world, gpus=4)
    move(Job.objects.get(pk=job["id"]), JobState.PLACING, Reason.PLACED,
         at=Job.objects.get(pk=job["id"]).submitted_at, alloc={"n1": [0, 1, 2, 3]})
    detail = world.client("researcher").get(f"/api/v1/jobs/{job['id']}/").json()
    assert detail["state"] == "PLACING"
    assert detail["allocation"] == {"n1": [0, 1, 2, 3]}
    assert detail["queue_position"] == {"tenant": None, "cluster": None, "deadline_at": None}
    assert detail["estimate"] is None
    assert detail["history"][-1]["detail"]["alloc"] == {"n1": [0, 1, 2, 3]}


def test_an_unknown_job_is_a_404(world):
    response = world.client("operator").get("/api/v1/jobs/999999/")
    assert response.status_code == 404
    assert response.json()["errors"][0]["code"] == "not_found"
    # in the API's words, not Django's "No Job matches the given query."
    assert response.json()["errors"][0]["message"] == "No job 999999."
    cancel = world.client("operator").post("/api/v1/jobs/999999/cancel/", {}, format="json")
    assert cancel.status_code == 404 and cancel.json()["errors"][0]["message"] == \
        "No job 999999."


def test_a_method_a_job_does_not_take_says_what_to_do_instead(world):
    job = submit(world, gpus=2)
    client = world.client("researcher")
    gone = client.delete(f"/api/v1/jobs/{job['id']}/")
    assert gone.status_code == 405
    assert gone.json()["errors"][0]["message"] == (
        f'Method "DELETE" not allowed: cancel a job with POST /api/v1/jobs/{job["id"]}/cancel/.')
    changed = client.patch(f"/api/v1/jobs/{job['id']}/", {"priority": 9}, format="json")
    assert changed.status_code == 405
    assert changed.json()["errors"][0]["message"] == (
        'Method "PATCH" not allowed: a submitted job cannot be changed: cancel it and submit '
        "it again.")
    assert client.get(f"/api/v1/jobs/{job['id']}/").json()["state"] == "QUEUED"


def test_an_unknown_token_is_a_404_in_the_apis_words(world):
    gone = world.client("researcher").delete("/api/v1/tokens/999999/")
    assert gone.status_code == 404
    assert gone.json()["errors"][0]["message"] == "No token 999999: see GET /api/v1/tokens/."


# ---------------------------------------------------------------- cancel
def test_cancel_moves_the_job_to_cancelled_and_logs_who_and_why(world):
    job = submit(world, gpus=2)
    response = world.client("researcher").post(f"/api/v1/jobs/{job['id']}/cancel/",
                                               {"why": "wrong data"}, format="json")
    assert response.status_code == 200
    assert response.json()["state"] == "CANCELLED"
    last = response.json()["history"][-1]
    assert (last["to_state"], last["actor"], last["actor_name"]) == (
        "CANCELLED", "user", "vision-r1")
    assert last["detail"]["why"] == "wrong data"


@pytest.mark.parametrize("why", ["oops\u202egnp.exe", "two\nlines", "tab\there",
                                 "zero\u200bwidth"])
def test_a_cancels_why_is_printable_text_as_a_name_is(world, why):
    """A right-to-left override and line breaks went into the log's why, which names
    refuse (found by a user gaming the scheduler, 2026-12-07)."""
    job = submit(world, gpus=2)
    rows = Transition.objects.count()
    client = world.client("researcher")
    response = client.post(f"/api/v1/jobs/{job['id']}/cancel/", {"why": why}, format="json")
    assert response.status_code == 400, response.json()
    assert "printable text" in errors_of(response)["why"]
    assert Transition.objects.count() == rows
    array = client.post("/api/v1/arrays/", {"tenant": "vision", "name": "s", "gpus": 1,
                                            "array": {"count": 2}}, format="json").json()
    rows = Transition.objects.count()
    response = client.post(f"/api/v1/arrays/{array['array_id']}/cancel/", {"why": why},
                           format="json")
    assert response.status_code == 400 and "why" in errors_of(response)
    assert Transition.objects.count() == rows
    ok = client.post(f"/api/v1/jobs/{job['id']}/cancel/", {"why": "wrong lr, é"},
                     format="json")
    assert ok.status_code == 200


def test_cancelling_a_final_job_is_a_conflict(world):
    job = submit(world, gpus=2)
    client = world.client("researcher")
    client.post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    response = client.post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    assert response.status_code == 409
    error = response.json()["errors"][0]
    assert error["code"] == "illegal_transition" and "CANCELLED is final" in error["message"]


def test_an_operator_cancel_is_logged_as_the_operator(world):
    job = submit(world, gpus=2)
    response = world.client("operator").post(f"/api/v1/jobs/{job['id']}/cancel/", {},
                                             format="json")
    assert response.json()["history"][-1]["actor"] == "operator"


def test_refusals_carry_a_machine_readable_code(world):
    client = world.client("researcher")
    too_big = client.post("/api/v1/jobs/", job_body(gpus=64), format="json").json()
    assert too_big["errors"] == [{"field": "gpus", "code": "never_fits", "message":
                                  "This job can never run: it needs 64 GPUs; the cluster "
                                  "has 32."}]
    unknown = client.post("/api/v1/jobs/", job_body(gpu_type="TPU"), format="json").json()
    assert unknown["errors"][0]["code"] == "unknown_gpu_type"


def test_a_job_nothing_may_preempt_larger_than_its_teams_guarantee_is_refused(world):
    """vision is guaranteed 16 and may borrow 16. A 24-GPU job with the API's defaults
    (not checkpointable, not preemptible, no time limit) could only run by borrowing, and
    nothing could take the borrowed GPUs back: refused at submit, saying what lets it."""
    client = world.client("researcher")
    plain = client.post("/api/v1/jobs/", job_body(gpus=24), format="json")
    assert plain.status_code == 400
    [error] = plain.json()["errors"]
    assert (error["field"], error["code"]) == ("gpus", "never_fits")
    assert ("team vision is guaranteed 16, and a job that cannot be preempted (not "
            "checkpointable, not preemptible) borrows past that only with a time limit of "
            "at most 7200 s") in error["message"]
    for lets in ({"max_runtime_s": 7200}, {"preemptible": True},
                 {"checkpointable": True, "checkpoint_interval_s": 600}):
        response = client.post("/api/v1/jobs/", job_body(gpus=24, **lets), format="json")
        assert response.status_code == 201, (lets, response.json())
    too_long = client.post("/api/v1/jobs/", job_body(gpus=24, max_runtime_s=7201),
                           format="json")
    assert too_long.status_code == 400


@pytest.mark.parametrize(("extra", "may"), [
    ({}, False),  # no limit, cannot be preempted
    ({"max_runtime_s": 3 * 3600}, False),  # past the 2 h window
    ({"max_runtime_s": 3600}, True),
    ({"checkpointable": True, "checkpoint_interval_s": 600}, True),
    ({"preemptible": True}, True),
])
def test_the_detail_says_whether_the_job_may_borrow_and_the_window_that_would_let_it(
        world, extra, may):
    # gpuq why read this from why_pending's words ("cannot be preempted", "a time limit of
    # at most 2 h"); the answer is now a field of its own
    job = submit(world, gpus=1, **extra)
    detail = world.client("researcher").get(f"/api/v1/jobs/{job['id']}/").json()
    assert detail["may_borrow"] is may
    assert detail["borrow_max_runtime_s"] == 7200
