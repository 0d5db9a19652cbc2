"""The scheduling core imports no Django: checked in the source and in a fresh process."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import scheduler_app.core

CORE_DIR = Path(scheduler_app.core.__file__).parent
REPO = CORE_DIR.parent.parent
FORBIDDEN = ("django", "rest_framework", "celery", "scheduler_app.models", "scheduler_app.services")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_core_module_imports_django_in_its_source():
    sources = sorted(CORE_DIR.rglob("*.py"))
    assert sources, "the core package has no modules?"
    offenders = {
        str(path.relative_to(REPO)): sorted(
            name
            for name in imported_modules(path)
            if name.split(".")[0] in FORBIDDEN or name.startswith(FORBIDDEN)
        )
        for path in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_importing_every_core_module_loads_no_django():
    script = (
        "import importlib, pkgutil, sys\n"
        "import scheduler_app.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'scheduler_app.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('django', 'celery'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def _runtime_core_imports(path: Path) -> set[str]:
    """The core modules ``path`` imports when it runs (relative imports; an import under
    ``if TYPE_CHECKING:`` is for annotations only and does not count)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    return {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        and id(node) not in typing_only
    }


def test_the_core_modules_import_each_other_one_way():
    """No import cycle among the core's modules (scheduler imports tick; tick never imports
    scheduler): each module can be read, and tested, above the ones it depends on."""
    graph = {p.stem: _runtime_core_imports(p) for p in CORE_DIR.glob("*.py")}
    assert "scheduler" not in graph["tick"] and "tick" in graph["scheduler"]
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join((*path, module))
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
