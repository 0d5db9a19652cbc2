"""The leader lease: acquire, renew, expiry, takeover, and the fencing token."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from scheduler_app.services.lease import LeaseLost, lease_acquire, lease_check, lease_release
from tests.foundation.factories import T0

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "test-lease"


def acquire(holder: str, at_s: int, ttl_s: int = 15) -> int | None:
    return lease_acquire(name=NAME, holder=holder, ttl_s=ttl_s, now=T0 + timedelta(seconds=at_s))


def check(holder: str, token: int, at_s: int) -> None:
    with transaction.atomic():
        lease_check(name=NAME, holder=holder, token=token, now=T0 + timedelta(seconds=at_s))


def test_first_holder_gets_token_1_and_renewing_keeps_it():
    assert acquire("a", 0) == 1
    assert acquire("a", 5) == 1
    assert acquire("a", 18) == 1  # renewed at 5: valid until 20


def test_a_live_lease_refuses_another_holder():
    acquire("a", 0)
    assert acquire("b", 14) is None


def test_takeover_after_expiry_increments_the_token():
    acquire("a", 0)
    assert acquire("b", 15) == 2  # expires_at is exclusive: at 15 it is gone
    assert acquire("a", 16) is None
    assert acquire("a", 31) == 3


def test_a_new_term_of_the_same_holder_gets_a_new_token():
    acquire("a", 0)
    assert lease_acquire(name=NAME, holder="a", ttl_s=15, now=T0, new_term=True) == 2
    assert acquire("a", 1) == 2


def test_release_lets_a_standby_take_over_at_once():
    token = acquire("a", 0)
    assert not lease_release(name=NAME, holder="a", token=token + 1)  # wrong token: no-op
    assert acquire("b", 1) is None
    assert lease_release(name=NAME, holder="a", token=token)
    assert acquire("b", 1) == token + 1


@pytest.mark.parametrize(
    ("holder", "token", "at_s", "current"),
    [
        ("a", 1, 10, False),  # superseded by b's takeover
        ("b", 2, 20, True),
        ("b", 2, 31, False),  # expired
        ("c", 2, 20, False),  # never held
        ("b", 1, 20, False),  # right holder, stale token
    ],
)
def test_lease_check_refuses_stale_tokens_and_expired_leases(holder, token, at_s, current):
    acquire("a", 0)
    acquire("b", 16)  # b holds token 2 until 31
    if current:
        check(holder, token, at_s)
    else:
        with pytest.raises(LeaseLost):
            check(holder, token, at_s)


def test_lease_check_must_run_inside_a_transaction():
    acquire("a", 0)
    with pytest.raises(RuntimeError, match="inside the transaction"):
        lease_check(name=NAME, holder="a", token=1, now=T0)


def test_a_holder_publishes_its_settings_when_its_term_starts():
    # what a what-if plays the live state with: the leader's settings, not the asking
    # process's (an operator's session, 2026-12-07)
    from scheduler_app.models import Lease

    def settings() -> dict:
        return Lease.objects.get(name=NAME).settings

    lease_acquire(name=NAME, holder="a", ttl_s=15, now=T0, settings={"grace_period_s": 300})
    assert settings() == {"grace_period_s": 300}
    # a renewal writes nothing more; a standby refused writes nothing
    lease_acquire(name=NAME, holder="a", ttl_s=15, now=T0 + timedelta(seconds=5),
                  settings={"grace_period_s": 1})
    assert lease_acquire(name=NAME, holder="b", ttl_s=15, now=T0 + timedelta(seconds=6),
                         settings={"grace_period_s": 2}) is None
    assert settings() == {"grace_period_s": 300}
    # a new holder's term, or a restarted holder's, publishes its own
    lease_acquire(name=NAME, holder="b", ttl_s=15, now=T0 + timedelta(seconds=30),
                  settings={"grace_period_s": 120})
    assert settings() == {"grace_period_s": 120}
    lease_acquire(name=NAME, holder="b", ttl_s=15, now=T0 + timedelta(seconds=31),
                  new_term=True, settings={"grace_period_s": 60})
    assert settings() == {"grace_period_s": 60}
    # a holder that publishes none (an older build's) leaves no one else's behind
    lease_acquire(name=NAME, holder="c", ttl_s=15, now=T0 + timedelta(seconds=60))
    assert settings() == {}


def test_a_what_if_reads_the_published_settings_and_falls_back_on_ones_it_cannot_read():
    from scheduler_app.models import Lease
    from scheduler_app.selectors.whatif import _scheduler_settings
    from scheduler_app.services.lease import LEADER_LEASE

    config, whose, _notes = _scheduler_settings()
    assert whose.startswith("this process's") and "no scheduler has published" in whose
    Lease.objects.create(name=LEADER_LEASE, holder="old", settings={"grace_period_s": 300})
    config, whose, notes = _scheduler_settings()
    assert config.grace_period_s == 300 and "last leader" in whose  # (no live holder)
    # no live holder: that comes first, then the setting this process reads otherwise
    assert notes[0].startswith("no scheduler is running (no leader holds the lease)")
    assert "grace_period_s" in notes[1]
    for bad in (["grace_period_s", 300], {"grace_period_s": "soon"}):
        Lease.objects.filter(name=LEADER_LEASE).update(settings=bad)
        config, whose, _notes = _scheduler_settings()
        assert whose.startswith("this process's SCHEDULER_* environment (the scheduler's "
                                "published settings could not be read"), whose
        assert config.grace_period_s == 120
