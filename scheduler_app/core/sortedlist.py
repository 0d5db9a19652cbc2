"""A sorted list of a queue's entries, compiled with the rest of the core.

The queues (``queues.py``) keep each heap as a sorted list: walked in order by plain
iteration, a resumed walk's place found by bisection. ``sortedcontainers.SortedList``
did this in pure Python, and its methods were about 7 % of the 100,000-job busy day
(a push adds two entries, a walk starts with a bisection, ``unsettled_behind`` bisects
and reads ranges at every tick). This is the part of its interface the queues use (and a
membership test), on the same layout: sublists of at most ``2 * LOAD`` entries and the
largest entry of each, so an insertion moves at most ``2 * LOAD`` references however
long the heap (a fifo heap holds every queued job: a million on the largest what-if).

Positions (``bisect_left``, ``islice``, ``[i]``) count from the whole list's start: the
sublists' starting offsets are summed again after a change, when a position is next read
(O(sublists): a thousandth of the entries).

As with any list, the list must not change while one of its iterators is in use (the
queues hold back pushes and removals while a tick walks them).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Any

#: a sublist is split when it passes twice this, and merged into a neighbour below half
LOAD = 1000


class SortedList:
    """Entries kept in ascending order (any values that compare with each other)."""

    def __init__(self, load: int = LOAD) -> None:
        self._load = max(load, 2)  # (tests split and merge small lists with a small one)
        self._lists: list[list[Any]] = []
        self._maxes: list[Any] = []  # the last (largest) entry of each sublist
        self._len = 0
        #: the position of each sublist's first entry; empty when stale (after a change)
        self._offsets: list[int] = []

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Any]:
        for sub in self._lists:
            yield from sub

    def __contains__(self, value: Any) -> bool:
        return self._find(value) is not None

    def _find(self, value: Any) -> tuple[int, int] | None:
        """(sublist, index in it) of an entry equal to ``value``; None if there is none."""
        pos = bisect_left(self._maxes, value)
        if pos == len(self._maxes):
            return None
        sub = self._lists[pos]
        i = bisect_left(sub, value)
        return (pos, i) if i < len(sub) and sub[i] == value else None

    # -- changes --------------------------------------------------------------------------
    def add(self, value: Any) -> None:
        lists, maxes = self._lists, self._maxes
        self._len += 1
        self._offsets = []
        if not maxes:
            lists.append([value])
            maxes.append(value)
            return
        pos = bisect_right(maxes, value)
        if pos == len(maxes):  # past every entry: the last sublist grows at its end
            pos -= 1
            lists[pos].append(value)
            maxes[pos] = value
        else:
            insort(lists[pos], value)
        if len(lists[pos]) > 2 * self._load:
            self._split(pos, self._load)

    def _split(self, pos: int, at: int) -> None:
        """Sublist ``pos`` keeps its first ``at`` entries; the rest become the next one."""
        sub = self._lists[pos]
        half = sub[at:]
        del sub[at:]
        self._maxes[pos] = sub[-1]
        self._lists.insert(pos + 1, half)
        self._maxes.insert(pos + 1, half[-1])

    def discard(self, value: Any) -> bool:
        """Take ``value`` out; False if it is not in the list."""
        found = self._find(value)
        if found is None:
            return False
        pos, i = found
        lists, maxes = self._lists, self._maxes
        sub = lists[pos]
        del sub[i]
        self._len -= 1
        self._offsets = []
        if not sub:
            del lists[pos]
            del maxes[pos]
            return True
        maxes[pos] = sub[-1]
        if len(sub) < self._load // 2 and len(lists) > 1:
            # merged into a neighbour, so that the sublists stay few (positions sum them)
            left = pos - 1 if pos > 0 else pos
            merged = lists[left] + lists[left + 1]
            del lists[left + 1]
            del maxes[left + 1]
            lists[left] = merged
            maxes[left] = merged[-1]
            if len(merged) > 2 * self._load:
                self._split(left, len(merged) // 2)
        return True

    def remove(self, value: Any) -> None:
        if not self.discard(value):
            raise ValueError(f"{value!r} not in list")

    # -- positions ------------------------------------------------------------------------
    def _starts(self) -> list[int]:
        offsets = self._offsets
        if not offsets and self._lists:
            total = 0
            for sub in self._lists:
                offsets.append(total)
                total += len(sub)
        return offsets

    def bisect_left(self, value: Any) -> int:
        """The position ``value`` would take, before any equal entry."""
        maxes = self._maxes
        pos = bisect_left(maxes, value)
        if pos == len(maxes):
            return self._len
        return self._starts()[pos] + bisect_left(self._lists[pos], value)

    def _locate(self, index: int) -> tuple[int, int]:
        """(sublist, index in it) of position ``index`` (0 <= index < len)."""
        starts = self._starts()
        pos = bisect_right(starts, index) - 1
        return pos, index - starts[pos]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("list index out of range")
        if index == self._len - 1:
            return self._maxes[-1]
        pos, i = self._locate(index)
        return self._lists[pos][i]

    def islice(self, start: int) -> Iterator[Any]:
        """The entries from position ``start`` on, in order."""
        if start < 0:
            start = max(0, start + self._len)
        if start >= self._len:
            return
        pos, i = self._locate(start)
        lists = self._lists
        sub = lists[pos]
        while i < len(sub):
            yield sub[i]
            i += 1
        for nxt in range(pos + 1, len(lists)):
            yield from lists[nxt]

    def irange(self, minimum: Any, maximum: Any = None,
               inclusive: tuple[bool, bool] = (True, True)) -> Iterator[Any]:
        """The entries between ``minimum`` and ``maximum`` (None: no bound above), in
        order; ``inclusive`` says whether each bound itself is in the range."""
        lists, maxes = self._lists, self._maxes
        lo_in, hi_in = inclusive
        pos = bisect_left(maxes, minimum) if lo_in else bisect_right(maxes, minimum)
        if pos == len(maxes):
            return
        sub = lists[pos]
        i = bisect_left(sub, minimum) if lo_in else bisect_right(sub, minimum)
        while pos < len(lists):
            sub = lists[pos]
            while i < len(sub):
                value = sub[i]
                if maximum is not None and (value > maximum if hi_in
                                            else not value < maximum):
                    return
                yield value
                i += 1
            pos += 1
            i = 0
