"""The math family's modules form a layered graph: no module imports another that (directly or
through others) imports it back. Imports inside functions count too, so none can hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import rubrics.math

PACKAGE = Path(rubrics.math.__file__).parent


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module name → the modules of `package` it imports (anywhere in its source)."""
    prefix = f"rubrics.{package.name}"
    modules = {f.stem for f in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = node.module.split(".")
                if node.module == prefix:  # `from rubrics.math import x`: a module, else the package
                    deps |= {a.name if a.name in modules else "__init__" for a in node.names}
                elif node.module.startswith(prefix + ".") and names[2] in modules:
                    deps.add(names[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names if a.name.startswith(prefix + ".")}
        graph[path.stem] = deps - {path.stem}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (`a → b → a`), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        path.append(mod)
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state and (found := visit(mod)):
            return found
    return None


def test_the_math_package_has_no_import_cycle():
    graph = import_graph(PACKAGE)
    assert len(graph) > 10 and graph["verifier"] >= {"extract", "compare", "pool"}  # it parsed
    cycle = find_cycle(graph)
    assert cycle is None, " → ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_but_the_package_imports_the_package_itself():
    """`from rubrics.math import x` for a non-module name runs `__init__`, which imports everything."""
    graph = import_graph(PACKAGE)
    assert [m for m, deps in graph.items() if "__init__" in deps] == []
