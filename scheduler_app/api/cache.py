"""Short-lived per-process caches of what every API request reads and what rarely changes.

Every request authenticates (the token, its user or node) and every submit reads the
tenant with the caller's role in it: two queries before the submit's own transaction,
for rows that change a few times a day. Each web process keeps what it read for
``settings.API_CACHE_S`` seconds (default 5; 0 turns the caches off):

- ``TOKENS``: token key hash -> the token's, its user's and its node's column values;
- ``TENANT_ROLES``: (user id, tenant name) -> the tenant's column values and the user's
  role in it.

Staleness bound. A change made in this process (the API's token revoke, a membership
or quota or user saved through the ORM here) clears the affected cache at once
(``post_save`` / ``post_delete``). A change made by another process (another gunicorn
worker, the admin on another host, ``manage.py``) is seen by this one within
``API_CACHE_S`` seconds: for at most that long a revoked token still authenticates, a
deactivated user or a removed member may still submit, a quota change is not yet
applied by the API's never-fits check (the scheduler's admission applies it to the job
anyway). Misses (an unknown or revoked token, an unknown tenant) are never cached.

Each request rebuilds its own model instances from the cached values: nothing a view
sets on ``request.user`` or a tenant leaks into another request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Model
from django.db.models.signals import post_delete, post_save

from scheduler_app.models import Membership, Tenant

from .models import ApiToken

#: The clock the expiries are read on (tests move it).
clock: Callable[[], float] = time.monotonic

#: An entry-count bound (a cache that reaches it starts again empty): one entry per live
#: token and per (user, tenant) pair in use.
MAX_ENTRIES = 10_000


def ttl_s() -> float:
    """Seconds a cached entry lives (``settings.API_CACHE_S``); 0 or less: no caching."""
    return float(getattr(settings, "API_CACHE_S", 5))


class TtlCache:
    """A dict whose entries expire ``ttl_s()`` seconds after they were put (a put does
    not extend an entry that is there: the bound holds from the read of the database)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: dict[Hashable, tuple[float, Any]] = {}

    def get(self, key: Hashable) -> Any:
        hit = self._data.get(key)
        if hit is None:
            return None
        expires, value = hit
        if clock() >= expires:
            self._data.pop(key, None)
            return None
        return value

    def put(self, key: Hashable, value: Any) -> None:
        ttl = ttl_s()
        if ttl <= 0:
            return
        if len(self._data) >= MAX_ENTRIES:
            self._data.clear()
        self._data[key] = (clock() + ttl, value)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


TOKENS = TtlCache("tokens")
TENANT_ROLES = TtlCache("tenant_roles")


def clear_all() -> None:
    TOKENS.clear()
    TENANT_ROLES.clear()


# ---------------------------------------------------------------- rows <-> instances
def converted(fields: Sequence[Any], values: list[Any]) -> list[Any]:
    """A row's raw column values as the ORM would load them (SQLite's datetimes are
    text, for instance): the database converters of each field, in place."""
    for i, field in enumerate(fields):
        col = field.cached_col
        for convert in connection.ops.get_db_converters(col) + col.get_db_converters(connection):
            values[i] = convert(values[i], col, connection)
    return values


def instance(model: type[Model], fields: Sequence[Any], values: Sequence[Any]) -> Model:
    """A fresh instance of ``model`` from converted ``values`` (one per field)."""
    return model.from_db(connection.alias, [f.attname for f in fields], list(values))


# ---------------------------------------------------------------- invalidation
def _on_token(**kwargs: Any) -> None:
    TOKENS.clear()


def _on_user(update_fields: Any = None, **kwargs: Any) -> None:
    # a login stamps last_login: nothing the API reads
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    clear_all()  # is_active, is_staff: authentication and the operator's rights


def _on_role(**kwargs: Any) -> None:
    TENANT_ROLES.clear()


def connect_signals() -> None:
    """Clear the caches when this process changes what they hold (ApiConfig.ready)."""
    user = get_user_model()
    for name, signal in (("save", post_save), ("delete", post_delete)):
        signal.connect(_on_token, sender=ApiToken, dispatch_uid=f"api.cache.token.{name}")
        signal.connect(_on_user, sender=user, dispatch_uid=f"api.cache.user.{name}")
        signal.connect(_on_role, sender=Membership, dispatch_uid=f"api.cache.member.{name}")
        signal.connect(_on_role, sender=Tenant, dispatch_uid=f"api.cache.tenant.{name}")
