"""Every page for every role: who may go where (403 where a role may not), what each
page shows, and the writes (submit, cancel, quota, drain) going through the log."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command

from scheduler_app.core.states import JobState
from scheduler_app.models import Job, Node, Tenant, Transition
from tests.foundation.factories import sign_in

from .conftest import ROLES, World

pytestmark = pytest.mark.django_db

S = JobState

#: page -> roles that may see it (everyone else signed in gets 403)
PAGES = {
    "/": set(ROLES),
    "/jobs/": set(ROLES),
    "/jobs/new/": {"operator", "lead", "researcher", "teammate", "other_team"},
    "/teams/": set(ROLES),
    "/cluster/": set(ROLES),
    "/operator/": {"operator"},
    "/live/map/": set(ROLES),
    "/live/feed/": set(ROLES),
    "/live/reservations/": set(ROLES),
    "/live/queue-depth/": set(ROLES),
    "/live/fairshare/": set(ROLES),
    "/live/usage/": set(ROLES),
    "/live/team-queue/": set(ROLES),
}
#: the researcher's job "first": who may see it and its cancel page
JOB_VIEWERS = {"operator", "lead", "researcher"}


@pytest.mark.parametrize("url", [*PAGES, "/jobs/1/", "/jobs/1/cancel/"])
def test_every_page_asks_a_stranger_to_sign_in(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("role", ROLES)
def test_each_role_sees_its_pages_and_is_refused_the_others(world: World, role):
    client = world.client(role)
    for url, allowed in PAGES.items():
        expected = 200 if role in allowed else 403
        assert client.get(url).status_code == expected, (role, url)
    job = world.jobs["first"]
    for url in (f"/jobs/{job.pk}/", f"/jobs/{job.pk}/cancel/"):
        expected = 200 if role in JOB_VIEWERS else 403
        assert client.get(url).status_code == expected, (role, url)


@pytest.mark.parametrize("role", [r for r in ROLES if r != "operator"])
def test_only_operators_change_quotas_and_drain_nodes(world: World, role):
    client = world.client(role)
    node, tenant = world.nodes[2], world.vision
    rows = Transition.objects.count()
    assert client.post(f"/operator/nodes/{node.pk}/drain/").status_code == 403
    assert client.post(f"/operator/teams/{tenant.pk}/quota/", {
        f"t{tenant.pk}-guaranteed_gpus": 1, f"t{tenant.pk}-borrow_limit_gpus": 1,
    }).status_code == 403
    assert Transition.objects.count() == rows
    node.refresh_from_db()
    assert node.health == "healthy"


def test_a_refused_page_says_why_in_words(world: World):
    page = world.client("researcher").get("/operator/")
    assert page.status_code == 403
    assert "Operators only." in page.content.decode()


def test_an_unknown_job_or_section_is_not_found(world: World):
    client = world.client("operator")
    assert client.get("/jobs/999999/").status_code == 404
    assert client.get("/live/nothing/").status_code == 404


def test_a_researcher_may_not_list_another_teams_jobs(world: World):
    assert world.client("researcher").get("/jobs/?team=nlp").status_code == 403
    assert world.client("researcher").get("/jobs/?team=vision").status_code == 200


# --------------------------------------------------------------------------- homes
def test_the_researchers_home_shows_their_jobs_not_their_teammates(world: World):
    page = world.client("researcher").get("/").content.decode()
    assert "Your jobs" in page
    assert "vit-huge" in page and "vit-small" in page
    assert "sweep-a" not in page  # the teammate's job: not in the list, not in the feed
    assert 'id="sec-map"' in page and 'id="sec-feed"' in page


def test_the_leads_home_shows_fair_share_and_the_teams_jobs(world: World):
    page = world.client("lead").get("/").content.decode()
    assert 'data-chart="fairshare"' in page
    assert "sweep-a" in page and "vit-huge" in page  # every job of the team they lead
    assert "bert-large" not in page  # another team's job
    assert "vision's queue" in page


def test_the_operators_home_shows_the_cluster_and_links_to_the_controls(world: World):
    page = world.client("operator").get("/").content.decode()
    assert "Quotas and nodes" in page and 'id="sec-queue-depth"' in page
    assert "bert-large" in page  # operators see every job in the feed


def test_a_user_in_no_team_is_told_so_and_sees_the_cluster(world: World):
    page = world.client("outsider").get("/").content.decode()
    assert "You are in no team yet" in page
    assert 'id="sec-map"' in page
    assert "vit-huge" not in page  # the map and the feed never name jobs they may not see


# --------------------------------------------------------------------------- my jobs
def test_my_jobs_shows_state_position_reason_estimate_and_allocation(world: World):
    page = world.client("teammate").get("/jobs/").content.decode()
    queued = world.jobs["queued"]
    assert queued.state == S.QUEUED and queued.estimate_start_at is not None
    assert f"#{queued.pk} sweep-a" in page
    assert "in vision's queue" in page and "in the cluster" in page
    assert "Not enough free GPUs in the cluster right now." in page  # Resources, in words
    # vision holds its 16 guaranteed GPUs already: the reserved start is on borrowed
    # quota, which nlp may take back first, so it is a plan, not "at the latest"
    assert queued.estimate_kind == "borrowed"
    assert "Planned to start <time" in page and "reaches its declared limit" in page
    assert "Starts at the latest" not in page
    assert "vit-huge" not in page  # the researcher's jobs are not the teammate's


def test_a_preempted_job_says_why_it_was_chosen_and_what_it_lost(world: World):
    first = world.jobs["first"]
    assert first.preemption_times, "the fixture's story preempts vit-huge"
    wanted = world.jobs["wanted"]
    listing = world.client("researcher").get("/jobs/").content.decode()
    assert "to make room for a job of team nlp" in listing and "GPU-h of work" in listing
    page = world.client("researcher").get(f"/jobs/{first.pk}/").content.decode()
    assert "Preempted" in page and "Why this job:" in page and "What it lost:" in page
    assert "cheapest of 2 candidates" in page
    # the job it made room for is another team's: named by its team, never its id or name
    assert "\n          a job of team nlp,\n" in page
    assert "to start a job of team nlp (" in page  # the plan
    for seen in (listing, page):
        assert "bert-large" not in seen and f"job #{wanted.pk}" not in seen
    # its lead, who may see both, reads the id
    lead_page = world.client("operator").get(f"/jobs/{first.pk}/").content.decode()
    assert f"job #{wanted.pk} bert-large</a> of nlp" in lead_page


def test_the_job_page_shows_the_timeline_and_polls_itself(world: World):
    job = world.jobs["second"]
    client = world.client("researcher")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert page.count('class="h-row') == Transition.objects.filter(job=job).count()
    assert "Running: the agent on n" in page and f'hx-get="/jobs/{job.pk}/"' in page
    part = client.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert part.startswith('<div id="job-status"') and "<html" not in part


def test_the_lead_filters_the_team_jobs_and_the_list_refreshes_as_a_fragment(world: World):
    client = world.client("lead")
    page = client.get("/jobs/?state=all").content.decode()
    assert all(name in page for name in ("vit-huge", "vit-small", "sweep-a"))
    mine = client.get("/jobs/?state=all&mine=1").content.decode()
    assert "No jobs" in mine
    part = client.get("/jobs/?state=active", HTTP_HX_REQUEST="true").content.decode()
    assert part.startswith('<div id="job-table"') and "sweep-a" in part


# --------------------------------------------------------------------------- submit
def form_data(tenant: Tenant, **over: object) -> dict[str, object]:
    data: dict[str, object] = {
        "tenant": tenant.pk, "name": "llama-tiny", "command": "python train.py",
        "gpus": 8, "gpus_per_node": 8, "gpu_type": "", "priority": 0,
        "max_runtime_s": "2h", "checkpointable": "on", "checkpoint_interval_s": "30m",
        "checkpoint_time_s": "60s", "restart_s": "0", "min_gpus": "",
        "idempotency_key": "web-test-1",
    }
    data.update(over)
    return data


def test_a_researcher_submits_through_the_form_and_lands_on_the_queued_job(world: World):
    client = world.client("researcher")
    form = client.get("/jobs/new/").content.decode()
    assert 'name="idempotency_key"' in form and 'value="4h"' in form  # sane defaults
    response = client.post("/jobs/new/", form_data(world.vision))
    job = Job.objects.get(name="llama-tiny")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.state, job.owner, job.max_runtime_s, job.checkpoint_interval_s) == (
        S.QUEUED, world.users["researcher"], 7200, 1800)
    page = client.get(response["Location"]).content.decode()
    assert "submitted: it is queued" in page and 'id="job-position"' in page
    assert re.search(r"#\d+ in vision's queue, #\d+ in the cluster", page)
    # the same form sent twice (a double click) submits the job once
    client.post("/jobs/new/", form_data(world.vision))
    assert Job.objects.filter(name="llama-tiny").count() == 1


def test_the_form_sent_again_with_other_values_says_it_was_submitted_before(world: World):
    """Back, edit, Submit: the same key with another name and GPU count redirected to the
    first job with "Job #96 w1 submitted" (found by a user gaming the scheduler,
    2026-12-07). The API answers 409 idempotency_key_reused; the form says so, and its
    fresh key lets a deliberate resubmit make the new job."""
    client = world.client("researcher")
    first = client.post("/jobs/new/", form_data(world.vision, name="w1"))
    job = Job.objects.get(name="w1")
    assert first.status_code == 302
    edited = client.post("/jobs/new/", form_data(world.vision, name="w2", gpus=1,
                                                 gpus_per_node=""))
    assert edited.status_code == 400
    page = edited.content.decode()
    assert f'already submitted as <a href="/jobs/{job.pk}/">job #{job.pk} w1</a>' in page
    assert "field to fix" not in page
    assert not Job.objects.filter(name="w2").exists()
    key = re.search(r'name="idempotency_key" value="([^"]+)"', page).group(1)
    assert key.startswith("web-") and key != "web-test-1"
    again = client.post("/jobs/new/", form_data(world.vision, name="w2", gpus=1,
                                                gpus_per_node="", idempotency_key=key))
    assert again.status_code == 302
    assert Job.objects.get(name="w2").gpus == 1 and Job.objects.filter(name="w1").count() == 1
    # the same values twice (a double click) still land on the job, saying so
    twice = client.post("/jobs/new/", form_data(world.vision, name="w1"), follow=True)
    assert twice.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert f"Job #{job.pk} w1 was submitted already" in twice.content.decode()


@pytest.mark.parametrize(
    ("over", "field", "message"),
    [
        ({"name": ""}, "name", "Give the job a name of 1 to 200 characters."),
        ({"gpus": 0}, "gpus", "A job needs at least 1 GPU."),
        ({"gpus": 12, "gpus_per_node": 8}, "gpus_per_node",
         "12 GPUs cannot be split into nodes of 8."),
        ({"gpus": 16, "min_gpus": 20, "gpus_per_node": ""}, "min_gpus",
         "The elastic minimum must be between 1 and the job&#x27;s GPUs."),
        ({"max_runtime_s": "soon"}, "max_runtime_s", "Type a number with a unit (90m, 4h"),
        ({"max_runtime_s": "-5"}, "max_runtime_s",
         "Must be a positive number of seconds, or empty."),
        ({"max_runtime_s": "400d"}, "max_runtime_s", "At most 366 days."),
        # 4,301 digits made int() raise: a 500 (a researcher's session, 2026-12-07)
        ({"max_runtime_s": "-" + "9" * 4301}, "max_runtime_s",
         "Must be a positive number of seconds, or empty."),
        ({"checkpoint_time_s": "-" + "9" * 4301}, "checkpoint_time_s",
         "Must be a positive number of seconds, or empty."),
        ({"restart_s": "-" + "9" * 4301}, "restart_s",
         "Must be zero or a positive number of seconds."),
        ({"checkpoint_interval_s": "9" * 4301}, "checkpoint_interval_s", "At most 366 days."),
        ({"max_runtime_s": "9" * 4301 + "h"}, "max_runtime_s", "At most 366 days."),
        ({"gpus": 40, "gpus_per_node": 8}, "gpus",
         "This job can never run: it needs 40 GPUs; the cluster has 32."),
        ({"gpus": 48, "min_gpus": 36, "gpus_per_node": ""}, "min_gpus",
         "This job can never run: it needs 36 GPUs; the cluster has 32."),
        ({"gpus": 64, "min_gpus": 8, "gpus_per_node": ""}, "gpus",
         "This job can never run: it needs 64 GPUs at its full size; the cluster has 32."),
        ({"gpus": 16, "gpus_per_node": 16}, "gpus_per_node", "the largest node has 8"),
        ({"gpu_type": "A100"}, "gpu_type", "Select a valid choice."),
    ],
)
def test_an_invalid_form_names_the_problem_at_its_field_and_writes_nothing(
    world: World, over, field, message
):
    rows = Transition.objects.count()
    response = world.client("researcher").post("/jobs/new/", form_data(world.vision, **over))
    assert response.status_code == 400
    page = response.content.decode()
    slot = re.search(rf'<p class="field-error" id="err-{field}" role="alert">(.*?)</p>', page)
    assert slot is not None and message in slot.group(1), slot and slot.group(1)
    assert Transition.objects.count() == rows and not Job.objects.filter(name="llama-tiny")


def test_the_team_quota_is_the_services_rule_for_the_form_too(world: World):
    # nlp may hold 16 + 0: 24 GPUs fit the cluster but never the team (never_fits)
    response = world.client("other_team").post(
        "/jobs/new/", form_data(world.nlp, gpus=24, gpus_per_node=""))
    page = response.content.decode()
    assert "team nlp may hold at most 16 guaranteed + 0 borrowed = 16" in page


@pytest.mark.parametrize(("over", "admitted"), [
    ({}, True),  # checkpointable: it may borrow past vision's guarantee of 16
    ({"checkpointable": "", "preemptible": "on"}, True),
    ({"checkpointable": "", "max_runtime_s": "2h"}, True),  # within protected_borrow_max_s
    ({"checkpointable": "", "max_runtime_s": "3h"}, False),
    ({"checkpointable": "", "max_runtime_s": ""}, False),  # no limit, no team default
])
def test_the_form_lets_a_job_borrow_as_the_api_does(world: World, over, admitted):
    """The form checked whether a job could ever run on its shape alone, as if it were
    neither checkpointable nor preemptible and had no limit: every job larger than its
    team's guarantee was refused, while the API admitted it (a team lead's session,
    2026-12-07)."""
    data = form_data(world.vision, gpus=24, gpus_per_node=8, **over)
    response = world.client("researcher").post("/jobs/new/", data)
    assert (response.status_code == 302) is admitted, response.status_code
    assert Job.objects.filter(name="llama-tiny").exists() is admitted
    if not admitted:
        assert "a job that cannot be preempted" in response.content.decode()
        # and the API says the same of the same spec
        api = world.client("researcher").post("/api/v1/jobs/", {
            "tenant": "vision", "name": "x", "gpus": 24, "gpus_per_node": 8,
            "max_runtime_s": 10800 if over.get("max_runtime_s") else None},
            content_type="application/json")
        assert api.status_code == 400, api.content


def test_the_form_checks_the_per_user_cap_on_its_submitter(world: World):
    world.vision.max_gpus_per_user = 8
    world.vision.save()
    response = world.client("researcher").post("/jobs/new/", form_data(
        world.vision, gpus=16, gpus_per_node=8))
    assert response.status_code == 400
    assert "one owner of team vision may hold at most 8" in response.content.decode()
    assert not Job.objects.filter(name="llama-tiny").exists()


@pytest.mark.parametrize(("role", "url", "post"), [
    ("researcher", "/jobs/new/", {"gpus": -1, "name": ""}),
    ("researcher", "/jobs/new/", None),
    ("operator", "/operator/whatif/", None),
])
def test_every_field_is_described_by_elements_on_the_page(world: World, role, url, post):
    """Django named ``id_gpus_error`` in aria-describedby, and the error slot is
    ``err-gpus``: a screen reader never read the error (a team lead's session,
    2026-12-07). Every id an input names is on the page, its error slot among them."""
    client = world.client(role)
    page = (client.post(url, form_data(world.vision, **post)) if post is not None
            else client.get(url)).content.decode()
    ids = set(re.findall(r'\sid="([^"]+)"', page))
    described = re.findall(r'<(?:input|select|textarea)[^>]*\sname="([^"]+)"[^>]*'
                           r'aria-describedby="([^"]+)"', page)
    assert described
    for name, refs in described:
        assert set(refs.split()) <= ids, (name, set(refs.split()) - ids)
        assert f"err-{name}" in refs.split(), (name, refs)
    if post is not None:
        gpus = re.search(r'<input[^>]*name="gpus"[^>]*>', page).group(0)
        assert 'aria-invalid="true"' in gpus and "err-gpus" in gpus


def test_a_researcher_cannot_submit_to_a_team_they_are_not_in(world: World):
    response = world.client("researcher").post("/jobs/new/", form_data(world.nlp))
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert not Job.objects.filter(name="llama-tiny").exists()


def test_the_live_check_reports_only_the_fields_already_touched(world: World):
    data = form_data(world.vision, name="", gpus=12, gpus_per_node=8, _touched="gpus_per_node")
    page = world.client("researcher").post("/jobs/new/check/", data).content.decode()
    slots = dict(re.findall(r'id="err-(\w+)" role="alert" hx-swap-oob="true">(.*?)</p>', page))
    assert slots["gpus_per_node"] == "12 GPUs cannot be split into nodes of 8."
    assert slots["name"] == ""  # not touched yet: no complaint about the empty name
    assert not Job.objects.filter(gpus=12).exists()


# --------------------------------------------------------------------------- cancel
def test_cancel_asks_for_confirmation_then_cancels_through_the_log(world: World):
    job = world.jobs["queued"]
    client = world.client("teammate")
    confirm = client.get(f"/jobs/{job.pk}/cancel/").content.decode()
    assert "Yes, cancel the job" in confirm and "It holds no GPUs" in confirm
    job.refresh_from_db()
    assert job.state == S.QUEUED  # asking changes nothing
    response = client.post(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == S.CANCELLED
    row = Transition.objects.filter(job=job).last()
    assert (row.to_state, row.actor_name) == (S.CANCELLED, "vision-r2")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "cancelled" in page and "Cancel job…" not in page
    # a second tab's confirm: it said "illegal transition CANCELLED -> CANCELLED (CANCELLED
    # is final)" until 2026-12-07 (a team lead's session)
    again = client.post(f"/jobs/{job.pk}/cancel/", follow=True).content.decode()
    assert (f"Job #{job.pk} had already ended (CANCELLED): there is nothing to cancel."
            in again)
    assert "illegal transition" not in again and "was not cancelled" not in again
    assert Transition.objects.filter(job=job).last() == row  # nothing written


def test_a_running_jobs_cancel_page_says_what_it_gives_back(world: World):
    job = world.jobs["second"]
    confirm = world.client("lead").get(f"/jobs/{job.pk}/cancel/").content.decode()
    assert "It holds 16 GPUs" in confirm


def test_nobody_cancels_a_job_they_may_not_see(world: World):
    job = world.jobs["queued"]
    for role in ("researcher", "other_team", "outsider"):
        assert world.client(role).post(f"/jobs/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == S.QUEUED


# --------------------------------------------------------------------------- operator
def test_an_operator_changes_a_quota_through_the_log_and_the_feed_shows_it(world: World):
    client = world.client("operator")
    t = world.nlp
    response = client.post(f"/operator/teams/{t.pk}/quota/", {
        f"t{t.pk}-guaranteed_gpus": 12, f"t{t.pk}-borrow_limit_gpus": 4,
    }, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and response["HX-Trigger"] == "cluster-changed"
    assert "Saved: Team nlp: 12 guaranteed + 4 borrow limit." in response.content.decode()
    t.refresh_from_db()
    assert (t.guaranteed_gpus, t.borrow_limit_gpus) == (12, 4)
    row = Transition.objects.filter(kind="tenant", tenant=t).last()
    assert row.detail["after"] == {"guaranteed_gpus": 12, "borrow_limit_gpus": 4}
    feed = world.client("researcher").get("/live/feed/").content.decode()
    assert "Team nlp quota set to 12 guaranteed + 4 borrow (was 16 + 0) by op." in feed


def test_a_bad_quota_is_refused_at_its_field_and_writes_nothing(world: World):
    client = world.client("operator")
    t = world.nlp
    rows = Transition.objects.count()
    page = client.post(f"/operator/teams/{t.pk}/quota/", {
        f"t{t.pk}-guaranteed_gpus": -1, f"t{t.pk}-borrow_limit_gpus": 4,
    }, HTTP_HX_REQUEST="true").content.decode()
    assert "Guaranteed GPUs: Must be a whole number of GPUs, 0 or more (at most " \
        "1,000,000)." in page
    # the refused input says so and points at the message (an operator's session found
    # no aria-invalid there, which dashboard.md promises for every error)
    refused = re.search(rf'<input [^>]*name="t{t.pk}-guaranteed_gpus"[^>]*>', page).group(0)
    assert 'aria-invalid="true"' in refused
    assert f'aria-describedby="quota-note-{t.pk}"' in refused
    fine = re.search(rf'<input [^>]*name="t{t.pk}-borrow_limit_gpus"[^>]*>', page).group(0)
    assert "aria-invalid" not in fine
    # past what storage holds: the same words, not Django's bound (found 2026-12-07)
    page = client.post(f"/operator/teams/{t.pk}/quota/", {
        f"t{t.pk}-guaranteed_gpus": 10**30, f"t{t.pk}-borrow_limit_gpus": 4,
        f"t{t.pk}-max_gpus_per_user": 10**30,
    }, HTTP_HX_REQUEST="true").content.decode()
    assert "2147483647" not in page
    assert "Must be a whole number of GPUs, 0 or more (at most 1,000,000)." in page
    assert "Must be a whole number of GPUs from 1 to 1,000,000, or empty" in page
    # one unreadable box and two bad values: all three said at once, as the API does
    # (only "Enter a whole number." was said: an operator's session, 2026-12-07)
    page = client.post(f"/operator/teams/{t.pk}/quota/", {
        f"t{t.pk}-guaranteed_gpus": 8, f"t{t.pk}-borrow_limit_gpus": -5,
        f"t{t.pk}-max_gpus_per_user": -3, f"t{t.pk}-max_runtime_s": "x",
    }, HTTP_HX_REQUEST="true").content.decode()
    assert "Borrow limit (GPUs): Must be a whole number of GPUs, 0 or more" in page
    assert "Must be a whole number of GPUs from 1 to 1,000,000, or empty" in page
    assert "Enter a whole number." in page
    assert Transition.objects.count() == rows


def test_a_guarantee_past_the_cluster_is_refused_at_its_field_on_the_operator_page(
        world: World):
    client = world.client("operator")
    t = world.nlp
    rows = Transition.objects.count()
    page = client.post(f"/operator/teams/{t.pk}/quota/", {
        f"t{t.pk}-guaranteed_gpus": 100_000, f"t{t.pk}-borrow_limit_gpus": 0,
    }, HTTP_HX_REQUEST="true").content.decode()
    assert "The guarantees would add up to 100,016 GPUs; the cluster has 32" in page
    assert Transition.objects.count() == rows
    t.refresh_from_db()
    assert t.guaranteed_gpus == 16


def test_the_operator_page_says_when_down_nodes_leave_the_guarantees_oversubscribed(
        world: World):
    client = world.client("operator")
    assert "oversubscribed" not in client.get("/operator/").content.decode()
    from scheduler_app.services.cluster import node_mark_down

    node_mark_down(node=world.nodes[0], actor_name="op", why="PSU")
    page = client.get("/operator/").content.decode()
    assert "32 of 32 GPUs guaranteed" in page
    assert ("oversubscribed while nodes are down or draining: only 24 GPUs are healthy"
            in page)


def test_an_operator_drains_and_undrains_a_node_and_the_map_shows_it(world: World):
    client = world.client("operator")
    node = world.nodes[3]
    response = client.post(f"/operator/nodes/{node.pk}/drain/", {"why": "fan replacement"},
                           HTTP_HX_REQUEST="true")
    assert response["HX-Trigger"] == "cluster-changed"
    assert "Undrain n3" in response.content.decode()
    node.refresh_from_db()
    assert node.health == "draining"
    row = Transition.objects.filter(kind="node", node=node).last()
    assert (row.from_state, row.to_state, row.actor_name) == ("healthy", "draining", "op")
    assert row.detail["why"] == "fan replacement"  # the operator's reason is in the log
    map_page = world.client("researcher").get("/live/map/").content.decode()
    assert re.search(rf'id="node-{node.pk}" class="node draining"', map_page)
    feed = client.get("/live/feed/").content.decode()
    assert "Node n3 drained by op" in feed
    again = client.post(f"/operator/nodes/{node.pk}/drain/", {"why": "again"},
                        follow=True).content.decode()
    assert "node n3 is draining: cannot drain it" in again
    # and in words for the other moves ("cannot up it" until 2026-12-07)
    up = client.post(f"/operator/nodes/{Node.objects.get(name='n2').pk}/up/", follow=True)
    assert "node n2 is healthy: cannot mark it up" in up.content.decode()
    client.post(f"/operator/nodes/{node.pk}/undrain/")
    node.refresh_from_db()
    assert node.health == "healthy"


def test_a_down_node_can_be_marked_up_from_the_operator_page(world: World):
    from scheduler_app.services.cluster import node_mark_down

    node = world.nodes[3]
    node_mark_down(node=node, actor_name="op", why="disk")
    page = world.client("operator").get("/operator/").content.decode()
    assert f"Mark {node.name} up" in page
    world.client("operator").post(f"/operator/nodes/{node.pk}/up/")
    node.refresh_from_db()
    assert node.health == "healthy"


def test_the_node_action_is_one_of_the_services_moves(world: World):
    node = world.nodes[0]
    assert world.client("operator").post(f"/operator/nodes/{node.pk}/explode/").status_code \
        == 404


# --------------------------------------------------------------------------- the rest
def test_the_fair_share_page_shows_every_team_borrowing_and_reclaims(world: World):
    page = world.client("researcher").get("/teams/").content.decode()
    assert 'id="fairshare-data"' in page and 'id="usage-data"' in page
    for name in ("vision", "nlp"):
        assert f">{name}</span>" in page
    assert "Taken back in the last day" in page
    assert re.search(r"nlp</span> preempted 1 job \(16 GPUs\) of <span[^>]*>vision", page)


def test_the_cluster_page_shows_reservations_with_their_basis(world: World):
    page = world.client("researcher").get("/cluster/").content.decode()
    assert "GPUs reserved" in page and "reaches its declared limit" in page
    # the seeded reservation is vision's, beyond its guarantee: nlp may take it back first,
    # so it is shown as a plan, not as a bound
    assert "GPUs reserved on borrowed quota" in page and "planned to start" in page
    assert "starts at the latest" not in page
    # the teammate's job is planned too: shown by its team and size, not its name
    assert "sweep-a" not in page and "a job" in page


def test_the_seeded_demo_renders_for_every_demo_role(client):
    call_command("seed_demo", "--password", "pw-for-tests-1", stdout=StringIO())
    for username in ("operator", "pretrain-lead", "pretrain-r1"):
        assert sign_in(client, username, "pw-for-tests-1")
        for url in ("/", "/jobs/", "/teams/", "/cluster/"):
            assert client.get(url).status_code == 200, (username, url)
        client.logout()
    assert Node.objects.count() == 48


def test_a_poll_after_the_session_ended_sends_the_page_to_the_sign_in_form(client):
    response = client.get("/live/map/", HTTP_HX_REQUEST="true",
                          HTTP_HX_CURRENT_URL="http://testserver/cluster/")
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/login/?next=%2Fcluster%2F"


def test_an_operator_sets_the_team_limits_on_the_quota_row(world: World):
    client = world.client("operator")
    t = world.nlp
    p = f"t{t.pk}-"
    response = client.post(f"/operator/teams/{t.pk}/quota/", {
        f"{p}guaranteed_gpus": 16, f"{p}borrow_limit_gpus": 0, f"{p}max_gpus_per_user": 8,
        f"{p}default_runtime_s": 600, f"{p}max_runtime_s": 3600,
    }, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    t.refresh_from_db()
    assert (t.max_gpus_per_user, t.default_runtime_s, t.max_runtime_s) == (8, 600, 3600)
    assert Transition.objects.filter(kind="tenant", tenant=t).last().detail["after"] == {
        "guaranteed_gpus": 16, "borrow_limit_gpus": 0, "max_gpus_per_user": 8,
        "default_runtime_s": 600, "max_runtime_s": 3600}
    # the quota alone (a page without the limits) keeps them; an empty one clears it
    client.post(f"/operator/teams/{t.pk}/quota/", {
        f"{p}guaranteed_gpus": 12, f"{p}borrow_limit_gpus": 0}, HTTP_HX_REQUEST="true")
    client.post(f"/operator/teams/{t.pk}/quota/", {
        f"{p}guaranteed_gpus": 12, f"{p}borrow_limit_gpus": 0, f"{p}default_runtime_s": ""},
        HTTP_HX_REQUEST="true")
    t.refresh_from_db()
    assert (t.max_gpus_per_user, t.default_runtime_s, t.max_runtime_s) == (8, None, 3600)


def test_a_bad_team_limit_is_refused_at_its_field_and_writes_nothing(world: World):
    t = world.nlp
    rows = Transition.objects.count()
    page = world.client("operator").post(f"/operator/teams/{t.pk}/quota/", {
        f"t{t.pk}-guaranteed_gpus": 16, f"t{t.pk}-borrow_limit_gpus": 0,
        f"t{t.pk}-max_gpus_per_user": -2,
    }, HTTP_HX_REQUEST="true").content.decode()
    assert "GPUs per user: Must be a whole number of GPUs from 1" in page
    assert Transition.objects.count() == rows


def test_the_job_form_refuses_a_limit_over_the_team_max(world: World):
    t = world.vision
    t.max_runtime_s = 3600
    t.save(update_fields=["max_runtime_s"])
    response = world.client("researcher").post(
        "/jobs/new/", form_data(world.vision, max_runtime_s="7200s"))
    assert response.status_code == 400
    page = response.content.decode()
    slot = re.search(r'<p class="field-error" id="err-max_runtime_s" role="alert">(.*?)</p>',
                     page)
    assert slot is not None and "3,600" in slot.group(1) and "7,200" in slot.group(1)
    assert not Job.objects.filter(name="llama-tiny").exists()


def test_the_job_page_says_a_limit_came_from_the_team_default(world: World):
    job = world.jobs["queued"]
    Job.objects.filter(pk=job.pk).update(max_runtime_s=900, runtime_from_team_default=True)
    page = world.client("teammate").get(f"/jobs/{job.pk}/").content.decode()
    assert "the team&#x27;s default: the job declared none" in page or \
        "the team's default: the job declared none" in page


@pytest.mark.parametrize(("typed", "seconds"), [
    ("90m", 5400), ("1h30m", 5400), ("1H30M", 5400), ("1:30:00", 5400), ("90:00", 5400),
    ("2-00:00:00", 172800), ("1-12", 129600), ("45s", 45), ("2d", 172800),
])
def test_the_forms_durations_read_as_gpuqs_do(typed, seconds):
    from dashboard.forms import SecondsField

    assert SecondsField(bare_seconds=False).clean(typed) == seconds
    assert SecondsField().clean(typed) == seconds


@pytest.mark.parametrize(("typed", "says"), [
    ("1-25", "hours after the days go from 0 to 23"),
    ("1:75:00", "minutes go from 0 to 59"),
    ("10:99", "seconds go from 0 to 59"),
    ("١h", "Type a number with a unit"),  # Arabic-Indic one: int() reads it, gpuq refuses
    ("١٢٠", "Type a number with a unit"),
])
def test_the_forms_durations_keep_gpuqs_bounds_and_ascii_digits(typed, says):
    """As gpuq.timefmt since 2026-12-07: '1-25' was 176,400 s here, '١h' an hour."""
    from django.core.exceptions import ValidationError

    from dashboard.forms import SecondsField

    for field in (SecondsField(bare_seconds=False), SecondsField()):
        with pytest.raises(ValidationError, match=says):
            field.clean(typed)
    assert SecondsField().clean("48:00:00") == 172800  # the leading field stays open


#: what people type for a duration: gpuq reads some and refuses the others
DURATIONS_TYPED = [
    "90m", "4h", "2d", "45s", "1h30m", "1d12h", "1H30M", " 2h ", "1:30:00", "90:00",
    "2-00:00:00", "1-12", "1-12:30", "0s", "3600",
    "1h 30m", "1.5h", "0.5d", "90 m", "90min", "90sec", "1 h", "h", "m30", "1h30", "1-25",
    "1:75:00", "١h", "١٢٠", "1:30:00 ", "+5m", "5e2s", "",
]


@pytest.mark.parametrize("typed", DURATIONS_TYPED)
def test_the_form_reads_or_refuses_a_duration_as_gpuq_does(typed):
    """The form read "1h 30m", "1.5h" (5400 s) and "90min", which gpuq refuses as not a
    duration (2026-12-07): the same text is now the same seconds in both, or refused by
    both (a bare number is seconds where gpuq's bare_seconds says so)."""
    from django.core.exceptions import ValidationError
    from gpuq.timefmt import parse_duration

    from dashboard.forms import SecondsField

    for bare in (False, True):
        try:
            theirs: int | None = parse_duration(typed, bare_seconds=bare)
        except ValueError:
            theirs = None
        try:
            ours = SecondsField(bare_seconds=bare).clean(typed)
        except ValidationError:
            ours = None
        if typed.strip() == "":
            theirs = None  # an empty field is no value (gpuq has no empty flag)
        assert ours == theirs, (typed, bare)


def test_a_duration_gpuq_refuses_is_refused_at_its_field_and_nothing_is_written(world: World):
    response = world.client("researcher").post(
        "/jobs/new/", form_data(world.vision, max_runtime_s="1.5h",
                                checkpoint_interval_s="1h 30m"))
    assert response.status_code == 400
    page = response.content.decode()
    assert "1.5h is not a duration. Type a number with a unit (90m, 4h, 1h30m, 2d; whole " \
           "numbers, no spaces)" in page
    assert "1h 30m is not a duration" in page
    assert "2 fields to fix below" in page
    assert not Job.objects.filter(name="llama-tiny").exists()


@pytest.mark.parametrize("typed", ["٨", "8.0", "1e1", "８"])
def test_a_number_field_takes_ascii_digits_only_as_gpuq_does(world: World, typed):
    """Django's IntegerField read "٨" (Arabic-Indic eight) and "8.0" as 8; gpuq's
    fields.integer refuses both."""
    from gpuq.fields import integer

    with pytest.raises(ValueError, match="expected a whole number"):
        integer(typed)
    response = world.client("researcher").post("/jobs/new/", form_data(world.vision, gpus=typed))
    assert response.status_code == 400
    assert 'id="err-gpus" role="alert">Enter a whole number.' in response.content.decode()
    assert not Job.objects.filter(name="llama-tiny").exists()


@pytest.mark.parametrize(("slice_gpus", "says", "never_says"), [
    (0, "keeps no interactive slice (interactive_reserved_gpus is 0): the job is scheduled, "
        "and may be preempted, like any other.", "never preempted"),
    (8, "Runs in the interactive slice when it fits there, and is never preempted there; too "
        "large for it, or with the slice full, it runs outside it and may be preempted",
     "Never preempted;"),
])
def test_the_interactive_box_says_what_it_protects_on_this_cluster(
        world: World, settings, slice_gpus, says, never_says):
    """The help said "Never preempted; uses the interactive slice." on a cluster with no
    slice, where an interactive job is preempted like any other (design.md)."""
    settings.SCHEDULER_CONFIG = {**settings.SCHEDULER_CONFIG,
                                 "interactive_reserved_gpus": slice_gpus}
    page = world.client("researcher").get("/jobs/new/").content.decode().replace("&#x27;", "'")
    assert says in page and never_says not in page


def test_a_bare_number_is_refused_as_a_time_limit_but_is_seconds_elsewhere(world: World):
    # a Slurm user's "90" made a job that failed after 90 s (found 2026-12-07)
    from django.core.exceptions import ValidationError

    from dashboard.forms import SecondsField

    with pytest.raises(ValidationError, match="90 has no unit: Slurm reads a bare number"):
        SecondsField(bare_seconds=False).clean("90")
    assert SecondsField().clean("90") == 90
    response = world.client("researcher").post(
        "/jobs/new/", form_data(world.vision, max_runtime_s="90"))
    assert response.status_code == 400
    assert "Type 90m, 90s or 1:30:00" in response.content.decode()
    assert not Job.objects.filter(name="llama-tiny").exists()


def test_a_page_the_locked_database_refused_is_a_503_with_retry_after(world: World,
                                                                       monkeypatch):
    """SQLite's "database is locked" (a bulk submit held the one write lock past the busy
    timeout) was a 500 page: it is a 503 saying a retry will do (2026-12-07)."""
    from django.db import OperationalError

    from scheduler_app.selectors import dashboard as selectors

    def locked(**_kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(selectors, "jobs_visible", locked)
    response = world.client("researcher").get("/jobs/")
    assert response.status_code == 503 and response["Retry-After"] == "2"
    assert "The database is busy with another write" in response.content.decode()



def lost_words(page: str) -> str:
    """The job page's "What it lost" paragraph, in words."""
    part = page.split('id="job-lost"')[1].split("</p>")[0]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", part.split(">", 1)[1]))


def test_a_stopped_victim_shows_the_work_it_really_lost_not_the_estimate(
        stopping_world: World):
    """Found by a user session (2026-12-07): a victim that wrote its checkpoint when asked
    to stop was shown "2 min 22 s of work and restart, 1.26 GPU-h" (the estimate weighed
    when it was chosen, restart included) as the work it lost; it had lost none."""
    from scheduler_app.models import Allocation
    from scheduler_app.services.agents import agent_report_checkpoint, agent_report_exit

    world = stopping_world
    first = world.jobs["first"]
    assert first.state == JobState.PREEMPT_REQUESTED
    client = world.client("researcher")
    page = client.get(f"/jobs/{first.pk}/").content.decode()
    # still stopping: what was weighed when it was chosen, as an estimate, not a loss
    assert lost_words(page).startswith("What it may lose: at most ")
    assert "it may lose up to " in client.get("/jobs/").content.decode()
    node = Allocation.objects.filter(job=first, end__isnull=True).select_related("node")[0].node
    agent_report_checkpoint(node=node, job=first, resume_pointer="s3://ckpt/vit-huge/9",
                            checkpoint_at=world.at(3620))
    agent_report_exit(node=node, job=first, outcome="preempted", at=world.at(3629))
    lost = lost_words(client.get(f"/jobs/{first.pk}/").content.decode())
    # 9 s between the checkpoint and the stop, on 16 GPUs: 144 GPU-s = 0.04 GPU-h
    assert lost.startswith("What it lost: 9 s of work on 16 GPUs, 0.04 GPU-h: the work since "
                           "its last checkpoint")
    assert "resumes from that checkpoint" in lost and "(Weighed when it was chosen: " in lost
    listing = client.get("/jobs/").content.decode()
    assert "it lost 0.04 GPU-h of work" in listing and "may lose" not in listing


def test_a_victim_killed_without_a_checkpoint_lost_its_whole_run(world: World):
    first = world.jobs["first"]  # confirmed at 80 s, killed at 3,665 s (grace expired)
    page = world.client("researcher").get(f"/jobs/{first.pk}/").content.decode()
    lost = lost_words(page)
    # 3,585 s on 16 GPUs = 15.93 GPU-h
    assert lost.startswith("What it lost: 59 min 45 s of work on 16 GPUs, 15.93 GPU-h: it "
                           "stopped at ")
    assert "with no checkpoint written in that run, which is lost whole" in lost
