"""Writing scenario dicts to disk: YAML (the documented format) or JSON (by the suffix)."""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def dump_scenario(scenario: dict[str, Any], *, json_format: bool = False) -> str:
    """The scenario as text. YAML puts each job on one line (flow style), so a 100,000-job
    file stays readable with ``grep`` and diffable line by line."""
    if json_format:
        return json.dumps(scenario, separators=(",", ":"), sort_keys=False) + "\n"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: 10x on 100k jobs
    return yaml.dump(scenario, Dumper=dumper, sort_keys=False, default_flow_style=None,
                     width=1_000_000)


def write_scenario(scenario: dict[str, Any], path: str | Path) -> Path:
    """Write ``scenario`` to ``path``: JSON if it ends in ``.json``, YAML otherwise."""
    path = Path(path)
    text = dump_scenario(scenario, json_format=path.suffix.lower() == ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_files([(path, text)])  # never leave a half-written scenario behind
    return path


def output_problem(path: str | Path, protected: Collection[Path] = (), *,
                   makes_parents: bool = False) -> str | None:
    """Why ``path`` cannot be written as an answer file, asked before a long run rather
    than after it (None: it can): an empty name, a directory that does not exist (unless
    the writer ``makes_parents``), a directory given as the file, no permission, or one
    of ``protected`` (the configured database's files, see :func:`database_files`)."""
    if not str(path).strip():
        return "must be a file name"
    where = Path(path).resolve()
    if where in protected:
        return "is the configured database (or one of its files): never written here"
    if where.is_dir():
        return "is a directory; give a file name"
    parent = where.parent
    if makes_parents:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.is_dir():
        return "no such directory"
    if not os.access(parent, os.W_OK) or (where.exists() and not os.access(where, os.W_OK)):
        return "not writable"
    if parent.is_dir():
        # the temporary file write_files makes beside it, tried: a filesystem that refuses
        # new files (/proc) passes os.access, and failed only after the runs, naming the
        # temporary file (an operator's session, 2026-12-07)
        probe = _tmp_beside(where)
        try:
            with open(probe, "x", encoding="utf-8"):
                pass
        except OSError as exc:
            return f"cannot be written ({exc.strerror})"
        probe.unlink(missing_ok=True)
    return None


def _tmp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def database_files(databases: Iterable[Mapping[str, Any]]) -> set[Path]:
    """The files of the SQLite databases among ``databases`` (Django's DATABASES
    values), with their journal files: an answer file must never replace one (a server
    database has none)."""
    out: set[Path] = set()
    for db in databases:
        base = sqlite_file(db)
        if base is not None:
            base = base.resolve()
            out |= {base, *(base.with_name(base.name + s)
                            for s in ("-wal", "-shm", "-journal"))}
    return out


def sqlite_file(db: Mapping[str, Any]) -> Path | None:
    """The file of a SQLite database (Django's DATABASES value); None for a server's, or
    for SQLite in memory."""
    name = str(db.get("NAME") or "")
    if ("sqlite" in str(db.get("ENGINE", "")) and name
            and not name.startswith(":memory:") and not name.startswith("file:")):
        return Path(name)
    return None


def write_files(files: Sequence[tuple[Path, str]]) -> None:
    """Write each text to its path, all or none: each goes to a temporary file beside its
    path first, and only once every one is written are they renamed into place, so an
    error (a full disk, an interrupt) leaves no file half written, no temporary file
    behind, and no answer without the other one asked for."""
    written: list[tuple[Path, Path]] = []
    try:
        for path, text in files:
            tmp = _tmp_beside(path)
            written.append((tmp, path))
            try:
                tmp.write_text(text, encoding="utf-8")
            except OSError as exc:  # named as the file asked for, not the temporary one
                raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        for tmp, _path in written:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in written:
        tmp.replace(path)
