"""Tool definitions: ``@tool`` on a typed function, or a raw JSON Schema.

Either way a tool ends up with one JSON Schema (``additionalProperties:
false`` on every object) and one validator. The validator is the gate: it is
strict where pydantic's lax mode is not (no ``true`` for an integer, no
``"248"`` for 248). Pydantic then only converts the already-valid JSON into
the function's Python types (enums, models).

The gate answers a valid call with ``tether.tools.fastcheck`` (compiled
once per tool, for the common keywords); ``jsonschema`` decides the rest and
words the errors. It is imported only then, or for a schema the fast checks
cannot vouch for: a run whose calls are all valid never loads it.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args, get_origin, get_type_hints, overload

from tether.core.envelope import DEFAULT_MAX_RESULT_CHARS as DEFAULT_MAX_RESULT_CHARS  # re-exported
from tether.core.envelope import quoted, shown
from tether.core.errors import ConfigurationError, ToolDefinitionError
from tether.core.nesting import MAX_DEPTH
from tether.core.nesting import value_nested_deeper as nested_deeper
from tether.tools.context import ToolContext
from tether.tools.decoding import json_type
from tether.tools.fastcheck import compile_check
from tether.tools.metacheck import plainly_valid
from tether.tools.refs import check_references
from tether.tools.strict import strict_schema

if TYPE_CHECKING:  # pydantic is imported where a typed function becomes a tool: raw schemas never need it
    import jsonschema
    import pydantic

DEFAULT_TIMEOUT = 30.0
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

Approval = bool | Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Executed:
    """A ``reconcile`` hook's answer: the call did take effect, with this result."""

    result: Any


@dataclass(frozen=True, slots=True)
class NotExecuted:
    """A ``reconcile`` hook's answer: the call never took effect; it may run now."""


# Called on resume for a side-effecting call whose intent was recorded but not
# its outcome. Return Executed(result), NotExecuted(), or None when it cannot
# tell: the run then waits for a person (``tether reconcile``).
Verdict = Executed | NotExecuted | None
Reconcile = Callable[[ToolContext, Mapping[str, Any]], Verdict | Awaitable[Verdict]]


class ToolError(Exception):
    """Raise from a tool to send ``message`` to the model as ``tool_failed``.

    Any other exception reaches the model only as its type name, so that a
    message carrying a secret or a path never leaks.
    """


class Retry(Exception):
    """Raise to send ``message`` back to the model and have it try again.

    From a tool: the call's result is a retryable ``tool_failed`` with the
    message, up to the tool's ``retries`` per run (``@tool(retries=N)``);
    past them it is ``tool_failed`` the model should not retry, and counts
    as a failed repair. From an output validator (``Agent.output_validator``):
    the answer is refused, the message goes back as a correction, and it
    counts against the repair budget (``Budget.max_repairs``).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


DEFAULT_RETRIES = 1


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call: its name, description and JSON Schema, and the function that runs it.

    Made by ``@tool`` from a function's signature, or by ``tool_from_schema`` from a schema you
    write. A tool is side-effecting unless ``read_only``; ``approval`` asks a person first (always,
    or when a predicate of the arguments says so).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    read_only: bool = False
    timeout: float | None = DEFAULT_TIMEOUT
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    scopes: frozenset[str] = frozenset()
    approval: Approval = False
    reconcile: Reconcile | None = None
    untrusted_output: bool = False
    inline: bool = False  # a plain function runs on the event loop, not a worker thread (it must not block)
    retries: int = DEFAULT_RETRIES  # how many times per run the tool may raise Retry before it counts as a failure
    # The top-level parameters whose values the effect goes to (a recipient, an account, a URL, a path, a body sent
    # outside): in a tainted run they must be traced to trusted text (``core.provenance``). None: no policy.
    sinks: frozenset[str] | None = None
    # The fields of an untrusted result the system vouches for (ids it assigned, its timestamps): their values are
    # trusted text of the result, the rest of it stays untrusted (``core.provenance.field_values``).
    trusted_fields: tuple[str, ...] = ()
    # The sinks whose values must be the principal's own word: a field an untrusted result vouches for is not enough
    # (deleting a file: an id the drive lists is a real id, but the injection chose which).
    principal_sinks: frozenset[str] = frozenset()
    # Who wrote the description and schema when not the host (``"MCP server 'notes'"``): a run offering the tool
    # reads that text before anything else, so it starts tainted (``Toolbox.described_by``).
    described_by: str | None = None
    # How to call ``function``: its argument model and the context parameter.
    args_model: type[pydantic.BaseModel] | None = field(default=None, repr=False)
    context_param: str | None = field(default=None, repr=False)
    validator: Any = field(default=None, repr=False, compare=False)

    is_async: bool = field(default=False, init=False, repr=False, compare=False)
    # The parameters in the form OpenAI's strict mode accepts (None when it cannot express them),
    # and the optional parameters made nullable for it (tools/strict.py).
    strict_parameters: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    strict_nulls: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    # The argument model's field names, read once from the class; and, when every field is a plain str, int or
    # bool with no constraint or validator of its own, their types (``bind`` then needs no pydantic call).
    field_names: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    plain_fields: dict[str, type] | None = field(default=None, init=False, repr=False, compare=False)
    # What its schema fixes, for tracing its sinks (``core.provenance.schema_fixed``): nothing unless the host wrote it.
    fixed: tuple[frozenset[str], frozenset[str]] = field(
        default=(frozenset(), frozenset()), init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or self.retries < 0:
            raise ToolDefinitionError(f"tool {self.name}: retries must be a whole number, 0 or more")
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.function))
        if self.sinks is not None:
            object.__setattr__(self, "sinks", _sinks(self.name, self.sinks, self.parameters))
            if self.described_by is None:
                from tether.core.provenance import schema_fixed  # only a tool with sinks is traced

                object.__setattr__(self, "fixed", schema_fixed(self.parameters))
        object.__setattr__(self, "trusted_fields", _fields(self.name, self.trusted_fields))
        if self.principal_sinks:
            wanted = {self.principal_sinks} if isinstance(self.principal_sinks, str) else set(self.principal_sinks)
            if not wanted <= (self.sinks or frozenset()):
                others = ", ".join(sorted(map(repr, wanted - (self.sinks or frozenset()))))
                raise ConfigurationError(f"tool {self.name}: principal_sinks {others} are not among its sinks")
            object.__setattr__(self, "principal_sinks", frozenset(wanted))
        if self.args_model is not None:
            object.__setattr__(self, "field_names", tuple(self.args_model.model_fields))
            object.__setattr__(self, "plain_fields", _plain_fields(self.args_model))
        made = strict_schema(self.parameters)
        if made is not None:
            object.__setattr__(self, "strict_parameters", made[0])
            object.__setattr__(self, "strict_nulls", made[1])

    def spec(self, strict: bool = False) -> dict[str, Any]:
        """The tool as an OpenAI ``tools`` entry; with ``strict``, in strict mode where its schema allows."""
        function: dict[str, Any] = {"name": self.name, "description": self.description, "parameters": self.parameters}
        if strict and self.strict_parameters is not None:
            function["parameters"] = self.strict_parameters
            function["strict"] = True
        return {"type": "function", "function": function}

    def validation_errors(self, arguments: Mapping[str, Any]) -> list[str]:
        """Short, actionable messages for each way ``arguments`` is invalid."""
        errors = sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        return [_describe(e) for e in errors[:3]]

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        """Whether a call with ``arguments`` needs approval; a predicate that raises counts as yes."""
        if callable(self.approval):
            try:
                return bool(self.approval(arguments))
            except Exception:
                return True  # a failing predicate must not wave a call through
        return bool(self.approval)

    def bind(self, arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
        """Keyword arguments for ``function``; raises ``pydantic.ValidationError``."""
        if self.args_model is None or _given_plainly(self.plain_fields, arguments):
            kwargs = dict(arguments)  # every field given, each of exactly its type: pydantic would return it as is
        else:
            model = self.args_model.model_validate(arguments)
            kwargs = {name: getattr(model, name) for name in self.field_names}
        if self.context_param is not None:
            kwargs[self.context_param] = context
        return kwargs

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> Any | Awaitable[Any]:
        """Run the function with ``arguments`` (and the context, if it takes one); may return an awaitable."""
        return self.function(**self.bind(arguments, context))


_PLAIN = (str, int, bool)
_PLAIN_CONFIG = {"extra": "forbid", "allow_inf_nan": False}  # what ``_from_function`` gives its argument models


def _plain_fields(model: type[pydantic.BaseModel]) -> dict[str, type] | None:
    """Each field's type when all are a bare ``str``, ``int`` or ``bool`` (no constraint, alias, validator); else None.

    Only for a model configured as ``_from_function`` makes them. A value of
    exactly that type passes pydantic's validation unchanged, so an argument
    object that gives every field so can be passed on as it is.
    """
    decorators = model.__pydantic_decorators__
    if model.model_config != _PLAIN_CONFIG or decorators.field_validators or decorators.model_validators:
        return None
    if decorators.validators or decorators.root_validators:  # pydantic's older decorators
        return None
    plain: dict[str, type] = {}
    for name, info in model.model_fields.items():
        if info.annotation not in _PLAIN or info.metadata or info.alias or info.validation_alias:
            return None
        plain[name] = info.annotation  # type: ignore[assignment]  # one of _PLAIN, checked above
    return plain


def _given_plainly(plain: dict[str, type] | None, arguments: Mapping[str, Any]) -> bool:
    """Whether ``arguments`` gives every one of ``plain``'s fields, each a value of exactly its type."""
    if plain is None or len(arguments) != len(plain):
        return False
    for name, kind in plain.items():  # noqa: SIM110 (a loop: no generator made per call)
        if type(arguments.get(name)) is not kind:
            return False
    return True


def _sinks(name: str, sinks: Any, parameters: Mapping[str, Any]) -> frozenset[str]:
    """``sinks`` as a set of the tool's top-level parameter names; a ``ConfigurationError`` for any other."""
    if isinstance(sinks, str) or not isinstance(sinks, Iterable):
        raise ConfigurationError(f"tool {name}: sinks must be a list of parameter names, not {type(sinks).__name__}")
    names = frozenset(sinks)
    known = parameters.get("properties", {})
    unknown = sorted(str(n) for n in names if not isinstance(n, str) or n not in known)
    if unknown:
        listed = ", ".join(map(repr, known)) or "none"
        raise ConfigurationError(f"tool {name}: sinks {', '.join(map(repr, unknown))} are not parameters ({listed})")
    return names


def _fields(name: str, fields: Any) -> tuple[str, ...]:
    """``trusted_fields`` as a sorted tuple of field names; a ``ConfigurationError`` for anything else."""
    if isinstance(fields, str) or not isinstance(fields, Iterable):
        raise ConfigurationError(
            f"tool {name}: trusted_fields must be a list of field names, not {type(fields).__name__}"
        )
    names = list(fields)
    bad = [n for n in names if not isinstance(n, str) or "" in n.split(".")]
    if bad:
        raise ConfigurationError(f"tool {name}: trusted_fields {', '.join(map(repr, bad))} are not field names")
    return tuple(sorted(set(names)))


def _describe(error: jsonschema.ValidationError) -> str:
    while error.context:  # anyOf/oneOf: name the failure of the branch that got furthest
        error = max(error.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
    where = shown(".".join(str(p) for p in error.absolute_path)) or "arguments"  # the model's keys, at any length
    if error.validator == "type":
        return f"{where}: expected {error.validator_value}, got {json_type(error.instance)}"
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, dict) else {}
        given: Any = error.instance
        extra = sorted(set(given) - set(schema.get("properties", {})))
        return f"{where}: unexpected field(s) {_names(extra)}"
    if error.validator == "unevaluatedProperties":
        # jsonschema names them in its message: "... ('c', 'd' were unexpected)"
        extra = re.findall(r"'((?:[^'\\]|\\.)*)'", error.message.rpartition("(")[2])
        return f"{where}: unexpected field(s) {_names(extra)}"
    if error.validator == "required":
        return f"{where}: {error.message.split(' ')[0]} is required"
    if error.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{where}: must be {_BOUND[str(error.validator)]} {error.validator_value}"
    if error.validator == "enum":
        choices: Any = error.validator_value
        return f"{where}: must be one of {', '.join(map(repr, choices))}"
    if error.validator == "pattern":
        return f"{where}: must match {error.validator_value}"
    message = error.message
    return f"{where}: {message[:160]}"


_NAMED = 10  # unexpected fields an error names; a model may send any number, of any length


def _names(fields: list[str]) -> str:
    """The model's field names, each quoted (``envelope.quoted``), the first ``_NAMED`` of them."""
    named = ", ".join(quoted(name) for name in fields[:_NAMED])
    return named if len(fields) <= _NAMED else f"{named} and {len(fields) - _NAMED} more"


_BOUND = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated titles and close every object schema."""
    if isinstance(schema, list):
        return [_strip_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs", "definitions"):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_titles(value)
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    return out


# Keywords whose value maps names to schemas, each an independent schema.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
# Subschemas that add to or constrain the object they sit in, rather than describe a whole one.
_PARTS = ("allOf", "if", "then", "else", "not", "dependentSchemas")
_UNIONS = ("anyOf", "oneOf")


def _close(schema: Any) -> Any:
    """Close every object schema that declares its properties, and only those.

    - An object that names its properties gets ``additionalProperties:
      false``; a free-form object (a map: no or empty ``properties``) stays
      open, or it could only ever be empty. The arguments object itself is
      closed even with empty or no ``properties``: a tool that declares none
      takes none.
    - An object built from parts (``allOf``, ``if``/``then``/``else``,
      ``dependentSchemas``, ``$ref`` beside ``properties``, or ``anyOf`` /
      ``oneOf`` branches beside its own ``properties``) is closed as a whole
      with ``unevaluatedProperties: false``, which counts the properties each
      matching part declares; the parts themselves are never closed, since
      ``allOf: [{a}, {b}]`` closed branch by branch refuses every instance.
    - ``anyOf``/``oneOf`` alone is a union of whole shapes: each is closed.
    - A schema that already says ``additionalProperties`` or
      ``unevaluatedProperties`` is left as it is.
    """
    parts = _part_refs(schema)
    closed = _close_node(schema, part=False, parts=parts, root=schema)
    if (
        isinstance(closed, dict)
        and closed.get("properties", {}) == {}
        and closed.get("type", "object") == "object"
        and not _combined(closed)
    ):
        closed.setdefault("additionalProperties", False)  # with no ``properties`` at all too (MCP servers send that)
    return closed


def _part_refs(schema: Any) -> set[str]:
    """The ``$ref`` targets used as a part of a combined object (never closed alone)."""
    found: set[str] = set()

    def visit(node: Any, in_part: bool) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, in_part)
            return
        if not isinstance(node, dict):
            return
        combined = _combined(node)
        if (in_part or combined) and isinstance(node.get("$ref"), str):
            found.add(node["$ref"])
        for key, value in node.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                for sub in value.values():
                    visit(sub, False)
            elif key == "dependentSchemas" and isinstance(value, dict):
                visit(list(value.values()), True)
            elif key in _PARTS or (key in _UNIONS and combined):
                visit(value, True)
            else:
                visit(value, False)

    visit(schema, False)
    return found


def _combined(node: dict[str, Any]) -> bool:
    """Whether ``node`` is one object assembled from parts (see ``_close``)."""
    if any(k in node for k in _PARTS if k != "not"):
        return True
    has_props = "properties" in node
    return has_props and ("$ref" in node or any(k in node for k in _UNIONS))


def _close_node(node: Any, *, part: bool, parts: set[str], root: Any) -> Any:
    if isinstance(node, list):
        return [_close_node(n, part=part, parts=parts, root=root) for n in node]
    if not isinstance(node, dict):
        return node
    combined = _combined(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {
                name: _close_node(sub, part=f"#/{key}/{name}" in parts, parts=parts, root=root)
                for name, sub in value.items()
            }
        elif key == "dependentSchemas" and isinstance(value, dict):
            out[key] = {name: _close_node(sub, part=True, parts=parts, root=root) for name, sub in value.items()}
        elif key in _PARTS or (key in _UNIONS and combined):
            out[key] = _close_node(value, part=True, parts=parts, root=root)
        else:
            out[key] = _close_node(value, part=False, parts=parts, root=root)
    if part or "additionalProperties" in out or "unevaluatedProperties" in out:
        return out
    if combined:
        if _is_object(out) and _declares(node, root, set()):
            out["unevaluatedProperties"] = False
    elif (out.get("properties") or out.get("patternProperties")) and _is_object(out):
        out["additionalProperties"] = False
    return out


def _declares(node: Any, root: Any, seen: set[str]) -> bool:
    """Whether ``node`` or one of its parts names properties (a free-form object names none)."""
    if not isinstance(node, dict):
        return False
    if node.get("properties") or node.get("patternProperties"):
        return True
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        seen.add(ref)
        if _declares(_resolve(ref, root), root, seen):
            return True
    subs: list[Any] = [node.get(k) for k in ("if", "then", "else")]
    subs += [*node.get("allOf", ()), *node.get("anyOf", ()), *node.get("oneOf", ())]
    subs += list((node.get("dependentSchemas") or {}).values())
    return any(_declares(sub, root, seen) for sub in subs)


def _resolve(ref: str, root: Any) -> Any:
    """The local schema a ``#/...`` reference names; None for any other."""
    if not ref.startswith("#/"):
        return None
    target = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return None
        target = target[part]
    return target


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind is None:
        return "properties" in node or any(k in node for k in _PARTS if k != "not")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _compile(name: str, parameters: dict[str, Any], *, untrusted: bool = False) -> _Gate:
    """The gate for ``parameters``; an ``untrusted`` schema's patterns run only in RE2 (``tether.tools.linear``)."""
    patterns = 0
    if untrusted:
        from tether.tools.linear import check_patterns

        patterns = check_patterns(parameters, f"tool {name}")
    # The meta-schema check costs milliseconds: only when not sure. plainly_valid compiles patterns with
    # Python's re, so an untrusted schema that holds one is checked with RE2 judging its patterns instead.
    if patterns or not plainly_valid(parameters):
        from jsonschema.exceptions import SchemaError

        try:
            if untrusted:
                from tether.tools.linear import regex_format

                strict_validator().check_schema(parameters, format_checker=regex_format())
            else:
                strict_validator().check_schema(parameters)
        except SchemaError as exc:
            raise ToolDefinitionError(f"tool {name}: invalid JSON Schema: {exc.message}") from None
    if parameters.get("type") != "object":
        raise ToolDefinitionError(f"tool {name}: parameters must be a JSON Schema of type object")
    return _Gate(parameters, max_depth=check_references(parameters, f"tool {name}"), untrusted=untrusted)


class _Gate:
    """A tool's argument check: the fast check answers a valid call, jsonschema everything else.

    Against a recursive schema (``tether.tools.refs``) a value nested more
    than ``max_depth`` levels deep is refused before either check runs, so
    checking it never runs out of stack: ``MAX_DEPTH``, or fewer where the
    schema's references make each level cost more than the last. An
    ``untrusted`` schema's patterns run in RE2 in both checks
    (``tether.tools.linear``).
    """

    __slots__ = ("_fast", "_full", "max_depth", "schema", "untrusted")

    def __init__(self, schema: dict[str, Any], *, max_depth: int | None = None, untrusted: bool = False) -> None:
        self.schema = schema
        self.max_depth = max_depth
        self.untrusted = untrusted
        if untrusted:
            from tether.tools.linear import compile_pattern

            self._fast = compile_check(schema, compile_pattern)
        else:
            self._fast = compile_check(schema)  # None: a keyword it does not know
        self._full: Any = None

    def iter_errors(self, instance: Any) -> Iterator[jsonschema.ValidationError]:
        if self.max_depth is not None and nested_deeper(instance, self.max_depth):
            return iter((self._too_deep(instance),))
        try:
            if self._fast is not None and self._fast(instance):
                return iter(())
            if self._full is None:
                from referencing import Registry

                # An empty registry: a reference outside the schema is never fetched (jsonschema's default would).
                self._full = self._validator()(self.schema, registry=Registry())
            return iter(list(self._full.iter_errors(instance)))
        except RecursionError:  # the bound above is meant to come first; this keeps the stack's end a refusal too
            return iter((self._too_deep(instance),))

    def _validator(self) -> Any:
        if self.untrusted:
            from tether.tools.linear import linear_validator

            return linear_validator(strict_validator())
        return strict_validator()

    def _too_deep(self, instance: Any) -> jsonschema.ValidationError:
        from jsonschema import ValidationError

        limit = self.max_depth or MAX_DEPTH
        why = "" if limit >= MAX_DEPTH else ", past which this schema's check costs too much"
        return ValidationError(f"nested more than {limit} levels deep{why}", validator="maxDepth", instance=instance)

    def is_valid(self, instance: Any) -> bool:
        return next(self.iter_errors(instance), None) is None


@functools.cache
def strict_validator() -> Any:
    """jsonschema's 2020-12 validator class, with 3.0 not an integer (jsonschema is imported here).

    JSON Schema counts 3.0 as an integer; a host that refuses "248" for 248 refuses 3.0 too.
    """
    import jsonschema

    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft202012Validator,
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
            "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
        ),
    )


def __getattr__(name: str) -> Any:  # the class under its former name, built on first use (PEP 562)
    if name == "_StrictValidator":
        return strict_validator()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description and per-parameter texts of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.rstrip(":").lower() in (
            "args",
            "arguments",
            "parameters",
            "params",
        ) and stripped.endswith(":"):
            section, current = "args", None
            continue
        if stripped.endswith(":") and stripped[:-1].lower() in (
            "returns",
            "raises",
            "yields",
            "examples",
            "example",
        ):
            section, current = "other", None
            continue
        if section is None:
            summary.append(line)
        elif section == "args" and stripped:
            m = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if m and not line.startswith((" " * 8, "\t\t")):
                current = m.group(1)
                params[current] = m.group(2)
            elif current is not None:
                params[current] += " " + stripped
    return "\n".join(summary).strip(), params


def _check_default(tool_name: str, param: str, default: Any) -> None:
    """A default goes into the schema the model sees, so it must be JSON."""
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    try:
        json.dumps(to_jsonable_python(default))
    except (TypeError, ValueError, PydanticSerializationError):
        raise ToolDefinitionError(
            f"tool {tool_name}: the default of {param} ({default!r:.60}) is not JSON; use None as the default "
            "and create the value inside the tool, or pass it through ToolContext deps"
        ) from None


def _is_context(hint: Any) -> bool:
    """``ToolContext``, ``ToolContext[Deps]``, or either inside Optional/Annotated."""
    if hint is ToolContext or get_origin(hint) is ToolContext:
        return True
    return any(_is_context(arg) for arg in get_args(hint))


def _from_function(function: Callable[..., Any], name: str | None, description: str | None, **options: Any) -> Tool:
    import pydantic
    from pydantic.fields import FieldInfo

    # A functools.partial: hints and docstring come from the function it wraps; the arguments
    # it binds are the host's, not the model's, so they leave the schema.
    inner, bound = function, set()
    while isinstance(inner, functools.partial):
        bound |= set(inner.keywords)
        inner = inner.func
    tool_name = name or getattr(inner, "__name__", "")
    if not tool_name:
        raise ToolDefinitionError(f"{function!r} has no __name__: give the tool one with @tool(name=...)")
    if not NAME_PATTERN.match(tool_name):
        raise ToolDefinitionError(f"tool name {tool_name!r} must match {NAME_PATTERN.pattern}")
    try:
        hints = get_type_hints(inner, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name}: cannot resolve type hints: {exc}") from None
    summary, param_docs = _parse_docstring(inner.__doc__)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(function).parameters.values():
        if param.name in bound:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {tool_name}: *args and **kwargs cannot be described")
        if param.name not in hints:
            raise ToolDefinitionError(f"tool {tool_name}: parameter {param.name} needs a type hint")
        hint = hints[param.name]
        if _is_context(hint):
            context_param = param.name
            continue
        default: Any = ... if param.default is param.empty else param.default
        if default is not ... and not isinstance(default, FieldInfo):
            _check_default(tool_name, param.name, default)
        info = pydantic.Field(default, description=param_docs.get(param.name))
        if isinstance(default, FieldInfo):
            info = default
        fields[param.name] = (hint, info)
    try:
        model = pydantic.create_model(
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", allow_inf_nan=False),
            **fields,
        )
        parameters = _strip_titles(model.model_json_schema())
    except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError, TypeError) as exc:
        raise ToolDefinitionError(f"tool {tool_name}: {exc}") from None
    parameters.setdefault("properties", {})
    parameters["additionalProperties"] = False
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=parameters,
        function=function,
        args_model=model,
        context_param=context_param,
        validator=_compile(tool_name, parameters),
        **options,
    )


def tool_from_schema(
    name: str,
    parameters: Mapping[str, Any],
    function: Callable[..., Any],
    description: str = "",
    *,
    untrusted_schema: bool = False,
    **options: Any,
) -> Tool:
    """A tool described by a raw JSON Schema; ``function`` gets the arguments as keywords.

    A ``ToolContext`` is passed as ``context=`` if the function has a
    parameter of that name. ``untrusted_schema=True`` (an MCP server's
    schema): its patterns run only in RE2, in time linear in the text, and
    one RE2 cannot run is a ``ToolDefinitionError`` (``tether.tools.linear``).
    """
    if not NAME_PATTERN.match(name):
        raise ToolDefinitionError(f"tool name {name!r} must match {NAME_PATTERN.pattern}")
    if not isinstance(parameters, Mapping):  # raw schemas come from data: an MCP server, an eval file
        raise ToolDefinitionError(f"tool {name}: parameters must be a JSON Schema object")
    schema = _close(dict(parameters))
    validator = _compile(name, schema, untrusted=untrusted_schema)
    wants_context = "context" in inspect.signature(function).parameters
    return Tool(
        name=name,
        description=description,
        parameters=schema,
        function=function,
        context_param="context" if wants_context else None,
        validator=validator,
        **options,
    )


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    scopes: frozenset[str] | set[str] | tuple[str, ...] = (),
    approval: Approval = False,
    reconcile: Reconcile | None = None,
    untrusted_output: bool = False,
    inline: bool = False,
    retries: int = DEFAULT_RETRIES,
    sinks: Iterable[str] | None = None,
    trusted_fields: Iterable[str] = (),
    principal_sinks: Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    scopes: frozenset[str] | set[str] | tuple[str, ...] = (),
    approval: Approval = False,
    reconcile: Reconcile | None = None,
    untrusted_output: bool = False,
    inline: bool = False,
    retries: int = DEFAULT_RETRIES,
    sinks: Iterable[str] | None = None,
    trusted_fields: Iterable[str] = (),
    principal_sinks: Iterable[str] = (),
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a typed function as a tool.

    ``@tool`` alone makes a side-effecting tool; say ``@tool(read_only=True)``
    for one that only reads. A parameter typed ``ToolContext`` is injected
    and never shown to the model.

    ``untrusted_output=True`` says every result may hold text someone other
    than the run's principal wrote (files, web pages, a knowledge base): it
    taints the run, and side-effecting calls then need approval. A tool that
    knows per result calls ``context.mark_untrusted()`` instead.

    ``sinks`` names the parameters the effect goes to (a recipient, an
    IBAN, a URL, a path, a body sent outside). In a tainted run a call then
    runs without approval when every string and number in those parameters
    is traced to trusted text (the principal's messages, the instructions,
    trusted tools' results); a value found only in untrusted text, or
    nowhere, needs approval (``tether.core.provenance``). ``sinks=()``: the
    tool's effect goes nowhere a value could steer. Without ``sinks`` every
    side effect of a tainted run needs approval.

    ``trusted_fields`` (with ``untrusted_output``) names the fields of a
    result that the system itself vouches for, not text others wrote: ids it
    assigned, a timestamp, an amount; not who sent the record, which whoever
    sent it chose (an attacker's own mail has the attacker's address as its
    verified sender). A name is a key
    of the result's record (the result when it is an object, each item when
    it is a list; ``"a.b"`` descends into ``a``); only the values found there
    (a string or number, or each one in a list) become trusted text of that
    result, and the rest stays untrusted (``tether.core.provenance``).
    ``principal_sinks`` (some of ``sinks``) must be traced to the
    principal's own text: such a trusted field is not enough there, since
    an injection can pick a real id to act on (the file to delete).

    A plain (not ``async``) function runs on a worker thread, so that one
    that blocks (a file, a socket, a database) never holds up the event
    loop; ``inline=True`` runs it on the loop instead, saving the thread hop
    (tens of microseconds), for a function that only computes. An ``async``
    function always runs on the loop.

    A tool that raises ``Retry("why")`` sends ``why`` back to the model to
    try again, up to ``retries`` times per run (1 unless given).

    Example::

        @tool(read_only=True, inline=True)
        def multiply(a: int, b: int) -> int:
            '''Multiply two integers.'''
            return a * b
    """
    if max_result_chars < 1:
        raise ToolDefinitionError("max_result_chars must be at least 1")
    options = {
        "read_only": read_only,
        "timeout": timeout,
        "max_result_chars": max_result_chars,
        "scopes": frozenset(scopes),
        "approval": approval,
        "reconcile": reconcile,
        "untrusted_output": untrusted_output,
        "inline": inline,
        "retries": retries,
        "sinks": None if sinks is None else sinks,
        "trusted_fields": trusted_fields,
        "principal_sinks": frozenset(principal_sinks),
    }

    def wrap(fn: Callable[..., Any]) -> Tool:
        return _from_function(fn, name, description, **options)

    if function is not None:
        return wrap(function)
    return wrap
