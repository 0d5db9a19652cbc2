"""The guarantees of the issue "Guarantees that hold in every case", one case per defect it
found, through the Scheduler (the rules themselves are table-tested in test_preemption.py,
test_scheduler_preemption.py and test_scheduler_rules.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.core.states import JobState, PendingReason, Reason
from tests.core.builders import nodes, tenant
from tests.core.test_scheduler import Sim, cfg, work

S = JobState
P = PendingReason
CKPT = {"checkpointable": True, "checkpoint_interval_s": 300, "checkpoint_time_s": 30,
        "restart_s": 60}


def test_a_guarantee_is_usable_for_a_job_larger_than_the_rest_of_it() -> None:
    """team-a is guaranteed 16 GPUs (and may borrow 16) and asks for 24 while team-b,
    guaranteed nothing, holds all 32: team-a's share once its job runs (1.5) is below
    team-b's (infinite), so it reclaims three of team-b's jobs at once instead of waiting
    hours."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16, 16), tenant("team-b", 0, 32)],
        [work(f"b{i}", 8, 100_000, tenant="team-b", gpus_per_node=8, **CKPT)
         for i in range(4)]
        + [work("big-a", 24, 1000, at=100, gpus_per_node=8, max_runtime_s=1000)],
    ).run(3000)
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert len(asked) == 3 and {d.at_s for d in asked} == {100}
    assert sim.started_at("big-a") == 130  # within the victims' 30 s grace window


def test_a_job_waiting_for_its_teams_quota_holds_no_idle_gpus() -> None:
    """team-a (16 guaranteed, no borrowing) holds 8 until t=5000 and its 16-GPU head waits
    for quota; 24 GPUs are idle. team-b's 24-GPU job starts at once: a quota wait reserves
    nothing on the cluster's free GPUs."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16), tenant("team-b", 16, 16)],
        [work("a-run", 8, 5000, max_runtime_s=5000),
         work("a-head", 16, 100, at=1, priority=10, max_runtime_s=100),
         work("b-job", 24, 1000, at=10, tenant="team-b", max_runtime_s=1000)],
    ).run(10_000)
    assert sim.started_at("b-job") == 10
    assert sim.first("b-job", S.PLACING).reason == Reason.PLACED
    assert [r.pending_reasons.get("a-head") for t, r in sim.ticks if 1 <= t < 1000] \
        and all(r.pending_reasons.get("a-head") in (None, P.QUOTA_LIMIT)
                for t, r in sim.ticks if 1 <= t < 5000)
    assert sim.started_at("a-head") == 5000  # when a-run's declared limit frees the quota


def test_an_estimate_counts_the_teams_quota_not_only_free_gpus() -> None:
    """Three of four nodes are idle, but team-a may hold 8 GPUs and holds them until
    t=2000: the waiting job is never told it starts now."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 8)],
        [work("a-run", 8, 2000, max_runtime_s=2000),
         work("a-next", 8, 100, at=1, max_runtime_s=100)],
    ).run(5000)
    shown = sim.estimate_kinds["a-next"]
    assert shown and {est for _at, est, _kind in shown} == {2000}
    assert sim.started_at("a-next") == 2000
    # its plan holds no GPUs: the sentence says where it would fit, not "reserved ..."
    # (a user session read "reserved 1 node ... (not reserved: ...)": 2026-12-07)
    told = [est for _t, r in sim.ticks for j, est in r.start_estimates.items()
            if j == "a-next" and est is not None and est.basis != "started"]
    assert told and {est.kind for est in told} == {"quota"}
    assert all(est.basis.startswith("would fit on 1 node (8 GPUs) in pod-a from t=")
               and "own declared limits leave room for it at t=2000" in est.basis
               and "reserved 1" not in est.basis for est in told), told[0].basis


def test_victims_come_from_the_team_furthest_over_its_share() -> None:
    """team-x is one GPU over its guarantee of 8 (an 8-GPU and a 1-GPU job); team-y is 15
    times over its guarantee of 1. team-a comes back for 8 GPUs: team-y gives, and team-x
    keeps both its jobs (taking its 8-GPU job would leave it 7 GPUs below its guarantee)."""
    sim = Sim(
        nodes({"pod-a": 3}),
        [tenant("team-a", 15), tenant("team-x", 8, 8), tenant("team-y", 1, 23)],
        [work("x-8", 8, 100_000, tenant="team-x", gpus_per_node=8, **CKPT),
         work("x-1", 1, 100_000, tenant="team-x", **CKPT),
         work("y-8", 8, 100_000, tenant="team-y", gpus_per_node=8, **CKPT),
         work("y-7", 7, 100_000, tenant="team-y", **CKPT),
         work("a-8", 8, 1000, at=100, gpus_per_node=8)],
    ).run(3000)
    victims = {d.job_id for d in sim.of(S.PREEMPT_REQUESTED)}
    assert victims and victims <= {"y-8", "y-7"}
    assert sim.started_at("a-8") is not None


def _two_pods(depth: int) -> Sim:
    """Pod a (H100): a0 busy until t=1000, a1 free. Pod b (A100): b0 busy until t=2000, b1
    free. g1 (2 H100 nodes) and g2 (2 A100 nodes), ranked first, wait: g1 for t=1000, g2 for
    t=2000. k (any 8 GPUs, t=5) would run until t=3000; j (t=10) ends by t=1500."""
    return Sim(
        nodes({"pod-a": 2, "pod-b": 2}, typed={"pod-a": "H100", "pod-b": "A100"}),
        [tenant("team-a", 32, 32)],
        [work("ra", 8, 1000, gpus_per_node=8, gpu_type="H100", max_runtime_s=1000),
         work("rb", 8, 2000, gpus_per_node=8, gpu_type="A100", max_runtime_s=2000),
         work("g1", 16, 500, at=1, gpus_per_node=8, gpu_type="H100", priority=10,
              max_runtime_s=500),
         work("g2", 16, 500, at=2, gpus_per_node=8, gpu_type="A100", priority=9,
              max_runtime_s=500),
         work("k", 8, 2990, at=5, gpus_per_node=8, max_runtime_s=2990),
         work("j", 8, 1490, at=10, gpus_per_node=8, max_runtime_s=1490)],
        config=cfg(reservation_depth=depth),
    ).run(10_000)


def test_every_reserved_start_is_respected_by_backfill_not_only_the_heads() -> None:
    sim = _two_pods(depth=16)
    assert sim.started_at("g1") == 1000 and sim.started_at("g2") == 2000
    # g2 is planned while g1's 16 GPUs are reserved too: past team-a's guarantee of 32, so
    # shown as borrowed from then on (a guarantee could take it), reserved all the same
    assert {kind for _at, _est, kind in sim.estimate_kinds["g2"]} <= {"reserved", "borrowed"}
    assert {est for _at, est, _kind in sim.estimate_kinds["g2"]} == {2000}
    assert sim.started_at("j") == 10  # ends before g2's reserved start, on g2's pod
    # k would have delayed g2 on pod b, and g1 on pod a: it starts on pod a once g1 ends
    assert sim.started_at("k") == 1500
    assert set(sim.first("k", S.PLACING).alloc) <= {"pod-a-000", "pod-a-001"}
    waits = {r.pending_reasons.get("k") for t, r in sim.ticks if 5 <= t < 1000}
    assert waits == {P.RESERVATION}


def test_with_one_reservation_the_second_gang_is_delayed_by_backfill() -> None:
    """The same cluster with only the head reserved (reservation_depth 1): k starts around
    g1's reservation, on the GPUs g2 waits for, and g2 waits for k. Many reservations
    prevent this."""
    sim = _two_pods(depth=1)
    assert sim.started_at("k") == 5
    assert sim.started_at("g2") == 5 + 2990  # when k ends, not at t=2000


def test_the_backfill_log_row_says_only_what_is_true() -> None:
    """k is placed on pod b, outside g1's reservation, and would run past g1's reserved
    start: its row says it uses none of g1's GPUs, never that it ends before g1 starts."""
    sim = _two_pods(depth=1)
    row = sim.first("k", S.PLACING)
    assert row.reason == Reason.BACKFILLED
    assert row.detail["uses_none_of"] == ["g1"] and "ends_before" not in row.detail
    j = sim.first("j", S.PLACING).detail
    for d in (row.detail, j):
        for before in d.get("ends_before", []):
            assert d["ends_by_s"] <= before["start_s"]


@pytest.mark.parametrize("runtime, limit, starts_at_once", [
    (200, 300, True),  # ends by its limit before the holder's planned start
    (3000, 3000, False),  # would keep the quota the holder waits for
    (3000, None, False),  # no declared limit: nothing shows it ends in time
])
def test_a_lower_job_of_the_team_uses_the_held_quota_only_if_it_ends_first(
        runtime: int, limit: int | None, starts_at_once: bool) -> None:
    kw: dict[str, Any] = {} if limit is None else {"max_runtime_s": limit}
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 24)],
        [work("a-run", 16, 1000, max_runtime_s=1000),
         work("holder", 16, 100, at=1, priority=10, max_runtime_s=100),
         work("lower", 8, runtime, at=2, **kw)],
    ).run(20_000)
    assert sim.started_at("holder") == 1000
    if starts_at_once:
        row = sim.first("lower", S.PLACING)
        assert row.at_s == 2 and row.reason == Reason.BACKFILLED
        assert row.detail["quota_of"] == {"job": "holder", "start_s": 1000}
    else:
        assert sim.started_at("lower") >= 1000
        assert P.QUOTA_RESERVED in {r.pending_reasons.get("lower") for _t, r in sim.ticks}


def _borrower_reserved(second_node: str) -> Sim:
    """team-g (guaranteed 8) waits with a 24-GPU gang, a borrower, ranked first (it holds
    nothing). Node 0 frees at t=1000, node 1 holds ``second_node``'s long job, nodes 2-3
    are idle: the gang's reservation is nodes 0, 2 and 3 at t=1000. At t=10 team-e, within
    its guarantee of 24, asks for 8 GPUs for longer than that: only the gang's reservation
    stands in its way."""
    other = "team-e" if second_node == "team-e" else "team-b"
    return Sim(
        nodes({"pod-a": 4}),
        [tenant("team-g", 8, 24), tenant("team-e", 24), tenant("team-b", 0, 32)],
        [work("e-run0", 8, 1000, tenant="team-e", gpus_per_node=8, max_runtime_s=1000),
         work("long-1", 8, 100_000, tenant=other, gpus_per_node=8, max_runtime_s=100_000,
              **CKPT),
         work("g-big", 24, 500, at=1, tenant="team-g", gpus_per_node=8, max_runtime_s=500),
         work("e-new", 8, 5000, at=10, tenant="team-e", gpus_per_node=8,
              max_runtime_s=5000)],
        config=cfg(max_preemption_searches_per_tick=4),  # the gang's own searches aside
    ).run(3000)


def test_a_guarantee_is_not_held_back_by_a_borrowers_plan_when_no_borrower_can_give(
) -> None:
    """No team is above its guarantee, so nobody can be preempted for team-e: it takes
    the gang's idle reserved GPUs at once (the gang, a borrower, could be preempted for it
    as soon as it started anyway), the log row says why, and the gang is planned again."""
    sim = _borrower_reserved("team-e")
    assert sim.started_at("e-new") == 10
    placed = sim.first("e-new", S.PLACING)
    assert placed.detail.get("entitled_past") == ["g-big"]
    assert not sim.of(S.PREEMPT_REQUESTED)
    assert sim.started_at("g-big") is None  # within the 3000 s run
    assert sim.estimate_kinds["g-big"][-1][1] >= 5010  # planned behind e-new's limit


def _within_guarantee_reserved() -> Sim:
    """As above, but the gang's team stays within its guarantee (24): its reservation is
    a guarantee too, and team-e's job waits for it."""
    return Sim(
        nodes({"pod-a": 4}),
        [tenant("team-g", 24, 8), tenant("team-e", 8, 16)],
        [work("e-run0", 8, 1000, tenant="team-e", gpus_per_node=8, max_runtime_s=1000),
         # a borrower nothing may preempt: a limit within protected_borrow_max_s
         work("long-1", 8, 7200, tenant="team-e", gpus_per_node=8, max_runtime_s=7200),
         work("g-big", 24, 500, at=1, tenant="team-g", gpus_per_node=8, max_runtime_s=500),
         work("e-new", 8, 5000, at=10, tenant="team-e", gpus_per_node=8,
              max_runtime_s=5000)],
    ).run(3000)


def test_a_reservation_within_its_teams_guarantee_binds_everyone() -> None:
    sim = _within_guarantee_reserved()
    assert sim.started_at("g-big") == 1000
    waits = {r.pending_reasons.get("e-new") for t, r in sim.ticks if 10 <= t < 1000}
    assert waits == {P.RESERVATION}


def test_a_guaranteed_job_blocked_only_by_a_borrowers_reservation_reclaims_first() -> None:
    """team-b, guaranteed nothing, holds node 1: team-e takes its guarantee back from it
    by preemption, within the victim's grace window, and the gang still starts at its
    reserved time."""
    sim = _borrower_reserved("team-b")
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert [(d.job_id, d.at_s) for d in asked] == [("long-1", 10)]
    started = sim.started_at("e-new")
    assert started is not None and started <= 10 + CKPT["checkpoint_time_s"] + 5
    assert set(sim.first("e-new", S.PLACING).alloc) == {"pod-a-001"}
    assert sim.started_at("g-big") == 1000


def test_a_reservation_is_a_promise_a_later_higher_ranked_job_plans_around() -> None:
    """r-gang (team-b, 16 GPUs) is reserved both nodes at t=2000, when b-run reaches its
    limit. At t=10 h-long of team-c (which has used nothing, so it ranks first) asks for
    8 GPUs for 5000 s. Node 0 frees at t=1000: h-long may not take it, since it would
    still run at r-gang's reserved start. r-gang starts at t=2000, as every estimate it
    was shown said."""
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8, 8), tenant("team-b", 8, 16), tenant("team-c", 0, 16)],
        [work("a-run", 8, 1000, gpus_per_node=8, max_runtime_s=1000),
         work("b-run", 8, 2000, tenant="team-b", gpus_per_node=8, max_runtime_s=2000),
         work("r-gang", 16, 100, at=1, tenant="team-b", gpus_per_node=8,
              max_runtime_s=100),
         work("h-long", 8, 5000, at=10, tenant="team-c", gpus_per_node=8,
              max_runtime_s=5000)],
    ).run(10_000)
    assert sim.started_at("r-gang") == 2000
    shown = sim.estimate_kinds["r-gang"]
    assert shown and {est for _at, est, _kind in shown} == {2000}
    started = sim.started_at("h-long")
    assert started is not None and started >= 2100  # after r-gang, by its limit


def test_a_kept_reservation_takes_a_fresh_plan_only_when_it_starts_no_later() -> None:
    """g waits for both nodes; a-run's limit says t=3000 but it ends at t=500: the next
    refresh plans g afresh at once and g starts when the GPUs are free, not at t=3000."""
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 16, 0)],
        [work("a-run", 8, 500, gpus_per_node=8, max_runtime_s=3000),
         work("g", 16, 100, at=1, gpus_per_node=8, max_runtime_s=100)],
    ).run(10_000)
    assert sim.started_at("g") == 500


def test_a_reserved_job_starts_at_once_when_its_gpus_free_up_before_the_promised_time():
    # Found by the per-user property: two jobs without limits reserved for t=500 (when a
    # running job reaches its limit) on disjoint GPUs; every running job ends at t=11.
    # Each may start on its own reserved GPUs at once: waiting for the promised time (or
    # for the next refresh) left the whole cluster idle, and the test's driver, which
    # ticks only after a change, idle for ever.
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("t0", 0, 16), tenant("t1", 0, 16)],
        # (every job borrows, from teams guaranteed nothing: preemptible pricing lets
        # those without a limit borrow, and no team here may preempt)
        [work("j2", 1, 10, tenant="t0", preemptible=True),
         work("j3", 1, 10, tenant="t0", preemptible=True),
         work("j4", 5, 11, tenant="t0", max_runtime_s=500),
         work("j0", 11, 10, tenant="t0", at=1, preemptible=True),
         work("j1", 3, 10, tenant="t0", at=1, preemptible=True),
         work("j5", 1, 10, tenant="t1", at=1, preemptible=True)],
    ).run(100_000)
    assert {j: sim.started_at(j) for j in ("j0", "j1")} == {"j0": 11, "j1": 11}
    assert all(sim.first(j, S.COMPLETED) for j in ("j0", "j1"))


# ---- a job nothing can preempt borrows only for a bounded time --------------------------
@pytest.mark.parametrize(
    ("name", "flags", "borrows"),
    [
        ("no flag, no limit (the API's defaults)", {}, False),
        ("no flag, a limit past protected_borrow_max_s", {"max_runtime_s": 7201}, False),
        ("no flag, a limit within it", {"max_runtime_s": 7200}, True),
        ("checkpointable", {"checkpointable": True, "checkpoint_interval_s": 300,
                            "checkpoint_time_s": 30}, True),
        ("preemptible pricing", {"preemptible": True}, True),
        ("interactive is no way around it", {"interactive": True}, False),
    ],
)
def test_a_job_that_cannot_be_preempted_borrows_only_with_a_short_limit(
        name: str, flags: dict[str, Any], borrows: bool) -> None:
    """Found by a user session (2026-12-07): 30 jobs submitted with the API's defaults
    (not checkpointable, no time limit) held another team's guarantee for good, since
    nothing may preempt them. Such a job borrows only with a declared limit of at most
    ``protected_borrow_max_s`` (7,200 s): the lender waits at most that long."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16), tenant("team-b", 16, 16)],
        [work(f"b{i}", 8, 5000, tenant="team-b", gpus_per_node=8, **flags)
         for i in range(4)],
    ).run(100)
    started = {f"b{i}" for i in range(4) if sim.started_at(f"b{i}") is not None}
    assert started == ({"b0", "b1", "b2", "b3"} if borrows else {"b0", "b1"})
    if not borrows:
        assert sim.sched.jobs["b2"].pending_reason == P.QUOTA_LIMIT


@pytest.mark.parametrize("split", [False, True])
def test_a_guarantee_comes_back_within_the_grace_window_from_one_large_borrower(
        split: bool) -> None:
    """A researcher's session (2026-12-07): team-b (guaranteed 8) held all 32 GPUs in one
    checkpointable job, and team-a, holding nothing of its 24, waited for it to end (a day)
    with no preemption: losing the job left team-b below team-a's share, which the third
    condition forbids, while the same 32 GPUs as four 8-GPU jobs gave back at once. Now
    the reclaim search takes the one job, within the victim's grace window, and says so."""
    jobs = ([work(f"b-{i}", 8, 86_400, tenant="team-b", gpus_per_node=8, **CKPT)
             for i in range(4)] if split else
            [work("b-all", 32, 86_400, tenant="team-b", gpus_per_node=8, **CKPT)])
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 24), tenant("team-b", 8, 24)],
        jobs + [work("a-1", 8, 600, at=1000, gpus_per_node=8, max_runtime_s=900)],
    ).run(5000)
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert len(asked) == 1 and asked[0].at_s == 1000
    assert sim.started_at("a-1") <= 1000 + 30 + 5  # the grace window, and a tick
    assert ("back below it" in asked[0].detail["why"]) is not split


def test_a_team_gets_its_guarantee_back_from_borrowers_nothing_may_preempt() -> None:
    """The user session's scenario: team-b's four 8-GPU jobs with the default flags; team-a
    (16 guaranteed) submits 16 GPUs at t=1000. Before, none of b's jobs could be preempted
    and a-1 started at t=15,000; now b borrowed nothing and a-1 starts at once."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16), tenant("team-b", 16, 16)],
        [work(f"b-{i}", 8, 15_000, tenant="team-b", gpus_per_node=8) for i in range(4)]
        + [work("a-1", 16, 600, at=1000, gpus_per_node=8, max_runtime_s=900, **CKPT)],
    ).run(20_000)
    assert sim.started_at("a-1") == 1000
    assert not sim.of(S.PREEMPT_REQUESTED)


def test_protected_borrow_max_s_0_means_such_jobs_never_borrow_and_bigger_ones_never_fit(
) -> None:
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-b", 16, 16)],
        [work("short", 8, 50, tenant="team-b", max_runtime_s=60) for _ in range(1)]
        + [work(f"s{i}", 8, 50, tenant="team-b", max_runtime_s=60) for i in range(2)],
        config=cfg(protected_borrow_max_s=0),
    ).run(10)
    assert sum(sim.started_at(j) is not None for j in ("short", "s0", "s1")) == 2
    from scheduler_app.core.scheduler import Scheduler
    from scheduler_app.core.types import JobSpec

    sched = Scheduler(nodes({"pod-a": 4}), [tenant("team-b", 16, 16)],
                      cfg(protected_borrow_max_s=0), now=0)
    big = JobSpec(id="big", seq=1, tenant="team-b", gpus=24, submit_s=0)
    why = sched._never_fits(big)
    assert why is not None and "guaranteed 16" in why and "cannot be preempted" in why


def test_a_head_whose_gpus_are_reclaimed_is_told_so_at_once() -> None:
    """a-head borrows, so it holds a reservation behind team-b's borrowers (start t=10000);
    its team's guarantee is raised at t=100 and it reclaims from team-b at once. Its
    estimate is the claim's from that tick: the reservation's "at the latest t=10000" stood
    until the look-ahead's round reached it (50 minutes out, for a job that started 25 s
    later: a check of the estimates on the demo, 2026-12-07)."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 8, 24), tenant("team-b", 8, 24)],
        [work("b-run", 24, 100_000, tenant="team-b", max_runtime_s=10_000, **CKPT),
         work("a-run", 8, 5000, max_runtime_s=5000),
         work("a-head", 16, 1000, at=10, max_runtime_s=1000)],
        events=[(100, "set_quota", ("team-a", 24, 8))],
    ).run(3000)
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert [d.job_id for d in asked] == ["b-run"] and asked[0].at_s == 100
    shown = sim.estimate_kinds["a-head"]
    assert any(kind in ("reserved", "borrowed") and est == 10_000 for _t, est, kind in shown)
    at_100 = [(est, kind) for t, est, kind in shown if t == 100]
    assert at_100 == [(130, "reclaim")], shown  # the victim's 30 s grace window
    assert sim.started_at("a-head") is not None and sim.started_at("a-head") <= 130


def test_a_job_whose_reservation_is_dropped_loses_its_reserved_estimate() -> None:
    """a-head borrows, so it reserves behind team-b's borrower ("at the latest t=10000").
    Its team's borrow limit is cut at t=100: its team's job with no limit leaves it no
    room at that start, so the reservation is not kept. A job beyond the look-ahead
    (estimate_lookahead=0 here) was never planned again, and a job told QuotaLimit still
    read "reserved 8 nodes" ten minutes on (a check of the estimates on the demo,
    2026-12-07): its estimate goes with its reservation."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16, 16), tenant("team-b", 0, 32)],
        [work("b-run", 24, 100_000, tenant="team-b", max_runtime_s=10_000, **CKPT),
         work("a-run", 8, 100_000),
         work("a-head", 16, 1000, at=10, max_runtime_s=1000)],
        events=[(100, "set_quota", ("team-a", 16, 0))],
        config=cfg(estimate_lookahead=0),
    ).run(1000)
    assert (10, 10_000) in sim.estimates["a-head"]
    assert sim.estimates["a-head"][-1] == (100, None), sim.estimates["a-head"]
    assert [r.pending_reasons.get("a-head") for t, r in sim.ticks if t == 100][-1] \
        == P.QUOTA_LIMIT
