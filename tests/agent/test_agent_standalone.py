"""The agent runs on nodes that have Python and nothing else: no module of
``scheduler_app.agent`` imports Django (or anything outside the standard library)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import scheduler_app.agent

AGENT_DIR = Path(scheduler_app.agent.__file__).parent
REPO = AGENT_DIR.parents[1]

#: Run in a fresh interpreter: Django made unimportable, every agent module imported, the
#: command line's --help printed; then nothing of Django may be loaded.
NO_DJANGO = """
import importlib, pkgutil, sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("django", "rest_framework", "drf_spectacular", "requests"):
            raise ImportError(f"{name} is not installed on this node")
        return None

sys.meta_path.insert(0, Refuse())
import scheduler_app.agent as agent
for info in pkgutil.iter_modules(agent.__path__):
    if info.name != "__main__":
        importlib.import_module(f"scheduler_app.agent.{info.name}")
from scheduler_app.agent import cli
try:
    cli.main(["--help"])
except SystemExit as stop:
    assert stop.code == 0, stop.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "rest_framework"))
assert not loaded, loaded
print("standalone ok")
"""


def test_the_agent_imports_and_runs_without_django():
    done = subprocess.run([sys.executable, "-c", NO_DJANGO], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "standalone ok" in done.stdout
    assert "--node" in done.stdout  # the help was printed


def test_python_dash_m_runs_the_agent_command_line():
    done = subprocess.run([sys.executable, "-m", "scheduler_app.agent", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--stop-signal" in done.stdout and "--token-file" in done.stdout


def test_agent_modules_import_only_the_standard_library_and_each_other():
    stdlib = sys.stdlib_module_names
    for path in sorted(AGENT_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: another module of the agent
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in stdlib or top == "__future__", f"{path.name} imports {name}"
