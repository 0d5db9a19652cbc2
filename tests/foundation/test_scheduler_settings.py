"""The scheduler's policy settings in production: SCHEDULER_<NAME> for every scenario
setting, refused when malformed or unknown, read by the leader, the agents' protocol and
the operator page."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_app import scheduler_config as sc
from scheduler_app.core.types import SETTINGS, SchedulerConfig
from tests.foundation.test_settings import run_django

REPO = Path(__file__).resolve().parents[2]


def test_every_core_setting_but_the_policy_has_a_variable() -> None:
    sc.check_table()
    assert {sc.env_name(s) for s in SETTINGS} >= {
        "SCHEDULER_GRACE_PERIOD_S", "SCHEDULER_MAX_GRACE_PERIOD_S",
        "SCHEDULER_MAX_PREEMPTIONS_PER_JOB_PER_DAY", "SCHEDULER_RETRY_BUDGET",
        "SCHEDULER_USAGE_HALF_LIFE_S", "SCHEDULER_INTERACTIVE_RESERVED_GPUS",
        "SCHEDULER_TICK_INTERVAL_S", "SCHEDULER_TICK_BUDGET_S", "SCHEDULER_RESERVATION_DEPTH",
        "SCHEDULER_ESTIMATE_LOOKAHEAD", "SCHEDULER_ESTIMATE_PLANS_PER_TICK",
    }


def test_the_environment_sets_them_and_the_rest_keep_the_defaults() -> None:
    got = sc.from_environ({"SCHEDULER_MAX_GRACE_PERIOD_S": "300",
                           "SCHEDULER_INTERACTIVE_RESERVED_GPUS": " 16 ",
                           "SCHEDULER_TICK_BUDGET_S": "1.5",
                           "SCHEDULER_TICK_WORK_BUDGET": "none",
                           "SCHEDULER_LEASE_TTL_S": "20",  # the leader's, not the core's
                           "PATH": "/bin"})
    assert got == {"max_grace_period_s": 300, "interactive_reserved_gpus": 16,
                   "tick_budget_s": 1.5, "tick_work_budget": None}
    config = sc.scheduler_config(got)
    assert config.max_grace_period_s == 300 and config.grace_period_s == 120
    assert config.policy == "full"


@pytest.mark.parametrize("environ, message", [
    ({"SCHEDULER_GRACE_PERIOD_S": "two minutes"},
     "SCHEDULER_GRACE_PERIOD_S: must be a whole number, 0 or more (got 'two minutes')"),
    ({"SCHEDULER_MAX_GRACE_PERIOD_S": "-1"},
     "SCHEDULER_MAX_GRACE_PERIOD_S: must be a whole number, 0 or more (got '-1')"),
    ({"SCHEDULER_RETRY_BUDGET": "1.5"},
     "SCHEDULER_RETRY_BUDGET: must be a whole number, 0 or more (got '1.5')"),
    ({"SCHEDULER_TICK_INTERVAL_S": "0"},
     "SCHEDULER_TICK_INTERVAL_S: must be a whole number, 1 or more (got '0')"),
    ({"SCHEDULER_MAX_GRACE_PERIOD": "600"},
     "SCHEDULER_MAX_GRACE_PERIOD: not a scheduler setting; did you mean "
     "SCHEDULER_MAX_GRACE_PERIOD_S?"),
    ({"SCHEDULER_POLICY": "fifo"}, "SCHEDULER_POLICY: not a scheduler setting"),
    # not a number a comparison can bound (NaN passes every "< minimum" test), or past
    # what the arithmetic it feeds can hold
    ({"SCHEDULER_QUEUE_STRETCH": "nan"},
     "SCHEDULER_QUEUE_STRETCH: must be a finite number (got 'nan')"),
    ({"SCHEDULER_TICK_BUDGET_S": "inf"},
     "SCHEDULER_TICK_BUDGET_S: must be a finite number (got 'inf')"),
    ({"SCHEDULER_QUEUE_STRETCH": "1e308"},
     "SCHEDULER_QUEUE_STRETCH: must be at most 1000 (got '1e308')"),
    ({"SCHEDULER_TICK_INTERVAL_S": "1000000000000"},
     "SCHEDULER_TICK_INTERVAL_S: must be at most 315360000 (got '1000000000000')"),
    # Python's int() and float() read these; the quotas and node counts refuse them
    # (an operator's session, 2026-12-07)
    ({"SCHEDULER_GRACE_PERIOD_S": "\uff13\uff10\uff10"},
     "SCHEDULER_GRACE_PERIOD_S: must be a whole number in ASCII digits, 0 or more"),
    ({"SCHEDULER_QUEUE_STRETCH": "\u0661"},
     "SCHEDULER_QUEUE_STRETCH: must be a number in ASCII digits"),
    ({"SCHEDULER_RETRY_BUDGET": "1_000"},
     "SCHEDULER_RETRY_BUDGET: must be a whole number in ASCII digits"),
])
def test_a_bad_or_unknown_setting_is_refused_naming_the_variable(environ, message) -> None:
    with pytest.raises(ValueError) as err:
        sc.from_environ(environ)
    assert str(err.value).startswith(message)


def test_a_process_with_a_mistyped_setting_does_not_start() -> None:
    result = run_django({"SCHEDULER_RESERVATION_DEPT": "4"}, "")
    assert result.returncode != 0
    assert ("SCHEDULER_RESERVATION_DEPT: not a scheduler setting; did you mean "
            "SCHEDULER_RESERVATION_DEPTH?") in result.stderr


def test_a_process_reads_its_settings_into_the_leaders_config() -> None:
    result = run_django(
        {"SCHEDULER_MAX_GRACE_PERIOD_S": "45", "SCHEDULER_INTERACTIVE_RESERVED_GPUS": "8"},
        "from scheduler_app.services.leader import LeaderLoop; "
        "c = LeaderLoop(holder='x', ttl_s=15).config; "
        "print(c.max_grace_period_s, c.interactive_reserved_gpus, c.grace_period_s)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["45", "8", "120"]


@pytest.mark.django_db
def test_the_agents_kill_deadline_is_the_capped_grace(settings) -> None:
    """A job declaring a year to checkpoint is killed at the operator's cap, as the core
    plans it: the agent's deadline and the core's grace timer are the same number."""
    from scheduler_app.core.scheduler import capped_grace
    from scheduler_app.selectors.agents import grace_s

    settings.SCHEDULER_CONFIG = {"max_grace_period_s": 90}
    assert grace_s(31_000_000) == 90 == capped_grace(31_000_000, sc.scheduler_config())
    assert grace_s(None) == 90  # the default 120 is past the cap too
    assert grace_s(30) == 30
    settings.SCHEDULER_CONFIG = {}
    assert grace_s(None) == SchedulerConfig().grace_period_s == 120
    assert timedelta(seconds=grace_s(31_000_000)) == timedelta(minutes=10)


def test_the_readme_lists_every_setting() -> None:
    readme = (REPO / "README.md").read_text()
    missing = [sc.env_name(s) for s in SETTINGS if f"`{sc.env_name(s)}`" not in readme]
    assert missing == []


def test_a_leaders_published_settings_read_back_as_its_config() -> None:
    # what a leader publishes with its lease, for a what-if to play the live state with
    config = SchedulerConfig(grace_period_s=300, tick_budget_s=1.5, tick_work_budget=None)
    published = sc.published_settings(config)
    assert sc.from_published(published) == config
    # a newer leader's setting this version does not know is left out; a bad value is
    # refused naming it
    assert sc.from_published({**published, "new_knob": 3}) == config
    with pytest.raises(ValueError, match="grace_period_s: must be a whole number"):
        sc.from_published({**published, "grace_period_s": "soon"})
