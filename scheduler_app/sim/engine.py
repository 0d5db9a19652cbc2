"""The memory engine: drives the production ``Scheduler`` through virtual time.

One loop over instants (integer seconds). At each instant:

1. apply every event due then, in a fixed order: job behaviour (checkpoints, completions,
   exits after a preemption checkpoint) first, then submissions in file order, then the
   scenario's events in file order;
2. run ONE tick of the scheduler at that instant (DESIGN.md: events tick at their instant,
   so a job submitted at t can start at t);
3. react to the tick's decisions at the same instant, as the node agents would: confirm
   every PLACING, acknowledge a PREEMPT_REQUESTED (checkpointable jobs) or exit at once
   (jobs that cannot checkpoint), and nothing at all for a job that ignores the request.
   A reaction that frees GPUs asks for a tick, which runs at the next second (the tick of
   this instant has already run; one tick per instant keeps runs comparable).

The next instant is the earliest of: the next event in the heap, the next periodic tick
(multiples of ``tick_interval_s``), the core's ``next_deadline()`` and a requested tick.
Periodic ticks in which nothing can change are skipped: when the core reports a fixed
point (two ticks in a row that decided and changed nothing, ``Scheduler.quiet_until``),
the next periodic tick comes only when time alone could change a decision (the fair-share
order, a reservation's refresh) or at the next event, timer or woken tick, whichever is
first. Fair-share usage is stored only when a tenant's GPUs change, so skipping changes
no float: the decisions are those of a run that ticks every interval
(``skip_quiet=False``; a test compares the two). The ``ticks`` metric counts the ticks
that ran.

Cost: a heap push and pop per event, O(log n); nothing scans all jobs. Stale events of a
run that already ended are dropped when popped (each carries the run's token).
"""

from __future__ import annotations

import heapq
import importlib
import pkgutil
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from scheduler_app.collector import FreezeAsItGrows, collector_paused
from scheduler_app.core.states import HOLDING_STATES, JobState, PendingReason, Reason
from scheduler_app.core.types import Allocation, Decision

from .jobmodel import FAILURE, PREEMPTION, SimJob
from .result import JobRecord, PreemptionRecord, RunRecord, SimOutcome
from .scenario import EventDef, JobDef, Scenario

S = JobState

# Event classes: the order of events sharing an instant (see the module docstring).
_JOB, _SUBMIT, _SCENARIO = 0, 1, 2
# Job behaviour kinds (_ASKED: a job carried in while asked to stop answers at t=0).
_CHECKPOINT, _COMPLETE, _PREEMPT_EXIT, _FAIL, _ASKED = 0, 1, 2, 3, 4

ProgressFn = Callable[[int], None]


def _load_scheduler_class() -> Any:
    from scheduler_app.core.scheduler import Scheduler  # the production core

    _import_core_modules()
    return Scheduler


def _import_core_modules() -> None:
    """Import every core module now: the core imports some lazily inside its tick, and the
    first tick's measured latency should not include loading code."""
    import scheduler_app.core as core

    for module in pkgutil.iter_modules(core.__path__):
        importlib.import_module(f"{core.__name__}.{module.name}")


@dataclass(slots=True)
class _TenantBook:
    """Per tenant: GPUs held and queued GPUs by priority (for ``entitled_wait_p95_s``)."""

    guaranteed_gpus: int
    running_gpus: int = 0
    fenwick: list[int] | None = None  # queued GPUs by priority rank (higher first)
    ranks: dict[int, int] | None = None  # priority -> 1-based rank, highest priority = 1

    def add_queued(self, priority: int, gpus: int) -> None:
        assert self.fenwick is not None and self.ranks is not None
        i = self.ranks[priority]
        while i < len(self.fenwick):
            self.fenwick[i] += gpus
            i += i & -i

    def queued_at_or_above(self, priority: int) -> int:
        """GPUs of queued jobs whose priority is >= ``priority``: O(log P)."""
        assert self.fenwick is not None and self.ranks is not None
        i, total = self.ranks[priority], 0
        while i > 0:
            total += self.fenwick[i]
            i -= i & -i
        return total


class Simulation:
    """One run of a scenario. ``run()`` returns the :class:`SimOutcome`."""

    def __init__(self, scenario: Scenario, *, policy: str = "full", seed: int = 0,
                 scheduler_factory: Callable[..., Any] | None = None,
                 progress: ProgressFn | None = None, views: bool = True,
                 skip_quiet: bool = True) -> None:
        self.scenario = scenario
        self.policy = policy
        self.seed = seed
        self.config = scenario.config(policy)
        factory = scheduler_factory or _load_scheduler_class()
        self.sched = factory(nodes=scenario.node_specs(), tenants=scenario.tenant_specs(),
                             config=self.config, now=0)
        self.progress_fn = progress
        self.views = views
        if not views and hasattr(self.sched, "look_ahead"):
            # no estimate is recorded: the core need not plan the look-ahead's
            self.sched.look_ahead = False
        #: skip the periodic ticks in which nothing can change (see _after_quiet); off:
        #: tick every interval (the reference the skipping run is tested against)
        self.skip_quiet = skip_quiet
        self.skipped_ticks = 0

        self.sim: dict[str, SimJob] = {}
        self.records: dict[str, JobRecord] = {}
        self.state: dict[str, JobState] = {}
        self.tenants: dict[str, _TenantBook] = {}
        self._prio_ranks = self._priority_ranks()
        for t in scenario.tenants:
            ranks = self._prio_ranks.get(t.name, {0: 1})
            self.tenants[t.name] = _TenantBook(
                guaranteed_gpus=t.guaranteed_gpus,
                fenwick=[0] * (len(ranks) + 1), ranks=ranks,
            )
        self.quota = {t.name: (t.guaranteed_gpus, t.borrow_limit_gpus) for t in scenario.tenants}
        self.array_tasks: dict[str, list[str]] = {}
        for j in scenario.jobs:
            if j.spec.array_id is not None:
                self.array_tasks.setdefault(j.spec.array_id, []).append(j.id)
            self.sim[j.id] = SimJob(job=j)
            self.records[j.id] = JobRecord(
                job_id=j.id, tenant=j.spec.tenant, submit_s=j.spec.submit_s,
                gpus=j.spec.gpus, runtime_s=j.runtime_s,
            )
        self.preemptions: list[PreemptionRecord] = []
        self.tick_ms = array("d")  # 8 bytes a tick: millions of ticks on a long trace
        # CPU time of each tick (this thread only): what the tick costs when other
        # processes share the machine, where wall time also counts the waits for a core
        self.tick_cpu_ms = array("d")

        self._heap: list[tuple[int, int, int, int, str, int]] = []
        self._order = 0
        self._now = 0
        self._ticked_at = -1  # instant of the last tick: later reactions go to the next second
        # The state is hundreds of thousands of long-lived objects: freezing them as it
        # grows keeps the cyclic collector's full passes (hundreds of ms each) out of the
        # ticks of a run that keeps the collector (below), and out of the first pass after
        # a run that paused it.
        self._freezer = FreezeAsItGrows(factor=2, slack=10_000)
        # The memory engine's run makes no reference cycle (the core's and the engine's
        # objects are freed by reference counting, compiled or not: tests/sim/
        # test_compiled_core.py collects after each of its runs and finds none), so the
        # cyclic collector's passes during it would find nothing: 5 s of a 67 s busy day.
        # It is paused for the run (for the whole process: a what-if's thread pauses a
        # web server's collector for as long). The production scheduler (--engine db)
        # runs Django's code, whose cycles are not ours to rule out: not paused there.
        self._pause_collector = scheduler_factory is None
        self._wake: int | None = None  # a tick asked for by a reaction
        self._active = 0  # submitted jobs not yet in a final state
        self._unsubmitted = len(scenario.jobs)
        self._last_final_s = 0
        self._reactions: deque[tuple[str, str]] = deque()
        self._touched: set[str] = set()
        self._in_tick = False
        self._draining = False

        for j in scenario.jobs:
            if not j.carried_in:
                self._push(j.spec.submit_s, _SUBMIT, j.spec.seq, 0, j.id, 0)
        self._carry_in([j for j in scenario.jobs if j.carried_in])
        for ev in scenario.events:
            self._push(ev.at_s, _SCENARIO, ev.index, 0, "", 0)

    def _carry_in(self, jobs: list[JobDef]) -> None:
        """Restore the jobs already in the system at t=0 (the carried-in state extension,
        docs/scenarios.md) through the core's restore path, the one a production leader
        rebuilds its state with: no decision is made, the running ones hold their GPUs
        and their time-limit timers, the queued ones join their queues in file order.
        Their records start with the moves that brought them there, at their instants.
        Running jobs first, so the entitlement of a queued one counts its team's GPUs.

        A job being preempted at t=0 (``running.preempting``) keeps its GPUs in its state
        (PREEMPT_REQUESTED, or CHECKPOINTING once acknowledged), with its grace deadline
        from the request and the job it makes room for; it then stops as any job asked
        to: its checkpoint ends ``checkpoint_time_s`` after the request (at t=0 if that
        is past), one that cannot checkpoint exits at t=0. Then, as a production leader
        restores them after its jobs, the reclaim claims and the published reservations."""
        if not jobs:
            return
        restore = getattr(self.sched, "restore_job", None)
        if restore is None:
            raise ValueError("this engine cannot start from jobs already running or queued "
                             "at t=0 (the memory engine can)")
        for j in sorted(jobs, key=lambda j: (j.running is None, j.spec.seq)):
            spec, rec, job = j.spec, self.records[j.id], self.sim[j.id]
            self._unsubmitted -= 1
            self._active += 1
            rec.transitions += [(spec.submit_s, S.SUBMITTED.value, str(Reason.SUBMITTED)),
                                (spec.submit_s, S.QUEUED.value, str(Reason.ADMITTED))]
            run = j.running
            if run is None:
                book = self.tenants[spec.tenant]
                ahead = book.queued_at_or_above(spec.priority)
                rec.entitled = book.running_gpus + ahead + spec.gpus <= book.guaranteed_gpus
                restore(spec, S.QUEUED, preemption_times=j.preemption_times_s)
                self.state[j.id] = S.QUEUED
                rec.state = S.QUEUED.value
                self._queue_bookkeeping(j.id, None, S.QUEUED)
                continue
            alloc = dict(run.alloc)
            ckpt = run.last_checkpoint_s
            # the resume pointer: the progress when the last checkpoint was written (wall
            # speed), none for a job that cannot checkpoint or never wrote one
            pointer = max(0, run.progress_s + ckpt) if ckpt is not None else 0
            asked = run.preempt_requested_s
            state = (S.RUNNING if asked is None else
                     S.CHECKPOINTING if run.checkpointing else S.PREEMPT_REQUESTED)
            restore(spec, state, alloc=alloc, run_start_s=run.started_at_s,
                    confirmed_s=run.started_at_s, last_checkpoint_s=ckpt,
                    resume_pointer=pointer if ckpt is not None else None,
                    preemption_times=j.preemption_times_s, preempt_requested_s=asked,
                    preempted_for=run.preempted_for)
            self.state[j.id] = state
            rec.state = state.value
            rec.transitions += [(run.started_at_s, S.PLACING.value, str(Reason.PLACED)),
                                (run.started_at_s, S.RUNNING.value, str(Reason.STARTED))]
            if asked is not None:
                rec.transitions.append((asked, S.PREEMPT_REQUESTED.value,
                                        str(Reason.PREEMPT_REQUESTED)))
                if run.checkpointing:
                    rec.transitions.append((asked, S.CHECKPOINTING.value,
                                            str(Reason.CHECKPOINT_STARTED)))
            self._start_run(j.id, alloc, run.started_at_s)
            # The segment that progresses now began at the last checkpoint of this run (or
            # at its start): periodic checkpoints keep their cadence from there.
            seg = max(ckpt, run.started_at_s) if ckpt is not None else run.started_at_s
            job.start_run(seg, self.records[j.id].runs[-1].gpus)
            job.pointer = pointer
            job.base = max(0, run.progress_s + seg)
            self._schedule_run(j.id, 0)
            if asked is None:
                continue
            if run.checkpointing:  # progress stopped when it acknowledged (the request)
                job.freeze(max(asked, seg))
                self._push_job(asked + job.checkpoint_write_s(self.config.grace_period_s),
                               _PREEMPT_EXIT, j.id)
            else:  # its answer to the request, at t=0
                self._push_job(0, _ASKED, j.id)
        self._restore_plans()

    def _restore_plans(self) -> None:
        """The carried-in reclaim claims, then the published reservations in their order
        (``Scheduler.add_claim``, ``Scheduler.restore_reservations``: a production leader's
        rebuild, services/leader.py)."""
        sc = self.scenario
        if sc.claims:
            from scheduler_app.core.records import ReclaimClaim

            for c in sorted(sc.claims, key=lambda c: self.sim[c.job].job.spec.seq):
                self.sched.add_claim(ReclaimClaim(
                    head_id=c.job, tenant=self.sim[c.job].job.spec.tenant, gpus=c.gpus,
                    nodes=frozenset(c.nodes), victims=set(c.victims), at_s=c.at_s, why=""))
        if sc.reservations:
            from scheduler_app.core.scheduler import ReservationView

            self.sched.restore_reservations([ReservationView(
                r.job, "reservation", r.start_s, tuple(n for n, _ in r.alloc), r.basis,
                gpus=sum(len(ix) for _, ix in r.alloc), alloc=dict(r.alloc),
                planned_at_s=r.planned_at_s, checked_at_s=r.checked_at_s,
                after_job=r.after_job) for r in sc.reservations])

    def _priority_ranks(self) -> dict[str, dict[int, int]]:
        by_tenant: dict[str, set[int]] = {}
        for j in self.scenario.jobs:
            by_tenant.setdefault(j.spec.tenant, set()).add(j.spec.priority)
        return {t: {p: i + 1 for i, p in enumerate(sorted(ps, reverse=True))}
                for t, ps in by_tenant.items()}

    # --- the heap ----------------------------------------------------------------------

    def _push(self, at_s: int, cls: int, key: int, kind: int, job_id: str, token: int) -> None:
        # (time, class, key, tie) : key is the file order for submissions and scenario
        # events, the insertion order for job behaviour; all integers, so the order is total.
        self._order += 1
        heapq.heappush(self._heap, (at_s, cls, key if cls != _JOB else self._order,
                                    kind, job_id, token))

    def _push_job(self, at_s: int, kind: int, job_id: str) -> None:
        # An event falling at an instant whose tick already ran waits for the next second.
        at_s = max(at_s, self._ticked_at + 1)
        self._push(at_s, _JOB, 0, kind, job_id, self.sim[job_id].token)

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> SimOutcome:
        with collector_paused() if self._pause_collector else nullcontext():
            return self._run()

    def _run(self) -> SimOutcome:
        until = self.scenario.until_s
        interval = self.config.tick_interval_s
        next_periodic = 0
        while True:
            if self._active == 0 and self._unsubmitted == 0:
                break  # every job is final: nothing left to decide
            candidates = [next_periodic]
            if self._heap:
                candidates.append(self._heap[0][0])
            deadline = self.sched.next_deadline()
            if deadline is not None:
                candidates.append(max(deadline, self._ticked_at + 1))
            if self._wake is not None:
                candidates.append(self._wake)
            now = min(candidates)
            if now > until:
                break
            self._now = now
            self._wake = None
            self._touched.clear()
            try:
                while self._heap and self._heap[0][0] <= now:
                    self._dispatch(heapq.heappop(self._heap))
                self._tick(now)
            except Exception as exc:
                # a core bug or an illegal move: say when, in virtual time, it happened
                exc.add_note(f"simulation {self.scenario.name!r} at t={now} s")
                raise
            next_periodic = (now // interval + 1) * interval
            if self.skip_quiet:
                next_periodic = self._after_quiet(now, next_periodic, interval)
            if self.progress_fn is not None:
                self.progress_fn(now)
        return self._finish()

    def _after_quiet(self, now: int, next_periodic: int, interval: int) -> int:
        """The next periodic tick that could change anything: the core says until when
        ticks would decide and change nothing (a fixed point, ``Scheduler.quiet_until``),
        and those are skipped. Events, timers and woken ticks still come at their instant,
        so the run is the one that ticks every interval, minus ticks that did nothing."""
        upto = self._heap[0][0] - 1 if self._heap else self.scenario.until_s
        deadline = self.sched.next_deadline()
        if deadline is not None:
            upto = min(upto, deadline - 1)
        if self._wake is not None:
            upto = min(upto, self._wake - 1)
        if upto < next_periodic:
            return next_periodic
        quiet_until = getattr(self.sched, "quiet_until", None)  # the db engine has none
        quiet = None if quiet_until is None else quiet_until(now, upto)
        if quiet is None or quiet < next_periodic:
            return next_periodic
        self.skipped_ticks += (quiet - next_periodic) // interval + 1
        return (quiet // interval + 1) * interval

    def _tick(self, now: int) -> None:
        self._freezer.grown(len(self.sched.jobs))
        cpu_started = time.thread_time_ns()
        started = time.perf_counter_ns()
        result = self.sched.tick(now)
        self.tick_ms.append((time.perf_counter_ns() - started) / 1e6)
        self.tick_cpu_ms.append((time.thread_time_ns() - cpu_started) / 1e6)
        self._ticked_at = now
        self._apply(result.decisions, now, from_tick=True)
        self._observe(now, result)

    def _dispatch(self, entry: tuple[int, int, int, int, str, int]) -> None:
        at_s, cls, key, kind, job_id, token = entry
        if cls == _SUBMIT:
            self._submit(job_id, at_s)
        elif cls == _SCENARIO:
            self._scenario_event(self.scenario.events[key], at_s)
        elif token == self.sim[job_id].token:  # else: stale, its run already ended
            self._job_event(kind, job_id, at_s)

    # --- events ------------------------------------------------------------------------

    def _submit(self, job_id: str, now: int) -> None:
        self._unsubmitted -= 1
        self._active += 1
        spec = self.sim[job_id].job.spec
        book = self.tenants[spec.tenant]
        # Entitled when submitted: the team's running GPUs, plus its queued jobs ahead of
        # this one, plus its own, within the guarantee. "Ahead" = queued with a priority at
        # least as high: they were submitted earlier, or earlier in the file at this
        # instant (a higher-priority job later in the file at the same instant is not
        # counted: it was not queued yet when this one arrived).
        ahead = book.queued_at_or_above(spec.priority)
        self.records[job_id].entitled = (
            book.running_gpus + ahead + spec.gpus <= book.guaranteed_gpus
        )
        self._apply(self.sched.submit(spec, now), now)

    def _scenario_event(self, ev: EventDef, now: int) -> None:
        s = self.sched
        if ev.kind == "cancel":
            # a job, or an array: each of its tasks (one cancel each, as the API does). A
            # job of that id is the job: a carried-in array's id is its task 0's, as in
            # production, and naming task 0 cancelled every task
            targets = ((ev.target,) if ev.target in self.sim
                       else self.array_tasks.get(ev.target, (ev.target,)))
            for job_id in targets:
                if self.state.get(job_id) in (None, S.COMPLETED, S.FAILED, S.CANCELLED):
                    continue  # not submitted yet is impossible (validated); final: no-op
                self._apply(s.cancel(job_id, now), now)
        elif ev.kind == "set_quota":
            guaranteed, borrow = self.quota[ev.target]
            if ev.guaranteed_gpus is not None:
                guaranteed = ev.guaranteed_gpus
            if ev.borrow_limit_gpus is not None:
                borrow = ev.borrow_limit_gpus
            self.quota[ev.target] = (guaranteed, borrow)
            self.tenants[ev.target].guaranteed_gpus = guaranteed
            self._apply(s.set_quota(ev.target, guaranteed, borrow, now) or [], now)
        else:
            method = getattr(s, ev.kind)  # node_down, node_up, node_drain, node_undrain
            self._apply(method(ev.target, now) or [], now)

    def _job_event(self, kind: int, job_id: str, now: int) -> None:
        job = self.sim[job_id]
        state = self.state.get(job_id)
        if kind in (_COMPLETE, _FAIL):
            if state in (S.RUNNING, S.PREEMPT_REQUESTED) and job.frozen_at is None:
                outcome = "completed" if kind == _COMPLETE else "failed"
                self._apply(self.sched.job_exited(job_id, now, outcome), now)
        elif kind == _CHECKPOINT:
            if state in (S.RUNNING, S.PREEMPT_REQUESTED) and job.frozen_at is None:
                pointer = job.checkpoint(now)
                self._apply(self.sched.report_checkpoint(job_id, now, pointer), now)
                nxt = job.next_checkpoint_s(now)
                if nxt is not None:
                    self._push_job(nxt, _CHECKPOINT, job_id)
        elif kind == _ASKED and state == S.PREEMPT_REQUESTED:
            asked = self.sim[job_id].job.running
            assert asked is not None and asked.preempt_requested_s is not None
            self._stop(job_id, now, asked.preempt_requested_s)
        elif kind == _PREEMPT_EXIT and state == S.CHECKPOINTING:
            pointer = job.checkpoint(now)
            self._apply(self.sched.report_checkpoint(job_id, now, pointer), now)
            self._apply(self.sched.job_exited(job_id, now, "preempted"), now)

    # --- decisions -----------------------------------------------------------------------

    def _apply(self, decisions: Iterable[Decision], now: int, *, from_tick: bool = False) -> None:
        """Record decisions, then run the agents' reactions (which may make more).

        GPUs freed by the tick's own decisions (a kill, a time limit) were already seen by
        that tick, so they ask for no further tick; the reactions that follow may.
        """
        self._in_tick = from_tick
        for d in decisions:
            self._record(d)
        self._in_tick = False
        if self._draining:
            return  # the outermost call runs the reactions just queued, in order
        # One loop drains the reactions (a reaction's decisions queue more) instead of a
        # call per reaction: a tick that places thousands of jobs must not recurse deeply.
        self._draining = True
        try:
            while self._reactions:
                what, job_id = self._reactions.popleft()
                self._react(what, job_id, now)
        finally:
            self._draining = False

    def _record(self, d: Decision) -> None:
        job_id = d.job_id
        rec = self.records[job_id]
        before = self.state.get(job_id)
        after = JobState(d.to_state)
        self._touched.add(job_id)
        if before == after:
            if d.alloc is not None and after in HOLDING_STATES:
                self._shrink(job_id, d.alloc, d.at_s)
            return  # self-transitions (Checkpointed, Shrunk) are not state changes
        self.state[job_id] = after
        rec.state = after.value
        rec.transitions.append((d.at_s, after.value, str(d.reason)))
        self._queue_bookkeeping(job_id, before, after)
        if before in HOLDING_STATES and after not in HOLDING_STATES:
            self._end_run(job_id, d, after)
        if after == S.PLACING:
            self._start_run(job_id, d.alloc or {}, d.at_s)
            self._reactions.append(("confirm", job_id))
        elif after == S.RUNNING and before == S.PLACING:
            job = self.sim[job_id]
            job.start_run(d.at_s, self.records[job_id].runs[-1].gpus)
            self._schedule_run(job_id, d.at_s)
        elif after == S.PREEMPT_REQUESTED:
            self._note_preemption(d)
            self._reactions.append(("preempt", job_id))
        elif after == S.CHECKPOINTING:
            self.sim[job_id].freeze(d.at_s)
        if after in (S.COMPLETED, S.FAILED, S.CANCELLED):
            rec.end_s = d.at_s
            self._active -= 1
            self._last_final_s = max(self._last_final_s, d.at_s)

    def _react(self, what: str, job_id: str, now: int) -> None:
        state = self.state.get(job_id)
        if what == "confirm" and state == S.PLACING:
            self._apply(self.sched.confirm_start(job_id, now), now)
        elif what == "preempt" and state == S.PREEMPT_REQUESTED:
            self._stop(job_id, now, now)

    def _stop(self, job_id: str, now: int, asked_s: int) -> None:
        """A job asked at ``asked_s`` to stop answers at ``now``: it acknowledges and its
        checkpoint ends ``checkpoint_time_s`` after the request (``now`` at the earliest),
        or it exits at once (it cannot checkpoint), or it ignores the request (the core's
        grace timer kills it)."""
        job = self.sim[job_id]
        if job.job.ignores_preempt:
            return  # the core's grace timer will kill it
        if job.job.spec.checkpointable:
            self._apply(self.sched.ack_preempt(job_id, now), now)
            done = asked_s + job.checkpoint_write_s(self.config.grace_period_s)
            self._push_job(max(now, done), _PREEMPT_EXIT, job_id)
        else:
            self._apply(self.sched.job_exited(job_id, now, "preempted"), now)
            self._request_tick(now)

    def _request_tick(self, now: int) -> None:
        if now > self._ticked_at or self._in_tick:
            return  # this instant's tick will see the change, or made it itself
        wake = self._ticked_at + 1
        self._wake = wake if self._wake is None else min(self._wake, wake)

    # --- runs ----------------------------------------------------------------------------

    def _start_run(self, job_id: str, alloc: Allocation, now: int) -> None:
        counts = {node: len(gpus) for node, gpus in alloc.items()}
        self.records[job_id].runs.append(RunRecord(start_s=now, alloc=counts))
        book = self.tenants[self.records[job_id].tenant]
        book.running_gpus += sum(counts.values())

    def _schedule_run(self, job_id: str, now: int) -> None:
        job = self.sim[job_id]
        done_at = job.completion_s()
        fails = job.job.fails_after_s
        # fails_after_s: seconds of this run (from its placement) after which it exits
        # failed, if it has not completed by then
        fail_at = None if fails is None else self.records[job_id].runs[-1].start_s + fails
        if fail_at is not None and fail_at < done_at:
            self._push_job(fail_at, _FAIL, job_id)
        else:
            self._push_job(done_at, _COMPLETE, job_id)
        nxt = job.next_checkpoint_s(now)
        if nxt is not None:
            self._push_job(nxt, _CHECKPOINT, job_id)

    def _shrink(self, job_id: str, alloc: Allocation, now: int) -> None:
        """An elastic job kept running on fewer GPUs: the run splits in two at ``now``."""
        rec = self.records[job_id]
        old = rec.runs[-1]
        counts = {node: len(gpus) for node, gpus in alloc.items()}
        if counts == old.alloc:
            return
        old.end_s, old.end = now, "NODE_FAILED"
        rec.runs.append(RunRecord(start_s=now, alloc=counts))
        book = self.tenants[rec.tenant]
        book.running_gpus += sum(counts.values()) - old.gpus
        self.sim[job_id].shrink(now, sum(counts.values()))

    def _end_run(self, job_id: str, d: Decision, after: JobState) -> None:
        rec = self.records[job_id]
        run = rec.runs[-1]
        run.end_s = d.at_s
        reason = str(d.reason)
        if after == S.QUEUED:
            # A node failed (or, never in the simulator, the agent did not confirm).
            run.end, cause = "NODE_FAILED", FAILURE
        elif after == S.PREEMPTED:
            run.end, cause = "PREEMPTED", PREEMPTION
            rec.preemptions += 1
        elif after == S.FAILED and reason == Reason.RETRIES_EXHAUSTED:
            run.end, cause = "FAILED", FAILURE
        else:
            run.end, cause = after.value, None
        self.tenants[rec.tenant].running_gpus -= run.gpus
        job = self.sim[job_id]
        if job.active:
            job.end_run(d.at_s, cause)
        else:  # PLACING that never became RUNNING
            job.token += 1
        rec.lost_to_preemption_gpu_s = job.lost_preemption
        rec.lost_to_failure_gpu_s = job.lost_failure
        self._request_tick(d.at_s)  # GPUs came back

    def _note_preemption(self, d: Decision) -> None:
        detail = d.detail or {}
        self.preemptions.append(PreemptionRecord(
            at_s=d.at_s,
            victim=d.job_id,
            for_job=detail.get("for"),
            cost_s=detail.get("cost_s"),
            est_gpu_s_lost=detail.get("est_gpu_s_lost"),
            why=_explain(detail),
        ))

    # --- queue bookkeeping (metrics and views) --------------------------------------------

    def _queue_bookkeeping(self, job_id: str, before: JobState | None, after: JobState) -> None:
        was, now_ = before == S.QUEUED, after == S.QUEUED
        if was == now_:
            return
        spec = self.sim[job_id].job.spec
        self.tenants[spec.tenant].add_queued(spec.priority, spec.gpus if now_ else -spec.gpus)

    def _observe(self, now: int, result: Any) -> None:
        """Record changes of pending reasons and start estimates after a tick.

        The tick reports the reasons of the jobs it examined and the estimates it
        (re)planned. A job that (re)entered the queue at this instant and that the tick did
        not examine has not been looked at: reason None, no estimate. Nothing else can
        have changed, so this is exact without a scan of the queue or a view per job (a
        view computes queue positions, too costly to ask for thousands of jobs a tick).
        """
        if not self.views:
            return
        reasons: dict[str, Any] = dict(getattr(result, "pending_reasons", None) or {})
        estimates: dict[str, Any] = dict(getattr(result, "start_estimates", None) or {})
        for job_id in self._touched:
            if self.state.get(job_id) == S.QUEUED:
                reasons.setdefault(job_id, PendingReason.NONE)
                estimates.setdefault(job_id, None)
        for job_id, reason in reasons.items():
            if self.state.get(job_id) == S.QUEUED:
                self.records[job_id].note_reason(now, str(reason))
        for job_id, est in estimates.items():
            if self.state.get(job_id) == S.QUEUED:
                start = est if est is None or isinstance(est, int) else est.start_s
                self.records[job_id].note_estimate(now, start)

    # --- the end -------------------------------------------------------------------------

    def _finish(self) -> SimOutcome:
        all_final = self._active == 0 and self._unsubmitted == 0
        end_s = min(self._last_final_s, self.scenario.until_s) if all_final \
            else self.scenario.until_s
        for job_id, job in self.sim.items():
            if job.active:  # still running at the end: charge the reload spent so far
                job.charge_reload(end_s)
                rec = self.records[job_id]
                rec.lost_to_preemption_gpu_s = job.lost_preemption
                rec.lost_to_failure_gpu_s = job.lost_failure
        return SimOutcome(
            scenario=self.scenario.name,
            policy=self.policy,
            seed=self.seed,
            until_s=self.scenario.until_s,
            end_s=end_s,
            capacity_gpus=self.scenario.total_gpus(),
            jobs=[self.records[j.id] for j in self.scenario.jobs],
            preemptions=self.preemptions,
            tick_ms=self.tick_ms,
        )


def _explain(detail: dict[str, Any]) -> str:
    """The victim's own arithmetic first, then why its set won."""
    return "; ".join(str(detail[k]) for k in ("words", "why") if detail.get(k))


def simulate(scenario: Scenario, *, policy: str = "full", seed: int = 0,
             progress: ProgressFn | None = None,
             scheduler_factory: Callable[..., Any] | None = None,
             skip_quiet: bool = True) -> SimOutcome:
    return Simulation(scenario, policy=policy, seed=seed, progress=progress,
                      scheduler_factory=scheduler_factory, skip_quiet=skip_quiet).run()
