"""The dataclasses whose ``__init__`` is written out for the compiled core
(``types.written_init``): the written one must take exactly the fields, with their
defaults, in their order, or the compiled core would build other objects than the
sources do. In the sources a frozen class stays frozen."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from scheduler_app.core import capacity, preemption, records, reservation, tick, types
from scheduler_app.core.types import WRITTEN_INITS, written_init

EXPECTED = {capacity.NodeState, preemption.TenantLoad, preemption.VictimCost,
            records.StartEstimate, reservation.Release, tick.Booked,
            reservation.Reservation, tick.KeptLine, records.TickResult, types.Decision}


def _written(cls: type) -> Any:
    init = cls.__init__  # type: ignore[misc]
    return getattr(init, "__wrapped__", init)


def test_the_written_inits_are_those_of_the_hot_classes() -> None:
    assert set(WRITTEN_INITS) >= EXPECTED
    assert not types.COMPILED  # the suite runs the sources (tests/core_mode.py)


@pytest.mark.parametrize("cls", sorted(EXPECTED, key=lambda c: c.__qualname__),
                         ids=lambda c: c.__qualname__)
def test_a_written_init_takes_exactly_the_fields(cls: type) -> None:
    params = list(inspect.signature(_written(cls)).parameters.values())[1:]  # (self)
    wanted = [f for f in dataclasses.fields(cls) if f.init]
    assert [p.name for p in params] == [f.name for f in wanted]
    for p, f in zip(params, wanted, strict=True):
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = None  # stands for a new default_factory() (checked below)
        assert p.default == default, f.name
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, f.name


@pytest.mark.parametrize("cls", sorted(EXPECTED, key=lambda c: c.__qualname__),
                         ids=lambda c: c.__qualname__)
def test_what_a_written_init_leaves_out_is_the_dataclass_default(cls: type) -> None:
    """A field left out (or init=False) gets its default, and a default_factory's value
    is a new one for each object, as ``@dataclass``'s own ``__init__`` makes it."""
    required = _sample(cls)  # the fields without a default
    one, two = cls(**required), cls(**required)
    for f in dataclasses.fields(cls):
        if f.name in required:
            continue
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            assert getattr(one, f.name) == f.default_factory(), f.name  # type: ignore[misc]
            if isinstance(getattr(one, f.name), (dict, list, set)):
                assert getattr(one, f.name) is not getattr(two, f.name), f.name
        else:
            assert getattr(one, f.name) == f.default, f.name


def _sample(cls: type) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        if (f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING):  # type: ignore[misc]
            continue  # keeps its default
        values[f.name] = {"alloc": {"n0": (0, 1)}, "health": types.NodeHealth.HEALTHY,
                          "res": None}.get(f.name, i + 1 if "str" not in str(f.type) else f"v{i}")
    return values


@pytest.mark.parametrize("cls", sorted(EXPECTED, key=lambda c: c.__qualname__),
                         ids=lambda c: c.__qualname__)
def test_an_object_built_by_position_is_the_one_built_by_name(cls: type) -> None:
    values = _sample(cls)
    by_name = cls(**values)
    by_position = cls(*values.values())
    assert by_name == by_position
    for f in dataclasses.fields(cls):
        default = (f.default if f.default_factory is dataclasses.MISSING  # type: ignore[misc]
                   else f.default_factory())  # type: ignore[misc]
        expected = values.get(f.name, default)
        assert getattr(by_name, f.name) == expected, f.name
    if cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        field_name = dataclasses.fields(cls)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(by_name, field_name, "changed")


def test_a_written_init_that_forgets_a_field_fails_in_the_sources() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Forgetful:
        a: int
        b: int

        def __init__(self, a: int, b: int) -> None:
            self.a = a  # type: ignore[misc]

    try:
        written_init(Forgetful)
        with pytest.raises(AttributeError):
            Forgetful(1, 2)
    finally:
        WRITTEN_INITS.remove(Forgetful)
