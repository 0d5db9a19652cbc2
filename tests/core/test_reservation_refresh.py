"""What a tick keeps from the last: how often a kept reservation is planned afresh
(tick.RESERVATION_REFRESH_S), and the preemption candidates.

A kept reservation is looked at again once it was last looked at RESERVATION_REFRESH_S ago;
a fresh plan that is not better keeps the old one and still counts as a look. Without
that, the stalest reservations whose fresh plans start later were planned again at every
tick (a few milliseconds each at scale) and kept the others from ever being looked at.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import pytest

from scheduler_app.core import scheduler as scheduler_module
from scheduler_app.core import tick as tick_module
from scheduler_app.core.scheduler import Scheduler
from scheduler_app.core.states import JobState
from scheduler_app.core.tick import RESERVATION_REFRESH_S, Tick
from scheduler_app.core.types import JobSpec, SchedulerConfig
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads.synthetic import SyntheticParams, generate
from tests.core.builders import nodes, tenant
from tests.core.test_scheduler import Sim, work

# A small loaded cluster: jobs of 1 to 64 GPUs on 16 nodes, arriving over the first
# half hour, so that many jobs hold reservations while the state changes every few s.
LOADED = SyntheticParams(jobs=600, nodes=16, nodes_per_pod=8, teams=4, hours=1.0,
                         backlog_fraction=0.0, arrival_span_s=1800, seed=3)


def spy_looks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(job id, instant) of every kept reservation planned afresh from now on."""
    looks: list[tuple[str, int]] = []
    keep, plan = Tick._keep_reservations, Tick.plan
    inside = {"keep": False}

    def spy_keep(self: Tick) -> None:
        inside["keep"] = True
        try:
            keep(self)
        finally:
            inside["keep"] = False

    def spy_plan(self: Tick, rec, releases, **kw):  # type: ignore[no-untyped-def]
        if inside["keep"]:
            looks.append((rec.spec.id, self.now))
        return plan(self, rec, releases, **kw)

    monkeypatch.setattr(tick_module.Tick, "_keep_reservations", spy_keep)
    monkeypatch.setattr(tick_module.Tick, "plan", spy_plan)
    return looks


def _refreshes(monkeypatch: pytest.MonkeyPatch, policy: str) -> dict[str, list[int]]:
    """job id -> the instants its kept reservation was planned afresh."""
    looks = spy_looks(monkeypatch)
    scenario = validate_scenario(generate(LOADED))
    Simulation(dataclasses.replace(scenario, until_s=3600), policy=policy, views=False).run()
    seen: dict[str, list[int]] = defaultdict(list)
    for job_id, at in looks:
        seen[job_id].append(at)
    return seen


@pytest.mark.parametrize("policy", ["full", "priority-kill"])
def test_a_kept_reservation_is_planned_afresh_at_most_once_per_refresh_period(
        monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    seen = _refreshes(monkeypatch, policy)
    assert sum(map(len, seen.values())) > 20, "the workload must exercise refreshes"
    for job_id, instants in seen.items():
        gaps = [b - a for a, b in zip(instants, instants[1:], strict=False)]
        assert all(g >= RESERVATION_REFRESH_S for g in gaps), (job_id, instants)


def test_a_candidate_is_kept_between_ticks_until_what_it_is_made_of_changes() -> None:
    # team-b borrows all 16 GPUs (guarantee 0): both jobs are candidates at every search.
    sim = Sim(
        nodes({"pod-a": 2}),
        [tenant("team-a", 16), tenant("team-b", 0, 16)],
        [work("b1", 8, 10_000, tenant="team-b", checkpointable=True,
              checkpoint_interval_s=600, checkpoint_time_s=30),
         work("b2", 8, 10_000, tenant="team-b", checkpointable=True,
              checkpoint_interval_s=900, checkpoint_time_s=30)],
    )
    sim.run(100)
    first = {c.spec.id: c for c in Tick(sim.sched, 100, None).candidates()}
    assert set(first) == {"b1", "b2"} and first["b1"].last_checkpoint_s is None
    again = {c.spec.id: c for c in Tick(sim.sched, 200, None).candidates()}
    assert again["b1"] is first["b1"] and again["b2"] is first["b2"]  # nothing changed
    sim.run(650)  # b1 checkpointed at t=600, b2 not yet
    later = {c.spec.id: c for c in Tick(sim.sched, 650, None).candidates()}
    assert later["b1"] is not first["b1"] and later["b1"].last_checkpoint_s == 600
    assert later["b2"] is first["b2"]
    sim.sched.report_checkpoint("b2", 660, 660)
    assert Tick(sim.sched, 660, None).candidates()[1].last_checkpoint_s == 660


def test_a_reservation_is_not_planned_afresh_while_the_cluster_is_as_its_plan_saw_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # head is reserved at t=1000, when r reaches its limit. Jobs keep arriving (every
    # submit is a change of state and a tick) but none can start: the GPUs held, their
    # ends and the nodes stay as head's plan saw them, so it is not planned again.
    looks = spy_looks(monkeypatch)
    arrivals = [work(f"w{i}", 8, 100, at=40 + 10 * i, max_runtime_s=100) for i in range(40)]
    sim = Sim(nodes({"pod-a": 1}), [tenant("team-a", 8, 8)],
              [work("r", 8, 1000, max_runtime_s=1000),
               work("head", 8, 100, at=5, priority=10, max_runtime_s=100), *arrivals])
    sim.run(990)
    assert sim.sched.job("head").start_estimate_s == 1000
    assert [j for j, _at in looks if j == "head"] == []
    sim.run(1100)
    assert sim.started_at("head") == 1000


def test_a_tick_takes_the_last_picture_over_when_only_the_queue_changed() -> None:
    # head is reserved at t=1000 on the node r holds; jobs keep arriving (each a change
    # of state, none a change of the picture: no GPU changes hands). The ticks after the
    # first take the last tick's picture over instead of booking head's reservation into
    # a fresh copy (tick.KeptLine), and the reservation and its start are as before.
    arrivals = [work(f"w{i}", 8, 100, at=40 + 10 * i, max_runtime_s=100) for i in range(40)]
    sim = Sim(nodes({"pod-a": 1}), [tenant("team-a", 8, 8)],
              [work("r", 8, 1000, max_runtime_s=1000),
               work("head", 8, 100, at=5, priority=10, max_runtime_s=100), *arrivals])
    before = sim.sched.picture_sig()
    sim.run(990)
    ran = [(t, r.stats) for t, r in sim.ticks if not r.stats.get("quiet")]
    taken_over = [t for t, stats in ran if stats.get("picture_taken_over")]
    arrived = {40 + 10 * i for i in range(40)}
    # a tick at an arrival took the picture over (a submit changes no picture)
    assert arrived & set(taken_over)
    assert sim.sched.picture_sig() != before  # r's start changed it; the submits did not
    at_990 = sim.sched.picture_sig()
    sim.sched.submit(work("late", 8, 100, at=990, max_runtime_s=100).spec, 990)
    assert sim.sched.picture_sig() == at_990
    assert sim.sched.reserved[0].job_id == "head"  # (the arrivals reserved behind it)
    assert sim.sched.job("head").start_estimate_s == 1000
    sim.run(1100)
    assert sim.started_at("head") == 1000



def _due_look(ends_early: str) -> tuple[Sim, Any]:
    """head (16 GPUs: both nodes) is reserved at t=5 from t=5000, when r1 (limit 2000) and
    r2 (limit 5000) have both reached their limits; ``tail`` is reserved behind it at
    t=6. At t=20
    ``ends_early`` ends long before its limit: a change of the cluster, so head's plan is
    stale and due for a look RESERVATION_REFRESH_S after t=5. Returns the driver after
    t=30 and the result of the tick at t=35, at which only that look is due."""
    runtimes = {"r1": 5000, "r2": 5000, ends_early: 20}
    sim = Sim(nodes({"pod-a": 2}), [tenant("team-a", 16, 16)],
              [work("r1", 8, runtimes["r1"], max_runtime_s=2000),
               work("r2", 8, runtimes["r2"], max_runtime_s=5000),
               work("head", 16, 100, at=5, priority=10, max_runtime_s=100),
               work("tail", 16, 100, at=6, max_runtime_s=100)])
    sim.run(30)
    assert sim.state[ends_early] == JobState.COMPLETED
    assert sim.sched.reserved[0].job_id == "head"
    assert sim.sched.reserved[0].start_s == 5000
    assert sim.sched.looked_at("head", 30) == 5
    assert sim.sched.looks_alone_due(35)
    return sim, sim.sched.tick(35)


def test_a_tick_due_only_for_a_look_that_keeps_the_plan_walks_no_queue() -> None:
    # r1 ended: head still needs r2's node, free at r2's limit (t=5000). Its fresh plan
    # holds the same GPUs from the same start, so the tick records the look and ends
    # there: the walk would meet what the last tick met (tail is not examined again).
    sim, result = _due_look("r1")
    assert result.stats["looks_alone"] == 1
    assert result.stats["examined"] == 0 and not result.decisions
    assert sim.sched.looked_at("head", 35) == 35
    assert sim.sched.reserved[0].start_s == 5000
    assert sim.sched.job("head").start_estimate_s == 5000
    # tail, reserved behind head at t=6, is due at t=36: the next tick looks at it alone
    assert sim.sched.reserved[1].job_id == "tail"
    assert sim.sched.tick(40).stats["looks_alone"] == 1
    assert sim.sched.looked_at("tail", 40) == 40
    # both looked at on this cluster: a fixed point with no look due
    assert not sim.sched.looks_alone_due(45)
    assert sim.sched.quiet_until(45, 45) == 45


def test_a_tick_due_only_for_a_look_that_finds_a_better_plan_walks_the_queues() -> None:
    # r2 ended: head's fresh plan takes r2's node now and r1's at r1's limit (t=2000),
    # earlier than t=5000. The reservation moves, so the tick walks the queues (tail is
    # examined again, behind the moved reservation).
    sim, result = _due_look("r2")
    assert "looks_alone" not in result.stats
    assert result.stats["examined"] >= 1
    assert sim.sched.reserved[0].start_s == 2000
    assert sim.sched.job("head").start_estimate_s == 2000


def _picture_after(change: Any) -> dict[str, Any]:
    """The stats of the tick after ``change`` (a call on the Scheduler at t=20), on a
    cluster where "head" is reserved on both nodes from t=2000: "short" holds pod-a-000
    until its limit (1000), "long" pod-a-001 until 2000, "placing" a GPU of a third node
    that it has not confirmed yet."""
    sched = Scheduler(nodes({"pod-a": 3}), [tenant("team-a", 24), tenant("team-b", 16, 8)],
                      SchedulerConfig(), now=0)
    specs = [JobSpec(id="short", seq=1, tenant="team-b", gpus=8, gpus_per_node=8,
                     submit_s=0, max_runtime_s=1000, checkpointable=True),
             JobSpec(id="long", seq=2, tenant="team-b", gpus=8, gpus_per_node=8,
                     submit_s=0, max_runtime_s=2000),
             JobSpec(id="placing", seq=3, tenant="team-a", gpus=1, submit_s=0,
                     max_runtime_s=5000)]
    for spec in specs:
        sched.submit(spec, 0)
    sched.tick(0)
    for job_id in ("short", "long"):
        sched.confirm_start(job_id, 1)
    sched.submit(JobSpec(id="head", seq=4, tenant="team-a", gpus=16, gpus_per_node=8,
                         submit_s=10, max_runtime_s=100), 10)
    sched.tick(10)
    assert sched.reserved[0].job_id == "head" and sched.kept_line is not None
    change(sched)
    return sched.tick(20).stats


def _late() -> Any:
    return JobSpec(id="late", seq=5, tenant="team-a", gpus=8, submit_s=20, max_runtime_s=100)


@pytest.mark.parametrize(("change", "followed", "taken_over"), [
    (lambda s: s.submit(_late(), 20), False, True),  # no GPU changed: taken over as it is
    (lambda s: s.job_exited("short", 20, "completed"), True, True),
    (lambda s: s.confirm_start("placing", 20), True, True),  # same GPUs, same release
    (lambda s: s.cancel("long", 20), True, True),
    (lambda s: s.request_preempt(s.jobs["short"], "head", 20, {}), False, False),  # new end
    (lambda s: s.node_drain("pod-a-002", 20), False, False),
    (lambda s: s.set_quota("team-b", 8, 8, 20), False, False),
], ids=["arrival", "exit", "confirm", "cancel", "preempt-request", "drain", "quota"])
def test_the_picture_follows_jobs_letting_go_and_nothing_else(
        change: Any, followed: bool, taken_over: bool) -> None:
    stats = _picture_after(change)
    assert bool(stats.get("picture_followed")) == followed
    assert bool(stats.get("picture_taken_over")) == taken_over


def test_a_picture_that_kept_too_much_beside_the_index_is_built_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a followed picture keeps the starts and ends it saw beside the index's maps: its
    # memory is bounded by building a fresh one past tick.PICTURE_FOLLOWED_ENTRIES
    monkeypatch.setattr(tick_module, "PICTURE_FOLLOWED_ENTRIES", 0)
    stats = _picture_after(lambda s: s.job_exited("short", 20, "completed"))
    assert not stats.get("picture_followed") and not stats.get("picture_taken_over")


def test_moves_past_the_kept_count_between_ticks_make_a_fresh_picture(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no tick for a while (a dead beat, a slow leader) while agents keep reporting: the
    # moves noted for the next picture stop at scheduler.PICTURE_MOVES_KEPT, and the tick,
    # told of fewer moves than changes, builds a fresh picture instead of following
    monkeypatch.setattr(scheduler_module, "PICTURE_MOVES_KEPT", 1)
    noted: list[int] = []

    def two_exits(s: Scheduler) -> None:
        s.job_exited("short", 20, "completed")
        s.job_exited("long", 20, "completed")
        noted.append(len(s.picture_moves))

    stats = _picture_after(two_exits)
    assert noted == [1]
    assert not stats.get("picture_followed") and not stats.get("picture_taken_over")
