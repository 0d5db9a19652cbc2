"""The dashboard in a real browser: Playwright driving Debian's Chromium
(/usr/bin/chromium; `.ci/run` installs it; no browser download) against a live server.

One browser for the module; each test signs in on a fresh context. The scheduler does
not run on its own here: a test ticks the leader and plays the node agent itself, from
its own thread, while the page's htmx polling brings the change in.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from dashboard.demo import SimulatedAgents
from scheduler_app.models import Job, Membership, Node, Pod
from scheduler_app.services import job_submit
from scheduler_app.services.agents import agent_report_exit
from scheduler_app.services.leader import LeaderLoop
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import NodeFactory, TenantFactory

from . import BROWSER_MARKS

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=10_000)

PASSWORD = "pw-for-browser-tests"
TIMEOUT_MS = 10_000

pytestmark = BROWSER_MARKS  # the browser and fast polling: conftest.py


@pytest.fixture
def cluster():
    """One pod of two 8-GPU nodes. vision (16 + 16) and nlp (16 + 16); nlp runs a 16-GPU
    job that cannot be preempted and declares a one-hour limit: the cluster is full."""
    pod = Pod.objects.create(name="pod0")
    nodes = [NodeFactory(name=f"n{i}", pod=pod) for i in range(2)]
    vision = TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)
    nlp = TenantFactory(name="nlp", guaranteed_gpus=16, borrow_limit_gpus=16)
    User = get_user_model()
    users = {
        "researcher": User.objects.create_user("vision-r1", password=PASSWORD),
        "lead": User.objects.create_user("vision-lead", password=PASSWORD),
        "operator": User.objects.create_user("op", password=PASSWORD, is_staff=True),
    }
    Membership.objects.create(user=users["researcher"], tenant=vision, role="researcher")
    Membership.objects.create(user=users["lead"], tenant=vision, role="lead")
    loop = LeaderLoop(holder="browser-test", ttl_s=60, heartbeat_timeout_s=0)
    blocker = job_submit(tenant=nlp, name="blocker", gpus=16, gpus_per_node=8,
                         max_runtime_s=3600, at=now_s() - timedelta(minutes=10))
    loop.step()
    agents = SimulatedAgents(start_delay_s=0, heartbeat_s=0)
    agents.step()
    blocker.refresh_from_db()
    assert blocker.state == "RUNNING"
    return {"nodes": nodes, "vision": vision, "users": users, "loop": loop,
            "agents": agents, "blocker": blocker}


def sign_in(browser, live_server, username: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text(username, exact=False).first).to_be_visible()
    return context, page


def test_a_researcher_submits_sees_position_and_estimate_then_running(
    browser, live_server, cluster
):
    context, page = sign_in(browser, live_server, "vision-r1")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Submit").click()
    page.get_by_label("Name").fill("browser-run")
    page.get_by_label("Command").fill("python train.py")  # an empty command is refused
    page.get_by_label("GPUs", exact=True).fill("8")
    page.get_by_label("GPUs per node").fill("8")
    page.get_by_label("Time limit").fill("30m")
    page.get_by_role("button", name="Submit", exact=True).click()

    expect(page.locator("#job-state")).to_have_text("queued")
    expect(page.locator("#job-position")).to_contain_text("#1 in vision's queue")
    job = Job.objects.get(name="browser-run")
    assert job.state == "QUEUED" and job.owner == cluster["users"]["researcher"]

    cluster["loop"].step()  # the tick plans its start: the blocker's declared limit
    # the blocker is another team's job: named by its team, not its id
    assert cluster["blocker"].tenant.name == "nlp"
    expect(page.locator("#job-estimate")).to_contain_text(
        "when a job of team nlp reaches its declared limit")
    expect(page.locator("#job-estimate")).not_to_contain_text(f"#{cluster['blocker'].pk}")
    expect(page.locator("#job-estimate time")).to_have_count(2)  # the start, in the basis

    node = Node.objects.get(name="n0")
    agent_report_exit(node=node, job=cluster["blocker"], outcome="completed", exit_code=0)
    cluster["loop"].step()  # the tick places it on the freed GPUs
    cluster["agents"].step()  # its node's agent confirms the start
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.locator("#job-alloc")).to_contain_text("GPUs 0-7")
    expect(page.locator(".h-row")).to_have_count(4)  # submitted, queued, placing, running
    context.close()


def test_an_invalid_form_shows_the_message_at_the_field(browser, live_server, cluster):
    context, page = sign_in(browser, live_server, "vision-r1")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Name").fill("bad-shape")
    page.get_by_label("GPUs", exact=True).fill("12")
    page.get_by_label("GPUs per node").fill("8")
    page.get_by_label("Priority").focus()  # leaving the field commits it: the live check
    error = page.locator("#err-gpus_per_node")
    expect(error).to_have_text("12 GPUs cannot be split into nodes of 8.")
    expect(page.locator("#err-name")).to_have_text("")  # a good field says nothing
    expect(page.get_by_label("GPUs per node")).to_have_attribute("aria-invalid", "true")

    page.get_by_label("GPUs", exact=True).fill("64")
    page.get_by_role("button", name="Submit", exact=True).click()  # submitted anyway
    expect(page.locator("#form-errors")).to_contain_text("The job was not submitted")
    expect(page.locator("#err-gpus")).to_have_text(
        "This job can never run: it needs 64 GPUs; the cluster has 16.")
    assert not Job.objects.filter(name="bad-shape").exists()
    context.close()


def test_a_researcher_submits_an_array_through_the_form_and_sees_its_tasks(
    browser, live_server, cluster
):
    # a researcher's job may wait only for jobs they may see: their own
    prep = job_submit(tenant=cluster["vision"], owner=cluster["users"]["researcher"],
                      name="prep", gpus=1, max_runtime_s=600)
    context, page = sign_in(browser, live_server, "vision-r1")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Name").fill("browser-sweep")
    page.get_by_label("Command").fill("python sweep.py")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.get_by_label("Waits for").fill(f"afterany:{prep.pk}")
    page.get_by_label("Tasks", exact=True).fill("3")
    page.get_by_label("At most at once").fill("2")
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.locator("#job-task")).to_be_visible()  # the first task's page
    first = Job.objects.get(name="browser-sweep", array_index=0)
    expect(page.locator("#job-task")).to_have_text(f"{first.pk}_0")
    expect(page.locator("#job-array-place")).to_have_text(
        f"Task {first.pk}_0: task 1 of 3, at most 2 at once.")
    expect(page.locator("#job-dependencies")).to_contain_text("ends")
    assert Job.objects.filter(array_id=first.pk).count() == 3
    page.locator("#job-array-tasks").click()
    expect(page.get_by_role("heading", name=f"Tasks of array {first.pk} browser-sweep")
           ).to_be_visible()
    expect(page.locator("a.job-name")).to_have_text(
        [f"{first.pk}_{i} browser-sweep" for i in range(3)])
    context.close()


def test_back_then_submit_makes_no_second_job(browser, live_server, cluster):
    """Submit, the browser's Back, Submit: Back fetched /jobs/new/ again with a new
    idempotency key and Chromium restored what was typed, never a hidden input's value, so
    the second Submit made a copy of the job, silently (2026-12-07). The key now comes
    back with the values: unedited, the form is the job already made; edited, it says it
    was already submitted and submits nothing, and Submit once more makes the new job."""
    context, page = sign_in(browser, live_server, "vision-r1")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Name").fill("back-twice")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.get_by_label("Time limit").fill("30m")
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.locator("#job-state")).to_have_text("queued")
    job = Job.objects.get(name="back-twice")

    page.go_back()
    expect(page.get_by_label("Name")).to_have_value("back-twice")  # restored by Chromium
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.get_by_text(f"Job #{job.pk} back-twice was submitted already")).to_be_visible()
    assert Job.objects.filter(name="back-twice").count() == 1

    page.go_back()  # the form again, with what it was submitted with
    expect(page.get_by_label("Name")).to_have_value("back-twice")
    page.get_by_label("GPUs", exact=True).fill("2")  # an edit
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.get_by_role("alert").filter(has_text="already submitted as")).to_contain_text(
        f"job #{job.pk} back-twice")
    assert Job.objects.filter(name="back-twice").count() == 1
    page.get_by_role("button", name="Submit", exact=True).click()  # as the message says
    expect(page.locator("#job-state")).to_have_text("queued")
    assert sorted(Job.objects.filter(name="back-twice").values_list("gpus", flat=True)) == [1, 2]
    context.close()


def test_a_lead_sees_the_fair_share_chart(browser, live_server, cluster):
    context, page = sign_in(browser, live_server, "vision-lead")
    chart = page.locator("canvas#fairshare-chart")
    expect(chart).to_be_visible()
    expect(chart).to_have_attribute("data-drawn", "1")  # Chart.js drew it
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 150
    drawn = page.evaluate(
        "() => Chart.getChart(document.getElementById('fairshare-chart')).data.labels")
    assert drawn == ["nlp", "vision"]
    page.get_by_role("link", name="Fair share").click()
    expect(page.locator("canvas#usage-chart")).to_have_attribute("data-drawn", "1")
    expect(page.get_by_text("Nobody borrows")).to_be_visible()  # nlp holds its guarantee
    context.close()


def test_an_operator_drains_a_node_and_sees_it_on_the_map(browser, live_server, cluster):
    context, page = sign_in(browser, live_server, "op")
    page.get_by_role("link", name="Operator").click()
    node = cluster["nodes"][1]
    on_map = page.locator(f"#node-{node.pk}")
    expect(on_map).to_have_attribute("data-health", "healthy")
    row = page.locator(f"#noderow-{node.pk}")
    row.get_by_text("Drain…").click()  # draining asks first, and for a reason
    row.get_by_label(f"Why drain {node.name}?").fill("fan replacement")
    page.get_by_role("button", name=f"Drain {node.name}").click()
    expect(page.get_by_role("button", name=f"Undrain {node.name}")).to_be_visible()
    expect(on_map).to_have_attribute("data-health", "draining")
    expect(on_map).to_contain_text("draining")
    expect(page.locator("#sec-feed")).to_contain_text(
        f"Node {node.name} drained by op: it keeps its jobs and takes no new ones "
        "(fan replacement)")
    node.refresh_from_db()
    assert node.health == "draining"
    page.goto(f"{live_server.url}/cluster/")  # and in every other page's map
    expect(page.locator(f"#node-{node.pk}")).to_have_class(re.compile(r"\bdraining\b"))
    context.close()


def test_the_operator_page_refreshes_held_and_free_gpus_on_its_own(
    browser, live_server, cluster
):
    context, page = sign_in(browser, live_server, "op")
    page.goto(f"{live_server.url}/operator/")
    nlp = cluster["blocker"].tenant
    held = page.locator(f"#quota-{nlp.pk} td[data-label='held']")
    expect(held).to_have_text("16")
    node = Node.objects.get(name="n0")
    expect(page.locator(f"#noderow-{node.pk} td[data-label='free']")).to_have_text("0 / 8")
    agent_report_exit(node=node, job=cluster["blocker"], outcome="completed", exit_code=0)
    expect(held).to_have_text("0")  # the poll brought it in, no reload
    expect(page.locator(f"#noderow-{node.pk} td[data-label='free']")).to_have_text("8 / 8")
    # typing a quota holds the refresh back: what is typed stays, under the production
    # Content-Security-Policy too (conftest), which forbade the hx-trigger filter that
    # did it: the page then swapped at every poll (found 2026-12-07)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    box = page.locator(f"#quota-{nlp.pk} input[type=number]").first
    box.fill("20")
    page.wait_for_timeout(2500)
    expect(box).to_have_value("20")
    box.blur()  # typed and not saved: still held
    page.wait_for_timeout(2500)
    expect(box).to_have_value("20")
    # a drain form opened and a reason typed stay too, while the polls go by
    other = Node.objects.get(name="n1")
    row = page.locator(f"#noderow-{other.pk}")
    row.get_by_text("Drain…").click()
    reason = row.get_by_label(f"Why drain {other.name}?")
    reason.fill("fan replacement")
    page.wait_for_timeout(2500)
    expect(reason).to_be_visible()
    expect(reason).to_have_value("fan replacement")
    assert errors == [], errors
    context.close()


def test_a_quota_saved_or_refused_says_so_through_the_refreshes(browser, live_server, cluster):
    """The answer to a save vanished: the section's refresh after the save wiped "Saved"
    within 0.2 s, and a refusal went at the next poll with the field quietly back at its
    old value (found 2026-12-07). The answer stays 15 s; a refused value stays with its
    error until the operator changes it."""
    context, page = sign_in(browser, live_server, "op")
    page.goto(f"{live_server.url}/operator/")
    nlp = cluster["blocker"].tenant
    row = page.locator(f"#quota-{nlp.pk}")
    row.get_by_label("Guaranteed").fill("12")
    row.get_by_role("button", name="Save").click()
    note = page.locator(f"#quota-note-{nlp.pk}")
    expect(note).to_contain_text("Saved: Team nlp: 12 guaranteed + 16 borrow limit.")
    page.wait_for_timeout(2500)  # the refresh the save asked for, and polls after it
    expect(note).to_contain_text("Saved: Team nlp: 12 guaranteed")
    row = page.locator(f"#quota-{nlp.pk}")
    row.get_by_label("Borrow limit").fill("-1")
    row.get_by_role("button", name="Save").click()
    expect(note).to_contain_text("Borrow limit (GPUs): Must be a whole number")
    expect(note).not_to_contain_text("Saved")
    page.locator("body").click(position={"x": 5, "y": 5})  # focus leaves the row
    page.wait_for_timeout(2500)
    expect(note).to_contain_text("Borrow limit (GPUs): Must be a whole number")
    expect(page.locator(f"#quota-{nlp.pk}").get_by_label("Borrow limit")).to_have_value("-1")
    nlp.refresh_from_db()
    assert (nlp.guaranteed_gpus, nlp.borrow_limit_gpus) == (12, 16)
    context.close()
