"""Team limits in the core: per-user GPU caps (UserLimit) and the team default time limit.

The cap a job may declare (``max_runtime_s`` of the tenant) is refused by the callers at
submit (services, API, scenario validation), not by the core: see tests/api and tests/sim.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.core.states import HOLDING_STATES, JobState, PendingReason, Reason
from scheduler_app.core.types import NodeSpec, SchedulerConfig, TenantSpec
from tests.core.builders import job, nodes, tenant
from tests.core.test_scheduler import Sim, Work, cfg, work

S = JobState
P = PendingReason


def capped(name: str, guaranteed: int, borrow: int = 0, **limits: Any) -> TenantSpec:
    return replace(tenant(name, guaranteed, borrow), **limits)


# ------------------------------------------------------------------ per-user limits
@pytest.mark.parametrize(
    ("cap", "first", "second", "second_starts_at_once"),
    [
        (8, 8, 8, False),  # the owner holds 8 of 8: the next waits
        (16, 8, 8, True),  # room for both
        (12, 8, 8, False),  # 8 + 8 > 12: a whole gang or nothing
        (None, 8, 8, True),  # no cap: only the team's quota counts
    ],
)
def test_an_owner_never_holds_more_than_the_cap(
    cap: int | None, first: int, second: int, second_starts_at_once: bool
) -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [capped("team-a", 32, max_gpus_per_user=cap)],
                      cfg(), now=0)
    sched.submit(job("a1", first, owner="alice", max_runtime_s=100), 0)
    sched.submit(job("a2", second, owner="alice", max_runtime_s=100), 0)
    sched.tick(0)
    assert sched.jobs["a1"].state == S.PLACING
    if second_starts_at_once:
        assert sched.jobs["a2"].state == S.PLACING
    else:
        assert sched.jobs["a2"].state == S.QUEUED
        assert sched.jobs["a2"].pending_reason == P.USER_LIMIT
    sched.check_invariants()


def test_other_owners_go_ahead_and_the_owners_next_job_keeps_its_place() -> None:
    # alice holds her 8; her a2 and a3 wait (UserLimit) ahead of bob's b1 in the same heap,
    # and b1 starts at once. When a1 ends, a2 (not a3) is hers next.
    sim = Sim(
        nodes({"pod-a": 4}),
        [capped("team-a", 32, max_gpus_per_user=8)],
        [
            work("a1", 8, 100, owner="alice", max_runtime_s=200),
            work("a2", 8, 100, owner="alice", at=1, priority=5, max_runtime_s=200),
            work("a3", 8, 100, owner="alice", at=2, priority=5, max_runtime_s=200),
            work("b1", 8, 100, owner="bob", at=3, max_runtime_s=200),
        ],
    ).run(5_000)
    assert sim.started_at("b1") == 3
    assert sim.started_at("a2") == 100  # a1 ran 100 s: the first of hers behind it
    assert sim.started_at("a3") == 200
    waited = {r for _t, res in sim.ticks for j, r in res.pending_reasons.items() if j == "a3"}
    assert P.USER_LIMIT in waited


@pytest.mark.parametrize("policy", ["priority-kill", "full"])
def test_an_elastic_job_that_reclaims_gpus_starts_on_no_more_than_its_owners_cap(
        policy: str) -> None:
    # One node of 8, all of it held by team-b, which has no guarantee. alice's elastic job
    # (8 GPUs, at least 1) takes GPUs back for team-a, whose owners may hold 2 each: it
    # starts on 2, whether the borrower is killed at once (priority-kill, where the
    # property test below found a start on the plan's whole 8) or checkpoints first.
    sim = Sim(
        nodes({"pod-a": 1}),
        [capped("team-a", 8, max_gpus_per_user=2), tenant("team-b", 0, 8)],
        [work("b1", 8, 5_000, tenant="team-b", checkpointable=True,
              checkpoint_interval_s=60, checkpoint_time_s=10),
         work("a1", 8, 100, at=100, min_gpus=1, owner="alice")],
        config=cfg(policy=policy),
    ).run(2_000)
    assert sim.first("b1", S.PREEMPTED) is not None
    start = sim.started_at("a1")
    assert start is not None and start < 1_000
    assert sim.gpus_at("a1", start) == 2


def test_a_job_without_an_owner_is_never_capped() -> None:
    sched = Scheduler(nodes({"pod-a": 2}), [capped("team-a", 16, max_gpus_per_user=4)],
                      cfg(), now=0)
    sched.submit(job("x1", 8, max_runtime_s=100), 0)
    sched.submit(job("x2", 8, max_runtime_s=100), 0)
    sched.tick(0)
    assert {sched.jobs[j].state for j in ("x1", "x2")} == {S.PLACING}
    assert sched.user_held == {}


def test_owners_are_counted_per_team() -> None:
    # alice in team-a and alice in team-b are two counters: each team's cap is its own
    sched = Scheduler(nodes({"pod-a": 2}),
                      [capped("team-a", 8, max_gpus_per_user=8),
                       capped("team-b", 8, max_gpus_per_user=8)], cfg(), now=0)
    sched.submit(job("a", 8, tenant="team-a", owner="alice", max_runtime_s=100), 0)
    sched.submit(job("b", 8, tenant="team-b", owner="alice", max_runtime_s=100), 0)
    sched.tick(0)
    assert sched.user_held == {("team-a", "alice"): 8, ("team-b", "alice"): 8}


def test_an_elastic_job_takes_what_its_owner_has_left() -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [capped("team-a", 32, max_gpus_per_user=12)],
                      cfg(), now=0)
    sched.submit(job("a1", 8, owner="alice", max_runtime_s=100), 0)
    sched.submit(job("a2", 8, owner="alice", min_gpus=2, max_runtime_s=100), 0)
    sched.tick(0)
    assert sched.jobs["a2"].state == S.PLACING
    assert sum(len(ix) for ix in (sched.jobs["a2"].alloc or {}).values()) == 4
    assert sched.user_held == {("team-a", "alice"): 12}


def test_the_counter_follows_finish_and_preemption() -> None:
    # alice and carol (team-b, borrowing 16 of 24 GPUs; alice's second job waits for her
    # cap, not for GPUs) are preempted when team-a's entitled 24-GPU job arrives: alice's
    # counter drops with the GPUs she gives back, and her waiting job starts once she has
    # room again.
    ckpt = {"checkpointable": True, "checkpoint_interval_s": 60, "checkpoint_time_s": 10}
    sim = Sim(
        nodes({"pod-a": 3}),
        [capped("team-a", 24), capped("team-b", 0, 24, max_gpus_per_user=8)],
        [
            work("b1", 8, 1000, tenant="team-b", owner="alice", max_runtime_s=5000, **ckpt),
            work("c1", 8, 1000, tenant="team-b", owner="carol", max_runtime_s=5000, **ckpt),
            work("b2", 8, 50, tenant="team-b", owner="alice", at=1, max_runtime_s=100),
            work("a1", 24, 100, tenant="team-a", at=10, max_runtime_s=200),
        ],
    )
    sim.run(5)
    assert sim.sched.user_held == {("team-b", "alice"): 8, ("team-b", "carol"): 8}
    assert sim.sched.jobs["b2"].pending_reason == P.USER_LIMIT
    sim.run(60)
    assert sim.first("b1", S.PREEMPT_REQUESTED) is not None
    assert sim.sched.running["team-a"] == 24
    assert sim.sched.user_held == {}  # both gave their GPUs back
    sim.run(40_000)
    started = sim.started_at("b2")
    assert started is not None and started >= 110  # after a1, within alice's 8
    assert sim.sched.user_held == {}  # all ended: nothing held, nothing left over


def test_a_job_over_its_owners_cap_holds_no_reservation() -> None:
    # the cluster is full (alice runs 8, a job with no owner 24); alice's next job would be
    # the head waiting for GPUs, but she already holds her 8 of 8: no reservation for it,
    # so bob's job behind it gets the reservation instead
    sched = Scheduler(nodes({"pod-a": 4}), [capped("team-a", 32, 32, max_gpus_per_user=8)],
                      cfg(), now=0)
    sched.submit(job("a1", 8, owner="alice", max_runtime_s=1000), 0)
    sched.submit(job("c1", 24, max_runtime_s=500), 0)  # no owner: no cap
    sched.tick(0)
    sched.submit(job("a2", 8, owner="alice", priority=9, max_runtime_s=100), 1)
    sched.submit(job("b1", 8, owner="bob", max_runtime_s=100), 1)
    sched.tick(1)
    assert sched.jobs["a2"].pending_reason == P.USER_LIMIT
    reserved = {r.job_id for r in sched.reserved}
    assert "a2" not in reserved
    assert "b1" in reserved


def test_a_kept_reservation_is_dropped_once_its_owner_reaches_the_cap() -> None:
    sched = Scheduler(nodes({"pod-a": 2}), [capped("team-a", 16, 16, max_gpus_per_user=8)],
                      cfg(), now=0)
    sched.submit(job("c1", 16, max_runtime_s=1000), 0)
    sched.tick(0)
    sched.submit(job("a1", 8, owner="alice", max_runtime_s=100), 1)
    sched.tick(1)
    assert [r.job_id for r in sched.reserved] == ["a1"]
    # an operator lowers the cap below what a1 needs: the kept reservation is dropped
    # (a1 could not use it), not kept from the last tick
    sched.set_quota("team-a", 16, 16, 2, limits={"max_gpus_per_user": 4})
    sched.tick(2)
    assert sched.reserved == []
    assert sched.jobs["a1"].pending_reason == P.USER_LIMIT


def test_fifo_applies_the_same_cap() -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [capped("team-a", 32, max_gpus_per_user=8)],
                      cfg(policy="fifo"), now=0)
    sched.submit(job("a1", 8, owner="alice", max_runtime_s=100), 0)
    sched.submit(job("a2", 8, owner="alice", max_runtime_s=100), 0)
    sched.tick(0)
    assert sched.jobs["a2"].pending_reason == P.USER_LIMIT


def test_a_job_larger_than_its_owners_cap_never_fits() -> None:
    sched = Scheduler(nodes({"pod-a": 2}), [capped("team-a", 16, max_gpus_per_user=8)],
                      cfg(), now=0)
    out = sched.submit(job("big", 16, owner="alice"), 0)
    assert out[-1].to_state == S.FAILED and out[-1].reason == Reason.NEVER_FITS
    assert "one owner" in out[-1].detail["why"]
    # an elastic job that may shrink to the cap fits
    out = sched.submit(job("elastic", 16, owner="alice", min_gpus=8), 0)
    assert out[-1].to_state == S.QUEUED


def test_set_quota_refuses_an_unknown_limit() -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("team-a", 8)], cfg(), now=0)
    with pytest.raises(ValueError, match="unknown limit"):
        sched.set_quota("team-a", 8, 0, 0, limits={"max_gpus": 1})


@pytest.mark.parametrize(
    ("change", "limits", "stale"),
    [
        # the per-user cap lifted: "holds 8 of the 8 one person may hold" stands no more
        ("cap lifted", {"max_gpus_per_user": None}, P.USER_LIMIT),
        ("cap raised", {"max_gpus_per_user": 64}, P.USER_LIMIT),
    ],
)
def test_a_reason_that_a_raised_limit_ended_is_not_left_standing(
        change: str, limits: dict[str, Any], stale: PendingReason) -> None:
    # alice's first 8 jobs take the node, and 22 more wait for her cap (UserLimit). Once
    # the cap goes, none of them may keep that reason (found by trying the product,
    # 2026-12-07: 600 jobs kept it for minutes, "holds 89 GPUs of the 0 one person may
    # hold"): those the walk reaches get theirs, the rest wait behind them (Priority)
    sched = Scheduler(nodes({"pod-a": 1}), [capped("team-a", 8, 8, max_gpus_per_user=8)],
                      cfg(), now=0)
    for i in range(31):
        sched.submit(job(f"a{i}", 1, owner="alice", max_runtime_s=1000), 0)
    sched.tick(0)
    waiting = [j for j, rec in sched.jobs.items() if rec.state == S.QUEUED]
    assert len(waiting) == 23
    assert all(sched.jobs[j].pending_reason == stale for j in waiting)
    sched.set_quota("team-a", 8, 8, 5, limits=limits)
    published = sched.tick(5).pending_reasons
    for j in waiting:
        rec = sched.jobs[j]
        assert rec.state == S.QUEUED and rec.pending_reason not in (stale, P.NONE), (change, j)
    told = {j for j, r in published.items() if r == P.PRIORITY}
    assert told, "the change is published with the tick's own reasons"
    sched.check_invariants()


def test_a_lowered_limit_leaves_the_reasons_to_the_walk() -> None:
    # tightening tells nobody anything new by itself but the jobs it leaves too large to
    # start (they lose their estimate: the next test): the walk says UserLimit where it
    # applies; jobs told Resources or Priority keep that until it reaches them, unless
    # their team now holds too much to start them (QuotaLimit at once: a test below)
    sched = Scheduler(nodes({"pod-a": 1}), [capped("team-a", 8, 8, max_gpus_per_user=8)],
                      cfg(), now=0)
    sched.submit(job("a0", 8, owner="alice", max_runtime_s=1000), 0)
    sched.submit(job("a1", 1, owner="alice", max_runtime_s=1000), 0)
    sched.tick(0)
    before = sched.jobs["a1"].pending_reason
    sched.set_quota("team-a", 8, 8, 5, limits={"max_gpus_per_user": 4})
    assert sched.jobs["a1"].pending_reason == before
    # a0 (8 GPUs, waiting for alice's cap of 8) can never start under a cap of 4
    assert sched.pending_news == {"a0": P.USER_LIMIT} and sched.estimate_news == {"a0": None}


@pytest.mark.parametrize(("guaranteed", "borrow", "limits", "reason"), [
    (8, 8, {}, P.QUOTA_LIMIT),  # the team may hold 16 now
    (16, 48, {"max_gpus_per_user": 16}, P.USER_LIMIT),  # its owner may hold 16
])
def test_a_job_a_cut_leaves_too_large_loses_its_estimate_at_once(
        guaranteed: int, borrow: int, limits: dict[str, Any], reason: PendingReason) -> None:
    # A 24-GPU job behind the team's running jobs has a planned start. A cut leaves it too
    # large to start while the limit stays: it showed a start 27 minutes away for up to
    # 2.5 minutes, until the look-ahead's round reached it (a pipeline author's session,
    # 2026-12-07), while its answer said it cannot start.
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("team-a", 16, 16)], cfg(), now=0)
    sched.submit(job("run", 32, owner="alice", gpus_per_node=8, max_runtime_s=1000), 0)
    sched.tick(0)
    sched.submit(job("big", 24, owner="alice", gpus_per_node=8, max_runtime_s=600), 1)
    sched.submit(job("small", 8, owner="alice", gpus_per_node=8, max_runtime_s=600), 1)
    for t in range(1, 30):
        sched.tick(t)
    assert sched.job("big").start_estimate_s is not None
    kept = sched.job("small").start_estimate_s
    assert kept is not None
    sched.set_quota("team-a", guaranteed, borrow, 30, limits=limits)
    result = sched.tick(31)
    assert "big" in result.start_estimates and result.start_estimates["big"] is None
    assert result.pending_reasons["big"] == reason
    view = sched.job("big")
    assert (view.start_estimate_s, view.pending_reason) == (None, reason)
    assert sched.job("small").start_estimate_s is not None  # 8 still fits: kept
    sched.check_invariants()


@pytest.mark.parametrize(("holder_limit", "expected"), [(5000, 6000), (None, None)])
def test_a_job_held_back_by_its_teams_quota_holder_is_planned_after_it(
        holder_limit: int | None, expected: int | None) -> None:
    # team-a (24 guaranteed) runs r (8 GPUs, to t=1000). Its holder h (24 GPUs) waits for
    # the quota, which leaves room at t=1000, but no plan can place it (team-b's jobs on
    # two nodes declare no limit). u (8 GPUs, to its limit) would not end by h's start:
    # QuotaReserved. Its estimate said "now" (a time past by the next minute) as if h were
    # not there (a pipeline author's session, 2026-12-07): it comes after h's use of the
    # quota, or, with h's end unknown, it is not promised.
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("team-a", 24), tenant("team-b", 8, 8)],
                      cfg(), now=0)
    sched.submit(job("r", 8, gpus_per_node=8, max_runtime_s=1000), 0)
    for i in range(2):
        sched.submit(job(f"b{i}", 8, tenant="team-b", gpus_per_node=8, checkpointable=True), 0)
    sched.tick(0)
    sched.submit(job("h", 24, gpus_per_node=8, priority=10, max_runtime_s=holder_limit), 1)
    sched.submit(job("u", 8, gpus_per_node=8, max_runtime_s=3000), 1)
    for t in range(1, 40):
        sched.tick(t)
    assert sched.job("h").pending_reason == P.QUOTA_LIMIT
    assert sched.job("h").start_estimate_s is None  # no plan places it
    u = sched.job("u")
    assert u.pending_reason == P.QUOTA_RESERVED
    assert u.start_estimate_s == expected, u.estimate_basis


# ------------------------------------------------------------------ team default limit
@pytest.mark.parametrize(
    ("declared", "default", "expected"),
    [
        (None, 3600, 3600),  # declares none: the team's default
        (600, 3600, 600),  # declares one: its own, even if shorter
        (7200, 3600, 7200),  # or longer (the team's max_runtime_s is the callers' check)
        (None, None, None),  # no default: no limit
    ],
)
def test_the_team_default_limit_is_given_at_submit(
    declared: int | None, default: int | None, expected: int | None
) -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [capped("team-a", 8, default_runtime_s=default)],
                      cfg(), now=0)
    sched.submit(job("j", 8, max_runtime_s=declared), 0)
    assert sched.jobs["j"].spec.max_runtime_s == expected
    sched.tick(0)
    assert sched.next_deadline() == (300 if expected is None else min(300, expected))


def test_a_job_given_the_default_stops_at_it_and_can_backfill() -> None:
    # head (16 GPUs) waits for r1 (ends by t=1000); the short job with no declared limit
    # backfills in front of it thanks to the team's default of 500 s, and the time limit
    # stops a job that runs longer than that default
    sim = Sim(
        nodes({"pod-a": 2}),
        [capped("team-a", 16, default_runtime_s=500)],
        [
            work("r1", 8, 1000, max_runtime_s=1000),
            work("head", 16, 100, at=1, priority=5, max_runtime_s=100),
            work("short", 8, 400, at=2),
            work("long", 8, 900, at=2000),
        ],
    ).run(20_000)
    assert sim.first("short", S.PLACING, Reason.BACKFILLED) is not None
    assert sim.started_at("head") == 1000
    assert sim.first("long", S.FAILED, Reason.TIME_LIMIT) is not None


def test_a_default_set_later_applies_to_later_jobs_only() -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("team-a", 8)], cfg(), now=0)
    sched.submit(job("before", 8), 0)
    sched.set_quota("team-a", 8, None, 1, limits={"default_runtime_s": 60})
    sched.submit(job("after", 8), 2)
    assert sched.jobs["before"].spec.max_runtime_s is None
    assert sched.jobs["after"].spec.max_runtime_s == 60


# ------------------------------------------------------------------ property
@st.composite
def owned_workloads(draw: Any) -> dict[str, Any]:
    node_specs = [NodeSpec(name=f"pod-a-{i:03d}", pod="pod-a", gpus=8)
                  for i in range(draw(st.integers(1, 4)))]
    total = 8 * len(node_specs)
    cap = draw(st.integers(1, total))
    tenants = [capped("t0", draw(st.integers(0, total)), total, max_gpus_per_user=cap),
               capped("t1", 0, total, max_gpus_per_user=draw(st.integers(1, total)))]
    works: list[Work] = []
    for j in range(draw(st.integers(1, 10))):
        team = draw(st.sampled_from(["t0", "t1"]))
        gpus = draw(st.integers(1, min(total, 16)))
        kw: dict[str, Any] = {"owner": draw(st.sampled_from([None, "u0", "u1", "u2"])),
                              "max_runtime_s": draw(st.sampled_from([None, 500, 3000])),
                              "checkpointable": draw(st.booleans())}
        if kw["checkpointable"]:
            kw["checkpoint_interval_s"] = 60
            kw["checkpoint_time_s"] = 10
        if gpus > 1 and draw(st.booleans()):
            kw["min_gpus"] = draw(st.integers(1, gpus - 1))
        works.append(work(f"j{j}", gpus, draw(st.integers(10, 2000)), tenant=team,
                          seq=j + 1, at=draw(st.integers(0, 2000)), **kw))
    config = SchedulerConfig(policy=draw(st.sampled_from(["full", "fifo", "priority-kill"])),
                             tick_work_budget=draw(st.sampled_from([None, 2])))
    return dict(node_specs=node_specs, tenants=tenants, works=works, config=config)


class CapWatch(Sim):
    """A Sim that checks every owner's held GPUs against the cap after every step."""

    def _record(self, decisions: Any, t: int) -> None:
        super()._record(decisions, t)
        s = self.sched
        held: dict[tuple[str, str], int] = {}
        for rec in s.jobs.values():
            if rec.state in HOLDING_STATES and rec.spec.owner is not None:
                key = (rec.spec.tenant, rec.spec.owner)
                held[key] = held.get(key, 0) + sum(len(ix) for ix in (rec.alloc or {}).values())
        for (team, _owner), gpus in held.items():
            cap = s.tenants[team].max_gpus_per_user
            assert cap is None or gpus <= cap, (team, _owner, gpus, cap, t)
        assert held == s.user_held


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(owned_workloads())
def test_no_owner_ever_holds_more_than_the_cap(sc: dict[str, Any]) -> None:
    sim = CapWatch(sc["node_specs"], sc["tenants"], sc["works"], [], sc["config"]).run(100_000)
    # the workload is finite, and a job over its owner's cap at submit never fits: every
    # job ends (no counter left behind keeps an owner's job waiting for ever)
    assert all(rec.state in (S.COMPLETED, S.FAILED, S.CANCELLED)
               for rec in sim.sched.jobs.values())
    assert sim.sched.user_held == {}


def test_a_job_behind_a_holder_that_may_not_borrow_is_planned_within_the_holders_limit(
        ) -> None:
    # team-a: 8 guaranteed + 8 borrowed. r (2 GPUs, to t=400) runs. h (8 GPUs, no limit,
    # not checkpointable) may not borrow: it needs the team within its guarantee, so it
    # waits for r and holds the quota. u (2 GPUs, checkpointable) behind it fits the
    # team's 16 beside both, but not h's 8: the tick holds it back (QuotaReserved) until
    # h starts. Its estimate said "now" (a team lead's session, 2026-12-07): it is h's
    # start, at r's end.
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("team-a", 8, 8)], cfg(), now=0)
    sched.submit(job("r", 2, max_runtime_s=400), 0)
    sched.tick(0)
    sched.submit(job("h", 8, gpus_per_node=8, priority=10), 1)
    sched.submit(job("u", 2, checkpointable=True, max_runtime_s=3000), 1)
    for t in range(1, 40):
        sched.tick(t)
    assert sched.job("h").pending_reason == P.QUOTA_LIMIT
    u = sched.job("u")
    assert u.pending_reason == P.QUOTA_RESERVED
    assert u.start_estimate_s == 400, u.estimate_basis
    sched.check_invariants()


def test_a_job_requeued_after_a_cut_that_leaves_it_too_large_waits_for_the_quota() -> None:
    # team-a (40 + 16) runs hold (24 GPUs) and big (32, checkpointable); ahead (24, a higher
    # priority) waits for the quota. The team is cut to 16 + 8, then big's nodes fail and
    # it is requeued behind ahead in the same heap. The walk stops at ahead (the team has
    # no room at all) and big was told Priority, "until the team's running jobs free 96
    # GPUs", which could never start it (an operator's session, 2026-12-07): QuotaLimit.
    sched = Scheduler(nodes({"pod-a": 8}), [tenant("team-a", 40, 16), tenant("team-b", 8)],
                      cfg(), now=0)
    sched.submit(job("hold", 24, gpus_per_node=8, max_runtime_s=5000), 0)
    sched.submit(job("big", 32, gpus_per_node=8, checkpointable=True), 0)
    sched.tick(0)
    for j in ("hold", "big"):
        sched.confirm_start(j, 1)
    sched.submit(job("ahead", 24, gpus_per_node=8, priority=10, max_runtime_s=600), 2)
    sched.tick(2)
    assert sched.job("ahead").pending_reason == P.QUOTA_LIMIT
    sched.set_quota("team-a", 16, 8, 3)
    for node in sorted(sched.job("big").alloc or {}):
        sched.node_down(node, 4)
    for t in range(5, 10):
        sched.tick(t)
    assert sched.job("big").state == JobState.QUEUED
    assert sched.job("big").pending_reason == P.QUOTA_LIMIT
    assert sched.job("big").start_estimate_s is None
    sched.check_invariants()


def test_a_cut_tells_a_job_its_team_now_holds_too_much_for_at_once() -> None:
    # w (8 GPUs of team-a) waits for free GPUs (Resources) beside a (team-a, 8) and b
    # (team-b, 8, within its guarantee). A cut to 8 leaves the team no room for w while a
    # runs: it said "not enough free GPUs" for minutes after the cut, until a walk reached
    # it (an operator's session, 2026-12-07). The cut says QuotaLimit at once.
    sched = Scheduler(nodes({"pod-a": 2}), [tenant("team-a", 16, 16), tenant("team-b", 16)],
                      cfg(), now=0)
    sched.submit(job("a", 8, max_runtime_s=5000), 0)
    sched.submit(job("b", 8, tenant="team-b", max_runtime_s=5000), 0)
    sched.tick(0)
    sched.submit(job("w", 8, max_runtime_s=600), 1)
    sched.tick(1)
    assert sched.job("w").pending_reason in (P.RESOURCES, P.RESERVATION)
    sched.pending_news.clear()
    sched.set_quota("team-a", 8, 0, 2)
    assert sched.pending_news == {"w": P.QUOTA_LIMIT}
    assert sched.job("w").pending_reason == P.QUOTA_LIMIT
    sched.tick(3)
    assert sched.job("w").pending_reason == P.QUOTA_LIMIT
    sched.check_invariants()
