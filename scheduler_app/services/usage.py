"""Tenant usage: decayed GPU-seconds, accrued exactly as the core's fair share does.

Formula (``core.fairshare.accrue``): between two instants a tenant held a constant number
of GPUs ``g`` (its open allocations), so with half-life ``H`` and ``dt = t1 - t0``:

    usage(t1) = usage(t0) * 2^(-dt/H) + g * H/ln2 * (1 - 2^(-dt/H))

The services accrue up to ``t1`` each time ``g`` changes (an allocation opens, ends or
shrinks), then change ``g``. Readers that want usage "now" accrue to now with the current
``held_gpus`` (see :func:`usage_at`). ``H`` is ``settings.SCHEDULER_USAGE_HALF_LIFE_S``.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from scheduler_app.core.fairshare import accrue


def half_life_s() -> int:
    return int(settings.SCHEDULER_USAGE_HALF_LIFE_S)


def accrued(
    usage: float, since_s: int | None, held_gpus: int, at_s: int, half_life: int
) -> tuple[float, int]:
    """(usage, as-of instant) after accruing to ``at_s``. Never moves time backwards."""
    if since_s is None:
        return usage, at_s
    if at_s <= since_s:
        return usage, since_s
    return accrue(usage, held_gpus, at_s - since_s, half_life), at_s


def usage_at(tenant: object, at: datetime) -> float:
    """The tenant's decayed usage as of ``at`` (read-only; nothing is written)."""
    since = getattr(tenant, "usage_at", None)
    usage, _ = accrued(
        tenant.usage_gpu_s,  # type: ignore[attr-defined]
        int(since.timestamp()) if since else None,
        tenant.held_gpus,  # type: ignore[attr-defined]
        int(at.timestamp()),
        half_life_s(),
    )
    return usage
