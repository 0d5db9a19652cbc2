"""Configuration from the environment, and the production guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from scheduler_app import settings as project_settings

REPO = Path(project_settings.BASE_DIR)


@pytest.mark.parametrize(
    ("django_env", "debug", "secret_key", "refused"),
    [
        ("production", True, "a-real-secret", True),
        ("production", False, project_settings.DEFAULT_SECRET_KEY, True),
        ("production", False, "", True),
        ("production", True, project_settings.DEFAULT_SECRET_KEY, True),
        ("production", False, "a-real-secret", False),
        ("development", True, project_settings.DEFAULT_SECRET_KEY, False),
    ],
)
def test_production_refuses_debug_or_the_default_secret(django_env, debug, secret_key, refused):
    def check() -> None:
        project_settings.refuse_unsafe_production(
            django_env=django_env, debug=debug, secret_key=secret_key
        )

    if refused:
        with pytest.raises(ImproperlyConfigured, match="Refusing to start"):
            check()
    else:
        check()  # no exception: the process may start


def run_django(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    full_env.update({"DJANGO_SETTINGS_MODULE": "scheduler_app.settings", **env})
    script = f"import django; django.setup(); {code}"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=full_env, capture_output=True, text=True
    )


def test_a_production_process_with_debug_on_does_not_start():
    result = run_django({"DJANGO_ENV": "production", "DEBUG": "true", "SECRET_KEY": "s3cret"}, "")
    assert result.returncode != 0
    assert "Refusing to start with DJANGO_ENV=production: DEBUG is on" in result.stderr


def test_a_production_process_with_the_default_secret_does_not_start():
    result = run_django({"DJANGO_ENV": "production", "DEBUG": "false"}, "")
    assert result.returncode != 0
    assert "SECRET_KEY is the public development default" in result.stderr


def test_a_production_process_with_a_secret_and_debug_off_starts():
    result = run_django(
        {"DJANGO_ENV": "production", "DEBUG": "false", "SECRET_KEY": "s3cret"},
        "from django.conf import settings; print(settings.DEBUG)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_the_default_sqlite_database_runs_in_wal_mode(tmp_path):
    result = run_django(
        {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
        "from django.db import connection; c = connection.cursor(); "
        "c.execute('PRAGMA journal_mode'); print(c.fetchone()[0])",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "wal"


def test_database_and_broker_come_from_the_environment():
    result = run_django(
        {
            "DATABASE_URL": "postgres://sched:pw@db.example:5433/sched",
            "CELERY_BROKER_URL": "redis://cache.example:6379/2",
        },
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['ENGINE'], d['HOST'], d['PORT'], d['NAME'], settings.CELERY_BROKER_URL, "
        "settings.CELERY_TASK_ALWAYS_EAGER)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.postgresql",
        "db.example",
        "5433",
        "sched",
        "redis://cache.example:6379/2",
        "False",
    ]
