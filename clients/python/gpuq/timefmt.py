"""Durations in and out, and the API's times shown to people.

The API takes durations as integer seconds (``max_runtime_s``). People write ``2h``:
:func:`parse_duration` reads unit forms (``90s``, ``30m``, ``2h``, ``1d12h``,
``1h30m``) and Slurm's colon forms (``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
``D-HH:MM:SS``), with Slurm's bounds: after a day the hours are 0-23, and minutes and
seconds after a colon are 0-59 (``1-25`` was read as 176,400 s). A bare number is refused
where it would be a time limit: Slurm reads ``--time 90`` as minutes and the API reads 90
as seconds, and guessing wrong by 60x is the kind of mistake a scheduler should not make
quietly. Digits are ASCII's only (Python's ``int`` also reads ``١``, Arabic-Indic one).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS = re.compile(r"^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_SLURM = re.compile(r"^(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?$")
_STEPS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


_DIGITS = re.compile(r"[0-9]+")


def parse_duration(text: str, *, bare_seconds: bool = False) -> int:
    """Seconds in ``text``. ``bare_seconds``: a plain number is seconds (for options
    such as ``--timeout``); otherwise it is refused. Raises ValueError saying what is
    accepted."""
    raw = text.strip().lower()
    if (longest := max((len(run) for run in _DIGITS.findall(raw)), default=0)) > 15:
        # int() of more than 4,300 digits raised Python's own message
        raise ValueError(f"not a duration: a number of {longest} digits (a duration is "
                         "at most 366 days)")
    if raw.isascii() and raw.isdigit():
        if bare_seconds:
            return int(raw)
        raise ValueError(f"{text!r} has no unit: Slurm reads a bare number as minutes, the "
                         f"API as seconds; write {raw}m, {raw}s or HH:MM:SS")
    found = _UNITS.match(raw)
    if raw and found and any(found.groups()):
        d, h, m, s = (int(g or 0) for g in found.groups())
        return d * 86400 + h * 3600 + m * 60 + s
    found = _SLURM.match(raw)
    if found and (found.group(1) is not None or found.group(3) is not None):
        days, first, second, third = found.groups()
        if days is not None:  # D-HH[:MM[:SS]]
            h, m, s = int(first), int(second or 0), int(third or 0)
            _in_range(text, "hours after the days", h, 23)
            _in_range(text, "minutes", m, 59)
            _in_range(text, "seconds", s, 59)
            return int(days) * 86400 + h * 3600 + m * 60 + s
        if third is not None:  # HH:MM:SS
            _in_range(text, "minutes", int(second), 59)
            _in_range(text, "seconds", int(third), 59)
            return int(first) * 3600 + int(second) * 60 + int(third)
        _in_range(text, "seconds", int(second), 59)
        return int(first) * 60 + int(second)  # MM:SS
    raise ValueError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h, 1d12h, 1:30:00, "
                     "2-00:00:00)")


def _in_range(text: str, what: str, value: int, top: int) -> None:
    if value > top:
        raise ValueError(f"{text!r}: {what} go from 0 to {top} in Slurm's forms, not {value} "
                         "(MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; or 90m, 25h)")


def format_duration(seconds: float | None) -> str:
    """``5400`` -> ``1h30m``: the two largest units, for a table cell."""
    if seconds is None:
        return ""
    left = int(round(abs(seconds)))
    if left == 0:
        return "0s"
    parts = []
    for unit, size in _STEPS:
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
        if len(parts) == 2 or (parts and left == 0):
            break
    return ("-" if seconds < 0 else "") + "".join(parts)


def parse_time(text: str | None) -> datetime | None:
    """An API time (ISO 8601, ``Z`` or an offset) as an aware datetime; None stays None."""
    if not text:
        return None
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def relative(text: str | None, now: datetime | None = None) -> str:
    """``in 12m`` or ``5m ago`` (``now`` within a second); empty for no time."""
    when = parse_time(text)
    if when is None:
        return ""
    delta = (when - (now or datetime.now(UTC))).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {format_duration(delta)}" if delta > 0 else f"{format_duration(-delta)} ago"


def absolute(text: str | None) -> str:
    """``2026-12-01 14:30:05 UTC`` for an API time; empty for none."""
    when = parse_time(text)
    return "" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when(text: str | None, now: datetime | None = None) -> str:
    """Both: ``2026-12-01 14:30:05 UTC (in 12m)``."""
    if not text:
        return ""
    return f"{absolute(text)} ({relative(text, now)})"


_EPOCH = re.compile(r"\bt=(\d{9,11})\b")


def plain_instants(text: str) -> str:
    """The scheduler's sentences name instants as ``t=<Unix seconds>`` (``reserved ...
    from t=1796606519``): as clock times in UTC, as the dashboard shows them (gpuq why
    printed the raw numbers)."""
    return _EPOCH.sub(lambda m: datetime.fromtimestamp(int(m.group(1)), tz=UTC)
                      .strftime("%H:%M UTC"), text or "")
