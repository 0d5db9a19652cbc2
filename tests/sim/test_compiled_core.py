"""The compiled core (``make core``: the same sources compiled by mypyc, see
scheduler_app/core/__init__.py) decides exactly as the Python sources do.

The rest of the suite runs the Python sources (tests/core_mode.py): many tests replace a
core method to watch it, which a compiled class does not allow. So this test runs the
comparison workloads (the shared scenarios and worked examples under both preempting
policies, a busy half hour of arrivals whose passes the work budget cuts, two small
``make_workload`` mixes and a loaded Helios day) once in each core, in two processes side
by side, and compares the whole result documents: every decision, its time and reason,
every recorded pending reason and start estimate, every metric but the tick timings.

It also holds both cores to the promise the simulator's paused collector rests on
(scheduler_app/sim/engine.py): a run leaves no reference cycle among the project's
objects. (Compiled, a nested function lives in a cycle with its environment: a search's
closures once kept every cluster copy they read alive until the collector came.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import scheduler_app.core as core

REPO = Path(__file__).resolve().parents[2]


def _build_present() -> bool:
    return core.built_digest() == core.sources_digest()


@pytest.mark.slow
def test_the_compiled_core_decides_as_the_python_sources(tmp_path) -> None:
    if not _build_present():
        if os.environ.get("CI") or os.environ.get("SCHED_CORE_STRICT") == "1":
            pytest.fail(f"no build of the core's sources in {core.BUILD_DIR}: "
                        "`make test` builds it (make core)")
        pytest.skip("the core is not compiled here (make core)")
    procs = {}
    for mode in ("pure", "compiled"):
        env = dict(os.environ, SCHED_CORE=mode)
        procs[mode] = subprocess.Popen(
            [sys.executable, "-m", "tests.sim.compiled_runner", str(tmp_path / f"{mode}.json")],
            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    for mode, proc in procs.items():
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{mode} run failed:\n{err[-3000:]}"
    pure = json.loads((tmp_path / "pure.json").read_text())
    compiled = json.loads((tmp_path / "compiled.json").read_text())

    assert pure["compiled"] is False and pure["tick_module"].endswith(".py")
    assert compiled["compiled"] is True and compiled["tick_module"].endswith(".so")
    assert sorted(compiled["runs"]) == sorted(pure["runs"])
    assert len(pure["runs"]) >= 10
    for name, expected in pure["runs"].items():
        got = compiled["runs"][name]
        assert got["jobs"] == expected["jobs"], name  # (the smaller diff first)
        assert got == expected, name
    for mode, doc in (("pure", pure), ("compiled", compiled)):
        assert sorted(doc["cycles"]) == sorted(doc["runs"])
        left = {run: found for run, found in doc["cycles"].items() if found}
        assert left == {}, f"{mode}: reference cycles left by the runs: {left}"
    # not vacuous: the runs start, preempt and keep jobs waiting with reasons
    jobs = [j for run in pure["runs"].values() for j in run["jobs"].values()]
    assert sum(1 for j in jobs if j["first_start_s"] is not None) > 1000
    assert sum(j["preemptions"] for j in jobs) > 10
    assert sum(len(j["pending_reasons"]) for j in jobs) > 1000
    assert sum(len(j["start_estimates"]) for j in jobs) > 1000


# Run with SCHED_CORE=compiled: every class of the project outside the core whose bases
# include a core class, and that core class itself when it is compiled as a native class
# (a compiled class refuses an instance of a Python subclass: TypeError).
_SUBCLASSES = r"""
import importlib, json, pkgutil, sys
import django
django.setup()
import scheduler_app, dashboard
import scheduler_app.core as core
assert core.COMPILED
found, native = [], []
for package in (scheduler_app, dashboard):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if (info.name.startswith(("scheduler_app.core", "scheduler_app.agent.demo_job"))
                or info.name.endswith("__main__")):  # (a program: it runs on import)
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if not isinstance(value, type) or value.__module__ != info.name:
                continue
            for base in value.__mro__[1:]:
                if base.__module__.startswith("scheduler_app.core"):
                    found.append(f"{info.name}.{value.__name__}({base.__name__})")
                    if "__mypyc_attrs__" in base.__dict__:
                        native.append(found[-1])
from scheduler_app.services.errors import TransitionConflict
from scheduler_app.core.states import IllegalTransition
error = TransitionConflict(7, "CANCELLED", "CANCELLED")
assert isinstance(error, IllegalTransition) and "CANCELLED is final" in str(error)
print(json.dumps({"found": sorted(set(found)), "native": sorted(set(native))}))
"""


def test_no_class_outside_the_core_subclasses_a_compiled_core_class() -> None:
    """The services' TransitionConflict subclasses the core's IllegalTransition; compiled
    as a native class, that refused the subclass's instance, and every refused job move
    (cancelling a job twice) was a 500 in production while this suite, on the sources,
    saw nothing (found by trying the product, 2026-12-07)."""
    if not _build_present():
        if os.environ.get("CI") or os.environ.get("SCHED_CORE_STRICT") == "1":
            pytest.fail(f"no build of the core's sources in {core.BUILD_DIR}")
        pytest.skip("the core is not compiled here (make core)")
    env = dict(os.environ, SCHED_CORE="compiled",
               DJANGO_SETTINGS_MODULE="scheduler_app.settings")
    done = subprocess.run([sys.executable, "-c", _SUBCLASSES], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "scheduler_app.services.errors.TransitionConflict(IllegalTransition)" in seen["found"]
    assert seen["native"] == []


_POLICIES_SIDE_BY_SIDE = r"""
import json, os, sys
from pathlib import Path
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_app.settings")
django.setup()
import scheduler_app.core as core
import bench.policies as bp
out = bp.run(from_day=100, days=1, policies=["full", "fifo"], max_wall_s=300,
             reuse_full=False, results_dir=Path(sys.argv[1]), jobs=2)
print(json.dumps({"compiled": core.COMPILED,
                  "runs": [[r["policy"], r["complete"]] for r in out["runs"]]}))
"""


@pytest.mark.slow
def test_the_policies_benchmark_runs_policies_side_by_side_on_the_compiled_core(
        tmp_path) -> None:
    """``bench.policies --jobs 2`` sent the validated scenario to its forked children by
    pickle, which the compiled core's frozen dataclasses refuse (FrozenInstanceError):
    it failed on every machine that runs the compiled core (found 2026-12-07). The
    children now inherit it."""
    if not _build_present():
        pytest.skip("the core is not compiled here (make core)")
    from scheduler_app.workloads.helios import default_trace_dir

    if not default_trace_dir().exists():
        pytest.skip("the Helios traces are not here (SCHED_SHARED_DIR)")
    done = subprocess.run([sys.executable, "-c", _POLICIES_SIDE_BY_SIDE, str(tmp_path)],
                          cwd=REPO, env=dict(os.environ, SCHED_CORE="compiled"),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"compiled": True, "runs": [["full", True], ["fifo", True]]}
