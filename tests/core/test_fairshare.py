"""Decayed usage over the guarantee: lower share goes first, ties total."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.fairshare import (
    FairShare,
    accrue,
    decay,
    heap_order_key,
    share_key,
)

H = 86400


def test_usage_halves_after_one_half_life() -> None:
    assert decay(1000.0, H, H) == pytest.approx(500.0)
    assert decay(1000.0, 0, H) == 1000.0


def test_accrual_is_the_decayed_integral() -> None:
    # 8 GPUs for 60 s, almost no decay: about 480 GPU-seconds
    assert accrue(0.0, 8, 60, H) == pytest.approx(480.0, rel=1e-3)
    # forever: converges to g * H / ln 2
    assert accrue(0.0, 8, 50 * H, H) == pytest.approx(8 * H / math.log(2), rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(st.floats(0, 1e9), st.integers(0, 64), st.lists(st.integers(1, 5 * H), min_size=1,
                                                       max_size=6))
def test_accrual_in_steps_equals_one_step(start: float, gpus: int, steps: list[int]) -> None:
    """Ticking more often changes nothing: the update is exact, not an approximation."""
    u = start
    for dt in steps:
        u = accrue(u, gpus, dt, H)
    assert u == pytest.approx(accrue(start, gpus, sum(steps), H), rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(
    ("rule", "a", "b"),
    [
        ("less usage per guaranteed GPU first", (100.0, 10), (300.0, 10)),
        ("a larger guarantee dilutes usage", (300.0, 30), (200.0, 10)),
        ("no usage and no guarantee ranks as zero", (0.0, 0), (1.0, 10)),
        ("any guarantee beats a borrower with usage", (1e9, 1), (1.0, 0)),
        ("between borrowers, less usage first", (5.0, 0), (6.0, 0)),
    ],
)
def test_share_order(rule: str, a: tuple[float, int], b: tuple[float, int]) -> None:
    assert share_key(*a) < share_key(*b), rule


def test_heap_order_breaks_share_ties_by_head_priority_age_seq() -> None:
    even = share_key(10.0, 10)
    assert heap_order_key(even, (-5, 100, 9)) < heap_order_key(even, (0, 0, 1))  # priority
    assert heap_order_key(even, (0, 5, 9)) < heap_order_key(even, (0, 6, 1))  # age
    assert heap_order_key(even, (0, 5, 1)) < heap_order_key(even, (0, 5, 2))  # seq
    assert heap_order_key(share_key(1.0, 10), (0, 99, 99)) < heap_order_key(even, (-9, 0, 0))


def test_fairshare_accrues_held_gpus_between_calls() -> None:
    fs = FairShare(H)
    fs.add_tenant("a", 0.0, 0)
    fs.add_tenant("b", 1000.0, 0)
    fs.advance("a", 100, held_gpus=8)
    fs.advance("b", 100, held_gpus=0)
    assert fs.usage("a") == pytest.approx(800.0, rel=1e-3)
    assert fs.usage("b") == pytest.approx(1000.0 * 2 ** (-100 / H))
    assert fs.share("a", 16) < fs.share("b", 16)
    with pytest.raises(ValueError, match="half_life"):
        FairShare(0)
