"""The preemption candidates (Tick.candidates) are kept from one tick to the next while
nothing they are made of changes. These tests change each thing a candidate reads with
the cluster otherwise the same, and check that the next tick's list shows it: a
checkpoint reported, and a preemption leaving the last day (what the daily cap counts).
When the list is built again, a team none of whose jobs changed keeps its slice: the
last tests change one team, a quota, or more checkpoints than the scheduler remembers."""

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


def _two_borrowers() -> Sim:
    """Three 8-GPU nodes, two teams with no guarantee running one job each from t=0
    (``b1``, ``c1``); team-c's ``c2`` arrives at t=2000 and starts on the third node."""
    long = {"checkpointable": True, "checkpoint_interval_s": 5 * DAY_S,
            "checkpoint_time_s": 10}
    return Sim(
        nodes({"pod-a": 3}),
        [tenant("team-a", 8), tenant("team-b", 0, 24), tenant("team-c", 0, 24)],
        [work("b1", 8, 10 * DAY_S, tenant="team-b", **long),
         work("c1", 8, 10 * DAY_S, tenant="team-c", **long),
         work("c2", 8, 10 * DAY_S, tenant="team-c", at=2000, **long)],
    ).run(1000)


def _built(sim: Sim, now: int) -> tuple[Tick, dict[str, object]]:
    tick = Tick(sim.sched, now, None)
    return tick, {c.spec.id: c for c in tick.candidates()}


def test_a_start_in_one_team_keeps_the_other_teams_candidates() -> None:
    sim = _two_borrowers()
    _tick, before = _built(sim, 1000)
    assert set(before) == {"b1", "c1"}
    sim.run(2100)
    assert sim.sched.jobs["c2"].state == S.RUNNING
    tick, after = _built(sim, 2100)
    assert list(after) == ["b1", "c1", "c2"]  # team order, then submission order
    assert tick.stats.get("candidate_slices_kept") == 1  # team-b's; team-c's built again
    assert after["b1"] is before["b1"]


def test_a_checkpoint_reaches_a_kept_slice_after_a_change_elsewhere() -> None:
    sim = _two_borrowers()
    _built(sim, 1000)
    sim.sched.report_checkpoint("b1", 1500, {"step": 1})
    sim.run(2100)  # c2 starts: the list is built again, team-b's slice kept
    tick, after = _built(sim, 2100)
    assert tick.stats.get("candidate_slices_kept") == 1
    assert after["b1"].last_checkpoint_s == 1500


def test_more_checkpoints_than_remembered_keep_no_slice() -> None:
    sim = _two_borrowers()
    _built(sim, 1000)
    sim.sched.checkpointed = deque(maxlen=1)
    sim.sched.report_checkpoint("b1", 1500, {"step": 1})
    sim.sched.report_checkpoint("c1", 1600, {"step": 1})
    sim.run(2100)
    tick, after = _built(sim, 2100)
    assert "candidate_slices_kept" not in tick.stats
    assert after["b1"].last_checkpoint_s == 1500 and after["c1"].last_checkpoint_s == 1600


def test_a_quota_change_keeps_no_slice() -> None:
    sim = _two_borrowers()
    _built(sim, 1000)
    sim.sched.set_quota("team-a", 4, None, 1500)
    tick, after = _built(sim, 1500)
    assert "candidate_slices_kept" not in tick.stats and set(after) == {"b1", "c1"}


def test_a_team_back_within_its_guarantee_leaves_the_list() -> None:
    sim = _two_borrowers()
    _built(sim, 1000)
    sim.sched.set_quota("team-b", 8, None, 1500)  # b1's 8 GPUs are now its own
    _tick, after = _built(sim, 1500)
    assert set(after) == {"c1"}
