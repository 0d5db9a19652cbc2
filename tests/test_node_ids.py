"""Every collected test has a node id of its own: xdist schedules by id."""

from __future__ import annotations

import pytest
from _pytest.nodeid import NodeId

from tests.conftest import _name_each_item


class _Item:
    def __init__(self, name: str, original: str, params: str | None = None) -> None:
        self.name, self.originalname = name, original
        self._id = NodeId(path="tests/api/test_schema.py", names=(original,), params=params)

    @property
    def nodeid(self) -> str:
        return str(self._id)


def test_schemathesis_items_get_the_id_their_name_says() -> None:
    items = [_Item("t[GET /api/v1/jobs/]", "t"), _Item("t[POST /api/v1/jobs/]", "t"),
             _Item("u[1]", "u", params="1"), _Item("v", "v")]
    _name_each_item(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/api/test_schema.py::t[GET /api/v1/jobs/]",
        "tests/api/test_schema.py::t[POST /api/v1/jobs/]",
        "tests/api/test_schema.py::u[1]",
        "tests/api/test_schema.py::v",
    ]


def test_two_items_with_one_id_stop_the_run() -> None:
    with pytest.raises(pytest.UsageError, match="share the node id tests/api/test_schema.py::t"):
        _name_each_item([_Item("t", "t"), _Item("t", "t")])  # type: ignore[list-item]

