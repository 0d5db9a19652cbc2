"""Imports flow one way: edges (tasks, views, commands) -> services and selectors -> models.

The services once reached the Celery edge (``early_tick`` imported ``tasks`` to ask for
a tick, ``tasks`` imports the leader, the leader the services): a circle. They now send a
signal that the app wires to the tasks when it is ready. Checked in the source, lazy
imports inside functions included (they close a circle as surely as the others);
``if TYPE_CHECKING:`` blocks are left out (never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler_app

PACKAGE = Path(scheduler_app.__file__).parent
REPO = PACKAGE.parent

#: the modules of the circle the issue named, and the packages they belong to
WATCHED_PREFIXES = (
    "scheduler_app.services", "scheduler_app.selectors", "scheduler_app.tasks",
    "scheduler_app.observability",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The scheduler_app modules ``path`` imports (a ``from package import module`` names
    the module), wherever the import statement is, except under TYPE_CHECKING."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            found.add(target)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, known) for p in paths}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_services_never_import_the_tasks():
    graph = import_graph()
    services = sorted(m for m in graph if m.startswith("scheduler_app.services"))
    assert "scheduler_app.services.early_tick" in services
    offenders = {m: "scheduler_app.tasks" for m in services
                 if "scheduler_app.tasks" in reachable(graph, m)}
    assert offenders == {}


def test_services_tasks_and_observability_import_each_other_in_no_circle():
    graph = import_graph()
    watched = [m for m in graph if m.startswith(WATCHED_PREFIXES)]
    circles = sorted(m for m in watched if m in reachable(graph, m))
    assert circles == []


def test_the_graph_sees_lazy_imports():
    """The check would miss the old circle if it read module-level imports only."""
    source = "def f():\n    from scheduler_app.tasks import request_early_tick\n"
    probe = PACKAGE / "services" / "_probe_lazy_import.py"
    probe.write_text(source)
    try:
        graph = import_graph()
    finally:
        probe.unlink()
    assert "scheduler_app.tasks" in graph["scheduler_app.services._probe_lazy_import"]
