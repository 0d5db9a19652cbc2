"""The demo training job: counts steps, checkpoints (and reports each checkpoint to the
agent's inbox), stops with a checkpoint on SIGTERM, resumes where its pointer says."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler_app.agent.checkpoint import STOPPED_EXIT_CODE, report_checkpoint
from scheduler_app.agent.checkpoint import main as checkpoint_main
from scheduler_app.agent.demo_job import resume_step


def job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    inbox = tmp_path / "inbox"
    inbox.mkdir(exist_ok=True)
    return {**os.environ, "JOB_ID": "5", "CHECKPOINT_DIR": str(tmp_path / "ckpt"),
            "SCHED_CHECKPOINT_INBOX": str(inbox), "RESUME_POINTER": "", **extra}


def reports(tmp_path: Path) -> list[str]:
    return [json.loads(p.read_text())["resume_pointer"]
            for p in sorted((tmp_path / "inbox").glob("*.json"))]


def run_job(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scheduler_app.agent.demo_job", *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_a_first_run_counts_from_zero_and_reports_its_checkpoints(tmp_path):
    done = run_job(job_env(tmp_path), "--steps", "4", "--step-seconds", "0.01",
                   "--checkpoint-every", "0")
    assert done.returncode == 0, done.stderr
    assert "starting from step 0" in done.stdout
    assert [f"step {i}" for i in range(1, 5)] == [
        line for line in done.stdout.splitlines() if line.startswith("step ")]
    pointers = reports(tmp_path)
    assert pointers[-1] == str(tmp_path / "ckpt" / "step-00000004.json")
    assert json.loads(Path(pointers[-1]).read_text())["step"] == 4


def test_a_resumed_run_continues_the_step_counter(tmp_path):
    # another node's checkpoint: not readable here, its name says the step
    env = job_env(tmp_path, RESUME_POINTER="/elsewhere/ckpt/step-00000042.json")
    done = run_job(env, "--steps", "44", "--step-seconds", "0.01")
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert "resuming from step 42" in done.stdout
    assert steps == ["step 43", "step 44"]


def test_on_sigterm_it_checkpoints_and_exits_with_the_stopped_code(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler_app.agent.demo_job", "--step-seconds", "0.05",
         "--checkpoint-every", "1000"],
        env=job_env(tmp_path), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step 3"):
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == STOPPED_EXIT_CODE
    (pointer,) = reports(tmp_path)  # the one checkpoint: the one the signal asked for
    step = json.loads(Path(pointer).read_text())["step"]
    assert step >= 3 and f"stop signal: checkpoint at step {step}" in out


def test_the_demo_clusters_jobs_take_their_length_from_the_command_and_use_its_pointers(
    tmp_path,
):
    env = job_env(tmp_path, SCHED_JOB_COMMAND="python train.py --demo-seconds 3",
                  RESUME_POINTER="demo://job-5/t=1")
    done = run_job(env, "--from-command", "--step-seconds", "0.01")
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert steps[0] == "step 101" and steps[-1] == "step 300"  # 3 s of 0.01 s steps
    assert reports(tmp_path)[-1] == "demo://job-5/t=3"


@pytest.mark.parametrize(
    ("pointer", "step"),
    [("", 0), ("/x/step-00000120.json", 120), ("s3://b/run/step-7", 7),
     ("demo://job-9/t=340", 340), ("something-else", 0)],
)
def test_resume_step_reads_the_pointer(pointer, step):
    assert resume_step(pointer) == step


def test_the_checkpoint_helper_writes_time_ordered_reports(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    report_checkpoint("a", inbox=inbox)
    time.sleep(0.001)
    assert checkpoint_main(["--pointer", "b", "--inbox", str(inbox),
                            "--at", "2026-01-06T10:00:00"]) == 0
    files = sorted(inbox.glob("*.json"))
    assert [json.loads(f.read_text())["resume_pointer"] for f in files] == ["a", "b"]
    assert json.loads(files[1].read_text())["checkpoint_at"] == "2026-01-06T10:00:00+00:00"
    assert not list(inbox.glob(".*"))  # no half-written file is left behind


def test_the_checkpoint_helper_refuses_to_run_outside_an_agent(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SCHED_CHECKPOINT_INBOX", raising=False)
    assert checkpoint_main(["--pointer", "p"]) == 2
    assert "no checkpoint inbox" in capsys.readouterr().err
