"""Metrics (Prometheus) and structured logs of the production path.

**Metrics.** Module-level ``prometheus_client`` metrics, recorded by :func:`step_observed`
(the one place the tick's entry points, the Celery task and ``run_scheduler``, run a
:meth:`LeaderLoop.step`) and exposed by the :func:`metrics` view at ``/metrics``.
docs/operations.md lists them. The tick runs in a worker process and the view in a web
process, so with ``PROMETHEUS_MULTIPROC_DIR`` set (prometheus_client's multiprocess mode,
the library's standard answer for gunicorn and prefork workers) every process of the host
writes its samples to files in that directory and the view merges them. Without it each
process exposes only its own registry (``run_scheduler --metrics-port`` serves the loop's).

**Logs.** :class:`JsonFormatter` writes one JSON object per line; :class:`LogContextFilter`
adds the fields bound with :func:`log_context` (the holder, the tick id) to every record
of the step. ``LOG_FORMAT=json|text`` picks the formatter in settings.LOGGING.

Nothing here is imported by the core; models are imported lazily (the logging config
imports this module before the apps are ready).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from collections import Counter as Tally
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

    from scheduler_app.services.leader import LeaderLoop, StepReport

log = logging.getLogger("scheduler_app.tick")

# --------------------------------------------------------------------------- metrics
# Gauges say how to merge the processes' values in multiprocess mode: "livemostrecent" for
# what only the leader sets (the latest writer is the current leader; a dead process's
# values are dropped), "livemax" for per-process values that carry their own labels.

TICK_DURATION = Histogram(
    "scheduler_tick_duration_seconds",
    "Wall time of one leader step: lease, catch-up or rebuild, core tick, persistence.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
)
TICK_DECISIONS = Histogram(
    "scheduler_tick_decisions",
    "Decisions (transition rows) one leader tick wrote.",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
)
DECISIONS = Counter(
    "scheduler_decisions_total", "Transition rows the leader wrote, by reason.", ["reason"]
)
TICKS = Counter("scheduler_ticks_total", "Steps run, by role (leader or standby).", ["role"])
TICKS_FAILED = Counter(
    "scheduler_ticks_failed_total",
    "Steps that failed (lost lease, conflict, database error): nothing was written and the "
    "in-memory state was dropped.",
)
REBUILDS = Counter(
    "scheduler_state_rebuilds_total", "Times the leader rebuilt its state from the database."
)
FOLLOWED = Counter(
    "scheduler_log_rows_followed_total",
    "Transition rows written by others (submits, agents) the leader folded into its state.",
)
BUDGET_EXHAUSTED = Counter(
    "scheduler_tick_budget_exhausted_total",
    "Ticks the core cut short at its wall-time budget (the rest of the queue waits a tick).",
)
QUEUE_DEPTH = Gauge(
    "scheduler_queue_depth",
    "Queued jobs in the scheduler's queues by tenant and size class (GPUs: 1, 2-8, 9-64, "
    "65-512, 513+); not those waiting off them on a dependency or their array's cap "
    "(scheduler_pending_jobs counts those by reason).",
    ["tenant", "size_class"],
    multiprocess_mode="livemostrecent",
)
PENDING = Gauge(
    "scheduler_pending_jobs",
    "Queued jobs by pending reason, as of the last tick.",
    ["reason"],
    multiprocess_mode="livemostrecent",
)
PREEMPTIONS = Counter(
    "scheduler_preemptions_total", "Jobs the scheduler asked to stop (PreemptRequested rows)."
)
PREEMPTION_KILLS = Counter(
    "scheduler_preemption_kills_total",
    "Preempted jobs killed at the end of their grace window (GraceExpired rows).",
)
GPU_HOURS_LOST = Counter(
    "scheduler_preemption_gpu_hours_lost_total",
    "GPU-hours the preemptions cost, as the core estimated when it chose the victims "
    "(work since the last checkpoint plus restart time, times GPUs).",
)
LEADER = Gauge(
    "scheduler_leader",
    "1 if this scheduler process holds the leader lease, 0 if it is a standby.",
    ["holder"],
    multiprocess_mode="livemax",
)
LEASE_TOKEN = Gauge(
    "scheduler_lease_token",
    "Fencing token of the current leader's lease (grows at every change of leader).",
    multiprocess_mode="livemostrecent",
)
QUARANTINED = Gauge(
    "scheduler_quarantined",
    "Nodes and jobs the leader's last build could not apply and left out of scheduling "
    "(their nodes drained, the reason in the log).",
    multiprocess_mode="livemostrecent",
)
EARLY_TICKS = Counter(
    "scheduler_early_tick_requests_total",
    "Early-tick requests after a submit, cancel or exit, by outcome "
    "(enqueued, debounced, no_broker, broker_error, cache_error, breaker_open).",
    ["outcome"],
)

_LEADER_GAUGES = (QUEUE_DEPTH, PENDING)


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def log_seq() -> int:
    """The highest Transition seq committed now (the rows a step writes come after it)."""
    from scheduler_app.models import Transition

    return Transition.objects.order_by("-id").values_list("id", flat=True).first() or 0


def step_observed(loop: LeaderLoop) -> StepReport:
    """One :meth:`LeaderLoop.step`, with the tick's log line and metrics.

    The entry points call this, never ``loop.step`` directly. Observation never breaks a
    tick: a failure to record is logged and the report returned as is.
    """
    since = _safe(log_seq, default=None)
    with log_context(holder=loop.holder):
        report = loop.step()
    with log_context(holder=loop.holder, tick_id=report.tick_id):
        _safe(lambda: step_record(loop=loop, report=report, since_seq=since), default=None)
        level = logging.WARNING if report.error else logging.INFO
        log.log(level, "tick %s", report.line(), extra={"tick": step_fields(report)})
    return report


def step_fields(report: StepReport) -> dict[str, Any]:
    """The report as the JSON log's ``tick`` object."""
    fields: dict[str, Any] = {
        "holder": report.holder,
        "leader": report.leader,
        "token": report.token,
        "rebuilt": report.rebuilt,
        "caught_up": report.caught_up,
        "decisions": report.decisions,
        "duration_ms": round(report.duration_ms, 1),
    }
    if report.error:
        fields["error"] = report.error
    if report.quarantined:
        fields["quarantined"] = report.quarantined
    for key in ("placed", "backfilled", "preempt_requests", "examined", "budget_exhausted"):
        if key in report.stats:
            fields[key] = report.stats[key]
    return fields


def step_record(*, loop: LeaderLoop, report: StepReport, since_seq: int | None) -> None:
    """Record one step's metrics: from the report, the rows it wrote (seq > since_seq,
    its tick id) and the leader's in-memory state (read only)."""
    LEADER.labels(holder=report.holder).set(1 if report.leader else 0)
    if report.error:
        TICKS_FAILED.inc()
    if not report.leader:
        TICKS.labels(role="standby").inc()
        if not multiprocess_dir():
            # a former leader's queue figures would be stale (multiprocess mode keeps the
            # most recent writer's instead: the new leader's)
            for gauge in _LEADER_GAUGES:
                gauge.clear()
        return
    TICKS.labels(role="leader").inc()
    TICK_DURATION.observe(report.duration_ms / 1000)
    if report.token is not None:
        LEASE_TOKEN.set(report.token)
    if report.error:
        return
    QUARANTINED.set(report.quarantined)
    TICK_DECISIONS.observe(report.decisions)
    if report.rebuilt:
        REBUILDS.inc()
    FOLLOWED.inc(report.caught_up)
    if report.stats.get("budget_exhausted"):
        BUDGET_EXHAUSTED.inc()
    if report.decisions and since_seq is not None:
        _record_rows(tick_id=report.tick_id, since_seq=since_seq)
    if loop.scheduler is not None:
        _record_queues(loop)


def _record_rows(*, tick_id: str, since_seq: int) -> None:
    from scheduler_app.core.states import Reason
    from scheduler_app.models import Transition

    rows = Transition.objects.filter(id__gt=since_seq, tick_id=tick_id).values_list(
        "reason", "detail__est_gpu_s_lost"
    )
    reasons: Tally[str] = Tally()
    lost_gpu_s = 0.0
    for reason, est_gpu_s_lost in rows:
        reasons[reason] += 1
        if reason == Reason.PREEMPT_REQUESTED and est_gpu_s_lost:
            lost_gpu_s += float(est_gpu_s_lost)
    for reason, n in reasons.items():
        DECISIONS.labels(reason=reason).inc(n)
    PREEMPTIONS.inc(reasons[Reason.PREEMPT_REQUESTED])
    PREEMPTION_KILLS.inc(reasons[Reason.GRACE_EXPIRED])
    GPU_HOURS_LOST.inc(lost_gpu_s / 3600)


def _record_queues(loop: LeaderLoop) -> None:
    """Queue depth per (tenant, size class) from the core's counters (O(tenants)); the
    pending reasons by one pass over the core's records (O(jobs), ~10 ms at 100,000)."""
    from scheduler_app.core.states import JobState, PendingReason
    from scheduler_app.core.types import SIZE_CLASS_LABELS

    sched = loop.scheduler
    assert sched is not None
    for tenant in sched.tenant_names:
        for index, label in enumerate(SIZE_CLASS_LABELS):
            depth = sched.queues.count((tenant, index))
            QUEUE_DEPTH.labels(tenant=tenant, size_class=label).set(depth)
    pending: Tally[str] = Tally()
    for rec in sched.jobs.values():
        if rec.state == JobState.QUEUED:
            pending[rec.pending_reason.value] += 1
    for reason in PendingReason:
        PENDING.labels(reason=reason.value).set(pending[reason.value])


def early_tick_counted(outcome: str) -> None:
    EARLY_TICKS.labels(outcome=outcome).inc()


def _safe(fn: Any, *, default: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - observing must never break the tick
        log.warning("recording the tick's metrics failed", exc_info=True)
        return default


def registry() -> CollectorRegistry:
    """What /metrics exposes: every process's samples in multiprocess mode, else this
    process's own registry."""
    if not multiprocess_dir():
        return REGISTRY
    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged)
    return merged


def metrics(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus text format. With settings.METRICS_TOKEN set, only
    for ``Authorization: Bearer <token>`` (Prometheus' ``authorization`` scrape option)."""
    from django.conf import settings
    from django.http import HttpResponse

    token = getattr(settings, "METRICS_TOKEN", "")
    if token and request.headers.get("Authorization", "") != f"Bearer {token}":
        return HttpResponse("metrics need a bearer token\n", status=401,
                            content_type="text/plain")
    lease = CollectorRegistry()
    lease.register(_LeaseCollector())
    return HttpResponse(generate_latest(registry()) + generate_latest(lease),
                        content_type=CONTENT_TYPE_LATEST)


class _LeaseCollector:
    """The leader's lease, read from the database at each scrape: the one view of
    "a scheduler runs" that a crash cannot leave stale (a process killed with SIGKILL
    keeps its ``scheduler_leader`` series at 1 in the multiprocess directory: found
    2026-12-07). Served by /metrics only (it needs the database)."""

    def collect(self) -> Iterator[Any]:
        from django.utils import timezone
        from prometheus_client.core import GaugeMetricFamily

        from scheduler_app.selectors.leader import scheduler_status

        status = _safe(lambda: scheduler_status(now=timezone.now()), default=None)
        if status is None:
            return
        running = GaugeMetricFamily(
            "scheduler_running", "1 if a scheduler holds the leader lease now (read from "
            "the database at the scrape), else 0: alert on 0.")
        running.add_metric([], 1.0 if status.running else 0.0)
        yield running
        if status.expires_in_s is not None:
            left = GaugeMetricFamily(
                "scheduler_lease_expires_in_seconds", "Seconds until the leader's lease "
                "expires; negative: it expired that long ago (no scheduler runs).")
            left.add_metric([], status.expires_in_s)
            yield left


def serve_metrics(port: int) -> None:
    """Serve this process's metrics on ``port`` (a thread of prometheus_client). With a
    multiprocess directory it serves the merged view, like /metrics."""
    from prometheus_client import start_http_server

    start_http_server(port, registry=registry())
    log.info("metrics on port %s", port)


def process_dead(pid: int) -> None:
    """Multiprocess mode: drop a dead process's live gauges (Celery's worker_process_shutdown
    and gunicorn's child_exit call this)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)


# --------------------------------------------------------------------------- logs
_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "scheduler_log_context", default={}  # noqa: B039 - never mutated, replaced whole
)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (e.g. holder, tick_id) to every log record in this block."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)


class LogContextFilter(logging.Filter):
    """Copies the bound context onto the record (``record.tick_id``, ``record.holder``) so
    both formatters can show it; records outside a step get empty strings."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get()
        for key in ("tick_id", "holder"):
            if not hasattr(record, key):
                setattr(record, key, ctx.get(key, ""))
        return True


# attributes every LogRecord has: anything else on a record came from ``extra``
_RECORD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ms), level, logger, message, the bound context
    (tick_id, holder, when set), any ``extra`` fields, and the traceback as ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and not key.startswith("_") and value not in ("", None):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str)
