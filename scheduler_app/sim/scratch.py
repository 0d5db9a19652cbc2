"""A scratch database for ``simulate --engine db``: created for the run, dropped after it.

A what-if must never touch live data, whatever ``DATABASE_URL`` holds. So the db engine
never runs on the configured database: :func:`scratch_database` makes a new, empty one
beside it (a new database on the same PostgreSQL server, with the same credentials; a
temporary file for SQLite), and :func:`run_in_scratch` runs the simulation in a child
process whose ``DATABASE_URL`` is that database (migrated first), then drops it, also
when the run fails or is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

#: set in the child's environment: the database it runs on is a scratch one
SCRATCH_ENV = "SCHED_SIM_SCRATCH_DB"
REPO = Path(__file__).resolve().parents[2]


class ScratchError(Exception):
    """The scratch database could not be made (one line for the user)."""


def _pg_url(settings: Mapping[str, Any], name: str) -> str:
    user = quote(str(settings.get("USER") or ""), safe="")
    password = settings.get("PASSWORD") or ""
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user
                                                                         else "")
    host = settings.get("HOST") or "localhost"
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{quote(name, safe='')}"


def _pg_admin(settings: Mapping[str, Any]) -> Any:
    """An autocommit connection to the server's maintenance database (CREATE DATABASE
    cannot run in a transaction)."""
    import psycopg

    kwargs = {k: v for k, v in {
        "host": settings.get("HOST") or None, "port": settings.get("PORT") or None,
        "user": settings.get("USER") or None, "password": settings.get("PASSWORD") or None,
    }.items() if v is not None}
    try:
        return psycopg.connect(dbname="postgres", autocommit=True, connect_timeout=10,
                               **kwargs)
    except psycopg.Error as exc:
        raise ScratchError(f"cannot reach the PostgreSQL server to make a scratch database: "
                           f"{str(exc).splitlines()[0]}") from exc


@contextlib.contextmanager
def scratch_database(settings: Mapping[str, Any]) -> Iterator[str]:
    """A new, empty database next to the one ``settings`` (Django's DATABASES entry)
    describes, as a URL; dropped on exit. The configured database itself is only read
    for its server and credentials."""
    engine = str(settings.get("ENGINE", ""))
    if "postgresql" in engine:
        import psycopg

        name = f"sched_sim_{os.getpid()}_{secrets.token_hex(4)}"
        with _pg_admin(settings) as admin:
            try:
                admin.execute(f'CREATE DATABASE "{name}"')
            except psycopg.Error as exc:
                raise ScratchError(f"cannot create a scratch database on the PostgreSQL "
                                   f"server: {str(exc).splitlines()[0]}") from exc
        try:
            yield _pg_url(settings, name)
        finally:
            with _pg_admin(settings) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    if "sqlite" in engine:
        folder = tempfile.mkdtemp(prefix="sched-sim-")
        path = Path(folder) / "scratch.sqlite3"
        try:
            yield f"sqlite:///{path}"
        finally:
            for leftover in Path(folder).glob("*"):
                leftover.unlink()
            os.rmdir(folder)
        return
    raise ScratchError(f"--engine db: no scratch database for the engine {engine!r} "
                       "(PostgreSQL and SQLite are supported)")


def run_in_scratch(settings: Mapping[str, Any], argv: list[str], *, quiet: bool) -> int:
    """``manage.py simulate`` with ``argv`` in a child process on a scratch database:
    the child migrates it, simulates, writes the result; the database is dropped after.
    Returns the child's exit code (its stderr, the progress bar and messages, passes
    through)."""
    with scratch_database(settings) as url:
        env = {**os.environ, "DATABASE_URL": url, SCRATCH_ENV: "1",
               # the scratch run must not reach a broker or a cache shared with the live
               # deployment: the simulation ticks itself
               "CELERY_BROKER_URL": "", "CACHE_URL": "locmemcache://"}
        manage = [sys.executable, str(REPO / "manage.py")]
        migrated = subprocess.run([*manage, "migrate", "--no-input", "-v", "0"], env=env,
                                  cwd=REPO, capture_output=True, text=True)
        if migrated.returncode:
            raise ScratchError("cannot migrate the scratch database: "
                               + (migrated.stderr.strip().splitlines() or ["?"])[-1])
        child = subprocess.run([*manage, "simulate", *argv, *(["--quiet"] if quiet else [])],
                               env=env, cwd=REPO)
        return child.returncode


def in_scratch() -> bool:
    """This process runs on a scratch database made by :func:`run_in_scratch`."""
    return os.environ.get(SCRATCH_ENV) == "1"
