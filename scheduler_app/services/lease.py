"""The leader lease: one row per name, with a holder, an expiry and a fencing token.

A holder acquires (or renews) the lease each tick and gets its fencing token back. The
token grows on every change of holder, so a leader that stalled past its expiry and was
replaced holds a stale token. The writes a tick makes are fenced by :func:`lease_check`,
called inside the transaction that writes them: the lease row is locked
(``select_for_update``) until commit, so a takeover cannot slip between the check and the
writes. Works the same on SQLite (one writer at a time) and PostgreSQL (row lock).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from scheduler_app.models import Lease

LEADER_LEASE = "scheduler-leader"

#: A lease that expires further ahead than this (or than the asker's TTL, if longer) was
#: set by no holder (they renew ``ttl_s`` ahead, seconds): a row edited by hand, a clock
#: gone wrong. It does not keep every scheduler on standby: the next asker takes it.
MAX_LEASE_AHEAD_S = 3600

log = logging.getLogger("scheduler_app.leader")


class LeaseLost(RuntimeError):
    """The caller no longer holds the lease with this token (stale, expired or released)."""


def lease_acquire(
    *, name: str, holder: str, ttl_s: int, now: datetime, new_term: bool = False,
    settings: Mapping[str, Any] | None = None,
) -> int | None:
    """Take or renew lease ``name`` for ``holder`` until ``now + ttl_s``.

    Returns the fencing token, or None while another holder's lease is unexpired. A renewal
    keeps the token; a new holder (also after a release) gets the token plus one, and so
    does ``new_term``: a process that restarted under the same holder name must not share
    a token with its previous life, which may still be writing. ``settings``: the
    holder's scheduler settings, published with the lease when its term starts.
    """
    if not holder:
        raise ValueError("a lease holder needs a name")
    with transaction.atomic():
        lease, _ = Lease.objects.select_for_update().get_or_create(name=name)
        alive = lease.expires_at is not None and lease.expires_at > now
        if alive and lease.expires_at > now + timedelta(seconds=max(ttl_s, MAX_LEASE_AHEAD_S)):
            log.warning("lease %s: held by %r until %s, further ahead than any holder renews "
                        "it: taken over by %s", name, lease.holder, lease.expires_at, holder)
            alive = False
        if lease.holder and lease.holder != holder and alive:
            return None
        fields = ["holder", "fencing_token", "expires_at"]
        if lease.holder != holder or new_term:
            lease.holder = holder
            lease.fencing_token += 1
            # a term that publishes none (an older build's) leaves no other holder's
            lease.settings = {} if settings is None else dict(settings)
            fields.append("settings")
        lease.expires_at = now + timedelta(seconds=ttl_s)
        lease.save(update_fields=fields)
        return lease.fencing_token


def lease_release(*, name: str, holder: str, token: int) -> bool:
    """Give the lease up at once (a clean shutdown), so a standby need not wait for expiry.
    Does nothing (returns False) unless ``holder`` holds it with ``token``."""
    with transaction.atomic():
        released = Lease.objects.filter(name=name, holder=holder, fencing_token=token).update(
            holder="", expires_at=None
        )
    return released == 1


def lease_force_release(
    *, name: str = LEADER_LEASE, actor_name: str, why: str = ""
) -> Lease | None:
    """An operator frees the lease whoever holds it (a holder that is gone, a lease edited
    by hand with an expiry years away): the next tick of any scheduler takes it, with the
    next fencing token, so a holder still alive writes nothing more (its token is stale)
    and stands by. Logged at WARNING on ``scheduler_app.leader`` with who freed it, from
    whom and why (the lease is not a row of the transition log: replay does not read it).
    Returns the lease as it was (None if there is none)."""
    if not actor_name:
        raise ValueError("who releases the lease? (actor_name)")
    with transaction.atomic(durable=True):
        lease = Lease.objects.select_for_update().filter(name=name).first()
        if lease is None:
            return None
        before = Lease(name=lease.name, holder=lease.holder,
                       fencing_token=lease.fencing_token, expires_at=lease.expires_at)
        lease.holder, lease.expires_at = "", None
        lease.save(update_fields=["holder", "expires_at"])
    log.warning(
        "lease %s released by %s: it was held by %r with token %s until %s%s", name,
        actor_name, before.holder, before.fencing_token, before.expires_at,
        f" ({why})" if why else "",
        extra={"lease": {"name": name, "released_by": actor_name, "holder": before.holder,
                         "token": before.fencing_token,
                         "expires_at": before.expires_at.isoformat()
                         if before.expires_at else None, "why": why}},
    )
    return before


def lease_check(*, name: str, holder: str, token: int, now: datetime | None = None) -> None:
    """Raise LeaseLost unless ``holder`` holds lease ``name`` with ``token``, unexpired at
    ``now``. Call it inside the transaction that writes the leader's decisions: the lease
    row stays locked until that transaction ends."""
    if not connection.in_atomic_block:
        raise RuntimeError("lease_check must run inside the transaction it fences")
    now = now or timezone.now()
    lease = Lease.objects.select_for_update().filter(name=name).first()
    if lease is None or lease.holder != holder or lease.fencing_token != token:
        raise LeaseLost(f"lease {name}: {holder} with token {token} is not the holder ({lease})")
    if lease.expires_at is None or lease.expires_at <= now:
        raise LeaseLost(f"lease {name}: {holder}'s lease expired at {lease.expires_at}")
