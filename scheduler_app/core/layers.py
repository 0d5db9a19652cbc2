"""A picture's maps as layers over the release index's own, instead of copies.

A tick plans reservations on a picture of the cluster (``tick._Line``): the running jobs'
releases by job and by node, which the picture then changes (a reservation holds GPUs,
a started job holds its own). The index's maps hold thousands of entries, a picture
changes a few dozen, and copying them whole at every new picture was a tenth of a
what-if run (the time goes to reference counts of objects spread over memory).

A :class:`Layer` reads the index's map and keeps its own writes. The index changes while a
picture lives (a job starts within the tick, a round of estimates spans ticks), so each
picture gets a :class:`Journal` from :meth:`Lender.lend`: before the index changes a key
of a map, it saves the key's value as it was into every journal still alive (weakly held:
a picture that is dropped takes its journal with it). A layer reads its own writes first,
then the journal, then the index: the map as it was when lent, with the picture's changes.
"""

from __future__ import annotations

import weakref
from typing import Any

from mypy_extensions import mypyc_attr

#: in a journal: the key was absent when lent; in a layer: the picture deleted it
GONE: Any = object()
_MISS: Any = object()


@mypyc_attr(native_class=False)  # a compiled (native) class cannot be weakly referenced
class Journal:
    """The values a map's keys had when it was lent, for the keys changed since."""

    __slots__ = ("saved", "__weakref__")

    def __init__(self) -> None:
        self.saved: dict[str, Any] = {}


class Lender:
    """A map that lends itself to layers: call :meth:`before_change` before changing a key."""

    __slots__ = ("map", "_journals")

    def __init__(self, base: dict[str, Any]) -> None:
        self.map = base
        self._journals: list[weakref.ref[Journal]] = []

    def lend(self) -> Layer:
        journal = Journal()
        self._journals = [r for r in self._journals if r() is not None]
        self._journals.append(weakref.ref(journal))
        return Layer(self.map, journal)

    def alive(self) -> int:
        """The journals still kept (their pictures not dropped)."""
        return sum(1 for ref in self._journals if ref() is not None)

    def before_change(self, key: str) -> None:
        if not self._journals:
            return
        alive = False
        for ref in self._journals:
            journal = ref()
            if journal is not None:
                alive = True
                saved = journal.saved
                if key not in saved:
                    saved[key] = self.map.get(key, GONE)
        if not alive:
            self._journals = []


class Layer:
    """A map as lent, with this picture's own writes and deletions kept apart."""

    __slots__ = ("base", "journal", "saved", "own")

    def __init__(self, base: dict[str, Any], journal: Journal) -> None:
        self.base = base
        self.journal = journal  # kept alive by the layer: the lender holds it weakly
        self.saved = journal.saved  # (read at every get: the journal's is a slower read)
        self.own: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        value = self.own.get(key, _MISS)
        if value is _MISS:
            value = self.saved.get(key, _MISS)
            if value is _MISS:
                return self.base.get(key, default)
        return default if value is GONE else value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISS)
        if value is _MISS:
            raise KeyError(key)
        return value

    def __contains__(self, key: str) -> bool:
        return self.get(key, _MISS) is not _MISS

    def __setitem__(self, key: str, value: Any) -> None:
        self.own[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self.own[key] = GONE
