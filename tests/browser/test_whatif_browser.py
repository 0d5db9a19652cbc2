"""The "What if" page in a real browser (Playwright, Debian's Chromium, no download): an
operator submits a what-if, the progress bar polls, and the table and the charts show.
The run goes to a thread of the live server (no broker: the embedded mode)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.sim.whatif_seed import seed

from . import BROWSER_MARKS
from .test_dashboard_browser import TIMEOUT_MS, expect
from .test_pages_browser import WIDER

PASSWORD = "pw-for-browser-tests"

pytestmark = BROWSER_MARKS  # the browser and fast polling: conftest.py


@pytest.fixture(autouse=True)
def embedded(settings):
    settings.CELERY_BROKER_URL = ""


def test_an_operator_runs_a_what_if_and_sees_the_table_and_the_charts(
        browser, live_server):
    seed()
    get_user_model().objects.create_user("op", password=PASSWORD, is_staff=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("op")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    page.get_by_role("navigation", name="Main").get_by_role("link", name="What if").click()
    page.get_by_label("Set quota").fill("alpha=16")
    page.get_by_label("Add nodes").fill("pod-b=2")
    page.get_by_role("button", name="Run what if").click()

    table = page.locator("#whatif-table")
    expect(table).to_be_visible(timeout=30_000)
    alpha = table.locator("tbody tr", has_text="alpha")
    expect(alpha).to_have_count(1)
    cells = alpha.locator("td")
    # mean wait before and after: alpha's raised guarantee shortens it
    before, after = float(cells.nth(1).inner_text()), float(cells.nth(2).inner_text())
    assert after < before
    expect(page.locator("#whatif-moved")).to_contain_text("alpha")
    charts = page.locator("canvas[data-chart='whatif']")
    expect(charts).to_have_count(3)
    for i in range(3):
        expect(charts.nth(i)).to_have_attribute("data-drawn", "1")
    # the hours ticked at round steps (2 h over 24 h, not 2.25 / 4.5), the GPUs whole
    ticks = page.evaluate("""() => Array.from(
        document.querySelectorAll("canvas[data-chart='whatif']"), (canvas) => {
          const chart = window.Chart.getChart(canvas);
          return {x: chart.scales.x.ticks.map((t) => t.value),
                  y: chart.scales.y.ticks.map((t) => t.value)};
        })""")
    for axis in ticks:
        assert axis["x"] == list(range(0, 25, 2))
        assert axis["y"] and all(float(v).is_integer() for v in axis["y"])
    expect(page.get_by_text("--set-quota alpha=16").first).to_be_visible()
    # on a phone the page does not scroll sideways: the moved jobs' table was 576 px wide
    # at 390 px, its last columns cut off (an operator's session, 2026-12-07)
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("canvas[data-chart='whatif'][data-drawn='1']")).to_have_count(3)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, (width, page.evaluate(WIDER))
    context.close()
