"""Log rows and core sentences in words a researcher reads (presentation only).

The core writes its explanations with job ids and instants as ``t=<epoch seconds>``
(it is pure and knows no time zone); here they become "job #42" and a clock time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from scheduler_app.core.states import Reason
from scheduler_app.models import Transition
from scheduler_app.selectors.redaction import JOB_ID, JOB_ID_LISTS

R = Reason

_EPOCH = re.compile(r"\bt=(\d{9,11})\b")
#: the job ids of core sentences: "when 42 reaches", "when 42 and 7 reach", "to start 42
#: (", "evicted 17, 18 and 19,", "kept 20:", "job 6: protected" (not "when 42 and 3 other
#: jobs", nor the 0 of "evicted 17, 0.7 GPU-h lost"): the redaction's own pattern, so
#: both read the same ids
_JOB_IDS = JOB_ID_LISTS
_NUMBER = JOB_ID
#: a weighed candidate written as "6: protected: ..." (rows logged before the core wrote
#: "job 6: protected"): the leading id is a job too
_LEADING_ID = re.compile(r"^(\d+)(?=: )")


def plural(n: int | None, unit: str, units: str | None = None) -> str:
    """"1 GPU", "8 GPUs": the count with its unit in the right number."""
    if n is None:
        return f"? {units or unit + 's'}"
    return f"{n} {unit if n == 1 else (units or unit + 's')}"


def possessive(name: str) -> str:
    """"vision's", "evals'": a name ending in s takes the apostrophe alone."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def clock(at: datetime, now: datetime | None = None) -> str:
    """"14:20 UTC", with the date when it is not today."""
    at = timezone.localtime(at)
    now = timezone.localtime(now or timezone.now())
    zone = at.tzname() or ""
    if at.date() == now.date():
        return f"{at:%H:%M:%S} {zone}".strip()
    return f"{at:%Y-%m-%d %H:%M} {zone}".strip()


def relative(at: datetime, now: datetime | None = None) -> str:
    """"in 12 min", "3 h ago", "now"."""
    now = now or timezone.now()
    delta = int((at - now).total_seconds())
    if abs(delta) < 30:
        return "now"
    text = duration(abs(delta), coarse=True)
    return f"in {text}" if delta > 0 else f"{text} ago"


def duration(seconds: int | float | None, *, coarse: bool = False) -> str:
    """1 h 20 min; with ``coarse`` only the largest unit or two."""
    if seconds is None:
        return "no limit"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min")]
    if not coarse:
        parts.append((s, "s"))
    shown = [f"{n} {unit}" for n, unit in parts if n]
    return " ".join(shown[:2] if coarse else shown) or "0 s"


def core_sentence(text: str) -> SafeString:
    """A core sentence as HTML: instants as <time> with the clock time, job ids as #n."""
    if not text:
        return mark_safe("")
    text = _LEADING_ID.sub(r"job \1", text)
    out, last = [], 0
    for m in _EPOCH.finditer(text):
        out.append(_ids(escape(text[last:m.start()])))
        at = datetime.fromtimestamp(int(m.group(1)), tz=UTC)
        out.append(format_html('<time datetime="{}">{}</time>', at.isoformat(), clock(at)))
        last = m.end()
    out.append(_ids(escape(text[last:])))
    return mark_safe("".join(out))  # noqa: S308 - every piece is escaped above


def _ids(text: str) -> str:
    def hashed(m: re.Match[str]) -> str:
        ids = _NUMBER.sub(lambda n: f"#{n.group(0)}", m.group(2))
        one = "," not in ids and " and " not in ids
        if m.group(1) == "job":
            return f"job {ids}" if one else f"jobs {ids}"
        return f"{m.group(1)} job {ids}" if one else f"{m.group(1)} jobs {ids}"

    return _JOB_IDS.sub(hashed, text)


def alloc_words(alloc: dict[str, list[int]] | None, *, full: bool = False) -> str:
    """"pod-a-n01 GPUs 0-7, pod-a-n02 GPUs 0-3"; past three nodes (unless ``full``), the
    short form "8 nodes, pod-b-n01 to pod-b-n08 (64 GPUs)"."""
    if not alloc:
        return ""
    nodes = sorted(alloc)
    if len(nodes) > 3 and not full:
        gpus = sum(len(ix) for ix in alloc.values())
        return f"{len(nodes)} nodes, {nodes[0]} to {nodes[-1]} ({plural(gpus, 'GPU')})"
    return ", ".join(f"{node} {gpu_ranges(alloc[node])}" for node in nodes)


def gpu_ranges(indices: list[int]) -> str:
    ix = sorted(indices)
    if not ix:
        return ""
    spans, start, prev = [], ix[0], ix[0]
    for i in ix[1:] + [None]:  # type: ignore[list-item]
        if i is not None and i == prev + 1:
            prev = i
            continue
        spans.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    label = "GPU" if len(ix) == 1 else "GPUs"
    return f"{label} {','.join(spans)}"


def backfill_words(d: dict[str, Any]) -> str:
    """A job placed while higher-ranked jobs wait: what lets it go first, in the row's own
    numbers (the core writes ``ends_before`` only when the job's declared end is by that
    job's reserved start, ``uses_none_of`` when it uses none of its GPUs)."""
    parts = []
    ends = d.get("ends_by_s")
    for held in d.get("ends_before", []):
        parts.append(f"it ends by its limit ({_at(ends)}) before {_job(held['job'])}'s "
                     f"reserved start ({_at(held['start_s'])})")
    if d.get("uses_none_of"):
        ids = ", ".join(_job(i) for i in d["uses_none_of"])
        parts.append(f"it uses none of the GPUs reserved for {ids}")
    quota = d.get("quota_of")
    if quota:
        parts.append(f"it uses its team's quota only until {_at(ends)}, before "
                     f"{_job(quota['job'])}'s planned start ({_at(quota['start_s'])})")
    if d.get("entitled_past"):
        ids = ", ".join(_job(i) for i in d["entitled_past"])
        parts.append(f"its team is within its guarantee, so borrowers' reservations ({ids}) "
                     "do not hold it back")
    why = "; ".join(parts) or "around the reservations of higher-ranked jobs"
    return f"Backfilled on {alloc_words(d.get('alloc'))}: {why}."


def _job(job_id: Any) -> str:
    """"job #17", or the words a redacted detail already holds ("a job of team X")."""
    text = str(job_id)
    return f"job #{text}" if text.isdigit() else text


def _at(epoch_s: Any) -> str:
    """An instant of the core (epoch seconds) as a clock time."""
    if not isinstance(epoch_s, int | float):
        return "?"
    return clock(datetime.fromtimestamp(epoch_s, tz=UTC))


def describe(row: Transition) -> str:
    """One log row as a sentence (plain text; the template escapes it)."""
    d: dict[str, Any] = row.detail or {}
    if row.kind == Transition.Kind.NODE:
        return _node_words(row, d)
    if row.kind == Transition.Kind.TENANT:
        return _tenant_words(row, d)
    reason = row.reason
    who = row.actor_name or row.actor
    if reason == R.SUBMITTED:
        return f"Submitted by {who}."
    if reason == R.ADMITTED:
        return "Admitted: waiting in its team's queue."
    if reason == R.PLACED:
        words = f"Placed on {alloc_words(d.get('alloc'))}."
        if d.get("reclaimed_from"):
            ids = ", ".join(_job(i) for i in d["reclaimed_from"])
            words += f" Room made by preempting {ids}."
        return words
    if reason == R.BACKFILLED:
        return backfill_words(d)
    if reason == R.STARTED:
        return f"Running: the agent on {who} confirmed the start."
    if reason == R.COMPLETED:
        return "Completed."
    if reason == R.EXIT_FAILED:
        code = d.get("exit_code")
        return f"Failed with exit code {code}." if code is not None else "Failed."
    if reason == R.TIME_LIMIT:
        return f"Stopped at its time limit ({duration(d.get('max_runtime_s'))})."
    if reason == R.NEVER_FITS:
        return f"Refused: it {d.get('why', 'can never fit')}."
    if reason == R.RETRIES_EXHAUSTED:
        return "Failed: node failures used up its retry budget."
    if reason == R.PREEMPT_REQUESTED:
        if row.from_state == row.to_state:
            return "Preemption request renewed."
        head = d.get("for")
        # a job the viewer may not see is already words ("a job of team X"), not an id
        words = f"Asked to stop to make room for {_job(head)}" if head else "Asked to stop"
        if d.get("words"):
            return f"{words}: {d['words']}."
        return words + "."
    if reason == R.CHECKPOINT_STARTED:
        return "Acknowledged the request: writing a checkpoint before it stops."
    if reason == R.PREEMPTED:
        if d.get("killed"):
            return "Killed: preempted at once."
        return "Stopped after its checkpoint."
    if reason == R.NO_CHECKPOINT:
        return "Stopped at once: it cannot checkpoint, so it restarts from the beginning."
    if reason == R.GRACE_EXPIRED:
        return "Killed: its grace window ended before it exited."
    if reason == R.REQUEUED:
        pointer = d.get("resume_pointer")
        if pointer:
            return f"Back in the queue; it resumes from {pointer}."
        return "Back in the queue; it starts again from the beginning."
    if reason == R.NODE_FAILED:
        return "A node it ran on went down: back in the queue."
    if reason == R.PLACING_TIMEOUT:
        return "The node agent never confirmed the start: back in the queue."
    if reason == R.CHECKPOINTED:
        return f"Checkpoint written ({d.get('resume_pointer', '')})."
    if reason == R.SHRUNK:
        return f"Shrunk to {plural(d.get('gpus'), 'GPU')} after a node failure."
    if reason == R.CANCELLED:
        why = f": {d['why']}" if d.get("why") else ""
        if d.get("array") is not None:
            return f"Cancelled with every task of array {d['array']} by {who}{why}."
        return f"Cancelled by {who}{why}."
    if reason == R.DEPENDENCY_NEVER_SATISFIED:
        from scheduler_app.selectors.dashboard import DEPENDENCY_WORDS

        when = DEPENDENCY_WORDS.get(str(d.get("when")), "ends")
        return (f"Cancelled: {_job(d.get('job'))} ended {d.get('ended', '?')}, so the "
                f"dependency (after it {when}) can never be met.")
    return str(reason)


def _node_words(row: Transition, d: dict[str, Any]) -> str:
    name = row.node.name if row.node_id else "?"
    action = str(d.get("action", ""))
    who = row.actor_name or row.actor
    verbs = {
        "drain": f"drained by {who}: it keeps its jobs and takes no new ones",
        "undrain": f"undrained by {who}: it takes new jobs again",
        "down": f"marked down by {who}",
        "up": f"back up ({who})",
        "register": "registered by its agent",
        "heartbeat_timeout": "marked down: its agent went silent",
    }
    text = f"Node {name} {verbs.get(action, row.to_state)}"
    if d.get("why"):
        text += f" ({d['why']})"
    return text + "."


def _tenant_words(row: Transition, d: dict[str, Any]) -> str:
    name = row.tenant.name if row.tenant_id else "?"
    after = d.get("after") or {}
    before = d.get("before") or {}
    new = (f"{after.get('guaranteed_gpus', '?')} guaranteed + "
           f"{after.get('borrow_limit_gpus', '?')} borrow")
    if d.get("action") == "register" or not before:
        return f"Team {name} created with {new}."
    old = f"{before.get('guaranteed_gpus', '?')} + {before.get('borrow_limit_gpus', '?')}"
    return f"Team {name} quota set to {new} (was {old}) by {row.actor_name or row.actor}."


#: The usage chart's windows, as its buttons and title say them.
WINDOW_WORDS = {"hour": "last hour", "day": "last day", "week": "last week"}


# --------------------------------------------------------------------------- glossary
def half_life_words() -> str:
    """The usage half-life the scheduler runs with, as a person says it: "7 days"."""
    from scheduler_app.services.usage import half_life_s

    seconds = half_life_s()
    if seconds % 86400 == 0:
        return plural(seconds // 86400, "day")
    if seconds % 3600 == 0:
        return plural(seconds // 3600, "hour")
    return duration(seconds)


def glossary() -> list[tuple[str, str, str]]:
    """(anchor, term, meaning) of every term the pages use, for a newcomer: the pages link
    each term here instead of hiding its meaning in a tooltip."""
    half = half_life_words()
    return [
        ("guarantee", "Guarantee",
         "The GPUs a team is promised. When the team asks for them, it gets them, if need "
         "be by taking back GPUs other teams borrowed."),
        ("borrowing", "Borrowed GPUs, borrow limit",
         "GPUs a team holds beyond its guarantee, taken from capacity nobody uses. The borrow "
         "limit caps them. Borrowed GPUs can be taken back (preempted) when their owner "
         "needs them."),
        ("decayed-usage", "Decayed usage",
         f"How many GPU-hours a team used recently. Older use counts less: it halves every "
         f"{half} (the half-life), so a team that ran a lot last month is not held back "
         f"today."),
        ("per-guaranteed-gpu", "Usage per guaranteed GPU",
         "Decayed usage divided by the team's guarantee: the fair-share key. The team with "
         "the lowest value goes first, so a big team may use more before it waits."),
        ("order", "Order",
         "Where each team stood at the scheduler's last pass (every few seconds): 1 is "
         "served first. It follows usage per guaranteed GPU."),
        ("queue-position", "Queue position",
         "A waiting job's place in its team's queue (priority, then its deadline: the "
         "submit time plus its declared time limit times its GPUs, times the cluster's "
         "queue_stretch, 1 by default: a small, short job does not wait behind a two-day "
         "or a 64-GPU one sent just before it), and "
         "across the cluster, where the teams take "
         "turns in fair-share order. A job waiting for a dependency or for its array's "
         "cap waits off the queue: it has no place in line and is ahead of nobody."),
        ("pending-reason", "Why it waits",
         "The one thing that keeps a waiting job from starting now, as the scheduler found it "
         "at its last pass, with the numbers behind it and what you can do."),
        ("estimate", "Start estimate",
         "When a waiting job should start. \"At the latest\" means GPUs are reserved for it; "
         "\"expected\" is a projection from the time limits of what runs now."),
        ("time-limit", "Time limit",
         "How long a job may run. Jobs with a limit let the scheduler plan starts and fit "
         "short jobs into gaps (backfill)."),
        ("backfill", "Backfill",
         "Starting a smaller job ahead of its turn because it ends, by its time limit, before "
         "the GPUs it uses are needed by a higher-ranked job."),
        ("reservation", "Reservation",
         "GPUs held for the highest-ranked waiting job so that smaller jobs cannot keep it "
         "waiting for ever."),
        ("preemption", "Preemption",
         "Stopping a job that runs on borrowed GPUs so their owner can use them. A job that "
         "can checkpoint writes one first and later resumes from it."),
        ("checkpoint", "Checkpoint",
         "A job saving its progress so it can resume after it is stopped. Writing one does "
         "not change the job's state: it stays running."),
        ("gpu-hours", "GPU-hours",
         "GPUs times hours: 8 GPUs for 2 hours is 16 GPU-hours."),
        ("dependency", "Dependency (waits for)",
         "A job that waits for other jobs to end before it may start, as sbatch's "
         "--dependency: afterok (the other job completed), afterany (it ended, however), "
         "afternotok (it failed or was cancelled). Until then it holds and reserves no GPUs; "
         "if a dependency can never be met (afterok on a job that failed), it is cancelled."),
        ("job-array", "Job array",
         "Many copies of one job, submitted at once, as sbatch's --array: the tasks are "
         "numbered from 0 (each reads ARRAY_INDEX) and named <array>_<index>, e.g. 412_7. "
         "\"At most K at once\" caps how many run at the same time; the others wait "
         "(ArrayLimit)."),
        ("drain", "Draining",
         "A node that keeps the jobs it runs and takes no new ones, usually before "
         "maintenance."),
        ("log-row", "Log row",
         "Every change is a numbered row of the transition log (\"row 222\"). Row numbers "
         "count changes; job numbers (#17) name jobs. They are different numbers."),
    ]
