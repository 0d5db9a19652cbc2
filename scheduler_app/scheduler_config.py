"""The scheduler's policy settings in production: ``SCHEDULER_<NAME>`` environment
variables, one for every scenario setting (``core.types.SETTINGS``).

No Django import at module level: ``settings.py`` reads the environment with
:func:`from_environ` at start-up (a bad value or an unknown ``SCHEDULER_`` variable stops
the process with a message naming the variable), and the leader, the services and the
dashboard read the result through :func:`scheduler_config`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from scheduler_app.core.types import SETTINGS, SchedulerConfig, Setting

PREFIX = "SCHEDULER_"
#: SCHEDULER_ variables that are not policy settings (the leader's process, not the core)
OTHER_VARIABLES = frozenset({
    "SCHEDULER_LEASE_TTL_S", "SCHEDULER_HEARTBEAT_TIMEOUT_S", "SCHEDULER_METRICS_PORT",
})


def env_name(setting: Setting) -> str:
    return PREFIX + setting.name.upper()


def from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings given in ``environ``, parsed and range-checked (the others keep the
    core's defaults). Raises ValueError naming the variable: a value that is not a number,
    is below its minimum, or a ``SCHEDULER_`` variable nobody reads (a typo would otherwise
    leave the default in force without a word)."""
    known = {env_name(s): s for s in SETTINGS}
    out: dict[str, Any] = {}
    for var in sorted(environ):
        if not var.startswith(PREFIX) or var in OTHER_VARIABLES:
            continue
        setting = known.get(var)
        if setting is None:
            close = difflib.get_close_matches(var, [*known, *OTHER_VARIABLES], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"{var}: not a scheduler setting{hint}")
        out[setting.name] = parse(setting, environ[var], var)
    return out


def parse(setting: Setting, raw: str, where: str) -> Any:
    text = raw.strip()
    if setting.optional and text in ("", "none", "None"):
        return None
    kind = "a number" if setting.is_float else "a whole number"
    if not text.isascii() or "_" in text:
        # Python's int() and float() read "３００", "١" and "1_000": the quotas and node
        # counts refuse them, and so does a setting (an operator's session, 2026-12-07)
        raise ValueError(f"{where}: must be {kind} in ASCII digits, {setting.minimum:g} or "
                         f"more (got {raw!r})")
    try:
        value: float = float(text) if setting.is_float else int(text)
    except ValueError:
        raise ValueError(f"{where}: must be {kind}, {setting.minimum:g} or more "
                         f"(got {raw!r})") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: must be a finite number (got {raw!r})")
    if value < setting.minimum:
        raise ValueError(f"{where}: must be {kind}, {setting.minimum:g} or more (got {raw!r})")
    if value > setting.maximum:
        most = f"{setting.maximum:g}" if setting.is_float else f"{int(setting.maximum)}"
        raise ValueError(f"{where}: must be at most {most} (got {raw!r})")
    return value


def scheduler_config(values: Mapping[str, Any] | None = None) -> SchedulerConfig:
    """The production config: the core's defaults with the operator's settings (default:
    Django's ``settings.SCHEDULER_CONFIG``)."""
    if values is None:
        from django.conf import settings

        values = getattr(settings, "SCHEDULER_CONFIG", {})
    return SchedulerConfig(**values)


def published_settings(config: SchedulerConfig) -> dict[str, Any]:
    """Every setting's value in force (JSON): what a leader publishes with its lease."""
    return {s.name: getattr(config, s.name) for s in SETTINGS}


def from_published(values: Mapping[str, Any]) -> SchedulerConfig:
    """The config a leader published (:func:`published_settings`): the settings this
    version knows, each checked as the environment's are (ValueError naming it); one it
    does not know (a newer leader's) is left out."""
    known = {s.name: s for s in SETTINGS}
    out: dict[str, Any] = {}
    for name, value in values.items():
        setting = known.get(name)
        if setting is None:
            continue
        out[name] = None if value is None else parse(setting, str(value), name)
    return SchedulerConfig(**out)


def rows(config: SchedulerConfig | None = None) -> list[dict[str, Any]]:
    """Every setting with its value in force, variable and meaning (the operator page)."""
    config = config or scheduler_config()
    return [{"name": s.name, "value": getattr(config, s.name), "env": env_name(s),
             "meaning": s.meaning} for s in SETTINGS]


def check_table() -> None:
    """Every SchedulerConfig field but the policy has a row (a test calls this)."""
    names = {f.name for f in fields(SchedulerConfig)} - {"policy"}
    assert names == {s.name for s in SETTINGS}, names ^ {s.name for s in SETTINGS}
