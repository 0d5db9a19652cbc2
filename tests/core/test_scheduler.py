"""The Scheduler: events, the tick, reservation and backfill, estimates, failures, policies.

``Sim`` (below) drives a Scheduler the way SCENARIOS.md says jobs behave and checks, after
every step, that each decision is a legal move from the job's previous state, that no job
runs on a node that is down or draining at its placement, and the scheduler's own
recount of its indexes (``check_invariants``). The other scheduler test modules import it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from scheduler_app.core.scheduler import Scheduler, TickResult
from scheduler_app.core.states import HOLDING_STATES, JobState, PendingReason, Reason, is_allowed
from scheduler_app.core.types import (
    Decision,
    JobSpec,
    NodeHealth,
    NodeSpec,
    SchedulerConfig,
    TenantSpec,
)
from tests.core.builders import nodes, tenant

S = JobState
P = PendingReason


@dataclass(frozen=True)
class Work:
    """A job and how it really behaves (SCENARIOS.md): ``runtime_s`` of useful work."""

    spec: JobSpec
    runtime_s: int
    ignores_preempt: bool = False
    fails_after_s: int | None = None  # each run exits failed after this much running


def work(id: str, gpus: int, runtime_s: int, *, tenant: str = "team-a", at: int = 0,
         ignores_preempt: bool = False, fails_after_s: int | None = None, **kw: Any) -> Work:
    seq = kw.pop("seq", None) or next(_SEQ)
    return Work(JobSpec(id=id, seq=seq, tenant=tenant, gpus=gpus, submit_s=at, **kw),
                runtime_s, ignores_preempt, fails_after_s)


_SEQ = itertools.count(1)


@dataclass(frozen=True)
class Held:
    """The teams' GPUs at one instant: held, being preempted, being reclaimed."""

    running: dict[str, int]
    leaving: dict[str, int]
    claims: dict[str, tuple[str, int]]  # head -> (team, GPUs)

    @classmethod
    def of(cls, sched: Scheduler) -> Held:
        return cls(dict(sched.running), dict(sched.leaving),
                   {h: (c.tenant, c.gpus) for h, c in sched.claims.items()})

    def held(self, team: str, besides: str | None = None) -> int:
        claimed = sum(g for h, (t, g) in self.claims.items() if t == team and h != besides)
        return self.running[team] - self.leaving[team] + claimed


@dataclass
class Sim:
    """An event-driven driver of one Scheduler (a tiny simulator for the tests)."""

    node_specs: list[NodeSpec]
    tenants: list[TenantSpec]
    works: list[Work]
    events: list[tuple[int, str, Any]] = field(default_factory=list)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    check: bool = True

    def __post_init__(self) -> None:
        self.sched = Scheduler(self.node_specs, self.tenants, self.config, now=0)
        self.by_id = {w.spec.id: w for w in self.works}
        self.log: list[Decision] = []
        self.state: dict[str, S] = {}
        self.ticks: list[tuple[int, TickResult]] = []
        self.estimates: dict[str, list[tuple[int, int | None]]] = {}
        self.estimate_kinds: dict[str, list[tuple[int, int, str]]] = {}
        #: the teams' GPUs as each preemption search found them: (instant, head) -> Held,
        #: taken when the search asks its first victim to stop (what the rule read)
        self.held_at_search: dict[tuple[int, str], Held] = {}
        request = self.sched.request_preempt

        def recorded(rec: Any, head_id: str, now: int, detail: dict[str, Any]) -> Decision:
            self.held_at_search.setdefault((now, head_id), Held.of(self.sched))
            return request(rec, head_id, now, detail)

        self.sched.request_preempt = recorded  # type: ignore[method-assign]
        self._q: list[tuple[int, int, str, Any]] = []
        self._n = itertools.count()
        self._token: dict[str, int] = {}
        self._base: dict[str, int] = {}  # progress at the start of the current run
        self._run_start: dict[str, int] = {}
        self.now = 0
        self._busy = True
        for w in self.works:
            self._push(w.spec.submit_s, "submit", w.spec.id)
        for at, kind, arg in self.events:
            self._push(at, kind, arg)

    # -- queries
    def first(self, job_id: str, to: S, reason: Reason | None = None) -> Decision | None:
        return next((d for d in self.log if d.job_id == job_id and d.to_state == to
                     and (reason is None or d.reason == reason)), None)

    def started_at(self, job_id: str) -> int | None:
        d = self.first(job_id, S.PLACING)
        return None if d is None else d.at_s

    def alloc_of(self, d: Decision) -> dict[str, tuple[int, ...]]:
        """The allocation the job held when ``d`` was decided (its last placement)."""
        placed = [x for x in self.log if x.job_id == d.job_id and x.alloc is not None
                  and x.at_s <= d.at_s]
        return placed[-1].alloc if placed else {}

    def gpus_at(self, job_id: str, at: int) -> int:
        placed = [x for x in self.log if x.job_id == job_id and x.alloc is not None
                  and x.at_s <= at]
        return sum(len(ix) for ix in placed[-1].alloc.values()) if placed else 0

    def moves(self, job_id: str) -> list[tuple[int, str, str]]:
        return [(d.at_s, str(d.to_state), str(d.reason)) for d in self.log if d.job_id == job_id]

    def of(self, to: S, reason: Reason | None = None) -> list[Decision]:
        return [d for d in self.log if d.to_state == to and (reason is None or d.reason == reason)]

    # -- running
    def run(self, until: int, max_steps: int = 100_000) -> Sim:
        interval = self.config.tick_interval_s
        last_tick = -interval
        for _ in range(max_steps):
            options = [self._q[0][0]] if self._q else []
            deadline = self.sched.next_deadline()
            if deadline is not None:
                options.append(deadline)
            if len(self.sched.queues) and self._busy:
                options.append(last_tick + interval)
            if not options:
                return self
            t = max(min(options), self.now)
            if t > until:
                return self
            self.now = t
            while self._q and self._q[0][0] <= t:
                _at, _n, kind, arg = heapq.heappop(self._q)
                self._event(kind, arg, t)
            result = self.sched.tick(t)
            last_tick = t
            # Between events and timers the state only changes by ticking; after a tick
            # that changed nothing, the next one waits for an event (keeps tests fast).
            # (A look-ahead round still in progress also goes on at the next periodic tick.)
            self._busy = (bool(result.decisions) or result.stats["budget_exhausted"]
                          or bool(result.stats.get("estimate_round_left")))
            self.ticks.append((t, result))
            for job_id, est in result.start_estimates.items():
                shown = None if est is None else est.start_s
                self.estimates.setdefault(job_id, []).append((t, shown))
                if est is not None and est.kind != "started":
                    self.estimate_kinds.setdefault(job_id, []).append(
                        (t, est.start_s, est.kind))
            self._record(result.decisions, t)
        raise AssertionError("the simulation did not settle")

    def _push(self, at: int, kind: str, arg: Any) -> None:
        heapq.heappush(self._q, (at, next(self._n), kind, arg))

    def _record(self, decisions: Iterable[Decision], t: int) -> None:
        for d in decisions:
            before = self.state.get(d.job_id)
            assert d.from_state == before, (d, before)
            if before is None:
                assert d.to_state == S.SUBMITTED, d
            else:
                assert is_allowed(before, d.to_state), d
            if d.to_state == S.PLACING:
                for n in d.alloc or {}:
                    assert self.sched.cap.nodes[n].health == NodeHealth.HEALTHY, (d, n)
            self.state[d.job_id] = d.to_state
            self.log.append(d)
            self._react(d, t)
        if self.check:
            self.sched.check_invariants()

    def _react(self, d: Decision, t: int) -> None:
        job_id = d.job_id
        w = self.by_id.get(job_id)
        if w is None:
            return
        spec = w.spec
        tok = self._token.get(job_id, 0)
        if d.to_state == S.PLACING:
            self._push(t, "confirm", job_id)
        elif d.to_state == S.RUNNING and d.from_state == S.PLACING:
            tok += 1
            self._token[job_id] = tok
            pointer = self.sched.jobs[job_id].resume_pointer
            self._base[job_id] = int(pointer or 0)
            self._run_start[job_id] = t
            left = w.runtime_s - self._base[job_id]
            if w.fails_after_s is not None and w.fails_after_s < left:
                self._push(t + w.fails_after_s, "fail", (job_id, tok))
            else:
                self._push(t + left, "finish", (job_id, tok))
            if spec.checkpointable and spec.checkpoint_interval_s:
                self._push(t + spec.checkpoint_interval_s, "ckpt", (job_id, tok))
        elif d.to_state == S.PREEMPT_REQUESTED and d.from_state == S.RUNNING:
            if w.ignores_preempt:
                return
            if not spec.checkpointable:
                self._push(t, "exit_now", (job_id, tok))
            else:
                self._push(t, "ack", (job_id, tok))
                self._push(t + (spec.checkpoint_time_s or 0), "ckpt_exit", (job_id, tok))

    def _progress(self, job_id: str, t: int) -> int:
        return self._base[job_id] + t - self._run_start[job_id]

    def _event(self, kind: str, arg: Any, t: int) -> None:
        s = self.sched
        if kind == "submit":
            self._record(s.submit(self.by_id[arg].spec, t), t)
            return
        if kind in ("node_down", "node_up", "node_drain", "node_undrain", "cancel"):
            method = {"cancel": s.cancel}.get(kind) or getattr(s, kind)
            self._record(method(arg, t), t)
            return
        if kind == "set_quota":
            self._record(s.set_quota(arg[0], arg[1], arg[2], t), t)
            return
        if kind == "confirm":
            if self.state.get(arg) == S.PLACING:
                self._record(s.confirm_start(arg, t), t)
            return
        job_id, tok = arg
        if self._token.get(job_id) != tok:
            return
        state = self.state.get(job_id)
        spec = self.by_id[job_id].spec
        if kind == "finish" and state in HOLDING_STATES - {S.PLACING}:
            self._record(s.job_exited(job_id, t, "completed"), t)
        elif kind == "fail" and state in HOLDING_STATES - {S.PLACING}:
            self._record(s.job_exited(job_id, t, "failed"), t)
        elif kind == "ckpt" and state in (S.RUNNING, S.PREEMPT_REQUESTED):
            self._record(s.report_checkpoint(job_id, t, self._progress(job_id, t)), t)
            self._push(t + (spec.checkpoint_interval_s or 0), "ckpt", (job_id, tok))
        elif kind == "ack" and state == S.PREEMPT_REQUESTED:
            self._record(s.ack_preempt(job_id, t), t)
        elif kind == "ckpt_exit" and state == S.CHECKPOINTING:
            self._record(s.report_checkpoint(job_id, t, self._progress(job_id, t)), t)
            self._record(s.job_exited(job_id, t, "preempted"), t)
        elif kind == "exit_now" and state == S.PREEMPT_REQUESTED:
            self._record(s.job_exited(job_id, t, "preempted"), t)


def cfg(**kw: Any) -> SchedulerConfig:
    return SchedulerConfig(**kw)


# --------------------------------------------------------------------------- basic path
def test_submit_tick_confirm_exit_is_the_happy_path() -> None:
    sched = Scheduler(nodes({"pod-a": 2}), [tenant("team-a", 16)], cfg(), now=0)
    spec = JobSpec(id="j", seq=1, tenant="team-a", gpus=8, submit_s=0, max_runtime_s=100)
    got = [(d.from_state, d.to_state, d.reason) for d in sched.submit(spec, 0)]
    assert got == [(None, S.SUBMITTED, Reason.SUBMITTED), (S.SUBMITTED, S.QUEUED, Reason.ADMITTED)]
    placed = sched.tick(0).decisions
    assert [(d.to_state, d.reason) for d in placed] == [(S.PLACING, Reason.PLACED)]
    assert sum(len(ix) for ix in placed[0].alloc.values()) == 8
    assert [d.to_state for d in sched.confirm_start("j", 1)] == [S.RUNNING]
    assert sched.next_deadline() == 100  # the time limit of the run
    assert [d.to_state for d in sched.job_exited("j", 50, "completed")] == [S.COMPLETED]
    assert sched.cap.free_gpus() == 16 and sched.next_deadline() is None
    sched.check_invariants()


@pytest.mark.parametrize(
    ("rule", "spec_kw", "why"),
    [
        ("larger than the cluster", dict(gpus=24), "cluster has 16"),
        ("larger than guarantee + borrow", dict(gpus=16, tenant="small", preemptible=True),
         "at most 8"),
        ("larger than the guarantee, and it may not borrow", dict(gpus=8, tenant="small"),
         "is guaranteed 4, and a job that cannot be preempted"),
        ("GPU type the cluster lacks", dict(gpus=8, gpu_type="B200"), "of type B200"),
        ("shape wider than any node", dict(gpus=16, gpus_per_node=16), "on one node"),
    ],
)
def test_a_job_that_can_never_fit_fails_at_submit(rule: str, spec_kw: dict, why: str) -> None:
    sched = Scheduler(nodes({"pod-a": 2}), [tenant("team-a", 16), tenant("small", 4, 4)], cfg())
    spec_kw.setdefault("tenant", "team-a")
    ds = sched.submit(JobSpec(id="j", seq=1, submit_s=0, **spec_kw), 0)
    assert [(d.to_state, d.reason) for d in ds][-1] == (S.FAILED, Reason.NEVER_FITS), rule
    assert why in ds[-1].detail["why"]


def test_cancel_frees_the_gpus_and_leaves_the_queue() -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("team-a", 8)], cfg())
    sched.submit(JobSpec(id="run", seq=1, tenant="team-a", gpus=8, submit_s=0), 0)
    sched.submit(JobSpec(id="wait", seq=2, tenant="team-a", gpus=8, submit_s=0), 0)
    sched.tick(0)
    assert [d.to_state for d in sched.cancel("wait", 1)] == [S.CANCELLED]
    assert [d.to_state for d in sched.cancel("run", 2)] == [S.CANCELLED]
    assert sched.cancel("run", 3) == []  # already final: nothing to do
    assert sched.cap.free_gpus() == 8 and len(sched.queues) == 0
    sched.check_invariants()


# --------------------------------------------------------------------------- gangs
def test_two_gangs_that_together_overflow_the_cluster_never_deadlock() -> None:
    sim = Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 16, 16), tenant("team-b", 16, 16)],
        [work("gang-a", 24, 600, max_runtime_s=900),
         work("gang-b", 24, 600, tenant="team-b", max_runtime_s=900)],
    ).run(3000)
    starts = sorted((sim.started_at(j), j) for j in ("gang-a", "gang-b"))
    assert starts[0][0] == 0 and starts[1][0] == 600  # one whole at once, the other after
    for d in sim.of(S.PLACING):
        assert sum(len(ix) for ix in d.alloc.values()) == 24  # never a partial gang
    assert {sim.state["gang-a"], sim.state["gang-b"]} == {S.COMPLETED}


def _backfill_scenario(**extra: Any) -> Sim:
    """SCENARIOS backfill-around-reservation: big-a holds 24 of 32 GPUs until t=1000."""
    return Sim(
        nodes({"pod-a": 4}),
        [tenant("team-a", 32)],
        [
            work("big-a", 24, 1000, gpus_per_node=8, max_runtime_s=1000),
            work("head-a", 32, 500, at=10, priority=10, gpus_per_node=8, max_runtime_s=600),
            work("short-a", 8, 400, at=20, gpus_per_node=8, max_runtime_s=500),
            work("long-a", 8, 2000, at=30, gpus_per_node=8, max_runtime_s=3000),
        ],
        **extra,
    ).run(6000)


def test_backfill_never_delays_the_reserved_head() -> None:
    sim = _backfill_scenario()
    assert sim.started_at("short-a") == 20
    placed = sim.first("short-a", S.PLACING)
    assert placed.reason == Reason.BACKFILLED
    # head-a waits for its team's quota (the team's 32 GPUs are the cluster's): short-a is
    # backfilled within that quota, ending by its limit before head-a's planned start
    assert placed.detail["quota_of"] == {"job": "head-a", "start_s": 1000}
    assert placed.detail["ends_by_s"] == 520
    assert sim.started_at("head-a") == 1000  # exactly when big-a's declared limit ends
    assert sim.started_at("long-a") >= sim.started_at("head-a")
    assert sim.state == dict.fromkeys(["big-a", "head-a", "short-a", "long-a"], S.COMPLETED)


def test_the_heads_estimate_is_kept_when_declared_limits_hold() -> None:
    sim = _backfill_scenario()
    shown = sim.estimates["head-a"]
    start = sim.started_at("head-a")
    assert shown[0][0] == 10  # planned from the moment it is queued
    assert {est for _t, est in shown} == {start}  # never moved while it waited


def test_a_job_behind_the_head_is_told_why_and_when() -> None:
    sim = _backfill_scenario()
    waits = [r.pending_reasons.get("long-a") for t, r in sim.ticks if 30 <= t < 1000]
    # long-a fits the team's quota only by taking what head-a holds its place in
    assert waits and all(w in (P.QUOTA_RESERVED, P.QUOTA_LIMIT) for w in waits)
    assert P.QUOTA_RESERVED in waits
    assert all(est is not None and est >= 1000 for _t, est in sim.estimates["long-a"][:-1])


@pytest.mark.parametrize("mid_limit", [21, None, 10 * 365 * 86400],
                         ids=["declared", "no-limit", "ten-years"])
def test_a_job_backfilled_around_the_heads_gpus_does_not_take_its_quota(
        mid_limit: int | None) -> None:
    """Found by the property test below: three 8-GPU nodes, one team limited to 17 GPUs.
    big (12 GPUs, 4 a node) is reserved at t=10, when small's 5 GPUs come back; mid (6
    GPUs, 21 s) fits on GPUs the reservation does not hold, but with it running big
    would need 6 + 12 = 18 GPUs of the team's 17 at t=10. mid waits for big's quota,
    whatever it declares (declaring no limit, or an absurd one, gains nothing)."""
    sim = Sim(
        nodes({"pod-a": 3}),
        [tenant("team-a", 17, 0)],
        [
            work("big", 12, 10, gpus_per_node=4, max_runtime_s=10, seq=1),
            work("mid", 6, 21, max_runtime_s=mid_limit, seq=2),
            work("small", 5, 10, max_runtime_s=10, seq=3),
        ],
        config=SchedulerConfig(reservation_depth=1),
    ).run(200)
    assert sim.started_at("small") == 0
    assert sim.started_at("big") == 10  # its reserved start, shown at t=0
    assert {est for _t, est in sim.estimates["big"]} == {10}
    assert sim.ticks[0][1].pending_reasons["mid"] == P.QUOTA_RESERVED
    assert sim.started_at("mid") >= 10


def test_a_reserved_job_starting_counts_once_in_its_teams_quota() -> None:
    """Found by the property test below: one 4-GPU node, team a limited to 4 GPUs. At
    t=1361 a-longer's GPU comes back; a-held (2 GPUs) is reserved for then, and a-late
    (1 GPU), ranked ahead of it, gets a reservation behind it, at a-first's end. a-held
    starting at its reserved start must count once, not also as its own reservation,
    when a-late's quota is checked: it starts at t=1361, as shown."""
    sim = Sim(
        nodes({"pod-a": 1}, gpus=4),
        [tenant("team-a", 2, 2), tenant("team-b", 0, 4)],
        [
            work("a-long", 2, 1331, max_runtime_s=1331, seq=1),
            work("b-short", 2, 10, tenant="team-b", at=10, max_runtime_s=10, seq=2),
            work("a-late", 1, 10, at=1361, max_runtime_s=10, seq=3),
            work("a-first", 2, 21, at=11, max_runtime_s=21, seq=4),
            work("a-held", 2, 554, at=273, max_runtime_s=554, seq=9),
            work("a-longer", 1, 1361, max_runtime_s=1361, seq=10),
        ],
        config=SchedulerConfig(reservation_depth=2),
    ).run(3000)
    assert (1361, 1361, "reserved") in sim.estimate_kinds["a-held"]
    assert sim.started_at("a-held") == 1361
    assert sim.started_at("a-late") == 1362  # at a-first's end, as its reservation said


def test_fair_share_puts_the_team_with_less_decayed_usage_first() -> None:
    table = [
        # (usage a, usage b, guarantee a, guarantee b) -> first
        ((1000.0, 10.0, 8, 8), "b"),
        ((10.0, 1000.0, 8, 8), "a"),
        ((1000.0, 600.0, 16, 8), "a"),  # per guaranteed GPU: 62.5 < 75
    ]
    for (ua, ub, ga, gb), want in table:
        ts = [TenantSpec("a", ga, 8, ua, 0), TenantSpec("b", gb, 8, ub, 0)]
        sched = Scheduler(nodes({"pod-a": 1}), ts, cfg())
        # b's job is older and higher priority: only fair share can put a first
        sched.submit(JobSpec(id="b", seq=1, tenant="b", gpus=8, submit_s=0, priority=5), 0)
        sched.submit(JobSpec(id="a", seq=2, tenant="a", gpus=8, submit_s=0), 0)
        placed = [d.job_id for d in sched.tick(0).decisions if d.to_state == S.PLACING]
        assert placed == [want], (ua, ub, ga, gb)


def test_a_team_that_falls_below_its_guarantee_between_ticks_is_walked_first_next() -> None:
    """The walk's first key (a team below its guarantee before one at or above it) is
    read afresh once a job ends between ticks: b, far ahead on usage, drops below its
    guarantee when b1 ends, and its head takes the 4 GPUs freed before a's."""
    ts = [TenantSpec("a", 2, 8, 10.0, 0), TenantSpec("b", 4, 8, 100_000.0, 0)]
    sched = Scheduler(nodes({"pod-a": 1}), ts, cfg(), now=0)
    for seq, (job, team, gpus) in enumerate((("a1", "a", 2), ("b1", "b", 4), ("b2", "b", 2))):
        sched.submit(JobSpec(id=job, seq=seq, tenant=team, gpus=gpus, submit_s=0,
                             max_runtime_s=7200), 0)  # b2 borrows: a limit lets it
    assert len([d for d in sched.tick(0).decisions if d.to_state == S.PLACING]) == 3
    for job in ("a1", "b1", "b2"):
        sched.confirm_start(job, 0)
    sched.submit(JobSpec(id="qa", seq=3, tenant="a", gpus=4, submit_s=1, max_runtime_s=7200), 1)
    sched.submit(JobSpec(id="qb", seq=4, tenant="b", gpus=4, submit_s=1, max_runtime_s=7200), 1)
    # both teams at or above their guarantee: a, with less usage, leads; nothing is free
    # and neither is entitled to preempt
    assert [d.job_id for d in sched.tick(1).decisions] == []
    sched.job_exited("b1", 2, "completed")  # b now holds 2 of its 4
    placed = [d.job_id for d in sched.tick(2).decisions if d.to_state == S.PLACING]
    assert placed == ["qb"]


def test_usage_accrues_while_a_team_holds_gpus() -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("a", 8), tenant("b", 8)], cfg())
    sched.submit(JobSpec(id="a1", seq=1, tenant="a", gpus=8, submit_s=0), 0)
    sched.tick(0)
    sched.confirm_start("a1", 0)
    sched.job_exited("a1", 100, "completed")
    sched.submit(JobSpec(id="a2", seq=2, tenant="a", gpus=8, submit_s=100), 100)
    sched.submit(JobSpec(id="b1", seq=3, tenant="b", gpus=8, submit_s=100), 100)
    assert [d.job_id for d in sched.tick(100).decisions] == ["b1"]
    view = {t.name: t for t in sched.tenants_view()}
    assert view["a"].usage_gpu_s == pytest.approx(800, rel=1e-2)


# --------------------------------------------------------------------------- quota
def test_a_team_borrows_idle_gpus_up_to_its_borrow_limit() -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("a", 8, 8), tenant("b", 16)], cfg())
    for i in range(4):
        sched.submit(JobSpec(id=f"a{i}", seq=i, tenant="a", gpus=8, submit_s=0,
                             checkpointable=True), 0)
    placed = [d.job_id for d in sched.tick(0).decisions]
    assert placed == ["a0", "a1"]  # guarantee 8 + borrow 8
    assert sched.job("a2").pending_reason == P.QUOTA_LIMIT
    assert sched.job("a2").queue_position == 1 and sched.job("a3").queue_position == 2


def test_elastic_jobs_start_smaller_but_never_below_their_minimum() -> None:
    sched = Scheduler(nodes({"pod-a": 2}), [tenant("a", 16)], cfg())
    sched.submit(JobSpec(id="hold", seq=1, tenant="a", gpus=10, submit_s=0), 0)
    sched.tick(0)
    sched.submit(JobSpec(id="el", seq=2, tenant="a", gpus=8, submit_s=0, min_gpus=4), 0)
    sched.submit(JobSpec(id="too", seq=3, tenant="a", gpus=8, submit_s=0, min_gpus=7), 0)
    ds = sched.tick(0).decisions
    assert [(d.job_id, sum(len(ix) for ix in d.alloc.values())) for d in ds] == [("el", 6)]
    assert sched.job("too").state == S.QUEUED


@pytest.mark.parametrize(("checkpointable", "owner_cap", "planned"), [
    (False, None, "1 node (8 GPUs) in pod-a"),  # may not borrow: its team's guarantee
    (True, None, "2 nodes (16 GPUs) in pod-a"),  # may borrow: the team's 8 + 8
    (True, 12, "(12 GPUs) in pod-a"),  # its owner may hold 12
])
def test_an_elastic_jobs_estimate_plans_no_more_than_it_may_hold(
        checkpointable: bool, owner_cap: int | None, planned: str) -> None:
    # team a (8 guaranteed, 8 to borrow) holds 8; team b holds the other node; both end
    # at t=1000. An elastic job of 4 to 16 GPUs waits for its team's quota: its plan said
    # "2 nodes (16 GPUs)" for a job that may hold 8 (an operator's session).
    team_a = replace(tenant("a", 8, 8), max_gpus_per_user=owner_cap)
    sched = Scheduler(nodes({"pod-a": 2}), [team_a, tenant("b", 8)], cfg())
    for i, team in enumerate("ab"):
        sched.submit(JobSpec(id=f"hold-{team}", seq=i + 1, tenant=team, gpus=8, submit_s=0,
                             max_runtime_s=1000), 0)
    sched.tick(0)
    sched.submit(JobSpec(id="el", seq=3, tenant="a", gpus=16, min_gpus=4, submit_s=0,
                         owner="ann", checkpointable=checkpointable), 0)
    for t in range(1, 60):
        sched.tick(t)
    view = sched.job("el")
    assert view.start_estimate_s == 1000
    where = view.estimate_basis.split(" from t=")[0]  # "reserved ..." or "would fit on ..."
    assert where.endswith(planned), view.estimate_basis


# --------------------------------------------------------------------------- timers
def test_a_run_that_reaches_its_max_runtime_fails_with_time_limit() -> None:
    sim = Sim(nodes({"pod-a": 1}), [tenant("a", 8)],
              [work("slow", 8, 5000, tenant="a", max_runtime_s=600)]).run(2000)
    assert sim.moves("slow")[-1] == (600, "FAILED", "TimeLimit")


def test_a_placement_the_agent_never_confirms_goes_back_to_the_queue() -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("a", 8)], cfg(placing_timeout_s=30))
    sched.submit(JobSpec(id="j", seq=1, tenant="a", gpus=8, submit_s=0), 0)
    sched.tick(0)
    assert sched.next_deadline() == 30
    assert sched.tick(29).decisions == []
    ds = sched.tick(30).decisions
    assert [(d.to_state, d.reason) for d in ds][:2] == [
        (S.QUEUED, Reason.PLACING_TIMEOUT), (S.PLACING, Reason.PLACED)]


# --------------------------------------------------------------------------- node failure
def _one_running(spec_kw: dict, *, n_nodes: int = 2, retry_budget: int = 2) -> Scheduler:
    sched = Scheduler(nodes({"pod-a": n_nodes}), [tenant("a", 8 * n_nodes)],
                      cfg(retry_budget=retry_budget))
    spec_kw.setdefault("gpus", 16)
    spec_kw.setdefault("gpus_per_node", 8)
    sched.submit(JobSpec(id="j", seq=1, tenant="a", submit_s=0, **spec_kw), 0)
    sched.tick(0)
    sched.confirm_start("j", 0)
    return sched


def test_node_death_requeues_a_checkpointable_job_with_its_resume_pointer() -> None:
    sched = _one_running(dict(checkpointable=True, checkpoint_interval_s=60))
    sched.report_checkpoint("j", 60, "step-600")
    ds = sched.node_down("pod-a-000", 90)
    assert [(d.to_state, d.reason) for d in ds] == [(S.QUEUED, Reason.NODE_FAILED)]
    assert ds[0].detail["resume_pointer"] == "step-600"
    view = sched.job("j")
    assert view.resume_pointer == "step-600" and view.retries == 0
    assert sched.tick(90).decisions == []  # half the cluster is down: it cannot fit
    assert sched.job("j").pending_reason == P.NODE_DOWN
    sched.check_invariants()


def test_node_death_shrinks_an_elastic_job_that_keeps_its_minimum() -> None:
    sched = _one_running(dict(min_gpus=8, gpus_per_node=None))
    ds = sched.node_down("pod-a-001", 10)
    assert [(d.to_state, d.reason) for d in ds] == [(S.RUNNING, Reason.SHRUNK)]
    assert ds[0].alloc == {"pod-a-000": tuple(range(8))}
    assert sched.running["a"] == 8
    sched.check_invariants()


def test_node_death_retries_a_plain_job_then_fails_it() -> None:
    sched = _one_running(dict(), retry_budget=1)
    sched.report_checkpoint("j", 5, "ignored")  # not checkpointable: restarts from scratch
    ds = sched.node_down("pod-a-000", 10)
    assert [(d.to_state, d.reason, d.detail["retry"]) for d in ds] == [
        (S.QUEUED, Reason.NODE_FAILED, 1)]
    assert sched.job("j").resume_pointer is None
    sched.node_up("pod-a-000", 20)
    sched.tick(20)
    sched.confirm_start("j", 20)
    ds = sched.node_down("pod-a-001", 30)
    assert [(d.to_state, d.reason) for d in ds] == [(S.FAILED, Reason.RETRIES_EXHAUSTED)]
    sched.check_invariants()


def test_a_draining_node_takes_no_new_job_and_keeps_its_own() -> None:
    sched = _one_running(dict(gpus=8), n_nodes=2)
    busy = next(iter(sched.jobs["j"].alloc))
    other = "pod-a-001" if busy == "pod-a-000" else "pod-a-000"
    sched.node_drain(other, 1)
    sched.submit(JobSpec(id="k", seq=2, tenant="a", gpus=8, submit_s=1), 1)
    assert sched.tick(1).decisions == []
    assert sched.job("k").pending_reason == P.NODE_DOWN
    assert sched.job("j").state == S.RUNNING
    sched.node_undrain(other, 2)
    assert [d.alloc for d in sched.tick(2).decisions] == [{other: tuple(range(8))}]


# --------------------------------------------------------------------------- interactive
def test_the_interactive_slice_is_kept_for_interactive_jobs() -> None:
    sched = Scheduler(nodes({"pod-a": 3}), [tenant("a", 24)], cfg(interactive_reserved_gpus=8))
    assert sched.interactive_nodes == frozenset({"pod-a-002"})  # last node by name
    for i in range(3):
        sched.submit(JobSpec(id=f"b{i}", seq=i, tenant="a", gpus=8, submit_s=0), 0)
    sched.submit(JobSpec(id="nb", seq=9, tenant="a", gpus=2, submit_s=0, interactive=True), 0)
    got = {d.job_id: sorted(d.alloc) for d in sched.tick(0).decisions}
    assert got == {"b0": ["pod-a-000"], "b1": ["pod-a-001"], "nb": ["pod-a-002"]}
    assert sched.job("b2").state == S.QUEUED


# --------------------------------------------------------------------------- budget
def test_the_tick_stops_at_its_work_budget_and_resumes_next_tick() -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("a", 32)], cfg(tick_work_budget=3))
    for i in range(8):
        sched.submit(JobSpec(id=f"j{i}", seq=i, tenant="a", gpus=4, submit_s=0), 0)
    first = sched.tick(0)
    assert first.stats["examined"] == 3 and first.stats["budget_exhausted"]
    assert len(first.decisions) == 3
    assert len(sched.tick(1).decisions) == 3
    assert len(sched.tick(2).decisions) == 2


@pytest.fixture
def examined(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the jobs the walk examines, in order (Tick.examine spied on)."""
    from scheduler_app.core import tick as tick_module

    seen: list[str] = []
    real = tick_module.Tick.examine

    def spy(self: Any, rec: Any) -> str:
        seen.append(rec.spec.id)
        return real(self, rec)

    monkeypatch.setattr(tick_module.Tick, "examine", spy)
    return seen


def test_a_resumed_pass_examines_what_the_earlier_ticks_did_not_and_a_newcomer_first(
        examined: list[str]) -> None:
    # One node, held by a job; eight queued 8-GPU jobs cannot start. A budget of 3
    # examinations a tick: the pass examines j0-j2, then resumes. Before the second tick
    # a higher-priority job arrives: it is examined first, then the pass goes on where it
    # stopped (j3, j4), stepping over the jobs it examined already.
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("a", 80)], cfg(tick_work_budget=3))
    sched.submit(JobSpec(id="run", seq=0, tenant="a", gpus=8, submit_s=0), 0)
    sched.tick(0)
    sched.confirm_start("run", 0)
    for i in range(8):
        sched.submit(JobSpec(id=f"j{i}", seq=i + 1, tenant="a", gpus=8, submit_s=1), 1)
    examined.clear()
    assert sched.tick(1).stats["budget_exhausted"]
    assert examined == ["j0", "j1", "j2"]
    sched.submit(JobSpec(id="hi", seq=20, tenant="a", gpus=8, submit_s=2, priority=5), 2)
    examined.clear()
    sched.tick(2)
    assert examined == ["hi", "j3", "j4"]


def test_a_resumed_pass_walks_on_in_each_heap_from_where_it_stopped(
        examined: list[str]) -> None:
    # Half of the one node is held; teams a, b and d queue 8-GPU jobs (a first, then b,
    # then d): none can start. A budget of 17 examinations a tick. The pass leaves a
    # heap after BLOCKED_PER_HEAP (16) blocked jobs. A resumed tick walks each heap on
    # from the last job the pass examined there (Tick.order_heaps starts the heap's walk
    # there when nothing was pushed since), so a heap it left is looked at one job
    # further; a job pushed ahead of that point is examined first, and the walk leaves
    # the heap again.
    from scheduler_app.core import tick as tick_module

    assert tick_module.BLOCKED_PER_HEAP == 16
    teams = [tenant("a", 80), tenant("b", 80), tenant("d", 80), tenant("c", 8)]
    sched = Scheduler(nodes({"pod-a": 1}), teams, cfg(tick_work_budget=17))
    sched.submit(JobSpec(id="run", seq=0, tenant="c", gpus=4, submit_s=0), 0)
    sched.tick(0)
    sched.confirm_start("run", 0)
    seq = itertools.count(1)
    for team, count, at in (("a", 18, 1), ("b", 40, 2), ("d", 40, 3)):
        for i in range(count):
            sched.submit(JobSpec(id=f"{team}{i}", seq=next(seq), tenant=team, gpus=8,
                                 submit_s=at), at)
    examined.clear()
    assert sched.tick(3).stats["budget_exhausted"]
    assert examined == [f"a{i}" for i in range(16)] + ["b0"]
    sched.submit(JobSpec(id="hi", seq=next(seq), tenant="a", gpus=8, submit_s=4, priority=5),
                 4)
    examined.clear()
    assert sched.tick(4).stats["budget_exhausted"]
    assert examined == ["hi"] + [f"b{i}" for i in range(1, 16)] + ["d0"]
    examined.clear()
    assert not sched.tick(5).stats["budget_exhausted"]  # the pass is complete
    assert examined == ["a16", "b16"] + [f"d{i}" for i in range(1, 16)]
    assert sched.pass_cursor == {}


def test_a_tick_with_a_clock_stops_at_its_wall_time_budget() -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("a", 32)], cfg(tick_budget_s=2.0))
    for i in range(30):
        sched.submit(JobSpec(id=f"j{i}", seq=i, tenant="a", gpus=1, submit_s=0), 0)
    fake = itertools.count()  # every reading of the clock is 0.1 s later
    res = sched.tick(0, clock=lambda: next(fake) / 10)
    assert res.stats["budget_exhausted"] and 0 < res.stats["placed"] < 30


# --------------------------------------------------------------------------- fifo
def test_fifo_head_blocks_everyone_behind_it_without_backfill() -> None:
    sim = _backfill_scenario(config=cfg(policy="fifo"))
    assert sim.started_at("head-a") == 1000
    assert sim.started_at("short-a") >= 1000  # no backfill: it waited behind the head
    assert sim.of(S.PLACING, Reason.BACKFILLED) == []


def test_fifo_respects_the_team_limits() -> None:
    sched = Scheduler(nodes({"pod-a": 4}), [tenant("a", 8, 8), tenant("b", 16)],
                      cfg(policy="fifo"))
    for i in range(3):
        sched.submit(JobSpec(id=f"a{i}", seq=i, tenant="a", gpus=8, submit_s=i), i)
    sched.submit(JobSpec(id="b", seq=9, tenant="b", gpus=8, submit_s=5), 5)
    assert [d.job_id for d in sched.tick(5).decisions] == ["a0", "a1"]  # a2 blocks b
    assert sched.job("a2").pending_reason == P.QUOTA_LIMIT


def test_same_input_gives_the_same_decisions() -> None:
    def once() -> list[tuple]:
        sim = _backfill_scenario()
        return [(d.job_id, d.to_state, d.reason, d.at_s, d.alloc) for d in sim.log]

    assert once() == once()


# --------------------------------------------------------------------------- reads
def test_reads_show_position_rank_reason_estimate_and_reservation() -> None:
    s = Scheduler(nodes({"pod-a": 4}), [tenant("team-a", 32), tenant("team-b", 8)], cfg())
    for i, (tn, gpus, prio) in enumerate([("team-a", 24, 0), ("team-a", 32, 5),
                                          ("team-a", 8, 0), ("team-b", 8, 0)]):
        s.submit(JobSpec(id=f"j{i}", seq=i, tenant=tn, gpus=gpus, submit_s=0, priority=prio,
                         gpus_per_node=8, max_runtime_s=1000), 0)
    s.tick(0)  # j1 ranks first (priority 5) and takes the whole cluster
    s.confirm_start("j1", 0)
    views = {j: s.job(j) for j in ("j0", "j2", "j3")}
    # at one priority and limit, the 8-GPU j2 (8,000 GPU-seconds) orders before the
    # 24-GPU j0 (24,000) though submitted after it: the deadline counts GPU-seconds
    assert [views[j].queue_position for j in ("j0", "j2", "j3")] == [2, 1, 1]
    assert sorted(v.cluster_rank for v in views.values()) == [1, 2, 3]
    head = views["j2"]
    assert head.pending_reason in (P.RESOURCES, P.QUOTA_LIMIT) and head.pending_sentence
    assert head.start_estimate_s == 1000 and "j1" in head.estimate_basis
    res = s.reservations()
    assert [(r.kind, r.start_s) for r in res][:1] == [("reservation", 1000)]
    tv = {t.name: t for t in s.tenants_view()}
    assert tv["team-a"].running_gpus == 32 and tv["team-a"].queued_jobs == 2
    assert tv["team-b"].share == 0.0 and not tv["team-b"].borrowing


def test_jobs_behind_a_blocked_fifo_head_wait_for_priority() -> None:
    sched = Scheduler(nodes({"pod-a": 1}), [tenant("a", 16)], cfg(policy="fifo"))
    sched.submit(JobSpec(id="big", seq=1, tenant="a", gpus=8, submit_s=0), 0)
    sched.submit(JobSpec(id="next", seq=2, tenant="a", gpus=8, submit_s=1), 1)
    sched.submit(JobSpec(id="small", seq=3, tenant="a", gpus=1, submit_s=2), 2)
    result = sched.tick(2)
    assert [d.job_id for d in result.decisions] == ["big"]
    assert result.pending_reasons == {"next": P.RESOURCES, "small": P.PRIORITY}


def test_a_rebuilt_scheduler_accrues_usage_only_until_a_timer_that_fired_before_now() -> None:
    """A leader rebuilding at t=1000 restores a job still PLACING since t=0 (its placing
    timeout fell at t=300): the team's usage counts its GPUs until t=300, as the scheduler
    that never stopped does, not until the rebuild."""
    spec = JobSpec(id="j", seq=1, tenant="a", gpus=8, submit_s=0)
    kept = Scheduler(nodes({"pod-a": 1}), [tenant("a", 8)], cfg(), now=0)
    kept.submit(spec, 0)
    alloc = kept.tick(0).decisions[0].alloc
    kept.tick(1000)
    rebuilt = Scheduler(nodes({"pod-a": 1}), [TenantSpec("a", 8, 0, 0.0, 0)], cfg(), now=1000)
    rebuilt.restore_job(spec, S.PLACING, alloc=alloc, run_start_s=0)
    rebuilt.tick(1000)
    # both time it out at t=300 and place it again at t=1000
    assert kept.jobs["j"].state == rebuilt.jobs["j"].state == S.PLACING
    assert rebuilt.fair.usage("a") == pytest.approx(kept.fair.usage("a"), rel=1e-12)
    assert rebuilt.fair.usage("a") == pytest.approx(8 * 300, rel=0.01)
