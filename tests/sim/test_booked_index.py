"""The tick's index of reservations by node is built when the walk first asks for it
(``Tick._overlaps``), not at every booking: a tick that only keeps its reservations never
reads it. Whatever the order of bookings, lookups and reserved jobs starting, a lookup
must find exactly the reservations a scan of the tick's list finds, in booking order."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.core import tick as tick_module
from scheduler_app.core.capacity import mask_of
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads.synthetic import SyntheticParams, generate


def _scanned(tick: Any, alloc: dict[str, Any]) -> list[Any]:
    return [b for b in tick.reserved
            if any(mask_of(ix) & b.masks.get(n, 0) for n, ix in alloc.items())]


def test_the_lazy_node_index_finds_what_a_scan_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {"lookups": 0, "found": 0, "reserved_started": 0, "indexed_then_booked": 0}
    overlaps = tick_module.Tick._overlaps
    start = tick_module.Tick._start
    book = tick_module.Tick._book

    def checked_overlaps(self: Any, alloc: dict[str, Any]) -> list[Any]:
        got = overlaps(self, alloc)
        assert got == _scanned(self, alloc)
        assert self._booked_indexed == len(self.reserved)
        seen["lookups"] += 1
        seen["found"] += bool(got)
        return got

    def counted_start(self: Any, rec: Any, *args: Any) -> None:
        seen["reserved_started"] += rec.spec.id in self.booked
        start(self, rec, *args)
        assert self._booked_indexed <= len(self.reserved)
        for n, entries in self._booked_on_node.items():
            assert all(b in self.reserved for b in entries), n

    def counted_book(self: Any, *args: Any, **kw: Any) -> None:
        seen["indexed_then_booked"] += self._booked_indexed > 0
        book(self, *args, **kw)

    monkeypatch.setattr(tick_module.Tick, "_overlaps", checked_overlaps)
    monkeypatch.setattr(tick_module.Tick, "_start", counted_start)
    monkeypatch.setattr(tick_module.Tick, "_book", counted_book)
    scenario = validate_scenario(generate(SyntheticParams(jobs=1500, nodes=32, teams=6,
                                                          hours=0.5, seed=3)))
    Simulation(scenario, policy="full", views=False).run()
    # every path was taken: lookups that found reservations, bookings after the index
    # was built, and reserved jobs starting (their bookings leave the index)
    assert seen["lookups"] > 100 and seen["found"] > 10, seen
    assert seen["indexed_then_booked"] > 0 and seen["reserved_started"] > 0, seen
