"""The package's import graph: no module imports itself back, however indirectly.

Every import counts, those inside functions too: a circle that a late import hides still
ties the modules into one unit that cannot be read, tested or moved alone.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from conftest import REPO

PACKAGE = "fedmc_flwr"


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module name -> the package's modules it imports, from the source alone."""
    names = {}
    for path in root.rglob("*.py"):
        dotted = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        names[dotted.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        is_package = path.name == "__init__.py"
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    base = ".".join([*parts, base] if base else parts)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            graph[name].update(t for t in targets if t in names and t != name)
    return graph


def test_the_package_imports_no_module_back():
    root = REPO / PACKAGE
    graph = module_graph(root)
    assert len(graph) > 50, "the walk found too few modules to judge"
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None
