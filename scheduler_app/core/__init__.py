"""The scheduling core: pure Python, no Django, time always passed in as an argument.

A test enforces that nothing under this package imports Django.

The same sources can also run compiled to C by mypyc (``make core``, which runs
``python -m scheduler_app.core_build``): 1.31 times as fast on the busy day and 1.43
times on the Helios anchor window, with the same decisions
(tests/sim/test_compiled_core.py). The build goes to ``build/core/``, never beside the
sources, with the digest of the sources it was made from. This package uses it
only while that digest matches, so an edited module can never run as its stale compiled
copy. ``SCHED_CORE`` chooses:

- ``auto`` (the default): the build when it matches the sources, else the Python sources;
- ``pure``: the Python sources (the test suite's default, tests/core_mode.py);
- ``compiled``: the build, or ImportError naming the fix when there is none that matches.
"""

from __future__ import annotations

import hashlib
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

#: the modules the build compiles (every module of the core: layers.py's journals, held
#: by weak reference, are the one class left a Python class there)
COMPILED_MODULES: tuple[str, ...] = (
    "capacity", "fairshare", "gates", "layers", "placement", "preemption", "queues", "records",
    "reservation", "scheduler", "sortedlist", "states", "tick", "types",
)
MODES = ("auto", "pure", "compiled")

_HERE = Path(__file__).resolve().parent
#: where ``make core`` puts the compiled modules (``SCHED_CORE_BUILD`` moves it)
BUILD_DIR = Path(os.environ.get("SCHED_CORE_BUILD") or _HERE.parent.parent / "build" / "core")


def sources_digest() -> str:
    """What a build is valid for: the compiled modules' sources and this interpreter."""
    h = hashlib.sha256(f"{sys.implementation.cache_tag} {sys.version}".encode())
    for name in COMPILED_MODULES:
        h.update(f"\0{name}\0".encode())
        h.update((_HERE / f"{name}.py").read_bytes())
    return h.hexdigest()


def built_digest(where: Path | None = None) -> str | None:
    """The digest of the sources the build in ``where`` (by default ``BUILD_DIR``) was
    made from; None when there is no build, or when one of its modules is missing (a
    build emptied by hand must not be taken for one: the sources would run while
    ``COMPILED`` said otherwise)."""
    build = BUILD_DIR if where is None else where
    stamp = build / "DIGEST"
    if not stamp.is_file():
        return None
    modules = build / "scheduler_app" / "core"
    for name in COMPILED_MODULES:
        if not any((modules / f"{name}{suffix}").is_file() for suffix in EXTENSION_SUFFIXES):
            return None
    return stamp.read_text().strip()


def _use_build() -> bool:
    mode = os.environ.get("SCHED_CORE", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ImportError(f"SCHED_CORE={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "pure":
        return False
    if built_digest() != sources_digest():
        if mode == "compiled":
            raise ImportError(
                f"SCHED_CORE=compiled, but {BUILD_DIR} holds no build of these sources: "
                "run `make core` (or unset SCHED_CORE to run the Python sources)")
        return False
    # the modules' extensions first, then the sources (any module not compiled); the
    # build's shared library is a top-level module of its own
    __path__.insert(0, str(BUILD_DIR / "scheduler_app" / "core"))  # noqa: F821 (package)
    sys.path.append(str(BUILD_DIR))
    return True


#: True when the modules above run compiled
COMPILED: bool = _use_build()
