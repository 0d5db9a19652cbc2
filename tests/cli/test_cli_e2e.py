"""``gpuq`` with jobs that really run: the API server, the scheduler loop and a node agent
on each of the two nodes, every one a real process (``tests/agent/stack.py``). A job's
output reaches ``gpuq logs`` (and follows with ``-f``), ``gpuq wait`` exits with the
job's outcome, and ``gpuq why`` explains a job that waits behind a running one with the
scheduler's own reason, position and estimate.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.production.procs import poll

from .conftest import GPUQ, Live, lines_fit, start_live

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, template: Path) -> Iterator[Live]:
    live = start_live(tmp_path_factory.mktemp("gpuq-e2e"), template, heartbeat_timeout_s=20)
    try:
        for node in ("n0", "n1"):
            agent = live.stack.agent(node, "--kill-jobs-on-exit")
            agent.wait_for(lambda line, node=node: f"registered node {node}" in line, 60)
        live.stack.scheduler()
        yield live
    finally:
        live.stack.stop_all()


def submit(live: Live, *args: str) -> int:
    done = live.gpuq("submit", "--parsable", *args)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_jobs_output_reaches_logs_and_wait_exits_0(running: Live) -> None:
    job_id = submit(running, "--gpus", "1", "--time", "5m", "--name", "hello", "--command",
                    "echo hello-from-gpuq; sleep 2; echo bye-from-gpuq")
    follow = subprocess.run([str(GPUQ), "logs", "-f", str(job_id), "--interval", "0.3"],
                            env=running.env(), capture_output=True, text=True, timeout=120)
    assert follow.returncode == 0, follow.stderr
    # followed until the job was final, each line once
    assert follow.stdout.count("hello-from-gpuq") == 1
    assert follow.stdout.count("bye-from-gpuq") == 1
    done = running.gpuq("wait", str(job_id), "--interval", "0.3")
    assert done.returncode == 0 and f"Job {job_id} COMPLETED" in done.stdout
    assert "bye-from-gpuq" in running.gpuq("logs", str(job_id)).stdout
    job = running.client().job(job_id)
    assert job.wait(timeout=10, poll_s=0.2).state == "COMPLETED"
    assert "hello-from-gpuq" in job.logs().stdout
    assert [h["to_state"] for h in job.history()][-1] == "COMPLETED"


def test_a_failed_job_makes_wait_exit_3(running: Live) -> None:
    job_id = submit(running, "--gpus", "1", "--time", "5m", "--name", "oops", "--command",
                    "echo broken-input >&2; exit 7")
    done = running.gpuq("wait", str(job_id), "--interval", "0.3", timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"Job {job_id} FAILED" in done.stdout
    logs = running.gpuq("logs", str(job_id))
    assert "broken-input" in logs.stderr


def test_why_explains_a_job_waiting_behind_a_running_one(running: Live) -> None:
    client = running.client()
    big = submit(running, "--gpus", "16", "--gpus-per-node", "8", "--time", "10m",
                 "--name", "whole-cluster", "--command", "sleep 120")
    poll(lambda: client.job(big).state == "RUNNING", 60, every=0.2, what="the big job runs")
    waiting = submit(running, "--gpus", "8", "--time", "5m", "--name", "behind",
                     "--command", "sleep 1")
    detail = poll(lambda: (d := client.job(waiting)).pending_reason != "None" and d, 60,
                  every=0.2, what="a pending reason")
    done = running.gpuq("why", str(waiting))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the words, whatever the wrapping
    assert f"is waiting: {detail.pending_reason}." in text
    assert " ".join(detail.pending_sentence.split()) in text
    assert "Position: 1st in the cluster's order, 1st in team vision's queue." in text
    deadline = detail.queue_position["deadline_at"]
    assert deadline and "Its deadline in the team's order: 20" in text
    if detail.estimate and detail.estimate.get("start_at"):
        bound = "at the latest " if detail.estimate["upper_bound"] else ""
        assert f"Estimated start: {bound}20" in text
        assert f"Kind: {detail.estimate['kind']} (" in text
        assert "Basis: " in text
    assert "To start sooner:" in text
    assert lines_fit(done.stdout) == []
    queue = running.gpuq("queue", columns=120)
    rows = {line.split()[0]: line for line in queue.stdout.splitlines()[1:]}
    assert "RUNNING" in rows[str(big)]
    assert detail.pending_reason in rows[str(waiting)]
    running_why = running.gpuq("why", str(big)).stdout
    assert "is RUNNING on n0, n1" in " ".join(running_why.split())
    assert running.gpuq("cancel", str(big)).returncode == 0
    poll(lambda: client.job(waiting).state in ("RUNNING", "COMPLETED"), 60, every=0.2,
         what="the waiting job starts")
    assert running.gpuq("wait", str(waiting), "--interval", "0.3").returncode == 0


def test_logs_of_a_job_that_ran_and_wrote_nothing_do_not_say_it_has_not_run(
        running: Live) -> None:
    """gpuq logs of a COMPLETED job said "it has not run": a job that wrote nothing got
    no log from its agent (it sent a tail only when the files grew), and the message
    guessed (a researcher's session). The agent now sends the (empty) tail at the end of
    every run: the log is there, and empty."""
    job_id = submit(running, "--gpus", "1", "--time", "5m", "--name", "silent", "--command",
                    "true")
    assert running.gpuq("wait", str(job_id), "--interval", "0.3",
                        timeout=120).returncode == 0
    done = running.gpuq("logs", str(job_id))
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr == "", done.stderr
    tail = running.client().job(job_id).logs()
    assert tail.at is not None and (tail.stdout, tail.stderr) == ("", "")


def test_why_of_a_job_that_may_not_borrow_advises_what_the_server_says(
        running: Live) -> None:
    """A job that cannot be preempted and declares no time limit may hold only its team's
    guarantee: gpuq why's advice said "Fewer GPUs" and the team's guarantee plus borrow
    limit, where the server's answer said a time limit of at most 2 h, or checkpointable,
    or preemptible, would let it borrow (a researcher's session)."""
    client = running.client()
    first = submit(running, "--gpus", "8", "--time", "10m", "--name", "guarantee",
                   "--command", "sleep 120")
    poll(lambda: client.job(first).state == "RUNNING", 60, every=0.2, what="it runs")
    barred = submit(running, "--gpus", "8", "--name", "no-limit", "--command", "sleep 1")
    detail = poll(lambda: (d := client.job(barred)).pending_reason == "QuotaLimit" and d, 60,
                  every=0.2, what="QuotaLimit")
    try:
        assert "cannot be preempted" in detail.why_pending["headline"]
        done = running.gpuq("why", str(barred))
        assert done.returncode == 0, done.stderr
        text = " ".join(done.stdout.split())
        hints = text[text.index("To start sooner:"):]
        assert "Fewer GPUs" not in hints and "guarantee plus borrow limit" not in hints
        assert "--checkpointable or --preemptible, or with a --time of at most 2h" in hints
        assert lines_fit(done.stdout) == []
    finally:
        running.gpuq("cancel", str(barred), str(first))
