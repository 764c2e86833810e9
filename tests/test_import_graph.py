"""Imports point one way: no module of tether imports itself back through others (DESIGN.md §2).

The graph is read from the source, as text: every ``import`` counts, at module level or inside a
function, because a function-level import that closes a circle is a circle all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import tether

SRC = Path(tether.__file__).resolve().parent.parent

# Circles wholly inside these packages are being taken apart on another branch (issue 18): drop each when it is.
UNDER_WAY = ("tether.drivers.local.",)


def modules(src: Path) -> dict[str, Path]:
    """Every module under ``src`` by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports: ``from a import b`` is ``a.b`` when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                if whole in known:
                    found.add(whole)
                elif base in known:
                    found.add(base)
    return found - {name}


def graph(src: Path) -> dict[str, set[str]]:
    known = modules(src)
    return {name: imported(name, path, known) for name, path in known.items()}


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, rest = work[-1]
            step = next(rest, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(edges.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_the_walk_sees_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import helper\n")
    (pkg / "b.py").write_text("def helper():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from . import a\n")
    (pkg / "d.py").write_text("import pkg.a\n")

    assert circles(graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_modules_of_tether_import_each_other_in_a_circle() -> None:
    found = [part for part in circles(graph(SRC)) if not all(m.startswith(UNDER_WAY) for m in part)]

    assert found == []


def test_only_the_entry_point_imports_the_cli() -> None:
    """The CLI is a surface at the top: no other part of tether (the service included) imports it."""
    edges = graph(SRC)
    importers = {name for name, out in edges.items() if any(m.startswith("tether.cli") for m in out)}

    assert {name for name in importers if not name.startswith("tether.cli")} == {"tether.__main__"}
