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
#: A secret production accepts: 50 characters and more, of many distinct ones.
GOOD_SECRET = "k3y-" + "".join(chr(ord("a") + i % 26) for i in range(60))


@pytest.mark.parametrize(
    ("django_env", "debug", "secret_key", "refused"),
    [
        ("production", True, GOOD_SECRET, True),
        ("production", False, project_settings.DEFAULT_SECRET_KEY, True),
        ("production", False, "", True),
        ("production", True, project_settings.DEFAULT_SECRET_KEY, True),
        ("production", False, GOOD_SECRET, False),
        ("production", False, "a-real-secret", True),  # 13 characters
        ("production", False, GOOD_SECRET[:49], True),
        ("production", False, GOOD_SECRET[:50], False),
        ("production", False, "ab" * 40, True),  # long, but two distinct characters
        ("development", True, project_settings.DEFAULT_SECRET_KEY, False),
        ("development", True, "short", False),
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
    result = run_django({"DJANGO_ENV": "production", "DEBUG": "true", "SECRET_KEY": GOOD_SECRET},
                        "")
    assert result.returncode != 0
    assert "Refusing to start with DJANGO_ENV=production: DEBUG is on" in result.stderr


def test_a_production_process_with_the_default_secret_does_not_start():
    result = run_django({"DJANGO_ENV": "production", "DEBUG": "false"}, "")
    assert result.returncode != 0
    assert "SECRET_KEY is the public development default" in result.stderr


def test_a_production_process_with_a_short_secret_does_not_start():
    result = run_django({"DJANGO_ENV": "production", "DEBUG": "false", "SECRET_KEY": "s3cret"},
                        "")
    assert result.returncode != 0
    assert "SECRET_KEY is too weak: 6 characters" in result.stderr


@pytest.mark.parametrize("value", ["Production", "prod", "production ", " production",
                                   "PRODUCTION", "dev", "development\n", ""])
def test_any_django_env_but_exactly_production_or_development_does_not_start(value):
    """They started silently with DEBUG on and the public key."""
    result = run_django({"DJANGO_ENV": value}, "")
    assert result.returncode != 0
    assert "DJANGO_ENV must be exactly 'production' or 'development'" in result.stderr


def production_env(**extra: str) -> dict[str, str]:
    return {"DJANGO_ENV": "production", "DEBUG": "false", "SECRET_KEY": GOOD_SECRET,
            "ALLOWED_HOSTS": "testserver", **extra}


def test_production_sends_hsts_and_a_content_security_policy():
    result = run_django(production_env(), (
        "from django.test import Client; c = Client(); "
        "r = c.get('/api/v1/me/', secure=True); "
        "print(r['Strict-Transport-Security']); print(r['Content-Security-Policy']); "
        "print(c.get('/api/v1/me/').get('Content-Security-Policy', '-')[:11])"
    ))
    assert result.returncode == 0, result.stderr
    hsts, csp, plain = result.stdout.splitlines()
    assert hsts == "max-age=31536000; includeSubDomains"
    assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp
    assert "'unsafe-eval'" not in csp and "script-src 'self' 'unsafe-inline'" not in csp
    assert plain == "default-src"  # over plain HTTP too


def test_development_sends_no_content_security_policy(client):
    assert "Content-Security-Policy" not in client.get("/login/")


def test_the_api_docs_page_has_no_inline_script(client):
    """Its script is a file of its own (the split view): the policy allows no inline one."""
    import re

    page = client.get("/api/docs/").content.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>\s*\S", page), page
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()


def deploy_warnings(**extra: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"], cwd=REPO, capture_output=True,
        # (the browser tests set DJANGO_ALLOW_ASYNC_UNSAFE in this process: not a deployment's)
        text=True, env={**{k: v for k, v in os.environ.items()
                           if k not in ("DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")},
                        "DJANGO_SETTINGS_MODULE": "scheduler_app.settings",
                        **production_env(**extra)},
    )
    assert result.returncode == 0, result.stderr
    import re

    return set(re.findall(r"\((security\.W\d+)\)", result.stdout + result.stderr))


def test_check_deploy_leaves_only_the_documented_warnings():
    """docs/production.md: W008 (TLS ends at the proxy) and W021 (preload is opt-in).
    W003 is silenced: the CSRF middleware is a subclass of Django's, at its place."""
    from django.conf import settings
    from django.middleware.csrf import CsrfViewMiddleware
    from django.utils.module_loading import import_string

    assert any(issubclass(import_string(m), CsrfViewMiddleware) for m in settings.MIDDLEWARE)
    assert deploy_warnings() == {"security.W008", "security.W021"}
    assert deploy_warnings(SECURE_SSL_REDIRECT="true", SECURE_HSTS_PRELOAD="true") == set()


def test_a_production_process_with_a_secret_and_debug_off_starts():
    result = run_django(
        {"DJANGO_ENV": "production", "DEBUG": "false", "SECRET_KEY": GOOD_SECRET},
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


@pytest.mark.parametrize("url", ["postgres://sched:pw@db.example:5433/sched",
                                 "sqlite:////tmp/never-opened.sqlite3"])
def test_a_dropped_database_connection_is_checked_before_it_is_reused(url):
    """Without CONN_HEALTH_CHECKS a connection the server dropped (a PostgreSQL restart,
    failover, pg_terminate_backend) was reused as it was, and each web process answered
    one request 500 (found by a user session, 2026-12-07)."""
    result = run_django(
        {"DATABASE_URL": url},
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['CONN_HEALTH_CHECKS'])",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
