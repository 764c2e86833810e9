"""Structured output: an output type becomes a JSON Schema, and a run's final answer a validated value.

``Agent(..., output_type=Invoice)`` accepts a pydantic model, a dataclass, a
TypedDict, a scalar or container type (``int``, ``list[str]``), or a raw JSON
Schema (a dict; the value is then the decoded JSON). A type whose schema is
not an object is wrapped as ``{"result": ...}`` on the wire and unwrapped
for the caller.

How the model is asked for the answer (``OutputMode``):

- ``native``: the request carries ``response_format: {"type": "json_schema",
  ...}`` (with ``strict: true`` when the schema allows it) and the answer is
  the reply's text;
- ``tool``: a final-answer tool whose parameters are the schema; calling it
  ends the run;
- ``prompted``: the schema is put in a system message and the answer is the
  reply's text (one surrounding Markdown code fence is tolerated).

Whatever the mode, the answer is decoded like tool arguments (no duplicate
keys, no NaN, no ``true`` for an integer) and validated by the host; an
invalid answer goes back to the model as a controlled error and counts
against the run's repair budget (the run state machine decides that).
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from tether.core.deferred import deferred
from tether.core.envelope import ErrorCode
from tether.core.errors import ToolDefinitionError
from tether.tools.decoding import InvalidJson, strict_loads
from tether.tools.refs import check_references
from tether.tools.strict import drop_nulls, strict_schema
from tether.tools.tool import _close, _describe, _Gate, _strip_titles, strict_validator

if TYPE_CHECKING:  # imported only for an output type that is not a JSON Schema dict
    import pydantic
    from pydantic_core import SchemaValidator

    from tether.core import machine
    from tether.core.machine import Rejected
else:
    # The state machine is needed once a run starts, not to build an agent (issue 19: the cost of the import).
    machine = deferred("tether.core.machine")

OutputMode = Literal["native", "tool", "prompted"]
OUTPUT_MODES: tuple[str, ...] = ("native", "tool", "prompted")
FINAL_ANSWER_TOOL = "final_answer"
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)
_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class OutputSpec:
    """One output type, ready for a run: its wire schema, its checks and its decoding."""

    def __init__(
        self,
        output_type: Any,
        *,
        mode: OutputMode = "native",
        strict: bool = True,
        tool_name: str = FINAL_ANSWER_TOOL,
    ) -> None:
        if mode not in OUTPUT_MODES:
            raise ToolDefinitionError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}, not {mode!r}")
        self.output_type = output_type
        self.mode: OutputMode = mode
        self.tool_name = tool_name
        self._adapter: pydantic.TypeAdapter[Any] | None = None
        self._core: SchemaValidator | None = None
        self._plain: frozenset[str] | None = None  # a plain model's field names: see _plain_fields
        self._error: Any = ValueError  # what the adapter raises: pydantic's ValidationError
        if isinstance(output_type, Mapping):
            schema = _close(dict(output_type))
            title = output_type.get("title")
            self.name = _NAME.sub("_", title)[:64] if isinstance(title, str) and title else "answer"
        else:
            import pydantic

            self._adapter = _adapter(output_type)
            self._error = pydantic.ValidationError
            try:
                schema = _strip_titles(self._adapter.json_schema())
            except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError, TypeError) as exc:
                raise ToolDefinitionError(_cannot(output_type, exc)) from None
            self.name = _NAME.sub("_", getattr(output_type, "__name__", "answer"))[:64] or "answer"
            from pydantic_core import SchemaValidator

            # The core validator itself: TypeAdapter.validate_python checks its keyword options on every
            # call, which costs as much as validating a small model.
            core = self._adapter.validator
            self._validate = (
                core.validate_python if isinstance(core, SchemaValidator) else self._adapter.validate_python
            )
            self._core = core if isinstance(core, SchemaValidator) else None
            self._plain = _plain_fields(output_type) if self._core is not None else None
        from jsonschema.exceptions import SchemaError

        try:
            strict_validator().check_schema(schema)
        except SchemaError as exc:
            raise ToolDefinitionError(f"output_type is not a valid JSON Schema: {exc.message}") from None
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            defs = schema.pop("$defs", None)
            schema = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
            schema["additionalProperties"] = False
            if defs is not None:
                schema["$defs"] = defs
        self.schema = schema
        # The fast check answers the common, valid case; jsonschema explains the rest (as for a tool's arguments).
        self._gate = _Gate(schema, max_depth=check_references(schema, "output_type"))
        made_strict = strict_schema(schema) if strict else None
        self.strict = made_strict is not None
        self.wire_schema: dict[str, Any] = made_strict[0] if made_strict is not None else schema
        self._nulls: frozenset[str] = made_strict[1] if made_strict is not None else frozenset()
        self._last: tuple[str, Any] | None = None  # the last answer checked and its value
        self._response_format: dict[str, Any] | None = None
        self._instructions: str | None = None

    @property
    def tool(self) -> str | None:
        """The final-answer tool's name in ``tool`` mode (for the run state machine)."""
        return self.tool_name if self.mode == "tool" else None

    def check_answer(self, text: str) -> Rejected | None:
        """``None`` when ``text`` is a valid answer; else the controlled error the model gets."""
        last = self._last
        if last is not None and last[0] == text:  # checked already (output validators ask before the machine)
            return None
        try:
            self._last = (text, self._value(text))
        except _Invalid as exc:
            return exc.rejected
        return None

    def encode(self, value: Any) -> str:
        """An answer's JSON text for ``value`` (an output validator's replacement), as the model would have sent it."""
        data = value if self._adapter is None else self._adapter.dump_python(value, mode="json")
        return json.dumps({"result": data} if self.wrapped else data, ensure_ascii=False)

    def decode(self, text: str) -> Any:
        """The typed value of an answer that ``check_answer`` accepted."""
        last = self._last
        if last is not None and last[0] == text:
            return last[1]
        try:
            return self._value(text)
        except _Invalid as exc:
            raise ValueError(exc.rejected.message) from None

    def _value(self, text: str) -> Any:
        if self.mode == "prompted" and (fenced := _FENCE.match(text)):
            text = fenced.group(1)
        try:
            data = drop_nulls(strict_loads(text), self._nulls)
        except InvalidJson as exc:
            raise _Invalid(
                machine.Rejected(ErrorCode.INVALID_JSON, str(exc).replace("arguments", "the answer"))
            ) from None
        if self._plain is not None and self._core is not None and data.keys() <= self._plain:
            try:  # pydantic's strict mode checks such a model as its schema would, and builds it in one call
                return self._core.validate_python(data, strict=True)
            except self._error:
                pass  # the schema check decides, and says why
        errors = sorted(self._gate.iter_errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            message = "; ".join(_describe(e) for e in errors[:3]).replace("arguments", "answer")
            raise _Invalid(machine.Rejected(ErrorCode.INVALID_ARGUMENTS, message))
        value = data["result"] if self.wrapped else data
        if self._adapter is None:
            return value
        try:
            return self._validate(value)
        except self._error as exc:  # e.g. a validator of the model refused it
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "answer"
            raise _Invalid(machine.Rejected(ErrorCode.INVALID_ARGUMENTS, f"{where}: {first['msg']}")) from None

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` of a request in ``native`` mode (one dict, built once: treat it as read-only)."""
        if self._response_format is None:
            spec: dict[str, Any] = {"name": self.name, "schema": self.wire_schema}
            if self.strict:
                spec["strict"] = True
            self._response_format = {"type": "json_schema", "json_schema": spec}
        return self._response_format

    def tool_spec(self) -> dict[str, Any]:
        """The final-answer tool offered in ``tool`` mode."""
        function: dict[str, Any] = {
            "name": self.tool_name,
            "description": "Give your final answer. Call this once, when you are done, and only this.",
            "parameters": self.wire_schema,
        }
        if self.strict:
            function["strict"] = True
        return {"type": "function", "function": function}

    def instructions(self) -> str:
        """The system message of ``prompted`` mode (written once)."""
        if self._instructions is None:
            schema = json.dumps(self.schema, separators=(",", ":"))
            self._instructions = (
                f"Give your final answer as one JSON object matching this JSON Schema, and nothing else: {schema}"
            )
        return self._instructions


class _Invalid(Exception):
    def __init__(self, rejected: Rejected) -> None:
        self.rejected = rejected


_PLAIN_TYPES = (str, int, float, bool, type(None))


def _plain_fields(output_type: Any) -> frozenset[str] | None:
    """A pydantic model's field names if strict validation accepts only what its schema accepts; else None.

    So it is for a model whose fields are ``str``, ``int``, ``float`` or ``bool`` (or one of them or
    ``None``) without constraints, aliases, validators or a core schema of its own: strict mode takes
    no ``"248"``, ``true`` or ``3.0`` for an integer and no ``null`` where the type has none, as the
    schema check. Extra fields, which pydantic would ignore, are checked by name before.
    """
    import pydantic  # imported already: the output type is pydantic's

    if not (isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel)):
        return None
    decorators = output_type.__pydantic_decorators__
    if decorators.validators or decorators.field_validators or decorators.root_validators:
        return None
    if decorators.model_validators:
        return None
    own_schema = "__get_pydantic_core_schema__"
    if any(own_schema in vars(c) for c in output_type.__mro__ if c not in (pydantic.BaseModel, object)):
        return None
    for name, field in output_type.model_fields.items():
        if field.alias not in (None, name) or field.validation_alias is not None or field.metadata:
            return None
        kind = field.annotation
        options = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
        if not all(any(o is t for t in _PLAIN_TYPES) for o in options):
            return None
    return frozenset(output_type.model_fields)


def _adapter(output_type: Any) -> pydantic.TypeAdapter[Any]:
    import pydantic

    try:
        return pydantic.TypeAdapter(output_type)
    except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError, TypeError) as exc:
        raise ToolDefinitionError(_cannot(output_type, exc)) from None


def _cannot(output_type: Any, exc: Exception) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (
        f"output_type {output_type!r} cannot become a JSON Schema ({first}); use a pydantic model, a dataclass, "
        "a TypedDict, a scalar or container type, or a JSON Schema dict"
    )
