"""The modules of `sandbox/` import each other without a cycle, counting imports inside functions too
(a function-level import hides a cycle; it does not break it). Read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

import sandbox

PKG = Path(sandbox.__file__).parent


def intra_package_imports(pkg: Path = PKG, name: str = "sandbox") -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its source (`__init__` as `name`)."""
    modules = {p.stem for p in pkg.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for path in pkg.glob("*.py"):
        me = name if path.stem == "__init__" else f"{name}.{path.stem}"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.startswith(f"{name}.")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x / from .x import y
                    base = f"{name}.{base}" if base else name
                if base == name:
                    edges |= {f"{name}.{a.name}" for a in node.names if a.name in modules}
                elif base.startswith(f"{name}."):
                    edges.add(base)
        graph[me] = edges - {me}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_the_sandbox_package_has_no_import_cycle():
    graph = intra_package_imports()
    assert {"sandbox.bwrap", "sandbox.pool", "sandbox.borrow", "sandbox.backend"} <= set(graph)
    assert "sandbox.backend" in graph["sandbox.pool"]  # edges are found (the check can fail)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_function_level_cycle(tmp_path):
    """The check itself: a cycle closed by an import inside a function is reported."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from . import a\n")
    graph = intra_package_imports(pkg, "pkg")
    assert graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])
