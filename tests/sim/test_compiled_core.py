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
