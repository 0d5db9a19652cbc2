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
