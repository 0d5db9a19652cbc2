"""Heaps per (tenant, size class): order, lazy deletion, positions."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.fairshare import share_key
from scheduler_app.core.queues import FIFO_KEY, JobQueues, entry_key
from scheduler_app.core.types import SIZE_CLASS_LABELS, size_class
from tests.core.builders import job


def _order(q: JobQueues, key: tuple[str, int]) -> list[str]:
    return [j for _ek, j in q.iter_heap(key)]


@pytest.mark.parametrize(
    ("rule", "jobs", "want"),
    [
        (
            "higher priority first",
            [("low", dict(priority=0)), ("high", dict(priority=5))],
            ["high", "low"],
        ),
        (
            "older first at equal priority",
            [("new", dict(submit_s=20)), ("old", dict(submit_s=10))],
            ["old", "new"],
        ),
        (
            "seq breaks a tie of priority and age",
            [("second", dict(seq=2)), ("first", dict(seq=1))],
            ["first", "second"],
        ),
        (
            "priority beats age",
            [("old", dict(submit_s=0)), ("urgent", dict(submit_s=99, priority=1))],
            ["urgent", "old"],
        ),
    ],
)
def test_heap_orders_by_priority_then_age_then_seq(rule: str, jobs: list, want: list) -> None:
    q = JobQueues()
    for i, (name, kw) in enumerate(jobs):
        kw.setdefault("seq", 100 + i)
        q.push(job(name, 4, **kw))
    assert _order(q, ("team-a", 1)) == want, rule


DAY = 86400


@pytest.mark.parametrize(
    ("rule", "stretch", "jobs", "want"),
    [
        (
            "a short job passes a long one submitted a minute before it",
            1.0,
            [("long", dict(submit_s=0, max_runtime_s=2 * DAY)),
             ("short", dict(submit_s=60, max_runtime_s=600))],
            ["short", "long"],
        ),
        (
            "but not one submitted longer ago than the difference of their deadlines",
            1.0,
            [("long", dict(submit_s=0, max_runtime_s=3600)),
             ("short", dict(submit_s=4000, max_runtime_s=60))],
            ["long", "short"],
        ),
        (
            "the stretch scales the limit: at 0.01 two days weigh 1,728 s",
            0.01,
            [("long", dict(submit_s=0, max_runtime_s=2 * DAY)),
             ("short", dict(submit_s=2000, max_runtime_s=600))],
            ["long", "short"],
        ),
        (
            "stretch 0 is submit order",
            0.0,
            [("long", dict(submit_s=0, max_runtime_s=2 * DAY)),
             ("short", dict(submit_s=60, max_runtime_s=60))],
            ["long", "short"],
        ),
        (
            "no declared limit counts as the 7-day cap: declaring none gains nothing",
            1.0,
            [("none", dict(submit_s=0)),
             ("six-days", dict(submit_s=60, max_runtime_s=6 * DAY))],
            ["six-days", "none"],
        ),
        (
            "a limit of a year counts as 7 days: a typo does not park a job for a year",
            1.0,
            [("year", dict(submit_s=0, max_runtime_s=365 * DAY)),
             ("week", dict(submit_s=60, max_runtime_s=7 * DAY))],
            ["year", "week"],
        ),
        (
            "the offset is capped at 7 days whatever the stretch",
            100.0,
            [("two-hours", dict(submit_s=0, max_runtime_s=7200)),  # 720,000 s uncapped
             ("a-second-a-week-later", dict(submit_s=7 * DAY + 5600, max_runtime_s=1))],
            ["two-hours", "a-second-a-week-later"],
        ),
        (
            "priority still comes first",
            1.0,
            [("short", dict(submit_s=0, max_runtime_s=60)),
             ("urgent-long", dict(submit_s=60, max_runtime_s=2 * DAY, priority=1))],
            ["urgent-long", "short"],
        ),
        (
            "the limit counts times the GPUs: 2 GPUs for ten hours (20 GPU-hours) pass 8 "
            "GPUs for three (24) sent a minute before",
            1.0,
            [("eight-for-three-hours", dict(gpus=8, submit_s=0, max_runtime_s=3 * 3600)),
             ("two-for-ten-hours", dict(gpus=2, submit_s=60, max_runtime_s=10 * 3600))],
            ["two-for-ten-hours", "eight-for-three-hours"],
        ),
        (
            "at equal GPU-seconds the earlier submit goes first",
            1.0,
            [("eight-for-one-hour", dict(gpus=8, submit_s=0, max_runtime_s=3600)),
             ("two-for-four-hours", dict(gpus=2, submit_s=1, max_runtime_s=4 * 3600))],
            ["eight-for-one-hour", "two-for-four-hours"],
        ),
        (
            "a gang's offset is capped at 7 days too: 8 GPUs for two days (16 days "
            "uncapped) go before 2 GPUs for 3.4 days sent 6 hours later (7.05 days)",
            1.0,
            [("gang", dict(gpus=8, submit_s=0, max_runtime_s=2 * DAY)),
             ("later", dict(gpus=2, submit_s=DAY // 4, max_runtime_s=int(3.4 * DAY)))],
            ["gang", "later"],
        ),
        (
            "stretch 0 is submit order whatever the GPUs",
            0.0,
            [("gang", dict(gpus=8, submit_s=0, max_runtime_s=2 * DAY)),
             ("small", dict(gpus=2, submit_s=60, max_runtime_s=60))],
            ["gang", "small"],
        ),
    ],
)
def test_heap_orders_by_deadline_within_a_priority(rule: str, stretch: float, jobs: list,
                                                   want: list) -> None:
    """The rows without ``gpus`` are 1-GPU jobs, whose offset is their limit alone."""
    q = JobQueues(stretch=stretch)
    keys = set()
    for name, kw in jobs:
        kw = dict(kw)
        spec = job(name, kw.pop("gpus", 1), **kw)
        keys.add(q.key_of(spec))
        q.push(spec)
    assert len(keys) == 1, "a row's jobs share one heap"
    assert _order(q, keys.pop()) == want, rule


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 50.0), st.lists(st.tuples(
    st.integers(0, 30 * DAY),  # submit time
    st.one_of(st.none(), st.integers(1, 400 * DAY)),  # declared limit, absurd ones included
    st.integers(2, 8),  # GPUs (one heap: the 2-8 class)
), min_size=1, max_size=40))
def test_a_job_is_passed_only_by_jobs_submitted_before_its_deadline(
        stretch: float, jobs: list[tuple[int, int | None, int]]) -> None:
    """Every job reaches its team's head: whatever arrives later with an earlier deadline
    was submitted at most 7 days after it, so the later arrivals that pass it are bounded
    (at one priority: a higher priority goes first by design)."""
    from scheduler_app.core.queues import MAX_DEADLINE_OFFSET_S, deadline_s

    q = JobQueues(stretch=stretch)
    specs = [job(f"j{i}", gpus, submit_s=at, max_runtime_s=limit)
             for i, (at, limit, gpus) in enumerate(jobs)]
    for spec in specs:
        q.push(spec)
    order = _order(q, ("team-a", 1))
    by_id = {spec.id: spec for spec in specs}
    for place, job_id in enumerate(order):
        me = by_id[job_id]
        assert me.submit_s <= deadline_s(me, stretch) <= me.submit_s + MAX_DEADLINE_OFFSET_S
        for ahead in order[:place]:
            assert by_id[ahead].submit_s <= deadline_s(me, stretch), (ahead, job_id)


@pytest.mark.parametrize(("rule", "limit", "gpus", "stretch", "offset"), [
    ("a 1-GPU job's offset is its limit", 3600, 1, 1.0, 3600),
    ("the GPUs multiply it", 3600, 8, 1.0, 8 * 3600),
    ("the stretch scales it", 3600, 8, 0.5, 4 * 3600),
    ("a million GPUs and no limit: 7 days", None, 1_000_000, 1.0, 7 * DAY),
    ("a year's limit on 2,048 GPUs at stretch 50: 7 days", 365 * DAY, 2048, 50.0, 7 * DAY),
    ("a column that says 0 GPUs counts as 1, never as no offset", 600, 0, 1.0, 600),
    ("stretch 0: the submit time whatever is declared", 365 * DAY, 2048, 0.0, 0),
])
def test_the_deadline_offset_is_gpu_seconds_and_bounded(
        rule: str, limit: int | None, gpus: int, stretch: float, offset: int) -> None:
    from scheduler_app.core.queues import deadline_of

    assert deadline_of(1000, limit, gpus, stretch) == 1000 + offset, rule


def test_fifo_ignores_the_stretch() -> None:
    q = JobQueues(fifo=True, stretch=1.0)
    q.push(job("long", 4, submit_s=0, max_runtime_s=2 * DAY))
    q.push(job("short", 4, submit_s=60, max_runtime_s=60))
    assert _order(q, FIFO_KEY) == ["long", "short"]


def test_jobs_are_keyed_by_tenant_and_size_class() -> None:
    q = JobQueues()
    for name, gpus, tenant in [("a1", 1, "a"), ("a8", 8, "a"), ("a64", 64, "a"),
                               ("a512", 512, "a"), ("a513", 513, "a"), ("b1", 1, "b")]:
        q.push(job(name, gpus, tenant=tenant))
    assert q.heap_keys() == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 0)]
    assert q.tenant_count("a") == 5 and q.tenant_count("b") == 1


@pytest.mark.parametrize("gpus, label", [
    (1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-64"), (64, "9-64"), (65, "65-512"),
    (512, "65-512"), (513, "513+"), (4096, "513+"),
])
def test_size_classes_are_bounded_on_both_sides(gpus: int, label: str) -> None:
    assert SIZE_CLASS_LABELS[size_class(gpus)] == label


def test_removed_jobs_are_skipped_and_may_come_back() -> None:
    q = JobQueues()
    for i in range(5):
        q.push(job(f"j{i}", 2, seq=i))
    assert q.remove("j0") and q.remove("j3")
    assert not q.remove("j3")  # already gone
    assert _order(q, ("team-a", 1)) == ["j1", "j2", "j4"]
    q.push(job("j0", 2, seq=0))  # requeued: back at its rank, the stale entry stays dead
    assert _order(q, ("team-a", 1)) == ["j0", "j1", "j2", "j4"]
    assert len(q) == 4 and q.count(("team-a", 1)) == 4


def test_removals_keep_the_order_and_leave_no_entry_behind() -> None:
    q = JobQueues()
    rng = random.Random(7)
    specs = [job(f"j{i}", 1, seq=i, priority=rng.randint(0, 3), submit_s=rng.randint(0, 50))
             for i in range(400)]
    for s in specs:
        q.push(s)
    for s in specs:
        if s.seq % 4:
            q.remove(s.id)
    left = sorted(specs[::4], key=entry_key)
    assert _order(q, ("team-a", 0)) == [s.id for s in left]
    assert len(q._heaps[("team-a", 0)]) == len(left)  # the leavers' entries taken out


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans()), min_size=1,
                max_size=60))
def test_a_job_that_leaves_takes_its_entry_out_but_during_a_walk(ops) -> None:
    """Outside a walk a heap holds its queued jobs' entries only, in order; a job that
    leaves while the heaps are held leaves its entry (dead, stepped over) until the walk
    ends, so that the sorted list never changes under an iterator."""
    q = JobQueues()
    for i, (prio, _gone, _during) in enumerate(ops):
        q.push(job(f"j{i}", 1, seq=i, priority=prio))
    key = ("team-a", 0)
    for i, (_prio, gone, during) in enumerate(ops):
        if gone and not during:
            q.remove(f"j{i}")
    walked = [j for _ek, j in q.iter_heap(key)]
    assert all(q._is_live(e) for e in q._heaps[key])
    assert walked == [e[2] for e in q._heaps[key]] and q.count(key) == len(walked)
    late = [f"j{i}" for i, (_p, gone, during) in enumerate(ops) if gone and during]
    with q.hold():
        it = q.iter_heap(key)
        first = next(it, None)
        for job_id in late:
            q.remove(job_id)
        assert len(q._heaps[key]) == len(walked)  # still there, dead
        rest = [j for _ek, j in it]
        assert first is None or first[1] == walked[0]
        assert rest == [j for j in walked[1:] if j not in late]  # the dead ones stepped over
    assert [e[2] for e in q._heaps[key]] == [j for j in walked if j not in late]


def test_walking_a_heap_does_not_change_it() -> None:
    q = JobQueues()
    for i in range(20):
        q.push(job(f"j{i}", 1, seq=20 - i))
    before = list(q._heaps[("team-a", 0)])
    assert _order(q, ("team-a", 0)) == [f"j{i}" for i in range(19, -1, -1)]
    assert list(q._heaps[("team-a", 0)]) == before


def test_pushes_wait_while_heaps_are_held() -> None:
    q = JobQueues()
    q.push(job("a", 1, seq=1))
    with q.hold():
        q.push(job("b", 1, seq=2))
        assert "b" not in q and _order(q, ("team-a", 0)) == ["a"]
    assert _order(q, ("team-a", 0)) == ["a", "b"]


def test_position_in_tenant_counts_all_its_size_classes() -> None:
    q = JobQueues()
    q.push(job("big", 64, priority=5, seq=1))
    q.push(job("small", 1, priority=1, seq=2))
    q.push(job("mid", 8, priority=3, seq=3))
    q.push(job("other", 1, tenant="team-b", priority=9, seq=4))
    assert [q.position_in_tenant(j) for j in ("big", "mid", "small", "other")] == [1, 2, 3, 1]
    assert [j for _e, j in q.iter_tenant("team-a")] == ["big", "mid", "small"]


def test_cluster_rank_puts_lower_share_tenants_first() -> None:
    q = JobQueues()
    q.push(job("a1", 1, tenant="a", seq=1))
    q.push(job("a2", 1, tenant="a", seq=2))
    q.push(job("b1", 1, tenant="b", seq=3))
    shares = {"a": share_key(100.0, 10), "b": share_key(0.0, 10)}
    rank = [q.cluster_rank(j, shares, lambda: ["a", "b"]) for j in ("b1", "a1", "a2")]
    assert rank == [1, 2, 3]
    # equal shares: interleaved by the jobs' own order
    q.push(job("b0", 1, tenant="b", seq=0))
    even = {"a": share_key(0.0, 10), "b": share_key(0.0, 10)}
    order = sorted(["a1", "a2", "b0", "b1"],
                   key=lambda j: q.cluster_rank(j, even, lambda: ["a", "b"]))
    assert order == ["b0", "a1", "a2", "b1"]


def test_fifo_mode_is_one_queue_in_submit_order() -> None:
    q = JobQueues(fifo=True)
    q.push(job("late-urgent", 64, submit_s=10, priority=9, seq=1))
    q.push(job("early", 1, tenant="team-b", submit_s=0, seq=2))
    assert q.heap_keys() == [FIFO_KEY]
    assert _order(q, FIFO_KEY) == ["early", "late-urgent"]
    assert q.position_in_tenant("late-urgent") == 1
    assert q.cluster_rank("late-urgent", {}, lambda: []) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.booleans()), max_size=60))
def test_walk_equals_sorted_live_jobs(ops: list[tuple[int, int, bool]]) -> None:
    """Whatever the pushes and removals, a walk yields the live jobs in sorted order."""
    q = JobQueues()
    live = {}
    for i, (prio, submit, drop) in enumerate(ops):
        spec = job(f"j{i}", 1, seq=i, priority=prio, submit_s=submit)
        q.push(spec)
        live[spec.id] = spec
        if drop and live:
            victim = sorted(live)[i % len(live)]
            q.remove(victim)
            del live[victim]
    want = [s.id for s in sorted(live.values(), key=entry_key)]
    assert _order(q, ("team-a", 0)) == want
    assert len(q) == len(live)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.booleans()), min_size=1,
                max_size=60), st.integers(0, 59))
def test_a_walk_after_an_entry_yields_the_live_jobs_past_it_in_order(ops, cut) -> None:
    """What a resumed pass walks (iter_heap's ``after``): exactly the live entries whose
    key is past the given one, in order, whatever the pushes and removals (stale entries
    before and after it included)."""
    q = JobQueues()
    specs = []
    for i, (prio, submit, drop) in enumerate(ops):
        spec = job(f"j{i}", 1, seq=i, priority=prio, submit_s=submit)
        q.push(spec)
        specs.append(spec)
        if drop:
            q.remove(specs[i // 2].id)
    key = ("team-a", 0)
    after = entry_key(specs[cut % len(specs)])
    full = list(q.iter_heap(key))
    assert list(q.iter_heap(key, after)) == [e for e in full if e[0] > after]


def test_a_walk_after_a_requeued_job_skips_both_of_its_entries() -> None:
    """A job that left and came back has two entries of the same key (the stale one and
    the live one, by version): a walk after that key yields neither, a walk from the head
    yields the job once, in its place."""
    q = JobQueues()
    specs = [job(f"j{i}", 1, seq=i) for i in range(6)]
    for spec in specs:
        q.push(spec)
    q.remove("j2")
    q.push(specs[2])  # requeued: same entry key, a new version
    key = ("team-a", 0)
    assert [j for _ek, j in q.iter_heap(key)] == ["j0", "j1", "j2", "j3", "j4", "j5"]
    assert [j for _ek, j in q.iter_heap(key, entry_key(specs[2]))] == ["j3", "j4", "j5"]
    assert [j for _ek, j in q.iter_heap(key, entry_key(specs[1]))] == ["j2", "j3", "j4", "j5"]
    assert [e[2] for e in q._heaps[key]] == ["j0", "j1", "j2", "j3", "j4", "j5"]  # no dead


@settings(max_examples=200, deadline=None)
@given(
    jobs=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(("keep", "settle", "leave",
                                                                "leave-during"))),
                  min_size=1, max_size=40),
    stop=st.integers(0, 39),
    n=st.sampled_from((0, 1, 3, 10, 10**9)),
    asked_twice=st.booleans(),
)
def test_unsettled_behind_answers_as_a_walk_of_the_stretch(jobs, stop, n, asked_twice) -> None:
    """The jobs ``unsettled_behind`` names are those a walk of the ``n`` queued jobs behind
    the stop finds unsettled, in order, whatever left before or during the walk, for any
    look-ahead an operator may set (0 and an absurd one included), and asked again after
    it forgot the settled ones."""
    q = JobQueues()
    for i, (prio, _fate) in enumerate(jobs):
        q.push(job(f"j{i}", 1, seq=i, priority=prio))
    settled = {f"j{i}" for i, (_p, fate) in enumerate(jobs) if fate == "settle"}
    for i, (_p, fate) in enumerate(jobs):
        if fate == "leave":
            q.remove(f"j{i}")
    key = ("team-a", 0)
    with q.hold():
        for i, (_p, fate) in enumerate(jobs):
            if fate == "leave-during":
                q.remove(f"j{i}")
        queued = [j for _ek, j in q.iter_heap(key)]
        stop_id = f"j{stop}"
        if stop_id not in queued:
            assert q.unsettled_behind(stop_id, n, settled.__contains__) is None
            return
        behind = queued[queued.index(stop_id) + 1:][:n]
        want = [j for j in behind if j not in settled]
        for _round in range(2 if asked_twice else 1):
            assert q.unsettled_behind(stop_id, n, settled.__contains__) == want
