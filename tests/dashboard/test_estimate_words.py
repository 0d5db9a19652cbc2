"""How the dashboard introduces an estimate: only a bound reads "at the latest"."""

from __future__ import annotations

import pytest

from dashboard.templatetags.dashboard import estimate_lead, estimate_words
from scheduler_app.core.records import ESTIMATE_KIND_SENTENCES, UPPER_BOUND_KINDS


@pytest.mark.parametrize(
    ("kind", "lead"),
    [
        ("reserved", "Starts at the latest"),
        ("reclaim", "Starts at the latest"),
        # a borrower's reservation: a guarantee may take its GPUs first (issue 15, rule 2)
        ("borrowed", "Planned to start"),
        ("quota", "Can start"),
        ("projected", "Expected to start"),
    ],
)
def test_each_kind_is_introduced_by_what_it_promises(kind: str, lead: str) -> None:
    assert estimate_lead(kind) == lead
    assert ("at the latest" in lead) == (kind in UPPER_BOUND_KINDS)
    assert estimate_words(kind).rstrip(".") == (
        ESTIMATE_KIND_SENTENCES[kind][0].upper() + ESTIMATE_KIND_SENTENCES[kind][1:])
