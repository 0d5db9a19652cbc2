"""Browser tests: Playwright driving Debian's Chromium (no browser download)."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

#: the marks of a browser test module: ``pytestmark = BROWSER_MARKS``
BROWSER_MARKS = [
    pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                       reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
    pytest.mark.django_db(transaction=True),
]
