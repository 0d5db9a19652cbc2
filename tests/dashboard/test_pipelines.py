"""Dependencies and job arrays on the dashboard: the submit form's "Waits for" (sbatch's
afterok:12 text) and array fields, each refusal at its field with nothing written; the
job page's dependencies (linked, with their state, in words) and a task's array (its
name, its place, the counts, the tasks list, the array's cancel); the tasks list,
paginated; the pending reasons Dependency and ArrayLimit in words.

The core's rules for these (a dependent parks, a never-met dependency cancels it) are
being built: where a test needs what the leader will write, it writes it through the
same service (``job_transition``) or, for the pending reason, sets the column the leader
sets."""

from __future__ import annotations

import re

import pytest

from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Transition
from scheduler_app.services import array_submit, job_cancel, job_submit, job_transition

from .conftest import World
from .test_views import form_data

pytestmark = pytest.mark.django_db

S = JobState


def slot(page: str, field: str) -> str:
    found = re.search(rf'<p class="field-error" id="err-{field}" role="alert">(.*?)</p>', page)
    assert found is not None, field
    return found.group(1)


def submit_array(world: World, who: str = "researcher", count: int = 5, **spec):
    return array_submit(tenant=world.vision, owner=world.users[who], name="sweep", gpus=1,
                        count=count, max_running=spec.pop("max_running", 2),
                        max_runtime_s=600, **spec)


# --------------------------------------------------------------------------- the form
def test_the_form_submits_a_job_that_waits_for_others(world: World):
    first, queued = world.jobs["first"], world.jobs["queued"]
    client = world.client("lead")
    response = client.post("/jobs/new/", form_data(
        world.vision, dependencies=f"afterok:{first.pk}, afternotok:#{queued.pk}"))
    job = Job.objects.get(name="llama-tiny")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.depends_on == [[first.pk, "ok"], [queued.pk, "notok"]]
    bare = client.post("/jobs/new/", form_data(world.vision, name="bare", dependencies=str(
        first.pk), idempotency_key="web-test-2"))
    assert bare.status_code == 302
    assert Job.objects.get(name="bare").depends_on == [[first.pk, "ok"]]


def test_the_form_submits_an_array_through_the_arrays_service(world: World):
    client = world.client("researcher")
    response = client.post("/jobs/new/", form_data(world.vision, gpus=1, gpus_per_node="",
                                                   array_count=12, array_max_running=3))
    tasks = list(Job.objects.filter(name="llama-tiny").order_by("array_index"))
    assert [t.array_index for t in tasks] == list(range(12))
    first = tasks[0]
    assert {(t.array_id, t.array_count, t.array_max_running) for t in tasks} == {
        (first.pk, 12, 3)}
    assert response.status_code == 302 and response["Location"] == f"/jobs/{first.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert (f"Array {first.pk} llama-tiny submitted: 12 tasks {first.pk}_0 to {first.pk}_11, "
            "at most 3 at once.") in page
    # the same form sent again (a double click) submits the array once
    client.post("/jobs/new/", form_data(world.vision, gpus=1, gpus_per_node="",
                                        array_count=12, array_max_running=3))
    assert Job.objects.filter(name="llama-tiny").count() == 12


def test_an_array_form_sent_again_with_other_values_says_it_was_submitted_before(
        world: World):
    client = world.client("researcher")
    array = {"gpus": 1, "gpus_per_node": "", "array_count": 4, "array_max_running": 2}
    client.post("/jobs/new/", form_data(world.vision, **array))
    first = Job.objects.get(name="llama-tiny", array_index=0)
    edited = client.post("/jobs/new/", form_data(world.vision, **{**array, "array_count": 6}))
    assert edited.status_code == 400
    assert (f'already submitted as <a href="/jobs/{first.pk}/">array {first.pk} llama-tiny'
            "</a>") in edited.content.decode()
    assert Job.objects.filter(name="llama-tiny").count() == 4


@pytest.mark.parametrize(
    ("over", "field", "message"),
    [
        ({"dependencies": "after:12"}, "dependencies",
         "Write the jobs it waits for as afterok:12"),
        ({"dependencies": "afterok:12,afterany:12"}, "dependencies", "is named twice"),
        # Arabic-Indic digits: read as job 152 until 2026-12-07; gpuq refuses them
        ({"dependencies": "afterok:١٥٢"}, "dependencies", "afterok:١٥٢&#x27; is none of these"),
        ({"dependencies": "١٥٢"}, "dependencies", "١٥٢&#x27; is none of these"),
        ({"dependencies": "afterok:999999"}, "dependencies",
         "No job 999999: a job may wait only for a job that exists."),
        # past the database's integers (a 500 until 2026-12-07)
        ({"dependencies": "afterok:9223372036854775808"}, "dependencies",
         "No job 9223372036854775808: job ids go up to 4611686018427387904."),
        ({"array_count": 0}, "array_count", "An array has 1 to 10,000 tasks."),
        ({"array_count": 10001}, "array_count", "An array has 1 to 10,000 tasks."),
        ({"array_count": 4, "array_max_running": 0}, "array_max_running",
         "At least 1 task must be allowed to run at once"),
        ({"array_max_running": 2}, "array_max_running", "give the number of tasks too"),
        ({"array_count": "many"}, "array_count", "Enter a whole number."),
    ],
)
def test_a_bad_dependency_or_array_is_refused_at_its_field_and_writes_nothing(
        world: World, over, field, message):
    rows = Transition.objects.count()
    response = world.client("researcher").post("/jobs/new/", form_data(world.vision, **over))
    assert response.status_code == 400
    assert message in slot(response.content.decode(), field)
    assert Transition.objects.count() == rows and not Job.objects.filter(name="llama-tiny")


def test_a_job_may_not_wait_for_a_job_its_submitter_may_not_see(world: World):
    theirs = world.jobs["wanted"]  # nlp's
    response = world.client("researcher").post(
        "/jobs/new/", form_data(world.vision, dependencies=f"afterany:{theirs.pk}"))
    assert response.status_code == 400
    assert f"Job {theirs.pk} is not yours to see" in slot(response.content.decode(),
                                                           "dependencies")
    assert not Job.objects.filter(name="llama-tiny").exists()


def test_the_live_check_reports_a_bad_dependency_at_its_slot(world: World):
    data = form_data(world.vision, dependencies="afterok:999999", _touched="dependencies")
    page = world.client("researcher").post("/jobs/new/check/", data).content.decode()
    slots = dict(re.findall(r'id="err-(\w+)" role="alert" hx-swap-oob="true">(.*?)</p>', page))
    assert "No job 999999" in slots["dependencies"]


# --------------------------------------------------------------------------- the job page
def test_the_job_page_shows_each_dependency_linked_with_its_state_in_words(world: World):
    first, queued = world.jobs["first"], world.jobs["queued"]
    job = job_submit(tenant=world.vision, owner=world.users["lead"], name="after-both",
                     gpus=1, depends_on=[{"job": first.pk}, {"job": queued.pk,
                                                            "when": "any"}])
    Job.objects.filter(pk=job.pk).update(pending_reason=PendingReason.DEPENDENCY.value)
    page = world.client("lead").get(f"/jobs/{job.pk}/").content.decode()
    deps = page[page.index('id="job-dependencies"'):]
    assert f'<a href="/jobs/{first.pk}/">#{first.pk} vit-huge</a> completes' in deps
    assert f'<a href="/jobs/{queued.pk}/">#{queued.pk} sweep-a</a> ends' in deps
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert f"It waits for job #{first.pk} to complete and job #{queued.pk} to end." in text
    rows = world.client("lead").get("/jobs/").content.decode()
    assert "It waits for the jobs it depends on to end as it requires" in rows


def test_a_job_cancelled_for_a_dependency_says_why(world: World):
    queued = world.jobs["queued"]
    job = job_submit(tenant=world.vision, owner=world.users["teammate"], name="after-sweep",
                     gpus=1, depends_on=[{"job": queued.pk}])
    job_cancel(job_id=queued.pk)
    # what the leader writes when the dependency can never be met
    job_transition(job_id=job.pk, to_state=S.CANCELLED, actor=Actor.SCHEDULER,
                   reason=Reason.DEPENDENCY_NEVER_SATISFIED,
                   detail={"job": queued.pk, "when": "ok", "ended": "CANCELLED"})
    page = world.client("teammate").get(f"/jobs/{job.pk}/").content.decode()
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert (f"Cancelled: job #{queued.pk} ended cancelled, so “after #{queued.pk} completes” "
            "can never be met.") in text
    assert (f"Cancelled: job #{queued.pk} ended CANCELLED, so the dependency (after it "
            "completes) can never be met.") in text  # the timeline's row
    assert "(can never be met)" in text


def test_a_tasks_page_shows_its_array_the_counts_and_the_tasks_link(world: World):
    tasks = submit_array(world, count=5, max_running=2)
    first, third = tasks[0], tasks[2]
    job_cancel(job_id=tasks[4].pk)
    Job.objects.filter(pk=third.pk).update(pending_reason=PendingReason.ARRAY_LIMIT.value)
    page = world.client("researcher").get(f"/jobs/{third.pk}/").content.decode()
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert f"{first.pk}_2 sweep job #{third.pk}" in text
    assert f"Task {first.pk}_2: task 3 of 5, at most 2 at once." in text
    assert "queued 4 tasks cancelled 1 task" in text
    assert f'href="/jobs/?array={first.pk}"' in page
    assert f'href="/arrays/{first.pk}/cancel/"' in page
    assert "ArrayLimit" in text  # the why's reason, beside its headline


def test_the_tasks_list_is_one_array_by_index_and_paginated(world: World):
    tasks = submit_array(world, count=120, max_running=None)
    first = tasks[0]
    client = world.client("researcher")
    page = client.get(f"/jobs/?array={first.pk}").content.decode()
    names = re.findall(rf">({first.pk}_\d+) sweep</a>", page)
    assert names == [f"{first.pk}_{i}" for i in range(50)]  # 50 a page, by index
    assert "Page 1 of 3 · 120 jobs" in page and f"array={first.pk}&amp;" in page
    last = client.get(f"/jobs/?array={first.pk}&page=3").content.decode()
    assert re.findall(rf">({first.pk}_\d+) sweep</a>", last)[-1] == f"{first.pk}_119"
    assert f"Tasks of array {first.pk} sweep" in page
    assert world.client("other_team").get(f"/jobs/?array={first.pk}").status_code == 403
    assert client.get(f"/jobs/?array={world.jobs['first'].pk}").status_code == 404
    assert client.get("/jobs/?array=x").status_code == 404


def test_cancelling_an_array_asks_first_then_cancels_every_live_task_in_the_log(
        world: World):
    tasks = submit_array(world, count=4)
    first = tasks[0]
    job_cancel(job_id=tasks[1].pk)
    client = world.client("lead")  # who may cancel a task may cancel the array
    confirm = client.get(f"/arrays/{first.pk}/cancel/").content.decode()
    assert "3 tasks of its 4" in confirm and "Yes, cancel the array" in confirm
    assert Job.objects.filter(array_id=first.pk, state=S.QUEUED).count() == 3
    response = client.post(f"/arrays/{first.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{first.pk}/"
    assert set(Job.objects.filter(array_id=first.pk).values_list("state", flat=True)) == {
        S.CANCELLED}
    rows = Transition.objects.filter(job__array_id=first.pk, reason=Reason.CANCELLED,
                                     actor_name="vision-lead")
    assert rows.count() == 3
    page = client.get(f"/jobs/{first.pk}/").content.decode()
    assert "cancelled: 3 tasks that had not ended" in page
    assert "Cancel the array…" not in page
    assert f"Cancelled with every task of array {first.pk} by vision-lead" in page
    again = client.post(f"/arrays/{first.pk}/cancel/", follow=True).content.decode()
    assert "was not cancelled" in again and "has ended already" in again


def test_nobody_cancels_an_array_they_may_not_see_and_a_plain_job_is_no_array(world: World):
    first = submit_array(world, count=2)[0]
    for role in ("teammate", "other_team", "outsider"):
        assert world.client(role).post(f"/arrays/{first.pk}/cancel/").status_code == 403
    assert set(Job.objects.filter(array_id=first.pk).values_list("state", flat=True)) == {
        S.QUEUED}
    plain = world.jobs["queued"]
    assert world.client("lead").post(f"/arrays/{plain.pk}/cancel/").status_code == 404
    second = Job.objects.get(array_id=first.pk, array_index=1)
    assert world.client("researcher").get(f"/arrays/{second.pk}/cancel/").status_code == 404
    assert world.client("researcher").get(
        f"/arrays/{first.pk}/cancel/").status_code == 200
