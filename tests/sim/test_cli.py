"""The command line: ``python -m scheduler_app.sim`` and ``manage.py simulate``."""

from __future__ import annotations

import json
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


def test_the_db_engine_says_it_is_not_there_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert main([str(GANG), "--out", str(out), "--engine", "db", "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert "--engine db is not available yet" in err and "\n" not in err
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
    bad = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(GANG), "--out", str(out), "--quiet",
         "--engine", "db"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode != 0
    assert "--engine db is not available yet" in bad.stderr
