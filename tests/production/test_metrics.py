"""Metrics and structured logs of the tick (scheduler_app.observability)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from scheduler_app import observability as obs
from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.models import Transition

from .conftest import agent, at, leader, state_of, submit

pytestmark = pytest.mark.django_db

S = JobState
REPO = Path(__file__).resolve().parents[2]


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def observed_step(loop, now_s: int):
    """What step_observed does, at a chosen instant (the fixtures live at T0)."""
    since = obs.log_seq()
    report = loop.step(now=at(now_s))
    obs.step_record(loop=loop, report=report, since_seq=since)
    return report


def test_a_leader_tick_records_duration_decisions_queue_depth_and_pending_reasons(cluster):
    ticks, durations = value("scheduler_ticks_total", role="leader"), value(
        "scheduler_tick_duration_seconds_count"
    )
    placed_before = value("scheduler_decisions_total", reason=Reason.PLACED)
    rebuilds = value("scheduler_state_rebuilds_total")
    loop = leader("metrics-a")
    # (limits: these borrow, and a job nothing may preempt borrows only with one)
    submit(cluster["vision"], gpus=16, at_s=0, max_runtime_s=7200)
    submit(cluster["vision"], gpus=8, at_s=1, max_runtime_s=7200)
    waiting = submit(cluster["vision"], gpus=16, at_s=2)  # 4 GPUs left: waits
    submit(cluster["nlp"], gpus=4, at_s=3)

    report = observed_step(loop, 5)

    assert report.leader and report.decisions == 3 and not report.error, report
    assert value("scheduler_ticks_total", role="leader") == ticks + 1
    assert value("scheduler_tick_duration_seconds_count") == durations + 1
    assert value("scheduler_decisions_total", reason=Reason.PLACED) == placed_before + 3
    assert value("scheduler_state_rebuilds_total") == rebuilds + 1
    assert value("scheduler_leader", holder="metrics-a") == 1
    assert value("scheduler_lease_token") == report.token
    assert value("scheduler_queue_depth", tenant="vision", size_class="9-64") == 1
    assert value("scheduler_queue_depth", tenant="vision", size_class="2-8") == 0
    assert value("scheduler_queue_depth", tenant="nlp", size_class="2-8") == 0
    waiting = loop.scheduler.job(str(waiting.pk))
    assert waiting.state == S.QUEUED and waiting.pending_reason != PendingReason.NONE
    assert value("scheduler_pending_jobs", reason=waiting.pending_reason.value) == 1
    others = [r for r in PendingReason if r != waiting.pending_reason]
    assert all(value("scheduler_pending_jobs", reason=r.value) == 0 for r in others)


def test_a_preemption_counts_and_adds_the_cores_estimate_of_gpu_hours_lost(cluster):
    loop = leader("metrics-b")
    vision, nlp = cluster["vision"], cluster["nlp"]
    borrowers = [
        submit(vision, gpus=16, at_s=0, checkpointable=True, checkpoint_interval_s=600),
        submit(vision, gpus=16, at_s=0, checkpointable=True, checkpoint_interval_s=600),
    ]
    observed_step(loop, 5)
    for job in borrowers:
        agent(job, S.RUNNING, Reason.STARTED, at_s=6)
    observed_step(loop, 10)
    preemptions = value("scheduler_preemptions_total")
    lost = value("scheduler_preemption_gpu_hours_lost_total")
    submit(nlp, gpus=16, at_s=1800)  # nlp's guarantee: a borrower must give way

    report = observed_step(loop, 1805)

    rows = list(Transition.objects.filter(tick_id=report.tick_id, reason=Reason.PREEMPT_REQUESTED))
    assert len(rows) == 1, report
    assert value("scheduler_preemptions_total") == preemptions + 1
    estimate_h = rows[0].detail["est_gpu_s_lost"] / 3600
    assert estimate_h > 0
    assert value("scheduler_preemption_gpu_hours_lost_total") == pytest.approx(lost + estimate_h)


def test_a_standby_step_shows_it_does_not_lead(cluster):
    submit(cluster["vision"], gpus=4)
    observed_step(leader("metrics-lead"), 5)
    standby = leader("metrics-standby")
    standbys = value("scheduler_ticks_total", role="standby")

    report = observed_step(standby, 6)

    assert not report.leader
    assert value("scheduler_leader", holder="metrics-standby") == 0
    assert value("scheduler_leader", holder="metrics-lead") == 1
    assert value("scheduler_ticks_total", role="standby") == standbys + 1
    # a standby publishes no queue figures (single-process mode clears them)
    assert REGISTRY.get_sample_value(
        "scheduler_queue_depth", {"tenant": "vision", "size_class": "2-8"}
    ) is None


def test_a_failed_tick_is_counted_and_writes_nothing(cluster, monkeypatch):
    job = submit(cluster["vision"], gpus=4)
    loop = leader("metrics-c")

    def broken_tick(*args, **kwargs):
        raise RuntimeError("the core fell over")

    loop.step(now=at(1))  # builds the state
    monkeypatch.setattr(loop.scheduler, "tick", broken_tick)
    failed = value("scheduler_ticks_failed_total")
    report = observed_step(loop, 5)
    assert report.error and state_of(job) == S.PLACING  # placed by the first step only
    assert value("scheduler_ticks_failed_total") == failed + 1


def test_step_observed_logs_one_json_line_with_the_tick_id(cluster):
    submit(cluster["vision"], gpus=4)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(obs.LogContextFilter())
    handler.setFormatter(obs.JsonFormatter())
    tick_log = logging.getLogger("scheduler_app.tick")
    tick_log.addHandler(handler)
    try:
        report = obs.step_observed(leader("metrics-json"))
    finally:
        tick_log.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line["tick_id"] == report.tick_id and report.tick_id
    assert line["holder"] == "metrics-json" and line["logger"] == "scheduler_app.tick"
    assert line["tick"]["decisions"] == 1 and line["tick"]["leader"] is True
    assert line["level"] == "INFO" and line["message"].startswith(f"tick tick_id={report.tick_id}")


def test_the_json_formatter_keeps_extra_fields_and_the_traceback():
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom %s", ("now",), None)
    try:
        raise ValueError("bad")
    except ValueError:
        record.exc_info = sys.exc_info()
    record.job_id = 7
    with obs.log_context(tick_id="3.9"):
        obs.LogContextFilter().filter(record)
    out = json.loads(obs.JsonFormatter().format(record))
    assert (out["message"], out["job_id"], out["tick_id"]) == ("boom now", 7, "3.9")
    assert "holder" not in out  # unset context fields are left out
    assert "ValueError: bad" in out["exc"] and out["ts"].endswith("+00:00")


def test_the_metrics_endpoint_serves_the_prometheus_text_format(client, settings):
    settings.METRICS_TOKEN = ""
    obs.early_tick_counted("debounced")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    body = response.content.decode()
    for name in ("scheduler_tick_duration_seconds_bucket", "scheduler_ticks_failed_total",
                 "scheduler_early_tick_requests_total{outcome=\"debounced\"}"):
        assert name in body


@pytest.mark.django_db
def test_whether_a_scheduler_runs_is_read_from_its_lease_at_the_scrape(client, settings):
    # a leader killed with SIGKILL left its scheduler_leader series at 1 for good, so the
    # alert on it never fired (found by running it as production does, 2026-12-07)
    from datetime import timedelta

    from django.utils import timezone

    from scheduler_app.models import Lease
    from scheduler_app.services.lease import LEADER_LEASE

    settings.METRICS_TOKEN = ""

    def scraped() -> dict[str, float]:
        body = client.get("/metrics").content.decode()
        return {line.split()[0]: float(line.split()[1]) for line in body.splitlines()
                if line.startswith(("scheduler_running ", "scheduler_lease_expires_in"))}

    assert scraped() == {"scheduler_running": 0.0}  # never taken
    Lease.objects.create(name=LEADER_LEASE, holder="host:1", fencing_token=3,
                         expires_at=timezone.now() + timedelta(seconds=15))
    now = scraped()
    assert now["scheduler_running"] == 1.0
    assert 0 < now["scheduler_lease_expires_in_seconds"] <= 15
    Lease.objects.update(expires_at=timezone.now() - timedelta(seconds=90))
    gone = scraped()
    assert gone["scheduler_running"] == 0.0
    assert gone["scheduler_lease_expires_in_seconds"] <= -90


def test_the_metrics_endpoint_wants_the_bearer_token_when_one_is_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "scheduler_app.settings", **env},
    )


def test_in_multiprocess_mode_metrics_views_merge_what_other_processes_recorded(
    client, tmp_path, monkeypatch
):
    """The worker records, the web process serves: PROMETHEUS_MULTIPROC_DIR joins them."""
    recorder = run_python(
        "import django; django.setup()\n"
        "from scheduler_app import observability as o\n"
        "o.LEADER.labels(holder='worker-on-host-1').set(1)\n"
        "o.TICK_DURATION.observe(0.2)\n",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
    )
    assert recorder.returncode == 0, recorder.stderr
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    body = client.get("/metrics").content.decode()
    assert 'scheduler_leader{holder="worker-on-host-1"} 1.0' in body
    assert 'scheduler_tick_duration_seconds_bucket{le="0.25"} 1.0' in body


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_log_format_switches_between_json_lines_and_text(fmt):
    result = run_python(
        "import django, logging; django.setup()\n"
        "logging.getLogger('scheduler_app.tick').warning('hello %s', 'there')\n",
        LOG_FORMAT=fmt,
    )
    assert result.returncode == 0, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    if fmt == "json":
        out = json.loads(line)
        assert (out["message"], out["level"], out["logger"]) == (
            "hello there", "WARNING", "scheduler_app.tick"
        )
    else:
        assert line.endswith("WARNING scheduler_app.tick: hello there")


def test_an_unknown_log_format_refuses_to_start():
    result = run_python("import django; django.setup()", LOG_FORMAT="xml")
    assert result.returncode != 0 and "LOG_FORMAT must be json or text" in result.stderr
