"""Dependencies and job arrays in the core (gates.py, issue 19).

Table tests of each rule: a dependent waits off the heaps (Dependency) until its jobs end
as it requires; a dependency that can never be met cancels it (DependencyNeverSatisfied),
down a chain; an array runs at most ``max_running`` tasks at once (ArrayLimit for the
rest), lowest index first; a rebuilt scheduler keeps all of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.core.states import FINAL_STATES, HOLDING_STATES, JobState, PendingReason, Reason
from scheduler_app.core.types import DEPENDENCY_KINDS, JobSpec
from tests.core.builders import job, nodes, tenant
from tests.core.test_scheduler import Sim, cfg, work

S = JobState
P = PendingReason


def sched(gpus_nodes: int = 2) -> Scheduler:
    return Scheduler(nodes({"pod-a": gpus_nodes}), [tenant("team-a", 8 * gpus_nodes)], cfg(),
                     now=0)


def run_to_end(s: Scheduler, job_id: str, outcome: str, at: int) -> list[Any]:
    """Start ``job_id`` (a tick places it, the agent confirms) and end it with ``outcome``
    (completed | failed | cancelled); the decisions of the end."""
    s.tick(at)
    if outcome == "cancelled":
        return s.cancel(job_id, at)
    assert s.jobs[job_id].state == S.PLACING, s.jobs[job_id]
    s.confirm_start(job_id, at)
    return s.job_exited(job_id, at + 1, outcome)


def array(array_id: str, count: int, max_running: int | None, gpus: int = 1,
          **kw: Any) -> list[JobSpec]:
    return [job(f"{array_id}_{i}", gpus, array_id=array_id, array_index=i, array_count=count,
                array_max_running=max_running, max_runtime_s=100, **kw)
            for i in range(count)]


# ------------------------------------------------------------------ dependencies
@pytest.mark.parametrize(
    ("when", "outcome", "met"),
    [
        ("ok", "completed", True),
        ("ok", "failed", False),
        ("ok", "cancelled", False),
        ("any", "completed", True),
        ("any", "failed", True),
        ("any", "cancelled", True),
        ("notok", "completed", False),
        ("notok", "failed", True),
        ("notok", "cancelled", True),
    ],
)
def test_a_dependent_starts_or_is_cancelled_by_how_its_job_ends(
    when: str, outcome: str, met: bool
) -> None:
    s = sched()
    s.submit(job("up", 8, max_runtime_s=100), 0)
    s.submit(job("down", 8, max_runtime_s=100, depends_on=(("up", when),)), 0)
    s.tick(0)
    dep = s.jobs["down"]
    assert dep.state == S.QUEUED and dep.pending_reason == P.DEPENDENCY
    assert "down" not in s.queues  # off the heaps: never examined, never reserved
    assert "down" not in {r.job_id for r in s.reserved}
    ended = run_to_end(s, "up", outcome, 10)
    s.check_invariants()
    if met:
        assert dep.state == S.QUEUED and "down" in s.queues
        s.tick(20)
        assert dep.state == S.PLACING
    else:
        assert dep.state == S.CANCELLED
        last = ended[-1]
        assert (last.job_id, last.reason) == ("down", Reason.DEPENDENCY_NEVER_SATISFIED)
        assert last.detail == {"job": "up", "when": when, "ended": str(s.jobs["up"].state)}
    s.check_invariants()


def test_a_dependent_waits_although_gpus_are_free_and_holds_no_reservation() -> None:
    s = sched(4)  # 32 GPUs, the upstream job takes 8: plenty left
    s.submit(job("up", 8, max_runtime_s=100), 0)
    s.submit(job("down", 8, max_runtime_s=100, depends_on=(("up", "ok"),)), 0)
    result = s.tick(0)
    assert result.pending_reasons["down"] == P.DEPENDENCY  # published with the tick's reasons
    assert s.jobs["down"].state == S.QUEUED and s.cap.free_gpus() == 24
    assert s.job("down").pending_reason == P.DEPENDENCY
    assert s.job("down").start_estimate_s is None


def test_every_dependency_must_be_met() -> None:
    s = sched()
    s.submit(job("a", 8, max_runtime_s=100), 0)
    s.submit(job("b", 8, max_runtime_s=100), 0)
    s.submit(job("c", 8, max_runtime_s=100, depends_on=(("a", "ok"), ("b", "any"))), 0)
    s.tick(0)
    s.confirm_start("a", 0)
    s.confirm_start("b", 0)
    s.job_exited("a", 5, "completed")
    assert s.jobs["c"].pending_reason == P.DEPENDENCY and "c" not in s.queues
    s.job_exited("b", 6, "failed")
    assert "c" in s.queues
    s.check_invariants()


def test_one_doomed_dependency_cancels_whatever_the_others_do() -> None:
    s = sched()
    s.submit(job("a", 8, max_runtime_s=100), 0)
    s.submit(job("b", 8, max_runtime_s=100), 0)
    s.submit(job("c", 8, max_runtime_s=100, depends_on=(("a", "ok"), ("b", "ok"))), 0)
    s.tick(0)
    s.confirm_start("a", 0)
    s.confirm_start("b", 0)
    out = s.job_exited("a", 5, "failed")
    assert [(d.job_id, d.to_state) for d in out] == [("a", S.FAILED), ("c", S.CANCELLED)]
    assert s.job_exited("b", 6, "completed")[-1].job_id == "b"  # c stays cancelled, once
    s.check_invariants()


def test_a_dependency_on_a_job_already_ended_is_decided_at_submit() -> None:
    s = sched()
    s.submit(job("done", 8, max_runtime_s=100), 0)
    run_to_end(s, "done", "completed", 0)
    s.submit(job("ok", 8, max_runtime_s=100, depends_on=(("done", "ok"),)), 5)
    assert "ok" in s.queues
    out = s.submit(job("notok", 8, max_runtime_s=100, depends_on=(("done", "notok"),)), 5)
    assert [(d.to_state, d.reason) for d in out] == [
        (S.SUBMITTED, Reason.SUBMITTED), (S.QUEUED, Reason.ADMITTED),
        (S.CANCELLED, Reason.DEPENDENCY_NEVER_SATISFIED)]
    s.check_invariants()


def test_a_doomed_chain_is_cancelled_link_by_link_in_one_call() -> None:
    # a pipeline of 3,000 stages: the first fails, every stage after it is cancelled by
    # that one event, without recursion (a Python recursion would stop near 1,000)
    s = sched()
    s.submit(job("s0", 8, max_runtime_s=100), 0)
    for i in range(1, 3000):
        s.submit(job(f"s{i}", 8, max_runtime_s=100, depends_on=((f"s{i - 1}", "ok"),)), 0)
    assert len(s.queues) == 1  # only the head of the pipeline is on a heap
    out = run_to_end(s, "s0", "failed", 0)
    cancelled = [d.job_id for d in out if d.reason == Reason.DEPENDENCY_NEVER_SATISFIED]
    assert cancelled == [f"s{i}" for i in range(1, 3000)]
    s.check_invariants()


def test_afterany_lets_a_cleanup_run_after_a_cancelled_chain() -> None:
    s = sched()
    s.submit(job("train", 8, max_runtime_s=100), 0)
    s.submit(job("eval", 8, max_runtime_s=100, depends_on=(("train", "ok"),)), 0)
    s.submit(job("cleanup", 8, max_runtime_s=100, depends_on=(("eval", "any"),)), 0)
    run_to_end(s, "train", "failed", 0)
    assert s.jobs["eval"].state == S.CANCELLED
    assert "cleanup" in s.queues  # eval ended (cancelled): afterany is met


def test_a_cancelled_dependent_leaves_no_trace_in_the_index() -> None:
    s = sched()
    s.submit(job("up", 8, max_runtime_s=100), 0)
    s.submit(job("down", 8, max_runtime_s=100, depends_on=(("up", "ok"),)), 0)
    s.cancel("down", 1)
    assert "down" not in s.gates.parked and "down" not in s.gates.unmet
    out = run_to_end(s, "up", "completed", 2)
    assert [d.job_id for d in out] == ["up"]
    s.check_invariants()


def test_a_dependency_on_a_job_not_submitted_yet_waits_for_it() -> None:
    # the callers refuse unknown jobs; the core only must not lose the dependent when the
    # awaited job comes later (a batch whose items name later items)
    s = sched()
    s.submit(job("down", 8, max_runtime_s=100, depends_on=(("up", "ok"),)), 0)
    assert s.jobs["down"].pending_reason == P.DEPENDENCY
    s.submit(job("up", 8, max_runtime_s=100), 1)
    run_to_end(s, "up", "completed", 2)
    assert "down" in s.queues


def test_a_requeued_dependent_does_not_wait_again() -> None:
    s = sched(1)
    s.submit(job("up", 8, max_runtime_s=100), 0)
    s.submit(job("down", 8, max_runtime_s=100, depends_on=(("up", "ok"),)), 0)
    run_to_end(s, "up", "completed", 0)
    s.tick(10)
    s.confirm_start("down", 10)
    s.node_down("pod-a-000", 20)  # back to QUEUED (a node failure), not to Dependency
    assert s.jobs["down"].state == S.QUEUED and "down" in s.queues


# ------------------------------------------------------------------ arrays
def test_an_array_runs_at_most_max_running_tasks_lowest_index_first() -> None:
    s = sched()  # 16 GPUs: room for all 10 one-GPU tasks but for the cap
    for spec in array("sw", 10, 3):
        s.submit(spec, 0)
    result = s.tick(0)
    running = sorted(j for j, r in s.jobs.items() if r.state in HOLDING_STATES)
    assert running == ["sw_0", "sw_1", "sw_2"]
    assert {j for j, reason in result.pending_reasons.items() if reason == P.ARRAY_LIMIT} == {
        f"sw_{i}" for i in range(3, 10)}
    assert len(s.queues) == 0  # the other seven wait off the heaps
    s.confirm_start("sw_1", 1)
    s.job_exited("sw_1", 5, "completed")
    s.tick(5)
    running = sorted(j for j, r in s.jobs.items() if r.state in HOLDING_STATES)
    assert running == ["sw_0", "sw_2", "sw_3"]
    s.check_invariants()


def test_a_cancelled_waiting_task_gives_its_turn_to_the_next() -> None:
    s = sched()
    for spec in array("sw", 4, 1):
        s.submit(spec, 0)
    s.tick(0)
    s.cancel("sw_1", 1)  # waiting with ArrayLimit
    s.confirm_start("sw_0", 1)
    s.job_exited("sw_0", 2, "completed")
    s.tick(2)
    assert s.jobs["sw_2"].state == S.PLACING and s.jobs["sw_1"].state == S.CANCELLED


def test_a_preempted_task_keeps_its_slot() -> None:
    s = Scheduler(nodes({"pod-a": 1}), [tenant("team-a", 0, 8), tenant("team-b", 8)],
                  cfg(), now=0)
    for spec in array("sw", 3, 1, gpus=8, tenant="team-a", checkpointable=True,
                      checkpoint_time_s=10):
        s.submit(spec, 0)
    s.tick(0)
    s.confirm_start("sw_0", 0)
    s.submit(job("b1", 8, tenant="team-b", max_runtime_s=100), 10)
    s.tick(10)
    assert s.jobs["sw_0"].state == S.PREEMPT_REQUESTED  # team-b takes its guarantee back
    s.ack_preempt("sw_0", 10)
    s.job_exited("sw_0", 11, "preempted")
    assert s.jobs["sw_0"].state == S.QUEUED and "sw_0" in s.queues
    assert s.jobs["sw_1"].pending_reason == P.ARRAY_LIMIT  # not let in behind sw_0's back
    s.check_invariants()


def test_an_array_without_a_cap_is_ordinary_jobs() -> None:
    s = sched()
    for spec in array("sw", 5, None):
        s.submit(spec, 0)
    assert len(s.queues) == 5


def test_array_tasks_that_depend_on_a_job_wait_for_it_then_for_their_slot() -> None:
    s = sched()
    s.submit(job("prep", 8, max_runtime_s=100), 0)
    for spec in array("sw", 4, 2, depends_on=(("prep", "ok"),)):
        s.submit(spec, 0)
    s.tick(0)
    assert all(s.jobs[f"sw_{i}"].pending_reason == P.DEPENDENCY for i in range(4))
    s.confirm_start("prep", 0)
    s.job_exited("prep", 5, "completed")
    result = s.tick(5)
    assert sorted(j for j, r in s.jobs.items() if r.state == S.PLACING) == ["sw_0", "sw_1"]
    assert result.pending_reasons["sw_2"] == P.ARRAY_LIMIT
    s.check_invariants()


# ------------------------------------------------------------------ rebuild
def test_a_rebuilt_scheduler_keeps_the_gates() -> None:
    before = sched()
    before.submit(job("up", 8, max_runtime_s=100), 0)
    before.submit(job("down", 8, max_runtime_s=100, depends_on=(("up", "ok"),)), 0)
    for spec in array("sw", 4, 2, gpus=1):
        before.submit(spec, 0)
    before.tick(0)
    for j in ("up", "sw_0", "sw_1"):
        before.confirm_start(j, 0)
    # restore in an order that puts a waiting task before the running ones and the
    # dependent before the job it waits for: the gates must not depend on it
    after = sched()
    order = ["sw_3", "down", "sw_2", "sw_0", "up", "sw_1"]
    for j in order:
        rec = before.jobs[j]
        assert rec.state is not None
        after.restore_job(rec.spec, rec.state, alloc=rec.alloc, run_start_s=rec.run_start_s)
    after.tick(1)
    for j in ("down", "sw_2", "sw_3"):
        assert after.jobs[j].state == S.QUEUED and j not in after.queues, j
    assert after.jobs["down"].pending_reason == P.DEPENDENCY
    assert after.jobs["sw_2"].pending_reason == P.ARRAY_LIMIT
    after.check_invariants()
    after.job_exited("up", 2, "failed")
    assert after.jobs["down"].state == S.CANCELLED
    after.job_exited("sw_0", 3, "completed")
    after.tick(3)
    assert after.jobs["sw_2"].state == S.PLACING and after.jobs["sw_3"].state == S.QUEUED


def test_a_rebuild_after_the_awaited_job_failed_cancels_the_dependent() -> None:
    # a log cut between the awaited job's end and the dependent's cancel (the services
    # write both in one transaction, so only a hand-made state has this)
    s = sched()
    s.restore_job(job("up", 8, max_runtime_s=100), S.FAILED)
    s.restore_job(job("down", 8, max_runtime_s=100, depends_on=(("up", "ok"),)), S.QUEUED)
    out = s.tick(0).decisions
    assert [(d.job_id, d.reason) for d in out] == [("down", Reason.DEPENDENCY_NEVER_SATISFIED)]


# ------------------------------------------------------------------ in a run
def test_a_pipeline_runs_in_order_and_a_sweep_under_its_cap() -> None:
    prep = work("prep", 8, 100, max_runtime_s=200)
    sweep = [work(f"sw_{i}", 2, 50, max_runtime_s=100, array_id="sw", array_index=i,
                  array_count=6, array_max_running=2, depends_on=(("prep", "ok"),))
             for i in range(6)]
    report = work("report", 1, 10, max_runtime_s=100,
                  depends_on=tuple((f"sw_{i}", "any") for i in range(6)))
    sim = Sim(nodes({"pod-a": 2}), [tenant("team-a", 16)], [prep, *sweep, report]).run(5000)
    done = {j: sim.first(j, S.COMPLETED) for j in ("prep", "report", *(w.spec.id for w in sweep))}
    assert all(d is not None for d in done.values()), sim.log
    prep_end = done["prep"].at_s  # type: ignore[union-attr]
    starts = {w.spec.id: sim.started_at(w.spec.id) for w in sweep}
    assert all(t is not None and t >= prep_end for t in starts.values())
    # at no instant more than two tasks of the sweep hold GPUs
    spans = [(sim.started_at(w.spec.id), done[w.spec.id].at_s) for w in sweep]  # type: ignore[union-attr]
    for t, _ in spans:
        assert sum(1 for a, b in spans if a <= t < b) <= 2  # type: ignore[operator]
    last_task_end = max(b for _, b in spans)
    assert sim.started_at("report") >= last_task_end  # type: ignore[operator]
    assert all(s.state in FINAL_STATES for s in sim.sched.jobs.values())


# ------------------------------------------------------------------ property
@st.composite
def pipelines(draw: Any) -> tuple[list[Any], str]:
    """Up to 10 plain jobs and 2 arrays on 16 GPUs; each may depend on earlier ones (any
    kind), some fail after a while, some are cancelled."""
    works: list[Any] = []
    ids: list[str] = []
    events: list[tuple[int, str, Any]] = []
    for j in range(draw(st.integers(1, 10))):
        deps = tuple(
            (draw(st.sampled_from(ids)), draw(st.sampled_from(["ok", "any", "notok"])))
            for _ in range(draw(st.integers(0, min(2, len(ids)))))
        )
        runtime = draw(st.integers(10, 500))
        fails = draw(st.sampled_from([None, None, runtime // 2]))
        at = draw(st.integers(0, 300))
        kw: dict[str, Any] = dict(max_runtime_s=runtime + 10, depends_on=deps)
        if draw(st.integers(0, 3)) == 0:
            count, cap = draw(st.integers(1, 6)), draw(st.integers(1, 3))
            for i in range(count):
                works.append(work(f"a{j}_{i}", draw(st.sampled_from([1, 2, 4])), runtime,
                                  at=at, fails_after_s=fails, array_id=f"a{j}",
                                  array_index=i, array_count=count, array_max_running=cap,
                                  **kw))
                ids.append(f"a{j}_{i}")
        else:
            works.append(work(f"j{j}", draw(st.sampled_from([1, 4, 8, 16])), runtime, at=at,
                              fails_after_s=fails, **kw))
            ids.append(f"j{j}")
        if draw(st.integers(0, 5)) == 0:
            events.append((at + draw(st.integers(0, 400)), "cancel", ids[-1]))
    policy = draw(st.sampled_from(["full", "fifo", "priority-kill"]))
    return [works, events], policy


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_dependents_start_only_after_their_jobs_end_as_required_and_arrays_keep_their_cap(
    case: tuple[list[Any], str],
) -> None:
    (works, events), policy = case
    sim = Sim(nodes({"pod-a": 2}), [tenant("team-a", 16)], works, events,
              cfg(policy=policy)).run(100_000)
    ended = {d.job_id: d for d in sim.log if d.to_state in FINAL_STATES}
    by_id = {w.spec.id: w.spec for w in works}
    for spec in by_id.values():
        assert spec.id in ended, f"{spec.id} never ended: {sim.moves(spec.id)}"
        start = sim.started_at(spec.id)
        end = ended[spec.id]
        doomed = end.reason == Reason.DEPENDENCY_NEVER_SATISFIED
        for awaited, when in spec.depends_on:
            up = ended[awaited]
            if start is not None:  # started: every dependency had ended as required
                assert up.at_s <= start and up.to_state in DEPENDENCY_KINDS[when], spec.id
        if doomed:
            assert start is None
            assert any(ended[a].to_state not in DEPENDENCY_KINDS[w] and ended[a].at_s <= end.at_s
                       for a, w in spec.depends_on), spec.id
        elif end.to_state != S.CANCELLED:
            # not cancelled: every dependency was met, so it ran
            assert start is not None, sim.moves(spec.id)
    # the arrays' caps, at every instant a task took GPUs
    spans: dict[str, list[tuple[int, int]]] = {}
    for spec in by_id.values():
        if spec.array_id is None:
            continue
        held_from = None
        for d in (x for x in sim.log if x.job_id == spec.id):
            if d.to_state in HOLDING_STATES and held_from is None:
                held_from = d.at_s
            elif d.to_state not in HOLDING_STATES and held_from is not None:
                spans.setdefault(spec.array_id, []).append((held_from, d.at_s))
                held_from = None
    for array_id, intervals in spans.items():
        cap = next(s.array_max_running for s in by_id.values() if s.array_id == array_id)
        for t, _ in intervals:
            assert sum(1 for a, b in intervals if a <= t < b) <= cap, (array_id, intervals)
