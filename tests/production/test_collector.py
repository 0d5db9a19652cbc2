"""The cyclic collector around the leader's long-lived state: paused while it is built,
frozen after the build and again as the state grows (a burst of submits adds thousands of
jobs a tick), given back when the state is dropped."""

from __future__ import annotations

import gc

import pytest

from scheduler_app.collector import FreezeAsItGrows, collector_paused
from scheduler_app.services.leader import LeaderLoop

from .conftest import at, submit


@pytest.fixture
def freezes(monkeypatch) -> list[str]:
    """gc.freeze and gc.unfreeze recorded, not done: the test process's own objects stay
    collectable."""
    calls: list[str] = []
    for name in ("freeze", "unfreeze"):
        monkeypatch.setattr(gc, name, lambda name=name: calls.append(name))
    return calls


@pytest.mark.parametrize("factor, slack, sizes, want", [
    # (factor, slack): freeze at sizes >= factor * last frozen size + slack
    (1, 10, [5, 9, 10, 15, 19, 20, 31], [10, 20, 31]),
    (2, 10, [10, 25, 30, 70, 71], [10, 30, 70]),
    (1, 0, [0, 0, 1], [0, 0, 1]),
])
def test_the_state_is_frozen_each_time_it_has_grown_enough(freezes, factor, slack, sizes,
                                                           want):
    freezer = FreezeAsItGrows(factor=factor, slack=slack)
    frozen_at = [size for size in sizes if freezer.grown(size)]
    assert frozen_at == want and freezes == ["freeze"] * len(want)


def test_a_freeze_after_a_build_counts_as_the_last_freeze(freezes):
    freezer = FreezeAsItGrows(factor=1, slack=10)
    freezer.freeze(100)
    assert freezes == ["freeze"]
    assert not freezer.grown(109) and freezer.grown(110) and freezes == ["freeze", "freeze"]


def test_the_collector_is_paused_in_the_block_and_restored_as_it_was():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the outer pause stays
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed build")
    assert gc.isenabled()


@pytest.mark.django_db
def test_the_leader_builds_paused_freezes_as_it_grows_and_unfreezes_when_it_drops(
    cluster, freezes, monkeypatch
):
    paused = []
    real_build = LeaderLoop._build

    def build(self, now):
        paused.append(not gc.isenabled())
        return real_build(self, now)

    monkeypatch.setattr(LeaderLoop, "_build", build)
    loop = LeaderLoop(holder="leader-a", clock=None, heartbeat_timeout_s=0)
    loop.freezer = FreezeAsItGrows(factor=1, slack=3)
    submit(cluster["vision"], gpus=1, at_s=0)
    assert loop.step(now=at(1)).rebuilt and paused == [True]
    assert freezes == ["unfreeze", "freeze"] and loop.freezer.frozen_at == 1
    for _ in range(2):
        submit(cluster["vision"], gpus=1, at_s=2)
    loop.step(now=at(3))  # 3 jobs: not grown by 3 yet
    assert freezes == ["unfreeze", "freeze"]
    submit(cluster["nlp"], gpus=1, at_s=4)
    loop.step(now=at(5))  # 4 jobs: frozen again before the tick
    assert freezes == ["unfreeze", "freeze", "freeze"] and loop.freezer.frozen_at == 4
    loop.drop()
    assert freezes[-1] == "unfreeze" and gc.isenabled()
