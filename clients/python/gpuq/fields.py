"""The job's fields as ``gpuq submit`` flags: one row of :data:`FIELDS` per field.

A row names the API's field, the flag, how to read the text (a parser: the value's type
and the message when it is wrong) and the help. The flags, the keys a job file may use
(the API's name, or the flag's without its dashes: ``time``, ``gpus-per-node``), the
conversion of the file's values and the mapping of the API's field messages back to the
flag are all derived from this table, so a new job field is one line here, e.g.::

    JobField("depends_on", "--dependency", dependency, "afterok:ID[,ID...]"),
"""

from __future__ import annotations

import difflib
import re
import unicodedata
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
    if not re.fullmatch(r"[+-]?[0-9]+", text):  # ASCII digits: int() reads "١" too
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


#: What the API refuses in a job's name or a cancel's why (scheduler_app/services/jobs.py,
#: ``_UNPRINTABLE``): control characters (tabs and line breaks among them), the invisible
#: and the text-direction ones; and lone surrogates (undecodable bytes in argv), which
#: JSON cannot carry as text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f"
                          "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]")
#: The API's words for such a text.
UNPRINTABLE_WORDS = ("printable text: no tabs, line breaks, control, invisible (zero-width, "
                     "soft hyphen) or text-direction characters, and no combining mark "
                     "first")


def unprintable(value: str) -> bool:
    """Would the API refuse ``value`` as unprintable (a character of :data:`_UNPRINTABLE`,
    or a combining mark first, which joins whatever a terminal printed before it)?"""
    return bool(_UNPRINTABLE.search(value)) or (
        bool(value) and unicodedata.category(value[0]).startswith("M"))


#: the API's longest duration (366 days)
MAX_DURATION_S = 366 * 86400


def duration(value: Any) -> int:
    """A duration for a flag or a file's flag-named key (``time: 2h``): a unit needed, at
    most 366 days, said in the units it was written in (the API's "durations are in
    seconds" answered --time 400d; a pipeline author's session, 2026-12-07)."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(f"{value} has no unit: write {value}m, {value}s or HH:MM:SS")
    got = parse_duration(str(value))
    if got > MAX_DURATION_S:
        given = str(value).strip()
        days = "" if given.lower().endswith("d") else f" ({got / 86400:,.1f} days)"
        raise ValueError(f"at most 366 days, not {given}{days}")
    return got


def seconds(value: Any) -> int:
    """A file's ``*_s`` key (``max_runtime_s: 3600``): seconds, as the API takes them;
    a unit is welcome too (``max_runtime_s: 1h``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return parse_duration(str(value), bare_seconds=True)


#: sbatch's dependency kinds and the API's ``when`` for each.
DEPENDENCY_KINDS = {"afterok": "ok", "afterany": "any", "afternotok": "notok"}
#: A job named in a dependency: its id (``12``) or an array task's name (``412_7``).
_JOB_REF = re.compile(r"^([0-9]+)(?:_([0-9]+))?$")
#: sbatch's kinds this scheduler does not have, and why (the message says what is).
_OTHER_KINDS = {
    "after": "it starts when the job starts, and jobs here wait only for jobs to end",
    "aftercorr": "it pairs the tasks of two arrays",
    "afterburstbuffer": "there are no burst buffers",
    "singleton": "it waits for the user's jobs of the same name",
}


def dependency(value: Any) -> list[dict[str, Any]]:
    """sbatch's ``--dependency`` (``afterok:12:13,afterany:14``: comma-separated,
    ``KIND:ID[:ID...]``) as the API's ``depends_on`` (``[{"job": 12, "when": "ok"}, ...]``).
    An id may be an array task's name (``412_7``): it stays text here and the command
    looks it up (``{"job": "412_7"}``). A job file may give the API's list itself; its
    items pass unchanged (the API checks them, ``index`` ones of a batch too)."""
    if isinstance(value, list):
        if not all(isinstance(item, dict) for item in value):
            raise ValueError('a list of {"job": ID, "when": "ok"} objects')
        return [dict(item) for item in value]
    text = str(value).strip()
    kinds = ", ".join(DEPENDENCY_KINDS)
    if not text:
        raise ValueError(f"empty: write KIND:ID[:ID...], KIND one of {kinds}")
    if "?" in text:
        raise ValueError("'?' (any one of them is enough) is not supported: a job here "
                         "waits until every dependency is met; separate them with ','")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for part in text.split(","):
        kind, _, ids = part.strip().partition(":")
        kind = kind.strip().lower()
        if kind not in DEPENDENCY_KINDS:
            why = f" ({_OTHER_KINDS[kind]})" if kind in _OTHER_KINDS else ""
            raise ValueError(f"{part.strip()!r}: unknown kind {kind!r}{why}; supported: "
                             f"{kinds} (KIND:ID[:ID...], comma-separated)")
        if not ids.strip():
            raise ValueError(f"{part.strip()!r}: no job id after {kind}: (write "
                             f"{kind}:ID[:ID...])")
        for ref in ids.split(":"):
            ref = ref.strip()
            if "+" in ref:
                raise ValueError(f"{ref!r}: a delay after a job's start (+MINUTES) is not "
                                 "supported")
            found = _JOB_REF.match(ref)
            if found is None:
                raise ValueError(f"{ref!r} is not a job id (a number, or an array task's "
                                 "name such as 412_7)")
            key = ref if found.group(2) is not None else str(int(ref))
            if key in seen:
                raise ValueError(f"job {ref} is named twice: each job once")
            seen.add(key)
            job: int | str = ref if found.group(2) is not None else int(ref)
            out.append({"job": job, "when": DEPENDENCY_KINDS[kind]})
    return out


def array(value: Any) -> dict[str, int]:
    """sbatch's ``--array`` (``0-99%8``: tasks 0 to 99, at most 8 running at once) as the
    API's ``{"count": 100, "max_running": 8}``. Arrays here are always numbered 0 to
    count - 1, so only a range from 0 is taken (``0`` alone is one task, as sbatch reads
    it); a job file may give the API's mapping itself."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"count", "max_running"})
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}: an array has count and "
                             "max_running")
        out = {"count": integer(value.get("count"))}
        if value.get("max_running") is not None:
            out["max_running"] = integer(value["max_running"])
        return out
    text = str(value).strip().replace(" ", "")
    supported = ("supported: 0-N (tasks 0 to N) with an optional %K (at most K at once), "
                 "e.g. 0-99%8")
    spec, percent, limit = text.partition("%")
    if "," in spec:
        raise ValueError(f"{text!r}: a list of indices is not supported (the tasks are "
                         f"numbered 0 to count - 1); {supported}")
    if ":" in spec:
        raise ValueError(f"{text!r}: a step is not supported (the tasks are numbered 0 to "
                         f"count - 1; a script can compute its value from ARRAY_INDEX); "
                         f"{supported}")
    found = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", spec)
    if found is None:
        raise ValueError(f"{text!r} is not an array range; {supported}")
    first, last = int(found.group(1)), found.group(2)
    if last is None:
        if first != 0:
            raise ValueError(f"{text!r} is the single task {first} in sbatch's reading, and "
                             f"tasks here are numbered from 0: write 0-{first - 1} for "
                             f"{first} tasks (or 0 for one)")
        last_index = 0
    else:
        last_index = int(last)
        if first != 0:
            count = last_index - first + 1
            hint = (f": write 0-{count - 1} for {count} tasks (ARRAY_INDEX 0 to "
                    f"{count - 1}; add {first} in the script)") if count > 0 else ""
            raise ValueError(f"{text!r}: arrays here are numbered from 0{hint}")
    out = {"count": last_index + 1}
    if percent:
        if not re.fullmatch(r"[0-9]+", limit) or int(limit) < 1:
            raise ValueError(f"{text!r}: after % comes how many tasks may run at once, a "
                             "whole number of at least 1")
        out["max_running"] = int(limit)
    return out


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
    JobField("depends_on", "--dependency", dependency,
             "wait for other jobs to end, as sbatch's: afterok:ID[:ID...] (completed), "
             "afterany: (ended), afternotok: (failed or cancelled), comma-separated; an ID "
             "may be a task's name, 412_7", "KIND:ID[,...]"),
    JobField("array", "--array", array,
             "a job array, as sbatch's: 0-99%%8 makes tasks 0 to 99 of this spec, at most 8 "
             "running at once (each reads ARRAY_INDEX)", "0-N[%K]"),
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
            near = difflib.get_close_matches(str(key), list(BY_FILE_KEY), n=1)
            hint = f"did you mean {BY_FILE_KEY[near[0]].api!r}? " if near else ""
            raise ValueError(f"{name}: unknown field {key!r} ({hint}fields: {known})")
        if found.api in spec:
            raise ValueError(f"{name}: {found.api!r} is given twice ({key!r})")
        try:
            spec[found.api] = found.file_value(key, value)
        except ValueError as error:
            raise ValueError(f"{name}: {key}: {error}") from error
    return {k: v for k, v in spec.items() if v is not None}


def flag_for(api_field: str | None) -> str | None:
    """The flag of an API field path (``gpus`` -> ``--gpus``; ``jobs[3].gpus`` ->
    ``jobs[3] --gpus``; a nested one keeps its path: ``depends_on[0].job`` ->
    ``--dependency (depends_on[0].job)``, ``array.count`` -> ``--array (array.count)``);
    the path itself for a field the table does not know."""
    if not api_field:
        return None
    head, _, last = api_field.rpartition(".")
    found = BY_API.get(last)
    if found is not None:
        return f"{head} {found.flag}" if head else found.flag
    batch = re.match(r"^(jobs\[\d+\])\.(.*)$", api_field)
    prefix, path = (batch.group(1) + " ", batch.group(2)) if batch else ("", api_field)
    nested = BY_API.get(re.split(r"[.\[]", path, maxsplit=1)[0])
    if nested is not None and path != nested.api:
        return f"{prefix}{nested.flag} ({path})"
    return api_field
