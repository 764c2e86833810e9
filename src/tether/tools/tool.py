"""Tool definitions: ``@tool`` on a typed function, or a raw JSON Schema.

Either way a tool ends up with one JSON Schema (``additionalProperties:
false`` on every object) and one compiled ``jsonschema`` validator. The
validator is the gate: it is strict where pydantic's lax mode is not (no
``true`` for an integer, no ``"248"`` for 248). Pydantic then only converts
the already-valid JSON into the function's Python types (enums, models).
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin, get_type_hints, overload

import jsonschema
import pydantic
from jsonschema.exceptions import SchemaError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError, to_jsonable_python

from tether.core.errors import ToolDefinitionError
from tether.tools.context import ToolContext
from tether.tools.decoding import json_type
from tether.tools.strict import strict_schema

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RESULT_CHARS = 20_000
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


@dataclass(frozen=True, slots=True)
class Tool:
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
    # How to call ``function``: its argument model and the context parameter.
    args_model: type[pydantic.BaseModel] | None = field(default=None, repr=False)
    context_param: str | None = field(default=None, repr=False)
    validator: Any = field(default=None, repr=False, compare=False)

    is_async: bool = field(default=False, init=False, repr=False, compare=False)
    # The parameters in the form OpenAI's strict mode accepts (None when it cannot express them),
    # and the optional parameters made nullable for it (tools/strict.py).
    strict_parameters: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    strict_nulls: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.function))
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
        if callable(self.approval):
            try:
                return bool(self.approval(arguments))
            except Exception:
                return True  # a failing predicate must not wave a call through
        return bool(self.approval)

    def bind(self, arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
        """Keyword arguments for ``function``; raises ``pydantic.ValidationError``."""
        if self.args_model is None:
            kwargs = dict(arguments)
        else:
            model = self.args_model.model_validate(arguments)
            kwargs = {name: getattr(model, name) for name in type(model).model_fields}
        if self.context_param is not None:
            kwargs[self.context_param] = context
        return kwargs

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> Any | Awaitable[Any]:
        return self.function(**self.bind(arguments, context))


def _describe(error: jsonschema.ValidationError) -> str:
    while error.context:  # anyOf/oneOf: name the failure of the branch that got furthest
        error = max(error.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
    where = ".".join(str(p) for p in error.absolute_path) or "arguments"
    if error.validator == "type":
        return f"{where}: expected {error.validator_value}, got {json_type(error.instance)}"
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, dict) else {}
        given: Any = error.instance
        extra = sorted(set(given) - set(schema.get("properties", {})))
        return f"{where}: unexpected field(s) {', '.join(map(repr, extra))}"
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


def _close(schema: Any) -> Any:
    """Set ``additionalProperties: false`` on every object schema that leaves it open."""
    if isinstance(schema, list):
        return [_close(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: ({n: _close(v) for n, v in val.items()} if k in ("properties", "$defs", "definitions") else _close(val))
        for k, val in schema.items()
    }
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _compile(name: str, parameters: dict[str, Any]) -> Any:
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise ToolDefinitionError(f"tool {name}: invalid JSON Schema: {exc.message}") from None
    if parameters.get("type") != "object":
        raise ToolDefinitionError(f"tool {name}: parameters must be a JSON Schema of type object")
    return _StrictValidator(parameters)


# JSON Schema counts 3.0 as an integer; a host that refuses "248" for 248 refuses 3.0 too.
_StrictValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


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
    **options: Any,
) -> Tool:
    """A tool described by a raw JSON Schema; ``function`` gets the arguments as keywords.

    A ``ToolContext`` is passed as ``context=`` if the function has a
    parameter of that name.
    """
    if not NAME_PATTERN.match(name):
        raise ToolDefinitionError(f"tool name {name!r} must match {NAME_PATTERN.pattern}")
    schema = _close(dict(parameters))
    validator = _compile(name, schema)
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
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a typed function as a tool.

    ``@tool`` alone makes a side-effecting tool; say ``@tool(read_only=True)``
    for one that only reads. A parameter typed ``ToolContext`` is injected
    and never shown to the model.

    Example::

        @tool(read_only=True)
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
    }

    def wrap(fn: Callable[..., Any]) -> Tool:
        return _from_function(fn, name, description, **options)

    if function is not None:
        return wrap(function)
    return wrap
