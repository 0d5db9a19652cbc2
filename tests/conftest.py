"""Shared pytest configuration.

Kept free of Django imports at module level: the pure core tests run with
``-p no:django`` too. Tests marked ``postgres`` are skipped unless DATABASE_URL points at
PostgreSQL (CI sets it; a laptop running ``make test`` uses SQLite).

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile``: a
module's tests on one worker; ``make test XDIST=`` runs one process), each with a test
database of its own. What the servers hold for
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
    _name_each_item(items)
    if _database_is_postgres():
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def _name_each_item(items: list[pytest.Item]) -> None:
    """Give schemathesis' items (one per API operation, ``test[GET /api/v1/jobs/]``) the
    node id their name says. pytest 9 builds a function's id from its callspec alone, and
    schemathesis sets none: its 34 items shared one id. pytest ran each, but xdist's
    ``--dist loadfile`` keys the work by id and ran one of them (3,207 tests passed on two
    workers where one process passed 3,240)."""
    for item in items:
        original = getattr(item, "originalname", item.name)
        params = item.name[len(original) + 1:-1]
        node_id = getattr(item, "_id", None)
        if (node_id is None or node_id.params is not None or not params
                or item.name != f"{original}[{params}]"):
            continue
        item._id = node_id.with_params(params)
    seen: set[str] = set()
    for item in items:
        if item.nodeid in seen:  # xdist would run one of them and report the rest as never run
            raise pytest.UsageError(f"two tests share the node id {item.nodeid}")
        seen.add(item.nodeid)


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("django"):
        return
    from django.conf import settings

    # Real hashing costs ~0.3 s per password; the seed alone creates 19 users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
