"""ReleaseIndex: the releases stay in (end_s, job_id) order through any sequence of sets
and discards, a list already handed out never changes, and the node index follows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.scheduler import ReleaseIndex

JOBS = [f"j{i}" for i in range(8)]
NODES = ["n0", "n1", "n2"]

ops = st.lists(st.tuples(
    st.sampled_from(JOBS),
    st.one_of(st.none(), st.integers(0, 5)),       # end_s (None: no known end)
    st.sets(st.sampled_from(NODES), max_size=2),   # the nodes it holds GPUs on
    st.booleans(),                                 # read the releases after this step
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_releases_follow_every_change_and_old_lists_stay_as_they_were(steps):
    index = ReleaseIndex()
    model: dict[str, tuple[int, frozenset[str]]] = {}
    handed: list[tuple[list, list]] = []  # (a list handed out, a copy of it then)
    for job, end, nodes, read in steps:
        alloc = {n: (0,) for n in sorted(nodes)}
        index.set(job, end, alloc)
        if end is None or not alloc:
            model.pop(job, None)
        else:
            model[job] = (end, frozenset(nodes))
        if read:
            got = index.releases()
            handed.append((got, list(got)))
            want = sorted((e, j) for j, (e, _n) in model.items())
            assert [(r.end_s, r.job_id) for r in got] == want
            assert all(set(r.alloc) == model[r.job_id][1] for r in got)
    for got, then in handed:
        assert got == then  # a later change made a new list, never edited this one
    on_node = {n: {j for j, (_e, ns) in model.items() if n in ns} for n in NODES}
    assert {n: set(js) for n, js in index.on_node.items()} == \
        {n: js for n, js in on_node.items() if js}
    assert len(index) == len(model)
