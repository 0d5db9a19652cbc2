"""Issue, find and revoke API tokens (the API's own writes; the scheduler's go through
``scheduler_app.services``)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from scheduler_app.models import Node

from . import cache
from .models import ApiToken

#: Key prefixes say what a leaked key is for: "gsu_" a user's, "gsa_" an agent's.
USER_PREFIX = "gsu_"
AGENT_PREFIX = "gsa_"
#: How stale ``last_used_at`` may get before a request refreshes it.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_issue(
    *, user: AbstractBaseUser | None = None, node: Node | None = None, name: str = ""
) -> tuple[ApiToken, str]:
    """A new token for ``user`` or ``node`` (exactly one). Returns the row and the key:
    the key exists only in the return value, never in the database.

    A node has one agent: a new token for it revokes the node's earlier ones, so issuing
    again rotates the key (an operator re-issuing a leaked key left the leak working)."""
    if (user is None) == (node is None):
        raise ValueError("a token belongs to a user or to a node, not both or neither")
    key = (AGENT_PREFIX if node is not None else USER_PREFIX) + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            name=name,
            prefix=key[:12],
            key_hash=hash_key(key),
            user=user,
            node=node,
            created_at=timezone.now(),
        )
        if node is not None:
            earlier = ApiToken.objects.filter(node=node, revoked_at__isnull=True).exclude(
                pk=token.pk)
            for old in earlier.select_for_update():
                token_revoke(token=old)  # saved one by one: this process's cache forgets it
    return token, key


def token_find(*, key: str) -> ApiToken | None:
    """The live token with this key, or None (unknown or revoked), with its user or node.

    Read from the database at most every ``API_CACHE_S`` seconds per process
    (``api.cache``): a token revoked by another process stops working within that."""
    key_hash = hash_key(key)
    values = cache.TOKENS.get(key_hash)
    if values is None:
        values = _live_token_values(key_hash)
        if values is None:
            return None
        cache.TOKENS.put(key_hash, values)
    token = _instances(values)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
        values[0][_last_used_index()] = now  # the cached copy too: one write a minute
    return token


_TOKEN_SQL: str | None = None
_PARTS: list[tuple[type[Model], str, list[Any]]] | None = None


def _parts() -> list[tuple[type[Model], str, list[Any]]]:
    """(model, alias, concrete fields) of the token query's three tables."""
    global _PARTS
    if _PARTS is None:
        _PARTS = [(model, alias, list(model._meta.concrete_fields))
                  for model, alias in ((ApiToken, "t"), (get_user_model(), "u"), (Node, "n"))]
    return _PARTS


def _last_used_index() -> int:
    return [f.attname for f in ApiToken._meta.concrete_fields].index("last_used_at")


def _live_token_values(key_hash: str) -> list[list[Any] | None] | None:
    """The column values of ``ApiToken.objects.select_related("user", "node").filter(
    key_hash=..., revoked_at__isnull=True).first()`` and of its user and node (None for
    the one it has not), as one fixed SQL statement built once: every request
    authenticates, and compiling that queryset cost more than running it."""
    global _TOKEN_SQL
    parts = _parts()
    if _TOKEN_SQL is None:
        User = get_user_model()
        qn = connection.ops.quote_name
        columns = ", ".join(f"{alias}.{qn(f.column)}" for _model, alias, group in parts
                            for f in group)
        _TOKEN_SQL = (
            f"SELECT {columns} FROM {qn(ApiToken._meta.db_table)} t "
            f"LEFT JOIN {qn(User._meta.db_table)} u ON u.{qn(User._meta.pk.column)} = t."
            f"{qn(ApiToken._meta.get_field('user').column)} "
            f"LEFT JOIN {qn(Node._meta.db_table)} n ON n.{qn(Node._meta.pk.column)} = t."
            f"{qn(ApiToken._meta.get_field('node').column)} "
            f"WHERE t.{qn(ApiToken._meta.get_field('key_hash').column)} = %s "
            f"AND t.{qn(ApiToken._meta.get_field('revoked_at').column)} IS NULL"
        )
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_SQL, [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    out: list[list[Any] | None] = []
    at = 0
    for _model, _alias, group in parts:
        values = list(row[at:at + len(group)])
        at += len(group)
        # None: the LEFT JOIN found no user (or no node)
        out.append(None if values[0] is None else cache.converted(group, values))
    return out


def _instances(values: list[list[Any] | None]) -> ApiToken:
    """Fresh token, user and node instances (the token's related objects set) from
    the cached values: each request gets its own."""
    objs = [None if v is None else cache.instance(model, group, v)
            for (model, _alias, group), v in zip(_parts(), values, strict=True)]
    token, user, node = objs
    ApiToken._meta.get_field("user").set_cached_value(token, user)
    ApiToken._meta.get_field("node").set_cached_value(token, node)
    return token


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
