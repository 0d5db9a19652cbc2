"""How the core picks its modules (scheduler_app/core/__init__.py) and how ``make core``
builds them (scheduler_app/core_build.py): a build is used only while it matches the
sources, a mode that is not one is refused with the choices named, and a build that
fails leaves the last one as it was and says so (an error when strict)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import scheduler_app.core as core
from scheduler_app import core_build

REPO = Path(__file__).resolve().parents[2]
PROBE = ("import scheduler_app.core as c, scheduler_app.core.tick as t; "
         "print(c.COMPILED, t.__file__)")


def _probe(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


def _fake_build(where: Path, digest: str, *, modules: bool = False) -> Path:
    """A build directory whose stamp says ``digest``; ``modules``: with an empty file in
    place of each compiled module (enough for the checks that a build is whole)."""
    (where / "scheduler_app" / "core").mkdir(parents=True)
    if modules:
        for name in core.COMPILED_MODULES:
            (where / "scheduler_app" / "core" / f"{name}{EXTENSION_SUFFIXES[0]}").touch()
    (where / "DIGEST").write_text(digest + "\n")
    return where


@pytest.mark.parametrize("mode", ["auto", "pure", ""])
def test_a_build_of_other_sources_is_never_used(tmp_path, mode) -> None:
    stale = _fake_build(tmp_path / "b", "0" * 64)
    done = _probe(SCHED_CORE=mode, SCHED_CORE_BUILD=str(stale))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", str(REPO / "scheduler_app/core/tick.py")]


def test_compiled_without_a_matching_build_is_refused_with_the_fix(tmp_path) -> None:
    stale = _fake_build(tmp_path / "b", "0" * 64)
    done = _probe(SCHED_CORE="compiled", SCHED_CORE_BUILD=str(stale))
    assert done.returncode != 0
    assert "ImportError" in done.stderr and "make core" in done.stderr


def test_a_build_with_a_module_missing_is_no_build(tmp_path) -> None:
    """The stamp matches the sources but the modules are gone (a build emptied by
    hand): auto runs the sources and says so, compiled is refused, and `make core` does
    not take it for an up-to-date build."""
    emptied = _fake_build(tmp_path / "b", core.sources_digest())
    assert core.built_digest(emptied) is None  # what the builder's up-to-date check reads
    assert core.built_digest(_fake_build(tmp_path / "whole", core.sources_digest(),
                                         modules=True)) == core.sources_digest()
    auto = _probe(SCHED_CORE="auto", SCHED_CORE_BUILD=str(emptied))
    assert auto.returncode == 0, auto.stderr
    assert auto.stdout.split() == ["False", str(REPO / "scheduler_app/core/tick.py")]
    compiled = _probe(SCHED_CORE="compiled", SCHED_CORE_BUILD=str(emptied))
    assert compiled.returncode != 0 and "make core" in compiled.stderr


def test_a_mode_that_is_not_one_is_refused_naming_the_choices() -> None:
    done = _probe(SCHED_CORE="fast")
    assert done.returncode != 0
    assert "SCHED_CORE='fast'" in done.stderr and "auto, pure, compiled" in done.stderr


def test_the_digest_follows_every_compiled_source(tmp_path, monkeypatch) -> None:
    copy = tmp_path / "core"
    copy.mkdir()
    for name in core.COMPILED_MODULES:
        (copy / f"{name}.py").write_bytes((core._HERE / f"{name}.py").read_bytes())
    monkeypatch.setattr(core, "_HERE", copy)
    before = core.sources_digest()
    for name in ("tick", "types"):
        path = copy / f"{name}.py"
        path.write_text(path.read_text() + "\n# an edit\n")
        after = core.sources_digest()
        assert after != before, name
        before = after


def test_an_up_to_date_build_is_left_alone(tmp_path) -> None:
    dest = _fake_build(tmp_path / "b", core.sources_digest(), modules=True)
    (dest / "marker").write_text("kept")
    out = tmp_path / "log"
    with out.open("w") as f:
        assert core_build.build(dest, out=f) is True
    assert "up to date" in out.read_text()
    assert (dest / "marker").read_text() == "kept"


@pytest.mark.slow
def test_a_failed_build_keeps_the_last_one_and_fails_when_strict(tmp_path) -> None:
    last = _fake_build(tmp_path / "b", "0" * 64)
    (last / "marker").write_text("kept")
    # (CI exports SCHED_CORE_STRICT=1 for its own build: the lax run must not inherit it)
    env = {k: v for k, v in os.environ.items() if k != "SCHED_CORE_STRICT"}
    env.update(SCHED_CORE_BUILD=str(last), CC=str(tmp_path / "no-cc"))
    cmd = [sys.executable, "-m", "scheduler_app.core_build"]
    lax = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert lax.returncode == 0, lax.stdout
    assert "mypyc failed" in lax.stdout and "runs as pure Python" in lax.stdout
    # strict as CI asks for it (``--strict`` is the same switch, its default)
    strict = subprocess.run(cmd, cwd=REPO, env={**env, "SCHED_CORE_STRICT": "1"},
                            capture_output=True, text=True, timeout=600)
    assert strict.returncode == 1, strict.stdout
    assert (last / "DIGEST").read_text().strip() == "0" * 64
    assert (last / "marker").read_text() == "kept"
    assert not list(tmp_path.glob(".core-*"))  # no staging directory left behind


RUN = """
import hashlib, json
import scheduler_app.core as c
from scheduler_app.core import layers, queues
from scheduler_app.sim.engine import Simulation
from scheduler_app.sim.result import build_result
from scheduler_app.sim.scenario import validate_scenario
from scheduler_app.workloads.synthetic import SyntheticParams, generate

# a layer's journal is weakly held by its lender: a compiled (native) class could not be
lender = layers.Lender({"a": 1})
layer = lender.lend()
lender.before_change("a")
lender.map["a"] = 2
assert layer["a"] == 1 and lender.alive() == 1
del layer
assert lender.alive() == 0
sc = validate_scenario(generate(SyntheticParams(jobs=1500, nodes=32, teams=6, hours=0.5)))
out = Simulation(sc, policy="full").run()
jobs = json.dumps(build_result(out)["jobs"], sort_keys=True).encode()
print(c.COMPILED, layers.__file__.endswith(".py"), queues.__file__.endswith(".py"),
      hashlib.sha256(jobs).hexdigest())
"""


@pytest.mark.slow
def test_the_compiled_core_decides_as_the_sources_do() -> None:
    """The suite runs the Python sources; this runs a short simulation on the build as
    well (the layers' weakly held journals, the queues' sorted lists, the tick), and the
    two must decide the same. Needs ``make core`` (CI builds it first)."""
    if core.built_digest() != core.sources_digest():
        pytest.skip("no build of these sources: run `make core`")
    runs = {}
    for mode in ("compiled", "pure"):
        done = subprocess.run([sys.executable, "-c", RUN], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, "SCHED_CORE": mode}, timeout=600)
        assert done.returncode == 0, done.stderr
        runs[mode] = done.stdout.split()
    assert runs["compiled"][:3] == ["True", "False", "False"]  # extension modules ran
    assert runs["pure"][:3] == ["False", "True", "True"]
    assert runs["compiled"][3] == runs["pure"][3]
