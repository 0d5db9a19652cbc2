"""The production image's build steps: ``collectstatic`` with the manifest storage, then the
pages that need the manifest (``{% static %}`` of a hashed name).

The image could not be built: the vendored Chart.js names its source map
(``//# sourceMappingURL=chart.umd.min.js.map``), the manifest storage follows that
reference, and the map was not vendored. Without the manifest, the production dashboard
answered 500 on /login/, /admin/login/ and /api/docs/. ``.ci/run`` runs the same steps,
and gunicorn on the result.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client, override_settings

REPO = Path(__file__).resolve().parents[2]
MANIFEST_STORAGE = "whitenoise.storage.CompressedManifestStaticFilesStorage"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    """``collectstatic`` as the Dockerfile runs it (DJANGO_ENV=production), into a
    directory of this module's own (a settings module that only moves STATIC_ROOT)."""
    root = tmp_path_factory.mktemp("production-build")
    (root / "production_build_settings.py").write_text(
        "from scheduler_app.settings import *  # noqa: F403\n"
        f"STATIC_ROOT = {str(root / 'static')!r}\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        "PYTHONPATH": str(root),
        "DJANGO_SETTINGS_MODULE": "production_build_settings",
        "DJANGO_ENV": "production",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return root / "static"


def test_collectstatic_with_the_manifest_storage_builds(collected):
    manifest = json.loads((collected / "staticfiles.json").read_text())["paths"]
    assert "vendor/chart.js/chart.umd.min.js" in manifest
    # the map the minified file names is vendored, hashed and rewritten in its reference
    assert "vendor/chart.js/chart.umd.min.js.map" in manifest
    hashed = (collected / manifest["vendor/chart.js/chart.umd.min.js"]).read_text()
    assert f"sourceMappingURL={Path(manifest['vendor/chart.js/chart.umd.min.js.map']).name}" \
        in hashed


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/login/", "/admin/login/", "/api/docs/"])
def test_the_pages_that_need_the_manifest_render(collected, url):
    storages = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": MANIFEST_STORAGE},
    }
    with override_settings(STORAGES=storages, STATIC_ROOT=str(collected), DEBUG=False):
        response = Client().get(url)
    assert response.status_code == 200, url
