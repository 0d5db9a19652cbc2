"""Reclaim through the Scheduler: grace protocol, cap, quota changes, interactive, policies."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.core.types import SchedulerConfig
from tests.core.builders import nodes, tenant
from tests.core.test_scheduler import Sim, work

S = JobState
P = PendingReason


def _borrowed_cluster(victim_kw: dict[str, Any], head_kw: dict[str, Any] | None = None,
                      config: SchedulerConfig | None = None, until: int = 4000,
                      events: list | None = None) -> Sim:
    """One 8-GPU node. team-b guarantees nothing and borrows it with ``victim``; team-a
    (guarantee 8) submits ``head`` at t=1000."""
    victim_kw = {"checkpointable": True, "checkpoint_interval_s": 300, "restart_s": 60,
                 **victim_kw}
    return Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8), tenant("team-b", 0, 8)],
        [
            work("victim", 8, 100_000, tenant="team-b", **victim_kw),
            work("head", 8, 500, at=1000, **(head_kw or {})),
        ],
        events=events or [],
        config=config or SchedulerConfig(),
    ).run(until)


def test_a_core_without_views_asks_the_same_victim_without_the_weighed_list() -> None:
    """``look_ahead`` off (a simulation recording no view): the same victim, the same
    words and costs, but no "weighed" (a view that sorts and words every candidate)."""
    def asked(look_ahead: bool) -> dict[str, Any]:
        sim = _borrowed_cluster({}, until=0)
        sim.sched.look_ahead = look_ahead
        (request,) = sim.run(4000).of(S.PREEMPT_REQUESTED)
        return dict(request.detail)

    with_views, without = asked(True), asked(False)
    assert with_views["weighed"] and with_views["weighed"][0].startswith("evicted job victim")
    assert "weighed" not in without
    del with_views["weighed"]
    assert without == with_views


def test_reclaim_picks_the_cheapest_borrower_and_asks_first() -> None:
    """SCENARIOS reclaim-cheapest-victim: the sweep goes, the training run stays."""
    sim = Sim(
        nodes({"pod-a": 9}),
        [tenant("team-a", 64), tenant("team-b", 0, 72)],
        [
            work("train-b", 64, 100_000, tenant="team-b", gpus_per_node=8, checkpointable=True,
                 checkpoint_interval_s=1800, checkpoint_time_s=60, restart_s=600),
            work("sweep-b", 8, 100_000, tenant="team-b", gpus_per_node=8, checkpointable=True,
                 checkpoint_interval_s=300, checkpoint_time_s=40, restart_s=60),
            work("eval-a", 8, 1200, at=3300, gpus_per_node=8, max_runtime_s=1800,
                 checkpointable=True, checkpoint_interval_s=600, checkpoint_time_s=30,
                 restart_s=60),
        ],
    ).run(7200)
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert [(d.job_id, d.at_s) for d in asked] == [("sweep-b", 3300)]
    detail = asked[0].detail
    assert detail["for"] == "eval-a"
    last = max(d.at_s for d in sim.log if d.job_id == "sweep-b"
               and d.reason == Reason.CHECKPOINTED and d.at_s <= 3300)
    assert detail["cost_s"] == (3300 - last) + 60  # since its last checkpoint + restart
    assert detail["cost_s"] < 1500 + 600  # the training run would lose far more
    assert detail["est_gpu_s_lost"] == detail["cost_s"] * 8
    assert "train-b" in " ".join(detail["weighed"])  # it was weighed, and kept
    asked_then = [m for m in sim.moves("sweep-b")  # its own periodic checkpoint aside
                  if 3300 <= m[0] <= 3340 and m[1:] != ("RUNNING", "Checkpointed")]
    assert asked_then[:3] == [
        (3300, "PREEMPT_REQUESTED", "PreemptRequested"),
        (3300, "CHECKPOINTING", "CheckpointStarted"),
        (3340, "CHECKPOINTING", "Checkpointed"),
    ]
    assert sim.first("sweep-b", S.PREEMPTED).reason == Reason.PREEMPTED
    assert sim.started_at("eval-a") == 3340
    assert sim.sched.job("train-b").preemptions == 0


def test_grace_is_honoured_when_the_job_checkpoints_early() -> None:
    sim = _borrowed_cluster({"checkpoint_time_s": 10})
    assert sim.first("victim", S.PREEMPT_REQUESTED).at_s == 1000
    assert sim.first("victim", S.PREEMPTED).reason == Reason.PREEMPTED
    assert sim.first("victim", S.PREEMPTED).at_s == 1010  # it finished before the window
    assert sim.started_at("head") == 1010


def test_grace_is_honoured_when_the_job_ignores_the_request() -> None:
    sim = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8), tenant("team-b", 0, 8)],
        [work("victim", 8, 100_000, tenant="team-b", checkpointable=True,
              checkpoint_interval_s=300, checkpoint_time_s=90, ignores_preempt=True),
         work("head", 8, 500, at=1000)],
    )
    sim.run(1089)
    assert sim.state["victim"] == S.PREEMPT_REQUESTED  # not killed before expiry
    assert sim.state["head"] == S.QUEUED
    assert sim.sched.job("head").pending_reason == P.PREEMPTING
    sim.run(4000)
    killed = sim.first("victim", S.PREEMPTED)
    assert (killed.at_s, killed.reason, killed.detail["killed"]) == (
        1090, Reason.GRACE_EXPIRED, True)
    requeued = sim.first("victim", S.QUEUED, Reason.REQUEUED)
    assert requeued.detail["resume_pointer"] == 900  # its last checkpoint stands
    assert sim.sched.job("victim").preemptions == 1  # charged to its cap
    assert sim.started_at("head") == 1090


def test_gpus_are_not_handed_over_before_the_victim_exits() -> None:
    sim = _borrowed_cluster({"checkpoint_time_s": 60},
                            until=4000)
    exited = sim.first("victim", S.PREEMPTED).at_s
    assert sim.started_at("head") == exited == 1060
    assert [d.job_id for d in sim.log if d.to_state == S.PLACING and 1000 <= d.at_s < 1060] == []


def test_the_cap_never_keeps_a_guarantee_from_its_team() -> None:
    """Past the daily cap, a borrower still gives a team its guarantee back within the
    grace window: protected, it kept team-a's 8 GPUs for its whole 100,000 s (a
    researcher's session, 2026-12-07)."""
    sim = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8), tenant("team-b", 0, 8)],
        [
            work("victim", 8, 100_000, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=60, checkpoint_time_s=10),
            work("a1", 8, 100, at=1000),
            work("a2", 8, 100, at=2000),
            work("a3", 8, 100, at=3000),
        ],
    ).run(5000)
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert [d.at_s for d in asked] == [1000, 2000, 3000]
    assert "victim was past the daily preemption cap (2 within a day), and no set of " \
        "victims without it gives team team-a its guarantee back" in asked[2].detail["why"]
    assert sim.sched.job("victim").preemptions_last_day == 3
    assert sim.started_at("a3") == 3010  # the victim's 10 s checkpoint, then a3 runs
    assert sim.state["victim"] == S.RUNNING  # back on the node once a3 is done


def test_the_cap_protects_a_job_after_two_preemptions_from_borrowers() -> None:
    """team-c's head would borrow (it is guaranteed 4 and asks 8): it may take team-b's
    GPUs, since team-b is further over, but not from the job past its daily cap; it takes
    the dearer job that is not."""
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8), tenant("team-b", 0, 16), tenant("team-c", 4, 12)],
        [
            work("victim", 8, 100_000, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=60, checkpoint_time_s=10),
            work("dear", 8, 100_000, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=3000, checkpoint_time_s=10, restart_s=600),
            work("a1", 8, 100, at=1000),
            work("a2", 8, 100, at=2000),
            work("c1", 8, 100, at=3000, tenant="team-c", checkpointable=True),
        ],
    ).run(5000)
    assert [(d.job_id, d.at_s) for d in sim.of(S.PREEMPT_REQUESTED)] == [
        ("victim", 1000), ("victim", 2000), ("dear", 3000)]
    (asked,) = [d for d in sim.of(S.PREEMPT_REQUESTED) if d.job_id == "dear"]
    assert any("only a team taking its guarantee back may preempt it again" in w
               for w in asked.detail["weighed"])
    assert sim.sched.job("victim").preemptions_last_day == 2


def test_non_checkpointable_jobs_are_protected_unless_preemptible() -> None:
    # a limit within protected_borrow_max_s: without one it could not borrow at all
    kept = _borrowed_cluster({"checkpointable": False, "max_runtime_s": 7200})
    assert kept.of(S.PREEMPT_REQUESTED) == [] and kept.state["head"] == S.QUEUED
    cheap = _borrowed_cluster({"checkpointable": False, "preemptible": True})
    stop = cheap.first("victim", S.PREEMPTED)
    assert (stop.at_s, stop.reason) == (1000, Reason.NO_CHECKPOINT)  # exits at once
    assert cheap.started_at("head") == 1000


def test_raising_a_tenants_quota_makes_it_entitled_and_triggers_reclaim() -> None:
    sim = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 0, 8), tenant("team-b", 0, 8)],
        [work("victim", 8, 100_000, tenant="team-b", checkpointable=True,
              checkpoint_interval_s=300, checkpoint_time_s=20),
         work("head", 8, 500, at=1000, max_runtime_s=500)],
        events=[(1500, "set_quota", ("team-a", 8, 0))],
    ).run(4000)
    assert [(d.job_id, d.at_s) for d in sim.of(S.PREEMPT_REQUESTED)] == [("victim", 1500)]
    assert sim.started_at("head") == 1520


def test_interactive_jobs_never_preempt() -> None:
    cannot_ask = _borrowed_cluster({}, head_kw={"interactive": True})
    assert cannot_ask.of(S.PREEMPT_REQUESTED) == []
    assert cannot_ask.state["head"] == S.QUEUED


def test_without_a_slice_the_interactive_flag_is_no_shield() -> None:
    """Any researcher can tick "interactive": with no interactive slice it is an ordinary
    job, preempted like any other borrower."""
    sim = _borrowed_cluster({"interactive": True, "checkpoint_time_s": 20})
    assert [(d.job_id, d.at_s) for d in sim.of(S.PREEMPT_REQUESTED)] == [("victim", 1000)]
    assert sim.started_at("head") == 1020


def _slice_cluster(notebook_gpus: int) -> Sim:
    """Two 8-GPU nodes, the last one the interactive slice. team-b (no guarantee) runs a
    notebook and a checkpointable batch job; team-a (guarantee 8) comes back at t=1000."""
    ckpt = {"checkpointable": True, "checkpoint_interval_s": 300, "checkpoint_time_s": 20,
            "restart_s": 60}
    return Sim(
        nodes({"pod-a": 3}),
        [tenant("team-a", 8), tenant("team-b", 0, 24)],
        [work("notebook", notebook_gpus, 100_000, tenant="team-b", interactive=True, **ckpt),
         work("batch", 8, 100_000, tenant="team-b", **ckpt),
         work("batch-2", 8, 100_000, tenant="team-b", **ckpt),
         work("head", 8, 500, at=1000)],
        config=SchedulerConfig(interactive_reserved_gpus=8),
    ).run(4000)


def test_an_interactive_job_in_the_slice_runs_there_and_is_never_preempted() -> None:
    sim = _slice_cluster(notebook_gpus=4)
    assert set(sim.first("notebook", S.PLACING).alloc) == {"pod-a-002"}  # the slice
    assert sim.sched.in_slice(sim.first("notebook", S.PLACING).alloc)
    for batch in ("batch", "batch-2"):  # batch jobs never run in the slice
        assert "pod-a-002" not in sim.first(batch, S.PLACING).alloc
    asked = [d.job_id for d in sim.of(S.PREEMPT_REQUESTED)]
    assert asked and "notebook" not in asked
    assert sim.sched.jobs["notebook"].state == S.RUNNING
    weighed = " ".join(sim.first(asked[0], S.PREEMPT_REQUESTED).detail["weighed"])
    assert "job notebook: protected: an interactive job in the interactive slice" in weighed


def test_an_interactive_job_larger_than_the_slice_is_an_ordinary_job() -> None:
    sim = _slice_cluster(notebook_gpus=16)
    alloc = sim.first("notebook", S.PLACING).alloc
    assert "pod-a-002" not in alloc  # not in the slice: outside it, as an ordinary job
    assert not sim.sched.in_slice(alloc)


def test_the_grace_window_is_capped_whatever_the_job_declares() -> None:
    """A borrower that declares a year-long checkpoint and ignores the request is killed
    at the cap (max_grace_period_s, default 600 s), and the head starts then."""
    sim = _borrowed_cluster({"checkpoint_time_s": 31_000_000}, until=5000)
    sim_ignoring = Sim(
        nodes({"pod-a": 1}),
        [tenant("team-a", 8), tenant("team-b", 0, 8)],
        [work("victim", 8, 100_000, tenant="team-b", ignores_preempt=True,
              checkpointable=True, checkpoint_interval_s=300, checkpoint_time_s=31_000_000),
         work("head", 8, 500, at=1000)],
    ).run(5000)
    for s in (sim, sim_ignoring):
        asked = s.first("victim", S.PREEMPT_REQUESTED)
        assert asked.at_s == 1000 and asked.detail["grace_s"] == 600
        assert s.first("victim", S.PREEMPTED).at_s <= 1600
        assert s.started_at("head") <= 1600
    killed = sim_ignoring.first("victim", S.PREEMPTED)
    assert (killed.at_s, killed.reason) == (1600, Reason.GRACE_EXPIRED)
    assert killed.detail == {"killed": True, "grace_s": 600}


@pytest.mark.parametrize("declared, default, cap, want", [
    (40, 120, 600, 40),  # its own, short
    (None, 120, 600, 120),  # the default
    (31_000_000, 120, 600, 600),  # capped
    (None, 900, 600, 600),  # a default past the cap is capped too
    (300, 120, 60, 60),  # an operator's tighter cap
])
def test_grace_window_table(declared, default, cap, want) -> None:
    from scheduler_app.core.scheduler import grace_window
    from scheduler_app.core.types import JobSpec

    spec = JobSpec(id="j", seq=1, tenant="t", gpus=1, submit_s=0, checkpoint_time_s=declared)
    config = SchedulerConfig(grace_period_s=default, max_grace_period_s=cap)
    assert grace_window(spec, config) == want


def test_priority_kill_kills_at_once_and_starts_the_head_in_the_same_tick() -> None:
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8), tenant("team-b", 0, 16)],
        [
            work("old-b", 8, 100_000, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=300, restart_s=60),
            work("new-b", 8, 100_000, at=500, tenant="team-b", checkpointable=True,
                 checkpoint_interval_s=300, restart_s=60),
            work("head", 8, 500, at=1000),
        ],
        config=SchedulerConfig(policy="priority-kill"),
    ).run(1000)
    assert [m[1:] for m in sim.moves("new-b")[-3:]] == [
        ("PREEMPT_REQUESTED", "PreemptRequested"), ("PREEMPTED", "Preempted"),
        ("QUEUED", "Requeued")]
    assert {m[0] for m in sim.moves("new-b")[-3:]} == {1000}
    assert sim.started_at("head") == 1000
    assert sim.sched.job("old-b").preemptions == 0  # the most recently started went
    # one tick, not two at the same instant: the kill and the head's placement come out
    # together (a placement that failed earlier in the tick is searched again once the
    # kill has changed the state)
    (killing,) = [r for _t, r in sim.ticks
                  if any(d.job_id == "new-b" and d.to_state == "PREEMPTED" for d in r.decisions)]
    assert any(d.job_id == "head" and d.to_state == "PLACING" for d in killing.decisions)


@pytest.mark.parametrize("a_limit", [None, 5000])  # 5000: ends after the reserved start
def test_a_borrowers_reservation_never_blocks_another_teams_entitled_job(a_limit) -> None:
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8), tenant("team-b", 0, 16)],
        [
            work("b-run", 8, 1000, tenant="team-b", max_runtime_s=1000),
            work("b-big", 16, 100, at=10, tenant="team-b", max_runtime_s=200),
            work("a-small", 8, 100, at=20, max_runtime_s=a_limit),
            work("a-next", 8, 100, at=20),  # planned behind them: estimates stay consistent
        ],
    ).run(3000)
    assert sim.started_at("a-small") == 20  # b-big's reservation does not hold it back
    assert sim.started_at("b-big") >= 1000



def test_one_preemption_search_per_tick_by_default() -> None:
    # Two entitled heads (team-a's and team-c's), each needing a node that team-b's
    # checkpointable sweeps borrow: the default searches once a tick, so the second head
    # is weighed (and its victim asked) at a later tick, not in the same one.
    sweep = {"tenant": "team-b", "gpus_per_node": 8, "checkpointable": True,
             "checkpoint_interval_s": 300, "restart_s": 60}
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8), tenant("team-b", 0, 16), tenant("team-c", 8)],
        [work("sweep-1", 8, 100_000, **sweep), work("sweep-2", 8, 100_000, **sweep),
         work("head-a", 8, 500, at=1000, gpus_per_node=8),
         work("head-c", 8, 500, at=1000, tenant="team-c", gpus_per_node=8)],
    ).run(1100)
    assert SchedulerConfig().max_preemption_searches_per_tick == 1
    assert all(r.stats["preemption_searches"] <= 1 for _t, r in sim.ticks)
    asked = sim.of(S.PREEMPT_REQUESTED)
    assert sorted(d.detail["for"] for d in asked) == ["head-a", "head-c"]
    per_tick = [sum(d.to_state == S.PREEMPT_REQUESTED for d in r.decisions)
                for _t, r in sim.ticks]
    assert sorted(n for n in per_tick if n) == [1, 1]  # two ticks, one victim each


def _heads_on_borrowed_nodes(borrowers: list[tuple[str, str, int, bool]],
                             guarantees: dict[str, int], node_count: int,
                             heads: list[tuple[str, str, int, int]]) -> Any:
    """Borrowers (id, team, GPUs, checkpointable) fill pod-a's ``node_count`` nodes, then
    the heads (id, team, GPUs, priority) arrive; one preemption search per tick."""
    from scheduler_app.core.scheduler import Scheduler
    from scheduler_app.core.types import JobSpec

    teams = sorted({t for _j, t, _g, _c in borrowers} | {t for _j, t, _g, _p in heads})
    sched = Scheduler(nodes({"pod-a": node_count}),
                      [tenant(t, guarantees.get(t, 0), 16) for t in teams],
                      SchedulerConfig(max_preemption_searches_per_tick=1), now=0)
    seq = iter(range(1, 100))

    def spec(job_id: str, team: str, gpus: int, **kw: Any) -> JobSpec:
        return JobSpec(id=job_id, tenant=team, gpus=gpus, gpus_per_node=min(gpus, 8),
                       seq=next(seq), submit_s=0, max_runtime_s=7200, **kw)

    for job_id, team, gpus, ckpt in borrowers:
        sched.submit(spec(job_id, team, gpus, checkpointable=ckpt,
                          checkpoint_interval_s=600 if ckpt else None), 0)
    for d in sched.tick(0).decisions:
        if d.to_state == S.PLACING:
            sched.confirm_start(d.job_id, 1)
    for job_id, team, gpus, priority in heads:
        sched.submit(spec(job_id, team, gpus, priority=priority), 10)
    return sched


def test_a_head_left_without_a_search_by_the_ticks_budget_searches_at_the_next_tick() -> None:
    # One preemption search per tick. Three nodes, each filled by two 4-GPU jobs of one
    # borrowing team (guaranteed 2, holding 8: share 4). head-a (16 GPUs in whole nodes,
    # ranked first, team guaranteed 16: share 1 once it runs) may preempt, but each team
    # may give only one of its jobs (without both its share would fall below 1), so no
    # node can be emptied: the search is vain, and the bound before a search does not see
    # it (three teams may give 4 each on three nodes). head-b (4 GPUs) could take one job.
    # The tick that spent its search on head-a decided nothing, yet it is no fixed point:
    # the next tick searches for head-b (before, it waited for the next change of state).
    borrowers = [(f"{t}{i}", f"team-{t}", 4, True) for t in "cde" for i in (1, 2)]
    sched = _heads_on_borrowed_nodes(
        borrowers, {"team-a": 16, "team-b": 8, "team-c": 2, "team-d": 2, "team-e": 2}, 3,
        [("head-a", "team-a", 16, 10), ("head-b", "team-b", 4, 0)])
    first = sched.tick(10)
    assert [d for d in first.decisions if d.to_state == S.PREEMPT_REQUESTED] == []
    assert first.stats["preemption_searches"] == 1 and first.stats["search_denied"]
    second = sched.tick(15)
    asked = [(d.job_id, d.detail.get("for")) for d in second.decisions
             if d.to_state == S.PREEMPT_REQUESTED]
    assert len(asked) == 1 and asked[0][1] == "head-b"


def test_a_head_no_search_can_help_leaves_the_ticks_search_to_the_next_head() -> None:
    # head-a's only way in is c1, which cannot checkpoint: with every job that could ever
    # be a victim gone, one node would still be short (preemption.cannot_make_room). That
    # bound takes no search from the tick's budget, so head-b's victim is asked in the
    # same tick, and head-a is not searched at the next tick either.
    sched = _heads_on_borrowed_nodes(
        [("c1", "team-c", 8, False), ("c2", "team-c", 8, True)],
        {"team-a": 8, "team-b": 8}, 2, [("head-a", "team-a", 16, 10), ("head-b", "team-b", 8, 0)])
    first = sched.tick(10)
    asked = [(d.job_id, d.detail.get("for")) for d in first.decisions
             if d.to_state == S.PREEMPT_REQUESTED]
    assert asked == [("c2", "head-b")]
    assert first.stats["preemption_searches"] == 1 and not first.stats["search_denied"]
    second = sched.tick(11)  # c2 is leaving for head-b; head-a still cannot get in
    assert second.stats["preemption_searches"] == 0
    assert "head-a" in sched.vain_searches


@pytest.mark.parametrize(("first_on_node_b", "preempts"), [
    # team-a's 8-GPU job starts on node B in the same tick, ahead of head: team-a's share
    # once head runs is then 12/8 = 1.5, not below team-b's 6/4 = 1.5, so no victim
    ("team-a", False),
    # node B is another team's: team-a holds nothing, its share after head is 0.5
    ("team-c", True),
])
def test_a_start_earlier_in_the_tick_counts_in_the_next_heads_share(first_on_node_b: str,
                                                                    preempts: bool) -> None:
    # The walk remembers the teams' loads and each head's right to preempt while the
    # state holds; a start changes the state, so the head examined after it in the same
    # tick is weighed with its team's new share.
    borrow = {"tenant": "team-b", "checkpointable": True, "checkpoint_interval_s": 300,
              "restart_s": 60, "gpus_per_node": 4}
    at = 0 if first_on_node_b == "team-c" else 1000
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 8, 8), tenant("team-b", 4, 4), tenant("team-c", 0, 8)],
        [work("b-4", 4, 100_000, **borrow), work("b-2", 2, 100_000, **{**borrow,
                                                                          "gpus_per_node": 2}),
         work("first", 8, 100_000, at=at, tenant=first_on_node_b, gpus_per_node=8,
              max_runtime_s=7200),
         work("head", 4, 500, at=1000, gpus_per_node=4)],
    ).run(1100)
    assert sim.started_at("first") == at
    assert sim.started_at("b-2") == 0  # team-b holds 6 of node A's 8 GPUs, borrowing 2
    asked = [(d.job_id, d.detail["for"]) for d in sim.of(S.PREEMPT_REQUESTED)]
    assert asked == ([("b-2", "head")] if preempts else [])  # the cheaper victim


def test_a_head_on_reclaimed_gpus_counts_once_against_its_teams_reserved_quota() -> None:
    """team-a (16 guaranteed, 16 borrowed) reclaims 16 GPUs for a-head at t=100; a-next,
    which would borrow, holds a reservation for t=2000 behind it. When the victim exits
    (t=120) a-head starts: the GPUs being reclaimed for it become its running GPUs and
    count once when its team's quota at a-next's start is checked (counted twice, they
    held the guarantee off until t=2000)."""
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16, 16), tenant("team-b", 0, 32)],
        [
            work("b-kept", 16, 2000, tenant="team-b", gpus_per_node=8, max_runtime_s=2000),
            work("b-ckpt", 16, 100_000, tenant="team-b", gpus_per_node=8, checkpointable=True,
                 checkpoint_interval_s=300, checkpoint_time_s=20, restart_s=60),
            work("a-head", 16, 5000, at=100, gpus_per_node=8, max_runtime_s=5000),
            work("a-next", 16, 1000, at=101, gpus_per_node=8, max_runtime_s=1000),
        ],
    ).run(8000)
    assert [(d.job_id, d.at_s) for d in sim.of(S.PREEMPT_REQUESTED)] == [("b-ckpt", 100)]
    assert sim.first("b-ckpt", S.PREEMPTED).at_s == 120
    assert sim.started_at("a-head") == 120
    assert sim.started_at("a-next") == 2000  # its reservation, shown from t=101


def _leaving_gang(c_gpus: int = 8, until: int = 4000, **gang_kw: Any) -> Sim:
    """Three 8-GPU nodes, all borrowed by team-b: a 16-GPU gang that checkpointed a
    minute ago (cheap to stop) and an 8-GPU job that never has (dear). team-a and team-c
    (8 each) come back for 8 GPUs each at t=1000: team-a's head takes the gang, whose
    second node it does not need."""
    ckpt = {"checkpointable": True, "checkpoint_time_s": 30}
    return Sim(
        nodes({"pod-a": 3}),
        [tenant("team-a", 8), tenant("team-b", 0, 24), tenant("team-c", c_gpus)],
        [
            work("gang-b", 16, 100_000, tenant="team-b", gpus_per_node=8,
                 checkpoint_interval_s=300, restart_s=60, **{**ckpt, **gang_kw}),
            work("dear-b", 8, 100_000, tenant="team-b", gpus_per_node=8,
                 checkpoint_interval_s=20_000, restart_s=600, **ckpt),
            work("head-a", 8, 500, at=1000, gpus_per_node=8),
            work("head-c", c_gpus, 500, tenant="team-c", at=1000, gpus_per_node=8),
        ],
    ).run(until)


def test_a_head_waits_for_gpus_already_leaving_rather_than_ask_another_victim() -> None:
    """The gang stops for team-a's head, and its second node leaves with it: team-c's
    head waits for that node, with a reservation, where a search of its own stopped the
    8-GPU job too (a second victim, and its work, for GPUs already on their way back;
    seen on the demo, 2026-12-07)."""
    sim = _leaving_gang(until=1010)
    assert set(sim.sched.claims) == {"head-a"}  # no claim of its own: it makes no search
    head_c = sim.sched.jobs["head-c"]
    assert head_c.state == S.QUEUED
    gang = sim.sched.jobs["gang-b"]
    (reserved,) = [r for r in sim.sched.reservations() if r.job_id == "head-c"]
    assert reserved.start_s == gang.grace_deadline_s  # when the gang is gone at the latest
    assert set(reserved.nodes) <= set(gang.alloc) - sim.sched.claims["head-a"].nodes
    sim.run(4000)
    asked = [(d.job_id, d.detail["for"]) for d in sim.of(S.PREEMPT_REQUESTED)]
    assert asked == [("gang-b", "head-a")]
    assert sim.first("dear-b", S.PREEMPTED) is None
    gang_out = sim.first("gang-b", S.PREEMPTED).at_s
    assert gang_out == 1030  # its checkpoint, within the grace window
    assert sim.started_at("head-a") == gang_out
    assert sim.started_at("head-c") == gang_out


def test_gpus_leaving_that_do_not_make_room_leave_the_search_as_it_was() -> None:
    """team-c's head asks for 16 GPUs: the gang's one spare node is not room enough, and
    it searches as before (the 8-GPU job and the gang's node together)."""
    sim = _leaving_gang(16)
    asked = [(d.job_id, d.detail["for"]) for d in sim.of(S.PREEMPT_REQUESTED)]
    assert asked[0] == ("gang-b", "head-a")
    assert ("dear-b", "head-c") in asked


def test_a_leaving_job_that_ignores_the_request_delays_the_waiting_head_no_longer_than_grace(
        ) -> None:
    """The adversary's gang declares a day to checkpoint and ignores the request: the grace
    window is capped (max_grace_period_s), it is killed then, and team-c's head, which
    waited for its spare node instead of asking the 8-GPU job to stop, starts then."""
    sim = _leaving_gang(checkpoint_time_s=86_400, ignores_preempt=True)
    cap = SchedulerConfig().max_grace_period_s
    asked = sim.of(S.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED)
    assert [(d.job_id, d.at_s) for d in asked] == [("gang-b", 1000)]
    assert sim.first("dear-b", S.PREEMPTED) is None
    assert sim.first("gang-b", S.PREEMPTED).reason == Reason.GRACE_EXPIRED
    assert sim.started_at("head-a") == sim.started_at("head-c") == 1000 + cap
