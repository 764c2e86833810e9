"""Every public name has a docstring and a place in the API reference (docs/reference/).

The public names are the ``__all__`` of ``tether`` and of each package that
declares one, plus the names the README presents from modules without one.
Each class's public methods and properties need a docstring too: the
reference (mkdocstrings) leaves out a member without one, so an undocumented
method would be missing from the site without a warning.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "docs" / "reference"

# Each module whose ``__all__`` is public.
PUBLIC_MODULES = (
    "tether",
    "tether.core",
    "tether.models",
    "tether.tools",
    "tether.toolsets",
    "tether.store",
    "tether.testing",
    "tether.eval",
    "tether.mcp",
    "tether.serve",
    "tether.serve.auth",
    "tether.drivers.local.stream",
)
# Public names of modules without an ``__all__``: the ones the README and the guides use.
PUBLIC_NAMES = {
    "tether.models.scripted": ("reply_text", "reply_calls"),
    "tether.serve.identity": ("Authenticator", "APPROVER_ROLE"),
    "tether.drivers.tracing": ("configure", "available", "TraceContextMiddleware"),
    "tether.drivers.temporal.client": ("connect", "start_run", "status", "pending", "decide", "reconcile"),
    "tether.drivers.temporal.worker": ("make_worker",),
    "tether.drivers.temporal.workflow": ("RunWorkflow",),
}
# Docstrings Python writes itself, which say nothing.
GENERATED_DOC = re.compile(r"^\w+\(.*\)$|^An enumeration\.$|^Create a collection of name/value pairs\.", re.DOTALL)


def public_names() -> Iterator[tuple[str, str, Any]]:
    """Each public (module, name, object)."""
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if name != "__version__":
                yield module_name, name, getattr(module, name)
    for module_name, names in PUBLIC_NAMES.items():
        module = importlib.import_module(module_name)
        for name in names:
            yield module_name, name, getattr(module, name)


def documented(obj: Any) -> bool:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return bool(doc) and not GENERATED_DOC.match(doc)


def members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties ``cls`` defines itself (inherited ones are its base's to document)."""
    for name, value in vars(cls).items():
        if name.startswith("_") or (issubclass(cls, enum.Enum) and name in cls.__members__):
            continue
        if isinstance(value, property):
            yield name, value.fget
        elif isinstance(value, classmethod | staticmethod):
            yield name, value.__func__
        elif inspect.isfunction(value):
            yield name, value


def undocumented() -> list[str]:
    missing = []
    for module_name, name, obj in public_names():
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # a constant or a type alias: the page describes it
        if not documented(obj):
            missing.append(f"{module_name}.{name}")
        if inspect.isclass(obj):
            missing.extend(f"{module_name}.{name}.{m}" for m, f in members(obj) if not documented(f))
    return sorted(set(missing))


def resolve(path: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def reference() -> tuple[set[int], set[str]]:
    """What the reference pages render: ids of the objects of their ``:::`` lines, and every dotted path they name.

    A ``:::`` line naming a module renders its public members; a constant may instead be named in backticks.
    """
    ids: set[int] = set()
    paths: set[str] = set()
    for page in REFERENCE.rglob("*.md"):
        text = page.read_text()
        for path in re.findall(r"^::: ([\w.]+)", text, re.MULTILINE):
            obj = resolve(path)  # a directive naming nothing fails the strict build too; here it fails first
            paths.add(path)
            ids.add(id(obj))
            if inspect.ismodule(obj):
                for name in getattr(obj, "__all__", [n for n in vars(obj) if not n.startswith("_")]):
                    paths.add(f"{path}.{name}")
                    ids.add(id(getattr(obj, name)))
        paths.update(re.findall(r"`(tether(?:\.\w+)+)`", text))
    return ids, paths


def unreferenced() -> list[str]:
    ids, paths = reference()
    missing = []
    for module_name, name, obj in public_names():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            found = id(obj) in ids
        else:  # values may be equal by chance (8 is 8): a value is found by a path that names it
            found = any(p.rsplit(".", 1)[-1] == name and _names(p, obj) for p in paths)
        if not found:
            missing.append(f"{module_name}.{name}")
    return missing


def _names(path: str, obj: Any) -> bool:
    try:
        return resolve(path) is obj
    except (ImportError, AttributeError):
        return False


def test_every_public_name_and_method_has_a_docstring() -> None:
    assert undocumented() == []


def test_every_public_name_is_in_the_reference() -> None:
    assert unreferenced() == []


def test_the_check_sees_an_undocumented_name_and_method() -> None:
    """The checks above can fail: a class without docstrings, added to a public module, is caught."""

    class Undocumented:
        def method(self) -> None:
            pass

    module = importlib.import_module("tether.tools")
    before, missing_before = set(undocumented()), set(unreferenced())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "Undocumented", Undocumented, raising=False)
        patch.setattr(module, "__all__", [*module.__all__, "Undocumented"])
        assert set(undocumented()) - before == {"tether.tools.Undocumented", "tether.tools.Undocumented.method"}
        assert set(unreferenced()) - missing_before == {"tether.tools.Undocumented"}
