"""Compile the scheduling core with mypyc into ``build/core/`` (``make core``).

    python -m scheduler_app.core_build [--force] [--strict]

Nothing to do when the build there was made from the same sources (its DIGEST file). The
sources are copied to a scratch directory and compiled there, so no extension module ever
lands beside a source it could shadow; the build replaces the old one whole, DIGEST last.
Without a C compiler or mypy, the core stays pure Python (slower, same decisions): a
warning, and exit status 0 unless ``--strict`` (CI) or ``SCHED_CORE_STRICT=1``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scheduler_app import core

PACKAGE = Path(core.__file__).resolve().parent


def build(dest: Path, *, force: bool = False, out=sys.stdout) -> bool:
    """Build into ``dest``; True if a build of the current sources is there afterwards."""
    digest = core.sources_digest()
    if not force and core.built_digest(dest) == digest:
        print(f"core: the build in {dest} is up to date", file=out)
        return True
    started = time.monotonic()
    print(f"core: compiling {len(core.COMPILED_MODULES)} modules with mypyc "
          "(about a minute on two cores)...", file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="sched-core-build-") as scratch:
        root = Path(scratch)
        pkg = root / "scheduler_app" / "core"
        pkg.mkdir(parents=True)
        (root / "scheduler_app" / "__init__.py").write_text("")
        for src in PACKAGE.glob("*.py"):  # all of them: the compiled ones import the rest
            shutil.copy2(src, pkg / src.name)
        files = [f"scheduler_app/core/{name}.py" for name in core.COMPILED_MODULES]
        env = dict(os.environ, MYPY_CACHE_DIR=str(root / ".mypy_cache"))
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", "--ignore-missing-imports", *files],
            cwd=root, env=env, capture_output=True, text=True,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            print(f"core: mypyc failed (exit {done.returncode}):\n{tail}", file=out)
            return False
        staged = Path(tempfile.mkdtemp(prefix=".core-", dir=dest.parent))
        try:
            (staged / "scheduler_app" / "core").mkdir(parents=True)
            for lib in root.glob("*.so"):  # the modules' shared library
                shutil.copy2(lib, staged / lib.name)
            for lib in pkg.glob("*.so"):
                shutil.copy2(lib, staged / "scheduler_app" / "core" / lib.name)
            (staged / "DIGEST").write_text(digest + "\n")
            shutil.rmtree(dest, ignore_errors=True)
            staged.rename(dest)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    print(f"core: built in {time.monotonic() - started:.0f} s into {dest}", file=out)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_app.core_build",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--strict", action="store_true",
                        default=os.environ.get("SCHED_CORE_STRICT") == "1",
                        help="fail (exit 1) when the core cannot be compiled")
    args = parser.parse_args(argv)
    dest = core.BUILD_DIR
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        ok = build(dest, force=args.force)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"core: cannot build: {exc}")
        ok = False
    if ok:
        return 0
    print("core: WARNING: the scheduling core runs as pure Python (same decisions, "
          "slower); install a C compiler and the project's mypy, then `make core`")
    return 1 if args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
