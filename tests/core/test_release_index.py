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


def test_an_unchanged_release_keeps_its_object_and_list():
    """A checkpoint moves a job to the state it is in: its release (end and GPUs) is the
    same, and so are the Release object and the list, which mask caches and kept pictures
    know by identity."""
    index = ReleaseIndex()
    index.set("j0", 100, {"n0": (0, 1)})
    index.set("j1", 50, {"n1": (0,)})
    release, listed, digest = index.releases()[1], index.releases(), index.digest
    index.set("j0", 100, {"n0": (0, 1)})  # an equal allocation, another dict
    assert index.releases() is listed and index.releases()[1] is release
    assert index.digest == digest
    index.set("j0", 120, {"n0": (0, 1)})  # a new end: a new release
    assert index.releases() is not listed and index.end_of("j0") == 120
    index.set("j0", 120, {"n0": (0,)})  # fewer GPUs: a new release
    assert index.releases()[1].alloc == {"n0": (0,)}


picture_steps = st.lists(st.one_of(
    st.tuples(st.just("index"), st.sampled_from(JOBS), st.one_of(st.none(), st.integers(0, 5)),
              st.sets(st.sampled_from(NODES), max_size=2)),
    st.tuples(st.just("lend")),
    st.tuples(st.just("drop"), st.integers(0, 3)),
    # a picture writes or deletes a job's release or a node's set
    st.tuples(st.just("write"), st.integers(0, 3), st.sampled_from(JOBS + NODES),
              st.booleans()),
), max_size=50)


@settings(max_examples=300, deadline=None)
@given(picture_steps)
def test_a_lent_picture_shows_the_index_as_lent_with_its_own_changes_only(steps):
    """ReleaseIndex.lend: a picture's maps are the index's at the instant it was lent plus
    the picture's own writes, whatever the index does after (a job starts within the tick,
    a round of estimates spans ticks), and the index never sees a picture's writes."""
    index = ReleaseIndex()
    pictures: list[tuple[tuple, dict, dict]] = []  # (layers, model by job, model by node)
    for step in steps:
        if step[0] == "index":
            _k, job, end, nodes = step
            index.set(job, end, {n: (0,) for n in sorted(nodes)})
        elif step[0] == "lend":
            pictures.append((index.lend(), dict(index.by_job_map()), dict(index.on_node)))
        elif step[0] == "drop" and pictures:
            del pictures[step[1] % len(pictures)]
        elif step[0] == "write" and pictures:
            _k, which, key, delete = step
            (by_job, on_node), want_job, want_node = pictures[which % len(pictures)]
            layer, want = (by_job, want_job) if key in JOBS else (on_node, want_node)
            if delete:
                if key in want:
                    del layer[key], want[key]
                else:
                    try:
                        del layer[key]
                    except KeyError:
                        pass
                    else:
                        raise AssertionError(f"deleted {key}, which the picture lacks")
            else:
                layer[key] = want[key] = ("written", len(want))
    index_job, index_node = dict(index.by_job_map()), dict(index.on_node)
    for (by_job, on_node), want_job, want_node in pictures:
        for layer, want, keys in ((by_job, want_job, JOBS), (on_node, want_node, NODES)):
            for key in keys:
                assert layer.get(key) == want.get(key)
                assert (key in layer) == (key in want)
    # and the index is its own: equal to one built from its sets alone
    replay = ReleaseIndex()
    for job, release in index_job.items():
        replay.set(job, release.end_s, release.alloc)
    assert dict(replay.by_job_map()) == index_job and replay.on_node == index_node


def test_a_dropped_picture_is_no_longer_told_of_changes():
    """The index keeps its pictures' journals weakly: one that is dropped costs nothing."""
    index = ReleaseIndex()
    index.set("j0", 10, {"n0": (0,)})
    kept, dropped = index.lend(), index.lend()
    del dropped
    index.set("j1", 20, {"n0": (1,)})
    by_job, on_node = kept
    assert by_job.get("j1") is None and on_node["n0"] == frozenset({"j0"})
    assert index.journals_alive() == 2  # by job and by node, of the picture kept
    del kept, by_job, on_node
    index.discard("j0")
    assert index.journals_alive() == 0
