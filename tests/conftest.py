"""Shared pytest configuration.

Kept free of Django imports at module level: the pure core tests run with
``-p no:django`` too. Tests marked ``postgres`` are skipped unless DATABASE_URL points at
PostgreSQL (CI sets it; a laptop running ``make test`` uses SQLite).

``make test XDIST="-n 2 --dist loadfile"`` runs the suite on two pytest-xdist workers (a
module's tests on one worker), each with a test database of its own. What the servers hold for
every database is shared, so the tests that look at it only count what they made: the
scratch-database checks look for their own run's databases (tests/sim/
test_scratch_database.py), and the Celery tests' cleanup removes only what names their
own queue (tests/production/procs.py). (``--dist loadgroup`` would keep chosen modules
together, but with pytest 9 xdist 3.8 no longer tags their node ids: it groups nothing.)
"""

from __future__ import annotations

import os

import pytest


def _database_is_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _database_is_postgres():
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("django"):
        return
    from django.conf import settings

    # Real hashing costs ~0.3 s per password; the seed alone creates 19 users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
