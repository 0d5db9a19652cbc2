"""Every page of every role in a real browser, on the demo cluster (3 pods of 16 nodes,
six teams, long names): it fits a 390 px phone, logs no console error, the map's node
panel opens on click (and on tap), and the lead's "where it stands" column is in view on
a 1440 px screen without scrolling sideways.

Playwright drives Debian's Chromium (/usr/bin/chromium); no browser download.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from dashboard.demo import SimulatedAgents
from scheduler_app.api.agent_logs import job_log_store
from scheduler_app.models import Job, Node, Tenant
from scheduler_app.services import array_submit, job_submit
from scheduler_app.services.agents import agent_report_exit
from scheduler_app.services.cluster import node_drain
from scheduler_app.services.leader import LeaderLoop

from . import BROWSER_MARKS

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

PASSWORD = "pw-for-browser-pages"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
LONG_NAME = "llama-70b-instruct-sft-lr3e-5-warmup2000-cosine-seq8192-" + "x" * 60
#: an array named with one long word: the job page's Array card put it in a subtitle that
#: did not break (a page 1157 px wide on a 390 px phone, 2026-12-07)
LONG_WORD = "sweep" + "x" * 195

pytestmark = BROWSER_MARKS  # the browser and fast polling: conftest.py


@pytest.fixture
def demo() -> dict[str, object]:
    """The demo cluster after a tick: jobs running, a queue with positions and reasons,
    a failed job with its log tail, a draining node, a job with a very long name."""
    call_command("seed_demo", "--password", PASSWORD, stdout=StringIO())
    loop = LeaderLoop(holder="browser-pages", ttl_s=60, heartbeat_timeout_s=0)
    agents = SimulatedAgents(start_delay_s=0, heartbeat_s=0)
    evals = Tenant.objects.get(name="evals")
    pretrain = Tenant.objects.get(name="pretrain")
    failing = job_submit(tenant=evals, name="tokenizer-check", gpus=1, max_runtime_s=600,
                         command="python check.py")
    for name, gpus in (("big-sweep", 96), ("eval-harness", 64)):
        job_submit(tenant=evals, name=name, gpus=gpus, gpus_per_node=8, max_runtime_s=3600)
    job_submit(tenant=pretrain, name="llm-70b-pretrain", gpus=256, gpus_per_node=8,
               max_runtime_s=7200)
    job_submit(tenant=evals, name=LONG_NAME, gpus=64, gpus_per_node=8, max_runtime_s=7200)
    array = array_submit(tenant=evals, owner=None, name=LONG_WORD, gpus=1, count=2,
                         max_runtime_s=600)
    loop.step()
    agents.step()
    loop.step()
    failing.refresh_from_db()
    node = failing.allocations.first().node
    agent_report_exit(node=node, job=failing, outcome="failed", exit_code=1)
    job_log_store(job=failing, node=node, stdout="step 1\n",
                  stderr="Traceback (most recent call last):\nValueError: vocab mismatch\n")
    node_drain(node=Node.objects.get(name="pod-c-n16"), actor_name="operator",
               why="fan replacement")
    loop.step()
    return {"failed": failing, "array": array[0],
            "queued": Job.objects.filter(state="QUEUED", tenant=evals,
                                         array_id__isnull=True).order_by("id").last()}


def pages_of(role: str, demo: dict[str, object]) -> list[str]:
    failed = demo["failed"]
    queued = demo["queued"]
    assert isinstance(failed, Job) and isinstance(queued, Job)
    pages = ["/", "/jobs/", "/jobs/?state=all&sort=position", "/jobs/new/", "/teams/",
             "/teams/?window=hour", "/cluster/", "/glossary/"]
    if role in ("lead", "operator"):  # evals' jobs: the evals lead and the operator see them
        pages += [f"/jobs/{failed.pk}/", f"/jobs/{queued.pk}/", f"/jobs/{queued.pk}/cancel/",
                  f"/jobs/{demo['array'].pk}/"]
    if role == "operator":
        pages.append("/operator/")
    return pages


USERS = {"researcher": "evals-r1", "lead": "evals-lead", "operator": "operator"}


def signed_in(browser, live_server, role: str, viewport: dict[str, int]):
    context = browser.new_context(viewport=viewport, has_touch=viewport is PHONE)
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill(USERS[role])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/")
    return context, page, errors


WIDER = """() => {
  // the outermost elements past the right edge: what to fix when a page is too wide
  const w = document.documentElement.clientWidth;
  const past = e => e.getBoundingClientRect().right > w + 0.5;
  return [...document.querySelectorAll('body *')]
    .filter(e => past(e) && !(e.parentElement && past(e.parentElement)))
    .slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id + ' '
                      + Math.round(e.getBoundingClientRect().right));
}"""


@pytest.mark.parametrize("role", ["researcher", "lead", "operator"])
def test_every_page_fits_a_phone_and_logs_no_console_error(browser, live_server, demo, role):
    context, page, errors = signed_in(browser, live_server, role, PHONE)
    for path in pages_of(role, demo):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(1200)  # a poll or two comes back and is swapped in
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PHONE["width"], (path, width, page.evaluate(WIDER))
        # the navigation wraps: every link is on screen, none behind a sideways scroll
        for link in page.get_by_role("navigation", name="Main").get_by_role("link").all():
            box = link.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, path
        assert errors == [], (path, errors)
    context.close()


@pytest.mark.parametrize("role", ["researcher", "lead", "operator"])
def test_no_page_logs_a_console_error_on_a_desktop(browser, live_server, demo, role):
    context, page, errors = signed_in(browser, live_server, role, DESKTOP)
    for path in pages_of(role, demo):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(1200)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 1440, path
        assert errors == [], (path, errors)
    context.close()


def test_the_submit_forms_live_check_logs_no_console_error(browser, live_server, demo):
    context, page, errors = signed_in(browser, live_server, "researcher", DESKTOP)
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Name").fill("checked")
    page.get_by_label("GPUs", exact=True).fill("12")
    page.get_by_label("GPUs per node").fill("8")
    page.get_by_label("Priority").focus()
    expect(page.locator("#err-gpus_per_node")).to_contain_text("cannot be split")
    page.wait_for_timeout(800)
    assert errors == []
    types = page.locator("#id_gpu_type option").all_inner_texts()
    assert types == ["Any", "H100"]  # one entry per type, not one per node
    context.close()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["click", "tap"])
def test_the_maps_node_panel_opens_on_click_and_tap(browser, live_server, demo, viewport):
    context, page, errors = signed_in(browser, live_server, "researcher", viewport)
    page.goto(f"{live_server.url}/cluster/")
    node = page.locator("#sec-map [data-node='pod-a-n01'] button.node-open")
    if viewport is PHONE:
        node.tap()
    else:
        node.click()
    panel = page.locator("#node-panel")
    expect(panel).to_be_visible()
    expect(panel).to_contain_text("pod-a-n01")
    expect(panel).to_contain_text("8 of 8 GPUs used")
    expect(panel).to_contain_text("Heartbeat")
    expect(panel.locator("a[href^='/jobs/'], .panel-job")).not_to_have_count(0)
    page.wait_for_timeout(1500)  # a map poll does not close it
    expect(panel).to_be_visible()
    box = panel.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]
    panel.get_by_role("button", name="Close").click()
    expect(panel).to_be_hidden()
    # the drained node's badge is whole, inside its tile
    badge = page.locator("[data-node='pod-c-n16'] .badge")
    expect(badge).to_have_text("draining")
    # Both boxes are read in one script: the map polls and swaps its tiles, so
    # two separate reads may straddle a swap and find the badge detached.
    tile, mark = badge.evaluate(
        "b => [b.closest('[data-node]').getBoundingClientRect().toJSON(),"
        " b.getBoundingClientRect().toJSON()]"
    )
    assert mark["width"] > 0 and mark["height"] > 0
    assert mark["x"] >= tile["x"] and mark["y"] >= tile["y"]
    assert mark["x"] + mark["width"] <= tile["x"] + tile["width"] + 0.5
    assert errors == []
    context.close()


def test_the_leads_where_it_stands_is_in_view_at_1440(browser, live_server, demo):
    context, page, errors = signed_in(browser, live_server, "lead", DESKTOP)
    table = page.locator("#tj-title").locator("xpath=ancestor::section[1]")
    stands = table.locator("td.stands").first
    expect(stands).to_be_visible()
    box = stands.bounding_box()
    assert box is not None and box["x"] + box["width"] <= DESKTOP["width"]
    # nothing of the table hides behind a sideways scroll
    hidden = table.evaluate(
        "s => [...s.querySelectorAll('.scroll')].some(e => e.scrollWidth > e.clientWidth + 1)")
    assert not hidden
    # a queued row is not a tall, mostly blank box (it was ~250 px, squeezed into half
    # the page): its "where it stands" has room, so the row is a few lines high
    queued = table.locator("tr.state-queued").first
    row = queued.bounding_box()
    cell = queued.locator("td.stands").bounding_box()
    assert row is not None and cell is not None and row["height"] < 160, row
    assert cell["width"] >= 0.4 * row["width"], (cell, row)
    # an owner's name does not break at its hyphen
    owner = table.locator("td.owner").first
    assert owner.evaluate("e => getComputedStyle(e).whiteSpace") == "nowrap"
    assert errors == []
    context.close()
