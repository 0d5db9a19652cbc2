"""The two management commands are thin: they write what the pure functions return."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from scheduler_app.workloads import SyntheticParams, generate


def _django_ready() -> bool:
    try:
        from django.conf import settings

        return bool(settings.configured and settings.INSTALLED_APPS)
    except Exception:  # noqa: BLE001 - no settings module: running with -p no:django
        return False


pytestmark = pytest.mark.skipif(not _django_ready(), reason="needs the Django settings")


def test_make_workload_writes_the_generators_scenario(tmp_path: Path) -> None:
    from django.core.management import call_command

    out = tmp_path / "w.yaml"
    stdout = io.StringIO()
    call_command("make_workload", "--out", str(out), "--jobs", "50", "--nodes", "8",
                 "--teams", "3", "--seed", "4", "--hours", "1", stdout=stdout, stderr=io.StringIO())
    want = generate(SyntheticParams(jobs=50, nodes=8, teams=3, seed=4, hours=1))
    assert yaml.safe_load(out.read_text()) == want
    assert "50 jobs" in stdout.getvalue()


def test_import_trace_writes_json_when_asked(tmp_path: Path) -> None:
    from django.core.management import call_command

    quota = tmp_path / "q.csv"
    quota.write_text("date,vcA,total\n2020-04-01,8,8\n")
    trace = tmp_path / "t.csv"
    with open(trace, "w", newline="") as fh:
        csv.writer(fh).writerows([["job_id", "arrival_s", "service_sec", "gpu_count"],
                                  ["1#0", "5.0", "7200.0", "8"]])
    out = tmp_path / "h.json"
    call_command("import_trace", "--out", str(out), "--days", "1", "--trace", str(trace),
                 "--quota", str(quota), stdout=io.StringIO(), stderr=io.StringIO())

    scenario = json.loads(out.read_text())
    assert [j["id"] for j in scenario["jobs"]] == ["1#0"]
    assert scenario["jobs"][0]["checkpointable"] is True


def test_import_trace_reports_a_missing_file_as_a_command_error(tmp_path: Path) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    # a quota file of its own, so the test does not depend on the shared traces folder
    quota = tmp_path / "quota.csv"
    quota.write_text("date,vcA,total\n2020-04-01,8,8\n")
    with pytest.raises(CommandError, match="nope"):
        call_command("import_trace", "--out", str(tmp_path / "x.yaml"),
                     "--trace", str(tmp_path / "nope.csv"), "--quota", str(quota),
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert not (tmp_path / "x.yaml").exists()  # nothing half written


# (the commands only read DATABASES' file names: no connection is opened)
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize("command", ["make_workload", "import_trace"])
def test_out_is_refused_before_the_work_when_it_cannot_be_the_scenario_file(
    tmp_path: Path, settings, command: str
) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    live = tmp_path / "live.sqlite3"
    live.write_bytes(b"SQLite format 3\x00")
    settings.DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                                      "NAME": str(live)}}
    for out, says in ((str(tmp_path), "is a directory; give a file name"),
                      (str(live), "is the configured database"),
                      (f"{live}-wal", "is the configured database"),
                      ("", "must be a file name")):
        with pytest.raises(CommandError, match=f"^--out .*: {says}"):
            call_command(command, "--out", out, stdout=io.StringIO(), stderr=io.StringIO())
    assert live.read_bytes() == b"SQLite format 3\x00"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.sqlite3"]
