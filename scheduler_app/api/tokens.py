"""Issue, find and revoke API tokens (the API's own writes; the scheduler's go through
``scheduler_app.services``)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone

from scheduler_app.models import Node

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
    the key exists only in the return value, never in the database."""
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
    return token, key


def token_find(*, key: str) -> ApiToken | None:
    """The live token with this key, or None (unknown or revoked), with its user or node."""
    token = _live_token(hash_key(key))
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


_TOKEN_SQL: str | None = None


def _live_token(key_hash: str) -> ApiToken | None:
    """``ApiToken.objects.select_related("user", "node").filter(key_hash=...,
    revoked_at__isnull=True).first()``, as one fixed SQL statement built once: every
    request authenticates, and compiling that queryset cost more than running it."""
    global _TOKEN_SQL
    User = get_user_model()
    parts = [(ApiToken, "t"), (User, "u"), (Node, "n")]
    fields = [[f for f in model._meta.concrete_fields] for model, _alias in parts]
    if _TOKEN_SQL is None:
        qn = connection.ops.quote_name
        columns = ", ".join(f"{alias}.{qn(f.column)}"
                            for (_model, alias), group in zip(parts, fields, strict=True)
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
    objs = []
    at = 0
    for (model, _alias), group in zip(parts, fields, strict=True):
        values = list(row[at:at + len(group)])
        at += len(group)
        if values[0] is None:  # the LEFT JOIN found no user (or no node)
            objs.append(None)
            continue
        for i, field in enumerate(group):  # as the ORM does (SQLite's datetimes are text)
            col = field.cached_col
            for convert in (connection.ops.get_db_converters(col)
                            + col.get_db_converters(connection)):
                values[i] = convert(values[i], col, connection)
        objs.append(model.from_db(connection.alias, [f.attname for f in group], values))
    token, user, node = objs
    ApiToken._meta.get_field("user").set_cached_value(token, user)
    ApiToken._meta.get_field("node").set_cached_value(token, node)
    return token


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
