"""Whom to evict: the seed's cost arithmetic, the rule (who may preempt whom), eligibility,
the one sort key, the set search."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.capacity import Capacity
from scheduler_app.core.placement import find_placement
from scheduler_app.core.preemption import (
    RECLAIM_KEEP,
    Candidate,
    TenantLoad,
    VictimCost,
    _allowed,
    _select,
    cannot_make_room,
    held_share,
    may_give,
    may_preempt,
    reclaim_keep,
    select_victims,
    share_after,
    share_order,
    victim_cost,
    victim_pool,
    victim_sort_key,
)
from scheduler_app.core.types import SchedulerConfig, join_words
from tests.core.builders import candidate, cluster, job, load, used

NOW = 10_000
CFG = SchedulerConfig()
MIN = 60


def hours(gpu_s: int) -> float:
    return gpu_s / 3600


# ---- the seed's arithmetic ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, gpus, ckpt_ago, restart, want_hours, rel",
    [
        # "a sweep job checkpointing every 5 min, restart 1 min: ~3.5 min x 8 GPUs ~ 0.5 GPU-h"
        ("sweep, half an interval since its checkpoint", 8, 150, 60, 0.5, 0.1),
        ("sweep, a whole interval since its checkpoint", 8, 300, 60, 0.8, 0.01),
        # "a 512-GPU run, last checkpoint 25 min ago, restart 10 min: 35 min x 512 ~ 300 GPU-h"
        ("512-GPU run", 512, 25 * MIN, 10 * MIN, 300, 0.01),
        ("the issue's example: 4 min + 1 min on 8 GPUs", 8, 4 * MIN, MIN, 0.67, 0.01),
    ],
)
def test_victim_cost_reproduces_the_seed_arithmetic(name, gpus, ckpt_ago, restart, want_hours,
                                                     rel):
    cap = cluster({"pod-a": 64})
    nodes = {f"pod-a-{i:03d}": 8 for i in range(gpus // 8)}
    c = candidate(cap, "j", nodes, now=NOW, ckpt_ago_s=ckpt_ago, restart_s=restart)
    vc = victim_cost(c, NOW)
    assert vc.cost_s == ckpt_ago + restart
    assert vc.est_gpu_s_lost == vc.cost_s * gpus
    assert hours(vc.est_gpu_s_lost) == pytest.approx(want_hours, rel=rel)


def test_victim_cost_words_show_the_arithmetic():
    cap = cluster({"pod-a": 1})
    c = candidate(cap, "sweep-17", {"pod-a-000": 8}, ckpt_ago_s=4 * MIN, restart_s=MIN)
    assert victim_cost(c, NOW).words == (
        "job sweep-17: last checkpoint 4 min ago + 1 min restart on 8 GPUs = 0.67 GPU-hours"
    )


def test_a_told_cost_is_the_same_cost_with_its_sentence():
    """``told`` copies every field by hand: a field added to VictimCost and not to it
    would be lost from the sentences' costs (each field here differs from its default)."""
    vc = VictimCost("j", 8, 300, 2400, None, 240, 60, True, 90)
    assert all(getattr(vc, f.name) != f.default for f in fields(VictimCost)
               if f.name != "text")
    assert vc.told("evicted j") == replace(vc, text="evicted j")


def test_a_declared_checkpoint_time_changes_neither_cost_nor_protection():
    """Declaring an absurd checkpoint time buys nothing: the cost is the work since the
    last checkpoint plus the restart, whatever the job says it needs to write one."""
    cap = cluster({"pod-a": 2})
    honest = candidate(cap, "honest", {"pod-a-000": 8}, ckpt_ago_s=600, checkpoint_time_s=40)
    absurd = candidate(cap, "absurd", {"pod-a-001": 8}, ckpt_ago_s=600,
                       checkpoint_time_s=31_000_000)
    assert victim_cost(honest, NOW).cost_s == victim_cost(absurd, NOW).cost_s


@pytest.mark.parametrize(
    "name, ran_s, ckpt_ago, want_cost",
    [
        ("never checkpointed: everything since the run started", 900, None, 900 + 60),
        ("a checkpoint from before this run does not help", 300, 2000, 300 + 60),
        ("just checkpointed: only the restart", 900, 0, 60),
    ],
)
def test_victim_cost_counts_from_the_later_of_checkpoint_and_run_start(
    name, ran_s, ckpt_ago, want_cost
):
    cap = cluster({"pod-a": 1})
    c = candidate(cap, "j", {"pod-a-000": 8}, ran_s=ran_s, ckpt_ago_s=ckpt_ago, restart_s=60)
    assert victim_cost(c, NOW).cost_s == want_cost


def test_sort_key_is_team_share_desc_then_cost_asc_then_seq():
    cap = cluster({"pod-a": 4})
    cheap = candidate(cap, "cheap", {"pod-a-000": 8}, ckpt_ago_s=60, seq=3)
    dear = candidate(cap, "dear", {"pod-a-001": 8}, ckpt_ago_s=3000, seq=1)
    twin = candidate(cap, "twin", {"pod-a-002": 8}, ckpt_ago_s=60, seq=2)
    keys = {
        "cheap": victim_sort_key(cheap, 2.0, NOW),
        "dear@hot-team": victim_sort_key(dear, 5.0, NOW),
        "twin": victim_sort_key(twin, 2.0, NOW),
    }
    assert sorted(keys, key=keys.__getitem__) == ["dear@hot-team", "twin", "cheap"]


# ---- the rule: shares, who may preempt whom ---------------------------------------------


@pytest.mark.parametrize("held, guaranteed, want", [
    (8, 16, 0.5),
    (16, 16, 1.0),
    (24, 8, 3.0),
    (0, 8, 0.0),
    (1, 0, math.inf),  # no guarantee and any GPU: infinitely over
    (0, 0, 1.0),  # no guarantee, nothing held: exactly at its guarantee
])
def test_a_teams_share_is_what_it_holds_over_its_guarantee(held, guaranteed, want):
    assert held_share(held, guaranteed) == want


@pytest.mark.parametrize("name, held, guaranteed, gpus, head_after, want", [
    ("above its guarantee and above the head's share: yes", 24, 8, 8, 0.5, True),
    ("at its guarantee: never", 8, 8, 8, 0.0, False),
    ("below its guarantee: never", 4, 8, 4, 0.0, False),
    ("share not above the head's after its start (LessThanInitialShare)", 12, 8, 4, 1.5,
     False),
    ("share equal to the head's after its start: no", 16, 8, 8, 2.0, False),
    ("would fall below the head's share without the job: no", 16, 8, 16, 1.0, False),
    ("falls exactly to the head's share: yes", 24, 8, 8, 2.0, True),
    ("no guarantee: its last job may go to a head that stays within its own", 8, 0, 8,
     1.0, True),
    ("no guarantee: its last job never goes to a head that then borrows", 8, 0, 8, 1.5,
     False),
    ("no guarantee, more jobs left: infinitely over still", 16, 0, 8, 1.5, True),
])
def test_may_give_table(name, held, guaranteed, gpus, head_after, want):
    assert may_give(held, guaranteed, gpus, head_after) is want


@pytest.mark.parametrize("name, head_team, gpus, others, want", [
    ("under its guarantee, a borrower exists", ("a", 16, 0), 8, [("b", 0, 32)], True),
    ("a job larger than the rest of its guarantee still may", ("a", 16, 0), 24,
     [("b", 0, 32)], True),
    ("no guarantee: never", ("a", 0, 0), 8, [("b", 0, 32)], False),
    ("nobody above their guarantee", ("a", 16, 0), 8, [("b", 16, 16)], False),
    ("borrower less over than the head would be", ("a", 8, 8), 8, [("b", 8, 12)], False),
    ("borrower further over than the head would be", ("a", 8, 8), 8, [("b", 8, 24)], True),
    ("its own team does not count", ("a", 8, 0), 8, [("a", 8, 0)], False),
])
def test_may_preempt_table(name, head_team, gpus, others, want):
    mine = TenantLoad(*head_team)
    assert may_preempt(mine, gpus, [mine, *(TenantLoad(*o) for o in others)]) is want


def test_share_after_counts_the_head():
    assert share_after(TenantLoad("a", 16, 8), 24) == 2.0
    assert share_after(TenantLoad("a", 0, 0), 1) == math.inf


def test_share_order_takes_the_team_furthest_over_first_and_recomputes():
    """x (guarantee 8) holds 32: share 4; y (guarantee 8) holds 24: share 3. The head's
    team stays at 1 after its start. x gives until its share falls to y's, then they take
    turns, each job of the team in cost order."""
    cap = cluster({"pod-a": 8})
    cands = [candidate(cap, f"{t}{i}", {nd(k): 8}, tenant=t, ckpt_ago_s=10 * (i + 1))
             for k, (t, i) in enumerate([("x", 0), ("x", 1), ("x", 2), ("x", 3),
                                         ("y", 0), ("y", 1), ("y", 2)])]
    loads = {"x": load("x", 8, 32), "y": load("y", 8, 24)}
    order = share_order(cands, loads, 1.0,
                        lambda c: (victim_cost(c, NOW).est_gpu_s_lost, c.spec.seq))
    # x at 4 -> x0 (x: 3); tie at 3: the cheaper next job, y0 (10 s) before x1 (20 s)...
    assert [c.spec.id for c in order] == ["x0", "y0", "x1", "y1", "x2"]
    # ...and each stops at its guarantee: y2 and x3 stay


# ---- set selection, table-driven ----------------------------------------------------------


@dataclass
class Case:
    name: str
    nodes: int
    running: list[dict[str, Any]]  # kwargs of builders.candidate (id, alloc, ...)
    loads: list[tuple[str, int]]  # (tenant, guaranteed); held GPUs counted from the jobs
    head: dict[str, Any]
    want_victims: list[str] | None  # None: no plan
    held: dict[str, int] = field(default_factory=dict)  # GPUs held by non-candidates
    busy: dict[str, int] = field(default_factory=dict)  # nodes' GPUs held by non-candidates
    policy: str = "full"
    want_why: str = ""


def nd(i: int) -> str:
    return f"pod-a-{i:03d}"


CASES = [
    Case("reclaim scenario: the sweep, never the 64-GPU training run", 9,
         [dict(id="train-b", alloc={nd(i): 8 for i in range(8)}, ckpt_ago_s=25 * MIN,
               restart_s=10 * MIN),
          dict(id="sweep-b", alloc={nd(8): 8}, ckpt_ago_s=5 * MIN, restart_s=MIN)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8, gpus_per_node=8), ["sweep-b"],
         want_why="evicted sweep-b"),
    Case("the cheapest borrower is chosen", 3,
         [dict(id="s1", alloc={nd(0): 8}, ckpt_ago_s=280),
          dict(id="s2", alloc={nd(1): 8}, ckpt_ago_s=40),
          dict(id="s3", alloc={nd(2): 8}, ckpt_ago_s=170)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["s2"]),
    Case("a tenant within its guarantee is never a victim, even when cheaper", 2,
         [dict(id="cheap-c", tenant="team-c", alloc={nd(0): 8}, ckpt_ago_s=10),
          dict(id="dear-b", alloc={nd(1): 8}, ckpt_ago_s=3000)],
         [("team-a", 64), ("team-b", 0), ("team-c", 8)], dict(gpus=8), ["dear-b"]),
    Case("only a within-guarantee team could make room: no plan", 1,
         [dict(id="cheap-c", tenant="team-c", alloc={nd(0): 8}, ckpt_ago_s=10)],
         [("team-a", 64), ("team-c", 8)], dict(gpus=8), None),
    Case("the issue: the team 15 times over gives, not the team one GPU over", 4,
         [dict(id="x-8", tenant="team-x", alloc={nd(0): 8}, ckpt_ago_s=10),
          dict(id="x-1", tenant="team-x", alloc={nd(1): 1}, ckpt_ago_s=10),
          dict(id="y-1", tenant="team-y", alloc={nd(2): 8}, ckpt_ago_s=3000),
          dict(id="y-2", tenant="team-y", alloc={nd(3): 7}, ckpt_ago_s=5000)],
         [("team-a", 16), ("team-x", 8), ("team-y", 1)], dict(gpus=8, gpus_per_node=8),
         ["y-1"], busy={nd(1): 7}),
    Case("the issue: a guarantee usable for a job larger than the rest of it", 4,
         [dict(id=f"b{i}", alloc={nd(i): 8}, ckpt_ago_s=60 * (i + 1)) for i in range(4)],
         [("team-a", 16), ("team-b", 0)], dict(gpus=24, gpus_per_node=8),
         ["b0", "b1", "b2"]),
    # A team within its guarantee takes it back even when the only borrower's borrowing is
    # one large job (it used to stay: losing it leaves its team below the head's share,
    # so one 192-GPU job could never be preempted where 24 of 8 could; a researcher's
    # session, 2026-12-07). The reclaim search (Kueue's fallback to LessThanInitialShare)
    Case("a guarantee is taken back from a borrower whose borrowing is one job", 2,
         [dict(id="big-b", alloc={nd(0): 8, nd(1): 8}, ckpt_ago_s=10)],
         [("team-a", 8), ("team-b", 8)], dict(gpus=8), ["big-b"],
         want_why="so team team-b gives back below it"),
    Case("the reclaim search runs only when the three conditions find no set", 4,
         [dict(id="big-b", alloc={nd(0): 8, nd(1): 8}, ckpt_ago_s=10),
          dict(id="c1", tenant="team-c", alloc={nd(2): 8}, ckpt_ago_s=3000),
          dict(id="c2", tenant="team-c", alloc={nd(3): 8}, ckpt_ago_s=3000)],
         [("team-a", 16), ("team-b", 8), ("team-c", 8)], dict(gpus=8), ["c1"]),
    Case("never below the head's share among borrowers: a head past its guarantee", 3,
         [dict(id="big-b", alloc={nd(0): 8, nd(1): 8}, ckpt_ago_s=10)],
         [("team-a", 8), ("team-b", 4)], dict(gpus=8), None, held={"team-a": 8},
         busy={nd(2): 8}),
    Case("a head that would borrow preempts only a team further over", 4,
         [dict(id="c1", tenant="team-c", alloc={nd(1): 4}, ckpt_ago_s=10),
          dict(id="b1", alloc={nd(2): 8}, ckpt_ago_s=3000),
          dict(id="b2", alloc={nd(3): 8}, ckpt_ago_s=3000)],
         [("team-a", 8), ("team-b", 4), ("team-c", 2)], dict(gpus=8, gpus_per_node=8),
         ["b1"], held={"team-a": 8}, busy={nd(0): 8, nd(1): 4}),
    Case("two small victims instead of one larger one when they lose less", 2,
         [dict(id="big", alloc={nd(0): 8}, ckpt_ago_s=20 * MIN, restart_s=5 * MIN),
          dict(id="small-1", tenant="team-c", alloc={nd(1): 4}, ckpt_ago_s=MIN),
          dict(id="small-2", tenant="team-c", alloc={nd(1): 4}, ckpt_ago_s=MIN)],
         [("team-a", 64), ("team-b", 0), ("team-c", 0)], dict(gpus=8, gpus_per_node=8),
         ["small-1", "small-2"]),
    Case("one victim instead of two when it loses less", 2,
         [dict(id="one", alloc={nd(0): 8}, ckpt_ago_s=MIN, restart_s=MIN),
          dict(id="half-1", alloc={nd(1): 4}, ckpt_ago_s=20 * MIN),
          dict(id="half-2", alloc={nd(1): 4}, ckpt_ago_s=20 * MIN)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8, gpus_per_node=8), ["one"]),
    # The daily cap protects a job from borrowing heads (team-a past its guarantee once
    # the head runs), never from a team taking its guarantee back: a protected borrower
    # kept it until it completed (a researcher's session, 2026-12-07)
    Case("the cap protects a job after two preemptions from a borrowing head", 3,
         [dict(id="capped", alloc={nd(0): 8}, ckpt_ago_s=10, preemptions=2),
          dict(id="fresh", alloc={nd(1): 8}, ckpt_ago_s=3000, preemptions=1)],
         [("team-a", 8), ("team-b", 0)], dict(gpus=8), ["fresh"],
         want_why="1 running job protected", held={"team-a": 8}, busy={nd(2): 8}),
    Case("... a team taking its guarantee back takes the others first", 2,
         [dict(id="capped", alloc={nd(0): 8}, ckpt_ago_s=10, preemptions=2),
          dict(id="fresh", alloc={nd(1): 8}, ckpt_ago_s=3000, preemptions=1)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["fresh"]),
    Case("... and a job past the cap when no other set makes room", 2,
         [dict(id="capped", alloc={nd(0): 8}, ckpt_ago_s=3000, preemptions=2),
          dict(id="capped-2", alloc={nd(1): 8}, ckpt_ago_s=10, preemptions=5)],
         [("team-a", 8), ("team-b", 0)], dict(gpus=8), ["capped-2"],
         want_why="capped-2 was past the daily preemption cap (2 within a day), and no set "
                  "of victims without it gives team team-a its guarantee back"),
    Case("... a set of the others, though dearer, before it", 2,
         [dict(id="capped", alloc={nd(0): 8}, ckpt_ago_s=10, preemptions=2),
          dict(id="half-1", alloc={nd(1): 4}, ckpt_ago_s=3000),
          dict(id="half-2", alloc={nd(1): 4}, ckpt_ago_s=3000)],
         [("team-a", 8), ("team-b", 0)], dict(gpus=8), ["half-1", "half-2"]),
    Case("non-checkpointable jobs are protected", 2,
         [dict(id="plain", alloc={nd(0): 8}, checkpointable=False, ran_s=10),
          dict(id="ckpt", alloc={nd(1): 8}, ckpt_ago_s=3000)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["ckpt"]),
    Case("... unless they opted into preemptible pricing", 2,
         [dict(id="plain", alloc={nd(0): 8}, checkpointable=False, preemptible=True,
               ran_s=10),
          dict(id="ckpt", alloc={nd(1): 8}, ckpt_ago_s=3000)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["plain"]),
    Case("an interactive job in the interactive slice is never a victim", 1,
         [dict(id="notebook", alloc={nd(0): 8}, interactive=True, in_slice=True,
               ckpt_ago_s=5)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), None),
    Case("an interactive job outside the slice is an ordinary job: the flag is no shield",
         2,
         [dict(id="notebook", alloc={nd(0): 8}, interactive=True, ckpt_ago_s=5),
          dict(id="train", alloc={nd(1): 8}, ckpt_ago_s=3000)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["notebook"]),
    Case("a real placement: the cheap job on a shared node frees no whole node", 2,
         [dict(id="cheap-half", alloc={nd(0): 4}, ckpt_ago_s=10),
          dict(id="whole", alloc={nd(1): 8}, ckpt_ago_s=600)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8, gpus_per_node=8), ["whole"],
         busy={nd(0): 4}, held={"team-b": 4}),
    Case("re-evaluated: once a team is back at its guarantee its other jobs are safe", 2,
         [dict(id="b1", alloc={nd(0): 8}, ckpt_ago_s=10),
          dict(id="b2", alloc={nd(1): 8}, ckpt_ago_s=20)],
         [("team-a", 64), ("team-b", 8)], dict(gpus=16), None),
    Case("re-evaluated: one from each borrowing team", 3,
         [dict(id="b1", alloc={nd(0): 8}, ckpt_ago_s=10),
          dict(id="b2", alloc={nd(1): 8}, ckpt_ago_s=20),
          dict(id="c1", tenant="team-c", alloc={nd(2): 8}, ckpt_ago_s=3000)],
         [("team-a", 64), ("team-b", 8), ("team-c", 0)], dict(gpus=16), ["b1", "c1"]),
    Case("the head fits without anyone leaving: no plan", 2,
         [dict(id="b1", alloc={nd(0): 8}, ckpt_ago_s=10)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), None),
    Case("a team with no guarantee never preempts", 2,
         [dict(id="b1", alloc={nd(0): 8}, ckpt_ago_s=10),
          dict(id="b2", alloc={nd(1): 8}, ckpt_ago_s=10)],
         [("team-a", 0), ("team-b", 0)], dict(gpus=8), None),
    Case("victims of the wrong GPU type are not useful", 2,
         [dict(id="b1", alloc={nd(0): 8}, ckpt_ago_s=10)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8, gpu_type="A100"), None,
         busy={nd(1): 8}, held={"team-b": 8}),
    Case("priority-kill: most recently started first, whatever it costs", 2,
         [dict(id="old-cheap", alloc={nd(0): 8}, ran_s=7200, ckpt_ago_s=10),
          dict(id="new-dear", alloc={nd(1): 8}, ran_s=3000, ckpt_ago_s=2900)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["new-dear"], policy="priority-kill"),
    Case("priority-kill: no checkpoint awareness, no cap; the slice still safe", 3,
         [dict(id="nb", alloc={nd(0): 8}, ran_s=10, interactive=True, in_slice=True),
          dict(id="plain", alloc={nd(1): 8}, ran_s=20, checkpointable=False,
               preemptions=5),
          dict(id="ckpt", alloc={nd(2): 8}, ran_s=9000, ckpt_ago_s=10)],
         [("team-a", 64), ("team-b", 0)], dict(gpus=8), ["plain"], policy="priority-kill"),
    Case("priority-kill keeps the rule: not from a team within its guarantee", 2,
         [dict(id="c1", tenant="team-c", alloc={nd(0): 8}, ran_s=10),
          dict(id="b1", alloc={nd(1): 8}, ran_s=9000)],
         [("team-a", 64), ("team-b", 0), ("team-c", 8)], dict(gpus=8), ["b1"],
         policy="priority-kill"),
]


def _setup(case: Case):
    cap = cluster({"pod-a": case.nodes})
    used(cap, case.busy)
    cands = [candidate(cap, now=NOW, **kw) for kw in case.running]
    held: dict[str, int] = dict(case.held)
    for c in cands:
        held[c.spec.tenant] = held.get(c.spec.tenant, 0) + c.gpus
    loads = {t: load(t, g, held.get(t, 0)) for t, g in case.loads}
    return cap, cands, loads


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_victim_selection(case: Case):
    cap, cands, loads = _setup(case)
    before = {n: s.free_mask for n, s in cap.nodes.items()}
    head = job("head", tenant="team-a", **case.head)
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG, policy=case.policy)
    assert {n: s.free_mask for n, s in cap.nodes.items()} == before  # trials only
    if case.want_victims is None:
        assert plan is None
        return
    assert plan is not None
    assert sorted(v.job_id for v in plan.victims) == sorted(case.want_victims)
    assert case.want_why in plan.why
    assert {w.job_id for w in plan.weighed} == {c.spec.id for c in cands}
    with cap.trial():  # the placement is real once the victims are gone
        for c in cands:
            if c.spec.id in case.want_victims:
                cap.give_back(c.alloc)
        cap.take(plan.placement)
        assert sum(len(ix) for ix in plan.placement.values()) == head.gpus


def test_explanation_reads_like_the_issue():
    cap = cluster({"pod-a": 3})
    cands = [
        candidate(cap, "sweep-17", {nd(0): 8}, ckpt_ago_s=4 * MIN, restart_s=MIN),
        candidate(cap, "sweep-18", {nd(1): 8}, ckpt_ago_s=9 * MIN, restart_s=MIN),
        candidate(cap, "train-3", {nd(2): 8}, ckpt_ago_s=29 * MIN, restart_s=10 * MIN),
    ]
    loads = {"team-a": load("team-a", 64, 0), "team-b": load("team-b", 0, 24)}
    plan = select_victims(cap, job("eval-a", 8, tenant="team-a"), cands, loads, NOW,
                          config=CFG)
    assert plan is not None
    assert [v.words for v in plan.victims] == [
        "evicted job sweep-17: last checkpoint 4 min ago + 1 min restart on 8 GPUs"
        " = 0.67 GPU-hours, cheapest of 3 candidates"
    ]
    assert [w.words.split(":")[0] for w in plan.weighed] == [
        "evicted job sweep-17", "kept job sweep-18", "kept job train-3"
    ]
    assert plan.why.startswith("to start eval-a (8 GPUs) on 1 node in pod-a: evicted sweep-17")
    assert "next best: sweep-18 (1.33 GPU-hours)" in plan.why
    assert ("team team-b holds 24 of its 0 guaranteed GPUs (infinitely over: no guarantee),"
            " above team team-a's share once it runs (0.12 times its guarantee)") in plan.why


def test_protected_jobs_say_why_in_the_weighed_list():
    cap = cluster({"pod-a": 4})
    used(cap, {nd(3): 8})  # team-a's 8: the head would borrow
    cands = [
        candidate(cap, "plain", {nd(0): 8}, checkpointable=False),
        candidate(cap, "capped", {nd(1): 8}, ckpt_ago_s=5, preemptions=2),
        candidate(cap, "ok", {nd(2): 8}, ckpt_ago_s=5),
    ]
    loads = {"team-a": load("team-a", 8, 8), "team-b": load("team-b", 0, 24)}
    plan = select_victims(cap, job("h", 8, tenant="team-a"), cands, loads, NOW, config=CFG)
    assert plan is not None
    words = {w.job_id: w.words for w in plan.weighed}
    assert "did not opt into preemptible pricing" in words["plain"]
    assert ("preempted 2 times within a day (cap 2), so only a team taking its guarantee "
            "back may preempt it again") in words["capped"]


def test_a_team_that_may_not_give_says_why_for_each_of_its_jobs():
    # Four full nodes. team-a (8 of 8 held, by "mine") wants 8 more: its share once the head
    # runs is 2. team-b (no guarantee, 24 held) may give; team-c is within its guarantee; team-d
    # is over its guarantee but not above team-a's share. Only team-b's job is weighed.
    cap = cluster({"pod-a": 4})
    cands = [
        candidate(cap, "ok", {nd(0): 8}, ckpt_ago_s=5),
        candidate(cap, "c1", {nd(1): 8}, tenant="team-c", ckpt_ago_s=5),
        candidate(cap, "d1", {nd(2): 8}, tenant="team-d", ckpt_ago_s=5),
        candidate(cap, "mine", {nd(3): 8}, tenant="team-a", ckpt_ago_s=5),
    ]
    loads = {"team-a": load("team-a", 8, 8), "team-b": load("team-b", 0, 24),
             "team-c": load("team-c", 16, 8), "team-d": load("team-d", 8, 12)}
    costs: dict = {}
    plan = select_victims(cap, job("h", 8, tenant="team-a"), cands, loads, NOW, config=CFG,
                          costs=costs)
    assert plan is not None and [v.job_id for v in plan.victims] == ["ok"]
    words = {w.job_id: w.words for w in plan.weighed}
    assert "team team-c is within its guarantee (8 of 16 GPUs)" in words["c1"]
    assert "is not above team team-a's once the job starts" in words["d1"]
    assert "same team as the job it would make room for" in words["mine"]
    assert "3 running jobs protected" in plan.why
    assert set(costs) == {"ok"}  # a protected job is never weighed


# ---- properties -------------------------------------------------------------------------


@st.composite
def contested(draw):
    nodes = draw(st.integers(2, 4))
    cap = cluster({"pod-a": nodes, "pod-b": draw(st.integers(0, 2))})
    tenants = ["team-b", "team-c", "team-d"]
    cands: list[Candidate] = []
    for i, name in enumerate(sorted(cap.nodes)):
        for k in range(draw(st.integers(0, 2))):
            free = cap.nodes[name].free
            if not free:
                break
            interactive = draw(st.integers(0, 5)) == 0
            cands.append(candidate(
                cap, f"j{i}-{k}", {name: draw(st.integers(1, free))},
                tenant=draw(st.sampled_from(tenants)),
                ckpt_ago_s=draw(st.none() | st.integers(0, 3600)),
                restart_s=draw(st.integers(0, 600)),
                checkpointable=draw(st.booleans()),
                preemptible=draw(st.booleans()),
                interactive=interactive,
                in_slice=interactive and draw(st.booleans()),
                preemptions=draw(st.integers(0, 3)),
            ))
    held: dict[str, int] = {}
    for c in cands:
        held[c.spec.tenant] = held.get(c.spec.tenant, 0) + c.gpus
    head_g = draw(st.integers(0, 24))
    head_held = draw(st.integers(0, 8))
    loads = {"team-a": load("team-a", head_g, head_held)}
    for t in tenants:
        loads[t] = load(t, draw(st.integers(0, 16)), held.get(t, 0))
    shape = draw(st.sampled_from([None, 4, 8]))
    gpus = draw(st.integers(1, 24))
    if shape:
        gpus = max(1, gpus // shape) * shape
    head = job("head", gpus, tenant="team-a", gpus_per_node=shape)
    policy = draw(st.sampled_from(["full", "full", "priority-kill"]))
    return cap, cands, loads, head, policy


def _pods_after(cap: Capacity, head, victims) -> int | None:
    """How many pods the head's placement spans once ``victims`` are gone (None: no fit)."""
    with cap.trial():
        for v in victims:
            cap.give_back(v.alloc)
        alloc = find_placement(cap, gpus=head.gpus, gpus_per_node=head.gpus_per_node)
    return None if alloc is None else len({cap.nodes[n].pod for n in alloc})


def _fits(cap: Capacity, head, victims) -> bool:
    return _pods_after(cap, head, victims) is not None


def _eligible(c: Candidate, loads, after: float, policy: str,
              keep: float | None = None, past_cap: bool = True) -> bool:
    """Statically allowed: the rule for the job alone, and the per-job protections.
    ``past_cap``: in the last search of a head within its guarantee (jobs past the daily
    cap too); by default, in any search."""
    load_v = loads[c.spec.tenant]
    if (not may_give(load_v.held_gpus, load_v.guaranteed_gpus, c.gpus, after, keep)
            or c.in_slice):
        return False
    if policy == "priority-kill":
        return True
    # the cap protects from borrowing heads, and from the others but as a last resort
    return ((c.spec.checkpointable or c.spec.preemptible)
            and (c.preemptions_last_day < 2 or (past_cap and after <= 1.0)))


@settings(max_examples=300, deadline=None)
@given(contested())
def test_a_preemption_never_leaves_a_victims_team_below_the_beneficiarys(scene):
    """The issue's property: whatever the cluster, every victim's team was above its
    guarantee and above the beneficiary team's share once the head starts before, and ends
    with a share at least that one, unless the beneficiary stays within its guarantee and
    no set under that condition makes room (the reclaim search, which says so); victims
    free a real placement, each one needed; the search is deterministic and never changes
    the cluster."""
    cap, cands, loads, head, policy = scene
    before = {n: s.free_mask for n, s in cap.nodes.items()}
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG, policy=policy)
    assert {n: s.free_mask for n, s in cap.nodes.items()} == before
    cap.check_invariants()
    by_id = {c.spec.id: c for c in cands}
    after = share_after(loads["team-a"], head.gpus)
    if plan is None:
        if after < math.inf and not _fits(cap, head, []):
            # no single allowed victim would have made room, in the reclaim search either
            keep = reclaim_keep(after)
            eligible = [c for c in cands if _eligible(c, loads, after, policy, keep)]
            assert not any(_fits(cap, head, [c]) for c in eligible)
        return
    assert after < math.inf  # a team with no guarantee never preempts
    victims = [by_id[v.job_id] for v in plan.victims]
    reclaim = "back below it" in plan.why
    keep = RECLAIM_KEEP if reclaim else None
    if reclaim:  # only for a head within its guarantee, when the three conditions fail
        assert after <= 1.0
        assert _select(cap, head, cands, loads, NOW, CFG, policy, frozenset(), {},
                       after, None) is None
    last = "past the daily preemption cap" in plan.why
    if last or any(policy == "full" and v.preemptions_last_day >= 2 for v in victims):
        # the last resort of a head within its guarantee, and it says so
        assert after <= 1.0 and last
        assert _select(cap, head, cands, loads, NOW, CFG, policy, frozenset(), {},
                       after, RECLAIM_KEEP) is None
    assert victims and all(_eligible(v, loads, after, policy, keep, last) for v in victims)
    assert _allowed(victims, loads, after, keep)
    for team in {v.spec.tenant for v in victims}:
        load_v = loads[team]
        lost = sum(v.gpus for v in victims if v.spec.tenant == team)
        assert load_v.held_gpus > load_v.guaranteed_gpus
        assert load_v.share > after  # LessThanInitialShare
        if not reclaim:  # LessThanOrEqualToFinalShare
            assert held_share(load_v.held_gpus - lost, load_v.guaranteed_gpus) >= after
    with cap.trial():
        for v in victims:
            cap.give_back(v.alloc)
        cap.take(plan.placement)  # real and free
    pods = _pods_after(cap, head, victims)
    assert pods is not None
    for v in victims:  # pruned: every victim is needed (or keeps the placement compact)
        without = _pods_after(cap, head, [x for x in victims if x is not v])
        assert without is None or without > pods
    if policy == "full":
        # Among the teams furthest over (the first the rule takes from), no single job
        # would have freed as compact a placement for less.
        top = max(loads[c.spec.tenant].share for c in cands
                  if _eligible(c, loads, after, policy, keep, last))
        for c in cands:
            if (_eligible(c, loads, after, policy, keep, last)
                    and loads[c.spec.tenant].share == top
                    and _pods_after(cap, head, [c]) is not None
                    and _pods_after(cap, head, [c]) <= pods):  # type: ignore[operator]
                assert plan.est_gpu_s_lost <= victim_cost(c, NOW).est_gpu_s_lost
    again = select_victims(cap, head, cands, loads, NOW, config=CFG, policy=policy)
    assert again == plan  # deterministic


@settings(max_examples=300, deadline=None)
@given(contested())
def test_the_bound_that_skips_a_search_never_skips_one_that_finds_victims(scene):
    """cannot_make_room lets the tick skip a search without spending its budget: it must
    hold only when no search could succeed. Whatever the cluster, when it says so the
    search finds no victims, and no set of victims the rule allows (every subset of the
    allowed jobs, tried one by one) gives the head a placement."""
    cap, cands, loads, head, policy = scene
    pool = victim_pool(cands, CFG, policy)
    if not cannot_make_room(cap, head, loads, pool):
        return
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG, policy=policy)
    assert plan is None or not plan.victims
    after = share_after(loads["team-a"], head.gpus)
    if after == math.inf:
        return
    keep = reclaim_keep(after)  # the bound covers the reclaim search too
    eligible = [c for c in cands if _eligible(c, loads, after, policy, keep)][:10]
    for k in range(1, len(eligible) + 1):
        for victims in itertools.combinations(eligible, k):
            assert not (_allowed(list(victims), loads, after, keep)
                        and _fits(cap, head, victims))


@pytest.mark.parametrize(("name", "head_kw", "head_guarantee", "b_guarantee", "b_ckpt",
                          "want"), [
    ("the head's team has no guarantee", {"gpus": 8, "gpus_per_node": 8}, 0, 0, True, True),
    ("team-b's one job would free the node", {"gpus": 8, "gpus_per_node": 8}, 8, 0, True,
     False),
    ("team-b's job cannot checkpoint", {"gpus": 8, "gpus_per_node": 8}, 8, 0, False, True),
    ("team-b is not above the head's share", {"gpus": 8, "gpus_per_node": 8}, 4, 4, True,
     True),
    ("16 GPUs: 4 free and 4 to free fall short", {"gpus": 16, "gpus_per_node": 8}, 16, 0,
     True, True),
    ("any shape: 4 free + 4 freed make 8", {"gpus": 8}, 8, 0, True, False),
])
def test_cannot_make_room_table(name, head_kw, head_guarantee, b_guarantee, b_ckpt, want):
    # Two nodes of 8 GPUs: n0 holds team-b's 4-GPU job (4 free), n1 team-c's 8-GPU job
    # that cannot checkpoint. The head (team-a, holding nothing) needs what head_kw says.
    cap = cluster({"pod-a": 2})
    n0, n1 = sorted(cap.nodes)
    cands = [candidate(cap, "b", {n0: 4}, tenant="team-b", checkpointable=b_ckpt),
             candidate(cap, "c", {n1: 8}, tenant="team-c", checkpointable=False)]
    loads = {"team-a": load("team-a", head_guarantee, 0),
             "team-b": load("team-b", b_guarantee, 4), "team-c": load("team-c", 0, 8)}
    head = job("head", tenant="team-a", **head_kw)
    pool = victim_pool(cands, CFG, "full")
    assert cannot_make_room(cap, head, loads, pool) is want, name
    if want:
        plan = select_victims(cap, head, cands, loads, NOW, config=CFG)
        assert plan is None or not plan.victims


@pytest.mark.parametrize(("head_held", "want"), [
    (0, False),  # team-a takes its guarantee back: the cap does not stop it
    (8, True),  # team-a would borrow: the job past the cap is protected from it
])
def test_cannot_make_room_lets_only_a_guarantee_take_a_job_past_the_cap(head_held, want):
    # Two nodes of 8: n0 full (a job nobody may take), n1 team-b's job preempted twice
    # today; team-b holds 16 in all (so it may give to a borrowing head by the rule).
    cap = cluster({"pod-a": 2})
    n0, n1 = sorted(cap.nodes)
    used(cap, {n0: 8})
    cands = [candidate(cap, "capped", {n1: 8}, tenant="team-b", preemptions=2)]
    loads = {"team-a": load("team-a", 8, head_held), "team-b": load("team-b", 0, 16)}
    head = job("head", 8, tenant="team-a", gpus_per_node=8)
    pool = victim_pool(cands, CFG, "full")
    assert cannot_make_room(cap, head, loads, pool) is want
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG)
    assert (plan is None) is want
    if not want:
        assert [v.job_id for v in plan.victims] == ["capped"]


def test_cannot_make_room_counts_whole_nodes_for_a_gang_of_whole_nodes():
    # 16 GPUs in whole nodes of 8. n0: team-b's checkpointable 4 + 4 free; n1: team-c's 4
    # that cannot checkpoint + 4 free; n2: team-c's checkpointable 4 + its 4 that cannot.
    # Free plus freeable GPUs make 16, but only n0 could be emptied: no search can help.
    # The same GPUs in any shape are enough.
    cap = cluster({"pod-a": 3})
    n0, n1, n2 = sorted(cap.nodes)
    cands = [candidate(cap, "b", {n0: 4}, tenant="team-b", checkpointable=True),
             candidate(cap, "d", {n1: 4}, tenant="team-c", checkpointable=False),
             candidate(cap, "c", {n2: 4}, tenant="team-c", checkpointable=True),
             candidate(cap, "e", {n2: 4}, tenant="team-c", checkpointable=False)]
    loads = {"team-a": load("team-a", 16, 0), "team-b": load("team-b", 0, 4),
             "team-c": load("team-c", 0, 12)}
    pool = victim_pool(cands, CFG, "full")
    whole = job("head", 16, tenant="team-a", gpus_per_node=8)
    assert cannot_make_room(cap, whole, loads, pool)
    plan = select_victims(cap, whole, cands, loads, NOW, config=CFG)
    assert plan is None or not plan.victims
    assert not cannot_make_room(cap, job("any", 16, tenant="team-a"), loads, pool)


def test_a_search_no_set_can_help_ends_after_one_trial_with_every_eligible_job_gone(
        monkeypatch):
    # Three nodes of 8. n0 and n1 are full of team-b's jobs (guarantee 6, holding 16:
    # share 2.67): x (2 GPUs) on n0, y (4) on n1, z (10) across both; n2 holds team-c's
    # job that cannot checkpoint, 2 GPUs free. The head (team-a, guarantee 7, 8 GPUs in
    # whole nodes) brings its team's share to 8/7, past its guarantee (so no reclaim
    # search), and team-b may give 9 GPUs, but not z: without it the team would hold 6
    # (share 1.0). Free and eligible GPUs make 8, and team-b's jobs
    # could empty either node (cannot_make_room cannot tell), but x and y alone empty no
    # node: the search ends after one trial with both gone, before singles, pairs, walks.
    cap = cluster({"pod-a": 3})
    n0, n1, n2 = sorted(cap.nodes)
    cands = [candidate(cap, "x", {n0: [0, 1]}, checkpointable=True),
             candidate(cap, "y", {n1: [0, 1, 2, 3]}, checkpointable=True),
             candidate(cap, "z", {n0: range(2, 8), n1: range(4, 8)}, checkpointable=True),
             candidate(cap, "c", {n2: 6}, tenant="team-c", checkpointable=False)]
    loads = {"team-a": load("team-a", 7, 0), "team-b": load("team-b", 6, 16),
             "team-c": load("team-c", 0, 6)}
    head = job("head", 8, tenant="team-a", gpus_per_node=8)
    assert not cannot_make_room(cap, head, loads, victim_pool(cands, CFG, "full"))
    import scheduler_app.core.placement as placement

    calls: list[dict[str, Any]] = []

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(kw)
        return find_placement(*args, **kw)

    # (the search places the head through placement.place_spec)
    monkeypatch.setattr(placement, "find_placement", counted)
    assert select_victims(cap, head, cands, loads, NOW, config=CFG) is None
    assert len(calls) == 2  # does it fit as it is? with x and y gone?
    # the same cluster with team-b able to give z: the search runs and takes z
    calls.clear()
    loads["team-b"] = load("team-b", 2, 16)
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG)
    assert plan is not None and "z" in {v.job_id for v in plan.victims}
    assert len(calls) > 2


def test_the_team_furthest_over_gives_even_where_another_teams_victim_is_cheaper():
    """Found by a user session (2026-12-07): team x held 16 of its 4 (share 4) in pod-a,
    team y 16 of its 8 (share 2) in pod-b; the set {y-1}, 0.01 GPU-hours cheaper, won,
    and y-1 then reclaimed from x in turn: two preemptions where one was needed, and the
    victim from the team less far over. The share floor of a set ranks first."""
    cap = cluster({"pod-a": 2, "pod-b": 2})
    cands = [candidate(cap, "x-1", {"pod-a-000": 8}, tenant="team-x", ckpt_ago_s=300),
             candidate(cap, "x-2", {"pod-a-001": 8}, tenant="team-x", ckpt_ago_s=300),
             candidate(cap, "y-1", {"pod-b-000": 8}, tenant="team-y", ckpt_ago_s=295),
             candidate(cap, "y-2", {"pod-b-001": 8}, tenant="team-y", ckpt_ago_s=295)]
    loads = {"team-a": load("team-a", 8, 0), "team-x": load("team-x", 4, 16),
             "team-y": load("team-y", 8, 16)}
    head = job("head", tenant="team-a", gpus=8, gpus_per_node=8)
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG)
    assert plan is not None
    assert [v.job_id for v in plan.victims] in (["x-1"], ["x-2"])
    # and the sentence says why the cheaper next best lost (it read "the fewest")
    assert ("not the fewest: its victims' teams are further over their share than the "
            "next best's; next best: y-") in plan.why
    assert "not the cheapest that makes room" in plan.victims[0].text
    # within the team furthest over, the cheapest still goes first
    cheap = [replace(c, last_checkpoint_s=NOW - 10) if c.spec.id == "x-2" else c
             for c in cands]
    plan = select_victims(cap, head, cheap, loads, NOW, config=CFG)
    assert plan is not None and [v.job_id for v in plan.victims] == ["x-2"]


def test_a_declared_restart_time_counts_at_most_an_hour_in_the_cost():
    """A restart of 366 days was accepted and made its job the last of its team to go;
    the cost counts at most RESTART_COUNTED_S of it."""
    from scheduler_app.core.preemption import RESTART_COUNTED_S

    cap = cluster({"pod-a": 2})
    huge = candidate(cap, "huge", {"pod-a-000": 8}, ckpt_ago_s=60, restart_s=31_000_000)
    vc = victim_cost(huge, NOW)
    assert RESTART_COUNTED_S == 3600
    assert vc.cost_s == 60 + 3600 and vc.restart_s == 3600
    assert "+ 60 min restart on 8 GPUs" in vc.words
    plain = candidate(cap, "plain", {"pod-a-001": 8}, ckpt_ago_s=3590, restart_s=60)
    loads = {"team-a": load("team-a", 8, 0), "team-b": load("team-b", 0, 16)}
    plan = select_victims(cap, job("head", tenant="team-a", gpus=8), [huge, plain], loads,
                          NOW, config=CFG)
    assert plan is not None and [v.job_id for v in plan.victims] == ["plain"]


def test_a_set_across_pods_wins_when_its_victims_come_from_teams_further_over():
    """Found by a user session (2026-12-07): a 64-GPU head took a set inside one pod from
    teams 1.33 and 1.38 times over while the team 2.5 times over had jobs in the other
    pods; the walks ran cluster-wide only when no pod held a set, so the better set was
    never weighed, and the victims' teams reclaimed from that team within seconds.
    Here the head needs 4 whole nodes: pod-a holds {l-1, l-2} (team-l, 2.0 times over);
    across pods, {t-1, s-1} (teams 4.0 and 3.0 times over) with pod-a's 2 free nodes."""
    cap = cluster({"pod-a": 4, "pod-b": 4, "pod-c": 4})
    used(cap, {f"pod-{p}-00{i}": 8 for p in "bc" for i in (1, 2, 3)})  # protected jobs
    cands = [candidate(cap, "l-1", {"pod-a-002": 8}, tenant="team-l", ckpt_ago_s=10),
             candidate(cap, "l-2", {"pod-a-003": 8}, tenant="team-l", ckpt_ago_s=10),
             candidate(cap, "t-1", {"pod-b-000": 8}, tenant="team-t", ckpt_ago_s=900),
             candidate(cap, "s-1", {"pod-c-000": 8}, tenant="team-s", ckpt_ago_s=900)]
    loads = {"team-a": load("team-a", 32, 0), "team-t": load("team-t", 8, 32),
             "team-s": load("team-s", 8, 24), "team-l": load("team-l", 16, 32)}
    head = job("head", tenant="team-a", gpus=32, gpus_per_node=8)
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG)
    assert plan is not None
    assert sorted(v.job_id for v in plan.victims) == ["s-1", "t-1"]
    # with team-l as far over as team-s, the one-pod set ties on the floor and wins on pods
    loads["team-l"] = load("team-l", 8, 32)
    loads["team-s"] = load("team-s", 8, 32)
    plan = select_victims(cap, head, cands, loads, NOW, config=CFG)
    assert plan is not None and sorted(v.job_id for v in plan.victims) == ["l-1", "l-2"]


@pytest.mark.parametrize(("items", "words"), [
    ([], ""), (["a"], "a"), (["a", "b"], "a and b"), (["a", "b", "c"], "a, b and c"),
    (["j-1", "j-2", "j-3", "j-4"], "j-1, j-2, j-3 and j-4"),
])
def test_a_list_in_an_explanation_reads_as_a_sentence(items: list[str], words: str) -> None:
    """One helper for the core's explanations and the selectors' sentences (three copies
    until 2026-12-07, two of which raised on an empty list)."""
    assert join_words(items) == words
