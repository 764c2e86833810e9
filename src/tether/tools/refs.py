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
  schema of a few KB would freeze the host for days;
- the values of one chain, each inside the last, are checked against at
  most ``MAX_NESTED_VISITS`` subschemas: a recursive schema that checks one
  part of a value against two subschemas that both recur (``properties``
  ``a`` and ``patternProperties`` ``^a$``, ``items`` and ``contains``, two
  branches of ``allOf`` or ``oneOf`` naming one property) doubles the work
  with each level the value nests, so the gate lets a value nest only as
  deep as that bound allows (``check_references`` says how deep: ``nested
  more than 13 levels deep, past which this schema's check costs too
  much``), and a schema that allows less than ``MIN_NESTING`` is refused.
  Where JSON Schema leaves it open, two subschemas are taken to check the
  same part: two patterns may match one name unless
  their literal prefixes (``^ab`` and ``^c``) differ, and
  ``unevaluatedProperties`` checks whatever its own schema's ``properties``
  do not name (jsonschema checks the value against the schema's other
  subschemas again to learn what they evaluated, so these count twice).

A schema recursive *through* the value (a tree whose ``children`` items
refer back to the node, JSON's own values, a union of models each with its
own recursive field) checks each part once, so it is finite for every
finite value, costs in proportion to it, and is kept;
``check_references`` says so, and the gate then refuses a value nested more
than ``MAX_DEPTH`` levels deep (``nested more than 64 levels deep``) instead
of running out of stack.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterator
from typing import Any

from tether.core.errors import ToolDefinitionError
from tether.core.nesting import MAX_DEPTH

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
# Subschemas the values of one chain, each inside the last, are checked against together. A schema whose
# references check each part of the value against one subschema (a tree, JSON's own values) costs each value its
# in-place visits, a few each; one that checks a part against two (``properties`` and ``patternProperties``,
# ``items`` and ``contains``, two ``oneOf`` branches naming one property: an expression tree's ``Add`` and ``Mul``,
# both with ``left: Expr``) doubles the work at each level: eighteen levels took seven seconds, forty would take
# days. The checkers take 7 to 15 us a subschema (measured, the fast check's and jsonschema's): this is a quarter
# of a second at most for one value.
MAX_NESTED_VISITS = 16_384
# The gate lets a value nest only as deep as its schema checks it within that bound (``MAX_DEPTH`` for a tree;
# thirteen levels for ``properties`` and ``patternProperties`` both recurring; eleven for that expression tree);
# a schema that cannot check even this deep a value (the tool's arguments and one level inside) is refused.
MIN_NESTING = 2

# Which part of a value a subschema checks: ("name", k) the property k; ("pattern", prefix) the properties whose
# names a pattern may match (all that start with its literal prefix); ("other", names) those not in a schema's
# own ``properties``; ("index", i) the array item i; ("from", i) every item from i on; ("key", None) a property's
# name (``propertyNames``).
_Child = tuple[str, Any]
# An edge of the graph of schemas: its target's key, the part of the value it checks (None: the value itself),
# and the reference it follows (None for a subschema in place).
_Edge = tuple[int, _Child | None, str | None]
_DEFINED: _Child = ("$defs", None)  # a definition: checked only through a reference, so no edge of its own


def check_references(schema: Any, what: str) -> int | None:
    """Refuse ``schema``'s unusable references (see the module docstring); how deep a value it is checked
    against may nest: None when no reference makes its check deeper (the decoder's bound holds), ``MAX_DEPTH``
    for a schema recursive through the value, fewer levels where a deeper value would cost more than
    ``MAX_NESTED_VISITS`` subschemas.

    ``what`` names the schema's owner in the error (``tool lookup``).
    """
    if not any(True for _ in _refs_in(schema)):
        return None  # the common case: no reference, nothing to resolve (and referencing stays unimported)
    edges = _graph(schema, what)
    cycle = _cycle(edges, in_place_only=True)
    if cycle is not None:
        chain = " -> ".join(cycle)
        raise ToolDefinitionError(
            f"{what}: the $ref cycle {chain} never reaches into the value, so checking it never ends; "
            "a reference back must go through properties or items"
        )
    visits = _in_place_visits(edges)
    if max(visits.values(), default=0) > MAX_IN_PLACE_VISITS:
        raise ToolDefinitionError(
            f"{what}: checking one value would visit more than {MAX_IN_PLACE_VISITS} of its subschemas in place "
            "(references under allOf, anyOf, oneOf, not, if or $ref that double the work at each level)"
        )
    costs = _nested_visits(edges, visits, id(schema))
    depth = max(d for d, cost in enumerate(costs) if cost <= MAX_NESTED_VISITS)  # costs[0]: in place, checked
    if depth < MIN_NESTING:
        raise ToolDefinitionError(
            f"{what}: a value nested {depth + 1} level{'s' if depth else ''} deep would be checked against more than"
            f" {MAX_NESTED_VISITS} "
            "of its subschemas (references that check one part of a value against many subschemas, such as "
            "properties and patternProperties, items and contains, or branches of allOf, anyOf or oneOf "
            "naming one property, multiply the work at each level)"
        )
    if depth < MAX_DEPTH:
        return depth
    return MAX_DEPTH if _cycle(edges, in_place_only=False) is not None else None


def _in_place_visits(edges: dict[int, list[_Edge]]) -> dict[int, int]:
    """How many subschemas each schema of the graph checks one value against in place (past
    ``MAX_IN_PLACE_VISITS``, the first count past it). The edges on the same value hold no cycle (checked first)."""
    visits: dict[int, int] = {}
    for start in edges:
        for node in _in_place_post_order(edges, start, visits):
            count = 1 + sum(visits[t] for t, child, _ in edges[node] if child is None)
            visits[node] = min(count, MAX_IN_PLACE_VISITS + 1)
    return visits


def _in_place_post_order(edges: dict[int, list[_Edge]], start: int, done: Container[int]) -> Iterator[int]:
    """The schemas ``start`` reaches in place (itself too) not yet ``done``, each after those it reaches in place;
    the caller adds each to ``done`` before the next. The edges on the same value hold no cycle (checked first)."""
    stack = [start]
    while stack:
        node = stack[-1]
        if node in done:  # pushed twice (allOf of two references to it)
            stack.pop()
            continue
        waiting = [t for t, child, _ in edges[node] if child is None and t not in done]
        if waiting:
            stack.extend(waiting)
            continue
        stack.pop()
        yield node


def _nested_visits(edges: dict[int, list[_Edge]], visits: dict[int, int], root: int) -> list[int]:
    """The most subschemas one chain of values is checked against from ``root``, for each depth from 0 (the
    value alone) to ``MAX_DEPTH`` (past ``MAX_NESTED_VISITS``, the first count past it).

    ``cost[n]`` at depth d is n's in-place visits plus, for the part of the value whose checks cost most, the
    cost at depth d - 1 of every subschema that checks that part, reached from n in place (each path counts).
    """
    into: dict[int, dict[tuple[_Child, int], int]] = {}  # the edges into the value from n's in-place closure

    def closure(node: int) -> dict[tuple[_Child, int], int]:
        for top in _in_place_post_order(edges, node, into):  # each kept once, so its id names it
            own = [(t, child) for t, child, _ in edges[top] if child is not None]
            places = [t for t, child, _ in edges[top] if child is None]
            if not own and len(places) == 1:
                into[top] = into[places[0]]  # a bare $ref: its target's, shared
                continue
            found: dict[tuple[_Child, int], int] = {}
            for t, child in own:
                found[child, t] = found.get((child, t), 0) + 1
            for place in places:
                for edge, times in into[place].items():
                    found[edge] = min(found.get(edge, 0) + times, MAX_NESTED_VISITS + 1)
            into[top] = found
        return into[node]

    # Every schema some value of a chain is checked against first (the root, and each edge's target into the
    # value), with the parts of its value worth comparing: each a list of (target, times).
    parts: dict[int, list[list[tuple[int, int]]]] = {}
    shared: dict[int, list[list[tuple[int, int]]]] = {}  # by the closure's id: a bare $ref's are its target's
    queue = [root]
    while queue:
        node = queue.pop()
        if node in parts:
            continue
        found = closure(node)
        if id(found) not in shared:
            shared[id(found)] = _parts(found)
        parts[node] = shared[id(found)]
        queue.extend(t for _, t in found)
    cost = {node: visits[node] for node in parts}
    by_depth = [cost[root]]
    for _ in range(MAX_DEPTH):
        worst: dict[int, int] = {}
        for key, each in shared.items():
            worst[key] = max((sum(cost[t] * times for t, times in part) for part in each), default=0)
        deeper = {node: min(visits[node] + worst[id(into[node])], MAX_NESTED_VISITS + 1) for node in parts}
        if deeper == cost:
            break  # nothing recurses past this depth
        cost = deeper
        by_depth.append(cost[root])
    return by_depth + [by_depth[-1]] * (MAX_DEPTH + 1 - len(by_depth))


def _parts(found: dict[tuple[_Child, int], int]) -> list[list[tuple[int, int]]]:
    """For each part of a value that may be checked differently, the subschemas it is checked against (each
    with how many paths lead to it).

    The property parts: each name a schema names, and a name no schema names that starts with each pattern's
    literal prefix (``additionalProperties`` checks that one too). The item parts: each index a
    ``prefixItems`` names or an ``items`` starts at. And a property's name, for ``propertyNames``.
    """
    by_kind: dict[str, dict[Any, list[tuple[int, int]]]] = {}
    for (kind, which), target in found:
        by_kind.setdefault(kind, {}).setdefault(which, []).append((target, found[(kind, which), target]))
    names, patterns, others = by_kind.get("name", {}), by_kind.get("pattern", {}), by_kind.get("other", {})
    indices, starts = by_kind.get("index", {}), by_kind.get("from", {})
    every_other = [edge for edges in others.values() for edge in edges]
    parts = [
        [
            *names[name],
            *(edge for prefix, edges in patterns.items() if name.startswith(prefix) for edge in edges),
            *(edge for own, edges in others.items() if name not in own for edge in edges),
        ]
        for name in names
    ]
    parts += [
        [*(edge for prefix, edges in patterns.items() if start.startswith(prefix) for edge in edges), *every_other]
        for start in {"", *patterns}
    ]
    parts += [
        [*indices.get(index, ()), *(edge for start, edges in starts.items() if start <= index for edge in edges)]
        for index in {*indices, *starts}
    ]
    parts += by_kind.get("key", {}).values()
    return [part for part in parts if part]


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
                out.append((id(target), None, value))
                queue.append((target, resolved.resolver, value))
                continue
            for sub, child, here in _subschemas(node, key, value, where):
                if child is not _DEFINED:
                    out.append((id(sub), child, None))
                queue.append((sub, resolver, here))  # a definition too: every reference in the schema must resolve
        # To learn what the rest of the schema evaluated, jsonschema checks the value against its subschemas in
        # place again (and the parts against additionalProperties, contains, ...): each counts twice.
        again = {"unevaluatedProperties": "other", "unevaluatedItems": "from"}
        twice = {again[key] for key in node if key in again}
        if twice:
            out.extend([edge for edge in out if edge[1] is None or edge[1][0] in twice])
    return edges


def _subschemas(node: dict[str, Any], key: str, value: Any, where: str) -> Iterator[tuple[Any, _Child | None, str]]:
    """The subschemas under one keyword of ``node``: (schema, the part of the value it checks, where it is).

    The part is None for one that checks the value itself, ``_DEFINED`` for a definition (``$defs``).
    """
    here = f"{where}/{key}"
    if key in IN_PLACE_ONE or (key in INTO_ONE and not isinstance(value, list)):
        if isinstance(value, dict | bool):
            yield value, None if key in IN_PLACE_ONE else _child(node, key), here
    elif key in IN_PLACE_MANY or key in INTO_MANY:
        if isinstance(value, list):
            for index, sub in enumerate(value):
                if isinstance(sub, dict | bool):
                    yield sub, None if key in IN_PLACE_MANY else ("index", index), f"{here}/{index}"
    elif (key in IN_PLACE_MAP or key in INTO_MAP or key in DEFINITIONS) and isinstance(value, dict):
        for name, sub in value.items():
            if isinstance(sub, dict | bool):
                if key in DEFINITIONS:
                    child: _Child | None = _DEFINED
                elif key == "properties":
                    child = ("name", name)
                elif key == "patternProperties":
                    child = ("pattern", _literal_prefix(name))
                else:
                    child = None
                yield sub, child, f"{here}/{name}"


def _child(node: dict[str, Any], key: str) -> _Child:
    """The part of the value a keyword with one subschema checks, told from its neighbours in ``node``.

    Conservative: an ``unevaluated*`` keyword may check whatever its own schema does not, even where a
    subschema in place already has.
    """
    if key in ("additionalProperties", "unevaluatedProperties"):
        named = node.get("properties")
        return "other", frozenset(named) if isinstance(named, dict) else frozenset()
    if key == "propertyNames":
        return "key", None
    if key == "contains":
        return "from", 0
    before = node.get("items" if key == "additionalItems" else "prefixItems")  # items, unevaluatedItems
    return "from", len(before) if isinstance(before, list) else 0


_PATTERN_SYNTAX = frozenset("\\.^$|?*+()[]{}")


def _literal_prefix(pattern: str) -> str:
    """What every name ``pattern`` matches starts with: the literal text after a leading ``^``, or "".

    Two patterns can match one name unless neither literal prefix starts the other.
    """
    if not pattern.startswith("^") or "|" in pattern:
        return ""  # unanchored, or an alternative that may not be
    end = 1
    while end < len(pattern) and pattern[end] not in _PATTERN_SYNTAX:
        end += 1
    if end < len(pattern) and pattern[end] in "?*{":
        end -= 1  # the last letter may be left out (a?, a*, a{0,2})
    return pattern[1:end]


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
            target, child, ref = step
            if in_place_only and child is not None:
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
