"""The command line: ``python -m scheduler_app.sim`` and ``manage.py simulate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_app.sim.cli import main

from .helpers import REPO, scenario_dir

GANG = scenario_dir() / "gang-no-deadlock.yaml"


def test_a_run_writes_the_result_and_exits_zero(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main([str(GANG), "--out", str(out), "--quiet", "--seed", "3"]) == 0
    doc = json.loads(out.read_text())
    assert doc["scenario"] == "gang-no-deadlock" and doc["seed"] == 3
    assert set(doc["jobs"]) == {"gang-a", "gang-b"}


def test_a_malformed_scenario_exits_non_zero_with_one_line_and_no_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GANG.read_text().replace("gpus: 24", "gpus: -24", 1))
    out = tmp_path / "r.json"
    assert main([str(bad), "--out", str(out), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert err == "error: jobs[0].gpus: must be a positive integer\n"
    assert not out.exists()


def test_the_module_sends_the_db_engine_to_manage_py(tmp_path: Path) -> None:
    # the db engine runs through Django's models: it needs Django set up
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler_app.sim", str(GANG), "--out", str(out),
         "--engine", "db", "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "--engine db runs through Django's models: use `python manage.py simulate" in err
    assert "\n" not in err
    assert not out.exists()


def test_the_module_runs_without_django(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys, runpy; sys.modules['django'] = None; "  # any Django import fails
         "sys.argv = ['sim'] + sys.argv[1:]; runpy.run_module('scheduler_app.sim', "
         "run_name='__main__')",
         str(GANG), "--out", str(out), "--policy", "fifo"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "gang-no-deadlock: 2 jobs" in proc.stderr  # the summary line
    assert json.loads(out.read_text())["policy"] == "fifo"


def test_manage_py_simulate_is_the_same_command(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    ok = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(GANG), "--out", str(out), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())["scenario"] == "gang-no-deadlock"


def test_manage_py_simulate_engine_db_matches_memory_and_leaves_the_database_alone(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'sim.sqlite3'}"}

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    assert manage("migrate", "-v", "0").returncode == 0
    db_out, mem_out = tmp_path / "db.json", tmp_path / "mem.json"
    ran = manage("simulate", str(GANG), "--engine", "db", "--out", str(db_out), "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert manage("simulate", str(GANG), "--out", str(mem_out), "--quiet").returncode == 0
    db, mem = (json.loads(p.read_text()) for p in (db_out, mem_out))
    assert db["jobs"] == mem["jobs"]
    # a second run works as well: each run has a scratch database of its own
    again = manage("simulate", str(GANG), "--engine", "db", "--out", str(db_out), "--quiet")
    assert again.returncode == 0, again.stderr
    assert json.loads(db_out.read_text())["jobs"] == mem["jobs"]
    verify = manage("replay", "--verify")
    assert verify.returncode == 0 and "projection matches the log" in verify.stdout
    count = manage("shell", "-c",
                   "from scheduler_app.models import Job; print(Job.objects.count())")
    assert count.returncode == 0 and count.stdout.strip().splitlines()[-1] == "0"


@pytest.mark.parametrize(("out", "says"), [
    ("", "--out '': must be a file name"),
    ("missing/r.json", "no such directory"),
    (".", "is a directory; give a file name"),
    ("scenario.yaml", "is the scenario file; give another file name"),
])
def test_out_is_checked_before_the_run_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, says: str
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(GANG.read_text())
    before = sorted(p.name for p in tmp_path.iterdir())
    target = str(tmp_path / out) if out else ""
    assert main([str(scenario), "--out", target]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and says in err and "simulated" not in err, err
    assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert scenario.read_text() == GANG.read_text()


def test_progress_into_a_log_is_a_line_at_each_tenth_up_to_the_horizon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # stderr captured, not a terminal: no carriage returns, and the run's quiet end (its
    # last ticks skipped) still reaches 100%
    assert main([str(GANG), "--out", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("simulated ")]
    assert "\r" not in err and lines and lines[-1].startswith("simulated 100% (")
    percents = [int(line.split()[1][:-1]) for line in lines]
    assert percents == sorted(set(percents)) and all(p % 10 == 0 for p in percents)


def test_manage_py_simulate_never_writes_over_the_configured_database(tmp_path: Path) -> None:
    db = tmp_path / "live.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}"}

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    assert manage("migrate", "-v", "0").returncode == 0
    before = db.read_bytes()
    for target in (db, tmp_path / "live.sqlite3-journal"):
        ran = manage("simulate", str(GANG), "--out", str(target), "--quiet")
        assert ran.returncode != 0
        assert "is the configured database (or one of its files): never written" in ran.stderr
    assert db.read_bytes() == before
    assert not (tmp_path / "live.sqlite3-journal").exists()
