"""The job's fields as ``gpuq submit`` flags: one row of :data:`FIELDS` per field.

A row names the API's field, the flag, how to read the text (a parser: the value's type
and the message when it is wrong) and the help. The flags, the keys a job file may use
(the API's name, or the flag's without its dashes: ``time``, ``gpus-per-node``), the
conversion of the file's values and the mapping of the API's field messages back to the
flag are all derived from this table, so a new job field is one line here, e.g.::

    JobField("depends_on", "--dependency", dependency, "afterok:ID[,ID...]"),
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .timefmt import parse_duration


def integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.lstrip("+-").isdigit():
        raise ValueError(f"expected a whole number, got {text!r}")
    return int(text)


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def text(value: Any) -> str:
    return "" if value is None else str(value)


def duration(value: Any) -> int:
    """A duration for a flag or a file's flag-named key (``time: 2h``): a unit needed."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(f"{value} has no unit: write {value}m, {value}s or HH:MM:SS")
    return parse_duration(str(value))


def seconds(value: Any) -> int:
    """A file's ``*_s`` key (``max_runtime_s: 3600``): seconds, as the API takes them;
    a unit is welcome too (``max_runtime_s: 1h``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return parse_duration(str(value), bare_seconds=True)


@dataclass(frozen=True, slots=True)
class JobField:
    api: str  # the API's field name
    flag: str  # the command line's flag
    parse: Callable[[Any], Any]  # text (or a file's value) -> the API's value
    help: str
    metavar: str | None = None

    @property
    def is_flag_only(self) -> bool:
        """A switch (``--checkpointable``): it takes no value on the command line."""
        return self.parse is boolean

    @property
    def dest(self) -> str:
        return self.api

    def file_value(self, key: str, value: Any) -> Any:
        """A job file's value under ``key`` (the API's name or the flag's)."""
        if value is None:
            return None
        if self.parse is duration and key == self.api:
            return seconds(value)
        return self.parse(value)


FIELDS: tuple[JobField, ...] = (
    JobField("tenant", "--tenant", text, "the team to submit to (default: your only team)",
             "TEAM"),
    JobField("name", "--name", text, "the job's name (default: the command's first word)"),
    JobField("gpus", "--gpus", integer, "GPUs of the whole gang", "N"),
    JobField("gpus_per_node", "--gpus-per-node", integer,
             "the gang's shape: GPUs on each node (must divide --gpus)", "N"),
    JobField("gpu_type", "--gpu-type", text, "one of the cluster's GPU types, e.g. H100",
             "TYPE"),
    JobField("max_runtime_s", "--time", duration,
             "time limit of a run (2h, 90m, 1-00:00:00): the run FAILS at it; a job with a "
             "limit may backfill", "DURATION"),
    JobField("priority", "--priority", integer, "higher first, within the team's queue",
             "N"),
    JobField("checkpointable", "--checkpointable", boolean,
             "the job checkpoints when asked to stop (cheaper to preempt)"),
    JobField("checkpoint_interval_s", "--checkpoint-interval", duration,
             "how often it checkpoints", "DURATION"),
    JobField("checkpoint_time_s", "--checkpoint-time", duration,
             "how long it needs to checkpoint when asked to stop", "DURATION"),
    JobField("restart_s", "--restart-time", duration,
             "how long it needs to resume from a checkpoint", "DURATION"),
    JobField("min_gpus", "--min-gpus", integer,
             "elastic: it runs, and shrinks, down to this many GPUs", "N"),
    JobField("preemptible", "--preemptible", boolean, "it may be preempted at any time"),
    JobField("interactive", "--interactive", boolean, "a notebook or shell: the interactive "
             "tier"),
    JobField("command", "--command", text, "what the node agent runs (or give it after --)",
             "CMD"),
)

BY_API: dict[str, JobField] = {f.api: f for f in FIELDS}
#: A job file's keys: the API's name, the flag's name, and the flag's with underscores.
BY_FILE_KEY: dict[str, JobField] = {
    **{f.flag.lstrip("-"): f for f in FIELDS},
    **{f.flag.lstrip("-").replace("-", "_"): f for f in FIELDS},
    **BY_API,
}


def spec_from_file(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A job file's mapping as the API's fields. Raises ValueError naming the key."""
    spec: dict[str, Any] = {}
    for key, value in data.items():
        found = BY_FILE_KEY.get(key)
        if found is None:
            known = ", ".join(f.api for f in FIELDS)
            raise ValueError(f"{name}: unknown field {key!r} (fields: {known})")
        if found.api in spec:
            raise ValueError(f"{name}: {found.api!r} is given twice ({key!r})")
        try:
            spec[found.api] = found.file_value(key, value)
        except ValueError as error:
            raise ValueError(f"{name}: {key}: {error}") from error
    return {k: v for k, v in spec.items() if v is not None}


def flag_for(api_field: str | None) -> str | None:
    """The flag of an API field path (``gpus`` -> ``--gpus``; ``jobs[3].gpus`` ->
    ``jobs[3] --gpus``); the path itself for a field the table does not know."""
    if not api_field:
        return None
    head, _, last = api_field.rpartition(".")
    found = BY_API.get(last)
    if found is None:
        return api_field
    return f"{head} {found.flag}" if head else found.flag
