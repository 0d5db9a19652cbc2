"""Fair share: exponentially decayed usage over the guarantee, lower goes first.

Usage is GPU-seconds decayed with a configurable half-life ``H``. Between two instants the
tenant held a constant number of GPUs ``g`` (every change of ``g`` first accrues up to its
instant), so the update is exact, not a per-tick approximation:

    u(t1) = u(t0) * 2^(-dt/H)  +  g * H/ln2 * (1 - 2^(-dt/H)),   dt = t1 - t0 (integer s)

The second term is the integral of ``g`` over ``dt`` with every second decayed to ``t1``.
Times are integers; the same sequence of accruals gives the same floats on every run.

Share = decayed usage / guaranteed GPUs. A tenant with no guarantee has an infinite share
as soon as it has any usage (it only borrows); with zero usage its share is 0. The order
is total and deterministic (see :func:`share_key` and :func:`heap_order_key`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .queues import EntryKey

LN2 = math.log(2.0)

#: (0, usage / guarantee) for a finite share, (1, usage) for an infinite one: finite shares
#: come first, and among zero-guarantee borrowers the one that used less goes first.
ShareKey = tuple[int, float]


def decay(usage: float, dt_s: int, half_life_s: int) -> float:
    if dt_s <= 0:
        return usage
    return usage * 2.0 ** (-dt_s / half_life_s)


def accrue(usage: float, gpus: int, dt_s: int, half_life_s: int) -> float:
    """Decay ``usage`` over ``dt_s`` seconds while ``gpus`` GPUs were held (exact integral)."""
    if dt_s <= 0:
        return usage
    factor = 2.0 ** (-dt_s / half_life_s)
    return usage * factor + gpus * (half_life_s / LN2) * (1.0 - factor)


def share_key(usage_gpu_s: float, guaranteed_gpus: int) -> ShareKey:
    """The fair-share part of the order: lower first (see the module docstring)."""
    if guaranteed_gpus > 0:
        return (0, usage_gpu_s / guaranteed_gpus)
    if usage_gpu_s <= 0.0:
        return (0, 0.0)
    return (1, usage_gpu_s)


def heap_order_key(share: ShareKey, head: EntryKey) -> tuple[ShareKey, EntryKey]:
    """Order of the (tenant, size class) heaps in a tick: lower share first, then the
    head's priority (desc), deadline (earlier first, see queues.py) and seq. seq is
    unique, so the order is total.
    """
    return (share, head)


@dataclass(slots=True)
class TenantUsage:
    usage_gpu_s: float
    at_s: int


class FairShare:
    """Decayed usage per tenant, advanced when the GPUs a tenant holds change."""

    def __init__(self, half_life_s: int) -> None:
        if half_life_s <= 0:
            raise ValueError("usage_half_life_s must be a positive number of seconds")
        self.half_life_s = half_life_s
        self._usage: dict[str, TenantUsage] = {}

    def add_tenant(self, name: str, usage_gpu_s: float, at_s: int) -> None:
        self._usage[name] = TenantUsage(float(usage_gpu_s), at_s)

    def advance(self, name: str, now: int, held_gpus: int) -> float:
        """Accrue ``name``'s usage up to ``now``; ``held_gpus`` were held since the last call."""
        u = self._usage[name]
        if now > u.at_s:
            u.usage_gpu_s = accrue(u.usage_gpu_s, held_gpus, now - u.at_s, self.half_life_s)
            u.at_s = now
        return u.usage_gpu_s

    def usage(self, name: str) -> float:
        return self._usage[name].usage_gpu_s

    def usage_at(self, name: str, now: int, held_gpus: int) -> float:
        """``name``'s usage at ``now`` with ``held_gpus`` held since the last change,
        without storing it. The stored usage moves only when the GPUs held change (the
        scheduler calls :meth:`advance` then), so the shares a tick reads do not depend on
        how often ticks ran before it: skipping a quiet tick changes no float."""
        u = self._usage[name]
        if now > u.at_s:
            return accrue(u.usage_gpu_s, held_gpus, now - u.at_s, self.half_life_s)
        return u.usage_gpu_s

    def share(self, name: str, guaranteed_gpus: int) -> ShareKey:
        return share_key(self._usage[name].usage_gpu_s, guaranteed_gpus)

    def share_at(self, name: str, now: int, held_gpus: int, guaranteed_gpus: int) -> ShareKey:
        return share_key(self.usage_at(name, now, held_gpus), guaranteed_gpus)
