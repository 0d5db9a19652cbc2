"""Issue, find and revoke API tokens (the API's own writes; the scheduler's go through
``scheduler_app.services``)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
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
    """The live token with this key, or None (unknown or revoked)."""
    token = (
        ApiToken.objects.select_related("user", "node")
        .filter(key_hash=hash_key(key), revoked_at__isnull=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
