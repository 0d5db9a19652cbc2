"""The head's reservation (from declared limits) and the backfill rule that protects it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.capacity import Capacity
from scheduler_app.core.placement import find_placement
from scheduler_app.core.reservation import Release, Reservation, backfill_allowed, plan_reservation
from scheduler_app.core.types import Allocation, NodeHealth
from tests.core.builders import cluster, job, per_node

ALL8 = tuple(range(8))


def _running(cap: Capacity, holders: dict[str, tuple[int | None, Allocation]]) -> list[Release]:
    """Take each holder's GPUs; the ones that declare an end become Releases."""
    out = []
    for job_id, (end_s, alloc) in holders.items():
        cap.take(alloc)
        if end_s is not None:
            out.append(Release(end_s=end_s, job_id=job_id, alloc=alloc))
    return out


@dataclass
class Case:
    name: str
    nodes: int
    holders: dict[str, tuple[int | None, Allocation]]  # job -> (declared end, alloc)
    head: dict
    want_start: int | None
    want_after: str | None = None
    want_nodes: dict[str, int] = field(default_factory=dict)
    want_basis: str = ""
    now: int = 10
    exclude: frozenset[str] = frozenset()


def n(i: int) -> str:
    return f"pod-a-{i:03d}"


CASES = [
    Case("backfill scenario: the head waits for big-a's declared limit", 4,
         {"big-a": (1000, {n(0): ALL8, n(1): ALL8, n(2): ALL8})},
         dict(gpus=32, gpus_per_node=8), 1000, "big-a",
         {n(0): 8, n(1): 8, n(2): 8, n(3): 8},
         "reserved 4 nodes (32 GPUs) in pod-a from t=1000, when big-a reaches its declared limit"),
    Case("fits now: no release needed", 4,
         {"big-a": (1000, {n(0): ALL8})},
         dict(gpus=16, gpus_per_node=8), 10, None, {n(1): 8, n(2): 8},
         "reserved 2 nodes (16 GPUs) in pod-a from t=10: they are free now"),
    Case("earliest releases that make it fit, in end order", 4,
         {"a": (300, {n(1): ALL8}), "b": (100, {n(2): ALL8}), "c": (200, {n(3): ALL8})},
         dict(gpus=24, gpus_per_node=8), 200, "c", {n(0): 8, n(2): 8, n(3): 8},
         "from t=200, when c reaches its declared limit (after 1 earlier job ends by its limit)"),
    Case("releases at the same instant count together", 3,
         {"x": (500, {n(0): ALL8}), "y": (500, {n(1): ALL8}), "z": (900, {n(2): ALL8})},
         dict(gpus=16, gpus_per_node=8), 500, "y", {n(0): 8, n(1): 8},
         "when x and y reach their declared limits"),
    Case("a holder without a declared limit: no promise", 2,
         {"forever": (None, {n(0): ALL8}), "soon": (50, {n(1): ALL8})},
         dict(gpus=16), None),
    Case("shape: freed halves of nodes do not make a whole-node gang fit", 2,
         {"h1": (100, {n(0): (0, 1, 2, 3)}), "h2": (200, {n(1): (0, 1, 2, 3)}),
          "f1": (700, {n(0): (4, 5, 6, 7)}), "f2": (800, {n(1): (4, 5, 6, 7)})},
         dict(gpus=8, gpus_per_node=8), 700, "f1", {n(0): 8}),
    Case("no shape: the same freed halves do fit", 2,
         {"h1": (100, {n(0): (0, 1, 2, 3)}), "h2": (200, {n(1): (0, 1, 2, 3)}),
          "f1": (700, {n(0): (4, 5, 6, 7)}), "f2": (800, {n(1): (4, 5, 6, 7)})},
         dict(gpus=8), 200, "h2", {n(0): 4, n(1): 4}),
    Case("a release in the past starts now, not then", 1,
         {"late": (5, {n(0): ALL8})}, dict(gpus=8), 10, "late", {n(0): 8}),
    Case("excluded nodes are not reserved", 3,
         {"a": (100, {n(0): ALL8}), "b": (200, {n(1): ALL8})},
         dict(gpus=16, gpus_per_node=8), 200, "b", {n(1): 8, n(2): 8},
         exclude=frozenset({n(0)})),
    Case("elastic: the earliest instant its minimum fits, with what fits then", 3,
         {"a": (100, {n(0): ALL8}), "b": (200, {n(1): ALL8}), "c": (300, {n(2): ALL8})},
         dict(gpus=24, min_gpus=16), 200, "b", {n(0): 8, n(1): 8},
         "2 nodes (16 of 24 GPUs (elastic)) in pod-a"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reservation_from_declared_limits(case: Case):
    cap = cluster({"pod-a": case.nodes})
    releases = _running(cap, case.holders)
    before = {name: s.free_mask for name, s in cap.nodes.items()}
    res = plan_reservation(cap, job("head", **case.head), releases, case.now,
                           exclude=case.exclude)
    assert {name: s.free_mask for name, s in cap.nodes.items()} == before  # a trial only
    cap.check_invariants()
    if case.want_start is None:
        assert res is None
        return
    assert res is not None
    assert (res.start_s, res.after_job, per_node(res.alloc)) == (
        case.want_start, case.want_after, case.want_nodes
    )
    assert case.want_basis in res.basis


@pytest.mark.parametrize(
    "name, end_s, alloc, want",
    [
        ("ends before the reserved start", 900, {"pod-a-000": (0, 1)}, True),
        ("ends exactly at the reserved start", 1000, {"pod-a-000": (0, 1)}, True),
        ("ends after, on reserved GPUs", 1001, {"pod-a-000": (1,)}, False),
        ("ends after, on other GPUs of a reserved node", 5000, {"pod-a-000": (4, 5)}, True),
        ("ends after, on a node the reservation does not need", 5000, {"pod-a-001": (0,)}, True),
        ("no declared limit, on reserved GPUs", None, {"pod-a-000": (3,)}, False),
        ("no declared limit, elsewhere", None, {"pod-a-002": (0, 1, 2)}, True),
    ],
)
def test_backfill_allowed(name, end_s, alloc, want):
    res = Reservation("head", 1000, {"pod-a-000": (0, 1, 2, 3)}, "b", after_job="big")
    assert backfill_allowed(res, alloc, end_s) is want


# ---- properties: the galloping search equals a linear scan; backfill never delays -------


@st.composite
def busy_clusters(draw):
    nodes = draw(st.integers(1, 5))
    cap = cluster({"pod-a": nodes, "pod-b": draw(st.integers(0, 3))})
    releases = []
    for i, name in enumerate(sorted(cap.nodes)):
        free = cap.nodes[name].free_mask
        for k in range(draw(st.integers(0, 3))):
            want = draw(st.integers(1, 8))
            idx = tuple(j for j in range(8) if free >> j & 1)[:want]
            if not idx:
                break
            alloc = {name: idx}
            cap.take(alloc)
            free = cap.nodes[name].free_mask
            end = draw(st.one_of(st.none(), st.integers(0, 20).map(lambda x: x * 50)))
            if end is not None:
                releases.append(Release(end, f"r{i}-{k}", alloc))
    shape = draw(st.sampled_from([None, 4, 8]))
    gpus = draw(st.integers(1, 40))
    if shape:
        gpus = max(1, gpus // shape) * shape
    return cap, releases, job("head", gpus, gpus_per_node=shape)


def _linear(cap: Capacity, spec, releases, now):
    """The slow, obvious reservation: give back one instant at a time and try."""
    place = dict(gpus=spec.gpus, gpus_per_node=spec.gpus_per_node)
    if find_placement(cap, **place) is not None:
        return now
    with cap.trial():
        for r in sorted(releases, key=lambda r: (r.end_s, r.job_id)):
            cap.give_back(r.alloc)
            later = [x for x in releases if x.end_s == r.end_s and x.job_id > r.job_id]
            if not later and find_placement(cap, **place) is not None:
                return max(now, r.end_s)
    return None


@settings(max_examples=200, deadline=None)
@given(busy_clusters())
def test_reservation_start_equals_the_linear_scan(scene):
    cap, releases, head = scene
    res = plan_reservation(cap, head, releases, now=25)
    assert (None if res is None else res.start_s) == _linear(cap, head, releases, 25)
    cap.check_invariants()


@settings(max_examples=200, deadline=None)
@given(busy_clusters(), st.lists(st.tuples(st.integers(1, 8), st.none() | st.integers(1, 2000)),
                                 max_size=6))
def test_backfill_never_delays_the_reserved_head(scene, candidates):
    cap, releases, head = scene
    now = 0
    res = plan_reservation(cap, head, releases, now)
    if res is None or res.start_s == now:
        return
    backfilled = []
    for gpus, limit in candidates:
        alloc = find_placement(cap, gpus=gpus)
        end = None if limit is None else now + limit
        if alloc is not None and backfill_allowed(res, alloc, end):
            cap.take(alloc)
            backfilled.append((end, alloc))
    # At the reserved start every release and every backfill that promised to end is gone:
    for r in releases:
        if r.end_s <= res.start_s:
            cap.give_back(r.alloc)
    for end, alloc in backfilled:
        if end is not None and end <= res.start_s:
            cap.give_back(alloc)
    for name, idx in res.alloc.items():  # the reserved GPUs are all free
        assert all(cap.nodes[name].free_mask >> i & 1 for i in idx)
    assert find_placement(cap, gpus=head.gpus, gpus_per_node=head.gpus_per_node) is not None


@settings(max_examples=200, deadline=None)
@given(busy_clusters(), st.data())
def test_a_shaped_gangs_plan_skips_only_prefixes_that_cannot_fit(scene, data):
    # Shaped gangs count whole nodes before galloping (a lower bound on the prefix):
    # with nodes set aside or draining, the plan is still the first instant the linear
    # scan finds, on the GPUs find_placement picks there.
    cap, releases, head = scene
    names = sorted(cap.nodes)
    exclude = frozenset(data.draw(st.lists(st.sampled_from(names), max_size=2)))
    drained = data.draw(st.none() | st.sampled_from(names))
    if drained is not None:
        cap.set_health(drained, NodeHealth.DRAINING)
    place = dict(gpus=head.gpus, gpus_per_node=head.gpus_per_node, exclude=exclude)
    want = None
    if find_placement(cap, **place) is not None:
        want = (25, find_placement(cap, **place))
    else:
        with cap.trial():
            for r in sorted(releases, key=lambda r: (r.end_s, r.job_id)):
                cap.give_back(r.alloc)
                later = [x for x in releases if x.end_s == r.end_s and x.job_id > r.job_id]
                if not later and (alloc := find_placement(cap, **place)) is not None:
                    want = (max(25, r.end_s), alloc)
                    break
    res = plan_reservation(cap, head, releases, now=25, exclude=exclude)
    assert (None if res is None else (res.start_s, res.alloc)) == want
    cap.check_invariants()


def test_overlapping_releases_are_refused_naming_the_release():
    cap = cluster({"pod-a": 3})
    releases = _running(cap, {"a": (100, {n(0): ALL8}), "c": (300, {n(2): ALL8})})
    releases.append(Release(200, "stale", {n(0): ALL8}))  # the same GPUs twice
    with pytest.raises(ValueError, match="release of stale"):
        plan_reservation(cap, job("head", 24), releases, 0)
    cap.check_invariants()
    assert cap.free_gpus() == 8  # the trial was undone


@settings(max_examples=100, deadline=None)
@given(busy_clusters(), st.lists(st.tuples(st.integers(1, 40), st.sampled_from([None, 4, 8])),
                                 max_size=4))
def test_a_ticks_fast_paths_change_no_plan(scene, heads):
    cap, releases, first = scene
    specs = [first] + [
        job(f"h{i}", max(1, g // s) * s if s else g, gpus_per_node=s)
        for i, (g, s) in enumerate(heads)
    ]
    cache: dict = {}
    ordered = sorted(releases, key=lambda r: (r.end_s, r.job_id))
    for spec in specs:
        fast = plan_reservation(cap, spec, ordered, 25, mask_cache=cache, presorted=True)
        assert fast == plan_reservation(cap, spec, releases, 25)
    cap.check_invariants()


def test_presorted_releases_out_of_order_are_refused_not_planned_wrong():
    cap = cluster({"pod-a": 3})
    releases = _running(cap, {"a": (300, {n(0): ALL8}), "b": (100, {n(1): ALL8})})
    releases.sort(key=lambda r: -r.end_s)  # 300 before 100
    with pytest.raises(ValueError, match="out of"):
        plan_reservation(cap, job("head", 24), releases, 0, presorted=True)
    cap.check_invariants()
