"""The free-capacity index: exact GPU indices, health, aggregates, buckets and trials."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.capacity import Capacity, indices_of, lowest_bits
from scheduler_app.core.types import NodeHealth, NodeSpec
from tests.core.builders import cluster, down, nodes, used

H = NodeHealth


def test_new_cluster_is_all_free_and_all_whole():
    cap = cluster({"pod-a": 4, "pod-b": 2})
    assert cap.free_gpus() == cap.healthy_gpus() == cap.total_gpus() == 48
    assert cap.whole_free_nodes("pod-a") == 4
    assert cap.whole_free_nodes("pod-b") == 2
    assert cap.nodes["pod-a-000"].free == 8
    cap.check_invariants()


def test_take_marks_exactly_the_given_indices():
    cap = cluster({"pod-a": 1})
    cap.take({"pod-a-000": (1, 3)})
    assert indices_of(cap.nodes["pod-a-000"].free_mask) == (0, 2, 4, 5, 6, 7)
    assert cap.free_gpus() == 6
    assert cap.whole_free_nodes("pod-a") == 0
    cap.check_invariants()


@pytest.mark.parametrize(
    "name, busy, alloc, want_error",
    [
        ("gpu already used", {"pod-a-000": 4}, {"pod-a-000": (3, 4)}, "not free"),
        ("index out of range", {}, {"pod-a-000": (8,)}, "no GPU"),
        ("index repeated", {}, {"pod-a-000": (2, 2)}, "repeated"),
        ("unknown node", {}, {"pod-z-000": (0,)}, "unknown node"),
    ],
)
def test_take_refuses_and_changes_nothing(name, busy, alloc, want_error):
    cap = used(cluster({"pod-a": 2}), busy)
    before = {n: s.free_mask for n, s in cap.nodes.items()}
    # a good part on another node must not be applied either: all or nothing
    with pytest.raises(ValueError, match=want_error):
        cap.take({"pod-a-001": (0,), **alloc})
    assert {n: s.free_mask for n, s in cap.nodes.items()} == before
    cap.check_invariants()


def test_give_back_refuses_gpus_that_are_already_free():
    cap = used(cluster({"pod-a": 1}), {"pod-a-000": 2})
    with pytest.raises(ValueError, match="already free"):
        cap.give_back({"pod-a-000": (1, 2)})
    cap.give_back({"pod-a-000": (0, 1)})
    assert cap.free_gpus() == 8


@pytest.mark.parametrize(
    "health, want_free, want_healthy, want_in_buckets",
    [
        (H.HEALTHY, 12, 16, True),
        (H.DRAINING, 8, 8, False),  # keeps its job, offers nothing new
        (H.DOWN, 8, 8, False),
    ],
)
def test_only_healthy_nodes_are_schedulable(health, want_free, want_healthy, want_in_buckets):
    cap = used(cluster({"pod-a": 2}), {"pod-a-000": 4})
    cap.set_health("pod-a-000", health)
    assert cap.free_gpus() == want_free
    assert cap.healthy_gpus() == want_healthy
    assert cap.total_gpus() == 16  # NeverFits looks at everything
    in_buckets = any(
        m & 1 for m in cap.pods["pod-a"].buckets.values()
    )  # bit 0 = pod-a-000
    assert in_buckets == want_in_buckets
    cap.check_invariants()


def test_a_dead_nodes_jobs_can_give_back_and_it_returns_whole():
    cap = used(cluster({"pod-a": 1}), {"pod-a-000": 8})
    down(cap, "pod-a-000")
    cap.give_back({"pod-a-000": tuple(range(8))})
    assert cap.free_gpus() == 0
    cap.set_health("pod-a-000", H.HEALTHY)
    assert cap.free_gpus() == 8 and cap.whole_free_nodes("pod-a") == 1
    cap.check_invariants()


def test_aggregates_per_gpu_type():
    cap = cluster({"pod-a": 2, "pod-b": 1}, typed={"pod-a": "H100", "pod-b": "A100"},
                  sizes={"pod-b": 4})
    used(cap, {"pod-a-000": 3})
    assert cap.free_gpus("H100") == 13
    assert cap.free_gpus("A100") == 4
    assert cap.free_gpus() == 17
    assert cap.free_gpus("B200") == 0
    assert cap.max_gpus_per_node("A100") == 4
    assert cap.max_gpus_per_node() == 8
    down(cap, "pod-b-000")
    assert cap.healthy_gpus("A100") == 0 and cap.total_gpus("A100") == 4


def test_trial_undoes_everything_inside_it_even_nested_and_on_error():
    cap = used(cluster({"pod-a": 3}), {"pod-a-000": 4})
    before = {n: (s.free_mask, s.health) for n, s in cap.nodes.items()}
    with pytest.raises(RuntimeError), cap.trial():
        cap.give_back({"pod-a-000": (0, 1)})
        cap.take({"pod-a-001": (5,)})
        with cap.trial():
            cap.set_health("pod-a-002", H.DOWN)
            cap.take({"pod-a-000": (7,)})
        assert cap.nodes["pod-a-002"].health == H.HEALTHY  # the inner trial undid itself
        assert cap.nodes["pod-a-001"].free == 7  # but not the outer's change
        cap.set_health("pod-a-001", H.DRAINING)
        raise RuntimeError("boom")
    assert {n: (s.free_mask, s.health) for n, s in cap.nodes.items()} == before
    cap.check_invariants()


def test_bit_helpers():
    assert indices_of(0b101100) == (2, 3, 5)
    assert lowest_bits(0b101100, 2) == 0b1100
    assert lowest_bits(0b1, 5) == 0b1


def test_duplicate_node_is_refused():
    with pytest.raises(ValueError, match="twice"):
        Capacity([NodeSpec("n", "p", 8), NodeSpec("n", "p", 8)])


# ---- property: any sequence of changes keeps the index equal to a recount -------------

_NODES = nodes({"pod-a": 3, "pod-b": 2}, typed={"pod-b": "A100"}, sizes={"pod-b": 4})
_NAMES = [n.name for n in _NODES]

op = st.one_of(
    st.tuples(st.just("take"), st.sampled_from(_NAMES), st.integers(0, 255)),
    st.tuples(st.just("give"), st.sampled_from(_NAMES), st.integers(0, 255)),
    st.tuples(st.just("health"), st.sampled_from(_NAMES), st.sampled_from(list(H))),
    st.tuples(st.just("trial"), st.sampled_from(_NAMES), st.integers(0, 255)),
)


def _apply(cap: Capacity, kind: str, name: str, arg: object) -> None:
    node = cap.nodes[name]
    if kind == "health":
        cap.set_health(name, arg)  # type: ignore[arg-type]
        return
    mask = arg & node.full_mask  # type: ignore[operator]
    if kind == "take":
        cap.take({name: indices_of(mask & node.free_mask)})
    elif kind == "give":
        cap.give_back({name: indices_of(mask & ~node.free_mask & node.full_mask)})
    else:
        snapshot = {n: (s.free_mask, s.health) for n, s in cap.nodes.items()}
        with cap.trial():
            cap.take({name: indices_of(mask & node.free_mask)})
            cap.set_health(name, H.DRAINING)
        assert {n: (s.free_mask, s.health) for n, s in cap.nodes.items()} == snapshot


def _recount(cap: Capacity, gpu_type: str | None) -> tuple[int, int, int]:
    sel = [s for s in cap.nodes.values() if gpu_type is None or s.gpu_type == gpu_type]
    healthy = [s for s in sel if s.health == H.HEALTHY]
    return (sum(s.free for s in healthy), sum(s.gpus for s in healthy), sum(s.gpus for s in sel))


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40), st.lists(op, max_size=15))
def test_any_sequence_keeps_aggregates_equal_to_a_recount_and_trials_restore(ops, tried):
    cap = Capacity(_NODES)
    for kind, name, arg in ops:
        _apply(cap, kind, name, arg)
        cap.check_invariants()
    for t in (None, "A100"):
        assert (cap.free_gpus(t), cap.healthy_gpus(t), cap.total_gpus(t)) == _recount(cap, t)
    snapshot = {n: (s.free_mask, s.health) for n, s in cap.nodes.items()}
    buckets = {p: dict(ix.buckets) for p, ix in cap.pods.items()}
    aggregates = (cap.free_gpus(), cap.healthy_gpus(), cap.free_gpus("A100"))
    with cap.trial():
        for kind, name, arg in tried:
            _apply(cap, kind, name, arg)
    assert {n: (s.free_mask, s.health) for n, s in cap.nodes.items()} == snapshot
    assert {p: dict(ix.buckets) for p, ix in cap.pods.items()} == buckets
    assert (cap.free_gpus(), cap.healthy_gpus(), cap.free_gpus("A100")) == aggregates
    cap.check_invariants()


# ---- property: a clone and its original never see each other's changes ----------------


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=20),
       st.lists(st.one_of(st.tuples(st.integers(0, 2), op),
                          st.tuples(st.just("clone"), st.integers(0, 2), st.integers(0, 2))),
                max_size=40))
def test_clones_and_their_originals_change_independently(first, then):
    """clone() shares the node objects until one side changes a node (copy on write): any
    mix of changes to an original, its clones and a clone of a clone, with clones taken
    at any point, leaves each exactly as if its own history had been replayed on a
    Capacity of its own."""
    caps = [Capacity(_NODES)]
    for kind, name, arg in first:
        _apply(caps[0], kind, name, arg)
    caps += [caps[0].clone(), None]
    caps[2] = caps[1].clone()
    history = [list(first) for _ in caps]
    for step in then:
        if step[0] == "clone":
            _, dst, src = step
            caps[dst] = caps[src].clone()
            history[dst] = list(history[src])
            continue
        who, (kind, name, arg) = step
        _apply(caps[who], kind, name, arg)
        history[who].append((kind, name, arg))
    for cap, ops in zip(caps, history, strict=True):
        replay = Capacity(_NODES)
        for kind, name, arg in ops:
            _apply(replay, kind, name, arg)
        assert _index_state(cap) == _index_state(replay)
        cap.check_invariants()


# ---- batched give-back (the reservation planner's fast path) ---------------------------


def _index_state(cap: Capacity) -> tuple[object, ...]:
    return (
        {n: (s.free_mask, s.health) for n, s in cap.nodes.items()},
        {p: dict(sorted(pod.buckets.items(), key=str)) for p, pod in cap.pods.items()},
        dict(sorted(cap.key_pods.items(), key=str)),
        cap.keys_best_fit_first(),
        [(cap.free_gpus(t), cap.healthy_gpus(t)) for t in (None, *cap.gpu_types)],
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=30), st.lists(st.tuples(st.sampled_from(_NAMES),
                                                     st.integers(0, 255)), max_size=12))
def test_give_back_masks_leaves_the_same_index_as_giving_back_one_by_one(ops, gives):
    cap = Capacity(_NODES)
    for kind, name, arg in ops:
        _apply(cap, kind, name, arg)
    # disjoint used GPUs to give back, several per node
    batch: dict[str, int] = {}
    singles = []
    for name, arg in gives:
        node = cap.nodes[name]
        m = arg & ~node.free_mask & node.full_mask & ~batch.get(name, 0)
        if m:
            batch[name] = batch.get(name, 0) | m
            singles.append({name: indices_of(m)})
    with cap.trial():
        for alloc in singles:
            cap.give_back(alloc)
        want = _index_state(cap)
    before = _index_state(cap)
    with cap.trial():
        cap.give_back_masks(batch)
        assert _index_state(cap) == want
        cap.check_invariants()
    assert _index_state(cap) == before  # a trial undoes the batch too


def test_give_back_masks_refuses_free_gpus_and_changes_nothing():
    cap = used(cluster({"pod-a": 2}), {"pod-a-000": 4, "pod-a-001": 8})
    before = {n: s.free_mask for n, s in cap.nodes.items()}
    with pytest.raises(ValueError, match="already free"):
        cap.give_back_masks({"pod-a-001": 0b1, "pod-a-000": 0b110000})  # GPU 4, 5 are free
    assert {n: s.free_mask for n, s in cap.nodes.items()} == before
    cap.check_invariants()


def test_rollback_undoes_only_what_came_after_its_mark_and_the_trial_the_rest():
    cap = used(cluster({"pod-a": 2}), {"pod-a-000": 8, "pod-a-001": 8})
    start = _index_state(cap)
    with cap.trial():
        cap.give_back({"pod-a-000": (0, 1)})
        kept = _index_state(cap)
        mark = cap.mark()
        cap.give_back_masks({"pod-a-000": 0b100, "pod-a-001": 0b1111})
        cap.rollback(mark)
        assert _index_state(cap) == kept
        cap.check_invariants()
    assert _index_state(cap) == start
    with pytest.raises(RuntimeError, match="outside a trial"):
        cap.mark()
