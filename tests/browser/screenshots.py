"""Screenshots of every dashboard page, for docs/dashboard.md and the README.

Not a test: run it against a running demo (``make demo`` with ``manage.py demo_agents``
beside it, a few minutes in, so there is a queue, a reservation and a preemption):

    .venv/bin/python tests/browser/screenshots.py http://127.0.0.1:8000 docs/img

It signs in as the demo's users (password ``gpu-demo-2026``) with Debian's Chromium.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

PASSWORD = "gpu-demo-2026"
CHROMIUM = "/usr/bin/chromium"


def sign_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("networkidle")


def shoot(page: Page, out: Path, name: str, *, full: bool = True) -> None:
    page.wait_for_timeout(700)  # charts drawn, htmx settled
    page.screenshot(path=str(out / f"dashboard-{name}.png"), full_page=full)
    print(f"{out / f'dashboard-{name}.png'}")


def main(base: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])

        def context(width: int = 1360, height: int = 900) -> Page:
            return browser.new_context(viewport={"width": width, "height": height}).new_page()

        page = context()
        page.goto(f"{base}/login/")
        shoot(page, out, "login", full=False)

        page = context()
        sign_in(page, base, "pretrain-r1")
        shoot(page, out, "researcher-home")
        page.goto(f"{base}/jobs/?state=all")
        shoot(page, out, "my-jobs")
        page.goto(f"{base}/jobs/new/")
        page.get_by_label("Name").fill("llama-70b-sft")
        page.get_by_label("Command").fill("torchrun train.py --config sft.yaml")
        page.get_by_label("GPUs", exact=True).fill("12")
        page.get_by_label("GPUs per node").fill("8")
        page.get_by_label("Priority").focus()
        page.locator("#err-gpus_per_node").filter(has_text="cannot").wait_for()
        shoot(page, out, "submit-form")

        page = context()
        sign_in(page, base, "operator")
        page.goto(f"{base}/jobs/?state=all")
        preempted = page.locator("tr.job-row:has(.preempt) a").first
        if preempted.count():
            preempted.click()
            page.wait_for_load_state("networkidle")
            shoot(page, out, "job-preempted")
        page.goto(f"{base}/cluster/")
        shoot(page, out, "cluster")
        page.locator("#sec-map button.node-open").first.click()
        page.locator("#node-panel").wait_for()
        shoot(page, out, "node-panel", full=False)
        page.goto(f"{base}/operator/")
        shoot(page, out, "operator", full=False)

        page = context(1440, 900)
        sign_in(page, base, "pretrain-lead")
        shoot(page, out, "lead-home", full=False)
        page.goto(f"{base}/teams/")
        shoot(page, out, "fair-share")

        page = context(390, 844)  # a phone
        sign_in(page, base, "pretrain-r1")
        shoot(page, out, "phone", full=False)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000",
         Path(sys.argv[2] if len(sys.argv) > 2 else "docs/img"))
