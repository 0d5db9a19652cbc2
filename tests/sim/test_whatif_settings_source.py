"""Whose settings a what-if runs with, and what it says when no scheduler runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_app.models import Lease
from scheduler_app.selectors.whatif import _scheduler_settings
from scheduler_app.services.lease import LEADER_LEASE

pytestmark = pytest.mark.django_db

_STOPPED = "no scheduler is running (no leader holds the lease)"


def _lease(expires_in_s: int) -> None:
    Lease.objects.create(name=LEADER_LEASE, holder="leader-7",
                         settings={"grace_period_s": 300},
                         expires_at=datetime.now(UTC) + timedelta(seconds=expires_in_s))


def test_a_live_leaders_settings_are_used_with_no_word_of_a_stopped_scheduler() -> None:
    _lease(600)
    config, whose, notes = _scheduler_settings()
    assert config.grace_period_s == 300
    assert whose == "the scheduler's, as its leader leader-7 published them"
    assert not [n for n in notes if n.startswith(_STOPPED)]


def test_a_stopped_scheduler_is_a_warning_not_only_a_word_in_the_settings_line() -> None:
    """The settings line alone said "no leader holds the lease now", and the table read as
    a forecast of a cluster whose queue was not moving (an operator's session,
    2026-12-07)."""
    _lease(-60)
    config, whose, notes = _scheduler_settings()
    assert config.grace_period_s == 300  # the last leader's, still the best guess
    assert whose.endswith("(no leader holds the lease now)")
    assert notes[0] == (f"{_STOPPED}: the live queue does not move until one starts; both "
                        "runs play the cluster forward as a running scheduler would")
