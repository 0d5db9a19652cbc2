"""``simulate --engine db`` runs on a scratch database it makes and drops: whatever
DATABASE_URL holds, the configured (live) database is left byte for byte as it was, and
no scratch database or file is left behind, also when the run fails."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scheduler_app.sim.scratch import ScratchError, scratch_database

from .helpers import scenario_dir
from .test_db_engine import without_timings

REPO = Path(__file__).resolve().parents[2]
SCENARIO = scenario_dir() / "gang-no-deadlock.yaml"


def manage_env(database_url: str, tmpdir: Path) -> dict[str, str]:
    """The environment of a ``manage.py`` child on ``database_url``, with no broker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(DJANGO_SETTINGS_MODULE="scheduler_app.settings", DATABASE_URL=database_url,
               CELERY_BROKER_URL="", TMPDIR=str(tmpdir))
    return env


def manage(*args: str, database_url: str, tmpdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "manage.py"), *args], cwd=REPO,
                          env=manage_env(database_url, tmpdir), capture_output=True,
                          text=True, timeout=300)


def make_live(database_url: str, tmpdir: Path) -> None:
    """A live-looking database: migrated, the demo cluster seeded (users, teams, nodes,
    jobs, the log)."""
    for args in (("migrate", "--no-input", "-v", "0"),
                 ("seed_demo", "--password", "pw-for-tests-1")):
        done = manage(*args, database_url=database_url, tmpdir=tmpdir)
        assert done.returncode == 0, done.stderr


def memory_result(tmp_path: Path) -> dict:
    out = tmp_path / "memory.json"
    done = manage("simulate", str(SCENARIO), "--out", str(out), "--quiet",
                  database_url=f"sqlite:///{tmp_path / 'unused.sqlite3'}", tmpdir=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def test_engine_db_leaves_a_live_sqlite_database_byte_for_byte_untouched(tmp_path: Path):
    live = tmp_path / "live.sqlite3"
    scratch_tmp = tmp_path / "tmp"
    scratch_tmp.mkdir()
    url = f"sqlite:///{live}"
    make_live(url, scratch_tmp)
    before = hashlib.sha256(live.read_bytes()).hexdigest()

    out = tmp_path / "db.json"
    done = manage("simulate", str(SCENARIO), "--engine", "db", "--out", str(out),
                  database_url=url, tmpdir=scratch_tmp)

    assert done.returncode == 0, done.stderr
    assert "scratch database" in done.stderr and "rebuilt its tables" in done.stderr
    assert hashlib.sha256(live.read_bytes()).hexdigest() == before
    assert not list(scratch_tmp.iterdir()), "the scratch file was not removed"
    assert without_timings(json.loads(out.read_text())) == without_timings(
        memory_result(tmp_path))


def test_a_malformed_scenario_is_refused_before_any_scratch_database(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: []\n")
    scratch_tmp = tmp_path / "tmp"
    scratch_tmp.mkdir()
    out = tmp_path / "r.json"
    done = manage("simulate", str(bad), "--engine", "db", "--out", str(out),
                  database_url=f"sqlite:///{tmp_path / 'live.sqlite3'}", tmpdir=scratch_tmp)
    assert done.returncode == 1
    assert "CommandError" in done.stderr and not out.exists()
    assert not list(scratch_tmp.iterdir())


def test_flush_is_gone():
    done = subprocess.run([sys.executable, str(REPO / "manage.py"), "simulate", "--help"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--engine" in done.stdout
    assert "--flush" not in done.stdout


def test_a_sqlite_scratch_database_is_removed_when_the_run_fails(tmp_path: Path,
                                                                 monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    with pytest.raises(RuntimeError, match="boom"), scratch_database(
            {"ENGINE": "django.db.backends.sqlite3", "NAME": "live"}) as url:
        assert url.startswith("sqlite:///" + str(tmp_path))
        Path(urlsplit(url).path).write_text("half a run")
        raise RuntimeError("boom")
    assert not list(tmp_path.iterdir())


def test_an_unknown_engine_has_no_scratch_database():
    with pytest.raises(ScratchError, match="PostgreSQL and SQLite"), scratch_database(
            {"ENGINE": "django.db.backends.mysql"}):
        pass


# -- PostgreSQL: a live database on the configured server --------------------------------

def _pg_settings() -> dict:
    parts = urlsplit(os.environ["DATABASE_URL"])
    return {"ENGINE": "django.db.backends.postgresql", "HOST": parts.hostname or "",
            "PORT": parts.port or "", "USER": parts.username or "",
            "PASSWORD": parts.password or ""}


def _admin():
    import psycopg

    s = _pg_settings()
    return psycopg.connect(dbname="postgres", autocommit=True, host=s["HOST"] or None,
                           port=s["PORT"] or None, user=s["USER"] or None,
                           password=s["PASSWORD"] or None)


def _scratch_names() -> set[str]:
    with _admin() as admin:
        return {row[0] for row in admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'sched_sim_%'")}


def _left_behind(before: set[str]) -> set[str]:
    """Scratch databases made since ``before`` whose maker has exited: left behind. (The
    other test worker's runs may be making theirs meanwhile: a name carries its maker's
    pid, ``sched_sim_<pid>_<hex>``, and a maker still alive is not done with it.)"""
    left = set()
    for name in _scratch_names() - before:
        pid = int(name.split("_")[2])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            left.add(name)
    return left


def _dump(url: str) -> str:
    done = subprocess.run(["pg_dump", "--data-only", "--no-owner", url], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # pg_dump's \restrict guard lines carry a random key per dump
    return "\n".join(line for line in done.stdout.splitlines()
                     if not line.startswith(("\\restrict", "\\unrestrict")))


@pytest.fixture
def live_postgres(tmp_path: Path):
    name = f"sched_live_{secrets.token_hex(4)}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(os.environ["DATABASE_URL"])
    url = parts._replace(path=f"/{name}").geturl()
    try:
        make_live(url, tmp_path)
        yield url
    finally:
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_engine_db_leaves_a_live_postgres_database_untouched(live_postgres: str,
                                                             tmp_path: Path):
    before, scratch_before = _dump(live_postgres), _scratch_names()
    out = tmp_path / "db.json"
    done = manage("simulate", str(SCENARIO), "--engine", "db", "--out", str(out),
                  database_url=live_postgres, tmpdir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _dump(live_postgres) == before
    assert _left_behind(scratch_before) == set(), "the scratch database was not dropped"
    assert without_timings(json.loads(out.read_text())) == without_timings(
        memory_result(tmp_path))


@pytest.mark.postgres
def test_a_postgres_scratch_database_is_dropped_when_the_run_fails():
    made: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), scratch_database(_pg_settings()) as url:
        made.append(urlsplit(url).path.lstrip("/"))
        assert made[0] in _scratch_names()
        raise RuntimeError("boom")
    assert made and made[0] not in _scratch_names()
