"""The queues' sorted list against a plain sorted Python list, on random changes and reads.

A small load makes sublists split and merge within a few dozen entries (the default
splits at 2,000)."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.sortedlist import SortedList

values = st.integers(min_value=0, max_value=60)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), values),
        st.tuples(st.just("discard"), values),
        st.tuples(st.just("remove"), values),
    ),
    max_size=300,
)


def _check_reads(sl: SortedList, ref: list[int], probe: int) -> None:
    assert len(sl) == len(ref) and bool(sl) == bool(ref)
    assert list(sl) == ref
    assert (probe in sl) == (probe in ref)
    assert sl.bisect_left(probe) == bisect.bisect_left(ref, probe)
    for start in (0, len(ref) // 3, len(ref) - 1, len(ref), -2):
        expect = ref[max(0, start + len(ref)) if start < 0 else start:]
        assert list(sl.islice(start)) == expect, start
    for i in (0, len(ref) // 2, len(ref) - 1, -1, -len(ref)):
        if ref:
            assert sl[i] == ref[i]
    for lo_in in (True, False):
        for hi_in in (True, False):
            for hi in (None, probe + 7, probe):
                expect = [v for v in ref
                          if (v >= probe if lo_in else v > probe)
                          and (hi is None or (v <= hi if hi_in else v < hi))]
                assert list(sl.irange(probe, hi, inclusive=(lo_in, hi_in))) == expect


@settings(max_examples=300, deadline=None)
@given(ops=ops, load=st.sampled_from([2, 3, 5, 1000]), probe=values)
def test_the_sorted_list_reads_as_a_sorted_list_after_any_changes(
        ops: list[tuple[str, int]], load: int, probe: int) -> None:
    sl, ref = SortedList(load), []
    for i, (op, v) in enumerate(ops):
        if op == "add":
            sl.add(v)
            bisect.insort(ref, v)
        elif op == "discard":
            assert sl.discard(v) == (v in ref)
            if v in ref:
                ref.remove(v)
        elif v in ref:
            sl.remove(v)
            ref.remove(v)
        else:
            with pytest.raises(ValueError):
                sl.remove(v)
        if i % 25 == 0:
            _check_reads(sl, ref, probe)
    _check_reads(sl, ref, probe)
    # every sublist within its bounds, so that an insertion moves at most 2 x load entries
    assert all(len(sub) <= 2 * max(load, 2) for sub in sl._lists)


def test_an_empty_list_reads_as_empty() -> None:
    sl = SortedList()
    assert len(sl) == 0 and not sl and list(sl) == [] and sl.bisect_left(3) == 0
    assert list(sl.islice(0)) == [] and list(sl.irange(0)) == []
    with pytest.raises(IndexError):
        sl[0]
    with pytest.raises(ValueError):
        sl.remove(1)


def test_a_heap_of_queue_entries_keeps_their_total_order() -> None:
    """Entries as the queues make them: (entry key, version, job id)."""
    sl = SortedList(4)
    entries = [((-p, d, s), v, f"j{v}") for v, (p, d, s) in
               enumerate([(0, 5, 1), (1, 9, 2), (0, 5, 0), (2, 1, 3), (0, 7, 4)] * 5)]
    for e in entries:
        sl.add(e)
    assert list(sl) == sorted(entries)
    assert sl.bisect_left(((0, 5, 1), float("inf"))) == sorted(entries).index(
        next(e for e in sorted(entries) if e[0] > (0, 5, 1)))
