"""The import graph reads top to bottom: layers point down only and no files import each other in a
circle. Every import counts, wherever it stands (module level, inside a function, or under
`TYPE_CHECKING`): a circle broken only by a late import is still a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("environments", "rubrics", "sandbox")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if any(part.startswith("rlvr_") for part in path.relative_to(ROOT).parts):
                continue  # hub packages: separate distributions
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (a package's `__init__` is not an edge to its modules)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_a_circle():
    g = graph()
    # a package's __init__ re-exporting its own modules is not a circle with them
    for name in g:
        g[name] = {
            t
            for t in g[name]
            if not (name.startswith(t + ".") and ROOT.joinpath(*t.split("."), "__init__.py").exists())
        }
    assert cycles(g) == []


LAYERS = [
    # (importer prefix, forbidden prefixes)
    ("sandbox", ("rubrics", "environments")),
    ("rubrics", ("environments",)),
    ("environments.atropos_runtime", ("environments.vf_bridge",)),
]


@pytest.mark.parametrize(("importer", "forbidden"), LAYERS)
def test_layers_point_down(importer, forbidden):
    g = graph()
    envs = {n for n in g if n.startswith("environments.") and n.count(".") == 1 and n.endswith("_env")}
    bad = sorted(
        f"{name} -> {t}"
        for name, targets in g.items()
        if name == importer or name.startswith(importer + ".")
        for t in targets
        if t.startswith(forbidden) or (importer.startswith("environments.") and t in envs)
    )
    assert bad == []
