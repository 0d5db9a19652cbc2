"""What every browser test module shares: Debian's Chromium driven by Playwright (no
browser download), skipped where it is missing, and the dashboard polling every second."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from . import CHROMIUM

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# between browser steps are plain synchronous calls, which Django's guard would refuse.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(autouse=True)
def fast_polling(settings):
    settings.DASHBOARD_POLL_S = 1


@pytest.fixture(autouse=True)
def production_policy(settings):
    """Every page under the production Content-Security-Policy: a page that needs what it
    forbids (htmx evaluating an hx-trigger filter, an inline script) logs a violation, and
    the tests' console checks see it (the operator's page wiped what was typed at every
    poll under it, unseen here until 2026-12-07)."""
    settings.CONTENT_SECURITY_POLICY = settings.PRODUCTION_CONTENT_SECURITY_POLICY
