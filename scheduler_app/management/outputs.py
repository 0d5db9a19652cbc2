"""What the commands that write an answer file share: the configured database's files,
which no answer may replace, and the ``--out`` check made before the work."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from scheduler_app.workloads.io import database_files, output_problem


def configured_database_files() -> set[Path]:
    """The configured SQLite database's files, with its journal files (none on a server)."""
    return database_files(settings.DATABASES.values())


def check_out(value: str, *, makes_parents: bool = False) -> None:
    """``--out``, checked before the work rather than after it: CommandError naming it."""
    problem = output_problem(value, configured_database_files(), makes_parents=makes_parents)
    if problem:
        raise CommandError(f"--out {value or repr(value)}: {problem}")
