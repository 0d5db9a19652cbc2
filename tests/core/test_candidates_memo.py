"""The preemption candidates (Tick.candidates) are kept from one tick to the next while
nothing they are made of changes. These tests change each thing a candidate reads with
the cluster otherwise the same, and check that the next tick's list shows it: a
checkpoint reported, and a preemption leaving the last day (what the daily cap counts)."""

from __future__ import annotations

from collections import deque

from scheduler_app.core.records import DAY_S
from scheduler_app.core.states import JobState
from scheduler_app.core.tick import Tick
from tests.core.builders import nodes, tenant
from tests.core.test_scheduler import Sim, work

S = JobState


def _preempted_once() -> Sim:
    """One 8-GPU node. team-b (no guarantee) runs ``victim``; team-a's ``a1`` (guarantee
    8) takes the node back at t=1000 for 100 s, then ``victim`` runs again."""
    return Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8), tenant("team-b", 0, 8)],
        [
            work("victim", 8, 10 * DAY_S, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=5 * DAY_S, checkpoint_time_s=10),
            work("a1", 8, 100, at=1000),
        ],
    ).run(3000)


def _candidate(sim: Sim, now: int):
    (cand,) = [c for c in Tick(sim.sched, now, None).candidates() if c.spec.id == "victim"]
    return cand


def test_a_preemption_a_day_old_leaves_the_kept_candidates() -> None:
    sim = _preempted_once()
    rec = sim.sched.jobs["victim"]
    assert rec.state == S.RUNNING and len(rec.preemption_times) == 1
    at = rec.preemption_times[0]
    version = sim.sched.cluster_version
    assert _candidate(sim, at + DAY_S - 1).preemptions_last_day == 1
    memo = sim.sched.candidates_memo
    assert _candidate(sim, at + DAY_S - 1) is _candidate(sim, at + DAY_S - 1)  # kept
    assert sim.sched.candidates_memo is memo
    # the same cluster one second later: the preemption is a day old
    assert sim.sched.cluster_version == version
    assert _candidate(sim, at + DAY_S).preemptions_last_day == 0


def test_a_checkpoint_reaches_the_kept_candidates() -> None:
    sim = _preempted_once()
    now = 4000
    before = _candidate(sim, now).last_checkpoint_s
    sim.sched.report_checkpoint("victim", now + 5, {"step": 1})
    assert before != now + 5
    assert _candidate(sim, now + 10).last_checkpoint_s == now + 5


def test_a_checkpoint_updates_the_kept_candidates_in_place_of_a_rebuild() -> None:
    sim = _preempted_once()
    now = 4000
    before = _candidate(sim, now)
    sim.sched.report_checkpoint("victim", now + 5, {"step": 1})
    tick = Tick(sim.sched, now + 10, None)
    (after,) = [c for c in tick.candidates() if c.spec.id == "victim"]
    assert tick.stats.get("candidates_checkpointed") == 1
    assert after.last_checkpoint_s == now + 5 and after.alloc is before.alloc
    assert sim.sched.candidates[after.spec.id] is after  # the next update finds it


def test_more_checkpoints_than_remembered_build_the_candidates_again() -> None:
    sim = _preempted_once()
    now = 4000
    _candidate(sim, now)
    sim.sched.checkpointed = deque(maxlen=1)  # remembers only the last one
    sim.sched.report_checkpoint("victim", now + 5, {"step": 1})
    sim.sched.report_checkpoint("victim", now + 6, {"step": 2})
    tick = Tick(sim.sched, now + 10, None)
    (after,) = [c for c in tick.candidates() if c.spec.id == "victim"]
    assert "candidates_checkpointed" not in tick.stats and "candidates_kept" not in tick.stats
    assert after.last_checkpoint_s == now + 6
