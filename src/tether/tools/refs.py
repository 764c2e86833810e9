"""A schema's references, checked when the tool is made rather than when a call is.

jsonschema follows a ``$ref`` only while it checks a value. A reference to
nothing then fails with an internal error, a remote one would be fetched,
and a cycle of references that never moves into the value (``a`` → ``b`` →
``a``: each checks the same value again) recurses until Python's stack runs
out. ``check_references`` finds each of them in the schema itself, so the
tool is refused with a ``ToolDefinitionError`` that names the reference:

- every ``$ref`` (and ``$dynamicRef``) resolves inside the schema — a JSON
  pointer (``#/$defs/node``) or an ``$anchor`` — to a schema; tether never
  fetches one;
- no chain of references leads back to where it started without going
  through a keyword that checks a part of the value (``properties``,
  ``items``, ...). ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if`` /
  ``then`` / ``else`` and ``dependentSchemas`` check the value itself, so a
  cycle through them is refused too.

- one value is checked against at most ``MAX_IN_PLACE_VISITS`` subschemas
  in place: references under ``allOf`` (or ``anyOf``, ...) to a definition
  that refers twice to the next one double the work at each level, so a
  schema of a few KB would freeze the host for days.

A schema recursive *through* the value (a tree whose ``children`` items
refer back to the node) is finite for every finite value and is kept;
``check_references`` says so, and the gate then refuses a value nested more
than ``MAX_DEPTH`` levels deep (``nested more than 64 levels deep``) instead
of running out of stack.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from tether.core.errors import ToolDefinitionError

_REFS = ("$ref", "$dynamicRef")
# Keywords whose subschemas check the value itself; the others check a part of it (or define, for $defs).
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
IN_PLACE_MAP = ("dependentSchemas",)
INTO_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
)
INTO_MANY = ("prefixItems", "items")  # ``items`` as a list: drafts before 2020-12
INTO_MAP = ("properties", "patternProperties")
DEFINITIONS = ("$defs", "definitions")

# Subschemas one value is checked against in place (the schema itself, and through allOf, anyOf, $ref, ...). A
# tree of them is bounded by its size; references make a graph, where two references at each level to the next
# level's definition double the count each level: forty levels of a schema of 2 KB would take the checkers
# (jsonschema's, the fast check's) days, holding the GIL. Real schemas (a union of models) count tens.
MAX_IN_PLACE_VISITS = 10_000

# An edge of the graph of schemas: its target's key, whether it stays on the same value, and the
# reference it follows (None for a subschema in place).
_Edge = tuple[int, bool, str | None]


def check_references(schema: Any, what: str) -> bool:
    """Refuse ``schema``'s unusable references (see the module docstring); whether it is recursive.

    ``what`` names the schema's owner in the error (``tool lookup``).
    """
    if not any(True for _ in _refs_in(schema)):
        return False  # the common case: no reference, nothing to resolve (and referencing stays unimported)
    edges = _graph(schema, what)
    cycle = _cycle(edges, in_place_only=True)
    if cycle is not None:
        chain = " -> ".join(cycle)
        raise ToolDefinitionError(
            f"{what}: the $ref cycle {chain} never reaches into the value, so checking it never ends; "
            "a reference back must go through properties or items"
        )
    if _in_place_visits(edges) > MAX_IN_PLACE_VISITS:
        raise ToolDefinitionError(
            f"{what}: checking one value would visit more than {MAX_IN_PLACE_VISITS} of its subschemas in place "
            "(references under allOf, anyOf, oneOf, not, if or $ref that double the work at each level)"
        )
    return _cycle(edges, in_place_only=False) is not None


def _in_place_visits(edges: dict[int, list[_Edge]]) -> int:
    """The most subschemas one value is checked against in place, from any schema of the graph (past
    ``MAX_IN_PLACE_VISITS``, the first count past it). The edges on the same value hold no cycle (checked first)."""
    visits: dict[int, int] = {}
    for start in edges:
        stack = [start]
        while stack:
            node = stack[-1]
            if node in visits:
                stack.pop()
                continue
            waiting = [t for t, in_place, _ in edges[node] if in_place and t not in visits]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            count = 1 + sum(visits[t] for t, in_place, _ in edges[node] if in_place)
            visits[node] = min(count, MAX_IN_PLACE_VISITS + 1)
    return max(visits.values(), default=0)


def _refs_in(node: Any) -> Iterator[str]:
    """Every reference string anywhere in ``node`` (also in keywords a validator ignores)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _REFS and isinstance(value, str):
                    yield value
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _graph(schema: Any, what: str) -> dict[int, list[_Edge]]:
    """Every schema reachable from the root, by ``id``, with its edges; raises on an unusable reference."""
    from referencing import Registry
    from referencing.exceptions import NoSuchAnchor, PointerToNowhere, Unresolvable
    from referencing.jsonschema import DRAFT202012

    # Resolved as jsonschema resolves them when it checks a value (tether's validator is 2020-12's).
    root = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    edges: dict[int, list[_Edge]] = {}
    # Breadth first, in the document's order: a cycle is named from where the schema first reaches it.
    queue: deque[tuple[Any, Any, str]] = deque([(schema, root, "#")])
    while queue:
        node, resolver, where = queue.popleft()
        if id(node) in edges:
            continue
        out: list[_Edge] = []
        edges[id(node)] = out
        if not isinstance(node, dict):
            continue  # true or false
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        for key, value in node.items():
            if key in _REFS and isinstance(value, str):
                try:
                    resolved = resolver.lookup(value)
                except PointerToNowhere:
                    raise _unusable(what, key, value, where, "points to nothing in the schema") from None
                except NoSuchAnchor:
                    raise _unusable(what, key, value, where, "names no anchor in the schema") from None
                except Unresolvable:
                    why = "is not inside the schema (tether never fetches a schema)"
                    raise _unusable(what, key, value, where, why) from None
                target = resolved.contents
                if not isinstance(target, dict | bool):
                    raise _unusable(what, key, value, where, "points to a value that is not a schema")
                out.append((id(target), True, value))
                queue.append((target, resolved.resolver, value))
                continue
            for sub, in_place, here in _subschemas(key, value, where):
                if in_place is not None:
                    out.append((id(sub), in_place, None))
                queue.append((sub, resolver, here))  # a definition too: every reference in the schema must resolve
    return edges


def _subschemas(key: str, value: Any, where: str) -> Iterator[tuple[Any, bool | None, str]]:
    """The subschemas under one keyword: (schema, whether it checks the same value, where it is).

    A definition (``$defs``) is checked only through a reference to it: None, no edge of its own.
    """
    here = f"{where}/{key}"
    if key in IN_PLACE_ONE or (key in INTO_ONE and not isinstance(value, list)):
        if isinstance(value, dict | bool):
            yield value, key in IN_PLACE_ONE, here
    elif key in IN_PLACE_MANY or key in INTO_MANY:
        if isinstance(value, list):
            for index, sub in enumerate(value):
                if isinstance(sub, dict | bool):
                    yield sub, key in IN_PLACE_MANY, f"{here}/{index}"
    elif (key in IN_PLACE_MAP or key in INTO_MAP or key in DEFINITIONS) and isinstance(value, dict):
        for name, sub in value.items():
            if isinstance(sub, dict | bool):
                yield sub, None if key in DEFINITIONS else key in IN_PLACE_MAP, f"{here}/{name}"


def _cycle(edges: dict[int, list[_Edge]], *, in_place_only: bool) -> list[str] | None:
    """The references along one cycle of the graph (only edges on the same value, if asked), or None.

    The cycle's first reference is repeated at its end: ``#/$defs/a -> #/$defs/b -> #/$defs/a``.
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    for start in edges:
        if colour[start] != white:
            continue
        path: list[tuple[int, str | None]] = [(start, None)]  # the current path: each node and the ref to it
        iterators = [iter(edges[start])]
        colour[start] = grey
        while iterators:
            step = next(iterators[-1], None)
            if step is None:
                colour[path.pop()[0]] = black
                iterators.pop()
                continue
            target, in_place, ref = step
            if in_place_only and not in_place:
                continue
            if colour[target] == grey:  # back to a node on the path: a cycle, which holds a reference
                at = next(i for i, (node, _) in enumerate(path) if node == target)
                # Named by the references to its nodes, starting where it closes: a -> b -> a.
                refs = [r for r in (ref, *(r for _, r in path[at + 1 :])) if r is not None] or ["#"]
                return [*refs, refs[0]]
            if colour[target] == white:
                colour[target] = grey
                path.append((target, ref))
                iterators.append(iter(edges[target]))
    return None


def _unusable(what: str, key: str, ref: str, where: str, why: str) -> ToolDefinitionError:
    return ToolDefinitionError(f"{what}: {key} {ref!r} at {where} {why}")
