"""Rules the first scheduler tests left uncovered (found by reviewing the issues' lists)."""

from __future__ import annotations

import pytest

from scheduler_app.core.states import JobState, PendingReason, Reason
from tests.core.builders import nodes, tenant
from tests.core.test_scheduler import Sim, cfg, work

S = JobState
P = PendingReason


@pytest.mark.parametrize(
    ("behind_runtime_s", "behind_limit_s", "backfilled"),
    [
        (5000, 5000, False),  # would hold the team's quota past the reserved start
        (90, 90, True),  # declares it ends before the reserved start: may go first
    ],
)
def test_backfill_never_delays_a_head_waiting_for_its_teams_quota(
    behind_runtime_s: int, behind_limit_s: int, backfilled: bool
) -> None:
    # team-a may hold 8 GPUs; a1 holds 4 until t=100, so the 8-GPU head waits for quota,
    # not for capacity (16 GPUs, 12 idle). The 4-GPU job behind it fits the idle GPUs and
    # the team's quota today, but must not keep the head from its quota at t=100.
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8, 0), tenant("team-b", 8, 8)],
        [
            work("a1", 4, 100, max_runtime_s=100),
            work("head", 8, 100, at=1, priority=10, max_runtime_s=100),
            work("behind", 4, behind_runtime_s, at=2, max_runtime_s=behind_limit_s),
        ],
    ).run(20_000)
    assert sim.started_at("head") == 100  # exactly when a1's declared limit ends
    if backfilled:
        assert sim.started_at("behind") == 2
        assert sim.first("behind", S.PLACING).reason == Reason.BACKFILLED
    else:
        assert sim.started_at("behind") >= sim.started_at("head")


def test_a_job_past_the_cap_stays_protected_a_day_later() -> None:
    # "a job past the cap is protected until it completes": the rolling day that counts
    # the cap does not hand the job back to the victims' pool when it rolls over. (From
    # borrowing heads: team-c's would borrow. A team taking its guarantee back is not
    # stopped by the cap: test_scheduler_preemption.)
    day = 86_400
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8), tenant("team-b", 0, 16), tenant("team-c", 4, 12)],
        [
            work("victim", 8, 10 * day, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=60, checkpoint_time_s=10),
            work("dear", 8, 10 * day, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=3000, checkpoint_time_s=10, restart_s=600),
            work("a1", 8, 100, at=1000),
            work("a2", 8, 100, at=2000),
            work("c1", 8, 100, at=2 * day, tenant="team-c", checkpointable=True),
        ],
    ).run(2 * day + 500)
    assert [(d.job_id, d.at_s) for d in sim.of(S.PREEMPT_REQUESTED)] == [
        ("victim", 1000), ("victim", 2000), ("dear", 2 * day)]
    assert sim.state["victim"] == S.RUNNING


def test_a_checkpointable_job_without_a_declared_checkpoint_time_gets_the_default_grace(
) -> None:
    sim = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8), tenant("team-b", 0, 8)],
        [work("victim", 8, 100_000, tenant="team-b", checkpointable=True,
              checkpoint_interval_s=300, ignores_preempt=True),
         work("head", 8, 500, at=1000)],
        config=cfg(grace_period_s=120),
    )
    sim.run(1119)
    assert sim.state["victim"] == S.PREEMPT_REQUESTED  # 119 s in: not yet
    sim.run(3000)
    killed = sim.first("victim", S.PREEMPTED)
    assert (killed.at_s, killed.reason) == (1120, Reason.GRACE_EXPIRED)
    assert sim.started_at("head") == 1120


def test_estimates_cover_the_look_ahead_and_no_further() -> None:
    # One 8-GPU node held until t=1000; five 8-GPU jobs queue behind it. With a look-ahead
    # of 2, the reservation holder and the next two are planned, the rest are not.
    sim = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8)],
        [work("big", 8, 1000, max_runtime_s=1000)]
        + [work(f"q{i}", 8, 100, at=10, max_runtime_s=100) for i in range(5)],
        config=cfg(estimate_lookahead=2),
    ).run(20)
    planned = {j: sim.sched.job(j).start_estimate_s for j in ("q0", "q1", "q2", "q3", "q4")}
    assert planned["q0"] == 1000
    assert planned["q1"] == 1100
    assert planned["q3"] is None and planned["q4"] is None


def test_enough_free_gpus_in_the_wrong_shape_is_a_topology_wait() -> None:
    # Two 8-GPU nodes each hold a 6-GPU job: 4 GPUs are free, but no node has 4.
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 16)],
        [work("left", 6, 10_000, gpus_per_node=6, max_runtime_s=10_000),
         work("right", 6, 10_000, gpus_per_node=6, max_runtime_s=10_000),
         work("wide", 4, 100, at=10, gpus_per_node=4, max_runtime_s=100)],
    )
    sim.run(20)
    placed = {n for d in sim.of(S.PLACING) for n in d.alloc}
    assert placed == {"pod-a-000", "pod-a-001"}  # one 6-GPU job on each node
    assert sim.sched.job("wide").pending_reason == P.TOPOLOGY


def test_every_queued_job_has_a_reason_even_deep_in_its_queue() -> None:
    sim = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8)],
        [work("big", 8, 1000, max_runtime_s=1000)]
        + [work(f"q{i:02d}", 8, 100, at=10, max_runtime_s=100) for i in range(40)],
        config=cfg(estimate_lookahead=2),
    ).run(20)
    reasons = {sim.sched.job(f"q{i:02d}").pending_reason for i in range(40)}
    assert P.NONE not in reasons


def _look_ahead_sim(plans_per_tick: int) -> Sim:
    # Two teams, each queue behind jobs with declared limits, so every plan in the round
    # depends on the ones before it (q1 counts on the GPUs q0 gives back at its end).
    return Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8, 8), tenant("team-b", 8, 8)],
        [work("big-a", 8, 1000, max_runtime_s=1000),
         work("big-b", 8, 1500, tenant="team-b", max_runtime_s=1500)]
        + [work(f"a{i}", 8, 100, at=10, max_runtime_s=100 + i) for i in range(4)]
        # (b's limits put its deadlines, 10 + 4 x 250, after all of a's, 10 + 8 x 10x)
        + [work(f"b{i}", 4, 100, at=10, tenant="team-b", max_runtime_s=250) for i in range(4)],
        # one reservation: the rest of the look-ahead is the round's (not reserved)
        config=cfg(estimate_lookahead=4, estimate_plans_per_tick=plans_per_tick,
                   reservation_depth=1),
    )


def test_a_look_ahead_round_spread_over_ticks_plans_what_one_tick_plans() -> None:
    ids = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)]
    whole = _look_ahead_sim(100).run(20)
    at_once = {j: whole.sched.job(j).start_estimate_s for j in ids}
    assert at_once["a0"] == 1000 and at_once["a1"] == 1100  # a1 behind a0, on its GPUs
    assert all(at_once[j] is not None for j in ids)

    spread = _look_ahead_sim(1)
    spread.run(10)  # the first tick with the jobs queued: the holder and one more
    partly = {j: spread.sched.job(j).start_estimate_s for j in ids}
    assert sum(v is not None for v in partly.values()) < len(ids)
    spread.run(200)  # one plan per 5-second tick: the round completes well before this
    assert {j: spread.sched.job(j).start_estimate_s for j in ids} == at_once


def test_a_tick_while_a_round_goes_on_and_nothing_else_changed_plans_the_round_alone(
) -> None:
    # One plan per tick: the round started at t=10 goes on for several ticks with no
    # event in between. Those ticks are at a fixed point but for the round: each ends
    # after the looks (no job examined, no decision) and plans one more job of the round;
    # the last one leaves a fixed point the simulator may skip past.
    ids = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)]
    sim = _look_ahead_sim(1)
    sim.run(10)
    assert sim.sched.estimate_round is not None
    assert sim.sched.quiet_until(15, 15) is None  # the round needs ticks
    alone: list[int] = []
    t = 15
    while sim.sched.estimate_round is not None and t < 80:
        assert sim.sched.looks_alone_due(t)
        left = len(sim.sched.estimate_round.line) - sim.sched.estimate_round.cursor
        result = sim.sched.tick(t)
        assert result.stats["looks_alone"] == 0  # nothing due but the round
        assert result.stats["examined"] == 0 and not result.decisions
        assert result.stats["estimate_plans"] == 1
        assert result.stats.get("estimate_round_left", 0) < left
        alone.append(t)
        t += 5
    assert len(alone) >= 4
    assert sim.sched.estimate_round is None
    assert sim.sched.quiet_until(t, t) == t
    # ... and the estimates are those of one tick that plans the whole round
    whole = _look_ahead_sim(100).run(20)
    assert ({j: sim.sched.job(j).start_estimate_s for j in ids}
            == {j: whole.sched.job(j).start_estimate_s for j in ids})


def test_an_event_during_a_round_makes_the_next_tick_walk() -> None:
    sim = _look_ahead_sim(1)
    sim.run(10)
    assert sim.sched.looks_alone_due(15)
    sim.sched.submit(work("late", 8, 100, at=12, max_runtime_s=100).spec, 12)
    assert not sim.sched.looks_alone_due(15)
    result = sim.sched.tick(15)
    assert "looks_alone" not in result.stats and result.stats["examined"] >= 1


def test_a_kept_reservation_is_planned_afresh_when_its_node_is_drained() -> None:
    # The head is reserved on pod-a-000 from t=1000 (when "short" reaches its limit).
    # Draining that node makes the kept reservation invalid at once, before the 30 s
    # refresh: the next plan is pod-a-001 from t=2000, when "long" reaches its limit.
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 16), tenant("team-b", 16)],
        [work("short", 8, 1000, tenant="team-b", gpus_per_node=8, max_runtime_s=1000),
         work("long", 8, 2000, tenant="team-b", gpus_per_node=8, max_runtime_s=2000),
         work("head", 8, 100, at=10, gpus_per_node=8, max_runtime_s=100)],
        events=[(20, "node_drain", "pod-a-000")],
    )
    sim.run(15)
    assert sim.sched.job("head").start_estimate_s == 1000
    sim.run(22)
    assert sim.sched.job("head").start_estimate_s == 2000


def test_jobs_of_one_shape_clash_with_a_reservation_by_their_own_ends() -> None:
    # pod-a-001 is reserved for the 16-GPU head from t=1000 (when "hold" reaches its
    # limit on pod-a-000). "long" and "short" ask for the same shape, so the tick finds
    # both the same free GPUs (pod-a-001) on the same state, and "long" is looked at
    # first (higher priority): it would hold them past the reserved start and waits;
    # "short" ends by its limit before that start and is backfilled in the same tick.
    # One reservation at most: "long" gets none, so nothing changes between the two looks.
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 16), tenant("team-b", 8)],
        [work("hold", 8, 1000, tenant="team-b", gpus_per_node=8, max_runtime_s=1000),
         work("head", 16, 100, at=10, priority=10, gpus_per_node=8, max_runtime_s=100),
         work("long", 8, 5000, at=20, priority=5, gpus_per_node=8, max_runtime_s=5000),
         work("short", 8, 500, at=20, priority=1, gpus_per_node=8, max_runtime_s=500)],
        config=cfg(reservation_depth=1),
    ).run(20_000)
    placed = sim.first("short", S.PLACING)
    assert placed.at_s == 20 and placed.reason == Reason.BACKFILLED
    assert placed.detail["ends_before"] == [{"job": "head", "start_s": 1000}]
    tick = next(r for t, r in sim.ticks if t == 20)
    assert tick.pending_reasons.get("long") == P.RESERVATION  # looked at in that tick
    assert sim.started_at("head") == 1000
    assert sim.started_at("long") >= sim.started_at("head")


def test_a_job_waiting_for_a_reservation_names_the_one_in_its_way() -> None:
    # headA is reserved on pod-a-000 from t=1000 (when hold0 ends there), headB on
    # pod-a-001 from t=2000 (hold1's end; headA holds 000 past it). x's first fit is the
    # 4 free GPUs of pod-a-001: it would still hold them at headB's start, and no GPU
    # outside a reservation is free. It waits for headB's reservation, not for the
    # cluster's earliest one (headA's), and the tick says which.
    sim = Sim(
        nodes({"pod-a": 3}),
        [tenant("team-a", 24), tenant("team-b", 24)],
        [work("hold0", 8, 1000, tenant="team-b", gpus_per_node=8, max_runtime_s=1000),
         work("hold1", 4, 2000, tenant="team-b", max_runtime_s=2000),
         work("hold2", 8, 9000, tenant="team-b", gpus_per_node=8, max_runtime_s=9000),
         work("headA", 8, 5000, at=10, priority=10, gpus_per_node=8, max_runtime_s=5000),
         work("headB", 8, 100, at=10, priority=9, gpus_per_node=8, max_runtime_s=100),
         work("x", 4, 5000, at=20, priority=1, max_runtime_s=5000)],
    )
    sim.run(20)
    held = {j: set(sim.sched.job(j).alloc or ()) for j in ("hold0", "hold1", "hold2")}
    assert held == {"hold0": {"pod-a-000"}, "hold1": {"pod-a-001"}, "hold2": {"pod-a-002"}}
    assert sim.sched.job("headA").start_estimate_s == 1000
    assert sim.sched.job("headB").start_estimate_s == 2000
    tick = next(r for t, r in sim.ticks if t == 20)
    assert tick.pending_reasons.get("x") == P.RESERVATION
    assert tick.blockers == {"x": "headB"}
