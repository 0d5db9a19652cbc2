"""The ``gpuq`` command: Slurm's habits over the scheduler's REST API (docs/cli.md).

    gpuq login                          a token, stored in ~/.config/gpuq/config.toml
    gpuq submit [flags] [-- CMD...]     sbatch: a flag per job field, or -f job.yaml;
                                        --dependency afterok:12, --array 0-99%8
    gpuq queue [--mine] [--watch]       squeue
    gpuq show ID                        scontrol show job: every field and the history
    gpuq why ID                         why it waits, and what would start it sooner
    gpuq cancel ID... | --mine ...      scancel; --array 412 cancels a whole array

A job is named by its id (``412``) or, for an array's task, by its name (``412_7``).
    gpuq logs ID [-f]                   the job's output
    gpuq share                          sshare: fair share per team
    gpuq wait ID                        until the job is final; the exit status says how

Exit status: 0 done; 1 the API refused (or could not be reached); 2 a usage or
validation error (the API's message at its field); ``wait``: 3 the job FAILED,
4 it was CANCELLED, 5 the timeout passed first; 130 interrupted.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from . import __version__, config, explain, jobfile, output
from .client import FINAL_STATES, MAX_BATCH, MAX_JOB_ID, OUTAGE_S, Client, Job, parse_ref
from .errors import (
    ApiError,
    ConfigError,
    ConnectionFailed,
    GpuqError,
    InvalidRequest,
    ServerError,
    Unauthorized,
)
from .fields import (
    FIELDS,
    MAX_DURATION_S,
    UNPRINTABLE_WORDS,
    flag_for,
    integer,
    spec_from_file,
    unprintable,
)
from .login import LoginRefused, token_from_password
from .output import Column, field
from .timefmt import absolute, format_duration, parse_duration, plain_instants, relative, when

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_CANCELLED = 4
EXIT_TIMEOUT = 5
EXIT_INTERRUPTED = 130

#: ``gpuq wait``'s exit status for each final state.
WAIT_EXIT = {"COMPLETED": EXIT_OK, "FAILED": EXIT_FAILED, "CANCELLED": EXIT_CANCELLED}
#: What ``gpuq queue`` (like squeue) and ``gpuq cancel --mine`` look at by default.
LIVE_STATES = ("SUBMITTED", "QUEUED", "PLACING", "RUNNING", "PREEMPT_REQUESTED",
               "CHECKPOINTING", "PREEMPTED")
#: Queue positions are in a job's detail only (a request each; the list has none):
#: ``gpuq queue`` reads them for this many queued jobs by default.
DEFAULT_POSITIONS = 100
#: ANSI sequences for ``--watch``: cursor home, clear to the end of the line / screen,
#: hide and show the cursor.
HOME, CLEAR_LINE, CLEAR_DOWN, HIDE, SHOW = "\x1b[H", "\x1b[K", "\x1b[J", "\x1b[?25l", "\x1b[?25h"

#: What each kind of estimate promises (the API's estimate.kind; the scheduler's words).
ESTIMATE_KINDS = {
    "reserved": "GPUs are reserved for it; earlier if the running jobs end before their "
                "limits",
    "borrowed": "GPUs are reserved for it on borrowed quota; a team taking back its "
                "guarantee may start there first",
    "reclaim": "borrowed GPUs are being reclaimed for it",
    "quota": "it waits for its team's quota, not for GPUs",
    "projected": "not reserved: jobs that start meanwhile may delay it",
}


class UsageError(GpuqError):
    """The command line is wrong: exit status 2."""


# ============================================================================ helpers
def out(text: str = "", stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    stream.write(text if text.endswith("\n") or not text else text + "\n")


def err(text: str) -> None:
    out(text, sys.stderr)


def client_for(args: argparse.Namespace) -> Client:
    return Client(url=args.url)


def option_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` for argparse, keeping its message (argparse would print only
    "invalid value" for a ValueError)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from error

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def job_ref(text: str) -> str:
    """A job on the command line: its id (``412``) or an array task's name (``412_7``)."""
    parse_ref(text)  # ValueError says what is taken
    return text.strip()


def array_option(text: str) -> int:
    """``--array ID``: an array's id (its task 0's), a job id of at most 18 digits: a
    longer one matched none of the API's routes ("No endpoint /api/v1/arrays/.../")."""
    # (not through option_type: integer's ValueError is argparse's "invalid integer value:
    # '٤١٢'", as for the other id flags)
    value = integer(text)
    if not 0 <= value <= MAX_JOB_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is not an array's id: a job's id, 0 to "
                                         "18 digits")
    return value


array_option.__name__ = "integer"  # argparse names the type in its "invalid ... value"


def count_option(text: str) -> int:
    """A count (``--positions``): 0 or more. -1 was taken, and read as 0 (a researcher's
    session)."""
    value = integer(text)
    if value < 0:
        raise ValueError(f"{text!r}: 0 or more")
    return value


#: The longest why the API keeps (``CancelIn.why``), once it has stripped the ends.
WHY_MAX = 500


def why_option(text: str) -> str:
    """``--why``: what the API takes, judged as it judges it (its ends stripped), before
    any request: a line break was refused by the API once per job, with exit status 1 and
    "why:" for the flag (a researcher's session)."""
    kept = text.strip()
    if unprintable(kept):
        raise ValueError(f"{text!r}: {UNPRINTABLE_WORDS}")
    if len(kept) > WHY_MAX:
        raise ValueError(f"at most {WHY_MAX} characters, not {len(kept):,}")
    return text


#: The shortest pause between two reads of a polling command: ``--interval 0`` polled with
#: no pause at all (34 requests in 2 s), and a negative one crashed in time.sleep.
MIN_INTERVAL_S = 0.1


def seconds_option(text: str) -> float:
    """Seconds (``0.5``, ASCII digits), or a duration with a unit (``10m``); finite and
    from 0 to a year. ``nan`` never timed out and ``-1`` crashed (a researcher's session,
    2026-12-07)."""
    raw = text.strip()
    if not raw.isascii():
        raise ValueError(f"{text!r}: write the number in ASCII digits (0-9)")
    try:
        value = float(raw)
    except ValueError:
        value = float(parse_duration(raw))
    if not 0 <= value <= MAX_DURATION_S:  # (a NaN fails both)
        raise ValueError(f"{text!r}: seconds from 0 to {MAX_DURATION_S:,} (a year), or a "
                         "duration such as 10m")
    return value


def interval_option(text: str) -> float:
    """A polling interval: :func:`seconds_option`, at least :data:`MIN_INTERVAL_S`."""
    value = seconds_option(text)
    if value < MIN_INTERVAL_S:
        raise ValueError(f"{text!r}: at least {MIN_INTERVAL_S} s between two reads")
    return value


def states(values: Sequence[str] | None) -> list[str]:
    """``--state queued,running --state PLACING`` -> ``["QUEUED", "RUNNING", "PLACING"]``."""
    found: list[str] = []
    for value in values or []:
        found += [s.strip().upper() for s in value.split(",") if s.strip()]
    return found


#: the list filters' query parameters -> the flags that set them (job_filters)
FILTER_FLAGS = {"owner": "--user", "tenant": "--tenant", "state": "--state", "array": "--array"}


def filter_flag(api_field: str | None) -> str | None:
    """The flag behind a refused query parameter (``owner`` -> ``--user``: "owner: No user
    named ..." did not say which flag to fix); the parameter itself for any other."""
    return FILTER_FLAGS.get(api_field or "", api_field)


def job_filters(args: argparse.Namespace, *, default_states: Sequence[str] | None
                ) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if args.tenant:
        filters["tenant"] = args.tenant
    if getattr(args, "array", None) is not None:
        filters["array"] = args.array
    if getattr(args, "user", None):
        filters["owner"] = args.user
    if args.mine:
        filters["mine"] = True
    chosen = states(args.state)
    if chosen:
        filters["state"] = chosen
    elif default_states and not getattr(args, "all", False):
        filters["state"] = list(default_states)
    return filters


def emit(args: argparse.Namespace, data: Any, records: Sequence[dict[str, Any]],
         columns: Sequence[Column]) -> None:
    sys.stdout.write(output.render(args.output, data, records, columns, stream=sys.stdout))


def confirm(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        sys.stderr.write(answer if answer.endswith("\n") else answer + "\n")  # no echo
    return answer.strip().lower() in ("y", "yes")


def ordinal(n: int | None) -> str:
    if n is None:
        return "-"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    """``text`` in lines of at most ``width`` terminal columns, each after ``indent``."""
    return output.wrap(text, max(20, width), initial_indent=indent,
                       subsequent_indent=indent) or [indent.rstrip()]


# ============================================================================ login
def cmd_login(args: argparse.Namespace) -> int:
    stored = config.read_file()
    url = args.url or os.environ.get(config.URL_ENV) or stored.get("url") or \
        prompt("Scheduler URL: ")
    if args.with_token:
        token = sys.stdin.readline().strip()
        if not token:
            raise UsageError("--with-token reads the token from standard input: none came")
        try:
            config.check_token(token)
        except ConfigError as error:
            raise UsageError(f"--with-token: {error}") from None
    else:
        username = args.username or prompt("Username: ", default=stored.get("username", ""))
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        else:
            password = getpass.getpass("Password: ")
        token = token_from_password(url, username, password, token_name=args.name)
    me = Client(url=url, token=token).me()  # the token works, and whose it is
    path = config.write_file({"url": url, "token": token, "username": me["username"]})
    out(f"Signed in to {url} as {me['username']}: token {token[:12]}... saved in {path} "
        "(mode 0600).")
    return EXIT_OK


def prompt(question: str, default: str = "") -> str:
    shown = f"{question[:-2]} [{default}]: " if default else question
    sys.stderr.write(shown)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        raise UsageError(f"no answer to {question.strip()!r} (standard input is closed): "
                         "pass it as an option")
    return answer.strip() or default


# ============================================================================ submit
def cmd_submit(args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {}
    batch: list[dict[str, Any]] | None = None
    batch_tenant: str | None = None
    if args.file:
        try:
            data = jobfile.load(args.file)
            if isinstance(data, dict) and isinstance(data.get("jobs"), list):
                batch_tenant = data.get("tenant")
                data = data["jobs"]
            if isinstance(data, list):
                batch = [spec_from_file(item, f"{args.file} jobs[{i}]")
                         for i, item in enumerate(data)]
            else:
                spec = spec_from_file(data, args.file)
        except ValueError as error:  # JobFileError too
            raise UsageError(str(error)) from error
    flags = {f.api: getattr(args, f.dest) for f in FIELDS if getattr(args, f.dest) is not None}
    if args.cmd:
        if "command" in flags:
            raise UsageError("give the command once: --command, or after --")
        flags["command"] = shlex.join(args.cmd)
    if batch is not None:
        if "array" in flags or any("array" in one for one in batch):
            raise UsageError("--array makes an array of one job's spec: a batch file's jobs "
                             "cannot be arrays (submit each array on its own)")
        if not 1 <= len(batch) <= MAX_BATCH:  # (the SDK's ValueError was a traceback)
            raise UsageError(f"--file: a batch holds 1 to {MAX_BATCH} jobs, not "
                             f"{len(batch)}: it is one transaction; split a larger sweep "
                             "into several files")
        tenant = flags.pop("tenant", None) or batch_tenant
        jobs = [{**one, **flags} for one in batch]
        for i, one in enumerate(jobs):
            check_checkpoint_time(one, f"{args.file} jobs[{i}]: ")
        client = client_for(args)
        tenant = tenant or _default_tenant(client, jobs[0] if jobs else {})
        made = client.submit_batch(jobs, tenant=tenant, idempotency_key=args.idempotency_key)
        for job in made:
            out(str(job.id) if args.parsable else f"Submitted job {job.id} ({job.name})")
        return EXIT_OK
    spec.update(flags)
    check_checkpoint_time(spec)
    client = client_for(args)
    spec.setdefault("name", _name_from(spec.get("command", "")))
    if not spec.get("tenant"):
        spec["tenant"] = _default_tenant(client, spec)
    if "array" in spec:
        return _submit_array(client, args, spec)
    job = client.submit(idempotency_key=args.idempotency_key, **spec)
    if args.parsable:
        out(str(job.id))
    else:
        again = " (a retry: the job this key made before)" if job.replayed else ""
        out(f"Submitted job {job.id} to {job.tenant} ({job.state}){again}")
    return EXIT_OK


def check_checkpoint_time(spec: dict[str, Any], where: str = "") -> None:
    """A checkpoint time (``checkpoint_time_s``) is the grace window a job is given when
    asked to stop, before it is killed (the scheduler's ``capped_grace``). A job neither
    checkpointable nor preemptible is never asked to stop (it is no preemption victim):
    its checkpoint time would mean nothing, and the API kept it silently (a researcher's
    session). A preemptible job that does not checkpoint is asked to stop, and the time
    is its window to exit: sent, with a warning that it writes no checkpoint."""
    if spec.get("checkpoint_time_s") is None or spec.get("checkpointable"):
        return
    ckpt, able = flag_for("checkpoint_time_s"), flag_for("checkpointable")
    if not spec.get("preemptible"):
        raise UsageError(f"{where}{ckpt} is how long the job needs to checkpoint when asked "
                         f"to stop, and a job neither {able} nor "
                         f"{flag_for('preemptible')} is never asked to stop: add {able}, "
                         f"or leave {ckpt} out")
    err(f"gpuq submit: warning: {where}{ckpt} without {able}: the job writes no checkpoint; "
        f"as it is {flag_for('preemptible')}, the time is only the grace window it is given "
        "to exit when preempted, before it is killed")


def _submit_array(client: Client, args: argparse.Namespace, spec: dict[str, Any]) -> int:
    """``--array 0-99%8``: one request makes every task (``POST /api/v1/arrays/``). Like
    sbatch, the array's id is printed ("Submitted batch job 412"; ``--parsable``: 412);
    the tasks are 412_0 to 412_99."""
    shape = spec.pop("array")
    made = client.submit_array(count=shape["count"], max_running=shape.get("max_running"),
                               idempotency_key=args.idempotency_key, **spec)
    if args.parsable:
        out(str(made.id))
        return EXIT_OK
    last = f" to {made.id}_{made.count - 1}" if made.count > 1 else ""
    cap = (f", at most {made.max_running} running at once" if made.max_running
           else ", no cap on how many run at once")
    tasks = "task" if made.count == 1 else "tasks"
    again = " (a retry: the array this key made before)" if made.replayed else ""
    out(f"Submitted array {made.id} to {made.tenant}: {made.count} {tasks} "
        f"{made.id}_0{last}{cap}{again}")
    return EXIT_OK


def _default_tenant(client: Client, spec: dict[str, Any]) -> str:
    if spec.get("tenant"):
        return str(spec["tenant"])
    tenant = client.default_tenant()
    if tenant is None:
        mine = [m["tenant"] for m in client.me().get("memberships", [])]
        raise UsageError("--tenant is required: you are a member of "
                         + (", ".join(mine) if mine else "no team (operators name one)"))
    return tenant


#: Words that launch the program rather than name it (``python train.py`` is train.py).
LAUNCHERS = frozenset({"python", "python3", "bash", "sh", "env", "torchrun", "deepspeed",
                       "accelerate", "srun", "mpirun", "uv", "launch", "run"})


def _name_from(command: str) -> str:
    """sbatch names a job after its script: the command's first word that is not a
    launcher, an option or a number, without its path."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for word in words:
        name = Path(word).name
        # an option, its number (--nproc 8) or an assignment is not the program
        if name and not word.startswith("-") and "=" not in word and not word.isdigit() \
                and name not in LAUNCHERS:
            return name[:200]
    return Path(words[0]).name[:200] if words else "job"


# ============================================================================ queue
def _position(r: dict[str, Any], which: str) -> int | None:
    return (r.get("queue_position") or {}).get(which)


def _start(r: dict[str, Any]) -> str | None:
    return r.get("estimate_start_at") if r.get("state") == "QUEUED" else r.get("started_at")


def _job_name(r: dict[str, Any]) -> str:
    """A job as squeue names it: an array's task as ``412_7``, else its id."""
    return str(r.get("array_task") or r.get("id"))


#: The states' longest name (PREEMPT_REQUESTED): a state is not cut ("PREEMPT_R…"; the
#: queue and cancel tables cut CANCELLED to "CANCELL…" at 80 columns until 2026-12-07)
STATE_WIDTH = 17

QUEUE_COLUMNS = (
    # a task shows its name (squeue's JOBID 412_7); csv keeps the id (json has array_task)
    field("ID", "id", right=True, text=_job_name),
    field("NAME", "name", min_width=8),
    field("TEAM", "tenant", min_width=6),
    field("OWNER", "owner", min_width=6),
    field("GPUS", "gpus", right=True),
    field("STATE", "state", min_width=STATE_WIDTH),
    Column("POSITION", "position", lambda r: _position(r, "cluster"), right=True),
    Column("REASON", "reason", lambda r: r.get("pending_reason")
           if r.get("state") == "QUEUED" else None, min_width=10),
    Column("START", "start", _start, lambda r: relative(_start(r)), min_width=6),
)


def queue_records(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    records = [job.to_dict() for job in
               client.jobs(**job_filters(args, default_states=LIVE_STATES))]
    queued = [r for r in records if r.get("state") == "QUEUED"]
    for r in records:
        r["queue_position"] = None
    wanted = queued[: max(0, args.positions)]
    if wanted:
        # one request per job (the list does not carry positions): a few at a time
        with ThreadPoolExecutor(max_workers=4) as pool:
            details = pool.map(lambda r: client.job(r["id"]), wanted)
            for r, detail in zip(wanted, details, strict=True):
                r["queue_position"] = detail.get("queue_position")
    if len(queued) > len(wanted) and args.output == "table" and not args.watch:
        err(f"(positions of the first {len(wanted)} queued jobs only: --positions N)")
    return records


def cmd_queue(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.watch:
        if args.output != "table":
            raise UsageError("--watch redraws a table: leave -o out")
        return watch(lambda: queue_lines(client, args), args.interval, "gpuq queue")
    records = queue_records(client, args)
    emit(args, records, records, QUEUE_COLUMNS)
    return EXIT_OK


def queue_lines(client: Client, args: argparse.Namespace) -> list[str]:
    records = queue_records(client, args)
    return output.table(records, QUEUE_COLUMNS, ellipsis=output.ellipsis_for(sys.stdout))


def watch(lines: Callable[[], list[str]], interval: float, title: str) -> int:
    """Redraw ``lines()`` every ``interval`` seconds, in place on a terminal, until
    Ctrl-C (exit status 0: stopping is what Ctrl-C asks for here)."""
    tty = sys.stdout.isatty()
    stream = sys.stdout
    try:
        if tty:
            stream.write(HIDE + "\x1b[2J")
        while True:
            size = output.live_size(stream) if tty else None
            width = size.columns if size else output.terminal_width()
            stamp = datetime.now().strftime("%H:%M:%S")
            head = f"{title}, every {interval:g}s (Ctrl-C stops)"
            head = output.cut(head, width - len(stamp) - 2).ljust(width - len(stamp)) + stamp
            try:
                body = lines()
            except (ConnectionFailed, ApiError) as error:
                if isinstance(error, Unauthorized):
                    raise
                body = [output.cut(f"(could not read the queue: {error}; trying again)", width)]
            frame = [head, "", *body]
            if size:
                frame = frame[: max(1, size.lines - 1)]
            if tty:
                stream.write(HOME + "".join(line + CLEAR_LINE + "\n" for line in frame)
                             + CLEAR_DOWN)
            else:
                stream.write("\n".join(frame) + "\n\n")
            stream.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if tty:
            stream.write(SHOW)
            stream.flush()


# ============================================================================ show
def _ranges(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``."""
    out_: list[str] = []
    items = sorted(indices)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out_.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out_)


#: What each dependency kind waits for, in words (the API's why_pending says the same).
AWAITS = {"ok": "to complete", "any": "to end", "notok": "to fail or be cancelled"}
#: sbatch's name of each kind.
SBATCH_KIND = {"ok": "afterok", "any": "afterany", "notok": "afternotok"}


def dependency_words(depends_on: Sequence[dict[str, Any]]) -> str:
    """``[{"job": 12, "when": "ok"}]`` -> "waits for job 12 to complete (afterok:12)"."""
    if not depends_on:
        return "-"
    parts = [f"job {d.get('job')} {AWAITS.get(d.get('when') or 'ok', 'to end')}"
             for d in depends_on]
    spec = ",".join(f"{SBATCH_KIND.get(d.get('when') or 'ok', d.get('when'))}:{d.get('job')}"
                    for d in depends_on)
    return f"waits for {', '.join(parts)} ({spec})"


def array_words(job: dict[str, Any]) -> str | None:
    """"task 412_7: task 8 of 100 of array 412, at most 8 at once" (None: not a task)."""
    if job.get("array_id") is None:
        return None
    index, count = job.get("array_index") or 0, job.get("array_count")
    cap = job.get("array_max_running")
    limit = f", at most {cap} at once" if cap else ", no cap on how many run at once"
    return (f"task {job.get('array_task')}: task {index + 1} of {count} of array "
            f"{job.get('array_id')}{limit} (gpuq queue --array {job.get('array_id')} lists "
            "them)")


def never_satisfied_words(job: dict[str, Any]) -> str | None:
    """Why a job was cancelled because a dependency can never be met, from its log row."""
    for row in reversed(job.get("history") or []):
        if row.get("reason") == "DependencyNeverSatisfied":
            d = row.get("detail") or {}
            when = d.get("when") or "ok"
            return (f"Cancelled: job {d.get('job')} ended {d.get('ended')}, so the "
                    f"dependency {SBATCH_KIND.get(when, when)}:{d.get('job')} (waits for it "
                    f"{AWAITS.get(when, 'to end')}) can never be met.")
    return None


def show_value(key: str, value: Any) -> str:
    """A detail field as a person reads it."""
    if key == "depends_on" and isinstance(value, list):
        return dependency_words(value)
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_at") and isinstance(value, str):
        return when(value)
    if key.endswith("_s") and isinstance(value, (int, float)):
        return f"{value} ({format_duration(value)})"
    if key == "queue_position" and isinstance(value, dict):
        return f"{ordinal(value.get('cluster'))} in the cluster, " \
               f"{ordinal(value.get('tenant'))} in the team"
    if key == "estimate" and isinstance(value, dict):
        start = when(value.get("start_at")) or "none yet"
        return f"{start}; basis: {value.get('basis') or '-'}"
    if key == "allocation" and isinstance(value, dict):
        return "; ".join(f"{node}: GPUs {_ranges(gpus)}" for node, gpus in value.items()) \
            or "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


HISTORY_COLUMNS = (
    field("SEQ", "seq", right=True),
    # month, day and time (UTC): the year is rarely news in a job's history. The time and
    # the states keep their width, and the long columns (the detail, then the reason and
    # the actor) are cut: at 80 columns the time was cut to "12-07 06:37…" and the states
    # to "PREEMPT_R…" while the detail kept as much room as they had
    Column("AT", "at", lambda r: r.get("at"), lambda r: absolute(r.get("at"))[5:19],
           min_width=14),
    field("FROM", "from_state", min_width=STATE_WIDTH),
    field("TO", "to_state", min_width=STATE_WIDTH),
    field("REASON", "reason", min_width=6),
    Column("BY", "actor_name", lambda r: r.get("actor_name") or r.get("actor"), min_width=4),
    Column("DETAIL", "detail", lambda r: r.get("detail") or None,
           lambda r: show_value("detail", r["detail"]) if r.get("detail") else "",
           min_width=6),
)
_SECTIONS = ("history", "preemptions", "why_pending")


def why_pending_lines(why: Any, width: int) -> list[str]:
    """The API's ``why_pending`` as ``gpuq why`` and ``gpuq show`` print it: the one thing
    that keeps the job waiting, its figures as a list, and the next step (none when the
    job is not waiting)."""
    if not isinstance(why, dict) or not why.get("headline"):
        return []
    lines = wrap(f"Why: {why['headline']}", width)
    for item in why.get("evidence") or []:
        chunks = wrap(str(item), width, indent="      ")
        lines += ["    - " + chunks[0].lstrip(), *chunks[1:]]
    if why.get("next_step"):
        lines += wrap(f"Next step: {why['next_step']}", width)
    return lines


def history_lines(rows: list[dict[str, Any]], width: int, ellipsis: str) -> list[str]:
    """The history's table. Where a row with its detail is wider than ``width`` (80
    columns are), the detail goes on its own lines under the row, wrapped, and the columns
    that stay are cut only as much as they must."""
    wide = output.table(rows, HISTORY_COLUMNS, width=10**6)
    if max(output.cell_width(line) for line in wide) <= width:
        return wide
    table = output.table(rows, HISTORY_COLUMNS[:-1], width=width, ellipsis=ellipsis)
    out = table[:1]
    for row, line in zip(rows, table[1:], strict=True):
        out.append(line)
        if row.get("detail"):
            out += wrap(show_value("detail", row["detail"]), width, indent=" " * 7)
    return out


def detail_lines(job: dict[str, Any], width: int, ellipsis: str) -> list[str]:
    lines = [output.cut(f"Job {job.get('id')}: {job.get('name')}", width, ellipsis)]
    for sentence in (array_words(job), never_satisfied_words(job)):
        if sentence:
            lines += wrap(sentence[0].upper() + sentence[1:], width)
    keys = [k for k in job if k not in _SECTIONS]
    key_width = min(24, max(len(k) for k in keys)) if keys else 0
    for key in keys:
        value = show_value(key, job[key])
        chunks = output.wrap(value, max(10, width - key_width - 3)) or ["-"]
        lines.append(f"  {key.ljust(key_width)} {chunks[0]}")
        lines += [" " * (key_width + 3) + chunk for chunk in chunks[1:]]
    # printed as prose, as `gpuq why` does (it was one line of JSON among the fields)
    why = why_pending_lines(job.get("why_pending"), width)
    if why:
        lines += ["", "Why pending", *why]
    lines += ["", "History"]
    lines += ["  " + line for line in history_lines(job.get("history") or [], width - 2,
                                                   ellipsis)]
    for p in job.get("preemptions") or []:
        lines += ["", f"Preempted {when(p.get('at'))} for {made_room_for(p)}"]
        lines += wrap(f"{p.get('why') or ''} ({preemption_cost(p)})", width)
    return [output.cut(line, width, ellipsis) for line in lines]


def preemption_cost(p: dict[str, Any]) -> str:
    """What a preemption cost, in words: the work really lost once the job stopped (the
    API's ``work_lost_s``), else the estimate the scheduler weighed when it chose it
    (``cost_s``). Both read "work lost" until 2026-12-07, and the estimate (since the
    checkpoint then, plus the restart) was far more than a victim that checkpointed in its
    grace window lost."""
    if p.get("work_lost_s") is not None:
        since = "its last checkpoint" if p.get("checkpoint_at") else "its run's start"
        return (f"stopped {when(p.get('stopped_at'))}: work lost "
                f"{format_duration(p['work_lost_s'])}, since {since}")
    estimate = (f"estimated when chosen: {format_duration(p.get('cost_s'))} of work, "
                f"{p.get('est_gpu_s_lost') or 0:.0f} GPU-s")
    return estimate if p.get("stopped_at") is None else estimate + "; stopped"


def cmd_show(args: argparse.Namespace) -> int:
    job = client_for(args).job(args.id).to_dict()
    if args.output == "table":
        ellipsis = output.ellipsis_for(sys.stdout)
        out("\n".join(detail_lines(job, output.terminal_width(), ellipsis)))
    else:
        # csv is a table: the history's rows; json and yaml give the whole detail
        emit(args, job, job.get("history") or [], HISTORY_COLUMNS)
    return EXIT_OK


# ============================================================================ why
WHY_COLUMNS = (
    field("ID", "id"), field("STATE", "state"), field("REASON", "pending_reason"),
    field("SENTENCE", "pending_sentence"),
    Column("POSITION", "position", lambda r: _position(r, "cluster")),
    Column("TEAM_POSITION", "position_in_team", lambda r: _position(r, "tenant")),
    Column("START", "estimate_start_at", lambda r: (r.get("estimate") or {}).get("start_at")),
    Column("BASIS", "estimate_basis", lambda r: (r.get("estimate") or {}).get("basis")),
    Column("HINTS", "hints", lambda r: " | ".join(r.get("hints") or [])),
)


def why_data(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"id": job.get("id"), "name": job.get("name"),
                            "tenant": job.get("tenant"), **explain.explanation_fields(job)}
    if job.get("state") == "QUEUED":
        tenant = None
        if job.get("pending_reason") in ("QuotaLimit", "UserLimit", "Priority"):
            tenant = client.tenant(job["tenant"]).to_dict()
        awaited = None
        if job.get("pending_reason") == "Dependency":
            awaited = awaited_jobs(client, job.get("depends_on") or [])
        data["hints"] = explain.hints(job, tenant, awaited)
    else:
        data["hints"] = []
    data["preemptions"] = job.get("preemptions") or []
    return data


#: The jobs a waiting job depends on that ``gpuq why`` reads (a request each).
AWAITED_READS = 20


def awaited_jobs(client: Client, depends_on: Sequence[dict[str, Any]]
                 ) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each dependency with the job it names as read now (None: not yours to see any
    more, or gone), the first :data:`AWAITED_READS` of them."""
    found: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for dep in list(depends_on)[:AWAITED_READS]:
        try:
            found.append((dep, client.job(int(dep["job"])).to_dict()))
        except ApiError:
            found.append((dep, None))
    return found


def made_room_for(preemption: dict[str, Any]) -> str:
    """The job a preemption made room for: "job 12", or, when it is not the reader's to
    see, the API's words for it ("a job of team pretrain"; it printed "job -")."""
    if preemption.get("for_job") is not None:
        return f"job {preemption['for_job']}"
    said = (preemption.get("detail") or {}).get("for")
    return said if isinstance(said, str) and said.strip() else "another job"


def why_lines(data: dict[str, Any], job: dict[str, Any], width: int) -> list[str]:
    state = data.get("state")
    head = f"Job {data['id']} ({data.get('name')}, team {data.get('tenant')})"
    if job.get("array_task"):
        head = f"Task {job['array_task']} (job {data['id']}, {data.get('name')}, team " \
               f"{data.get('tenant')})"
    lines: list[str] = []
    if state == "QUEUED":
        lines += wrap(f"{head} is waiting: {data.get('pending_reason') or 'None'}.", width, "")
        if data.get("pending_sentence"):
            lines += wrap(str(data["pending_sentence"]), width)
        lines += why_pending_lines(data.get("why_pending"), width)
        pos = data.get("queue_position") or {}
        if pos.get("cluster") is None:
            # a dependency not met or an array at its cap: it waits off the queues
            lines += wrap("Position: not in line yet (it waits off the queue; see Why).",
                          width, "")
        else:
            lines += wrap(f"Position: {ordinal(pos.get('cluster'))} in the cluster's order, "
                          f"{ordinal(pos.get('tenant'))} in team {data.get('tenant')}'s "
                          "queue.", width, "")
        if pos.get("deadline_at"):
            lines += wrap(f"Its deadline in the team's order: {when(pos['deadline_at'])} "
                          "(submit time + queue_stretch x its time limit x its GPUs: a job of its "
                          "priority sent later goes ahead only with an earlier one).", width)
        estimate = data.get("estimate") or {}
        start = estimate.get("start_at")
        lead = "at the latest " if estimate.get("upper_bound") else ""
        lines.append(f"Estimated start: {lead}{when(start)}." if start else
                     "Estimated start: none yet.")
        if start and estimate.get("kind"):
            lines += wrap(f"Kind: {estimate['kind']} ({ESTIMATE_KINDS.get(estimate['kind'], '')})"
                          .replace(" ()", ""), width)
        if estimate.get("basis"):
            lines += wrap(f"Basis: {plain_instants(estimate['basis'])}", width)
    elif state in FINAL_STATES:
        lines += wrap(f"{head} is {state}: it has finished, and will not start again.", width,
                      "")
        if never_satisfied_words(job):
            lines += wrap(str(never_satisfied_words(job)), width)
    elif state in ("PLACING", "RUNNING", "PREEMPT_REQUESTED", "CHECKPOINTING"):
        nodes = ", ".join(job.get("allocation") or {}) or "its nodes"
        since = f", started {relative(job.get('started_at'))}" if job.get("started_at") else ""
        lines += wrap(f"{head} is {state} on {nodes}{since}: it is not waiting.", width, "")
    else:
        lines += wrap(f"{head} is {state}: it goes back to the queue at the next tick.", width,
                      "")
    for key, value in data.items():
        if key in explain.KNOWN or key in ("id", "name", "tenant", "hints", "preemptions",
                                           "why_pending"):
            continue
        label = key.replace("_", " ").capitalize()
        if isinstance(value, (dict, list)):
            lines.append(f"{label}:")
            lines += ["  " + line for line in output.to_yaml(value).splitlines()]
        else:
            lines += wrap(f"{label}: {show_value(key, value)}", width, indent="")
    if data.get("preemptions"):
        last = data["preemptions"][-1]
        lines += wrap(f"Last preempted {relative(last.get('at'))} for {made_room_for(last)}: "
                      f"{last.get('why') or ''}", width, "")
    if data.get("hints"):
        lines.append("To start sooner:")
        for hint in data["hints"]:
            chunks = wrap(hint, width, indent="    ")
            lines += ["  - " + chunks[0].lstrip(), *chunks[1:]]
    return [output.cut(line, width) for line in lines]


def cmd_why(args: argparse.Namespace) -> int:
    client = client_for(args)
    job = client.job(args.id).to_dict()
    data = why_data(client, job)
    if args.output == "table":
        out("\n".join(why_lines(data, job, output.terminal_width())))
    else:
        emit(args, data, [data], WHY_COLUMNS)
    return EXIT_OK


# ============================================================================ cancel
CANCEL_COLUMNS = (field("ID", "id", right=True, text=_job_name),
                  field("NAME", "name", min_width=8),
                  field("TEAM", "tenant", min_width=6), field("OWNER", "owner", min_width=6),
                  field("STATE", "state", min_width=STATE_WIDTH))


def cancel_target(text: str) -> str:
    """A cancel's argument: a job's id (``412``), a task's name (``412_7``), or a whole
    array (``412_*``: quoted, so the shell leaves the star alone)."""
    text = text.strip()
    if text.endswith("_*") and text[:-2].isascii() and text[:-2].isdigit():
        if int(text[:-2]) > MAX_JOB_ID:
            raise ValueError(f"{text!r} is not a job: a job's id has at most 18 digits")
        return text
    try:
        parse_ref(text)
    except ValueError as error:
        if "18 digits" in str(error):
            raise
        raise ValueError(f"{text!r} is not a job: a job's id (412), a task's name (412_7), "
                         "or a whole array ('412_*', or --array 412)") from None
    return text


def cmd_cancel(args: argparse.Namespace) -> int:
    client = client_for(args)
    by_filter = bool(args.mine or args.tenant or args.state)
    arrays = [int(t[:-2]) for t in args.ids if t.endswith("_*")] + list(args.arrays or [])
    refs = [t for t in args.ids if not t.endswith("_*")]
    if (refs or arrays) and by_filter:
        raise UsageError("cancel by IDs (or --array) or by filter (--mine, --tenant, "
                         "--state), not both")
    if not refs and not arrays and not by_filter:
        raise UsageError("say which jobs: IDs, --array ID, or --mine, --tenant, --state")
    failed = 0
    for array_id in dict.fromkeys(arrays):
        try:
            done = client.cancel_array(array_id, why=args.why)
        except ApiError as error:
            failed += 1
            err(f"gpuq cancel: array {array_id}: {error.message}")
            continue
        tasks = "task" if len(done) == 1 else "tasks"
        out(f"Cancelled array {array_id}: {len(done)} {tasks} (every task that had not "
            "ended)")
    if by_filter:
        targets = [job.to_dict() for job in
                   client.jobs(**job_filters(args, default_states=LIVE_STATES))]
        ended = sum(1 for t in targets if t.get("state") in FINAL_STATES)
        targets = [t for t in targets if t.get("state") not in FINAL_STATES]
        if not targets:
            # "No job matches" beside a queue that listed three COMPLETED ones read as a
            # bug (a pipeline author's session, 2026-12-07)
            have = "job has" if ended == 1 else "jobs have"
            out(f"Nothing to cancel: the {ended} matching {have} ended (COMPLETED, FAILED "
                "or CANCELLED)." if ended else "No job matches: nothing to cancel.")
            return EXIT_OK
        if not args.yes:
            sys.stderr.write("\n".join(output.table(targets, CANCEL_COLUMNS)) + "\n")
            these = "this job" if len(targets) == 1 else f"these {len(targets)} jobs"
            if not confirm(f"Cancel {these}? [y/N] "):
                err("Nothing cancelled.")
                return EXIT_ERROR
        refs = [str(t["id"]) for t in targets]
    for ref in refs:
        try:
            job = client.cancel(ref, why=args.why)
        except ApiError as error:
            failed += 1
            err(f"gpuq cancel: {about_job(ref, error.message)}")
            continue
        if job.get("array_task"):
            out(f"Cancelled task {job.array_task} (job {job.id}, {job.name})")
            if not by_filter and "_" not in ref:
                # scancel 412 cancels the whole array: here 412 is task 0 alone
                err(f"(only task {job.array_task} of array {job.array_id}: gpuq cancel "
                    f"--array {job.array_id} cancels every task)")
        else:
            out(f"Cancelled job {job.id} ({job.name})")
    return EXIT_ERROR if failed else EXIT_OK


#: An API message that names the job it is about first: "job 66: illegal transition ...".
_ABOUT_JOB = re.compile(r"^job ([0-9]+): (.*)$", re.DOTALL)


def about_job(ref: str, message: str) -> str:
    """``job 65: <message>``, once: the API's message may name the job itself ("job 65:
    illegal transition ..." was printed "job 65: job 65: illegal transition ..."). A task
    is ``task 65_1 (job 66): ...`` ("job 65_1: job 66: ..." named it twice, and a
    missing one "job 65_9: No task 65_9: ...": a researcher's session)."""
    if "_" not in ref:
        return message if message.startswith(f"job {ref}:") else f"job {ref}: {message}"
    named = _ABOUT_JOB.match(message)
    if named:
        return f"task {ref} (job {named.group(1)}): {named.group(2)}"
    if re.search(rf"\b{re.escape(ref)}\b", message):
        return message
    return f"task {ref}: {message}"


# ============================================================================ logs
def new_text(old: str, new: str) -> str:
    """What ``new`` (a log's latest tail) adds to ``old`` (the tail printed before).

    A tail is the last N characters of a growing file: the new one is the old one slid
    along. The longest end of ``old`` that begins ``new`` is what was printed already; a
    tail with no such overlap (the job ran again, elsewhere) is all new."""
    if not old or new == old:
        return new if not old else ""
    if new.startswith(old):
        return new[len(old):]
    return new[_overlap(old, new):]


def _overlap(old: str, new: str) -> int:
    """The largest k with ``old.endswith(new[:k])``."""
    limit = min(len(old), len(new))
    anchor = old[-min(64, len(old)):]
    pos = new.rfind(anchor, 0, limit)
    while pos >= 0:  # candidates ending at an occurrence of old's last characters
        k = pos + len(anchor)
        if old.endswith(new[:k]):
            return k
        pos = new.rfind(anchor, 0, k - 1)
    for k in range(min(limit, len(anchor) - 1), 0, -1):  # an overlap shorter than anchor
        if old.endswith(new[:k]):
            return k
    return 0


def no_log_words(ref: str, job: dict[str, Any]) -> str:
    """Why a job has no log, from its state: "it has not run" was said of a COMPLETED job
    that wrote nothing (its agent sent a tail only once the job's output had grown: a
    researcher's session; agents since send one at every run's end)."""
    state = job.get("state")
    ran = job.get("started_at") is not None or any(
        row.get("to_state") == "RUNNING" for row in job.get("history") or [])
    if not ran:
        if state in FINAL_STATES:
            return f"(no log for job {ref}: it is {state} and never ran)"
        return f"(no log yet for job {ref}: it has not run yet; it is {state})"
    ended = "it ran and is" if state in FINAL_STATES else "it is"
    return (f"(no log {'for' if state in FINAL_STATES else 'yet for'} job {ref}: {ended} "
            f"{state}, and no log of it has reached the server: its node's agent sends one "
            "as the job writes output and when it ends)")


def cmd_logs(args: argparse.Namespace) -> int:
    client = client_for(args)
    job = Job(client, {"id": client.job_id(args.id)})
    tail = job.logs()
    if not args.follow:
        sys.stdout.write(tail.stdout)
        sys.stderr.write(tail.stderr)
        if tail.at is None:
            err(no_log_words(args.id, job.refresh().to_dict()))
        return EXIT_OK
    seen = {"out": "", "err": ""}
    last_round = False
    try:
        while True:
            for key, text, stream in (("out", tail.stdout, sys.stdout),
                                      ("err", tail.stderr, sys.stderr)):
                stream.write(new_text(seen[key], text))
                stream.flush()
                seen[key] = text
            if last_round:
                return EXIT_OK
            # a final job's agent sends the tail once more as it exits: read once more
            last_round = job.refresh().is_final
            time.sleep(args.interval)
            tail = job.logs()
    except KeyboardInterrupt:
        return EXIT_OK


# ============================================================================ share
def _fixed(digits: int, key: str) -> Callable[[dict[str, Any]], str]:
    def text(r: dict[str, Any]) -> str:
        value = r.get(key)
        return "-" if value is None else f"{value:.{digits}f}"

    return text


SHARE_COLUMNS = (
    field("TEAM", "name", min_width=6),
    field("GUARANTEE", "guaranteed_gpus", right=True),
    field("HELD", "current_gpus", right=True),
    field("BORROWED", "borrowed_gpus", right=True),
    field("BORROW_LIMIT", "borrow_limit_gpus", right=True),
    Column("USAGE_H", "usage_gpu_h", lambda r: r.get("usage_gpu_h"), _fixed(1, "usage_gpu_h"),
           right=True),
    # the share the rank was made from (ranked_share), in decayed GPU-hours per guaranteed
    # GPU as the dashboard shows it: the share "now" in GPU-seconds, beside a rank made
    # up to a minute earlier, read as an order broken (found 2026-12-07). csv's column of
    # the API's name carries the API's value, GPU-seconds, as -o json does (it carried
    # the table's hours under that name: a researcher's session)
    Column("SHARE_H", "ranked_share", lambda r: r.get("ranked_share"),
           lambda r: _dash_or(_hours(r.get("ranked_share")), "{:.2f}"), right=True),
    Column("RANK", "share_rank", lambda r: r.get("share_rank"),
           lambda r: str(r.get("share_rank") or "-"), right=True),
)


def _hours(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) / 3600


def _dash_or(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def cmd_share(args: argparse.Namespace) -> int:
    tenants = [t.to_dict() for t in client_for(args).tenants()]
    # the fair-share order: who is served first (lowest share) at the top, unranked last
    tenants.sort(key=lambda t: (t.get("share_rank") is None, t.get("share_rank") or 0,
                                t.get("name") or ""))
    emit(args, tenants, tenants, SHARE_COLUMNS)
    return EXIT_OK


# ============================================================================ wait
def cmd_wait(args: argparse.Namespace) -> int:
    job = first_read(lambda: client_for(args).job(args.id), args)
    try:
        job.wait(timeout=args.timeout, poll_s=args.interval)
    except TimeoutError:
        err(f"gpuq wait: job {args.id} is still {job.state} after "
            f"{format_duration(args.timeout)}")
        return EXIT_TIMEOUT
    if not args.quiet:
        # a task by its name, as it was asked for ("Job 31_0", not its array's id)
        out(f"Job {job.ref} {job.state}")
    return WAIT_EXIT.get(job.state, EXIT_ERROR)


def first_read(read: Callable[[], Any], args: argparse.Namespace) -> Any:
    """``read()``, tried again every ``--interval`` while the server cannot be reached (or
    answers 5xx), as the wait itself polls on through an outage (``client.OUTAGE_S``),
    and within ``--timeout``: a wait started while the server restarted gave up after
    8 s (a researcher's session, 2026-12-07)."""
    start = time.monotonic()
    while True:
        try:
            return read()
        except (ConnectionFailed, ServerError):
            waited = time.monotonic() - start
            left = None if args.timeout is None else args.timeout - waited
            if waited >= OUTAGE_S or (left is not None and left <= args.interval):
                raise
            time.sleep(args.interval)


# ============================================================================ parser
def add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=output.FORMATS, default="table",
                        help="table (default, fits the terminal), or json, yaml, csv "
                             "(stable, for scripts)")


def add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mine", action="store_true", help="your own jobs only")
    parser.add_argument("--tenant", help="one team's jobs")
    parser.add_argument("--state", action="append", metavar="STATE",
                        help="only jobs in these states (repeat, or comma-separate)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuq", description="The GPU scheduler's command line (docs/cli.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Configuration: GPUQ_URL and GPUQ_TOKEN, or ~/.config/gpuq/config.toml "
               "(gpuq login writes it).")
    parser.add_argument("--version", action="version", version=f"gpuq {__version__}")
    parser.add_argument("--url", default=None,
                        help="the scheduler's URL (default: $GPUQ_URL, or the config file)")
    # --url before or after the command: the command's own copy leaves the value alone
    # when it is not given there
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help="the scheduler's URL (default: $GPUQ_URL, or the config file)")
    subparsers = parser.add_subparsers(dest="gpuq_command", required=True, metavar="COMMAND")

    class Commands:
        @staticmethod
        def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
            return subparsers.add_parser(name, parents=[common], **kwargs)

    commands = Commands()

    p = commands.add_parser("login", help="sign in and store an API token")
    p.add_argument("--username", help="default: asked")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from standard input (scripts)")
    p.add_argument("--with-token", action="store_true",
                   help="store a token read from standard input instead of signing in")
    p.add_argument("--name", help="the token's name (default: 'gpuq on HOST')")
    p.set_defaults(run=cmd_login)

    p = commands.add_parser("submit", help="submit a job (sbatch)",
                            description="Submit a job. A flag overrides the job file's "
                                        "value (for every job of a batch file).")
    p.add_argument("-f", "--file", help="a job (JSON, or flat 'key: value' YAML), or a "
                                        "batch (a JSON list)")
    for f in FIELDS:
        if f.is_flag_only:
            p.add_argument(f.flag, dest=f.dest, action=argparse.BooleanOptionalAction,
                           default=None, help=f.help)
        else:
            p.add_argument(f.flag, dest=f.dest, type=option_type(f.parse), default=None,
                           metavar=f.metavar, help=f.help)
    p.add_argument("--parsable", action="store_true", help="print the job's id alone")
    p.add_argument("--idempotency-key", metavar="KEY", default=None,
                   help="your own key (default: a new one, so the retries never make two "
                        "jobs); the same key again returns the job it made")
    p.add_argument("cmd", nargs="*", metavar="-- CMD", help="the command, after --")
    p.set_defaults(run=cmd_submit, field_label=flag_for)

    p = commands.add_parser("queue", help="list jobs (squeue)")
    add_filters(p)
    p.add_argument("--user", help="one user's jobs")
    p.add_argument("--array", type=array_option, metavar="ID", help="one job array's tasks")
    p.add_argument("--all", action="store_true", help="finished jobs too")
    p.add_argument("--positions", type=option_type(count_option), default=DEFAULT_POSITIONS,
                   metavar="N",
                   help=f"read the queue position of the first N queued jobs (a request "
                        f"each; default {DEFAULT_POSITIONS}; 0: none)")
    p.add_argument("--watch", action="store_true", help="redraw in place until Ctrl-C")
    p.add_argument("--interval", type=option_type(interval_option), default=2.0,
                   metavar="SECONDS", help="between two redraws (default 2)")
    add_output(p)
    p.set_defaults(run=cmd_queue)

    p = commands.add_parser("show", help="a job: every field and the history")
    p.add_argument("id", type=option_type(job_ref), metavar="ID",
                   help="a job's id, or an array task's name (412_7)")
    add_output(p)
    p.set_defaults(run=cmd_show)

    p = commands.add_parser("why", help="why a job waits, and what would start it sooner")
    p.add_argument("id", type=option_type(job_ref), metavar="ID",
                   help="a job's id, or an array task's name (412_7)")
    add_output(p)
    p.set_defaults(run=cmd_why)

    p = commands.add_parser("cancel", help="cancel jobs (scancel)")
    p.add_argument("ids", nargs="*", type=option_type(cancel_target), metavar="ID",
                   help="a job's id, a task's name (412_7), or a whole array ('412_*')")
    p.add_argument("--array", dest="arrays", type=array_option, action="append", metavar="ID",
                   help="cancel every task of this array that has not ended (repeat for "
                        "more)")
    add_filters(p)
    p.add_argument("--why", type=option_type(why_option), default=None,
                   help="recorded in the job's log (printable text, at most 500 characters)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask (filters)")
    p.set_defaults(run=cmd_cancel)

    p = commands.add_parser("logs", help="a job's output")
    p.add_argument("id", type=option_type(job_ref), metavar="ID",
                   help="a job's id, or an array task's name (412_7)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="follow it until the job is final (or Ctrl-C)")
    p.add_argument("--interval", type=option_type(interval_option), default=2.0,
                   metavar="SECONDS", help="between two reads with -f (default 2)")
    p.set_defaults(run=cmd_logs)

    p = commands.add_parser("share", help="fair share per team (sshare)")
    add_output(p)
    p.set_defaults(run=cmd_share)

    p = commands.add_parser("wait", help="wait until a job is final; the exit status says "
                                         "how it ended")
    p.add_argument("id", type=option_type(job_ref), metavar="ID",
                   help="a job's id, or an array task's name (412_7)")
    p.add_argument("--timeout", type=option_type(seconds_option), default=None,
                   metavar="DURATION", help="give up after this long (exit status 5)")
    p.add_argument("--interval", type=option_type(interval_option), default=5.0,
                   metavar="SECONDS", help="between two reads (default 5)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    p.set_defaults(run=cmd_wait)
    return parser


# ============================================================================ main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    label: Callable[[str | None], str | None] = getattr(args, "field_label", filter_flag)
    prog = f"gpuq {args.gpuq_command}"
    try:
        return int(args.run(args))
    except UsageError as error:
        err(f"{prog}: error: {error}")
        return EXIT_USAGE
    except Unauthorized as error:
        err(f"{prog}: error: {error.message} (run `gpuq login` for a new token)")
        return EXIT_ERROR
    except ApiError as error:
        # each of the API's messages at its field (a flag, for submit): 2 for bad input
        for e in error.errors:
            where = label(e.get("field"))
            err(f"{prog}: error: {where + ': ' if where else ''}{e.get('message', '')}")
        return EXIT_USAGE if isinstance(error, InvalidRequest) else EXIT_ERROR
    except (ConfigError, ConnectionFailed, LoginRefused, GpuqError) as error:
        err(f"{prog}: error: {error}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        # --watch and logs -f run until Ctrl-C: one pressed before the first frame or
        # line (the first request under way) stops them as well
        until_ctrl_c = getattr(args, "watch", False) or getattr(args, "follow", False)
        return EXIT_OK if until_ctrl_c else EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`gpuq queue | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


__all__ = ["main", "new_text"]
