"""Shared pytest configuration.

Kept free of Django imports at module level: the pure core tests run with
``-p no:django`` too. Tests marked ``postgres`` are skipped unless DATABASE_URL points at
PostgreSQL (CI sets it; a laptop running ``make test`` uses SQLite).

``make test`` runs the suite on two pytest-xdist workers (``--dist loadgroup``), each with
a test database of its own. The modules in ``ONE_WORKER`` share something the server holds
for every database, so each group of them runs on one worker, one test after the other.
"""

from __future__ import annotations

import os

import pytest


def _database_is_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


#: xdist group -> the modules in it (see the module docstring)
ONE_WORKER: dict[str, tuple[str, ...]] = {
    # they make scratch databases on the server, and one of them compares the server's
    # list of scratch databases before and after a run
    "scratch-databases": (
        "tests/sim/test_carried_in.py", "tests/sim/test_cli.py",
        "tests/sim/test_db_engine.py", "tests/sim/test_scratch_database.py",
        "tests/sim/test_whatif.py",
    ),
    # Celery workers on the shared Redis: each test clears the broker's bindings there
    "shared-redis": ("tests/production/test_celery_worker.py",
                     "tests/production/test_faults.py"),
}
_GROUP_OF = {module: group for group, modules in ONE_WORKER.items() for module in modules}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _GROUP_OF.get(item.nodeid.split("::", 1)[0])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
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
