"""Imports point down only, and go round in no circle (DESIGN.md §2).

The layers are data (``LAYERS``, bottom first). Every import in
``src/tether`` counts — at module level, inside a function, or under
``TYPE_CHECKING`` — because each says the importer depends on what it
imports. A module may import its own layer and those below; an import of a
higher layer, or a circle of modules importing each other, fails the test
with the modules and the line. The last tests build a small module tree
with an upward import and a circle, and show the checks find both.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom first. A module belongs to the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("tether.core",)),
    ("tools", ("tether.tools", "tether.toolsets")),
    ("adapters", ("tether.models", "tether.store", "tether.mcp", "tether.mcp.client", "tether.testing")),
    ("drivers", ("tether.drivers",)),
    ("surfaces", ("tether.cli", "tether.serve", "tether.eval", "tether.mcp.server")),
    ("package", ("tether", "tether.__main__")),  # the lazy public table and `python -m tether`
]


def modules(root: Path) -> dict[str, Path]:
    """Every module under ``root`` (a folder holding packages) by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """The modules of ``known`` that module ``name`` imports anywhere in its file, with the line."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from a import b`` imports the module a.b when there is one, else a name of a.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]]) -> int:
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank >= 0, f"{module} is in no layer: add its package to LAYERS"
    return rank


def graph(root: Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], int]]:
    found = modules(root)
    known = set(found)
    edges: dict[str, set[str]] = {name: set() for name in found}
    lines: dict[tuple[str, str], int] = {}
    for name, path in found.items():
        for target, line in imports(name, path, known):
            edges[name].add(target)
            lines.setdefault((name, target), line)
    return edges, lines


def upward(root: Path, layers: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """Each import of a higher layer, as ``module:line -> module (layer -> layer)``."""
    edges, lines = graph(root)
    found = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            low, high = layer_of(source, layers), layer_of(target, layers)
            if high > low:
                where = f"{source}:{lines[source, target]}"
                found.append(f"{where} -> {target} ({layers[low][0]} imports {layers[high][0]})")
    return found


def circles(root: Path) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    edges, _ = graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # recursive: the graph is a few hundred modules, far from the stack's end
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_imports_point_down_only() -> None:
    assert upward(SRC, LAYERS) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(SRC) == []


def test_the_package_root_holds_only_init_main_and_py_typed() -> None:
    files = sorted(p.name for p in (SRC / "tether").iterdir() if p.is_file())
    assert files == ["__init__.py", "__main__.py", "py.typed"]


# --- the checks themselves, on a module tree made for them -------------------------------------------

SYNTHETIC_LAYERS = [("low", ("pkg.low",)), ("high", ("pkg.high",))]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    files = {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "from pkg.low import b\n",
        "pkg/low/b.py": "import pkg.low.c\n",
        "pkg/low/c.py": "VALUE = 1\n",
        "pkg/high/__init__.py": "",
        "pkg/high/d.py": "from pkg.low.c import VALUE\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_clean_tree_passes(tree: Path) -> None:
    layers = [*SYNTHETIC_LAYERS, ("package", ("pkg",))]
    assert upward(tree, layers) == [] and circles(tree) == []


def test_an_upward_import_is_found_even_inside_a_function(tree: Path) -> None:
    later = "def later() -> object:\n    from pkg.high import d\n\n    return d\n"
    (tree / "pkg/low/c.py").write_text("VALUE = 1\n\n\n" + later)
    layers = [*SYNTHETIC_LAYERS, ("package", ("pkg",))]
    assert upward(tree, layers) == ["pkg.low.c:5 -> pkg.high.d (low imports high)"]


def test_a_circle_is_found_even_through_type_checking(tree: Path) -> None:
    (tree / "pkg/low/c.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.low.a import b\n\nVALUE = 1\n"
    )
    assert circles(tree) == [["pkg.low.a", "pkg.low.b", "pkg.low.c"]]


def test_the_documented_layout_lists_every_package_in_its_layer() -> None:
    """The site's "Layout" names each package folder of src/tether once, under the layer ``LAYERS`` puts it in."""
    page = (SRC.parent / "docs" / "concepts" / "layout.md").read_text()
    section = page.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, str] = {}
    current = ""
    for line in section.splitlines():
        words = line.split()
        if not line.startswith("    ") or not words:
            continue
        if not line.startswith("     ") and words[0] in {name for name, _ in LAYERS}:
            current, words = words[0], words[1:]
        if words and words[0].startswith("src/tether/"):
            listed[words[0].rstrip("/")] = current
    packages = {str(p.parent.relative_to(SRC.parent)) for p in (SRC / "tether").rglob("__init__.py")}
    packages.discard("src/tether")
    assert sorted(listed) == sorted(packages)
    for folder, layer in listed.items():
        module = folder.removeprefix("src/").replace("/", ".")
        assert LAYERS[layer_of(module, LAYERS)][0] == layer, f"{folder} is listed under {layer}"


def test_only_the_entry_point_imports_the_cli() -> None:
    """The CLI is a surface at the top: no other part of tether (the service included) imports it."""
    edges, _ = graph(SRC)
    importers = {name for name, out in edges.items() if any(m.startswith("tether.cli") for m in out)}
    assert {name for name in importers if not name.startswith("tether.cli")} == {"tether.__main__"}


def test_a_circle_closed_inside_a_function_by_a_relative_import_is_found(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg import c\n",
        "pkg/c.py": "from . import a\n",
        "pkg/d.py": "import pkg.a\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert circles(tmp_path) == [["pkg.a", "pkg.b", "pkg.c"]]
