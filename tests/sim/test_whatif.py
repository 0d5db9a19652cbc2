"""``manage.py whatif`` on a seeded live database (tests/sim/whatif_seed.py: 48 GPUs, all
held; alpha waits for its own quota, beta for GPUs): each kind of change does what it
says, bad flags exit 2 naming the flag, the exported scenario gives the same baseline
through ``manage.py simulate``, and the database file is byte for byte as it was."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from scheduler_app.sim.scenario import load_scenario
from scheduler_app.sim.whatif import job_starts, team_stats

from .test_scratch_database import REPO, manage, manage_env

HOUR = 3600


def seeded(tmp: Path, module: str) -> tuple[str, Any]:
    """A SQLite database in ``tmp``, migrated and seeded by ``tests.sim.<module>.seed()``:
    its URL and what the seed returned."""
    url = f"sqlite:///{tmp / 'live.sqlite3'}"
    done = manage("migrate", "--no-input", "-v", "0", database_url=url, tmpdir=tmp)
    assert done.returncode == 0, done.stderr
    done = manage("shell", "-c", f"import json; from tests.sim.{module} import seed; "
                  "print('SEED=' + json.dumps(seed()))", database_url=url, tmpdir=tmp)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("SEED="))
    return url, json.loads(line[5:])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("whatif")
    seeded_before = time.time()
    url, ids = seeded(tmp, "whatif_seed")
    seeded_after = time.time()
    return {"url": url, "tmp": tmp, "file": tmp / "live.sqlite3",
            "seeded": (seeded_before, seeded_after),
            "ids": {k: str(v) for k, v in ids.items()}}


def whatif(live: dict[str, Any], *flags: str, name: str = "w") -> dict[str, Any]:
    out = live["tmp"] / f"{name}.json"
    called = time.time()
    done = manage("whatif", "--quiet", *flags, "--json", str(out), database_url=live["url"],
                  tmpdir=live["tmp"])
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    data["stdout"] = done.stdout
    # the seed dates its jobs from the wall clock and the snapshot is taken later: a
    # start "in 2 h" at seeding is that much sooner at the snapshot (seconds, or more on a
    # loaded machine)
    data["aged_s"] = (called - live["seeded"][1], time.time() - live["seeded"][0])
    return data


def in_about(data: dict[str, Any], value: int | None, seconds: float) -> bool:
    """``value`` is ``seconds`` from seeding, as seen from the snapshot (to the second)."""
    low, high = data["aged_s"]
    return value is not None and seconds - high - 1 <= value <= seconds - low + 1


def team(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in data["tenants"] if t["name"] == name)


def start(data: dict[str, Any], job_id: str, run: str) -> int | None:
    return next(j for j in data["jobs"] if j["id"] == job_id)[f"{run}_start_in_s"]


def test_without_changes_both_runs_agree_and_the_output_says_what_it_assumes(live):
    data = whatif(live)
    for t in data["tenants"]:
        assert t["baseline_mean_wait_s"] == t["whatif_mean_wait_s"]
        assert t["baseline_gpus_held"] == t["whatif_gpus_held"]
    assert "running jobs run until their declared limit" in data["stdout"]
    assert data["assumptions"] and data["horizon_s"] == 24 * HOUR
    # alpha waits for its own quota: one 8-GPU job at a time, the first when its running
    # job reaches its limit (2 h from now)
    ids = live["ids"]
    assert in_about(data, start(data, ids["alpha-q0"], "baseline"), 2 * HOUR)
    assert in_about(data, start(data, ids["alpha-q2"], "baseline"), 4 * HOUR)
    assert team(data, "alpha")["waiting"] == 3 and team(data, "gamma")["waiting"] == 0


def test_a_raised_guarantee_shortens_that_teams_waits(live):
    data = whatif(live, "--set-quota", "alpha=16:0")
    alpha = team(data, "alpha")
    assert alpha["whatif_mean_wait_s"] < alpha["baseline_mean_wait_s"] - HOUR / 2
    assert alpha["whatif_p95_wait_s"] < alpha["baseline_p95_wait_s"]
    ids = live["ids"]
    assert start(data, ids["alpha-q2"], "whatif") < start(data, ids["alpha-q2"], "baseline")
    # the jobs that move most are listed first, alpha's
    assert data["jobs"][0]["tenant"] == "alpha" and data["jobs"][0]["moved_s"] < 0
    assert "--set-quota alpha=16:0" in data["changes"]


def test_added_nodes_start_jobs_sooner(live):
    data = whatif(live, "--add-nodes", "pod-b=2")
    ids = live["ids"]
    for key in ("beta-q0", "beta-q1"):
        assert in_about(data, start(data, ids[key], "baseline"), 1.5 * HOUR)
        assert start(data, ids[key], "whatif") == 0  # on the new nodes, at once
    assert team(data, "beta")["whatif_mean_wait_s"] < team(data, "beta")["baseline_mean_wait_s"]


def test_draining_nodes_takes_them_out_of_the_plan(live):
    data = whatif(live, "--drain", "a3", "--drain", "a4")
    ids = live["ids"]
    # gamma's job leaves a3, a4 and b1 at 1.5 h: only b1 takes a new job; beta's second
    # job waits for beta's own running job to reach its limit (3 h)
    starts = sorted(start(data, ids[k], "whatif") for k in ("beta-q0", "beta-q1"))
    assert in_about(data, starts[0], 1.5 * HOUR)
    assert in_about(data, starts[1], 3 * HOUR)
    held = [sum(v) for v in zip(*data["series"]["whatif"].values(), strict=True)]
    step = data["series"]["step_s"]
    after = [h for k, h in enumerate(held) if 1.6 * HOUR <= k * step < 3 * HOUR]
    assert after and max(after) <= 48 - 16  # the two drained nodes stay empty


def test_cancelling_a_running_job_frees_its_gpus_at_once(live):
    ids = live["ids"]
    data = whatif(live, "--cancel", ids["gamma-run"])
    for key in ("beta-q0", "beta-q1"):
        assert start(data, ids[key], "whatif") == 0
    gamma = team(data, "gamma")
    assert gamma["whatif_gpus_held"] == 0 and gamma["baseline_gpus_held"] > 0


def test_a_cancelled_queued_job_leaves_the_waits(live):
    ids = live["ids"]
    data = whatif(live, "--cancel", ids["beta-q0"])
    job = next(j for j in data["jobs"] if j["id"] == ids["beta-q0"])
    assert job["cancelled"] and job["whatif_start_in_s"] is None and job["moved_s"] is None
    # left out of both runs' waits, so the two compare the same jobs
    beta = team(data, "beta")
    assert beta["waiting"] == 1 and beta["baseline_started"] == beta["whatif_started"] == 1
    assert beta["whatif_gpus_held"] < beta["baseline_gpus_held"]


def test_a_setting_changes_the_plan(live):
    # 16 GPUs (b1, b2) kept for interactive jobs: alpha's batch jobs cannot use b2 once
    # alpha's running job leaves it, so each waits an hour longer
    data = whatif(live, "--setting", "interactive_reserved_gpus=16")
    ids = live["ids"]
    for key in ("alpha-q0", "alpha-q1", "alpha-q2"):
        assert start(data, ids[key], "whatif") == start(data, ids[key], "baseline") + HOUR
    assert "--setting interactive_reserved_gpus=16" in data["changes"]


def test_the_runs_use_the_settings_the_scheduler_runs_with_and_say_whose(tmp_path: Path):
    """The baseline used the asking process's SCHEDULER_* environment, which an operator's
    shell, the web process or a worker need not share with the scheduler, and said
    nothing of it (an operator's session, 2026-12-07). The leader publishes its settings
    with its lease; a what-if uses them, says whose they are, and warns of each setting
    the asking process reads otherwise."""
    url, _ids = seeded(tmp_path, "whatif_seed")

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "manage.py"), *args], cwd=REPO,
                              env={**manage_env(url, tmp_path), **env}, capture_output=True,
                              text=True, timeout=300)

    # no scheduler has run yet: this process's settings, said so
    out = tmp_path / "before.json"
    done = run("whatif", "--quiet", "--json", str(out),
               SCHEDULER_INTERACTIVE_RESERVED_GPUS="8")
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["settings_from"].startswith("this process's SCHEDULER_* environment")
    assert data["settings"] == {"interactive_reserved_gpus": 8}
    assert "not at their defaults: interactive_reserved_gpus=8" in done.stdout
    # the leader, run with its own environment, publishes its settings with its lease
    done = run("shell", "-c", "from scheduler_app.services.leader import LeaderLoop; "
               "LeaderLoop(holder='leader-7', ttl_s=600).step()",
               SCHEDULER_INTERACTIVE_RESERVED_GPUS="16", SCHEDULER_GRACE_PERIOD_S="300")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "after.json"
    done = run("whatif", "--quiet", "--json", str(out),
               SCHEDULER_INTERACTIVE_RESERVED_GPUS="8")
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["settings_from"] == "the scheduler's, as its leader leader-7 published them"
    assert data["settings"] == {"grace_period_s": 300, "interactive_reserved_gpus": 16}
    assert ("this process reads interactive_reserved_gpus=8 from its SCHEDULER_* "
            "environment; the scheduler runs with 16, which the runs use") in data["warnings"]
    assert ("this process reads grace_period_s=120 from its SCHEDULER_* environment; the "
            "scheduler runs with 300, which the runs use") in data["warnings"]
    assert "settings: the scheduler's, as its leader leader-7 published them" in done.stdout
    # the exported scenario carries the scheduler's settings too
    exported = tmp_path / "live.json"
    done = run("whatif", "--quiet", "--export-scenario", str(exported))
    assert done.returncode == 0, done.stderr
    settings = json.loads(exported.read_text())["settings"]
    assert settings["interactive_reserved_gpus"] == 16 and settings["grace_period_s"] == 300


def test_the_horizon_bounds_the_starts(live):
    data = whatif(live, "--hours", "1")
    assert data["horizon_s"] == HOUR
    assert all(j["baseline_start_in_s"] is None for j in data["jobs"]
               if j["tenant"] == "alpha")


@pytest.mark.parametrize(("flags", "named"), [
    (("--set-quota", "nobody=8"), "--set-quota nobody=8: unknown team nobody"),
    (("--set-quota", "alpha=lots"), "--set-quota alpha=lots: 'lots' is not a whole number"),
    (("--set-quota", "alpha"), "--set-quota 'alpha': must be TEAM=GUARANTEE[:BORROW]"),
    (("--set-quota", "alpha=40"),
     "--set-quota alpha=40: the guarantees would add up to 72 GPUs; the cluster has 48"),
    (("--add-nodes", "pod-z=2"), "--add-nodes pod-z=2: unknown pod pod-z"),
    # the bound is what the pod has room for: a pod lists at most 100,000 nodes
    (("--add-nodes", "pod-a=0"), "--add-nodes pod-a=0: must be from 1 to 99996"),
    (("--add-nodes", "pod-a=100000"), "--add-nodes pod-a=100000: must be from 1 to 99996"),
    (("--drain", "zz9"), "--drain zz9: unknown node"),
    (("--undrain", "a1"), "--undrain a1: a1 is not drained (it is healthy); --undrain takes"),
    (("--up", "a1"), "--up a1: a1 is not down (it is healthy); --up takes a node that is"),
    (("--up", ""), "--up '': must be NODE"),
    # a flag given nothing is a mistake, not "no change"
    (("--set-quota", ""), "--set-quota '': must be TEAM=GUARANTEE[:BORROW]"),
    (("--cancel", " "), "--cancel '': must be JOB"),
    (("--json", ""), "--json '': must be a file name"),
    # two answers for one team: the flag that raised the sum is named, not the last one
    (("--set-quota", "alpha=40", "--set-quota", "gamma=8"),
     "--set-quota alpha=40: the guarantees would add up to 72 GPUs"),
    (("--set-quota", "alpha=8", "--set-quota", "alpha=16"),
     "--set-quota alpha=16: team alpha is already given --set-quota alpha=8"),
    (("--setting", "queue_stretch=nan"), "--setting queue_stretch: must be a finite number"),
    (("--hours", "nan"), "--hours nan: must be from one second"),
    (("--cancel", "999999"), "--cancel 999999: no such job running or queued"),
    (("--cancel", "abc"), "--cancel abc: not a job id (a job's number, or an array task's "
                            "<array>_<index>, as gpuq queue shows them"),
    (("--setting", "tick_intervals=5"), "--setting tick_intervals=5: unknown setting"),
    (("--setting", "tick_interval_s=0"), "--setting tick_interval_s: must be a whole number, 1"),
    # the value as given, not as a float prints it ("--hours 0.0" until 2026-12-07)
    (("--hours", "0"), "--hours 0: must be from one second (1/3600) to 336"),
    (("--hours", "-1"), "--hours -1: must be from one second (1/3600) to 336"),
    (("--hours", "336.0001"), "--hours 336.0001: must be from one second (1/3600) to 336"),
    # half a task's name: refused as the other typos are (a traceback until 2026-12-07)
    (("--cancel", "8_"), "--cancel 8_: not a job id (a job's number, or an array task's"),
    (("--cancel", "_3"), "--cancel _3: not a job id (a job's number, or an array task's"),
    # a node given two flags: which one? (run with a warning until 2026-12-07)
    (("--drain", "a1", "--undrain", "a1"), "--undrain a1: a1 is already given --drain a1"),
    (("--workers", "3"), "--workers 3: must be 1 or 2"),
    (("--workers", "0"), "--workers 0: must be 1 or 2"),
])
def test_a_bad_flag_exits_2_with_one_line_naming_it(live, flags, named):
    done = manage("whatif", "--quiet", *flags, database_url=live["url"], tmpdir=live["tmp"])
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and named in errors[0], done.stderr


def test_progress_into_a_log_is_a_line_at_each_tenth(live):
    # stderr is a pipe here, as in a captured log (read in text mode, a carriage return
    # would show as a line break: a bar redrawn a percent at a time is caught by the count)
    done = manage("whatif", "--hours", "2", "--workers", "1", database_url=live["url"],
                  tmpdir=live["tmp"])
    assert done.returncode == 0, done.stderr
    shown = [line for line in done.stderr.splitlines() if line.endswith("%")]
    assert shown and shown[-1] == "done 100%", done.stderr
    for line in shown:
        percent = line.rsplit(" ", 1)[1]
        assert int(percent[:-1]) % 10 == 0, line
    assert len(shown) == len(set(shown)) <= 3 * 11, done.stderr  # each label's tenths once


def test_progress_on_a_terminal_is_one_bar_redrawn_in_place(live):
    # stderr a pseudo-terminal: carriage returns, no line per step
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(REPO / "manage.py"), "whatif", "--hours", "2",
                             "--workers", "1"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=follower, env=manage_env(live["url"], live["tmp"]))
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    proc.communicate(timeout=300)
    assert proc.returncode == 0, seen
    bar = seen.decode().replace("\r\n", "\n")
    assert "\rdone      100%" in bar, bar
    assert "done 100%" not in bar and "\nbaseline" not in bar, bar


def test_the_exported_scenario_gives_the_same_baseline_when_simulated(live):
    exported = live["tmp"] / "snapshot.yaml"
    data = whatif(live, "--set-quota", "alpha=16", "--export-scenario", str(exported))
    out = live["tmp"] / "simulated.json"
    done = manage("simulate", str(exported), "--out", str(out), "--quiet",
                  database_url=live["url"], tmpdir=live["tmp"])
    assert done.returncode == 0, done.stderr
    scenario = load_scenario(exported)
    result = json.loads(out.read_text())
    stats = team_stats(result, scenario)
    for t in data["tenants"]:
        for key in ("mean_wait_s", "p95_wait_s", "gpus_held", "preemptions",
                    "gpu_hours_lost", "started", "failed"):
            assert t[f"baseline_{key}"] == stats[t["name"]][key], (t["name"], key)
    starts = job_starts(result, scenario)
    assert {j["id"]: j["baseline_start_in_s"] for j in data["jobs"]} == starts
    assert len(scenario.jobs) == 8 and sum(1 for j in scenario.jobs if j.running) == 3


def _fingerprint(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.parent.glob(path.name + "*"))}


def test_the_live_database_is_byte_for_byte_untouched(live):
    before = _fingerprint(live["file"])
    assert list(before) == ["live.sqlite3"]  # no WAL left over from the seed
    whatif(live, "--set-quota", "alpha=16", "--add-nodes", "pod-a=1", "--drain", "a1",
           "--cancel", live["ids"]["beta-q0"], "--setting", "grace_period_s=30",
           "--export-scenario", str(live["tmp"] / "x.json"))
    done = manage("whatif", "--quiet", "--drain", "nope", database_url=live["url"],
                  tmpdir=live["tmp"])
    assert done.returncode == 2
    assert _fingerprint(live["file"]) == before


def test_an_output_path_that_cannot_be_written_is_refused_before_the_runs(live):
    # before this check, --export-scenario over the database file replaced it with YAML,
    # and a directory as --json failed with a traceback after the runs
    before = _fingerprint(live["file"])
    out = live["tmp"] / "both.json"
    for flags, named in [
        (("--export-scenario", str(live["file"])), "is the live database"),
        (("--json", str(live["file"]) + "-wal"), "is the live database"),
        (("--json", str(live["tmp"])), "is a directory; give a file name"),
        (("--json", str(out), "--export-scenario", str(out)), "is also --json's file"),
        # a filesystem that refuses new files passes os.access: it failed after the runs,
        # naming the temporary file (an operator's session, 2026-12-07)
        (("--json", "/proc/whatif.json"), "--json /proc/whatif.json: cannot be written"),
    ]:
        done = manage("whatif", "--quiet", *flags, database_url=live["url"],
                      tmpdir=live["tmp"])
        assert done.returncode == 2, done.stderr
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and named in errors[0], done.stderr
        assert done.stdout == ""  # refused before the runs: no table
    assert _fingerprint(live["file"]) == before
    assert not out.exists()


def test_a_database_that_is_not_there_or_not_migrated_is_one_line_and_no_file(tmp_path):
    # a mistyped SQLite path made an empty database file and ended in a traceback
    # ("no such table: scheduler_app_node"): an operator's session, 2026-12-07
    missing = tmp_path / "nonexist.sqlite3"
    done = manage("whatif", "--quiet", database_url=f"sqlite:///{missing}", tmpdir=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert errors == [f"whatif: error: the database {missing} does not exist: there is no "
                      "live state to play forward (DATABASE_URL)"], done.stderr
    assert not missing.exists()
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    done = manage("whatif", "--quiet", database_url=f"sqlite:///{empty}", tmpdir=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(
        "whatif: error: cannot read the live state: "), done.stderr
    assert "manage.py migrate" in errors[0]


@pytest.mark.postgres
def test_a_live_postgres_database_is_left_as_it_was(tmp_path: Path):
    """The snapshot's transaction is READ ONLY on PostgreSQL: the dump is the same after
    a what-if with every kind of change."""
    from .test_scratch_database import _admin, _dump

    name = f"sched_whatif_{secrets.token_hex(4)}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}").geturl()
    try:
        for args in (("migrate", "--no-input", "-v", "0"),
                     ("shell", "-c", "from tests.sim.whatif_seed import seed; seed()")):
            done = manage(*args, database_url=url, tmpdir=tmp_path)
            assert done.returncode == 0, done.stderr
        before = _dump(url)
        out = tmp_path / "w.json"
        done = manage("whatif", "--quiet", "--set-quota", "alpha=16", "--add-nodes",
                      "pod-a=1", "--drain", "a1", "--cancel", "3", "--setting",
                      "grace_period_s=30", "--json", str(out), database_url=url,
                      tmpdir=tmp_path)
        assert done.returncode == 0, done.stderr
        alpha = next(t for t in json.loads(out.read_text())["tenants"] if t["name"] == "alpha")
        assert alpha["whatif_mean_wait_s"] < alpha["baseline_mean_wait_s"]
        assert _dump(url) == before
    finally:
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
