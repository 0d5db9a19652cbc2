"""Property test of the core's shortcuts: on random small contested clusters, a core that
skips quiet ticks and ends ticks after the looks (a reservation's look, a round of
estimates going on, the searches a budget denied) decides, estimates and tells reasons
exactly as a core that runs every tick whole, ticking every interval.

The settings are drawn small (one search a tick, one or two estimate plans, a few
reservations, a work budget smaller than the queue) so that the states each shortcut
reads (denied heads, rounds spanning ticks, resumed passes, reservations planned in a
walk) come up in most examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import build_result
from scheduler_app.sim.scenario import validate_scenario

NODES = 4
TENANTS = ("team-a", "team-b", "team-c")


class _WholeTicks(Scheduler):
    """Every tick runs whole: no fixed point, no tick after the looks alone."""

    def quiet_until(self, now: int, upto: int) -> int | None:
        return None

    def looks_alone_due(self, now: int) -> bool:
        return False


@st.composite
def contested(draw: st.DrawFn) -> dict[str, Any]:
    jobs = []
    for i in range(draw(st.integers(6, 30))):
        gpus = draw(st.sampled_from([1, 2, 4, 8, 16, 24]))
        checkpointable = draw(st.booleans())
        tenant = draw(st.sampled_from(TENANTS))
        # team-a mostly borrows first; the others come back for their guarantees later,
        # several heads at a time (one search a tick: the rest are denied)
        at = draw(st.integers(0, 60) if tenant == "team-a" else st.integers(0, 400))
        j: dict[str, Any] = {
            "id": f"j{i}", "tenant": tenant,
            "submit_at_s": at, "gpus": gpus,
            "runtime_s": draw(st.integers(20, 900)),
            "priority": draw(st.integers(0, 1)),
            "checkpointable": checkpointable,
        }
        if gpus >= 8 and draw(st.booleans()):
            j["gpus_per_node"] = 8
        if draw(st.integers(0, 3)):  # mostly declared limits: reservations and backfill
            j["max_runtime_s"] = j["runtime_s"] + draw(st.integers(0, 300))
        if checkpointable:
            j["checkpoint_interval_s"] = draw(st.integers(15, 200))
            j["checkpoint_time_s"] = draw(st.integers(0, 40))
        jobs.append(j)
    guarantees = draw(st.sampled_from([(0, 16, 16), (8, 8, 16), (0, 8, 24), (16, 8, 0)]))
    return {
        "name": "shortcuts",
        "until_s": 3000,
        "settings": {
            "grace_period_s": draw(st.integers(5, 60)),
            "max_preemption_searches_per_tick": 1,
            "estimate_plans_per_tick": draw(st.integers(1, 2)),
            "estimate_lookahead": draw(st.integers(2, 6)),
            "reservation_depth": draw(st.integers(1, 4)),
            "reservation_plans_per_tick": draw(st.integers(1, 3)),
            "tick_work_budget": draw(st.sampled_from([3, 6, 100])),
        },
        "cluster": {"pods": [{"name": "pod-a", "nodes": NODES, "gpus_per_node": 8}]},
        "tenants": [{"name": name, "guaranteed_gpus": g, "borrow_limit_gpus": 32}
                    for name, g in zip(TENANTS, guarantees, strict=True)],
        "jobs": jobs,
    }


def _run(data: dict[str, Any], policy: str, factory: Any, *, skip: bool,
         views: bool) -> dict[str, Any]:
    sim = Simulation(validate_scenario(data), policy=policy, views=views, skip_quiet=skip,
                     scheduler_factory=factory)
    result = build_result(sim.run())
    for key in ("ticks", "tick_ms_p50", "tick_ms_p99", "tick_ms_max"):
        result["metrics"].pop(key)
    return result


def _assert_same(data: dict[str, Any], policy: str, *, views: bool) -> None:
    got = _run(data, policy, Scheduler, skip=True, views=views)
    want = _run(data, policy, _WholeTicks, skip=False, views=views)
    assert got["preemptions"] == want["preemptions"]
    for job_id, job in want["jobs"].items():
        assert got["jobs"][job_id] == job, job_id
    assert got == want


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=contested(), policy=st.sampled_from(["full", "priority-kill"]))
def test_the_shortcuts_decide_as_whole_ticks_do(data: dict[str, Any], policy: str) -> None:
    """Every transition, run, preemption and metric (views off: no reasons, no estimates;
    see the known lag of a reason below)."""
    _assert_same(data, policy, views=False)


def test_a_resumed_pass_that_ends_quiet_is_no_fixed_point() -> None:
    """Found by the property test above (2026-12-04, a bug older than it): a pass resumed
    after the work budget examined the last jobs and decided nothing, and was taken for a
    fixed point. The next tick's pass starts from the heads and may spend its budget
    before those jobs, so the pass the core resumed at the next event differed from the
    one a core ticking every interval resumed, and a job started a tick late."""
    data, policy, views = json.loads(
        (Path(__file__).parent / "resumed_pass_example.json").read_text())
    _assert_same(data, policy, views=views)


#: found by the property test above with views on (2026-12-04); found again on 2026-12-07
#: (19 jobs), when the rule that a job nothing may preempt borrows only with a short limit
#: changed the first example's scene: the same lag, a Resources -> QuotaReserved ->
#: Resources that whole ticks tell at 15 s and the shortcut core does not
_REASON_LAG = json.loads((Path(__file__).parent / "reason_lag_example.json").read_text())


@pytest.mark.xfail(strict=True, reason=(
    "known: a fixed point holds while time alone turns a job's backfill within its team's "
    "held quota from 'ends before the holder's start' to 'does not': no decision changes "
    "(the job could not start either way), but its pending reason (Resources, then "
    "QuotaReserved) is told at the next tick that runs, not at that instant"))
def test_a_reason_that_time_alone_changes_is_told_at_its_instant() -> None:
    data, policy, views = _REASON_LAG
    _assert_same(data, policy, views=views)


def test_a_walk_denied_a_plan_by_the_budget_is_no_fixed_point() -> None:
    """Found by the property test above (2026-12-06): two quiet ticks in a row spent their
    two plans on the same two reservations (a look and a new plan each), and were taken
    for a fixed point because they left the same. The looks were not due at the next
    tick, whose budget then reached a third job: a core ticking every interval reserved
    it at 1065 s, the core skipping quiet ticks did not, and backfilled another job at
    1071 s. A tick whose walk met a job with no plan left is not a fixed point."""
    data, policy, views = json.loads(
        (Path(__file__).parent / "plan_denied_example.json").read_text())
    _assert_same(data, policy, views=views)


def test_a_quiet_tick_that_spent_its_whole_plan_budget_is_no_fixed_point_alone() -> None:
    """Found while fixing the one above: a tick that spent its whole plan budget (three
    plans, a look among them that moved a reservation's start to that very instant)
    without denying any job a plan is not a fixed point on its own either. The next tick
    walks with those reservations from its start and backfills a job the walk that
    planned them did not; two quiet ticks that leave the same are needed."""
    data, policy, views = json.loads(
        (Path(__file__).parent / "full_budget_example.json").read_text())
    _assert_same(data, policy, views=views)


def test_a_fixed_point_ends_when_time_reaches_a_reservations_start() -> None:
    """Found by the property test above (2026-12-06): a fresh look moved a reservation's
    start to the very tick that planned it, and the tick was a fixed point until the
    next look was due. A core ticking every interval dropped that reservation three
    seconds later, at an event's tick, and planned another job in its place; the core
    skipping quiet ticks took the event's tick for quiet. A fixed point now holds only
    until the earliest reservation's (or quota hold's) start, and the tick at or after
    it runs whole."""
    data, policy, views = json.loads(
        (Path(__file__).parent / "reservation_start_example.json").read_text())
    _assert_same(data, policy, views=views)
