"""find_placement: all or nothing, shape, GPU type, topology, best fit, elastic sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.capacity import Capacity
from scheduler_app.core.placement import find_placement
from scheduler_app.core.types import NodeHealth, NodeSpec
from tests.core.builders import alloc_gpus, cluster, per_node, pods_of, used

H = NodeHealth


@dataclass
class Case:
    name: str
    pods: dict[str, int]
    request: dict[str, Any]
    want: dict[str, int] | None  # GPUs per node, None: does not fit
    busy: dict[str, int] = field(default_factory=dict)  # node -> GPUs in use (0..k-1)
    unhealthy: dict[str, NodeHealth] = field(default_factory=dict)
    typed: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


CASES = [
    Case("whole-node gang on whole free nodes, lowest names",
         {"pod-a": 4}, dict(gpus=16, gpus_per_node=8),
         {"pod-a-000": 8, "pod-a-001": 8}),
    Case("whole-node gang skips partial nodes",
         {"pod-a": 4}, dict(gpus=16, gpus_per_node=8),
         {"pod-a-002": 8, "pod-a-003": 8}, busy={"pod-a-000": 1, "pod-a-001": 4}),
    Case("no shape and a multiple of the node size: whole nodes",
         {"pod-a": 4}, dict(gpus=16),
         {"pod-a-001": 8, "pod-a-003": 8}, busy={"pod-a-000": 2, "pod-a-002": 5}),
    Case("all or nothing: 25 GPUs on a 24-free cluster is nothing",
         {"pod-a": 4}, dict(gpus=25), None, busy={"pod-a-000": 8}),
    Case("shape cannot be met even though enough GPUs are free",
         {"pod-a": 4}, dict(gpus=16, gpus_per_node=8), None,
         busy={"pod-a-000": 4, "pod-a-001": 4, "pod-a-002": 4}),
    Case("no shape: the same GPUs split any way",
         {"pod-a": 4}, dict(gpus=16),
         {"pod-a-000": 4, "pod-a-003": 8, "pod-a-001": 4},
         busy={"pod-a-000": 4, "pod-a-001": 4, "pod-a-002": 4}),
    Case("small job best-fits the partial node with the fewest free GPUs",
         {"pod-a": 4}, dict(gpus=2),
         {"pod-a-002": 2}, busy={"pod-a-000": 4, "pod-a-001": 1, "pod-a-002": 5}),
    Case("small job takes a whole node only when no partial node holds it",
         {"pod-a": 3}, dict(gpus=4),
         {"pod-a-002": 4}, busy={"pod-a-000": 6, "pod-a-001": 5}),
    Case("shaped small gang: partial nodes first, best fit",
         {"pod-a": 4}, dict(gpus=8, gpus_per_node=4),
         {"pod-a-001": 4, "pod-a-002": 4}, busy={"pod-a-001": 4, "pod-a-002": 3}),
    Case("gang goes to the pod that has room",
         {"pod-a": 2, "pod-b": 4}, dict(gpus=24, gpus_per_node=8),
         {"pod-b-000": 8, "pod-b-001": 8, "pod-b-002": 8}),
    Case("gang prefers the pod it fits most tightly",
         {"pod-a": 4, "pod-b": 2}, dict(gpus=16, gpus_per_node=8),
         {"pod-b-000": 8, "pod-b-001": 8}),
    Case("pod choice breaks no whole node when a pod has partial room",
         {"pod-a": 2, "pod-b": 2}, dict(gpus=4),
         {"pod-b-000": 4}, busy={"pod-b-000": 4}),
    Case("no pod holds it: fewest pods, the biggest then the best fit for the rest",
         {"pod-a": 3, "pod-b": 2, "pod-c": 1}, dict(gpus=32, gpus_per_node=8),
         {"pod-a-000": 8, "pod-a-001": 8, "pod-a-002": 8, "pod-c-000": 8}),
    Case("GPU type: only nodes of that type",
         {"pod-a": 2, "pod-b": 2}, dict(gpus=8, gpu_type="A100"),
         {"pod-b-000": 8}, typed={"pod-a": "H100", "pod-b": "A100"}),
    Case("GPU type that is all busy does not fall back to another type",
         {"pod-a": 2, "pod-b": 1}, dict(gpus=8, gpu_type="A100"), None,
         busy={"pod-b-000": 1}, typed={"pod-a": "H100", "pod-b": "A100"}),
    Case("draining and down nodes take nothing",
         {"pod-a": 3}, dict(gpus=8),
         {"pod-a-002": 8},
         unhealthy={"pod-a-000": H.DRAINING, "pod-a-001": H.DOWN}),
    Case("elastic: the largest size that fits",
         {"pod-a": 2}, dict(gpus=16, min_gpus=4), {"pod-a-000": 2, "pod-a-001": 8},
         busy={"pod-a-000": 6}),
    Case("elastic: below the minimum is nothing",
         {"pod-a": 2}, dict(gpus=16, min_gpus=12), None, busy={"pod-a-000": 6}),
    Case("elastic shaped: a multiple of the shape",
         {"pod-a": 3}, dict(gpus=24, gpus_per_node=8, min_gpus=8),
         {"pod-a-001": 8, "pod-a-002": 8}, busy={"pod-a-000": 1}),
    Case("shape larger than any node never fits",
         {"pod-a": 2}, dict(gpus=16, gpus_per_node=16), None),
    Case("bigger nodes hold a shape of their size",
         {"pod-a": 1, "pod-b": 1}, dict(gpus=16, gpus_per_node=16), {"pod-b-000": 16},
         sizes={"pod-b": 16}),
    Case("exclude: those nodes are not used",
         {"pod-a": 3}, dict(gpus=8, exclude={"pod-a-000", "pod-a-001"}), {"pod-a-002": 8}),
    Case("only: nothing else is used",
         {"pod-a": 3}, dict(gpus=4, only=["pod-a-001"]), {"pod-a-001": 4},
         busy={"pod-a-000": 4}),
    Case("only and exclude together",
         {"pod-a": 3}, dict(gpus=4, only=["pod-a-001", "pod-a-002"], exclude={"pod-a-001"}),
         {"pod-a-002": 4}),
]


def _cap(case: Case) -> Capacity:
    cap = cluster(case.pods, typed=case.typed, sizes=case.sizes)
    used(cap, case.busy)
    for name, health in case.unhealthy.items():
        cap.set_health(name, health)
    return cap


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_placement_rules(case: Case):
    cap = _cap(case)
    before = {n: s.free_mask for n, s in cap.nodes.items()}
    got = find_placement(cap, **case.request)
    assert per_node(got) == (case.want or {})
    assert {n: s.free_mask for n, s in cap.nodes.items()} == before  # never mutates
    if got is not None:
        cap.take(got)  # the GPUs it names are really free
        cap.check_invariants()


def test_lowest_gpu_indices_first():
    cap = used(cluster({"pod-a": 1}), {"pod-a-000": (0, 2, 3)})
    assert find_placement(cap, gpus=3) == {"pod-a-000": (1, 4, 5)}


def test_whole_node_gang_starts_at_once_beside_eight_4gpu_jobs_packed_two_per_node():
    cap = cluster({"pod-a": 8})
    for _ in range(8):
        alloc = find_placement(cap, gpus=4)
        assert alloc is not None
        cap.take(alloc)
    # the eight small jobs packed two per node: 4 nodes full, 4 nodes whole and free
    assert sorted(s.free for s in cap.nodes.values()) == [0, 0, 0, 0, 8, 8, 8, 8]
    gang = find_placement(cap, gpus=32, gpus_per_node=8)
    assert alloc_gpus(gang) == 32 and set(per_node(gang).values()) == {8}
    unshaped = find_placement(cap, gpus=32)
    assert per_node(unshaped) == per_node(gang)


@pytest.mark.parametrize(
    "pods, busy, gpus, want_pods",
    [
        ({"pod-a": 4, "pod-b": 4}, {"pod-a-000": 8}, 32, ["pod-b"]),
        ({"pod-a": 4, "pod-b": 4}, {"pod-a-000": 8, "pod-b-000": 8}, 32, ["pod-a", "pod-b"]),
        ({"pod-a": 2, "pod-b": 3, "pod-c": 3}, {}, 48, ["pod-b", "pod-c"]),
        # three pods can hold it in 2; never 3
        ({"pod-a": 2, "pod-b": 2, "pod-c": 4}, {}, 48, ["pod-a", "pod-c"]),
    ],
)
def test_gang_goes_to_one_pod_when_one_has_room_else_to_the_fewest_pods(
    pods, busy, gpus, want_pods
):
    cap = used(cluster(pods), busy)
    got = find_placement(cap, gpus=gpus, gpus_per_node=8)
    assert pods_of(got, cap) == want_pods
    assert alloc_gpus(got) == gpus


def test_small_jobs_best_fit_onto_partial_nodes_so_whole_nodes_stay_free():
    cap = cluster({"pod-a": 4})
    for gpus in (3, 2, 1, 2, 3, 5):  # 16 GPUs of small jobs
        alloc = find_placement(cap, gpus=gpus)
        assert alloc is not None and len(alloc) == 1
        cap.take(alloc)
    assert cap.whole_free_nodes("pod-a") == 2


def test_bad_requests_are_refused_loudly():
    cap = cluster({"pod-a": 1})
    with pytest.raises(ValueError, match="multiple"):
        find_placement(cap, gpus=6, gpus_per_node=4)
    with pytest.raises(ValueError, match="positive"):
        find_placement(cap, gpus=0)
    with pytest.raises(ValueError, match="min_gpus"):
        find_placement(cap, gpus=4, min_gpus=5)


def test_a_container_that_cannot_be_iterated_still_excludes():
    class Odd:
        def __contains__(self, name: object) -> bool:
            return str(name).endswith("0")

        def __bool__(self) -> bool:
            return True

    cap = cluster({"pod-a": 2})
    assert per_node(find_placement(cap, gpus=8, exclude=Odd())) == {"pod-a-001": 8}


# ---- properties on random small clusters -------------------------------------------------


@st.composite
def scenes(draw):
    n_pods = draw(st.integers(1, 3))
    specs = []
    for p in range(n_pods):
        size = draw(st.sampled_from([4, 8]))
        gtype = draw(st.sampled_from([None, "H100", "A100"]))
        for i in range(draw(st.integers(1, 4))):
            specs.append(NodeSpec(f"pod-{p}-{i:03d}", f"pod-{p}", size, gtype))
    cap = Capacity(specs)
    for s in specs:
        mask = draw(st.integers(0, (1 << s.gpus) - 1))
        cap.take({s.name: tuple(i for i in range(s.gpus) if mask >> i & 1)})
        cap.set_health(s.name, draw(st.sampled_from([H.HEALTHY] * 4 + [H.DRAINING, H.DOWN])))
    shape = draw(st.sampled_from([None, None, 1, 2, 4, 8]))
    gpus = draw(st.integers(1, 40))
    if shape:
        gpus = max(1, gpus // shape) * shape
    min_gpus = draw(st.sampled_from([None, None, 1, gpus // 2 or 1]))
    gpu_type = draw(st.sampled_from([None, None, "H100", "A100"]))
    exclude = frozenset(draw(st.lists(st.sampled_from([s.name for s in specs]), max_size=2)))
    return cap, dict(gpus=gpus, gpus_per_node=shape, min_gpus=min_gpus, gpu_type=gpu_type,
                     exclude=exclude)


def _eligible(cap, req):
    return [
        s for s in sorted(cap.nodes.values(), key=lambda s: s.name)
        if s.health == H.HEALTHY and s.name not in req["exclude"]
        and (req["gpu_type"] is None or s.gpu_type == req["gpu_type"])
        and s.free >= (req["gpus_per_node"] or 1)
    ]


@settings(max_examples=300, deadline=None)
@given(scenes())
def test_every_placement_holds_exactly_the_asked_free_healthy_gpus_in_shape(scene):
    cap, req = scene
    got = find_placement(cap, **req)
    eligible = _eligible(cap, req)
    g = req["gpus_per_node"]
    low = req["min_gpus"] or req["gpus"]
    if g:
        most = min(req["gpus"], len(eligible) * g)
    else:
        most = min(req["gpus"], sum(s.free for s in eligible))
    if most < low:  # complete: it says no only when nothing fits
        assert got is None
        return
    assert got is not None
    assert alloc_gpus(got) == most  # elastic: the largest size that fits
    for name, idx in got.items():
        node = cap.nodes[name]
        assert node in eligible
        assert len(set(idx)) == len(idx) > 0
        assert all(node.free_mask >> i & 1 for i in idx)  # never a used GPU
        if g:
            assert len(idx) == g
    by_pod: dict[str, int] = {}
    for s in eligible:
        by_pod[s.pod] = by_pod.get(s.pod, 0) + (1 if g else s.free)
    fits_one_pod = any(v * (g or 1) >= most for v in by_pod.values())
    if fits_one_pod:
        assert len(pods_of(got, cap)) == 1
    assert find_placement(cap, **req) == got  # deterministic
    cap.take(got)
    cap.check_invariants()
